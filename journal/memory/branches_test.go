package memory

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// gitRun runs git in dir with a private configuration and fixed identity, failing the test
// on error, and returns its trimmed output.
func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("the git binary is absent: the branch check runs git merge-base")
	}
}

// newRepo is a repository on main with one commit, in a fresh temporary folder.
func newRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gitRun(t, dir, "init", "-q", "-b", "main")
	commit(t, dir, "README", "hello")
	return dir
}

// commit writes file and commits it, returning the new commit.
func commit(t *testing.T, dir, file, text string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, dir, "add", file)
	gitRun(t, dir, "commit", "-q", "-m", file)
	return gitRun(t, dir, "rev-parse", "HEAD")
}

// onBranch remembers content as written on the branch checked out in dir, as the daemon does:
// GitBranch gives the branch and its tip.
func onBranch(t *testing.T, s *Store, dir, content string) Memory {
	t.Helper()
	branch, tip, err := GitBranch(dir)
	if err != nil || branch == "" || tip == "" {
		t.Fatalf("GitBranch(%s) = %q %q %v", dir, branch, tip, err)
	}
	return remember(t, s, alice, content, RememberArgs{Branch: branch, Directory: dir, BranchTip: tip}).Memory
}

func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

func TestCheckBranches(t *testing.T) {
	needGit(t)
	ctx := context.Background()
	s := setup(t)
	dir := newRepo(t)

	gitRun(t, dir, "checkout", "-q", "-b", "feat-orphan")
	commit(t, dir, "orphan.txt", "never merged")
	orphan := onBranch(t, s, dir, "the orphan branch caches in /tmp/o")

	gitRun(t, dir, "checkout", "-q", "main")
	gitRun(t, dir, "checkout", "-q", "-b", "feat-merged")
	commit(t, dir, "merged.txt", "merged later")
	merged := onBranch(t, s, dir, "the merged branch adds a parser")

	gitRun(t, dir, "checkout", "-q", "main")
	gitRun(t, dir, "checkout", "-q", "-b", "feat-alive")
	commit(t, dir, "alive.txt", "still here")
	alive := onBranch(t, s, dir, "the live branch renames the config")

	gitRun(t, dir, "checkout", "-q", "main")
	commit(t, dir, "main.txt", "main moves on") // so the merge below is a real merge
	gitRun(t, dir, "merge", "-q", "--no-edit", "feat-merged")
	gitRun(t, dir, "branch", "-q", "-d", "feat-merged")
	gitRun(t, dir, "branch", "-q", "-D", "feat-orphan")

	// Not judged: a directory that is gone, one that is in no repository, a memory without a
	// tip in a directory that exists is judged (orphaned: nothing says it was merged).
	gone := remember(t, s, alice, "written from a removed worktree", RememberArgs{Branch: "feat-gone", Directory: filepath.Join(t.TempDir(), "removed"), BranchTip: "abcdef1"}).Memory
	plain := remember(t, s, alice, "written outside git", RememberArgs{Branch: "feat-plain", Directory: t.TempDir()}).Memory
	noTip := remember(t, s, alice, "written before tips were kept", RememberArgs{Branch: "feat-untracked", Directory: dir}).Memory
	mainMemory := remember(t, s, alice, "main is protected", RememberArgs{Branch: "main", Directory: dir}).Memory
	bad := remember(t, s, alice, "a branch name that climbs", RememberArgs{Branch: "../../../etc/passwd", Directory: dir}).Memory

	orphaned, mergedN, err := s.CheckBranches(ctx, dirExists, t0)
	if err != nil {
		t.Fatal(err)
	}
	if orphaned != 2 || mergedN != 1 {
		t.Errorf("orphaned %d merged %d, want 2 and 1", orphaned, mergedN)
	}
	h := hygiene(t, s, alice.Project, t0)
	wantOrphans := []string{orphan.ID, noTip.ID}
	slices.Sort(wantOrphans)
	if strings.Join(h.Orphaned, ",") != strings.Join(wantOrphans, ",") || strings.Join(h.Merged, ",") != merged.ID {
		t.Errorf("orphaned %v merged %v, want %v and %s", h.Orphaned, h.Merged, wantOrphans, merged.ID)
	}
	for _, id := range []string{alive.ID, gone.ID, plain.ID, mainMemory.ID, bad.ID} {
		if slices.Contains(h.Orphaned, id) || slices.Contains(h.Merged, id) {
			t.Errorf("%s was judged", id)
		}
	}

	// Packed refs: the same verdicts.
	gitRun(t, dir, "pack-refs", "--all")
	if _, err := os.Stat(filepath.Join(dir, ".git", "refs", "heads", "feat-alive")); err == nil {
		t.Fatal("pack-refs left the loose ref")
	}
	if o, m, err := s.CheckBranches(ctx, dirExists, t0); err != nil || o != 2 || m != 1 {
		t.Errorf("packed: orphaned %d merged %d %v", o, m, err)
	}
	if h2 := hygiene(t, s, alice.Project, t0); strings.Join(h2.Orphaned, ",") != strings.Join(h.Orphaned, ",") {
		t.Errorf("packed: orphaned %v", h2.Orphaned)
	}

	// The branch comes back: no longer reported. An update stops the report at once.
	gitRun(t, dir, "branch", "feat-orphan", orphan.BranchTip)
	if o, _, err := s.CheckBranches(ctx, dirExists, t0); err != nil || o != 1 {
		t.Errorf("branch back: orphaned %d %v", o, err)
	}
	if _, err := s.Update(ctx, alice, noTip.ID, UpdateArgs{Kind: ptr("decision")}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if h := hygiene(t, s, alice.Project, t0); len(h.Orphaned) != 0 {
		t.Errorf("after the branch came back and an update: orphaned %v", h.Orphaned)
	}
	// A forgotten memory is not reported.
	if _, err := s.Forget(ctx, alice, merged.ID, "", t0); err != nil {
		t.Fatal(err)
	}
	if h := hygiene(t, s, alice.Project, t0); len(h.Merged) != 0 {
		t.Errorf("forgotten memory still merged: %v", h.Merged)
	}
}

// TestCheckBranchesRemote: a branch that exists only on a remote (a fresh clone packs its
// remote refs) is neither orphaned nor merged, and origin/HEAD names the default branch.
func TestCheckBranchesRemote(t *testing.T) {
	needGit(t)
	ctx := context.Background()
	s := setup(t)
	upstream := newRepo(t)
	gitRun(t, upstream, "checkout", "-q", "-b", "shared")
	tip := commit(t, upstream, "shared.txt", "on the remote")
	gitRun(t, upstream, "checkout", "-q", "main")
	clone := filepath.Join(t.TempDir(), "clone")
	gitRun(t, filepath.Dir(clone), "clone", "-q", upstream, clone)
	m := remember(t, s, alice, "the shared branch is reviewed by two", RememberArgs{Branch: "shared", Directory: clone, BranchTip: tip}).Memory
	if o, mg, err := s.CheckBranches(ctx, dirExists, t0); err != nil || o != 0 || mg != 0 {
		t.Errorf("remote branch: orphaned %d merged %d %v", o, mg, err)
	}
	// Merged upstream and deleted there, fetched with prune: merged into origin/main.
	gitRun(t, upstream, "merge", "-q", "--no-edit", "shared")
	gitRun(t, upstream, "branch", "-q", "-d", "shared")
	gitRun(t, clone, "fetch", "-q", "--prune")
	if o, mg, err := s.CheckBranches(ctx, dirExists, t0); err != nil || o != 0 || mg != 1 {
		t.Errorf("merged upstream: orphaned %d merged %d %v", o, mg, err)
	}
	if h := hygiene(t, s, "", t0); len(h.Merged) != 1 || h.Merged[0] != m.ID {
		t.Errorf("merged %v", h.Merged)
	}
}

func TestGitBranch(t *testing.T) {
	needGit(t)
	dir := newRepo(t)
	head := gitRun(t, dir, "rev-parse", "HEAD")
	sub := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	check := func(name, dir, wantBranch, wantTip string) {
		t.Helper()
		branch, tip, err := GitBranch(dir)
		if err != nil || branch != wantBranch || tip != wantTip {
			t.Errorf("%s: GitBranch = %q %q %v, want %q %q", name, branch, tip, err, wantBranch, wantTip)
		}
	}
	check("root", dir, "main", head)
	check("subfolder", sub, "main", head)

	// A linked worktree: .git is a file, HEAD in .git/worktrees/<name>, refs in the common dir.
	wt := filepath.Join(t.TempDir(), "wt")
	gitRun(t, dir, "worktree", "add", "-q", "-b", "wt-branch", wt)
	wtTip := commit(t, wt, "wt.txt", "in the worktree")
	if fi, err := os.Stat(filepath.Join(wt, ".git")); err != nil || fi.IsDir() {
		t.Fatalf("worktree .git: %v %v", fi, err)
	}
	check("worktree", wt, "wt-branch", wtTip)
	check("main after the worktree", dir, "main", head)

	// Packed refs.
	gitRun(t, dir, "pack-refs", "--all")
	check("packed", dir, "main", head)
	check("packed worktree", wt, "wt-branch", wtTip)

	// Detached HEAD: no branch, the commit.
	gitRun(t, dir, "checkout", "-q", "--detach")
	check("detached", dir, "", head)

	// A branch without commits yet.
	fresh := filepath.Join(t.TempDir(), "fresh")
	gitRun(t, filepath.Dir(fresh), "init", "-q", "-b", "trunk", fresh)
	check("unborn", fresh, "trunk", "")

	// No repository.
	if _, _, err := GitBranch(t.TempDir()); !errors.Is(err, ErrNotRepository) {
		t.Errorf("outside git: %v", err)
	}
}

func TestCheckableBranch(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"main", true},
		{"feature/x-1", true},
		{"release/2025.03", true},
		{"", false},
		{"HEAD", false},
		{"../etc/passwd", false},
		{"a/../../b", false},
		{"/abs", false},
		{"-rf", false},
		{"x.lock", false},
		{"a//b", false},
		{"a b", false},
		{"a~1", false},
		{"a:b", false},
		{".hidden", false},
		{"a/.b", false},
		{"a@{1}", false},
		{"trail/", false},
	}
	for _, tt := range tests {
		if got := checkableBranch(tt.name); got != tt.ok {
			t.Errorf("checkableBranch(%q) = %v, want %v", tt.name, got, tt.ok)
		}
	}
}

// TestProjectID: a repository's project id is its root commit, as opencode computes it,
// from the checkout, a subfolder and a linked worktree alike; with two histories the first
// root in sorted order; the id opencode cached in the repository wins; outside git, and in a
// repository without commits, there is none.
func TestProjectID(t *testing.T) {
	needGit(t)
	ctx := context.Background()
	dir := newRepo(t)
	root := gitRun(t, dir, "rev-list", "--max-parents=0", "HEAD")
	commit(t, dir, "more", "second")
	sub := filepath.Join(dir, "src", "pkg")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	wt := filepath.Join(t.TempDir(), "wt")
	gitRun(t, dir, "worktree", "add", "-q", "-b", "feature", wt)
	for d, want := range map[string]string{dir: dir, sub: dir, wt: wt} {
		if id, top, err := ProjectID(ctx, d); err != nil || id != root || top != want {
			t.Errorf("ProjectID(%s) = %q, %q, %v; want the root commit %s, top %s", d, id, top, err, root, want)
		}
	}

	// A second history (an orphan branch): opencode takes the first root in sorted order.
	gitRun(t, dir, "checkout", "-q", "--orphan", "other")
	other := commit(t, dir, "orphan", "x")
	want := min(root, other)
	if id, _, err := ProjectID(ctx, dir); err != nil || id != want {
		t.Errorf("with roots %s and %s ProjectID = %q, %v; want %s", root, other, id, err, want)
	}

	// The id opencode cached stays the repository's id.
	cached := strings.Repeat("ab", 20)
	if err := os.WriteFile(filepath.Join(dir, ".git", "opencode"), []byte(cached+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{sub, wt} {
		if id, _, err := ProjectID(ctx, d); err != nil || id != cached {
			t.Errorf("ProjectID(%s) = %q, %v; want the cached %s", d, id, err, cached)
		}
	}

	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	gitRun(t, empty, "init", "-q")
	for d, want := range map[string]string{t.TempDir(): "", empty: empty} {
		if id, top, err := ProjectID(ctx, d); err != nil || id != "" || top != want {
			t.Errorf("ProjectID(%s) = %q, %q, %v; want no id, top %q", d, id, top, err, want)
		}
	}
}
