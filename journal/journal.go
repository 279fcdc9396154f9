package journal

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/journal/checkpoint"
	"github.com/thatch-dev/thatch/journal/migrate"
	"github.com/thatch-dev/thatch/journal/sqlitedb"
	"github.com/thatch-dev/thatch/runtime"
	_ "modernc.org/sqlite"
)

//go:embed migrations/*.sql
var migrations embed.FS

// MaxDeadLetters bounds the dead-letter table; older rows are dropped.
const MaxDeadLetters = 1000

// maxDeadBody bounds a dead letter's kept body.
const maxDeadBody = 4096

// Store is the journal. It is not safe for concurrent writers: the runtime's owner
// goroutine is its only one. Reads from other goroutines (payloads, costs, dead letters)
// go through a pool of read-only connections, so they never wait for the writer's
// connection nor hold it while the owner commits.
type Store struct {
	// BeforeLoad, when set, is told what Load is about to read before it allocates the
	// state, and returns what Load calls once done: the daemon bounds the process's heap
	// there. The journal sets no policy of its own for the garbage collector.
	BeforeLoad func(LoadSize) (after func())

	db       *sql.DB // the one connection that writes, and the owner's reads
	r        *sql.DB // read-only connections for every other goroutine
	path     string
	instance string
	// readOnly marks a store of OpenReadOnly: every connection is mode=ro.
	readOnly bool

	ck      *checkpoint.Checkpointer // copies the WAL back beside the writer
	file    *sqlitedb.DB             // db, r and ck
	stmts   [nStmts]*sql.Stmt        // Commit's statements, prepared once on the writer
	payload *sql.Stmt                // payloadQuery, prepared once on the read pool (read.go)
}

var _ runtime.Journal = (*Store)(nil)

// fileOptions are the journal's file for package sqlitedb. auto_vacuum takes effect on a
// new file only (it precedes the first table): pages freed by completed entries then go
// back to the filesystem at each sweep.
var fileOptions = sqlitedb.Options{
	Noun: "journal", Name: "the journal",
	Damaged:     "is damaged or not thatch's",
	DamagedHint: "move it aside (keep it: it holds the pending entries) and start thatch again with a fresh journal; memories are in memories.db and stay",
	Migrations:  migrations, Pattern: "migrations/*.sql",
	WriterPragmas:   []string{"auto_vacuum(INCREMENTAL)", "foreign_keys(ON)"},
	CheckpointEvery: checkpoint.DefaultEvery, CheckpointMaxFrames: checkpoint.DefaultMaxFrames,
}

// Open opens (creating when absent) the journal at path.
func Open(path string) (*Store, error) {
	f, err := sqlitedb.Open(path, fileOptions)
	if err != nil {
		return nil, err
	}
	s := &Store{db: f.W, r: f.R, ck: f.CP, file: f, path: path}
	if err := getMeta(s.db, "instance", &s.instance); err != nil {
		f.Close()
		return nil, err
	}
	if err := s.prepare(); err != nil {
		s.closeStmts()
		f.Close()
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	if s.instance == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		s.instance = hex.EncodeToString(b[:])
		data, _ := json.Marshal(s.instance)
		if _, err := s.db.Exec(`INSERT INTO meta (key, value) VALUES ('instance', ?)`, string(data)); err != nil {
			s.Close()
			return nil, fmt.Errorf("name the journal: %w", err)
		}
	}
	return s, nil
}

// DiskFullIn is what a write that failed for a full disk says first: the disk is full,
// and which folder needs the space.
func DiskFullIn(dir string) string { return "disk full: free space in " + dir }

// Instance names the journal for good (idempotency keys of host calls).
func (s *Store) Instance() string { return s.instance }

// Path is the journal file.
func (s *Store) Path() string { return s.path }

// Close stops the checkpointer and closes the database.
func (s *Store) Close() error {
	s.closeStmts()
	return s.file.Close()
}

// The statements of Commit, prepared once on the writer's connection (Open): parsing them
// again at each row was a third of a commit's CPU.
type stmtID int

const (
	sDeleteHost stmtID = iota
	sUpsertHost
	sDeleteSession
	sUpsertSession
	sUpsertGone
	sDeleteGone
	sInsertEntry
	sClaimEntry
	sRecordCompleted
	sDeleteClaimed
	sReleaseAllClaimed
	sReleaseClaimed
	sDeleteEntries
	sReleaseEntry
	sDeleteEntry
	sCopyEntry
	sInsertLedger
	sInsertOutbox
	sDeleteOutbox
	sInsertApplied
	sInsertDeadLetter
	sTrimDeadLetters
	sPutMeta
	sPruneApplied
	sPruneLedger
	sPruneProvenance
	sTrimProvenance
	nStmts
)

var stmtSQL = [nStmts]string{
	sDeleteHost: `DELETE FROM hosts WHERE host_id = ?`,
	sUpsertHost: `INSERT INTO hosts (host_id, data) VALUES (?, ?)
				ON CONFLICT (host_id) DO UPDATE SET data = excluded.data`,
	sDeleteSession: `DELETE FROM sessions WHERE session_id = ?`,
	sUpsertSession: `INSERT INTO sessions (session_id, host_id, directory, touched_at, data) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (session_id) DO UPDATE SET host_id = excluded.host_id, directory = excluded.directory,
				touched_at = excluded.touched_at, data = excluded.data`,
	sUpsertGone:        `INSERT INTO gone (session_id, at) VALUES (?, ?) ON CONFLICT (session_id) DO UPDATE SET at = excluded.at`,
	sDeleteGone:        `DELETE FROM gone WHERE session_id = ?`,
	sInsertEntry:       `INSERT OR IGNORE INTO entries (root_id, entry_id, tool, created_at, body, size, trivial, title) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
	sClaimEntry:        `UPDATE entries SET claimed_by = ?, claimed_at = ? WHERE root_id = ? AND entry_id = ? AND claimed_by = ''`,
	sDeleteClaimed:     `DELETE FROM entries WHERE root_id = ? AND claimed_by = ?`,
	sReleaseAllClaimed: `UPDATE entries SET claimed_by = '', claimed_at = 0 WHERE root_id = ? AND claimed_by != ''`,
	sReleaseClaimed:    `UPDATE entries SET claimed_by = '', claimed_at = 0 WHERE root_id = ? AND claimed_by = ?`,
	sDeleteEntries:     `DELETE FROM entries WHERE root_id = ?`,
	sReleaseEntry:      `UPDATE entries SET claimed_by = '', claimed_at = 0 WHERE root_id = ? AND entry_id = ?`,
	sDeleteEntry:       `DELETE FROM entries WHERE root_id = ? AND entry_id = ?`,
	sCopyEntry: `INSERT OR IGNORE INTO entries (root_id, entry_id, tool, claimed_by, claimed_at, created_at, body, size, trivial, title)
				SELECT ?, ?, tool, claimed_by, claimed_at, created_at, body, size, trivial, title FROM entries WHERE root_id = ? AND entry_id = ?`,
	sInsertLedger: `INSERT OR IGNORE INTO ledger (child_id, root_id, project, directory, day, at, entries, tokens_in, tokens_out, cost, model, turns)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	sInsertOutbox:     `INSERT INTO outbox (host_id, call, created_at) VALUES (?, ?, ?)`,
	sDeleteOutbox:     `DELETE FROM outbox WHERE id = ?`,
	sInsertApplied:    `INSERT OR IGNORE INTO applied (event_id, stream_seq, applied_at) VALUES (?, ?, ?)`,
	sInsertDeadLetter: `INSERT INTO dead_letters (at, stream_seq, subject, reason, body) VALUES (?, ?, ?, ?, ?)`,
	sTrimDeadLetters:  `DELETE FROM dead_letters WHERE id <= (SELECT max(id) FROM dead_letters) - ?`,
	sPutMeta:          `INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
	sPruneApplied:     `DELETE FROM applied WHERE applied_at < ?`,
	sPruneLedger:      `DELETE FROM ledger WHERE at < ?`,
	sPruneProvenance:  `DELETE FROM provenance WHERE at < ?`,
	sTrimProvenance:   `DELETE FROM provenance WHERE id <= (SELECT max(id) FROM provenance) - ?`,
	// Provenance (issue 29): a claimant's entries are copied before they are deleted as
	// completed, in the same transaction. A row older than the title column (NULL) has its
	// title read from its body.
	sRecordCompleted: `INSERT INTO provenance (child_id, root_id, entry_id, tool, title, at)
				SELECT claimed_by, root_id, entry_id, tool, substr(coalesce(title, CAST(body AS TEXT) ->> '$.title', ''), 1, ?), ?
				FROM entries WHERE root_id = ? AND claimed_by = ? ORDER BY id`,
}

// prepare prepares Commit's statements on the writer (its one connection: no transaction
// may be open), and PayloadEntries' on the read pool.
func (s *Store) prepare() error {
	for id, q := range stmtSQL {
		st, err := s.db.Prepare(q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		s.stmts[id] = st
	}
	st, err := s.r.Prepare(payloadQuery)
	if err != nil {
		return fmt.Errorf("prepare %q: %w", payloadQuery, err)
	}
	s.payload = st
	return nil
}

func (s *Store) closeStmts() {
	for i, st := range s.stmts {
		if st != nil {
			st.Close()
			s.stmts[i] = nil
		}
	}
	if s.payload != nil {
		s.payload.Close() // kept: a payload read after Close gets "statement is closed"
	}
}

// batchTx is Commit's transaction: each statement is bound to it at its first use.
type batchTx struct {
	tx    *sql.Tx
	store *[nStmts]*sql.Stmt
	bound [nStmts]*sql.Stmt
}

func (b *batchTx) exec(id stmtID, args ...any) (sql.Result, error) {
	st := b.bound[id]
	if st == nil {
		if b.store[id] == nil { // a Store not opened by Open
			return b.tx.Exec(stmtSQL[id], args...)
		}
		st = b.tx.Stmt(b.store[id]) // the same prepared statement while the connection lives
		b.bound[id] = st
	}
	return st.Exec(args...)
}

func (b *batchTx) putMeta(key string, v any) error {
	data, _ := json.Marshal(v)
	_, err := b.exec(sPutMeta, key, string(data))
	return err
}

// DB exposes the database to tests and to read-only tooling.
func (s *Store) DB() *sql.DB { return s.db }

// withTx runs fn in a transaction, rolling back unless fn and the commit succeed.
func (s *Store) withTx(fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(context.Background(), nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// Commit persists one batch atomically.
func (s *Store) Commit(b *runtime.Batch) error {
	if s.readOnly {
		return fmt.Errorf("commit to the journal %s: it is open read-only", s.path)
	}
	err := s.withTx(func(tx *sql.Tx) error {
		t := &batchTx{tx: tx, store: &s.stmts}
		fx := b.Effects
		if fx == nil {
			fx = runtime.NewEffects()
		}
		for id := range fx.Hosts {
			h := b.State.Hosts[id]
			if h == nil {
				if _, err := t.exec(sDeleteHost, id); err != nil {
					return err
				}
				continue
			}
			data, _ := json.Marshal(h)
			if _, err := t.exec(sUpsertHost, id, data); err != nil {
				return err
			}
		}
		for id := range fx.Sessions {
			sess := b.State.Sessions[id]
			if sess == nil {
				if _, err := t.exec(sDeleteSession, id); err != nil {
					return err
				}
				continue
			}
			data, _ := json.Marshal(sess)
			if _, err := t.exec(sUpsertSession, id, sess.HostID, sess.Directory, ms(sess.Touched), data); err != nil {
				return err
			}
		}
		for id := range fx.Gone {
			var err error
			if at, ok := b.State.Gone[id]; ok {
				_, err = t.exec(sUpsertGone, id, at)
			} else {
				_, err = t.exec(sDeleteGone, id)
			}
			if err != nil {
				return err
			}
		}
		if err := writeEntries(t, fx.Entries, b.Now); err != nil {
			return err
		}
		for _, r := range fx.Ledger {
			if _, err := t.exec(sInsertLedger, r.Child, r.Root, r.Project, r.Directory, r.Day, ms(r.At), r.Entries,
				r.TokensIn, r.TokensOut, r.USD, r.Model, r.Turns); err != nil {
				return fmt.Errorf("ledger row of %s: %w", r.Child, err)
			}
		}
		for i := range fx.Calls {
			c := &fx.Calls[i]
			data, _ := json.Marshal(c)
			res, err := t.exec(sInsertOutbox, c.Host, data, ms(b.Now))
			if err != nil {
				return err
			}
			if c.ID, err = res.LastInsertId(); err != nil {
				return err
			}
		}
		for _, id := range b.Done {
			if _, err := t.exec(sDeleteOutbox, id); err != nil {
				return err
			}
		}
		now := ms(b.Now)
		for _, a := range b.Applied {
			if _, err := t.exec(sInsertApplied, a.ID, a.Seq, now); err != nil {
				return err
			}
		}
		for _, d := range b.DeadLetters {
			body := d.Body
			if len(body) > maxDeadBody {
				body = body[:maxDeadBody]
			}
			if _, err := t.exec(sInsertDeadLetter, now, d.Seq, d.Subject, d.Reason, body); err != nil {
				return err
			}
		}
		if len(b.DeadLetters) > 0 {
			if _, err := t.exec(sTrimDeadLetters, MaxDeadLetters); err != nil {
				return err
			}
		}
		if fx.Counters || len(b.DeadLetters) > 0 {
			if err := t.putMeta("counters", b.State.Counters); err != nil {
				return err
			}
		}
		if !b.PruneApplied.IsZero() {
			if _, err := t.exec(sPruneApplied, ms(b.PruneApplied)); err != nil {
				return err
			}
			if _, err := t.exec(sPruneLedger, ms(b.Now.Add(-LedgerRetention))); err != nil {
				return err
			}
			if _, err := t.exec(sPruneProvenance, ms(b.Now.Add(-LedgerRetention))); err != nil {
				return err
			}
			if _, err := t.exec(sTrimProvenance, MaxProvenance); err != nil {
				return err
			}
		}
		if b.StreamSeq > 0 {
			if err := t.putMeta("stream_seq", b.StreamSeq); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if migrate.DiskFull(err) {
			return fmt.Errorf("%s: commit journal batch: %w", DiskFullIn(filepath.Dir(s.path)), err)
		}
		return fmt.Errorf("commit journal batch: %w", err)
	}
	if s.ck != nil {
		s.ck.Wrote()
	}
	if !b.PruneApplied.IsZero() {
		// A sweep: give the free pages back. A failure costs only disk space.
		_, _ = s.db.Exec(`PRAGMA incremental_vacuum`)
		if s.ck != nil {
			s.ck.Kick()
		}
	}
	return nil
}

func writeEntries(t *batchTx, ops []runtime.EntryOp, now time.Time) error {
	for _, op := range ops {
		var err error
		switch op.Kind {
		case runtime.EntryInsert:
			body, _ := json.Marshal(op.Body)
			_, err = t.exec(sInsertEntry, op.Root, op.ID, op.Body.Tool, ms(op.At), body, op.Size, op.Trivial, op.Body.Title)
		case runtime.EntryClaim:
			for _, id := range op.IDs {
				if _, err = t.exec(sClaimEntry, op.Claimant, ms(op.At), op.Root, id); err != nil {
					break
				}
			}
		case runtime.EntryDeleteClaimed:
			// Completed: what the claimant completed is kept (provenance) before the rows go.
			_, err = t.exec(sRecordCompleted, ProvenanceTitleMax, ms(cmp.Or(op.At, now)), op.Root, op.Claimant)
			if err == nil {
				_, err = t.exec(sDeleteClaimed, op.Root, op.Claimant)
			}
		case runtime.EntryReleaseClaimed:
			if op.Claimant == "" {
				_, err = t.exec(sReleaseAllClaimed, op.Root)
			} else {
				_, err = t.exec(sReleaseClaimed, op.Root, op.Claimant)
			}
		case runtime.EntryDeleteAll:
			_, err = t.exec(sDeleteEntries, op.Root)
		case runtime.EntryRelease:
			_, err = t.exec(sReleaseEntry, op.Root, op.ID)
		case runtime.EntryDelete:
			_, err = t.exec(sDeleteEntry, op.Root, op.ID)
		case runtime.EntryMove:
			// A new row keeps arrival order: the moved entry goes last, as it does in memory.
			// It may change its id: a call of a session that turned out to be a child is
			// qualified by that session in its root (runtime.EntryID).
			from := cmp.Or(op.FromID, op.ID)
			_, err = t.exec(sCopyEntry, op.Root, op.ID, op.From, from)
			if err == nil {
				_, err = t.exec(sDeleteEntry, op.From, from)
			}
		}
		if err != nil {
			return fmt.Errorf("entry %s of %s: %w", op.ID, op.Root, err)
		}
	}
	return nil
}

// Applied returns which of ids were applied already.
func (s *Store) Applied(ids []string) (map[string]bool, error) {
	seen := map[string]bool{}
	const chunk = 500
	for len(ids) > 0 {
		n := min(chunk, len(ids))
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		rows, err := s.db.Query(`SELECT event_id FROM applied WHERE event_id IN (?`+strings.Repeat(",?", n-1)+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("read applied ids: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			seen[id] = true
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return seen, nil
}

func getMeta(db *sql.DB, key string, v any) error {
	var data string
	err := db.QueryRow(`SELECT value FROM meta WHERE key = ?`, key).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	return json.Unmarshal([]byte(data), v)
}

func scanJSON(db *sql.DB, query string, fn func([]byte) error) error {
	rows, err := db.Query(query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return err
		}
		if err := fn(data); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Payload reads the bodies of the entries of root claimed by claimant. Callers render
// payloads on their own goroutines, many at once: it reads through the read-only pool.
func (s *Store) Payload(root, claimant string) ([]runtime.PayloadEntry, error) {
	rows, err := s.r.Query(`SELECT entry_id, body FROM entries WHERE root_id = ? AND claimed_by = ? ORDER BY id`, root, claimant)
	if err != nil {
		return nil, fmt.Errorf("read payload of %s: %w", root, err)
	}
	defer rows.Close()
	var out []runtime.PayloadEntry
	for rows.Next() {
		var e runtime.PayloadEntry
		var body []byte
		if err := rows.Scan(&e.ID, &body); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(body, &e.Body); err != nil {
			return nil, fmt.Errorf("entry %s of %s: %w", e.ID, root, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Provenance's bounds: a completed call's title is cut to ProvenanceTitleMax characters
// (the payload shows as much of it), and the journal sweep keeps the newest MaxProvenance
// completed calls of the last LedgerRetention.
const (
	ProvenanceTitleMax = runtime.PayloadArgsMax
	MaxProvenance      = 500_000
)

// LedgerRetention is how long the ledger keeps an extraction's cost: the journal sweep
// drops older rows.
const LedgerRetention = 400 * 24 * time.Hour

// Costs returns the ledger's extraction spending from the UTC day since (2006-01-02) on,
// one row per day and project, newest day first, with one of the project's folders that
// day (empty when its rows predate the folder). It is safe to call from any goroutine.
func (s *Store) Costs(since string) ([]runtime.CostRow, error) {
	rows, err := s.r.Query(`SELECT day, project, coalesce(max(NULLIF(directory, '')), ''), count(*), sum(entries), sum(tokens_in),
		sum(tokens_out), sum(cost), group_concat(DISTINCT NULLIF(model, '')) FROM ledger WHERE day >= ?
		GROUP BY day, project ORDER BY day DESC, project`, since)
	if err != nil {
		return nil, fmt.Errorf("read the ledger: %w", err)
	}
	defer rows.Close()
	out := []runtime.CostRow{}
	for rows.Next() {
		var r runtime.CostRow
		var models sql.NullString
		if err := rows.Scan(&r.Day, &r.Project, &r.Directory, &r.Extractions, &r.Entries, &r.TokensIn, &r.TokensOut, &r.USD, &models); err != nil {
			return nil, fmt.Errorf("read the ledger: %w", err)
		}
		r.Tokens = r.TokensIn + r.TokensOut
		if models.String != "" {
			r.Models = strings.Split(models.String, ",")
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// DeadLetter is one stored rejected message.
type DeadLetter struct {
	At      time.Time
	Seq     uint64
	Subject string
	Reason  string
	Body    []byte
}

// DeadLetters returns the kept rejected messages, oldest first.
func (s *Store) DeadLetters() ([]DeadLetter, error) {
	rows, err := s.r.Query(`SELECT at, stream_seq, subject, reason, body FROM dead_letters ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DeadLetter
	for rows.Next() {
		var d DeadLetter
		var at int64
		if err := rows.Scan(&at, &d.Seq, &d.Subject, &d.Reason, &d.Body); err != nil {
			return nil, err
		}
		d.At = fromMS(at)
		out = append(out, d)
	}
	return out, rows.Err()
}

// DeadLetterPage returns at most limit kept rejected messages, newest first: those older
// than the row before when before > 0 (a row's ID is the next page's cursor). Bodies are
// cut to runtime.DeadBodyMax characters. It is safe to call from any goroutine.
func (s *Store) DeadLetterPage(before int64, limit int) ([]runtime.DeadLetterView, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	rows, err := s.r.Query(`SELECT id, at, stream_seq, subject, reason, body FROM dead_letters WHERE id < ? ORDER BY id DESC LIMIT ?`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("read the dead letters: %w", err)
	}
	defer rows.Close()
	out := []runtime.DeadLetterView{}
	for rows.Next() {
		var d runtime.DeadLetterView
		var at int64
		var body []byte
		if err := rows.Scan(&d.ID, &at, &d.StreamSeq, &d.Subject, &d.Reason, &body); err != nil {
			return nil, fmt.Errorf("read the dead letters: %w", err)
		}
		d.At, d.Body = fromMS(at), runtime.CutText(strings.ToValidUTF8(string(body), "\uFFFD"), runtime.DeadBodyMax)
		out = append(out, d)
	}
	return out, rows.Err()
}
