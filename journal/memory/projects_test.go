package memory

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestByFolder(t *testing.T) {
	rows := []folderRow{
		{key: "hash-app", folder: "/src/app", updated: 2},
		{key: "/src/app", folder: "/src/app", updated: 1}, // the same folder before git init
		{key: "hash-lib", folder: "/src/app/lib", updated: 1},
		{key: "hash-apple", folder: "/src/apple", updated: 1},
		{key: "hash-root", folder: "/", updated: 1},
	}
	for _, tc := range []struct {
		dir       string
		enclosing bool
		want      []string
	}{
		{"/src/app", true, []string{"hash-app", "/src/app"}}, // most recently recorded first
		{"/src/app/lib", true, []string{"hash-lib"}},         // the exact folder beats the enclosing one
		{"/src/app/lib/x/y", true, []string{"hash-lib"}},     // the deepest enclosing folder
		{"/src/app/cmd", true, []string{"hash-app", "/src/app"}},
		{"/src/app/cmd", false, []string{}},
		{"/src/ap", true, []string{}},         // a prefix of a folder's name is not in it
		{"/src/applesauce", true, []string{}}, // nor is a name that starts like a folder
		{"/home/u", true, []string{}},         // the root folder holds everything: only itself
		{"/", true, []string{"hash-root"}},
		{"/src", true, []string{}}, // above a project is no project
	} {
		if got := byFolder(tc.dir, rows, tc.enclosing); !slices.Equal(got, tc.want) {
			t.Errorf("byFolder(%q, enclosing %v) = %q, want %q", tc.dir, tc.enclosing, got, tc.want)
		}
	}
}

// TestProjectFolders: a write by a session whose directory is known records the project's
// folder; a person names the project by its key, its folder or a folder inside it, and a
// folder shared by two keys lists both; a name that matches nothing resolves to nothing.
func TestProjectFolders(t *testing.T) {
	ctx := context.Background()
	s := setup(t)
	hash := Caller{Project: "b30d1efdfcef71db296cfacb7db191c07152b3aa", SessionID: "ses_h", Directory: "/tmp/trialproj/"}
	rememberAt := func(c Caller, content string, at time.Time) Remembered {
		t.Helper()
		r, err := s.Remember(ctx, c, RememberArgs{Content: content}, at)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := rememberAt(hash, "The trial project builds with make trial.", t0)
	if a.Memory.Folder != "" {
		t.Errorf("a remember's answer carries a folder: %+v", a.Memory)
	}
	// The same folder, before it was a git repository: its own key.
	plain := Caller{Project: "/tmp/trialproj", SessionID: "ses_p", Directory: "/tmp/trialproj"}
	b := rememberAt(plain, "The trial data lives in fixtures/trial.json.", t0.Add(time.Second))
	other := Caller{Project: "github.com/acme/api", SessionID: "ses_o"} // no directory known
	c := rememberAt(other, "The api listens on port 8080.", t0.Add(2*time.Second))

	if m := mustGet(t, s, a.Memory.ID); m.Folder != "/tmp/trialproj" {
		t.Errorf("Get's folder %q, want /tmp/trialproj", m.Folder)
	}
	if m := mustGet(t, s, c.Memory.ID); m.Folder != "" {
		t.Errorf("a project with no known folder got %q", m.Folder)
	}
	projects, err := s.Projects(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(projects); got != "[{/tmp/trialproj /tmp/trialproj 1} {b30d1efdfcef71db296cfacb7db191c07152b3aa /tmp/trialproj 1} {github.com/acme/api  1}]" {
		t.Errorf("Projects = %s", got)
	}

	for _, tc := range []struct {
		name string
		want []string
	}{
		{"", nil},
		{hash.Project, []string{hash.Project}},
		{"/tmp/trialproj", []string{"/tmp/trialproj", hash.Project}}, // its own key first
		{"/tmp/trialproj/", []string{"/tmp/trialproj", hash.Project}},
		{"/tmp/trialproj/src/deep", []string{"/tmp/trialproj", hash.Project}}, // a folder inside
		{"/tmp", []string{}},
		{"/tmp/other", []string{}},
		{"trialproj", []string{}},
		{other.Project, []string{other.Project}},
	} {
		got, err := s.Resolve(ctx, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("Resolve(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if ps, _ := s.Projects(ctx, "/tmp/trialproj/src"); len(ps) != 2 || ps[0].Folder != "/tmp/trialproj" || ps[1].Folder != "/tmp/trialproj" {
		t.Errorf("Projects of a subfolder = %+v", ps)
	}
	if ps, err := s.Projects(ctx, "/nowhere"); err != nil || ps == nil || len(ps) != 0 {
		t.Errorf("Projects of an unknown folder = %v %v, want none", ps, err)
	}

	// Both keys of the folder, in one listing, search, export and hygiene.
	keys, _ := s.Resolve(ctx, "/tmp/trialproj")
	list, err := s.List(ctx, ListQuery{Projects: keys})
	if err != nil || len(list) != 2 || list[0].ID != b.Memory.ID || list[1].ID != a.Memory.ID || list[0].Folder != "/tmp/trialproj" {
		t.Errorf("List of both keys = %+v %v", list, err)
	}
	if page, _ := s.List(ctx, ListQuery{Projects: keys, Limit: 1, After: b.Memory.ID}); len(page) != 1 || page[0].ID != a.Memory.ID {
		t.Errorf("second page of both keys = %+v", page)
	}
	list, err = s.List(ctx, ListQuery{Projects: keys, Query: "trial port"})
	if err != nil || len(list) != 2 {
		t.Errorf("search of both keys = %+v %v", list, err)
	}
	if list, _ := s.List(ctx, ListQuery{Projects: keys, Query: "port"}); len(list) != 0 {
		t.Errorf("search of both keys found another project's memory: %+v", list)
	}
	if exp, err := s.Export(ctx, keys, "", 0); err != nil || len(exp) != 2 || exp[0].ID != a.Memory.ID || exp[1].Folder != "/tmp/trialproj" {
		t.Errorf("Export of both keys = %+v %v", exp, err)
	}
	if h, err := s.Hygiene(ctx, keys, t0.Add(365*24*time.Hour)); err != nil || len(h.Stale) != 2 {
		t.Errorf("Hygiene of both keys a year on = %+v %v, want both stale", h, err)
	}
	if sigs, err := s.Signals(ctx, keys, 10, t0.Add(365*24*time.Hour)); err != nil || len(sigs) != 2 {
		t.Errorf("Signals of both keys a year on = %+v %v, want both stale", sigs, err)
	}

	// The latest folder wins; a write with no directory changes nothing; a repeated callID
	// writes nothing.
	moved := hash
	moved.Directory = "/home/u/trialproj"
	if _, err := s.Update(ctx, moved, a.Memory.ID, UpdateArgs{Content: ptr("The trial project builds with make trial, then make check.")}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	hash.Directory = ""
	rememberAt(hash, "Trial runs need no network.", t0.Add(2*time.Hour))
	if m := mustGet(t, s, a.Memory.ID); m.Folder != "/home/u/trialproj" {
		t.Errorf("after a write from another folder: %q", m.Folder)
	}
	if got, _ := s.Resolve(ctx, "/tmp/trialproj"); !slices.Equal(got, []string{"/tmp/trialproj"}) {
		t.Errorf("the old folder resolves to %q, want its own key only", got)
	}

	// An import labels a project the store has no folder for, and keeps a folder it has.
	dst := setup(t)
	exported, _ := s.Export(ctx, nil, "", 0)
	for i := range exported {
		if exported[i].ID == c.Memory.ID {
			exported[i].Folder = "/elsewhere/api" // the api project's, as another store knew it
		}
	}
	if n, err := dst.Import(ctx, exported, t0); err != nil || n != len(exported) {
		t.Fatal(n, err)
	}
	if got, _ := dst.Resolve(ctx, "/home/u/trialproj"); !slices.Equal(got, []string{hash.Project}) {
		t.Errorf("imported folder resolves to %q", got)
	}
	if m := mustGet(t, dst, c.Memory.ID); m.Folder != "/elsewhere/api" {
		t.Errorf("imported project's folder %q", m.Folder)
	}
	again := exported
	again[0].Folder = "/not/this"
	if _, err := dst.Import(ctx, again, t0); err != nil {
		t.Fatal(err)
	}
	if m := mustGet(t, dst, a.Memory.ID); m.Folder != "/home/u/trialproj" {
		t.Errorf("an import replaced a known folder: %q", m.Folder)
	}
}

// TestMigrateProjects opens a store of schema version 2: each project's folder is the
// directory of its latest memory that has one, and a key that is a folder is its own.
func TestMigrateProjects(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memories.db")
	db := storeAtVersion(t, path, 2)
	for i, m := range []struct{ project, directory string }{
		{"hash-a", "/src/a-old"}, {"hash-a", "/src/a"}, {"hash-a", ""}, {"hash-b", ""}, {"/src/c", ""},
	} {
		content := fmt.Sprintf("memory %d", i)
		if _, err := db.Exec(`INSERT INTO memories (id, project, scope, kind, content, norm, created_at, updated_at, directory)
			VALUES (?, ?, ?, 'fact', ?, ?, ?, ?, ?)`, fmt.Sprintf("mem_000000000000000000%02d", i), m.project, scope(m.project),
			content, normalize(content), t0.UnixMilli()+int64(i), t0.UnixMilli(), m.directory); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s := openAt(t, path, Options{})
	ps, err := s.Projects(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ps); got != "[{hash-a /src/a 3} {/src/c /src/c 1} {hash-b  1}]" {
		t.Errorf("after migration: %s", got)
	}
	if got, _ := s.Resolve(context.Background(), "/src/c/sub"); !slices.Equal(got, []string{"/src/c"}) {
		t.Errorf("a folder key's subfolder resolves to %q", got)
	}
}
