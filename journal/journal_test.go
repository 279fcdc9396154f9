package journal_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/scenario"
)

func open(t *testing.T) *journal.Store {
	t.Helper()
	s, err := journal.Open(filepath.Join(t.TempDir(), "state", "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// snapshot renders a state completely, entries included, for comparison.
func snapshot(t *testing.T, s *runtime.State) string {
	t.Helper()
	data, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.Write(data)
	for _, line := range strings.Split(scenario.Dump(s, scenario.Epoch), "\n") {
		b.WriteString("\n" + line)
	}
	for _, id := range slices.Sorted(maps.Keys(s.Sessions)) {
		e, _ := json.Marshal(s.Sessions[id].Entries)
		b.WriteString("\n" + id + " " + string(e))
	}
	return b.String()
}

// TestScenarioRoundTrip replays every golden script through the journal: after each step
// the journal, reloaded, must hold exactly the state the core holds in memory. This is
// what makes "everything rebuilds from the journal at start" true at every point.
func TestScenarioRoundTrip(t *testing.T) {
	for _, path := range scenario.Scripts("../testdata/scenarios") {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			store := open(t)
			h := scenario.New()
			var outbox int
			var completed int // calls the journal must keep as provenance
			h.AfterStep = func(in runtime.Input, fx *runtime.Effects) {
				b := &runtime.Batch{Now: h.Now, State: h.State, Effects: fx}
				// What each completion drops is what the journal must keep of it (issue 29):
				// the claimant's entries as they were journaled before this commit.
				want := map[string][]runtime.CompletedCall{}
				for _, op := range fx.Entries {
					if op.Kind != runtime.EntryDeleteClaimed {
						continue
					}
					before, err := store.Provenance([]string{op.Claimant})
					if err != nil {
						t.Fatal(err)
					}
					if len(before) > 0 {
						want[op.Claimant] = before[0].Calls
					}
					claimed, err := store.Payload(op.Root, op.Claimant)
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range claimed {
						want[op.Claimant] = append(want[op.Claimant], runtime.CompletedCall{ID: e.ID, Tool: e.Body.Tool, Title: cutRunes(e.Body.Title, journal.ProvenanceTitleMax)})
					}
					completed += len(claimed)
				}
				if r, ok := in.(runtime.Result); ok && r.Call.ID != 0 {
					b.Done = []int64{r.Call.ID}
				}
				if r, ok := in.(runtime.Rejection); ok { // as the driver commits it
					b.DeadLetters = []runtime.DeadLetter{r.DeadLetter()}
				}
				if err := store.Commit(b); err != nil {
					t.Fatal(err)
				}
				outbox += len(fx.Calls) - len(b.Done)
				for claimant, calls := range want {
					got, err := store.Provenance([]string{claimant})
					if err != nil {
						t.Fatal(err)
					}
					if len(got) != 1 || !reflect.DeepEqual(got[0].Calls, calls) {
						t.Fatalf("provenance of %s after %T:\n got %+v\nwant %+v", claimant, in, got, calls)
					}
				}
				var kept int
				if err := store.DB().QueryRow(`SELECT count(*) FROM provenance`).Scan(&kept); err != nil || kept != completed {
					t.Fatalf("after %T the journal keeps %d completed calls (%v), want %d", in, kept, err, completed)
				}
				got, calls, _, err := store.Load()
				if err != nil {
					t.Fatal(err)
				}
				if want, have := snapshot(t, h.State), snapshot(t, got); want != have {
					t.Fatalf("journal diverged from memory after %T:\n--- memory\n%s\n--- journal\n%s", in, want, have)
				}
				// The index is derived: the one Step keeps and the one Load builds agree
				// with a full scan, and status reads the same figures from both.
				for name, st := range map[string]*runtime.State{"memory": h.State, "journal": got} {
					if err := st.CheckIndex(); err != nil {
						t.Fatalf("%s index after %T: %v", name, in, err)
					}
				}
				if want, have := runtime.Summary(h.State, 0), runtime.Summary(got, 0); !reflect.DeepEqual(want, have) {
					t.Fatalf("status after %T: memory %+v, journal %+v", in, want, have)
				}
				for _, c := range calls {
					if c.ID == 0 || c.Host == "" {
						t.Fatalf("outbox call without id or host: %+v", c)
					}
				}
			}
			cmds, err := scenario.Parse(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cmds {
				h.Exec(c)
			}
		})
	}
}

// cutRunes is s cut to at most n characters, as the journal cuts a completed call's title.
func cutRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}

func TestOpenIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "state")
	s, err := journal.Open(filepath.Join(dir, "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "thatch.db"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", path, got, want)
		}
	}
}

func TestReopenKeepsState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "thatch.db")
	s, err := journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st := runtime.NewState()
	fx := runtime.DefaultRules.Step(st, runtime.Event{ID: "e1", Type: "session.created", HostID: "h1", SessionID: "ses_a",
		Info: &runtime.SessionInfo{ID: "ses_a", Title: "t", Directory: "/w"}}, scenario.Epoch)
	err = s.Commit(&runtime.Batch{Now: scenario.Epoch, State: st, Effects: fx,
		Applied:     []runtime.Applied{{ID: "e1", Seq: 7}},
		DeadLetters: []runtime.DeadLetter{{Seq: 8, Subject: "opencode.h1.event.x", Reason: "bad", Body: []byte("{")}},
		StreamSeq:   8})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, calls, pos, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if pos != 8 || got.Sessions["ses_a"] == nil || len(calls) != 1 || calls[0].Op != runtime.OpPrompt {
		t.Fatalf("reloaded pos=%d sessions=%v calls=%+v", pos, got.Sessions, calls)
	}
	seen, err := s.Applied([]string{"e1", "e2"})
	if err != nil || !seen["e1"] || seen["e2"] {
		t.Fatalf("applied = %v, %v", seen, err)
	}
	dl, err := s.DeadLetters()
	if err != nil || len(dl) != 1 || dl[0].Reason != "bad" {
		t.Fatalf("dead letters = %+v, %v", dl, err)
	}
}

func TestDeadLettersAreBounded(t *testing.T) {
	s := open(t)
	st := runtime.NewState()
	for i := 0; i < journal.MaxDeadLetters+50; i += 50 {
		var dls []runtime.DeadLetter
		for j := 0; j < 50; j++ {
			dls = append(dls, runtime.DeadLetter{Seq: uint64(i + j), Subject: "s", Reason: "r", Body: make([]byte, 10000)})
		}
		if err := s.Commit(&runtime.Batch{Now: scenario.Epoch, State: st, DeadLetters: dls}); err != nil {
			t.Fatal(err)
		}
	}
	dl, err := s.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != journal.MaxDeadLetters {
		t.Fatalf("kept %d dead letters, want %d", len(dl), journal.MaxDeadLetters)
	}
	if dl[len(dl)-1].Seq != uint64(journal.MaxDeadLetters+49) || len(dl[0].Body) > 4096 {
		t.Fatalf("kept the wrong rows: last seq %d, body %d bytes", dl[len(dl)-1].Seq, len(dl[0].Body))
	}
}

// Completed entries' pages go back to the filesystem at a sweep.
func TestSweepReturnsFreePages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "thatch.db")
	s, err := journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := runtime.NewState()
	st.Sessions["ses_a"] = &runtime.Session{ID: "ses_a", HostID: "h1", Kind: runtime.KindTop}
	fx := runtime.NewEffects()
	fx.Sessions["ses_a"] = true
	for i := range 2000 {
		fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryInsert, Root: "ses_a", ID: fmt.Sprint(i),
			Body: &runtime.Body{Tool: "bash", Output: strings.Repeat("o", 2000)}})
	}
	if err := s.Commit(&runtime.Batch{Now: scenario.Epoch, State: st, Effects: fx}); err != nil {
		t.Fatal(err)
	}
	pages := func() (n int64) {
		if err := s.DB().QueryRow(`PRAGMA page_count`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	full := pages()
	fx = runtime.NewEffects()
	for i := range 2000 {
		fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryDelete, Root: "ses_a", ID: fmt.Sprint(i)})
	}
	if err := s.Commit(&runtime.Batch{Now: scenario.Epoch, State: st, Effects: fx, PruneApplied: scenario.Epoch}); err != nil {
		t.Fatal(err)
	}
	if after := pages(); after > full/10 {
		t.Fatalf("%d pages after completing every entry and sweeping, %d before: free pages were kept", after, full)
	}
}

// Outbox ids are never reused, even after the outbox empties: they make idempotency keys.
func TestOutboxIDsAreNeverReused(t *testing.T) {
	s := open(t)
	st := runtime.NewState()
	seen := map[int64]bool{}
	for range 3 {
		fx := runtime.NewEffects()
		fx.Calls = []runtime.Call{{Host: "h1", Op: runtime.OpList}}
		if err := s.Commit(&runtime.Batch{Now: scenario.Epoch, State: st, Effects: fx}); err != nil {
			t.Fatal(err)
		}
		id := fx.Calls[0].ID
		if seen[id] {
			t.Fatalf("outbox id %d handed out twice", id)
		}
		seen[id] = true
		if err := s.Commit(&runtime.Batch{Now: scenario.Epoch, State: st, Done: []int64{id}}); err != nil {
			t.Fatal(err)
		}
	}
	if s.Instance() == "" {
		t.Fatal("the journal has no instance name")
	}
}

// TestOpenDamagedJournal: a file that is not a journal is named, with what to do.
func TestOpenDamagedJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "thatch.db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("not a database, just text. "), 400), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := journal.Open(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move it aside") {
		t.Fatalf("opening a damaged journal: %v", err)
	}
}
