package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Project is a project of the store: its key, the folder its memories were last written
// from ("" when not known) and how many live memories it has.
type Project struct {
	Key      string `json:"key"`
	Folder   string `json:"folder,omitempty"`
	Memories int    `json:"memories"`
}

// folderRow is a row of the projects table.
type folderRow struct {
	key, folder string
	updated     int64
}

// Projects is the projects that name names (see Resolve), or every project with live
// memories when name is "", ordered by folder (else key). It is empty when name names none.
func (s *Store) Projects(ctx context.Context, name string) ([]Project, error) {
	out := []Project{}
	var keys []string
	if name != "" {
		var err error
		if keys, err = s.Resolve(ctx, name); err != nil || len(keys) == 0 {
			return out, err
		}
	}
	// The counts come from the memories_live index; the folders from the projects table.
	cond, args := inProjects("project", keys)
	rows, err := s.r.QueryContext(ctx, `SELECT project, count(*) FROM memories WHERE forgotten_at = 0`+cond+` GROUP BY project`, args...)
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	counts := map[string]int{}
	for rows.Next() {
		var key string
		var n int
		if err := rows.Scan(&key, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list projects: %w", err)
		}
		counts[key] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	if keys == nil {
		for k := range counts {
			keys = append(keys, k)
		}
	}
	folders, err := s.folders(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	for _, k := range keys {
		out = append(out, Project{Key: k, Folder: folders[k], Memories: counts[k]})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if fa, fb := cmp.Or(a.Folder, a.Key), cmp.Or(b.Folder, b.Key); fa != fb {
			return fa < fb
		}
		return a.Key < b.Key
	})
	return out, nil
}

// Resolve is the keys of the projects name names, for a person who knows a project by its
// folder rather than its key: name itself when it is a key the store knows (a live memory's,
// or one with a folder); with them, when name is an absolute path, the keys whose folder is
// name, or when none is, those of the deepest folder that holds name (a subfolder of a
// project names the project). Several keys can share a folder: a folder outside git is its
// own key until it becomes a git repository, when opencode gives it a project id. The keys
// come most recently recorded first, name's own key first of all. None when name names
// nothing; nil for name "".
func (s *Store) Resolve(ctx context.Context, name string) ([]string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return nil, nil
	}
	out := []string{}
	var known bool
	err := s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM memories WHERE project = ? AND forgotten_at = 0)
		OR EXISTS (SELECT 1 FROM projects WHERE key = ?)`, name, name).Scan(&known)
	if err != nil {
		return nil, fmt.Errorf("resolve project %s: %w", name, err)
	}
	if known {
		out = append(out, name)
	}
	if !filepath.IsAbs(name) {
		return out, nil
	}
	// One row per project: reading them all is cheaper than asking SQL for the longest
	// folder that is a prefix of name.
	rows, err := s.r.QueryContext(ctx, `SELECT key, folder, updated FROM projects`)
	if err != nil {
		return nil, fmt.Errorf("resolve project %s: %w", name, err)
	}
	defer rows.Close()
	var all []folderRow
	for rows.Next() {
		var r folderRow
		if err := rows.Scan(&r.key, &r.folder, &r.updated); err != nil {
			return nil, fmt.Errorf("resolve project %s: %w", name, err)
		}
		all = append(all, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("resolve project %s: %w", name, err)
	}
	for _, k := range byFolder(filepath.Clean(name), all, !known) {
		if k != name {
			out = append(out, k)
		}
	}
	return out, nil
}

// byFolder is the keys of rows whose folder is dir, most recently recorded first; when none
// is and enclosing is set, those of the deepest folder that holds dir. The root folder holds
// every path and is matched only as itself.
func byFolder(dir string, rows []folderRow, enclosing bool) []string {
	best := ""
	var hits []folderRow
	for _, r := range rows {
		f := r.folder
		switch {
		case f == dir:
		case enclosing && f != string(filepath.Separator) && strings.HasPrefix(dir, f+string(filepath.Separator)):
		default:
			continue
		}
		if len(f) > len(best) {
			best, hits = f, hits[:0]
		}
		if f == best {
			hits = append(hits, r)
		}
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].updated != hits[j].updated {
			return hits[i].updated > hits[j].updated
		}
		return hits[i].key < hits[j].key
	})
	out := make([]string, len(hits))
	for i, r := range hits {
		out[i] = r.key
	}
	return out
}

// folders is the folder of each of keys that has one. A key that is an absolute path (a
// session outside git) is its own folder.
func (s *Store) folders(ctx context.Context, keys []string) (map[string]string, error) {
	out := make(map[string]string, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	list, _ := json.Marshal(keys)
	rows, err := s.r.QueryContext(ctx, `SELECT key, folder FROM projects WHERE key IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var k, f string
		if err := rows.Scan(&k, &f); err != nil {
			return nil, err
		}
		out[k] = f
	}
	for _, k := range keys {
		if _, ok := out[k]; !ok && filepath.IsAbs(k) {
			out[k] = k
		}
	}
	return out, rows.Err()
}

// withFolders sets the Folder of each of ms from the projects table.
func (s *Store) withFolders(ctx context.Context, ms []Memory) error {
	seen := map[string]bool{}
	var keys []string
	for _, m := range ms {
		if !seen[m.Project] {
			seen[m.Project] = true
			keys = append(keys, m.Project)
		}
	}
	folders, err := s.folders(ctx, keys)
	if err != nil {
		return err
	}
	for i := range ms {
		ms[i].Folder = folders[ms[i].Project]
	}
	return nil
}

// recordFolder makes folder the folder of project, unless it is already. A folder that is
// not a clean absolute path is left out: it is a label for people, never worth failing a
// write for.
func recordFolder(ctx context.Context, tx cachedTx, project, folder string, now time.Time) error {
	folder, err := cleanDirectory(folder)
	if err != nil || folder == "" || project == "" {
		return nil
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO projects (key, folder, updated) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET folder = excluded.folder, updated = excluded.updated WHERE folder != excluded.folder`,
		project, folder, toMS(now))
	return err
}

// inProjects is the SQL condition, " AND col …" with its arguments, that col is one of
// projects; none for no projects, which is every project.
func inProjects(col string, projects []string) (string, []any) {
	args := make([]any, len(projects))
	for i, p := range projects {
		args[i] = p
	}
	switch len(projects) {
	case 0:
		return "", nil
	case 1: // = keeps the (project, …) indexes' order for ORDER BY … LIMIT
		return " AND " + col + " = ?", args
	}
	return " AND " + col + " IN (" + placeholders(len(projects)) + ")", args
}

// one is the projects filter of a single key: "" is every project.
func one(project string) []string {
	if project == "" {
		return nil
	}
	return []string{project}
}
