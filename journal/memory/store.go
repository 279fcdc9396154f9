package memory

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thatch-dev/thatch/journal/checkpoint"
	"github.com/thatch-dev/thatch/journal/sqlitedb"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

//go:embed migrations/*.sql
var migrations embed.FS

// ErrNotFound is an id that is unknown, forgotten, or of another project than the caller's.
var ErrNotFound = errors.New("memory not found")

// ErrBadRequest is a request the store refuses as given; the wrapping message says why.
var ErrBadRequest = errors.New("bad request")

// Kinds are the kinds a memory can have; the first is the default.
var Kinds = []string{"fact", "decision", "preference", "command", "pitfall", "todo"}

// Limits of a memory, in characters (runes) after trimming.
const (
	MaxContent = 2000
	MaxTags    = 8
	MaxTag     = 32
	maxBranch  = 200
)

// The tools whose answers the callID memo keeps (a search's through the writer's queue,
// used.go), and the names the memo keeps a dismissal's and a restore's answers under.
const (
	toolRemember = protocol.ToolRemember
	toolSearch   = protocol.ToolSearch
	toolUpdate   = protocol.ToolUpdate
	toolForget   = protocol.ToolForget
	toolDismiss  = "memory_dismiss"
	toolRestore  = "memory_restore"
)

// Source is the call that wrote a memory: a session's tool call, or, for a memory written
// outside a tracked session (protocol §10), the host and the client it came through
// (thatch mcp: host "mcp", client the MCP client's name).
type Source struct {
	SessionID string `json:"sessionID"`
	CallID    string `json:"callID,omitempty"`
	Host      string `json:"host,omitempty"`
	Client    string `json:"client,omitempty"`
}

// Memory is one thing a project learned. Times are UTC with millisecond precision.
type Memory struct {
	ID          string     `json:"id"`
	Project     string     `json:"project"`
	Branch      string     `json:"branch,omitempty"`
	Directory   string     `json:"directory,omitempty"` // where it was written from (RememberArgs.Directory)
	BranchTip   string     `json:"branchTip,omitempty"` // Branch's tip commit then, if known
	Kind        string     `json:"kind"`
	Content     string     `json:"content"`
	Tags        []string   `json:"tags"` // never nil, so JSON shows []
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	UsedAt      *time.Time `json:"usedAt,omitempty"`
	Source      Source     `json:"source"`
	ForgottenAt *time.Time `json:"forgottenAt,omitempty"`
	// Folder is the project's folder as the store knows it (see Projects), for people: set
	// by List, Export and Get, not kept with the memory; an import records it for the
	// project when the store knows none.
	Folder string `json:"folder,omitempty"`
	// Author made the memory's current version (protocol §9): this thatch's author for a
	// local change, a teammate's for a version received; "" before team memory existed.
	Author string `json:"author,omitempty"`
	// Shared says the memory's project is shared with the team.
	Shared bool `json:"shared,omitempty"`
}

// Caller is who acts: Project is the caller's project key, SessionID and CallID identify the
// tool call (CallID "" = no memo). Project "" is a person, who may forget any project's memory
// and searches every project; a person cannot remember or update. Directory, when known, is
// the caller's root session's directory: a remember or an update records it as the
// project's folder (Projects). Host and Client, for a caller that is no tracked session
// (thatch mcp), are what a memory it writes keeps as its source.
type Caller struct {
	Project, SessionID, CallID string
	Directory                  string
	Host, Client               string
}

// Similar is another live memory of the project that looks like the one written.
type Similar struct {
	ID    string  `json:"id"`
	Score float64 `json:"score"`
}

// RememberArgs are memory_remember's arguments. Directory is the directory the memory is
// written from (the caller's root session's, absolute) and BranchTip the commit Branch
// pointed at then, as GitBranch reads them; both may be "". CheckBranches needs them to tell
// an orphaned branch memory from a merged one.
type RememberArgs struct {
	Content, Kind, Branch string
	Tags                  []string
	Directory, BranchTip  string
}

// Remembered is memory_remember's answer. Repeat is true when it repeats the answer of an
// earlier call with the same callID.
type Remembered struct {
	Memory  Memory    `json:"memory"`
	Created bool      `json:"created"`
	Similar []Similar `json:"similar"`
	Repeat  bool      `json:"-"`
}

// UpdateArgs are memory_update's arguments; nil fields stay as they are.
type UpdateArgs struct {
	Content, Kind *string
	Tags          *[]string
	// ProjectWide drops the memory's branch: it holds for the whole project now (a
	// merged branch's memory promoted, an orphan kept).
	ProjectWide bool
}

// Changed is the answer of Update and Forget: the memory after the change.
type Changed struct {
	Memory Memory `json:"memory"`
	Repeat bool   `json:"-"`
}

// Audit is one change of a memory. Before is the content before an update or a forget.
type Audit struct {
	At        time.Time `json:"at"`
	Op        string    `json:"op"` // create, update, forget, import, restore or dismiss
	SessionID string    `json:"sessionID,omitempty"`
	CallID    string    `json:"callID,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Before    string    `json:"before,omitempty"`
	Author    string    `json:"author,omitempty"` // who made the change ("" before team memory existed)
}

// The limits List and Export take when given none.
const (
	DefaultListLimit   = 100
	DefaultExportLimit = 1000
)

// ListQuery selects live memories of the project keys Projects (none = every project; Resolve
// turns a folder into keys). With Query the best matches come first; without, the newest
// first, After being the last id of the previous page.
type ListQuery struct {
	Projects    []string
	Query, Kind string
	Limit       int
	After       string
	// Forgotten lists the forgotten memories instead of the live ones (not with Query: a
	// search looks only at live memories).
	Forgotten bool
}

// Options tune a Store.
type Options struct {
	// Redact, when set, rewrites content and tags before they are validated and stored, so
	// secrets never reach the file.
	Redact func(string) string
	// StaleAfter is how long a live memory may go neither used nor updated before it is
	// stale: it leaves injection (Section) but stays searchable. 0 is DefaultStaleAfter.
	StaleAfter time.Duration
	// Author is the name on this thatch's changes (THATCH_TEAM_AUTHOR); needed to share.
	Author string
}

// DefaultStaleAfter is Options.StaleAfter when zero (THATCH_MEMORY_STALE_DAYS' default).
const DefaultStaleAfter = 90 * 24 * time.Hour

// checkpointEvery is how many write transactions go by between two WAL checkpoints.
const checkpointEvery = 32

// fileOptions are the store's file for package sqlitedb. temp_store keeps statement
// journals off the disk. The page caches (SQLite's default is 2 MiB a connection) hold the
// full-text index's pages that every search reads and every write merges: with the
// default the writer spilled merged pages to the WAL before its commit and rewrote them
// there, and the readers read the index's pages from the file at each query.
var fileOptions = sqlitedb.Options{
	Noun: "memories", Name: "memories",
	Damaged: "is damaged", DamagedHint: "move it aside and start thatch again; the old file is kept",
	WrapMigrate: true,
	Migrations:  migrations, Pattern: "migrations/*.sql",
	WriterPragmas:   []string{"temp_store(MEMORY)", "cache_size(-16384)"},
	ReaderPragmas:   []string{"cache_size(-8192)"},
	CheckpointEvery: checkpointEvery,
}

// Store is the memory store. It is safe for concurrent use.
type Store struct {
	w, r       db                       // w: the one writer connection; r: read-only connections (stmt.go)
	cp         *checkpoint.Checkpointer // copies the WAL back beside the writer
	file       *sqlitedb.DB             // w, r and cp
	path       string
	redact     func(string) string
	staleAfter time.Duration

	writes    atomic.Int64  // committed write transactions
	signals   signalsMemo   // the last Signals answer of each project (hygiene.go)
	related   relatedMemo   // the last Related answers (search.go)
	queue     chan *write   // to the group writer (group.go)
	marks     usedMarks     // used marks queued for the group writer (used.go)
	stop      chan struct{} // closed by Close: the group writer ends
	written   sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
	readOnly  bool // a store of OpenReadOnly: no writer, no checkpointer

	author string // Options.Author
	team   teamState
}

// Open opens (creating when absent) the memory store at path.
func Open(path string, opts Options) (*Store, error) {
	if opts.StaleAfter < 0 {
		return nil, fmt.Errorf("open memories %s: StaleAfter %v is negative; give a positive duration, or 0 for %v", path, opts.StaleAfter, DefaultStaleAfter)
	}
	f, err := sqlitedb.Open(path, fileOptions)
	if err != nil {
		return nil, err
	}
	s := &Store{
		w: newDB(f.W), r: newDB(f.R), cp: f.CP, file: f, path: path, redact: opts.Redact, staleAfter: cmp.Or(opts.StaleAfter, DefaultStaleAfter),
		queue: make(chan *write), stop: make(chan struct{}), marks: newUsedMarks(),
	}
	s.written.Go(s.writeGroups)
	if s.redact == nil {
		s.redact = func(v string) string { return v }
	}
	s.author = strings.TrimSpace(opts.Author)
	if err := s.loadTeam(); err != nil {
		s.Close()
		return nil, fmt.Errorf("open memories %s: %w", path, err)
	}
	return s, nil
}

// Writes counts the store's committed write transactions since it was opened: a reader
// that saw another count knows the memories may have changed.
func (s *Store) Writes() int64 { return s.writes.Load() }

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// Close stops the checkpointer and closes the database; closing again does nothing.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.written.Wait()
		s.r.stmts.close()
		s.w.stmts.close()
		s.closeErr = s.file.Close()
	})
	return s.closeErr
}

// queryer is a reader handle or a writer transaction.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Count is the number of live memories: one row the triggers of migration 11 keep, not a
// scan (status asks every second).
func (s *Store) Count(ctx context.Context) (live int, err error) {
	if err := s.r.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'live_memories'`).Scan(&live); err != nil {
		return 0, fmt.Errorf("count memories: %w", err)
	}
	return live, nil
}

// Kinds counts the live memories by kind.
func (s *Store) Kinds(ctx context.Context) (map[string]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT kind, count(*) FROM memories WHERE forgotten_at = 0 GROUP BY kind`)
	if err != nil {
		return nil, fmt.Errorf("count memories by kind: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var kind string
		var n int
		if err := rows.Scan(&kind, &n); err != nil {
			return nil, fmt.Errorf("count memories by kind: %w", err)
		}
		out[kind] = n
	}
	return out, rows.Err()
}

// Prune drops the callID memo and the frozen session texts older than before. Memories and
// their audit trail are never pruned.
func (s *Store) Prune(ctx context.Context, before time.Time) error {
	err := s.withTx(ctx, func(tx cachedTx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM calls WHERE at < ?`, toMS(before)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM session_context WHERE at < ?`, toMS(before))
		return err
	})
	if err != nil {
		return fmt.Errorf("prune memories: %w", err)
	}
	return nil
}

// FrozenContext is the text FreezeContext kept for sessionID, if any.
func (s *Store) FrozenContext(ctx context.Context, sessionID string) (text string, ok bool, err error) {
	err = s.r.QueryRowContext(ctx, `SELECT text FROM session_context WHERE session_id = ?`, sessionID).Scan(&text)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read context of %s: %w", sessionID, err)
	}
	return text, true, nil
}

// FreezeContext keeps text as sessionID's session-start text unless one is kept already, and
// returns the kept one: of two racing writers the first wins and both get its text.
func (s *Store) FreezeContext(ctx context.Context, sessionID, text string, now time.Time) (string, error) {
	var kept string
	err := s.withTx(ctx, func(tx cachedTx) error {
		_, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO session_context (session_id, text, at) VALUES (?, ?, ?)`, sessionID, text, toMS(now))
		if err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT text FROM session_context WHERE session_id = ?`, sessionID).Scan(&kept)
	})
	if err != nil {
		return "", fmt.Errorf("freeze context of %s: %w", sessionID, err)
	}
	return kept, nil
}
