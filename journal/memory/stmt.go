package memory

import (
	"context"
	"database/sql"
	"sync"
)

// SQLite parses and plans a statement each time it is prepared, and database/sql prepares
// (and finalizes) a statement for every query of a plain QueryContext: at 100,000 memories
// that was a sixth of a memory tool's CPU, and four fifths of the hygiene signals an
// extraction payload carries. The store's pools keep their statements instead: db and
// cachedTx are *sql.DB and *sql.Tx whose queries go through a statement prepared once per
// connection (database/sql prepares a pool's statement on each connection it runs on, and a
// transaction reuses its connection's).

// stmtCacheMax bounds the statements a pool keeps; most queries are fixed texts, and the
// few built from a list (placeholders, project lists) come in a handful of lengths. A
// query past the bound is prepared for its call alone, as before.
const stmtCacheMax = 256

// stmtCache is a pool's prepared statements by query text.
type stmtCache struct {
	db      *sql.DB
	mu      sync.Mutex
	m       map[string]*sql.Stmt
	pending map[string]bool // being prepared
	closed  bool
	preps   sync.WaitGroup // the prepare goroutines running
}

func newStmtCache(d *sql.DB) *stmtCache {
	return &stmtCache{db: d, m: map[string]*sql.Stmt{}, pending: map[string]bool{}}
}

// get is query's kept statement, or nil the first time: the caller runs the query plainly,
// and the statement is prepared on a goroutine of its own. Never here: preparing takes a
// connection of the pool, and a caller in a transaction holds one already (the writer's
// pool has one), so it would wait for itself.
func (c *stmtCache) get(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st
	}
	if c.closed || c.pending[query] || len(c.m)+len(c.pending) >= stmtCacheMax {
		return nil
	}
	c.pending[query] = true
	c.preps.Add(1)
	go c.prepare(query)
	return nil
}

// prepare prepares query on the pool and keeps it; a statement that does not prepare is
// left to plain queries, which report the error.
func (c *stmtCache) prepare(query string) {
	defer c.preps.Done()
	st, err := c.db.PrepareContext(context.Background(), query)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		if err == nil {
			_ = st.Close()
		}
		return
	}
	if err != nil {
		return // stays pending: not tried again
	}
	delete(c.pending, query)
	c.m[query] = st
}

// close closes the kept statements and waits for the prepares in flight (they close what
// they prepare); get prepares no more. So no goroutine of the store outlives it, and
// none opens a connection to the file after the store is closed.
func (c *stmtCache) close() {
	c.mu.Lock()
	for _, st := range c.m {
		_ = st.Close()
	}
	c.m, c.closed = nil, true
	c.mu.Unlock()
	c.preps.Wait()
}

// db is a pool of the store whose queries use kept statements.
type db struct {
	*sql.DB
	stmts *stmtCache
}

func newDB(d *sql.DB) db { return db{DB: d, stmts: newStmtCache(d)} }

func (d db) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := d.stmts.get(query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return d.DB.QueryContext(ctx, query, args...)
}

func (d db) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := d.stmts.get(query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return d.DB.QueryRowContext(ctx, query, args...)
}

func (d db) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := d.stmts.get(query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return d.DB.ExecContext(ctx, query, args...)
}

// BeginTx begins a transaction whose queries use the pool's kept statements.
func (d db) BeginTx(ctx context.Context, opts *sql.TxOptions) (cachedTx, error) {
	tx, err := d.DB.BeginTx(ctx, opts)
	return cachedTx{Tx: tx, stmts: d.stmts}, err
}

// cachedTx is a transaction of a db: its queries run the pool's kept statements on the
// transaction's connection.
type cachedTx struct {
	*sql.Tx
	stmts *stmtCache
}

func (t cachedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := t.stmts.get(query); st != nil {
		return t.Tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, query, args...)
}

func (t cachedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := t.stmts.get(query); st != nil {
		return t.Tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}

func (t cachedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := t.stmts.get(query); st != nil {
		return t.Tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, query, args...)
}
