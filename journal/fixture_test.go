package journal_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
)

var writeFixture = flag.Bool("write-fixture", false, "regenerate testdata/journal/fixture.db and fixture.golden with today's code")

const (
	fixtureDB     = "../testdata/journal/fixture.db"
	fixtureGolden = "../testdata/journal/fixture.golden"
)

// TestJournalFixture opens a journal written by an earlier version of thatch (committed in
// testdata/journal) and checks that Load still reads exactly what it held: the JSON
// names of the persisted rows (runtime.Counters, Host, Session…) are the on-disk format,
// and a renamed field would otherwise load as its zero value without any error.
//
// go test ./journal -run TestJournalFixture -write-fixture rewrites both files with
// today's code; do that only on purpose (a new on-disk format), never to make this test
// pass after a rename.
func TestJournalFixture(t *testing.T) {
	if *writeFixture {
		writeJournalFixture(t)
	}
	path := filepath.Join(t.TempDir(), "thatch.db")
	data, err := os.ReadFile(fixtureDB)
	if err != nil {
		t.Fatalf("read the fixture (go test ./journal -run TestJournalFixture -write-fixture writes it): %v", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(fixtureGolden)
	if err != nil {
		t.Fatal(err)
	}
	s, err := journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := dumpJournal(t, s)
	if !bytes.Equal(got, want) {
		t.Fatalf("the journal fixture no longer loads as %s (a persisted field's JSON name changed?); lines that differ:\n%s",
			fixtureGolden, lineDiff(string(want), string(got)))
	}
}

// fixtureNow is the fixture's clock.
var fixtureNow = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

// writeJournalFixture builds a journal through the public API (Open, Commit) holding a
// value in every persisted field, and writes it and its dump.
func writeJournalFixture(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "thatch.db")
	s, err := journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fixtureState()
	requireEveryField(t, st)

	fx := runtime.NewEffects()
	for id := range st.Hosts {
		fx.Hosts[id] = true
	}
	for id := range st.Sessions {
		fx.Sessions[id] = true
	}
	for id := range st.Gone {
		fx.Gone[id] = true
	}
	fx.Counters = true
	at := fixtureNow.Add(-10 * time.Minute)
	for _, e := range []struct {
		id, tool string
		size     int
		trivial  bool
		body     runtime.Body
	}{
		{"call_1", "bash", 120, false, runtime.Body{Tool: "bash", Args: json.RawMessage(`{"command":"go test ./..."}`), Title: "run the tests", Output: "ok  github.com/x/y 0.1s", Metadata: json.RawMessage(`{"exit":0}`)}},
		{"call_2", "read", 80, false, runtime.Body{Tool: "read", Args: json.RawMessage(`{"filePath":"/w/proj/main.go"}`), Output: "package main"}},
		{"call_3", "glob", 10, true, runtime.Body{Tool: "glob", Args: json.RawMessage(`{"pattern":"*.go"}`)}},
		{"call_4", "edit", 300, false, runtime.Body{Tool: "edit", Args: json.RawMessage(`{"filePath":"/w/proj/main.go"}`), Title: "main.go", Output: "Edit applied."}},
	} {
		fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryInsert, Root: "ses_top", ID: e.id, At: at,
			Body: &e.body, Size: e.size, Trivial: e.trivial})
		at = at.Add(time.Second)
	}
	fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryClaim, Root: "ses_top", Claimant: "ses_child",
		IDs: []string{"call_1", "call_2"}, At: fixtureNow.Add(-2 * time.Minute)})
	fx.Calls = []runtime.Call{
		{Host: "host_a", Op: runtime.OpPrompt, Purpose: runtime.PurposeInstruct, SessionID: "ses_child", Text: "extract",
			NoReply: true, Synthetic: true, Model: "anthropic/claude-haiku", Project: "proj_1"},
		{Host: "host_a", Op: runtime.OpMessages, Purpose: runtime.PurposeLedger, SessionID: "ses_old_child",
			Ledger: &runtime.LedgerRef{Root: "ses_top", Project: "proj_1", Model: "anthropic/claude-haiku", Entries: 3, Toast: "thatch: 2 memories"}},
		{Host: "host_a", Op: runtime.OpToast, Title: "thatch", Text: "budget reached", Variant: "warning"},
		{Host: "host_a", Op: runtime.OpMove, SessionID: "ses_task", Directory: "/w/proj", WrapUp: runtime.WrapCompact},
	}
	fx.Ledger = []runtime.LedgerRow{
		{Child: "ses_old_child", Root: "ses_top", Project: "proj_1", Day: "2025-03-14", At: fixtureNow.Add(-time.Hour), Entries: 3,
			Cost: runtime.Cost{TokensIn: 12000, TokensOut: 800, USD: 0.0125, Model: "anthropic/claude-haiku", Turns: 4}},
		{Child: "ses_older_child", Root: "ses_top", Project: "proj_1", Day: "2025-03-13", At: fixtureNow.Add(-20 * time.Hour), Entries: 1,
			Cost: runtime.Cost{TokensIn: 5000, TokensOut: 200, USD: 0.004, Turns: 2}},
	}
	err = s.Commit(&runtime.Batch{Now: fixtureNow, State: st, Effects: fx,
		Applied:     []runtime.Applied{{ID: "evt_1", Seq: 41}, {ID: "evt_2", Seq: 42}},
		DeadLetters: []runtime.DeadLetter{{Seq: 40, Subject: "opencode.host_a.event.session.updated", Reason: "no session id", Body: []byte(`{"type":"session.updated"}`)}},
		StreamSeq:   42})
	if err != nil {
		t.Fatal(err)
	}
	// The toast was performed; the other calls stay in the outbox.
	if err := s.Commit(&runtime.Batch{Now: fixtureNow, State: st, Done: []int64{fx.Calls[2].ID}}); err != nil {
		t.Fatal(err)
	}
	golden := dumpJournal(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		t.Fatal("the journal left a WAL file behind at close: the fixture would be incomplete")
	}
	if err := os.MkdirAll(filepath.Dir(fixtureDB), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fixtureDB, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fixtureGolden, golden, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s and %s", fixtureDB, fixtureGolden)
}

func fixtureState() *runtime.State {
	st := runtime.NewState()
	st.Hosts["host_a"] = &runtime.Host{ID: "host_a", API: "v2", Version: "1.18.33", BootID: "boot_7", Directory: "/w/proj",
		Worktree: "/w", ProjectID: "proj_1", Caps: runtime.Capabilities{TUI: true, Compact: true, Move: true, List: true, Context: true},
		Resumed: []string{"ses_top"}, Online: true, Seq: 17, SmallModel: "anthropic/claude-haiku",
		MissingTools: []string{"memory_search"}, ToolsWarned: true, Heard: fixtureNow.Add(-time.Minute).UnixMilli()}
	st.Hosts["host_b"] = &runtime.Host{ID: "host_b", API: "v1", ProjectID: "proj_2"}
	st.Sessions["ses_top"] = &runtime.Session{ID: "ses_top", HostID: "host_a", Kind: runtime.KindTop, Title: "fix the build",
		Directory: "/w/proj", ProjectID: "proj_1", Status: runtime.StatusIdle, Reminded: true, Extracting: true, Child: "ses_child",
		Compacting: true, WrapUp: runtime.WrapExit, Resolving: true, Resolved: runtime.WrapCompact, Exited: true,
		Seq: 42, Touched: fixtureNow.Add(-time.Minute)}
	st.Sessions["ses_child"] = &runtime.Session{ID: "ses_child", HostID: "host_a", ParentID: "ses_top", Kind: runtime.KindExtraction,
		Title: runtime.ExtractionTitle, Directory: "/w/proj", ProjectID: "proj_1", Status: runtime.StatusBusy,
		Metrics: runtime.Metrics{New: 2, Updated: 1, Deleted: 1}, Wrote: runtime.Metrics{New: 1, Updated: 2, Deleted: 3},
		WroteThrough: true, Completed: 2, Snapshot: []string{"call_1", "call_2"}, Seq: 41, Touched: fixtureNow.Add(-2 * time.Minute)}
	st.Sessions["ses_task"] = &runtime.Session{ID: "ses_task", HostID: "host_a", ParentID: "ses_top", Kind: runtime.KindTask,
		Title: "explore", Directory: "/w/proj", ProjectID: "proj_1", Status: runtime.StatusUnknown, Seq: 30, Touched: fixtureNow.Add(-5 * time.Minute)}
	st.Gone["ses_gone"] = fixtureNow.Add(-time.Hour).UnixMilli()
	st.Counters = runtime.Counters{Applied: 42, Rejected: 1, Gaps: 2, Redacted: 3, StaleRequeued: 4, Healed: 5, Swept: 6,
		Day: "2025-03-14", DayTokens: 12800, Warned: "2025-03-13", Trivial: 7, Stream: "2025-03-01T10:00:00.123456789Z"}
	return st
}

// requireEveryField fails when a persisted struct has a field the fixture leaves at its
// zero value: that field's on-disk name would go unchecked.
func requireEveryField(t *testing.T, st *runtime.State) {
	t.Helper()
	set := map[string]bool{}
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.Tag.Get("json") == "-" {
				continue
			}
			name := prefix + f.Name
			if !v.Field(i).IsZero() {
				set[name] = true
			}
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]() {
				walk(name+".", v.Field(i))
			}
		}
	}
	check := func(what string, v reflect.Value) { walk(what+".", v) }
	check("Counters", reflect.ValueOf(st.Counters))
	for _, h := range st.Hosts {
		check("Host", reflect.ValueOf(*h))
	}
	for _, s := range st.Sessions {
		check("Session", reflect.ValueOf(*s))
	}
	var missing []string
	for _, typ := range []struct {
		name string
		t    reflect.Type
	}{{"Counters", reflect.TypeFor[runtime.Counters]()}, {"Host", reflect.TypeFor[runtime.Host]()}, {"Session", reflect.TypeFor[runtime.Session]()}} {
		var names func(prefix string, rt reflect.Type)
		names = func(prefix string, rt reflect.Type) {
			for i := range rt.NumField() {
				f := rt.Field(i)
				if f.Tag.Get("json") == "-" {
					continue
				}
				if !set[prefix+f.Name] {
					missing = append(missing, prefix+f.Name)
				}
				if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]() {
					names(prefix+f.Name+".", f.Type)
				}
			}
		}
		names(typ.name+".", typ.t)
	}
	if len(missing) > 0 {
		t.Fatalf("the fixture leaves these persisted fields at zero; give them a value in fixtureState: %v", missing)
	}
}

// dumpJournal renders everything the journal gives back, as JSON with sorted keys.
func dumpJournal(t *testing.T, s *journal.Store) []byte {
	t.Helper()
	st, calls, pos, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	sessions := map[string]any{}
	for id, sess := range st.Sessions {
		entries := []any{}
		for _, e := range sess.Entries {
			entries = append(entries, map[string]any{"id": e.ID, "tool": e.Tool(), "claimant": e.Claimant(),
				"claimedAt": e.ClaimedAt(), "size": e.Size, "trivial": e.Trivial()})
		}
		payloads := map[string]any{}
		for _, claimant := range slices.Sorted(maps.Keys(claimants(sess))) {
			p, err := s.Payload(id, claimant)
			if err != nil {
				t.Fatal(err)
			}
			payloads[claimant] = p
		}
		sessions[id] = map[string]any{"row": sess, "entries": entries, "payloads": payloads}
	}
	outbox := []any{}
	for _, c := range calls {
		outbox = append(outbox, map[string]any{"id": c.ID, "call": c})
	}
	costs, err := s.Costs("")
	if err != nil {
		t.Fatal(err)
	}
	dead, err := s.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	applied, err := s.Applied([]string{"evt_1", "evt_2", "evt_3"})
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string]any{
		"instance":    s.Instance(),
		"streamSeq":   pos,
		"counters":    st.Counters,
		"hosts":       st.Hosts,
		"sessions":    sessions,
		"gone":        st.Gone,
		"outbox":      outbox,
		"costs":       costs,
		"deadLetters": dead,
		"applied":     applied,
	}
	// A round trip through any sorts every object's keys, struct fields included.
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&generic); err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(generic, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

func claimants(sess *runtime.Session) map[string]bool {
	out := map[string]bool{}
	for _, e := range sess.Entries {
		if e.Claimant() != "" {
			out[e.Claimant()] = true
		}
	}
	return out
}

// lineDiff lists the lines of want missing from got (-) and those of got not in want (+),
// with their line numbers.
func lineDiff(want, got string) string {
	count := func(text string) map[string]int {
		n := map[string]int{}
		for _, l := range strings.Split(text, "\n") {
			n[l]++
		}
		return n
	}
	inWant, inGot := count(want), count(got)
	var b strings.Builder
	for i, l := range strings.Split(want, "\n") {
		if inGot[l] > 0 {
			inGot[l]--
		} else {
			fmt.Fprintf(&b, "-%d: %s\n", i+1, l)
		}
	}
	for i, l := range strings.Split(got, "\n") {
		if inWant[l] > 0 {
			inWant[l]--
		} else {
			fmt.Fprintf(&b, "+%d: %s\n", i+1, l)
		}
	}
	return b.String()
}

// TestJournalFixtureProvenance: a journal of schema version 7 (the fixture, from before
// provenance) opens at the current version, and the entries an extraction claimed before
// the upgrade are kept as provenance when it completes them after it.
func TestJournalFixtureProvenance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "thatch.db")
	data, err := os.ReadFile(fixtureDB)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var version int
	if err := s.DB().QueryRow(`SELECT max(version) FROM schema_migrations`).Scan(&version); err != nil || version < 8 {
		t.Fatalf("schema version %d (%v) after opening the fixture, want 8 or later", version, err)
	}
	st, _, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	fx := runtime.NewEffects()
	fx.Entries = []runtime.EntryOp{{Kind: runtime.EntryDeleteClaimed, Root: "ses_top", Claimant: "ses_child", At: fixtureNow}}
	if err := s.Commit(&runtime.Batch{Now: fixtureNow, State: st, Effects: fx}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Provenance([]string{"ses_child"})
	if err != nil {
		t.Fatal(err)
	}
	want := []runtime.Provenance{{Extraction: "ses_child", Session: "ses_top", At: fixtureNow,
		Calls: []runtime.CompletedCall{{ID: "call_1", Tool: "bash", Title: "run the tests"}, {ID: "call_2", Tool: "read"}}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("provenance after completing the fixture's claim:\n got %+v\nwant %+v", got, want)
	}
	d, err := s.SessionDetail("ses_top", 10)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.Provenance, want) || len(d.Entries) != 2 {
		t.Fatalf("the session's page after the completion: provenance %+v, entries %+v", d.Provenance, d.Entries)
	}
}
