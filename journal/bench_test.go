package journal_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
)

// BenchmarkCommitBatch writes one apply-loop batch: 512 applied events, each buffering an
// entry, with the session rows they touched.
func BenchmarkCommitBatch(b *testing.B) {
	s, err := journal.Open(filepath.Join(b.TempDir(), "thatch.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	st := runtime.NewState()
	for i := range 50 {
		id := fmt.Sprintf("ses_%d", i)
		st.Sessions[id] = &runtime.Session{ID: id, HostID: "h1", Kind: runtime.KindTop}
	}
	output := strings.Repeat("o", 1500)
	now := time.Now()
	n := 0
	for b.Loop() {
		fx := runtime.NewEffects()
		batch := &runtime.Batch{Now: now, State: st, Effects: fx, StreamSeq: uint64(n + 512)}
		for j := range 512 {
			root := fmt.Sprintf("ses_%d", j%50)
			fx.Sessions[root] = true
			id := fmt.Sprintf("e%d", n+j)
			fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryInsert, Root: root, ID: id, At: now,
				Body: &runtime.Body{Tool: "bash", Output: output}})
			batch.Applied = append(batch.Applied, runtime.Applied{ID: id, Seq: uint64(n + j)})
		}
		if err := s.Commit(batch); err != nil {
			b.Fatal(err)
		}
		n += 512
	}
	b.ReportMetric(float64(b.N*512)/b.Elapsed().Seconds(), "events/s")
}
