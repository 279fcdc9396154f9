package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
)

// preload journals sessions top-level sessions of host "hload" (ses_000000…, touched
// now, in dir) and entries entries of the first one, as a thatch that ran with them
// would have left its journal in dataDir.
func preload(t *testing.T, dataDir, dir string, sessions, entries int) {
	t.Helper()
	store, err := journal.Open(filepath.Join(dataDir, "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	now := time.Now()
	st := runtime.NewState()
	fx := runtime.NewEffects()
	for i := range sessions {
		id := fmt.Sprintf("ses_%06d", i)
		st.Sessions[id] = &runtime.Session{ID: id, HostID: "hload", Kind: runtime.KindTop, Status: runtime.StatusIdle,
			Title: "a session of the load test", Directory: dir, Touched: now, Reminded: true}
		fx.Sessions[id] = true
	}
	for i := range entries {
		id := fmt.Sprintf("call_%06d", i)
		body := &runtime.Body{Tool: "bash", Args: json.RawMessage(`{"command":"ls"}`), Output: "x"}
		fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryInsert, Root: "ses_000000", ID: id, At: now, Body: body,
			Size: runtime.EntrySize(id, body)})
	}
	if err := store.Commit(&runtime.Batch{Now: now, State: st, Effects: fx}); err != nil {
		t.Fatal(err)
	}
}

// TestCLIListsEverySession: with 100,000 sessions journaled (more than one reply can
// carry), thatch sessions lists every one, once, through its pages, and thatch entries
// every entry of a session holding 20,000; status stays quick. The goroutines of serve
// are gone once it stops.
func TestCLIListsEverySession(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test")
	}
	const sessions, entries = 100_000, 20_000
	r := newRig(t, "v1")
	preload(t, r.dataDir, r.host.Dir, sessions, entries)
	// The rig's own client gets its reply subscription (a goroutine) at its first request.
	var none runtime.StatusView
	_ = r.tryAPI("status", nil, &none)
	baseline := len(ourStacks())
	r.start()

	began := time.Now()
	st := r.status()
	t.Logf("status over %d sessions and %d entries: %s", st.Sessions, st.Pending, time.Since(began))
	if st.Sessions != sessions || st.Pending != entries {
		t.Fatalf("status says %d sessions and %d pending entries, want %d and %d", st.Sessions, st.Pending, sessions, entries)
	}

	// A listing of 100,000 sessions, page by page, took over 30 s (the rig's usual deadline)
	// under -race beside the other packages' tests on two cores.
	long := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		t.Cleanup(cancel)
		return ctx
	}
	var out bytes.Buffer
	began = time.Now()
	must(t, client(long(), r.cfg, "sessions", []string{"--json"}, &out))
	took := time.Since(began)
	var rows []runtime.SessionView
	must(t, json.Unmarshal(out.Bytes(), &rows))
	t.Logf("thatch sessions --json: %d sessions, %d bytes, in %s", len(rows), out.Len(), took)
	if len(rows) != sessions {
		t.Fatalf("thatch sessions listed %d sessions, want %d", len(rows), sessions)
	}
	for i, row := range rows {
		if want := fmt.Sprintf("ses_%06d", i); row.SessionID != want || row.HostID != "hload" {
			t.Fatalf("row %d is %s of %s, want %s of hload: each session once, in id order", i, row.SessionID, row.HostID, want)
		}
	}
	if rows[0].Pending != entries {
		t.Fatalf("ses_000000 shows %d pending entries, want %d", rows[0].Pending, entries)
	}

	out.Reset()
	must(t, client(long(), r.cfg, "sessions", nil, &out))
	if lines := strings.Count(out.String(), "\n"); lines != sessions+1 {
		t.Fatalf("thatch sessions printed %d lines, want a header and %d rows", lines, sessions)
	}

	out.Reset()
	began = time.Now()
	must(t, client(long(), r.cfg, "entries", []string{"ses_000000", "--json"}, &out))
	var es []runtime.EntryView
	must(t, json.Unmarshal(out.Bytes(), &es))
	t.Logf("thatch entries --json: %d entries in %s", len(es), time.Since(began))
	if len(es) != entries {
		t.Fatalf("thatch entries listed %d entries, want %d", len(es), entries)
	}
	for i, e := range es {
		if want := fmt.Sprintf("call_%06d", i); e.ID != want || e.State != "pending" {
			t.Fatalf("entry %d is %s (%s), want %s pending, in arrival order", i, e.ID, e.State, want)
		}
	}

	// The contract's bare array is still there for a list that fits, and one that does
	// not is refused with a reason instead of a timeout.
	var some []runtime.SessionView
	must(t, r.tryAPI("sessions", map[string]any{"limit": 5}, &some))
	if len(some) != 5 {
		t.Fatalf("sessions {limit: 5} gave %d rows", len(some))
	}
	err := r.tryAPI("sessions", map[string]any{}, &some)
	if err == nil || !strings.Contains(err.Error(), "TooLargeError") {
		t.Fatalf("sessions without a cursor over max_payload: %v, want TooLargeError", err)
	}

	r.stop()
	testkit.WaitFor(t, 10*time.Second, "serve's goroutines to end", func() error {
		if ours(baseline) > 0 {
			return fmt.Errorf("goroutines of thatch left after serve stopped:\n%s", strings.Join(ourStacks(), "\n\n"))
		}
		return nil
	})
}

// ourStacks lists the stacks of the goroutines that are not the broker's: the
// in-process nats-server keeps the stream and consumer serve created.
func ourStacks() []string {
	buf := make([]byte, 8<<20)
	var out []string
	for _, g := range strings.Split(string(buf[:goruntime.Stack(buf, true)]), "\n\n") {
		if !strings.Contains(g, "nats-server/v2/server") {
			out = append(out, g)
		}
	}
	return out
}

// ours is how many more goroutines that are not the broker's run than baseline counted.
func ours(baseline int) int { return len(ourStacks()) - baseline }
