package memory

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestWrittenBy: what each session created, updated and forgot through the memory tools,
// oldest first, from the history; a person's changes (no session) and the sessions that
// wrote nothing have no key.
func TestWrittenBy(t *testing.T) {
	ctx := context.Background()
	s := setup(t)
	x := Caller{Project: alice.Project, SessionID: "ses_x", CallID: "call_1"}
	y := Caller{Project: alice.Project, SessionID: "ses_y", CallID: "call_2"}
	a := remember(t, s, x, "The deploy script lives in ops/deploy.sh.").Memory
	x.CallID = "call_1b" // a repeated call id repeats the first answer
	b := remember(t, s, x, "Tests run with go test -race.").Memory
	content := "The deploy script lives in ops/deploy.sh and needs bash 5."
	if _, err := s.Update(ctx, y, a.ID, UpdateArgs{Content: &content}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	y.CallID = "call_3"
	if _, err := s.Forget(ctx, y, b.ID, "wrong", t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Restore(ctx, Caller{}, b.ID, t0.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err := s.WrittenBy(ctx, []string{"ses_x", "ses_y", "ses_none", "", "ses_x"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]Written{
		"ses_x": {{a.ID, "create", t0}, {b.ID, "create", t0}},
		"ses_y": {{a.ID, "update", t0.Add(time.Minute)}, {b.ID, "forget", t0.Add(2 * time.Minute)}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("WrittenBy:\n got %+v\nwant %+v", got, want)
	}
}

// TestWrittenByMigration: a store of version 6 opens at version 7, and the history written
// before is read by session through the new index.
func TestWrittenByMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "memories.db")
	raw := storeAtVersion(t, path, 6)
	if _, err := raw.Exec(`INSERT INTO memory_log (memory_id, at, op, session_id, call_id) VALUES
		('mem_000000000001aaaaaaaa', ?, 'create', 'ses_old', 'call_1'), ('mem_000000000001aaaaaaaa', ?, 'import', '', '')`,
		t0.UnixMilli(), t0.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	s := openAt(t, path, Options{})
	got, err := s.WrittenBy(ctx, []string{"ses_old"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Written{{"mem_000000000001aaaaaaaa", "create", t0}}; !reflect.DeepEqual(got["ses_old"], want) || len(got) != 1 {
		t.Fatalf("WrittenBy after the migration: %+v", got)
	}
	var plan strings.Builder
	rows, err := s.r.QueryContext(ctx, `EXPLAIN QUERY PLAN SELECT memory_id, op, at FROM memory_log
		WHERE session_id = ? AND session_id != '' AND op IN ('create', 'update', 'forget') ORDER BY id LIMIT ?`, "ses_old", WrittenMax)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(detail + "\n")
	}
	if !strings.Contains(plan.String(), "memory_log_by_session") {
		t.Errorf("WrittenBy's query does not use the session index:\n%s", plan.String())
	}
}
