package daemontest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
)

// TestToolCallAnsweredOnAFullJournal: with the journal's disk full, a tool call gets an
// answer that names the disk instead of none (issue 29, point 6), and once there is room
// again the events are applied and the call is answered as usual. The journal is made
// full with SQLite's max_page_count, which fails a write as a full disk does.
func TestToolCallAnsweredOnAFullJournal(t *testing.T) {
	r := New(t, "v1")
	var store *journal.Store
	r.StartTuned(func(l *runtime.Loop) { store = l.Journal.(*journal.Store) })
	ctx := r.Ctx()
	must(t, r.Host.Hello(ctx, "b1"))
	must(t, r.Host.Created(ctx, "ses_a", "", "t", r.Host.Dir))
	waitFor(t, "the session", func() bool { _, ok := r.Sessions()["ses_a"]; return ok })

	// The journal's free pages are taken by a filler table, then max_page_count stops it
	// growing: every write that needs room fails with SQLITE_FULL.
	db := store.DB()
	_, err := db.Exec(`CREATE TABLE test_filler (b BLOB)`)
	must(t, err)
	var pages int
	must(t, db.QueryRow(`PRAGMA page_count`).Scan(&pages))
	_, err = db.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages))
	must(t, err)
	for _, size := range []int{1024, 64} {
		for n := 0; ; n++ {
			if _, err := db.Exec(`INSERT INTO test_filler VALUES (zeroblob(?))`, size); err != nil {
				break
			}
			if n > 1_000_000 {
				t.Fatal("the journal never filled")
			}
		}
	}
	// An entry of some 6 KB: more than a page, wherever the tables have room left.
	_, err = r.Host.Publish(ctx, "tool.execute.after", map[string]any{"sessionID": "ses_a", "callID": "c1", "tool": "bash",
		"args": map[string]any{"command": strings.Repeat("make build ", 300)}, "output": strings.Repeat("build output line\n", 400),
		"metadata": map[string]any{"stdout": strings.Repeat("x", 3000)}})
	must(t, err)
	a, herr, err := r.Host.Tool(ctx, "thatch", runtime.ToolPayload, "ses_a", map[string]any{})
	must(t, err)
	if herr == nil || !strings.HasPrefix(herr.Message, "disk full: free space in "+r.DataDir) {
		t.Fatalf("a tool call on a full journal got %+v %v, want an error naming the disk", a, herr)
	}

	_, err = db.Exec(`DROP TABLE test_filler`)
	must(t, err)
	_, err = db.Exec(`PRAGMA max_page_count = 1073741823`)
	must(t, err)
	waitFor(t, "the call to be answered once there is room", func() bool {
		a, herr, err = r.Host.Tool(ctx, "thatch", runtime.ToolPayload, "ses_a", map[string]any{})
		return err == nil && herr == nil
	})
	if md, _ := a.Metadata.(map[string]any); fmt.Sprint(md["entryIDs"]) != "[c1]" {
		t.Errorf("the payload once there is room: %v", a.Metadata)
	}
}
