package memory

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

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

// The tools whose answers the callID memo keeps: the memory tools, and the names the memo
// keeps a dismissal's and a restore's answers under.
const (
	toolRemember = protocol.ToolRemember
	toolUpdate   = protocol.ToolUpdate
	toolForget   = protocol.ToolForget
	toolSearch   = protocol.ToolSearch
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
	queue     chan *write   // to the group writer (group.go)
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
		queue: make(chan *write), stop: make(chan struct{}),
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

// Remember adds a memory to c.Project, or answers with the live memory of that project that
// has the same normalized content (Created false).
func (s *Store) Remember(ctx context.Context, c Caller, a RememberArgs, now time.Time) (Remembered, error) {
	if c.Project == "" {
		return Remembered{}, fmt.Errorf("%w: the caller has no project to remember for", ErrBadRequest)
	}
	content, err := s.cleanContent(a.Content)
	if err != nil {
		return Remembered{}, err
	}
	kind, err := cleanKind(a.Kind)
	if err != nil {
		return Remembered{}, err
	}
	tags, err := s.cleanTags(a.Tags)
	if err != nil {
		return Remembered{}, err
	}
	branch, err := s.cleanBranch(a.Branch)
	if err != nil {
		return Remembered{}, err
	}
	directory, err := cleanDirectory(a.Directory)
	if err != nil {
		return Remembered{}, err
	}
	tip, err := cleanTip(a.BranchTip)
	if err != nil {
		return Remembered{}, err
	}
	// The look-alikes are read before the write transaction, so the single writer is not
	// held while they are scored; a memory committed meanwhile is merely not listed (nor
	// paired: FindDuplicates catches what writes miss).
	similar, err := s.similar(ctx, c.Project, content)
	if err != nil {
		return Remembered{}, fmt.Errorf("find similar memories: %w", err)
	}
	var out Remembered
	err = s.withTx(ctx, func(tx cachedTx) error {
		if ok, err := repeated(ctx, tx, c, toolRemember, &out); ok || err != nil {
			out.Repeat = ok
			return err
		}
		m, err := liveByNorm(ctx, tx, c.Project, normalize(content))
		switch {
		case err == nil:
			out = Remembered{Memory: m}
		case errors.Is(err, ErrNotFound):
			at := toTime(toMS(now))
			m = Memory{
				ID: newID(now), Project: c.Project, Branch: branch, Directory: directory, BranchTip: tip,
				Kind: kind, Content: content, Tags: tags,
				CreatedAt: at, UpdatedAt: at, Source: Source{SessionID: c.SessionID, CallID: c.CallID, Host: c.Host, Client: c.Client},
			}
			if err := insert(ctx, tx, m); err != nil {
				return err
			}
			if err := audit(ctx, tx, m.ID, now, "create", c, "", ""); err != nil {
				return err
			}
			if err := s.stamp(ctx, tx, m.ID, "create", now); err != nil {
				return err
			}
			m.Author = s.author
			if err := pairUp(ctx, tx, m, similar, now); err != nil {
				return err
			}
			out = Remembered{Memory: m, Created: true}
		default:
			return err
		}
		out.Similar = others(similar, m.ID)
		if err := recordFolder(ctx, tx, c.Project, cmp.Or(c.Directory, directory), now); err != nil {
			return err
		}
		return memo(ctx, tx, c, toolRemember, out, now)
	})
	if err != nil {
		return Remembered{}, wrap("remember", err)
	}
	return out, nil
}

// others is the look-alikes other than id, at most 5, best first.
func others(similar []Similar, id string) []Similar {
	out := []Similar{}
	for _, x := range similar {
		if x.ID != id && len(out) < 5 {
			out = append(out, x)
		}
	}
	return out
}

func insert(ctx context.Context, tx cachedTx, m Memory) error {
	if err := insertRow(ctx, tx, m); err != nil {
		return err
	}
	return countWords(ctx, tx, m.Content, 1)
}

// insertRow is insert without the words table's counts, which the caller keeps.
func insertRow(ctx context.Context, tx cachedTx, m Memory) error {
	tags, _ := json.Marshal(m.Tags)
	var used int64
	if m.UsedAt != nil {
		used = toMS(*m.UsedAt)
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO memories (id, project, scope, branch, directory, branch_tip, kind, content, norm, tags,
			created_at, updated_at, used_at, source_session, source_call, source_host, source_client)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		m.ID, m.Project, scope(m.Project), m.Branch, m.Directory, m.BranchTip, m.Kind, m.Content, normalize(m.Content), string(tags),
		toMS(m.CreatedAt), toMS(m.UpdatedAt), used, m.Source.SessionID, m.Source.CallID, m.Source.Host, m.Source.Client)
	return err
}

// Update changes a live memory of c.Project.
func (s *Store) Update(ctx context.Context, c Caller, id string, a UpdateArgs, now time.Time) (Changed, error) {
	if a.Content == nil && a.Kind == nil && a.Tags == nil && !a.ProjectWide {
		return Changed{}, fmt.Errorf("%w: nothing to update; give content, kind or tags", ErrBadRequest)
	}
	var content, kind string
	var tags []string
	var err error
	if a.Content != nil {
		if content, err = s.cleanContent(*a.Content); err != nil {
			return Changed{}, err
		}
	}
	if a.Kind != nil {
		if *a.Kind == "" {
			return Changed{}, fmt.Errorf("%w: kind is empty; give one of %s or leave it out", ErrBadRequest, strings.Join(Kinds, ", "))
		}
		if kind, err = cleanKind(*a.Kind); err != nil {
			return Changed{}, err
		}
	}
	if a.Tags != nil {
		if tags, err = s.cleanTags(*a.Tags); err != nil {
			return Changed{}, err
		}
	}
	// The look-alikes of the text the memory will have are read before the write
	// transaction, as Remember does: an update closes the memory's pairs and records those
	// of its new text (a tags or kind update keeps the text it has).
	var text string
	var similar []Similar
	if cur, err := live(ctx, s.r, id, c.Project); err == nil { // else the transaction reports it
		text = cur.Content
		if a.Content != nil {
			text = content
		}
		if similar, err = s.similar(ctx, cur.Project, text); err != nil {
			return Changed{}, fmt.Errorf("update %s: find similar memories: %w", id, err)
		}
	}
	var out Changed
	err = s.withTx(ctx, func(tx cachedTx) error {
		if ok, err := repeated(ctx, tx, c, toolUpdate, &out); ok || err != nil {
			out.Repeat = ok
			return err
		}
		m, err := live(ctx, tx, id, c.Project)
		if err != nil {
			return err
		}
		before := m.Content
		if a.Content != nil {
			other, err := liveByNorm(ctx, tx, m.Project, normalize(content))
			if err == nil && other.ID != m.ID {
				return fmt.Errorf("%w: memory %s already says this; forget one of them", ErrBadRequest, other.ID)
			}
			if err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			m.Content = content
		}
		if a.Kind != nil {
			m.Kind = kind
		}
		if a.Tags != nil {
			m.Tags = tags
		}
		if a.ProjectWide {
			m.Branch, m.BranchTip = "", ""
		}
		m.UpdatedAt = toTime(toMS(now))
		tagsJSON, _ := json.Marshal(m.Tags)
		// The branch verdict goes too: the next branch check judges the memory as it is now.
		_, err = tx.ExecContext(ctx, `UPDATE memories SET content = ?, norm = ?, kind = ?, tags = ?, updated_at = ?, branch = ?, branch_tip = ?, branch_verdict = '' WHERE id = ?`,
			m.Content, normalize(m.Content), m.Kind, string(tagsJSON), toMS(now), m.Branch, m.BranchTip, m.ID)
		if err != nil {
			return err
		}
		if err := closePairs(ctx, tx, m.ID); err != nil {
			return err
		}
		// The look-alikes were found for text; a concurrent update of this memory may have
		// changed it since, and then FindDuplicates pairs the text it has.
		if normalize(m.Content) == normalize(text) {
			if err := pairUp(ctx, tx, m, similar, now); err != nil {
				return err
			}
		}
		if err := countWords(ctx, tx, before, -1); err != nil {
			return err
		}
		if err := countWords(ctx, tx, m.Content, 1); err != nil {
			return err
		}
		if err := audit(ctx, tx, m.ID, now, "update", c, "", before); err != nil {
			return err
		}
		if err := s.stamp(ctx, tx, m.ID, "update", now); err != nil {
			return err
		}
		m.Author = s.author
		if err := recordFolder(ctx, tx, m.Project, c.Directory, now); err != nil {
			return err
		}
		out = Changed{Memory: m}
		return memo(ctx, tx, c, toolUpdate, out, now)
	})
	if err != nil {
		return Changed{}, wrap("update "+id, err)
	}
	return out, nil
}

// Forget takes a live memory out of search, injection and listings; it stays readable by
// Get with its audit trail. c.Project "" (a person) may forget any project's memory.
func (s *Store) Forget(ctx context.Context, c Caller, id, reason string, now time.Time) (Changed, error) {
	var out Changed
	err := s.withTx(ctx, func(tx cachedTx) error {
		if ok, err := repeated(ctx, tx, c, toolForget, &out); ok || err != nil {
			out.Repeat = ok
			return err
		}
		m, err := live(ctx, tx, id, c.Project)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE memories SET forgotten_at = ? WHERE id = ?`, toMS(now), m.ID); err != nil {
			return err
		}
		if err := closePairs(ctx, tx, m.ID); err != nil {
			return err
		}
		if err := countWords(ctx, tx, m.Content, -1); err != nil {
			return err
		}
		if err := audit(ctx, tx, m.ID, now, "forget", c, s.redact(reason), m.Content); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE memories SET forgot_reason = ? WHERE id = ?`, s.redact(reason), m.ID); err != nil {
			return err
		}
		if err := s.stamp(ctx, tx, m.ID, "forget", now); err != nil {
			return err
		}
		m.Author = s.author
		at := toTime(toMS(now))
		m.ForgottenAt = &at
		out = Changed{Memory: m}
		return memo(ctx, tx, c, toolForget, out, now)
	})
	if err != nil {
		return Changed{}, wrap("forget "+id, err)
	}
	return out, nil
}

// Get is any memory, forgotten ones included, with its audit trail oldest first.
func (s *Store) Get(ctx context.Context, id string) (Memory, []Audit, error) {
	m, err := scanMemory(s.r.QueryRowContext(ctx, `SELECT `+memoryCols+` FROM memories m WHERE m.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Memory{}, nil, fmt.Errorf("%w: no memory %s", ErrNotFound, id)
	}
	if err != nil {
		return Memory{}, nil, fmt.Errorf("get %s: %w", id, err)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT at, op, session_id, call_id, reason, before, author FROM memory_log WHERE memory_id = ? ORDER BY id`, id)
	if err != nil {
		return Memory{}, nil, fmt.Errorf("get %s: %w", id, err)
	}
	defer rows.Close()
	log := []Audit{}
	for rows.Next() {
		var a Audit
		var at int64
		if err := rows.Scan(&at, &a.Op, &a.SessionID, &a.CallID, &a.Reason, &a.Before, &a.Author); err != nil {
			return Memory{}, nil, fmt.Errorf("get %s: %w", id, err)
		}
		a.At = toTime(at)
		log = append(log, a)
	}
	if err := rows.Err(); err != nil {
		return Memory{}, nil, fmt.Errorf("get %s: %w", id, err)
	}
	ms := []Memory{m}
	if err := s.withFolders(ctx, ms); err != nil {
		return Memory{}, nil, fmt.Errorf("get %s: %w", id, err)
	}
	return ms[0], log, nil
}

// List is live memories: the best matches of q.Query first when it is set (without counting
// them as used), else the newest first. Limit defaults to 100, at most 1000.
func (s *Store) List(ctx context.Context, q ListQuery) ([]Memory, error) {
	limit, err := checkLimit(q.Limit, DefaultListLimit, 1000)
	if err != nil {
		return nil, err
	}
	var kinds []string
	if q.Kind != "" {
		if _, err := cleanKind(q.Kind); err != nil {
			return nil, err
		}
		kinds = []string{q.Kind}
	}
	out := []Memory{}
	if q.Query != "" {
		terms := queryTerms(q.Query)
		if len(terms) == 0 {
			return nil, errNoWords
		}
		hits, err := s.rank(ctx, q.Projects, terms, kinds, limit, true, nil)
		if err != nil {
			return nil, fmt.Errorf("list memories: %w", err)
		}
		for _, h := range hits {
			out = append(out, h.Memory)
		}
		if err := s.withFolders(ctx, out); err != nil {
			return nil, fmt.Errorf("list memories: %w", err)
		}
		return out, nil
	}
	cond, args := inProjects("m.project", q.Projects)
	state := `m.forgotten_at = 0`
	if q.Forgotten {
		state = `m.forgotten_at > 0`
	}
	query := `SELECT ` + memoryCols + ` FROM memories m WHERE ` + state + cond
	if q.Kind != "" {
		query += ` AND m.kind = ?`
		args = append(args, q.Kind)
	}
	if q.After != "" {
		query += ` AND m.id < ?`
		args = append(args, q.After)
	}
	query += ` ORDER BY m.id DESC LIMIT ?`
	out, err = s.memories(ctx, query, append(args, limit)...)
	if err == nil {
		err = s.withFolders(ctx, out)
	}
	if err != nil {
		return nil, fmt.Errorf("list memories: %w", err)
	}
	return out, nil
}

// Export is live memories of the project keys projects (none = every project) oldest first
// (insertion order) after the memory after ("" = from the start). limit defaults to 1000, at
// most 10000.
func (s *Store) Export(ctx context.Context, projects []string, after string, limit int) ([]Memory, error) {
	limit, err := checkLimit(limit, DefaultExportLimit, 10000)
	if err != nil {
		return nil, err
	}
	var from int64
	if after != "" {
		err := s.r.QueryRowContext(ctx, `SELECT seq FROM memories WHERE id = ?`, after).Scan(&from)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("%w: export cursor %s is unknown; start again from the beginning", ErrNotFound, after)
		}
		if err != nil {
			return nil, fmt.Errorf("export memories: %w", err)
		}
	}
	cond, args := inProjects("m.project", projects)
	query := `SELECT ` + memoryCols + ` FROM memories m WHERE m.forgotten_at = 0 AND m.seq > ?` + cond
	out, err := s.memories(ctx, query+` ORDER BY m.seq LIMIT ?`, append(append([]any{from}, args...), limit)...)
	if err == nil {
		err = s.withFolders(ctx, out)
	}
	if err != nil {
		return nil, fmt.Errorf("export memories: %w", err)
	}
	return out, nil
}

// Import adds memories read from an export, keeping their ids, times and sources. It is
// idempotent: a memory whose id exists, or whose normalized content is already live in its
// project, is skipped; so is a forgotten one. Every memory is validated (and redacted) like
// Remember's arguments before anything is written; one bad memory fails the whole import.
//
// Import records no duplicate pairs: the look-alikes are read outside the write transaction,
// so the memories of one import would never see each other, and scoring thousands of them
// one by one would hold the single writer for seconds. FindDuplicates pairs them (and the
// memories older than pairs): DuplicatePassDue says so until it has run.
func (s *Store) Import(ctx context.Context, ms []Memory, now time.Time) (added int, err error) {
	clean := make([]Memory, 0, len(ms))
	for i, m := range ms {
		if m.ForgottenAt != nil {
			continue
		}
		if err := s.cleanImported(&m, now); err != nil {
			return 0, fmt.Errorf("import memory %d (%s): %w", i+1, m.ID, err)
		}
		clean = append(clean, m)
	}
	err = s.withBulkTx(ctx, func(tx cachedTx) error {
		// The words' counts are added up here and written once: a write per memory was
		// half of an import's time.
		counts := map[string]int{}
		sharedIn := map[string]bool{}
		for _, m := range clean {
			// The export's folder (else the memory's directory) labels a project the store
			// has no folder for; a folder learned from a session here is kept.
			if folder := cmp.Or(m.Folder, m.Directory); folder != "" {
				if _, err := tx.ExecContext(ctx, `INSERT INTO projects (key, folder, updated) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING`,
					m.Project, folder, toMS(m.CreatedAt)); err != nil {
					return err
				}
			}
			var known bool
			err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM memories WHERE id = ?)
				OR EXISTS (SELECT 1 FROM memories WHERE project = ? AND norm = ? AND forgotten_at = 0)`,
				m.ID, m.Project, normalize(m.Content)).Scan(&known)
			if err != nil {
				return err
			}
			if known {
				continue
			}
			if err := insertRow(ctx, tx, m); err != nil {
				return err
			}
			if m.Author != "" {
				if _, err := tx.ExecContext(ctx, `UPDATE memories SET author = ? WHERE id = ?`, m.Author, m.ID); err != nil {
					return err
				}
			}
			addWords(counts, m.Content, 1)
			if err := audit(ctx, tx, m.ID, now, "import", Caller{}, "", ""); err != nil {
				return err
			}
			// An import into a shared project is sent like any change; one into a project
			// not shared gets its version when the project is shared (Share), which keeps
			// a large import as fast as before.
			shared, ok := sharedIn[m.Project]
			if !ok {
				if shared, err = isShared(ctx, tx, m.Project); err != nil {
					return err
				}
				sharedIn[m.Project] = shared
			}
			if shared {
				if err := s.stamp(ctx, tx, m.ID, "import", now); err != nil {
					return err
				}
			}
			added++
		}
		if added == 0 {
			return nil
		}
		if err := writeWords(ctx, tx, counts); err != nil {
			return err
		}
		return setMeta(ctx, tx, metaImportAt, toMS(now))
	})
	if err != nil {
		return 0, fmt.Errorf("import memories: %w", err)
	}
	return added, nil
}

func (s *Store) cleanImported(m *Memory, now time.Time) error {
	var err error
	if !idPattern.MatchString(m.ID) {
		return fmt.Errorf("%w: id %q is not mem_ followed by 20 hex digits", ErrBadRequest, m.ID)
	}
	if m.Project == "" {
		return fmt.Errorf("%w: project is empty", ErrBadRequest)
	}
	if m.Content, err = s.cleanContent(m.Content); err != nil {
		return err
	}
	if m.Kind, err = cleanKind(m.Kind); err != nil {
		return err
	}
	if m.Tags, err = s.cleanTags(m.Tags); err != nil {
		return err
	}
	if m.Branch, err = s.cleanBranch(m.Branch); err != nil {
		return err
	}
	// A directory of another system (C:\src on Linux) cannot be judged here: it is dropped
	// rather than failing the import.
	if m.Directory, err = cleanDirectory(m.Directory); err != nil {
		m.Directory = ""
	}
	if m.Folder, err = cleanDirectory(m.Folder); err != nil {
		m.Folder = ""
	}
	if m.BranchTip, err = cleanTip(m.BranchTip); err != nil {
		return err
	}
	// The author of the version exported (§9): a name, kept as it is when it is one.
	if m.Author = strings.TrimSpace(strings.ToValidUTF8(m.Author, "")); utf8.RuneCountInString(m.Author) > 200 {
		return fmt.Errorf("%w: author is %d characters, over the limit of 200", ErrBadRequest, utf8.RuneCountInString(m.Author))
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = now
	}
	if m.UpdatedAt.IsZero() {
		m.UpdatedAt = m.CreatedAt
	}
	return nil
}

// Count is the number of live memories.
func (s *Store) Count(ctx context.Context) (live int, err error) {
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM memories WHERE forgotten_at = 0`).Scan(&live); err != nil {
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

// wrap says what failed in an unexpected error. The store's own answers, ErrBadRequest and
// ErrNotFound, go out as they are: their message is for a model, and says it all.
func wrap(op string, err error) error {
	if errors.Is(err, ErrBadRequest) || errors.Is(err, ErrNotFound) {
		return err
	}
	return fmt.Errorf("%s: %w", op, err)
}

// repeated looks c's callID up in the memo. When the call was answered before, it decodes
// that answer into out and reports true. A callID used for another tool is a bad request.
func repeated(ctx context.Context, tx cachedTx, c Caller, tool string, out any) (bool, error) {
	if c.CallID == "" {
		return false, nil
	}
	var used, result string
	err := tx.QueryRowContext(ctx, `SELECT tool, result FROM calls WHERE session_id = ? AND call_id = ?`, c.SessionID, c.CallID).Scan(&used, &result)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if used != tool {
		return false, fmt.Errorf("%w: callID %s was already used for %s; give each call its own callID", ErrBadRequest, c.CallID, used)
	}
	return true, json.Unmarshal([]byte(result), out)
}

// memo keeps the answer of c's call, in the transaction of the change it describes.
func memo(ctx context.Context, tx cachedTx, c Caller, tool string, answer any, now time.Time) error {
	if c.CallID == "" {
		return nil
	}
	data, err := json.Marshal(answer)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO calls (session_id, call_id, tool, result, at) VALUES (?, ?, ?, ?, ?)`,
		c.SessionID, c.CallID, tool, string(data), toMS(now))
	return err
}

func audit(ctx context.Context, tx cachedTx, id string, now time.Time, op string, c Caller, reason, before string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO memory_log (memory_id, at, op, session_id, call_id, reason, before) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		id, toMS(now), op, c.SessionID, c.CallID, reason, before)
	return err
}

// live is the live memory id of project; project "" matches any project.
func live(ctx context.Context, q queryer, id, project string) (Memory, error) {
	m, err := scanMemory(q.QueryRowContext(ctx, `SELECT `+memoryCols+` FROM memories m WHERE m.id = ? AND m.forgotten_at = 0`, id))
	if errors.Is(err, sql.ErrNoRows) || err == nil && project != "" && m.Project != project {
		return Memory{}, fmt.Errorf("%w: no live memory %s in this project; search memories for the current id", ErrNotFound, id)
	}
	return m, err
}

// liveByNorm is the live memory of project with the normalized content norm.
func liveByNorm(ctx context.Context, q queryer, project, norm string) (Memory, error) {
	m, err := scanMemory(q.QueryRowContext(ctx, `SELECT `+memoryCols+` FROM memories m WHERE m.project = ? AND m.norm = ? AND m.forgotten_at = 0`, project, norm))
	if errors.Is(err, sql.ErrNoRows) {
		return Memory{}, ErrNotFound
	}
	return m, err
}

// memoryCols are the columns scanMemory reads, of the memories table aliased m.
const memoryCols = `m.id, m.project, m.branch, m.directory, m.branch_tip, m.kind, m.content, m.tags, m.created_at, m.updated_at, m.used_at, m.forgotten_at, m.source_session, m.source_call, m.source_host, m.source_client, m.author, m.project IN (SELECT project FROM team_shared)`

type scanner interface{ Scan(dest ...any) error }

func scanMemory(row scanner, extra ...any) (Memory, error) {
	var m Memory
	var tags string
	var created, updated, used, forgotten int64
	dest := append([]any{&m.ID, &m.Project, &m.Branch, &m.Directory, &m.BranchTip, &m.Kind, &m.Content, &tags, &created, &updated, &used, &forgotten, &m.Source.SessionID, &m.Source.CallID, &m.Source.Host, &m.Source.Client, &m.Author, &m.Shared}, extra...)
	if err := row.Scan(dest...); err != nil {
		return Memory{}, err
	}
	m.Tags = decodeTags(tags)
	m.CreatedAt, m.UpdatedAt = toTime(created), toTime(updated)
	if used != 0 {
		t := toTime(used)
		m.UsedAt = &t
	}
	if forgotten != 0 {
		t := toTime(forgotten)
		m.ForgottenAt = &t
	}
	return m, nil
}

// decodeTags is a memory's tags column, a JSON list of strings; anything else is no tags.
func decodeTags(col string) []string {
	var tags []string
	if err := json.Unmarshal([]byte(col), &tags); err != nil || tags == nil {
		return []string{}
	}
	return tags
}

// memories runs a query selecting memoryCols.
func (s *Store) memories(ctx context.Context, query string, args ...any) ([]Memory, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Memory{}
	for rows.Next() {
		m, err := scanMemory(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// markUsed sets used_at of the memories ids to now (never backwards), in one statement.
func markUsed(ctx context.Context, tx cachedTx, ids []string, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	args := []any{toMS(now)}
	for _, id := range ids {
		args = append(args, id)
	}
	_, err := tx.ExecContext(ctx, `UPDATE memories SET used_at = max(used_at, ?) WHERE id IN (`+placeholders(len(ids))+`)`, args...)
	return err
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// Validation. Each message says what is wrong and what to do, for a model to act on.

func (s *Store) cleanContent(v string) (string, error) {
	// NUL and invalid UTF-8 would make SQLite count characters differently from Go, and a
	// NUL ends a line on the model's side anyway.
	v = strings.TrimSpace(strings.ToValidUTF8(strings.ReplaceAll(s.redact(v), "\x00", ""), "\uFFFD"))
	if v == "" {
		return "", fmt.Errorf("%w: content is empty; write what to remember as one or more sentences", ErrBadRequest)
	}
	if n := utf8.RuneCountInString(v); n > MaxContent {
		return "", fmt.Errorf("%w: content is %d characters, over the limit of %d; shorten it or split it into several memories", ErrBadRequest, n, MaxContent)
	}
	return v, nil
}

// cleanKind checks a kind; "" is fact.
func cleanKind(v string) (string, error) {
	if v == "" {
		return Kinds[0], nil
	}
	if !slices.Contains(Kinds, v) {
		return "", fmt.Errorf("%w: kind %q is unknown; use one of %s", ErrBadRequest, v, strings.Join(Kinds, ", "))
	}
	return v, nil
}

func (s *Store) cleanTags(tags []string) ([]string, error) {
	if len(tags) > MaxTags {
		return nil, fmt.Errorf("%w: %d tags, at most %d are allowed; keep the most telling ones", ErrBadRequest, len(tags), MaxTags)
	}
	out := make([]string, 0, len(tags))
	for i, t := range tags {
		t = strings.TrimSpace(s.redact(t))
		if t == "" {
			return nil, fmt.Errorf("%w: tag %d is empty; drop it or give it a word", ErrBadRequest, i+1)
		}
		if n := utf8.RuneCountInString(t); n > MaxTag {
			return nil, fmt.Errorf("%w: tag %q is %d characters, over the limit of %d; shorten it", ErrBadRequest, t, n, MaxTag)
		}
		out = append(out, t)
	}
	return out, nil
}

func (s *Store) cleanBranch(v string) (string, error) {
	v = strings.TrimSpace(s.redact(v)) // a branch name is text a model wrote: rule 13 holds
	if n := utf8.RuneCountInString(v); n > maxBranch {
		return "", fmt.Errorf("%w: branch is %d characters, over the limit of %d; give the branch name only", ErrBadRequest, n, maxBranch)
	}
	return v, nil
}

// maxDirectory is the longest directory a memory records, in characters.
const maxDirectory = 4096

// cleanDirectory checks the directory a memory is written from: "" or an absolute path, since
// the branch check looks for its repository on this filesystem.
func cleanDirectory(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	if n := utf8.RuneCountInString(v); n > maxDirectory {
		return "", fmt.Errorf("%w: directory is %d characters, over the limit of %d; give the session's directory", ErrBadRequest, n, maxDirectory)
	}
	if !filepath.IsAbs(v) || strings.ContainsRune(v, 0) {
		return "", fmt.Errorf("%w: directory %q is not an absolute path; give the session's full directory, or none", ErrBadRequest, v)
	}
	return filepath.Clean(v), nil
}

var tipPattern = regexp.MustCompile(`^[0-9a-f]{7,64}$`)

// cleanTip checks a branch tip: "" or a commit id in hex (SHA-1 or SHA-256, abbreviated or
// not), lower-cased. It goes to git as an argument, so nothing else may pass.
func cleanTip(v string) (string, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	if v != "" && !tipPattern.MatchString(v) {
		return "", fmt.Errorf("%w: branchTip %q is not a commit id; give the branch's commit in hex, or none", ErrBadRequest, v)
	}
	return v, nil
}

// checkLimit is n, or def when n is 0, refusing anything outside 1..max.
func checkLimit(n, def, max int) (int, error) {
	if n == 0 {
		return def, nil
	}
	if n < 1 || n > max {
		return 0, fmt.Errorf("%w: limit %d is out of range; give 1 to %d, or none for %d", ErrBadRequest, n, max, def)
	}
	return n, nil
}

// normalize is content as compared for exact duplicates: lower-cased, whitespace runs
// collapsed to one space, trimmed.
func normalize(content string) string {
	return strings.Join(strings.Fields(strings.ToLower(content)), " ")
}

// scope is project's token: the prefix of its scoped words in memories_fts (scoped.go), of
// fixed size whatever the project key.
func scope(project string) string {
	sum := sha256.Sum256([]byte(project))
	return "p" + hex.EncodeToString(sum[:8])
}

var idPattern = regexp.MustCompile(`^mem_[0-9a-f]{20}$`)

// newID is mem_ + 12 hex digits of unix milliseconds + 8 random hex digits: ids sort by
// creation and two writers of one millisecond still differ.
func newID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("mem_%012x%s", uint64(now.UnixMilli())&0xffffffffffff, hex.EncodeToString(b[:]))
}

func toMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func toTime(v int64) time.Time {
	return time.UnixMilli(v).UTC()
}
