package memory

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"testing"
)

// metaKeys is the keys of the meta table, which these tests write, but the live count
// (migration 11) and the team clock (persisted at open), which the store keeps.
func metaKeys(t *testing.T, s *Store) map[string]bool {
	t.Helper()
	keys, err := ids(context.Background(), s.r, `SELECT key FROM meta WHERE key NOT IN ('live_memories', ?, ?)`, metaClockWall, metaClockLogical)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, k := range keys {
		out[k] = true
	}
	return out
}

// TestGroupCommit runs one group directly: a failed write and a cancelled one leave no
// trace, the others commit together, in one transaction.
func TestGroupCommit(t *testing.T) {
	s := setup(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	bad := errors.New("bad write")
	var group []*write
	for i := range 6 {
		ctx := context.Background()
		if i == 4 {
			ctx = cancelled
		}
		group = append(group, &write{ctx: ctx, done: make(chan error, 1), fn: func(tx cachedTx) error {
			if err := setMeta(ctx, tx, fmt.Sprintf("k%d", i), int64(i)); err != nil {
				return err
			}
			if i == 2 {
				return bad // after writing: its savepoint is rolled back
			}
			return nil
		}})
	}
	before := s.Writes()
	s.commitGroup(group)
	for i, w := range group {
		err := <-w.done
		switch {
		case i == 2 && !errors.Is(err, bad), i == 4 && !errors.Is(err, context.Canceled), i != 2 && i != 4 && err != nil:
			t.Errorf("write %d: %v", i, err)
		}
	}
	if got := s.Writes() - before; got != 1 {
		t.Errorf("%d transactions committed, want 1", got)
	}
	if got, want := fmt.Sprint(metaKeys(t, s)), fmt.Sprint(map[string]bool{"k0": true, "k1": true, "k3": true, "k5": true}); got != want {
		t.Errorf("committed %s, want %s", got, want)
	}
}

// TestGroupCommitFailsTogether: when the transaction itself fails, no write of the group is
// committed and every one is told.
func TestGroupCommitFailsTogether(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	var group []*write
	for i := range 3 {
		group = append(group, &write{ctx: ctx, done: make(chan error, 1), fn: func(tx cachedTx) error {
			if err := setMeta(ctx, tx, fmt.Sprintf("k%d", i), 1); err != nil {
				return err
			}
			if i == 1 { // ends the transaction under the group: its savepoint is gone
				_, err := tx.ExecContext(ctx, `ROLLBACK`)
				return errors.Join(err, errors.New("rolled back"))
			}
			return nil
		}})
	}
	s.commitGroup(group)
	for i, w := range group {
		if err := <-w.done; err == nil {
			t.Errorf("write %d succeeded in a failed transaction", i)
		}
	}
	if keys := metaKeys(t, s); len(keys) != 0 {
		t.Errorf("committed %v of a failed transaction", keys)
	}
}

// TestLoneWriteFails: a group of one write runs without a savepoint; when it fails, what it
// wrote is rolled back and nothing is committed.
func TestLoneWriteFails(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	bad := errors.New("bad write")
	w := &write{ctx: ctx, done: make(chan error, 1), fn: func(tx cachedTx) error {
		if err := setMeta(ctx, tx, "k", 1); err != nil {
			return err
		}
		return bad
	}}
	before := s.Writes()
	s.commitGroup([]*write{w})
	if err := <-w.done; !errors.Is(err, bad) {
		t.Errorf("the write's result: %v", err)
	}
	if keys := metaKeys(t, s); len(keys) != 0 || s.Writes() != before {
		t.Errorf("a failed lone write committed %v (%d transactions)", keys, s.Writes()-before)
	}
}

// TestBulkWriteRunsAlone: a bulk write queued among others shares no transaction with them.
// Each write notes the store's count of committed transactions as it runs (the writer's
// goroutine counts them after each commit): the writes of one group note the same count.
func TestBulkWriteRunsAlone(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	for round := range 10 {
		release := make(chan struct{})
		held := make(chan struct{})
		go s.withTx(ctx, func(cachedTx) error { close(held); <-release; return nil })
		<-held // the writer waits: what comes next queues up
		var mu sync.Mutex
		txOf := map[string]int64{}
		var wg sync.WaitGroup
		for i := range 7 {
			name, run := fmt.Sprintf("w%d", i), s.withTx
			if i == 3 {
				name, run = "bulk", s.withBulkTx
			}
			wg.Go(func() {
				if err := run(ctx, func(tx cachedTx) error {
					mu.Lock()
					txOf[name] = s.Writes()
					mu.Unlock()
					return setMeta(ctx, tx, name, 1)
				}); err != nil {
					t.Error(err)
				}
			})
		}
		for range 100 {
			goruntime.Gosched() // let the writes queue
		}
		close(release)
		wg.Wait()
		for name, tx := range txOf {
			if name != "bulk" && tx == txOf["bulk"] {
				t.Fatalf("round %d: %s ran in the bulk write's transaction: %v", round, name, txOf)
			}
		}
	}
}

// TestConcurrentWrites: many writers at once through withTx, some failing: each learns its
// own result and exactly the successful ones are kept.
func TestConcurrentWrites(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 200)
	for i := range errs {
		wg.Go(func() {
			errs[i] = s.withTx(ctx, func(tx cachedTx) error {
				if err := setMeta(ctx, tx, fmt.Sprintf("k%03d", i), int64(i)); err != nil {
					return err
				}
				if i%7 == 0 {
					return fmt.Errorf("write %d fails", i)
				}
				return nil
			})
		})
	}
	wg.Wait()
	keys := metaKeys(t, s)
	for i, err := range errs {
		k := fmt.Sprintf("k%03d", i)
		if (i%7 == 0) != (err != nil) || keys[k] == (err != nil) {
			t.Errorf("write %d: err %v, kept %v", i, err, keys[k])
		}
	}
	s.Close()
	if err := s.withTx(ctx, func(cachedTx) error { return nil }); !errors.Is(err, errClosed) {
		t.Errorf("a write after Close: %v", err)
	}
}
