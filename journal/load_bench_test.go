package journal_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
)

var (
	loadJournal  = flag.String("load.journal", "", "BenchmarkLoad: the journal to load (written first when absent); default a temporary one")
	loadSessions = flag.Int("load.sessions", 10_000, "BenchmarkLoad: sessions of the journal it writes")
	loadEntries  = flag.Int("load.entries", 100_000, "BenchmarkLoad: entries of the journal it writes")
)

// writeLoadJournal writes, as thatch-bench's rehydrate does, sessions top-level sessions
// with entries pending entries spread evenly among them.
func writeLoadJournal(tb testing.TB, path string, sessions, entries int) {
	tb.Helper()
	store, err := journal.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer store.Close()
	st := runtime.NewState()
	per := entries / sessions
	now := time.Now()
	const chunk = 2000
	for s0 := 0; s0 < sessions; s0 += chunk {
		fx := runtime.NewEffects()
		for s := s0; s < min(s0+chunk, sessions); s++ {
			sid := fmt.Sprintf("ses_%07d", s)
			st.Sessions[sid] = &runtime.Session{ID: sid, HostID: "h1", Kind: runtime.KindTop, Status: runtime.StatusIdle, Directory: "/w", Title: "t", Touched: now}
			fx.Sessions[sid] = true
			for e := range per {
				fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryInsert, Root: sid, ID: fmt.Sprintf("call_%07d_%03d", s, e), At: now,
					Body: &runtime.Body{Tool: "bash", Args: json.RawMessage(`{"command":"go test ./..."}`), Output: strings.Repeat("o", 200)}})
			}
		}
		if err := store.Commit(&runtime.Batch{Now: now, State: st, Effects: fx}); err != nil {
			tb.Fatal(err)
		}
		for id := range fx.Sessions {
			delete(st.Sessions, id)
		}
	}
}

// BenchmarkLoad is journal.Load of a journal shaped like thatch-bench's rehydrate
// (10,000 sessions and 100,000 entries unless -load.sessions and -load.entries say
// otherwise; -load.journal keeps it between runs).
func BenchmarkLoad(b *testing.B) {
	path := *loadJournal
	if path == "" {
		path = filepath.Join(b.TempDir(), "thatch.db")
	}
	if _, err := os.Stat(path); err != nil {
		writeLoadJournal(b, path, *loadSessions, *loadEntries)
	}
	s, err := journal.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		st, _, _, err := s.Load()
		if err != nil {
			b.Fatal(err)
		}
		n = 0
		for _, sess := range st.Sessions {
			n += len(sess.Entries)
		}
	}
	b.ReportMetric(float64(n), "entries")
}
