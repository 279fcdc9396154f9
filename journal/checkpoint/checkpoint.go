package checkpoint

import (
	"database/sql"
	"sync"
	"sync/atomic"

	_ "modernc.org/sqlite"
)

// Defaults of Start.
const (
	DefaultEvery     = 64
	DefaultMaxFrames = 32768 // 128 MiB of 4 KiB pages
)

// Checkpointer is the background checkpointer of one database file.
type Checkpointer struct {
	db        *sql.DB
	every     int64
	maxFrames int64

	writes   atomic.Int64 // commits reported
	runs     atomic.Int64 // checkpoints run
	restarts atomic.Int64 // RESTART checkpoints (the WAL had reached maxFrames)

	kick       chan struct{}
	stop, done chan struct{}
	closeOnce  sync.Once
	closeErr   error
}

// Start opens a connection of its own to the SQLite database at path (a file name, not a
// DSN) and starts checkpointing it every every reported commits (0: DefaultEvery), with a
// RESTART checkpoint once the WAL holds maxFrames pages (0: DefaultMaxFrames). The
// writer's connection must be opened with wal_autocheckpoint(0).
func Start(path string, every, maxFrames int) (*Checkpointer, error) {
	if every <= 0 {
		every = DefaultEvery
	}
	if maxFrames <= 0 {
		maxFrames = DefaultMaxFrames
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	c := &Checkpointer{
		db: db, every: int64(every), maxFrames: int64(maxFrames),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go c.run()
	return c, nil
}

// Wrote counts one committed write transaction, and asks for a checkpoint every Every.
// It never waits.
func (c *Checkpointer) Wrote() {
	if c.writes.Add(1)%c.every == 0 {
		c.Kick()
	}
}

// Kick asks for a checkpoint now, without waiting for it.
func (c *Checkpointer) Kick() {
	select {
	case c.kick <- struct{}{}:
	default: // one is pending already
	}
}

// Runs counts the kicks served, and the RESTART checkpoints run.
func (c *Checkpointer) Runs() (kicks, restarts int64) { return c.runs.Load(), c.restarts.Load() }

// run checkpoints whenever kicked, until Close. Errors are left out: a failing checkpoint
// only lets the WAL grow, and the writes that follow report a failing disk themselves.
func (c *Checkpointer) run() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
			c.checkpoint()
			c.runs.Add(1)
		}
	}
}

// catchUp is how many PASSIVE checkpoints one kick runs at most to catch up with the
// writer.
const catchUp = 4

// checkpoint copies the WAL back. The WAL restarts from its beginning only when the
// writer begins a transaction with every frame copied: a checkpoint that the writer's
// commits overtook (a long one, under load) leaves the WAL to grow. So it checkpoints
// again while the writer wrote meanwhile, each time only what it wrote: these are short,
// and the last one most likely ends between two commits. Only a WAL at maxFrames pages,
// which these never caught up with, gets a RESTART checkpoint, which makes the writer
// wait while it copies what is left.
func (c *Checkpointer) checkpoint() {
	last := int64(-1)
	for range catchUp {
		var busy, log, copied int64
		if err := c.db.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &copied); err != nil {
			return
		}
		if log >= c.maxFrames {
			_, _ = c.db.Exec(`PRAGMA wal_checkpoint(RESTART)`)
			c.restarts.Add(1)
			return
		}
		if log == last || log <= 0 {
			return // the writer wrote nothing since the last one: it restarts the WAL
		}
		last = log
	}
}

// Close stops the checkpointer and closes its connection; closing again does nothing.
func (c *Checkpointer) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		<-c.done
		c.closeErr = c.db.Close()
	})
	return c.closeErr
}
