package memory

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"
)

// Used marks. A search and the injected section count the memories they show as used
// (used_at, which orders the section and keeps a memory from going stale), but their
// answer needs none of it: they answer from the read pool and queue the marks here. The
// group writer writes what is queued when it has no write waiting, in one transaction of
// one UPDATE, each memory's used_at moving only forward (max). A mark of an id already
// queued only moves its time; a new id past maxPendingMarks is dropped and counted rather
// than blocking the reader. Close writes what is queued; a crash may lose the marks not
// yet written, never a memory.

// maxPendingMarks bounds the ids queued to be marked used.
const maxPendingMarks = 4096

// usedMarks is the queue of used marks: memory id → the latest time it was used (ms).
type usedMarks struct {
	mu      sync.Mutex
	pending map[string]int64
	dropped atomic.Int64
	kick    chan struct{} // one pending signal to the group writer
}

func newUsedMarks() usedMarks {
	return usedMarks{pending: map[string]int64{}, kick: make(chan struct{}, 1)}
}

// markUsedLater queues ids to be marked used at now; it never waits for the writer. A
// read-only store marks nothing.
func (s *Store) markUsedLater(ids []string, now time.Time) {
	if s.readOnly || len(ids) == 0 {
		return
	}
	at := toMS(now)
	m := &s.marks
	m.mu.Lock()
	for _, id := range ids {
		if old, ok := m.pending[id]; ok {
			m.pending[id] = max(old, at)
			continue
		}
		if len(m.pending) >= maxPendingMarks {
			m.dropped.Add(1)
			continue
		}
		m.pending[id] = at
	}
	m.mu.Unlock()
	m.signal()
}

// signal tells the group writer there are marks to write, without waiting.
func (m *usedMarks) signal() {
	select {
	case m.kick <- struct{}{}:
	default: // one is pending already
	}
}

// take empties the queue and answers what it held (nil when nothing).
func (m *usedMarks) take() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pending) == 0 {
		return nil
	}
	p := m.pending
	m.pending = make(map[string]int64, len(p))
	return p
}

// MarksDropped counts the used marks dropped because the queue was full.
func (s *Store) MarksDropped() int64 { return s.marks.dropped.Load() }

// FlushUsed writes the used marks queued so far and waits for their commit.
func (s *Store) FlushUsed(ctx context.Context) error {
	if s.readOnly {
		return nil
	}
	return s.withTx(ctx, func(tx cachedTx) error { return writeMarks(ctx, tx, s.marks.take()) })
}

// writeQueuedMarks is the group writer's own write of the queued marks, in a transaction
// of its own (commitGroup); a failure loses those marks only.
func (s *Store) writeQueuedMarks() {
	p := s.marks.take()
	if p == nil {
		return
	}
	w := &write{ctx: context.Background(), fn: func(tx cachedTx) error { return writeMarks(context.Background(), tx, p) }, done: make(chan error, 1)}
	s.commitGroup([]*write{w})
}

// writeMarks sets used_at of each memory of marks to its time, never backwards, in one
// statement.
func writeMarks(ctx context.Context, tx cachedTx, marks map[string]int64) error {
	if len(marks) == 0 {
		return nil
	}
	data, err := json.Marshal(marks)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE memories SET used_at = max(memories.used_at, j.value) FROM json_each(?) AS j WHERE memories.id = j.key`, string(data))
	return err
}
