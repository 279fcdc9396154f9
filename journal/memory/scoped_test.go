package memory

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/thatch-dev/thatch/journal/migrate"
)

// storeAtVersion creates at path a store of schema version v, as a thatch of that version
// left it (its first v migrations), and returns a connection to it for the test to fill
// before Open migrates it.
func storeAtVersion(t *testing.T, path string, v int) *sql.DB {
	t.Helper()
	old := fstest.MapFS{}
	names, _ := fs.Glob(migrations, "migrations/*.sql")
	for _, n := range names {
		if n < fmt.Sprintf("migrations/%03d", v+1) {
			data, _ := fs.ReadFile(migrations, n)
			old[n] = &fstest.MapFile{Data: data}
		}
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1) // one connection, as a writer: no lock to wait for between the test's statements
	if err := migrate.Apply(db, old, "migrations/*.sql", "memories"); err != nil {
		t.Fatal(err)
	}
	var got int
	if err := db.QueryRow(`SELECT max(version) FROM schema_migrations`).Scan(&got); err != nil || got != v {
		t.Fatalf("the old store is at version %d (%v), want %d", got, err, v)
	}
	return db
}

// TestScopedIndexMigration: a store of version 5 (one index over content, tags and the
// scope token) opens at version 6 with every live memory in the new index, found by its
// project's search and by a search of all projects, and a forgotten one found by neither.
func TestScopedIndexMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "memories.db")
	raw := storeAtVersion(t, path, 5)
	bob := Caller{Project: "/home/bob/shop"}
	rows := []struct {
		c         Caller
		id, text  string
		forgotten bool
	}{
		{alice, "mem_000000000001aaaaaaaa", "The api-gw-02 host fronts src/config/loader.go", false},
		{bob, "mem_000000000002aaaaaaaa", "The api-gw-02 gateway of the shop", false},
		{alice, "mem_000000000003aaaaaaaa", "The api-gw-02 host was retired", true},
	}
	tx, err := newDB(raw).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		m := Memory{ID: r.id, Project: r.c.Project, Kind: "fact", Content: r.text, Tags: []string{"infra"}, CreatedAt: t0, UpdatedAt: t0}
		if err := insertAt5(ctx, tx, m); err != nil {
			t.Fatal(err)
		}
		if r.forgotten {
			if _, err := tx.ExecContext(ctx, `UPDATE memories SET forgotten_at = 1 WHERE id = ?`, r.id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	s := openAt(t, path, Options{})
	var indexed int
	if err := s.r.QueryRow(`SELECT count(*) FROM memories_fts`).Scan(&indexed); err != nil || indexed != 2 {
		t.Fatalf("the new index holds %d rows (%v), want the 2 live memories", indexed, err)
	}
	for _, tt := range []struct {
		c     Caller
		query string
		want  int
	}{
		{alice, "api-gw-02", 1}, {alice, "src/config/loader.go", 1}, {alice, "infra", 1}, {alice, "gateway shop", 0},
		{bob, "api-gw-02", 1}, {bob, "loader", 0}, {Caller{}, "api-gw-02", 2}, {Caller{}, "retired", 0},
	} {
		if ids := found(t, s, tt.c, tt.query); len(ids) != tt.want {
			t.Errorf("%q searches %q: found %v, want %d", tt.c.Project, tt.query, ids, tt.want)
		}
	}
	// The triggers of version 6 keep the index: an update, a forget, a restore.
	mine := rows[0].id
	if _, err := s.Update(ctx, alice, mine, UpdateArgs{Content: ptr("The api-gw-03 host fronts the api")}, t0); err != nil {
		t.Fatal(err)
	}
	if ids := found(t, s, alice, "api-gw-02"); len(ids) != 0 {
		t.Errorf("the old words of an updated memory are found: %v", ids)
	}
	if ids := found(t, s, alice, "api-gw-03"); len(ids) != 1 {
		t.Errorf("the new words of an updated memory are not found: %v", ids)
	}
	if _, err := s.Forget(ctx, alice, mine, "", t0); err != nil {
		t.Fatal(err)
	}
	if ids := found(t, s, alice, "api-gw-03"); len(ids) != 0 {
		t.Errorf("a forgotten memory is found: %v", ids)
	}
	if _, err := s.Restore(ctx, alice, mine, t0); err != nil {
		t.Fatal(err)
	}
	if ids := found(t, s, alice, "api-gw-03"); len(ids) != 1 {
		t.Errorf("a restored memory is not found: %v", ids)
	}
}

// segments is the number of segments of the full-text index.
func segments(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.r.QueryRow(`SELECT count(DISTINCT segid) FROM memories_fts_idx`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMergeIndex: writes of their own leave the index in many segments; MergeIndex merges
// them into one, and searches find the same memories after.
func TestMergeIndex(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	for i := range 60 {
		remember(t, s, alice, fmt.Sprintf("note %d about the api-gw-%02d gateway", i, i))
	}
	before := segments(t, s)
	if before < 2 {
		t.Fatalf("60 writes left %d segments: nothing to merge", before)
	}
	foundBefore := found(t, s, alice, "gateway")
	if err := s.MergeIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if n := segments(t, s); n != 1 {
		t.Errorf("%d segments after the merge, %d before; want 1", n, before)
	}
	if got := found(t, s, alice, "gateway"); !slices.Equal(got, foundBefore) || len(got) != 50 {
		t.Errorf("after the merge the search finds %d memories, before %d", len(got), len(foundBefore))
	}
	if got := found(t, s, alice, "api-gw-07"); len(got) != 1 {
		t.Errorf("an identifier after the merge: %v", got)
	}
}

// insertAt5 is insert as a store of version 5 did it: without the source's host and client
// (version 8).
func insertAt5(ctx context.Context, tx cachedTx, m Memory) error {
	tags, _ := json.Marshal(m.Tags)
	_, err := tx.ExecContext(ctx, `
		INSERT INTO memories (id, project, scope, branch, directory, branch_tip, kind, content, norm, tags,
			created_at, updated_at, used_at, source_session, source_call)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)`,
		m.ID, m.Project, scope(m.Project), m.Branch, m.Directory, m.BranchTip, m.Kind, m.Content, normalize(m.Content), string(tags),
		toMS(m.CreatedAt), toMS(m.UpdatedAt), m.Source.SessionID, m.Source.CallID)
	if err != nil {
		return err
	}
	return countWords(ctx, tx, m.Content, 1)
}
