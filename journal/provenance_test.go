package journal_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/scenario"
)

// commitOps commits entry operations at now.
func commitOps(t *testing.T, s *journal.Store, now time.Time, ops ...runtime.EntryOp) {
	t.Helper()
	fx := runtime.NewEffects()
	fx.Entries = ops
	if err := s.Commit(&runtime.Batch{Now: now, State: runtime.NewState(), Effects: fx}); err != nil {
		t.Fatal(err)
	}
}

// commitTopSession commits a top-level session id at now, so that Load keeps its entries.
func commitTopSession(t *testing.T, s *journal.Store, id string, now time.Time) {
	t.Helper()
	st := runtime.NewState()
	st.Sessions[id] = &runtime.Session{ID: id, HostID: "h1", Kind: runtime.KindTop, Directory: "/w"}
	fx := runtime.NewEffects()
	fx.Sessions[id] = true
	if err := s.Commit(&runtime.Batch{Now: now, State: st, Effects: fx}); err != nil {
		t.Fatal(err)
	}
}

func insertOp(root, id, tool, title string, at time.Time) runtime.EntryOp {
	return runtime.EntryOp{Kind: runtime.EntryInsert, Root: root, ID: id, At: at, Size: 10,
		Body: &runtime.Body{Tool: tool, Title: title, Args: json.RawMessage(`{"x":1}`), Output: "out"}}
}

// TestProvenance: completing a claimant's entries keeps their call ids, tools and titles
// (cut to ProvenanceTitleMax characters) in the same commit that drops them; entries the
// claimant did not take, released or dropped ones leave nothing; Provenance, SessionDetail
// and ExtractedFrom read it back, in the order the calls happened.
func TestProvenance(t *testing.T) {
	s := open(t)
	t0 := scenario.Epoch
	long := strings.Repeat("é", journal.ProvenanceTitleMax+30)
	commitTopSession(t, s, "ses_a", t0)
	commitOps(t, s, t0,
		insertOp("ses_a", "c1", "bash", "go test ./...", t0),
		insertOp("ses_a", "c2", "read", "", t0),
		insertOp("ses_a", "ses_task/c3", "edit", long, t0),
		insertOp("ses_a", "c4", "glob", "*.go", t0),
		insertOp("ses_b", "c1", "bash", "ls", t0),
	)
	commitOps(t, s, t0.Add(time.Second),
		runtime.EntryOp{Kind: runtime.EntryClaim, Root: "ses_a", Claimant: "ses_x", IDs: []string{"c1", "c2", "ses_task/c3"}, At: t0},
		runtime.EntryOp{Kind: runtime.EntryClaim, Root: "ses_b", Claimant: "ses_y", IDs: []string{"c1"}, At: t0})
	// Nothing is kept before a completion, nor for a release or a drop.
	commitOps(t, s, t0.Add(2*time.Second),
		runtime.EntryOp{Kind: runtime.EntryReleaseClaimed, Root: "ses_b", Claimant: "ses_y"},
		runtime.EntryOp{Kind: runtime.EntryDeleteAll, Root: "ses_b"})
	if got, err := s.Provenance([]string{"ses_x", "ses_y"}); err != nil || len(got) != 0 {
		t.Fatalf("before any completion: %+v %v", got, err)
	}
	done := t0.Add(3 * time.Second)
	commitOps(t, s, t0.Add(time.Hour), runtime.EntryOp{Kind: runtime.EntryDeleteClaimed, Root: "ses_a", Claimant: "ses_x", At: done})

	want := runtime.Provenance{Extraction: "ses_x", Session: "ses_a", At: done, Calls: []runtime.CompletedCall{
		{ID: "c1", Tool: "bash", Title: "go test ./..."}, {ID: "c2", Tool: "read"},
		{ID: "ses_task/c3", Tool: "edit", Title: strings.Repeat("é", journal.ProvenanceTitleMax)}}}
	got, err := s.Provenance([]string{"", "ses_x", "ses_nobody", "ses_x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("provenance of ses_x:\n got %+v\nwant %+v", got, want)
	}
	d, err := s.SessionDetail("ses_a", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Entries) != 1 || d.Entries[0].ID != "c4" {
		t.Errorf("entries left: %+v, want c4 alone", d.Entries)
	}
	if len(d.Provenance) != 1 || !reflect.DeepEqual(d.Provenance[0], want) {
		t.Errorf("the session's provenance:\n got %+v\nwant %+v", d.Provenance, want)
	}
	// An extraction whose cost the ledger lacks still names its session.
	if root, err := s.ExtractedFrom("ses_x"); err != nil || root != "ses_a" {
		t.Errorf("ExtractedFrom(ses_x) = %q, %v; want ses_a", root, err)
	}
	if root, err := s.ExtractedFrom("ses_nobody"); err != nil || root != "" {
		t.Errorf("ExtractedFrom(ses_nobody) = %q, %v; want none", root, err)
	}

	// A second completion by the same claimant (a top-level session's flushes) adds to it.
	commitOps(t, s, t0.Add(2*time.Hour),
		runtime.EntryOp{Kind: runtime.EntryClaim, Root: "ses_a", Claimant: "ses_x", IDs: []string{"c4"}, At: t0},
		runtime.EntryOp{Kind: runtime.EntryDeleteClaimed, Root: "ses_a", Claimant: "ses_x"}) // no At: the batch's time
	got, err = s.Provenance([]string{"ses_x"})
	if err != nil {
		t.Fatal(err)
	}
	want.Calls = append(want.Calls, runtime.CompletedCall{ID: "c4", Tool: "glob", Title: "*.go"})
	want.At = t0.Add(2 * time.Hour)
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("after a second completion:\n got %+v\nwant %+v", got, want)
	}

	// The journal sweep keeps it as long as the ledger keeps a row.
	sweep := func(now time.Time) {
		t.Helper()
		if err := s.Commit(&runtime.Batch{Now: now, State: runtime.NewState(), PruneApplied: now.Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	sweep(done.Add(journal.LedgerRetention - time.Minute))
	if got, _ := s.Provenance([]string{"ses_x"}); len(got) != 1 || len(got[0].Calls) != 4 {
		t.Fatalf("a sweep within the retention dropped provenance: %+v", got)
	}
	sweep(want.At.Add(journal.LedgerRetention + time.Minute))
	if got, _ := s.Provenance([]string{"ses_x"}); len(got) != 0 {
		t.Fatalf("a sweep past the retention kept provenance: %+v", got)
	}
}

// TestProvenanceListsABoundedNumberOfCalls: a claimant that completed more than
// ProvenanceCalls calls lists the first ones and counts the rest.
func TestProvenanceListsABoundedNumberOfCalls(t *testing.T) {
	s := open(t)
	t0 := scenario.Epoch
	n := journal.ProvenanceCalls + 7
	var ops []runtime.EntryOp
	var ids []string
	for i := range n {
		id := fmt.Sprintf("c%04d", i)
		ops = append(ops, insertOp("ses_a", id, "read", id, t0))
		ids = append(ids, id)
	}
	ops = append(ops, runtime.EntryOp{Kind: runtime.EntryClaim, Root: "ses_a", Claimant: "ses_a", IDs: ids, At: t0},
		runtime.EntryOp{Kind: runtime.EntryDeleteClaimed, Root: "ses_a", Claimant: "ses_a", At: t0})
	commitOps(t, s, t0, ops...)
	got, err := s.Provenance([]string{"ses_a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Calls) != journal.ProvenanceCalls || got[0].More != 7 || got[0].Calls[0].ID != "c0000" {
		t.Fatalf("got %d extractions, %+v", len(got), got)
	}
}

// TestProvenanceOfEntriesBeforeTitles: entries written before the title column (a journal
// at version 8) keep their calls' titles, read from their bodies, when they complete after
// the upgrade; an entry written after it keeps the title it was written with, moved to
// another root too.
func TestProvenanceOfEntriesBeforeTitles(t *testing.T) {
	db, upgrade := oldJournal(t, 8)
	if _, err := db.Exec(`SELECT title FROM entries`); err == nil {
		t.Fatal("the version-8 schema already has entries.title: the test does not build an old journal")
	}
	for _, e := range []struct{ id, title string }{{"c1", "go test ./..."}, {"c2", ""}} {
		body, _ := json.Marshal(runtime.Body{Tool: "bash", Title: e.title, Output: "ok"})
		if _, err := db.Exec(`INSERT INTO entries (root_id, entry_id, tool, created_at, body, size) VALUES ('ses_a', ?, 'bash', 1, ?, 10)`,
			e.id, body); err != nil {
			t.Fatal(err)
		}
	}
	s := upgrade()
	t0 := scenario.Epoch
	commitOps(t, s, t0, insertOp("ses_a", "c3", "read", "main.go", t0))
	commitOps(t, s, t0, runtime.EntryOp{Kind: runtime.EntryMove, Root: "ses_b", From: "ses_a", ID: "c3"})
	var moved sql.NullString
	if err := s.DB().QueryRow(`SELECT title FROM entries WHERE root_id = 'ses_b' AND entry_id = 'c3'`).Scan(&moved); err != nil || moved.String != "main.go" {
		t.Fatalf("the moved entry's title column: %+v, %v; want main.go", moved, err)
	}
	for _, root := range []string{"ses_a", "ses_b"} {
		ids := []string{"c1", "c2"}
		if root == "ses_b" {
			ids = []string{"c3"}
		}
		commitOps(t, s, t0.Add(time.Second),
			runtime.EntryOp{Kind: runtime.EntryClaim, Root: root, Claimant: "ses_x_" + root, IDs: ids, At: t0},
			runtime.EntryOp{Kind: runtime.EntryDeleteClaimed, Root: root, Claimant: "ses_x_" + root, At: t0})
	}
	got, err := s.Provenance([]string{"ses_x_ses_a", "ses_x_ses_b"})
	if err != nil {
		t.Fatal(err)
	}
	want := []runtime.Provenance{
		{Extraction: "ses_x_ses_a", Session: "ses_a", At: t0, Calls: []runtime.CompletedCall{
			{ID: "c1", Tool: "bash", Title: "go test ./..."}, {ID: "c2", Tool: "bash"}}},
		{Extraction: "ses_x_ses_b", Session: "ses_b", At: t0, Calls: []runtime.CompletedCall{{ID: "c3", Tool: "read", Title: "main.go"}}},
	}
	slices.SortFunc(got, func(a, b runtime.Provenance) int { return strings.Compare(a.Extraction, b.Extraction) })
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("provenance:\n got %+v\nwant %+v", got, want)
	}
}

// TestClaimTakesEveryIDAsGiven: one claim takes each of its entries whatever its id holds
// (nothing, a NUL, quotes, a backslash, other scripts), leaves the root's other entries
// pending, and does not take an entry another claimant holds.
func TestClaimTakesEveryIDAsGiven(t *testing.T) {
	s := open(t)
	t0 := scenario.Epoch
	ids := []string{"", "a\x00b", `q"uote`, `x\y`, "ü/é", "ses_task/c1"}
	var ops []runtime.EntryOp
	for _, id := range append(slices.Clone(ids), "left", "other") {
		ops = append(ops, insertOp("ses_a", id, "bash", "t", t0))
	}
	commitOps(t, s, t0, ops...)
	commitTopSession(t, s, "ses_a", t0)
	commitOps(t, s, t0,
		runtime.EntryOp{Kind: runtime.EntryClaim, Root: "ses_a", Claimant: "ses_y", IDs: []string{"other"}, At: t0},
		runtime.EntryOp{Kind: runtime.EntryClaim, Root: "ses_a", Claimant: "ses_x", IDs: append(slices.Clone(ids), "other"), At: t0})
	loaded, _, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range loaded.Sessions["ses_a"].Entries {
		got[e.ID] = e.Claimant()
	}
	want := map[string]string{"left": "", "other": "ses_y"}
	for _, id := range ids {
		want[id] = "ses_x"
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("claimants by entry:\n got %q\nwant %q", got, want)
	}
}
