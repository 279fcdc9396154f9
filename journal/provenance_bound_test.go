package journal

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/runtime"
)

// TestProvenanceIsBounded: the journal sweep keeps the newest MaxProvenance completed calls
// (by row id: rows 5 and 6 stand in for the oldest ones of a full table).
func TestProvenanceIsBounded(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, id := range []int{5, 6, MaxProvenance + 5} {
		if _, err := s.db.Exec(`INSERT INTO provenance (id, child_id, root_id, entry_id, tool, title, at) VALUES (?, 'ses_x', 'ses_a', 'c' || ?1, 'read', '', ?)`,
			id, now.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Commit(&runtime.Batch{Now: now, State: runtime.NewState(), PruneApplied: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var n int
	var first string
	if err := s.db.QueryRow(`SELECT count(*), (SELECT entry_id FROM provenance ORDER BY id LIMIT 1) FROM provenance`).Scan(&n, &first); err != nil {
		t.Fatal(err)
	}
	if n != 2 || first != "c6" {
		t.Fatalf("after a sweep: %d completed calls kept, the oldest %s; want 2, the oldest c6", n, first)
	}
}
