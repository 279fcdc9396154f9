package memory

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ErrNotRepository is a directory that is in no git repository: neither it nor an ancestor
// holds a .git.
var ErrNotRepository = errors.New("not a git repository")

// GitBranch is the branch checked out in the git repository holding dir (dir or an ancestor
// has the .git) and its tip commit. It reads the files git keeps and runs no git, so a
// session start pays no subprocess: .git is the repository's folder, or, in a linked worktree
// or a submodule, a file "gitdir: <path>" naming the worktree's own folder, whose commondir
// file names the folder holding the refs. A detached HEAD is branch "" with its commit; a
// branch without commits yet is the branch with tip "". A dir in no repository is
// ErrNotRepository.
func GitBranch(dir string) (branch, tip string, err error) {
	repo, err := findRepo(dir)
	if err != nil {
		return "", "", err
	}
	head, err := os.ReadFile(filepath.Join(repo.gitDir, "HEAD"))
	if err != nil {
		return "", "", fmt.Errorf("read git HEAD of %s: %w", dir, err)
	}
	line := strings.TrimSpace(string(head))
	ref, symbolic := strings.CutPrefix(line, "ref:")
	if !symbolic {
		if !tipPattern.MatchString(line) {
			return "", "", fmt.Errorf("git HEAD of %s holds %q, neither a ref nor a commit; check the repository with git status", dir, line)
		}
		return "", line, nil
	}
	ref = strings.TrimSpace(ref)
	tip, _, err = repo.resolve(ref)
	if err != nil {
		return "", "", fmt.Errorf("read git HEAD of %s: %w", dir, err)
	}
	branch, ok := strings.CutPrefix(ref, "refs/heads/")
	if !ok {
		branch = "" // HEAD names something else than a branch: as good as detached
	}
	return branch, tip, nil
}

// ProjectID is the project id opencode gives dir (protocol §10: one repository has one set
// of memories under every host), and the top folder of dir's checkout: in a git repository,
// the id opencode cached in the repository's folder (the file "opencode" beside HEAD), else
// the first, in sorted order, of its root commits (git rev-list --max-parents=0 --all). The
// id is "" outside git or in a repository without commits, where opencode's id is "global"
// and a session's project key is its directory (runtime.ProjectKey); top is "" outside git.
// ctx bounds the git it runs.
func ProjectID(ctx context.Context, dir string) (id, top string, err error) {
	repo, err := findRepo(dir)
	if errors.Is(err, ErrNotRepository) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	for _, d := range []string{repo.commonDir, repo.gitDir} {
		if data, err := os.ReadFile(filepath.Join(d, "opencode")); err == nil {
			if id := strings.TrimSpace(string(data)); tipPattern.MatchString(id) {
				return id, repo.top, nil
			}
		}
	}
	cmd := exec.CommandContext(ctx, "git", "rev-list", "--max-parents=0", "--all")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_DIR="+repo.gitDir) // the repository found, whatever GIT_DIR the caller has
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return "", repo.top, fmt.Errorf("read the root commits of the git repository of %s (git rev-list): %w", dir, err)
	}
	roots := strings.Fields(string(out))
	slices.Sort(roots)
	if len(roots) == 0 {
		return "", repo.top, nil
	}
	return roots[0], repo.top, nil
}

// ProjectKeyOf is the project key of the folder dir as opencode keys it, and the folder
// that names that project: the project id of dir's git checkout and its top folder, else
// (outside git, or a repository without commits) dir itself for both, as runtime.ProjectKey
// does. thatch mcp and thatch memories key a folder with it, so both name the project a
// host's session there has. err says why git could not be read; key is then dir, as
// opencode falls back to the directory.
func ProjectKeyOf(ctx context.Context, dir string) (key, folder string, err error) {
	dir = filepath.Clean(dir)
	id, top, err := ProjectID(ctx, dir)
	if id != "" {
		return id, top, nil
	}
	return dir, dir, err
}

// gitRepo is where git keeps a worktree's state: gitDir holds its HEAD, commonDir (the same
// folder but in a linked worktree) the refs and packed-refs shared by all worktrees.
type gitRepo struct {
	gitDir, commonDir string
	top               string            // the worktree's top folder, which holds the .git
	packed            map[string]string // packed-refs, read once: ref name → commit
}

// findRepo finds the repository of dir, looking in dir and its ancestors as git does.
func findRepo(dir string) (*gitRepo, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for d := dir; ; {
		dotGit := filepath.Join(d, ".git")
		fi, err := os.Stat(dotGit)
		switch {
		case err == nil && fi.IsDir():
			return openRepo(dotGit, d)
		case err == nil:
			// A linked worktree or a submodule: "gitdir: <path>", relative to d when not absolute.
			data, err := os.ReadFile(dotGit)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", dotGit, err)
			}
			target, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "gitdir:")
			if !ok {
				return nil, fmt.Errorf("%s is not \"gitdir: <path>\"; check the worktree with git worktree list", dotGit)
			}
			return openRepo(absUnder(d, strings.TrimSpace(target)), d)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("look for a git repository at %s: %w", d, err)
		}
		parent := filepath.Dir(d)
		if parent == d {
			return nil, fmt.Errorf("%s: %w", dir, ErrNotRepository)
		}
		d = parent
	}
}

// openRepo opens the git folder gitDir of the checkout at top, finding its common folder.
func openRepo(gitDir, top string) (*gitRepo, error) {
	if _, err := os.Stat(filepath.Join(gitDir, "HEAD")); err != nil {
		return nil, fmt.Errorf("%s has no HEAD (%v): %w", gitDir, err, ErrNotRepository)
	}
	repo := &gitRepo{gitDir: gitDir, commonDir: gitDir, top: top}
	data, err := os.ReadFile(filepath.Join(gitDir, "commondir"))
	switch {
	case err == nil:
		repo.commonDir = absUnder(gitDir, strings.TrimSpace(string(data)))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read %s: %w", filepath.Join(gitDir, "commondir"), err)
	}
	return repo, nil
}

// absUnder is p, relative to base unless absolute, cleaned.
func absUnder(base, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(base, p)
}

// refFile is the file of the loose ref name: HEAD and the per-worktree refs in the worktree's
// own folder, every other ref in the common one.
func (r *gitRepo) refFile(name string) string {
	if name == "HEAD" || strings.HasPrefix(name, "refs/worktree/") || strings.HasPrefix(name, "refs/bisect/") || strings.HasPrefix(name, "refs/rewritten/") {
		return filepath.Join(r.gitDir, filepath.FromSlash(name))
	}
	return filepath.Join(r.commonDir, filepath.FromSlash(name))
}

// resolve is the commit the ref name points at, following symbolic refs, from its loose file
// or packed-refs; ok is false when the ref does not exist (an unborn branch, a deleted one).
func (r *gitRepo) resolve(name string) (commit string, ok bool, err error) {
	for range 5 { // git follows at most 5 levels of symbolic refs too
		data, err := os.ReadFile(r.refFile(name))
		switch {
		case err == nil:
			line := strings.TrimSpace(string(data))
			if target, symbolic := strings.CutPrefix(line, "ref:"); symbolic {
				name = strings.TrimSpace(target)
				continue
			}
			return line, true, nil
		case errors.Is(err, fs.ErrNotExist) || isDirError(err):
			// refs/heads/feature is a folder when feature/x exists: not a ref either.
		default:
			return "", false, err
		}
		packed, err := r.packedRefs()
		if err != nil {
			return "", false, err
		}
		commit, ok := packed[name]
		return commit, ok, nil
	}
	return "", false, fmt.Errorf("ref %s: symbolic refs nest too deep", name)
}

// isDirError tells whether err is reading a folder as a file.
func isDirError(err error) bool {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return false
	}
	fi, statErr := os.Stat(pe.Path)
	return statErr == nil && fi.IsDir()
}

// packedRefs is the packed-refs file of the common folder ("<commit> <ref>" lines; "^" lines
// peel the tag above them), read once.
func (r *gitRepo) packedRefs() (map[string]string, error) {
	if r.packed != nil {
		return r.packed, nil
	}
	r.packed = map[string]string{}
	f, err := os.Open(filepath.Join(r.commonDir, "packed-refs"))
	if errors.Is(err, fs.ErrNotExist) {
		return r.packed, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || line[0] == '^' {
			continue
		}
		if commit, name, ok := strings.Cut(line, " "); ok {
			r.packed[name] = commit
		}
	}
	return r.packed, sc.Err()
}

// remotes is the names of the repository's remotes: the [remote "…"] sections of its config
// and the folders of refs/remotes.
func (r *gitRepo) remotes() []string {
	seen := map[string]bool{}
	var out []string
	add := func(name string) {
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	if data, err := os.ReadFile(filepath.Join(r.commonDir, "config")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if rest, ok := strings.CutPrefix(line, "[remote \""); ok {
				if name, _, ok := strings.Cut(rest, "\"]"); ok {
					add(name)
				}
			}
		}
	}
	if entries, err := os.ReadDir(filepath.Join(r.commonDir, "refs", "remotes")); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				add(e.Name())
			}
		}
	}
	return out
}

// branchExists tells whether branch exists locally or on any remote, loose or packed.
func (r *gitRepo) branchExists(branch string) (bool, error) {
	names := []string{"refs/heads/" + branch}
	for _, remote := range r.remotes() {
		names = append(names, "refs/remotes/"+remote+"/"+branch)
	}
	for _, name := range names {
		if _, ok, err := r.resolve(name); ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// defaultBranch is the ref of the repository's default branch: origin/HEAD's target, else
// main, else master (local first, then origin's); "" when there is none.
func (r *gitRepo) defaultBranch() (string, error) {
	data, err := os.ReadFile(r.refFile("refs/remotes/origin/HEAD"))
	if err == nil {
		if target, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "ref:"); ok {
			target = strings.TrimSpace(target)
			if _, ok, err := r.resolve(target); ok || err != nil {
				return target, err
			}
		}
	}
	for _, name := range []string{"refs/heads/main", "refs/heads/master", "refs/remotes/origin/main", "refs/remotes/origin/master"} {
		if _, ok, err := r.resolve(name); ok || err != nil {
			return name, err
		}
	}
	return "", nil
}

// checkableBranch tells whether name is a branch name that is safe to look up as a path under
// refs/: what git check-ref-format accepts, roughly, and nothing that climbs out of refs/.
func checkableBranch(name string) bool {
	if name == "" || name == "HEAD" || name == "@" || strings.HasPrefix(name, "-") || strings.HasPrefix(name, "/") ||
		strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") || strings.HasSuffix(name, ".lock") ||
		strings.Contains(name, "..") || strings.Contains(name, "//") || strings.Contains(name, "@{") {
		return false
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") {
			return false
		}
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			return false
		}
	}
	return true
}

// isAncestor tells whether commit tip is an ancestor of ref (or is it), running git
// merge-base --is-ancestor in dir. This is the one place the store runs git: walking the
// history means reading packed objects, which only git does well, and the branch check runs
// on the sweep's timer, off every request's path. A tip git does not know (collected after
// its branch was deleted unmerged) is no ancestor.
func isAncestor(ctx context.Context, dir, tip, ref string) (bool, error) {
	cmd := exec.CommandContext(ctx, "git", "merge-base", "--is-ancestor", tip, ref)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "GIT_OPTIONAL_LOCKS=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return false, nil
	case errors.As(err, &exit) && strings.Contains(strings.ToLower(stderr.String()), "not a valid commit"):
		return false, nil
	case errors.As(err, &exit):
		return false, fmt.Errorf("git merge-base --is-ancestor %s %s in %s: %s", tip, ref, dir, strings.TrimSpace(stderr.String()))
	default:
		return false, fmt.Errorf("run git in %s: %w; install git, or branch memories are not judged", dir, err)
	}
}

// branchMemory is a live memory written on a branch, as the branch check sees it.
type branchMemory struct {
	id, directory, branch, tip, verdict string
	updated                             int64
}

// CheckBranches judges the live memories written on a branch from a directory that exists
// (exists(dir), the sweep's test) in a git repository: when the branch exists neither locally
// nor on any remote, the memory is merged if its recorded tip is in the default branch (a
// candidate to make project-wide) and orphaned otherwise (no tip recorded: orphaned); when the
// branch exists, it is neither. A memory whose directory is gone or in no repository is not
// judged and keeps its last verdict. The verdicts are recorded for Hygiene and Signals; a
// memory updated meanwhile keeps none (the next check judges it). orphaned and merged count
// the memories judged so in this check. Directories that could not be judged (git failing)
// are reported in err after the others were judged.
func (s *Store) CheckBranches(ctx context.Context, exists func(dir string) bool, now time.Time) (orphaned, merged int, err error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, directory, branch, branch_tip, branch_verdict, updated_at FROM memories
		WHERE forgotten_at = 0 AND branch != '' AND directory != '' ORDER BY directory, branch`)
	if err != nil {
		return 0, 0, fmt.Errorf("check branches: %w", err)
	}
	var ms []branchMemory
	for rows.Next() {
		var m branchMemory
		if err := rows.Scan(&m.id, &m.directory, &m.branch, &m.tip, &m.verdict, &m.updated); err != nil {
			rows.Close()
			return 0, 0, fmt.Errorf("check branches: %w", err)
		}
		ms = append(ms, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("check branches: %w", err)
	}

	// Judge outside any transaction: reading refs and running git take a while.
	type repoState struct {
		repo       *gitRepo
		err        error
		defaultRef string
		exists     map[string]bool // branch → exists
		ancestor   map[string]bool // tip → in the default branch
	}
	repos := map[string]*repoState{} // by directory
	var failed []error
	var changes []branchMemory
	for _, m := range ms {
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("check branches: %w", ctx.Err())
		}
		if !checkableBranch(m.branch) {
			continue
		}
		st, ok := repos[m.directory]
		if !ok {
			st = &repoState{exists: map[string]bool{}, ancestor: map[string]bool{}}
			repos[m.directory] = st
			if !exists(m.directory) {
				st.err = fs.ErrNotExist
			} else if st.repo, st.err = findRepo(m.directory); st.err == nil {
				st.defaultRef, st.err = st.repo.defaultBranch()
			}
			if st.err != nil && !errors.Is(st.err, fs.ErrNotExist) && !errors.Is(st.err, ErrNotRepository) {
				failed = append(failed, st.err)
			}
		}
		if st.err != nil {
			continue
		}
		there, ok := st.exists[m.branch]
		if !ok {
			if there, err = st.repo.branchExists(m.branch); err != nil {
				failed = append(failed, fmt.Errorf("branch %s in %s: %w", m.branch, m.directory, err))
				st.err = err
				continue
			}
			st.exists[m.branch] = there
		}
		verdict := ""
		if !there {
			verdict = SignalOrphaned
			if m.tip != "" && st.defaultRef != "" {
				in, ok := st.ancestor[m.tip]
				if !ok {
					if in, err = isAncestor(ctx, m.directory, m.tip, st.defaultRef); err != nil {
						failed = append(failed, err)
						continue
					}
					st.ancestor[m.tip] = in
				}
				if in {
					verdict = SignalMerged
				}
			}
		}
		switch verdict {
		case SignalOrphaned:
			orphaned++
		case SignalMerged:
			merged++
		}
		if verdict != m.verdict {
			m.verdict = verdict
			changes = append(changes, m)
		}
	}
	if len(changes) > 0 {
		err := s.withBulkTx(ctx, func(tx cachedTx) error {
			for _, m := range changes {
				// Only as judged: a memory updated or forgotten meanwhile is judged next time.
				_, err := tx.ExecContext(ctx, `UPDATE memories SET branch_verdict = ?, branch_checked_at = ?
					WHERE id = ? AND updated_at = ? AND forgotten_at = 0`, m.verdict, toMS(now), m.id, m.updated)
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, 0, fmt.Errorf("check branches: record verdicts: %w", err)
		}
	}
	if len(failed) > 0 {
		return orphaned, merged, fmt.Errorf("check branches: %d not judged, the first: %w", len(failed), failed[0])
	}
	return orphaned, merged, nil
}
