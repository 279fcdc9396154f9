package memory

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// flushUsed writes the used marks queued so far.
func flushUsed(t testing.TB, s *Store) {
	t.Helper()
	if err := s.FlushUsed(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// holdWriter runs a write that holds the store's writer until the returned release is
// called; it returns once the write runs.
func holdWriter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	running, free, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- s.withTx(context.Background(), func(cachedTx) error {
			close(running)
			<-free
			return nil
		})
	}()
	<-running
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(free)
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release) // before the store's Close, which would wait for the writer
	return release
}

// TestSearchWaitsForNoWrite: with the writer held by another write, a search and a
// section still answer (from the read pool), and their marks arrive once it is free.
func TestSearchWaitsForNoWrite(t *testing.T) {
	s := setup(t)
	m := remember(t, s, alice, "the deploy key lives in the vault").Memory
	release := holdWriter(t, s)
	// A deadline only so that a search that waits for the writer fails instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := s.Search(ctx, alice, "deploy key", nil, 0, t0)
	if err != nil || len(r.Hits) != 1 || r.Hits[0].Memory.UsedAt == nil || !r.Hits[0].Memory.UsedAt.Equal(t0) {
		t.Fatalf("search while the writer is busy: %+v %v", r, err)
	}
	if sec, err := s.Section(ctx, alice.Project, 2000, t0.Add(time.Hour)); err != nil || sec == "" {
		t.Fatalf("section while the writer is busy: %q %v", sec, err)
	}
	release()
	flushUsed(t, s)
	if got, _, _ := s.Get(ctx, m.ID); got.UsedAt == nil || !got.UsedAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("used at %v, want %v", got.UsedAt, t0.Add(time.Hour))
	}
}

// TestUsedMarksCoalesceNeverBackwardsAndCloseWritesThem: marks queued while the writer
// is busy are written together, a mark older than the one stored does not move used_at
// back, and Close writes what is still queued.
func TestUsedMarksCoalesceNeverBackwardsAndCloseWritesThem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memories.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []string
	for i := range 20 {
		ids = append(ids, remember(t, s, alice, fmt.Sprintf("note %d about the queue", i)).Memory.ID)
	}
	release := holdWriter(t, s)
	before := s.Writes()
	for i := range 20 {
		if _, err := s.Search(ctx, alice, "queue", nil, 50, t0.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	release()
	flushUsed(t, s)
	// The held write, the marks of the twenty searches, and the flush (empty, or the marks).
	if n := s.Writes() - before; n > 3 {
		t.Errorf("%d write transactions for the marks of 20 searches, want them coalesced", n)
	}
	last := t0.Add(19 * time.Minute)
	for _, id := range ids {
		if got, _, _ := s.Get(ctx, id); got.UsedAt == nil || !got.UsedAt.Equal(last) {
			t.Fatalf("%s used at %v, want %v", id, got.UsedAt, last)
		}
	}
	// Older than what is stored: used_at stays.
	s.markUsedLater(ids[:1], t0)
	flushUsed(t, s)
	if got, _, _ := s.Get(ctx, ids[0]); !got.UsedAt.Equal(last) {
		t.Errorf("used at %v after an older mark, want %v", got.UsedAt, last)
	}
	// Close writes the queued marks: these are queued without telling the writer, so
	// that only Close writes them.
	final := t0.Add(time.Hour)
	s.marks.mu.Lock()
	for _, id := range ids[:2] {
		s.marks.pending[id] = toMS(final)
	}
	s.marks.mu.Unlock()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, Options{})
	for _, id := range ids[:2] {
		if got, _, _ := s.Get(ctx, id); got.UsedAt == nil || !got.UsedAt.Equal(final) {
			t.Errorf("%s used at %v after Close, want %v", id, got.UsedAt, final)
		}
	}
}

// TestUsedMarksFullQueueDrops: past maxPendingMarks ids a new mark is dropped and
// counted, not waited for; a mark of an id already queued still moves its time.
func TestUsedMarksFullQueueDrops(t *testing.T) {
	s := setup(t)
	m := remember(t, s, alice, "kept despite the full queue").Memory
	release := holdWriter(t, s)
	s.markUsedLater([]string{m.ID}, t0)
	fake := make([]string, maxPendingMarks+9)
	for i := range fake {
		fake[i] = fmt.Sprintf("mem_%020x", i)
	}
	s.markUsedLater(fake, t0)
	if got := s.MarksDropped(); got != 10 {
		t.Errorf("dropped %d marks, want 10", got)
	}
	s.markUsedLater([]string{m.ID}, t0.Add(time.Minute))
	release()
	flushUsed(t, s)
	if got, _, _ := s.Get(context.Background(), m.ID); got.UsedAt == nil || !got.UsedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("used at %v, want %v", got.UsedAt, t0.Add(time.Minute))
	}
}
