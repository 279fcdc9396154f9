package memory

import (
	"context"
	"errors"
	"fmt"
)

// Group commit. The store has one writer connection, and every memory tool writes: a
// remember its memory, an update or a forget its change, the searches their queued use
// marks (used.go). One
// transaction per call made the calls queue behind each other's commits (and each commit
// flushed FTS5's pending terms as a segment of its own, which later searches seek through
// and later writes merge): at 200 calls/s over 100,000 memories a call waited 10–50 ms for
// the writer. So the writes that wait together commit together: writeGroups takes every
// write queued while the previous group ran, runs each in a savepoint of one transaction,
// and commits once. A write that fails rolls back its savepoint alone; a failure of the
// transaction itself (the commit, a savepoint) fails every write of the group, none of which
// is then committed. Each caller learns its result after the commit, as before.
//
// A group of one write needs no savepoint: its transaction is its savepoint. And a bulk
// write (an import, a pass's records) always runs alone: inside a savepoint, SQLite's
// in-memory statement journal is cut back at every statement by walking it from its start,
// which made an import of 100,000 memories take nine minutes instead of seconds.

// groupMax bounds the writes of one transaction.
const groupMax = 64

// errClosed answers a write that comes after Close.
var errClosed = errors.New("the memory store is closed")

// write is one withTx call waiting for the group writer.
type write struct {
	ctx   context.Context
	fn    func(cachedTx) error
	alone bool // a bulk write, in a transaction of its own
	done  chan error
}

// withTx runs fn in a writer transaction, rolling back what fn did unless fn and the commit
// succeed.
func (s *Store) withTx(ctx context.Context, fn func(cachedTx) error) error {
	return s.queueWrite(ctx, &write{ctx: ctx, fn: fn, done: make(chan error, 1)})
}

// withBulkTx is withTx for a write of many rows: it runs in a transaction of its own.
func (s *Store) withBulkTx(ctx context.Context, fn func(cachedTx) error) error {
	return s.queueWrite(ctx, &write{ctx: ctx, fn: fn, alone: true, done: make(chan error, 1)})
}

func (s *Store) queueWrite(ctx context.Context, w *write) error {
	if s.readOnly {
		return ErrReadOnly
	}
	select {
	case s.queue <- w:
	case <-s.stop:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-w.done
}

// writeGroups is the group writer: it runs until Close. It writes the queued used marks
// (used.go) when told of them and no write waits, or right after the group that was
// waiting, and once more at Close.
func (s *Store) writeGroups() {
	group := make([]*write, 0, groupMax)
	var held *write // a bulk write taken while gathering: the next group
	marksDue := false
	for {
		if held != nil {
			group, held = append(group[:0], held), nil
		} else {
			select {
			case w := <-s.queue:
				group = append(group[:0], w)
			case <-s.marks.kick:
				select {
				case w := <-s.queue: // a write waits: it goes first, the marks right after it
					group = append(group[:0], w)
					marksDue = true
				default:
					s.writeQueuedMarks()
					continue
				}
			case <-s.stop:
				s.writeQueuedMarks()
				return
			}
		}
	gather:
		for len(group) < groupMax && !group[0].alone {
			select {
			case w := <-s.queue:
				if w.alone {
					held = w
					break gather
				}
				group = append(group, w)
			default:
				break gather
			}
		}
		s.commitGroup(group)
		if marksDue {
			s.writeQueuedMarks()
			marksDue = false
		}
	}
}

// commitGroup runs group in one transaction and tells each write its result.
func (s *Store) commitGroup(group []*write) {
	errs := make([]error, len(group))
	ran := false
	err := func() error {
		// Not a caller's context: a caller that goes away must not end the others' transaction.
		ctx := context.Background()
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		alone := len(group) == 1 // the transaction is the write's savepoint
		for i, w := range group {
			if errs[i] = w.ctx.Err(); errs[i] != nil {
				continue
			}
			if !alone {
				if _, err := tx.ExecContext(ctx, `SAVEPOINT write`); err != nil {
					return err
				}
			}
			if errs[i] = w.fn(tx); errs[i] != nil {
				if alone {
					return nil // rolled back by the deferred Rollback; errs[0] says why
				}
				if _, err := tx.ExecContext(ctx, `ROLLBACK TO write`); err != nil {
					return fmt.Errorf("roll back a failed write (%v): %w", errs[i], err)
				}
			} else {
				ran = true
			}
			if !alone {
				if _, err := tx.ExecContext(ctx, `RELEASE write`); err != nil {
					return err
				}
			}
		}
		return tx.Commit()
	}()
	if err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	} else if ran {
		s.writes.Add(1)
		s.cp.Wrote()
		if group[0].alone {
			// A bulk write (an import's batch, a pass's records) writes as many pages as
			// hundreds of calls: counted as one write, an import of many batches on one
			// open store grew the WAL past 3 GB before the checkpointer was asked to copy
			// it back, and each batch read through it. The checkpoint runs beside the
			// writer, so the next write does not wait for it.
			s.cp.Kick()
		}
	}
	for i, w := range group {
		w.done <- errs[i]
	}
}
