package memory

import (
	"context"
	"encoding/json"
	"maps"
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
//
// A search with a callID keeps its answer the same way (§6: a repeated callID repeats the
// first answer): queued beside the marks, where a repeat finds it until the writer has put
// it in the calls table, where a repeat finds it after. A crash may lose a queued answer:
// the repeat then searches again.

// maxPendingMarks bounds the ids queued to be marked used, and the answers queued.
const maxPendingMarks = 4096

// usedMarks is the queue of used marks: memory id → the latest time it was used (ms); and of
// the searches' answers to keep by callID.
type usedMarks struct {
	mu      sync.Mutex
	pending map[string]int64
	answers map[callKey]queuedAnswer
	dropped atomic.Int64
	kick    chan struct{} // one pending signal to the group writer
}

// callKey names a call: its session and callID.
type callKey struct{ session, call string }

// queuedAnswer is a search's answer waiting to be kept in the calls table.
type queuedAnswer struct {
	tool   string
	result []byte // the answer's JSON
	at     int64  // ms
}

func newUsedMarks() usedMarks {
	return usedMarks{pending: map[string]int64{}, answers: map[callKey]queuedAnswer{}, kick: make(chan struct{}, 1)}
}

// queued answers the queued answer of c's call, if one waits for the writer.
func (m *usedMarks) queued(c Caller) (queuedAnswer, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.answers[callKey{c.SessionID, c.CallID}]
	return a, ok
}

// keepLater queues the answer of c's call to be kept by callID, unless one is queued
// already (a concurrent repeat), which it answers instead. A full queue drops the answer:
// a repeat then searches again.
func (m *usedMarks) keepLater(c Caller, a queuedAnswer) (first queuedAnswer, repeat bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := callKey{c.SessionID, c.CallID}
	if old, ok := m.answers[k]; ok {
		return old, true
	}
	if len(m.answers) >= maxPendingMarks {
		m.dropped.Add(1)
		return a, false
	}
	m.answers[k] = a
	return a, false
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

// queue is what take empties: marks and answers.
type queue struct {
	marks   map[string]int64
	answers map[callKey]queuedAnswer
}

// take empties the queue and answers what it held (nil when nothing). The answers stay
// visible to queued until forget drops them after their commit.
func (m *usedMarks) take() *queue {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pending) == 0 && len(m.answers) == 0 {
		return nil
	}
	q := &queue{marks: m.pending, answers: maps.Clone(m.answers)}
	m.pending = make(map[string]int64, len(q.marks))
	return q
}

// forget drops the answers of q from the queue once they are committed (or lost).
func (m *usedMarks) forget(q *queue) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, a := range q.answers {
		if cur, ok := m.answers[k]; ok && cur.at == a.at && string(cur.result) == string(a.result) {
			delete(m.answers, k)
		}
	}
}

// MarksDropped counts the used marks (and searches' answers) dropped because the queue was
// full.
func (s *Store) MarksDropped() int64 { return s.marks.dropped.Load() }

// FlushUsed writes the used marks queued so far and waits for their commit.
func (s *Store) FlushUsed(ctx context.Context) error {
	if s.readOnly {
		return nil
	}
	// Even with nothing queued, a write through the writer: it commits after the writer's
	// own write of marks it took a moment ago.
	q := s.marks.take()
	if q != nil {
		defer s.marks.forget(q)
	}
	return s.withTx(ctx, func(tx cachedTx) error { return writeQueue(ctx, tx, q) })
}

// writeQueuedMarks is the group writer's own write of the queued marks, in a transaction
// of its own (commitGroup); a failure loses those marks only.
func (s *Store) writeQueuedMarks() {
	q := s.marks.take()
	if q == nil {
		return
	}
	defer s.marks.forget(q)
	w := &write{ctx: context.Background(), fn: func(tx cachedTx) error { return writeQueue(context.Background(), tx, q) }, done: make(chan error, 1)}
	s.commitGroup([]*write{w})
}

// writeQueue writes the marks and keeps the answers of q.
func writeQueue(ctx context.Context, tx cachedTx, q *queue) error {
	if q == nil {
		return nil
	}
	if err := writeMarks(ctx, tx, q.marks); err != nil {
		return err
	}
	for k, a := range q.answers {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO calls (session_id, call_id, tool, result, at) VALUES (?, ?, ?, ?, ?)`,
			k.session, k.call, a.tool, string(a.result), a.at); err != nil {
			return err
		}
	}
	return nil
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
