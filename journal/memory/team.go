package memory

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// The store's side of team memory (protocol §9, docs/team.md): every local change of a
// memory takes a version (author, hybrid logical clock, node); a change of a shared
// project's memory also writes the version into the outbox, in the change's transaction.
// ApplyVersion applies a version received from the team in one transaction, deciding with
// Decide (version.go). The store does no networking: adapters/team sends the outbox and
// feeds ApplyVersion.

// teamState is the node id and the clock, loaded at Open. The clock moves under mu by the
// writer's transactions; it is persisted in meta in each one (a rolled-back write may
// leave it ahead of the file, which only skips a few values).
type teamState struct {
	mu    sync.Mutex
	node  string
	clock Clock
}

const (
	metaClockWall    = "hlc_wall"
	metaClockLogical = "hlc_logical"
)

func (s *Store) loadTeam() error {
	if err := s.w.QueryRow(`SELECT value FROM team_state WHERE key = 'node'`).Scan(&s.team.node); err != nil {
		return fmt.Errorf("read the team node id: %w", err)
	}
	var wall, logical sql.NullInt64
	err := s.w.QueryRow(`SELECT (SELECT value FROM meta WHERE key = ?), (SELECT value FROM meta WHERE key = ?)`,
		metaClockWall, metaClockLogical).Scan(&wall, &logical)
	if err != nil {
		return fmt.Errorf("read the team clock: %w", err)
	}
	if wall.Valid {
		// Every version written moves the clock in its transaction (moveClock), so the
		// persisted clock is at least every memory's: no scan of them at each open.
		s.team.clock = Clock{Wall: wall.Int64, Logical: uint32(logical.Int64)}
		return nil
	}
	// No clock persisted yet (a store made before the team clock, or filled by import
	// only): the newest memory's, if any has one, persisted so that the scan is done once.
	var most int64
	if err := s.w.QueryRow(`SELECT coalesce(max(hlc_wall), 0) FROM memories`).Scan(&most); err != nil {
		return fmt.Errorf("read the team clock: %w", err)
	}
	s.team.clock = Clock{Wall: most}
	ctx := context.Background()
	if err := s.withTx(ctx, func(tx cachedTx) error {
		_, err := s.moveClock(ctx, tx, func(c Clock) Clock { return c })
		return err
	}); err != nil {
		return fmt.Errorf("write the team clock: %w", err)
	}
	return nil
}

// Author is the name on this store's changes.
func (s *Store) Author() string { return s.author }

// Node is this store's node id (n_ + 16 hex), made once per memories.db.
func (s *Store) Node() string { return s.team.node }

// moveClock sets the clock to next(clock) and persists it in tx.
func (s *Store) moveClock(ctx context.Context, tx cachedTx, next func(Clock) Clock) (Clock, error) {
	s.team.mu.Lock()
	c := next(s.team.clock)
	s.team.clock = c
	s.team.mu.Unlock()
	if err := setMeta(ctx, tx, metaClockWall, c.Wall); err != nil {
		return Clock{}, err
	}
	return c, setMeta(ctx, tx, metaClockLogical, int64(c.Logical))
}

// isShared says whether project is shared.
func isShared(ctx context.Context, q queryer, project string) (bool, error) {
	var ok bool
	err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM team_shared WHERE project = ?)`, project).Scan(&ok)
	return ok, err
}

// stamp gives memory id a new local version (this store's author, the next clock) after a
// change in tx, names the author on its unattributed history rows, and, when its project is
// shared, writes the version into the outbox.
func (s *Store) stamp(ctx context.Context, tx cachedTx, id, op string, now time.Time) error {
	var base Clock // the version the change was made on: none when never versioned
	if err := tx.QueryRowContext(ctx, `SELECT hlc_wall, hlc_logical FROM memories WHERE id = ?`, id).Scan(&base.Wall, &base.Logical); err != nil {
		return err
	}
	c, err := s.moveClock(ctx, tx, func(c Clock) Clock { return c.Tick(toMS(now)) })
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE memories SET author = ?, hlc_wall = ?, hlc_logical = ?, node = ? WHERE id = ?`,
		s.author, c.Wall, c.Logical, s.team.node, id); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE memory_log SET author = ? WHERE memory_id = ? AND author = ''`, s.author, id); err != nil {
		return err
	}
	v, shared, err := s.versionOf(ctx, tx, id)
	if err != nil || !shared {
		return err
	}
	v.Op = op
	if base.Wall != 0 {
		v.Base = &base
	}
	return s.enqueue(ctx, tx, v, now)
}

// versionOf is the version memory id is at, and whether its project is shared.
func (s *Store) versionOf(ctx context.Context, q queryer, id string) (Version, bool, error) {
	var v Version
	var tags string
	var created, updated, forgotten int64
	var shared bool
	err := q.QueryRowContext(ctx, `SELECT id, project, branch, kind, content, tags, created_at, updated_at, forgotten_at, forgot_reason,
			author, hlc_wall, hlc_logical, node, project IN (SELECT project FROM team_shared)
		FROM memories WHERE id = ?`, id).Scan(&v.ID, &v.Project, &v.Branch, &v.Kind, &v.Content, &tags, &created, &updated, &forgotten,
		&v.Reason, &v.Author, &v.HLC.Wall, &v.HLC.Logical, &v.Node, &shared)
	if err != nil {
		return Version{}, false, err
	}
	v.Format = VersionFormat
	v.Tags = decodeTags(tags)
	v.CreatedAt, v.UpdatedAt = toTime(created), toTime(updated)
	v.Forgotten = forgotten != 0
	if !v.Forgotten {
		v.Reason = ""
	}
	return v, shared, nil
}

// enqueue writes v into the outbox, redacted again (rule 13), and records it as applied so
// its echo from the team changes nothing.
func (s *Store) enqueue(ctx context.Context, tx cachedTx, v Version, now time.Time) error {
	v.Content = s.redact(v.Content)
	for i, t := range v.Tags {
		v.Tags[i] = s.redact(t)
	}
	v.Reason = s.redact(v.Reason)
	if _, err := tx.ExecContext(ctx, `INSERT INTO team_outbox (project, memory_id, version, record) VALUES (?, ?, ?, ?)`,
		v.Project, v.ID, v.Key(), string(v.Encode())); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO team_applied (version, at) VALUES (?, ?)`, v.Key(), toMS(now))
	return err
}

// SharedProject is a project shared with the team.
type SharedProject struct {
	Project string    `json:"project"`
	Since   time.Time `json:"since"`
	Cursor  uint64    `json:"-"` // the stream sequence of the last version read
}

// Share starts (shared true) or stops sharing project with the team. Starting writes the
// version of each of its memories into the outbox (a memory never versioned gets a version
// of this store's), so the team receives what this thatch has; the team's versions arrive
// by the reader (backfill). Stopping keeps the project's unsent versions in the outbox,
// held until it is shared again: nothing more of it leaves or arrives; its memories stay. Sharing a shared project, or unsharing one that
// is not, changes nothing. A project keyed by a directory is ErrBadRequest (ShareableProject).
func (s *Store) Share(ctx context.Context, project string, shared bool, now time.Time) error {
	if err := ShareableProject(project); err != nil {
		return err
	}
	if shared && s.author == "" {
		return fmt.Errorf("%w: this thatch has no author to sign its versions with; set THATCH_TEAM_AUTHOR", ErrBadRequest)
	}
	err := s.withBulkTx(ctx, func(tx cachedTx) error {
		was, err := isShared(ctx, tx, project)
		if err != nil || was == shared {
			return err
		}
		if !shared {
			// The project's unsent versions stay in the outbox, held (Outbox reads shared
			// projects only): a project the team refuses loses nothing, and they go if it
			// is shared again.
			_, err := tx.ExecContext(ctx, `DELETE FROM team_shared WHERE project = ?`, project)
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO team_shared (project, since, cursor) VALUES (?, ?, 0)`, project, toMS(now)); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT id, hlc_wall FROM memories WHERE project = ? ORDER BY seq`, project)
		if err != nil {
			return err
		}
		type mem struct {
			id   string
			wall int64
		}
		var ms []mem
		for rows.Next() {
			var m mem
			if err := rows.Scan(&m.id, &m.wall); err != nil {
				rows.Close()
				return err
			}
			ms = append(ms, m)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, m := range ms {
			if m.wall == 0 { // never versioned: this store's version, sent by stamp
				if err := s.stamp(ctx, tx, m.id, "share", now); err != nil {
					return err
				}
				continue
			}
			v, _, err := s.versionOf(ctx, tx, m.id)
			if err != nil {
				return err
			}
			v.Op = "share"
			if err := s.enqueue(ctx, tx, v, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return wrap("share "+project, err)
	}
	return nil
}

// SharedProjects are the projects shared with the team, by key.
func (s *Store) SharedProjects(ctx context.Context) ([]SharedProject, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT project, since, cursor FROM team_shared ORDER BY project`)
	if err != nil {
		return nil, fmt.Errorf("read shared projects: %w", err)
	}
	defer rows.Close()
	out := []SharedProject{}
	for rows.Next() {
		var p SharedProject
		var since int64
		if err := rows.Scan(&p.Project, &since, &p.Cursor); err != nil {
			return nil, fmt.Errorf("read shared projects: %w", err)
		}
		p.Since = toTime(since)
		out = append(out, p)
	}
	return out, rows.Err()
}

// Outgoing is a version in the outbox.
type Outgoing struct {
	Seq      int64
	Project  string
	MemoryID string
	Version  string // the version's id: the message's Nats-Msg-Id
	Record   []byte
}

// Outbox is up to limit versions of the shared projects to send, oldest first, but for
// those of the projects skip
// (the team refused them a moment ago: the others are not held up behind them).
func (s *Store) Outbox(ctx context.Context, limit int, skip ...string) ([]Outgoing, error) {
	cond, args := ` WHERE project IN (SELECT project FROM team_shared)`, []any{}
	if len(skip) > 0 {
		cond += ` AND project NOT IN (` + placeholders(len(skip)) + `)`
		for _, p := range skip {
			args = append(args, p)
		}
	}
	rows, err := s.r.QueryContext(ctx, `SELECT seq, project, memory_id, version, record FROM team_outbox`+cond+` ORDER BY seq LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("read the team outbox: %w", err)
	}
	defer rows.Close()
	var out []Outgoing
	for rows.Next() {
		var o Outgoing
		var rec string
		if err := rows.Scan(&o.Seq, &o.Project, &o.MemoryID, &o.Version, &rec); err != nil {
			return nil, fmt.Errorf("read the team outbox: %w", err)
		}
		o.Record = []byte(rec)
		out = append(out, o)
	}
	return out, rows.Err()
}

// Held is how many versions of project wait in the outbox.
func (s *Store) Held(ctx context.Context, project string) (int, error) {
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM team_outbox WHERE project = ?`, project).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the team outbox of %s: %w", project, err)
	}
	return n, nil
}

// Sent drops the outbox rows seqs, in one transaction: the team's JetStream acknowledged
// them.
func (s *Store) Sent(ctx context.Context, seqs ...int64) error {
	drop := func(tx cachedTx) error {
		for _, q := range seqs { // one kept statement, not an IN list of each length
			if _, err := tx.ExecContext(ctx, `DELETE FROM team_outbox WHERE seq = ?`, q); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	switch {
	case len(seqs) == 0:
		return nil
	case len(seqs) < bulkApply:
		err = s.withTx(ctx, drop)
	default:
		err = s.withBulkTx(ctx, drop)
	}
	if err != nil {
		return fmt.Errorf("drop %d sent versions from the team outbox: %w", len(seqs), err)
	}
	return nil
}

// TeamCounts are the figures of status.team.
type TeamCounts struct {
	Outbox   int `json:"outbox"`
	Rejected int `json:"rejected"`
}

// TeamCounts counts the outbox and the refused records.
func (s *Store) TeamCounts(ctx context.Context) (TeamCounts, error) {
	var c TeamCounts
	err := s.r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM team_outbox), (SELECT count(*) FROM team_rejected)`).Scan(&c.Outbox, &c.Rejected)
	if err != nil {
		return c, fmt.Errorf("count the team outbox: %w", err)
	}
	return c, nil
}

// Incoming is a message read from the team: the project and memory its subject names, its
// stream sequence and its data.
type Incoming struct {
	Project, MemoryID, Subject string
	StreamSeq                  uint64
	Data                       []byte
}

// The outcomes of ApplyVersion.
const (
	Applied    = "applied"    // the version is the memory's state now
	Superseded = "superseded" // it lost to the version held; history records it
	Repeated   = "repeated"   // applied before: nothing changed
	Rejected   = "rejected"   // refused: dead-lettered
	NotShared  = "not shared" // its project is not shared (any more): ignored
)

// ApplyResult says what ApplyVersion did. Version is the decoded version (not for
// Rejected); Reject the refusal (Rejected only).
type ApplyResult struct {
	Outcome string
	Version Version
	Reject  *RecordError
}

// ApplyVersion applies a version received from the team, in one transaction with the
// project's stream position: decoded and checked (a refused one is dead-lettered in
// team_rejected and the position moves past it), then decided (Decide) against the
// memory's version. Applying a version twice changes nothing. An error is the store's own
// failure, never the record's.
func (s *Store) ApplyVersion(ctx context.Context, in Incoming, now time.Time) (ApplyResult, error) {
	res, err := s.ApplyVersions(ctx, []Incoming{in}, now)
	if err != nil {
		return ApplyResult{}, err
	}
	return res[0], nil
}

// bulkApply is the batch from which ApplyVersions runs in a transaction of its own rather
// than in a group with the tools' writes (group.go: a savepoint of many rows is slow).
const bulkApply = 16

// ApplyVersions is ApplyVersion for each of ins, in order, in one transaction: a backfill
// of 100,000 versions paid a commit per version. The results are ApplyVersion's, one per
// record; a store failure applies none of them.
func (s *Store) ApplyVersions(ctx context.Context, ins []Incoming, now time.Time) ([]ApplyResult, error) {
	if len(ins) == 0 {
		return nil, nil
	}
	vs := make([]Version, len(ins))
	rejs := make([]*RecordError, len(ins))
	for i, in := range ins {
		v, err := DecodeVersion(in.Data)
		if err == nil {
			err = CheckVersion(v, in.Project, in.MemoryID, now)
		}
		if err != nil && !errors.As(err, &rejs[i]) {
			return nil, fmt.Errorf("apply team version of %s: %w", in.MemoryID, err)
		}
		vs[i] = v
	}
	res := make([]ApplyResult, len(ins))
	apply := func(tx cachedTx) error {
		shared := map[string]bool{} // the batch's projects; no share or unshare runs inside it
		words := map[string]int{}   // the word counts' changes, written once for the batch
		for i, in := range ins {
			on, ok := shared[in.Project]
			if !ok {
				var err error
				if on, err = isShared(ctx, tx, in.Project); err != nil {
					return err
				}
				shared[in.Project] = on
			}
			if !on {
				res[i] = ApplyResult{Outcome: NotShared}
				continue
			}
			if rej := rejs[i]; rej != nil {
				res[i] = ApplyResult{Outcome: Rejected, Reject: rej}
				if _, err := tx.ExecContext(ctx, `INSERT INTO team_rejected (project, subject, stream_seq, kind, reason, record, at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
					in.Project, in.Subject, in.StreamSeq, rej.Kind, rej.Detail, in.Data, toMS(now)); err != nil {
					return err
				}
			} else {
				outcome, err := s.apply(ctx, tx, vs[i], now, words)
				if err != nil {
					return err
				}
				res[i] = ApplyResult{Outcome: outcome, Version: vs[i]}
			}
			if err := s.advance(ctx, tx, in.Project, in.StreamSeq); err != nil {
				return err
			}
		}
		return writeWords(ctx, tx, words)
	}
	var err error
	if len(ins) < bulkApply {
		err = s.withTx(ctx, apply)
	} else {
		err = s.withBulkTx(ctx, apply)
	}
	if err != nil && len(ins) == 1 {
		return nil, fmt.Errorf("apply team version of %s: %w", ins[0].MemoryID, err)
	} else if err != nil {
		return nil, fmt.Errorf("apply %d team versions (stream %d to %d): %w", len(ins), ins[0].StreamSeq, ins[len(ins)-1].StreamSeq, err)
	}
	return res, nil
}

// advance records seq as read in project's stream.
func (s *Store) advance(ctx context.Context, tx cachedTx, project string, seq uint64) error {
	_, err := tx.ExecContext(ctx, `UPDATE team_shared SET cursor = max(cursor, ?) WHERE project = ?`, seq, project)
	return err
}

// apply applies the checked version v in tx and says what it did. The changes of the word
// counts go into words, for the caller to write (writeWords) before the commit.
func (s *Store) apply(ctx context.Context, tx cachedTx, v Version, now time.Time, words map[string]int) (string, error) {
	var seen bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM team_applied WHERE version = ?)`, v.Key()).Scan(&seen); err != nil {
		return "", err
	}
	if seen {
		return Repeated, nil
	}
	// The content is cleaned as a local write's is (trimmed, redacted: rule 13 holds for
	// what teammates send too); a record whose content the redactor empties stays as sent.
	if clean, err := s.cleanContent(v.Content); err == nil {
		v.Content = clean
	}
	if tags, err := s.cleanTags(v.Tags); err == nil {
		v.Tags = tags
	}
	v.Branch = strings.TrimSpace(v.Branch)
	if _, err := s.moveClock(ctx, tx, func(c Clock) Clock { return c.Receive(v.HLC, toMS(now)) }); err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO team_applied (version, at) VALUES (?, ?)`, v.Key(), toMS(now)); err != nil {
		return "", err
	}
	held, shared, err := s.versionOf(ctx, tx, v.ID)
	var heldp *Version
	switch {
	case err == nil && held.Project != v.Project:
		// An id of another project here: ids are random, so this is a teammate's bug or
		// mischief; the memory of the other project is left alone.
		if err := audit(ctx, tx, v.ID, now, "superseded", Caller{}, "a version of project "+v.Project+" with this id was refused", v.Content); err != nil {
			return "", err
		}
		return Superseded, nil
	case err == nil:
		heldp = &held
	case !errors.Is(err, sql.ErrNoRows):
		return "", err
	}
	var same string
	if !v.Forgotten {
		other, err := liveByNorm(ctx, tx, v.Project, normalize(v.Content))
		switch {
		case err == nil:
			same = other.ID
		case !errors.Is(err, ErrNotFound):
			return "", err
		}
	}
	d := Decide(heldp, v, same)
	switch {
	case d.Same:
		return Repeated, nil
	case !d.Take:
		// The losing version, at its own time and by its own author.
		if err := s.auditAs(ctx, tx, v.ID, toTime(v.HLC.Wall), "superseded", v.Author, supersededBy(held), v.Content); err != nil {
			return "", err
		}
		// The stream keeps a few versions per memory in stream order: the one held here is
		// sent again so that the latest message of the memory is never the loser.
		if shared && held.HLC.Wall != 0 {
			held.Op = "resend"
			if err := s.enqueue(ctx, tx, held, now); err != nil {
				return "", err
			}
		}
		return Superseded, nil
	}
	if d.ForgetDuplicate != "" {
		if err := s.forgetDuplicate(ctx, tx, d.ForgetDuplicate, v.ID, now, words); err != nil {
			return "", err
		}
	}
	if heldp != nil && v.Base != nil && held.HLC.Compare(*v.Base) > 0 {
		// v was made without seeing the version held (a conflict): the held edit is lost
		// here, and the history says so at its own time, as the other side's does.
		if err := s.auditAs(ctx, tx, v.ID, toTime(held.HLC.Wall), "superseded", held.Author, supersededBy(v), held.Content); err != nil {
			return "", err
		}
	}
	if d.DuplicateOf == "" {
		return Applied, s.write(ctx, tx, heldp, v, now, words)
	}
	// The version is taken, forgotten at once as a duplicate of the smaller id: a version
	// of this store's, which it sends.
	w := v
	w.Forgotten, w.Reason = true, "duplicate of "+d.DuplicateOf
	if err := s.write(ctx, tx, heldp, w, now, words); err != nil {
		return "", err
	}
	if err := s.auditAs(ctx, tx, v.ID, now, "forget", s.author, w.Reason, v.Content); err != nil {
		return "", err
	}
	return Applied, s.stamp(ctx, tx, v.ID, "forget", now)
}

// supersededBy is the reason of a version's history row when w's version won over it.
func supersededBy(w Version) string { return "superseded by " + w.Author + "'s edit" }

// write makes the memory of v hold v (held: its version before, nil when new), its word
// counts changed into words; its history row has the version's own time.
func (s *Store) write(ctx context.Context, tx cachedTx, held *Version, v Version, now time.Time, words map[string]int) error {
	tags, _ := json.Marshal(v.Tags)
	var forgotten int64 // a memory forgotten by a teammate: when, by the version's clock
	reason := ""
	if v.Forgotten {
		forgotten, reason = max(v.HLC.Wall, 1), v.Reason
	}
	if held == nil {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO memories (id, project, scope, branch, kind, content, norm, tags, created_at, updated_at, forgotten_at, forgot_reason,
				author, hlc_wall, hlc_logical, node)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			v.ID, v.Project, scope(v.Project), v.Branch, v.Kind, v.Content, normalize(v.Content), string(tags), toMS(v.CreatedAt), toMS(v.UpdatedAt),
			forgotten, reason, v.Author, v.HLC.Wall, v.HLC.Logical, v.Node)
		if err != nil {
			return err
		}
		if !v.Forgotten {
			addWords(words, v.Content, 1)
		}
		return s.auditAs(ctx, tx, v.ID, toTime(v.HLC.Wall), v.Op, v.Author, reason, "")
	}
	_, err := tx.ExecContext(ctx, `UPDATE memories SET branch = ?, kind = ?, content = ?, norm = ?, tags = ?, created_at = ?, updated_at = ?,
			forgotten_at = CASE WHEN ? THEN (CASE WHEN forgotten_at = 0 THEN max(?, 1) ELSE forgotten_at END) ELSE 0 END, forgot_reason = ?,
			author = ?, hlc_wall = ?, hlc_logical = ?, node = ?, branch_verdict = ''
		WHERE id = ?`,
		v.Branch, v.Kind, v.Content, normalize(v.Content), string(tags), toMS(v.CreatedAt), toMS(v.UpdatedAt),
		v.Forgotten, v.HLC.Wall, reason, v.Author, v.HLC.Wall, v.HLC.Logical, v.Node, v.ID)
	if err != nil {
		return err
	}
	if err := closePairs(ctx, tx, v.ID); err != nil {
		return err
	}
	if !held.Forgotten {
		addWords(words, held.Content, -1)
	}
	if !v.Forgotten {
		addWords(words, v.Content, 1)
	}
	return s.auditAs(ctx, tx, v.ID, toTime(v.HLC.Wall), v.Op, v.Author, reason, held.Content)
}

// forgetDuplicate forgets the memory id as a duplicate of keep, as a new version of this
// store's (sent when its project is shared).
func (s *Store) forgetDuplicate(ctx context.Context, tx cachedTx, id, keep string, now time.Time, words map[string]int) error {
	m, err := scanMemory(tx.QueryRowContext(ctx, `SELECT `+memoryCols+` FROM memories m WHERE m.id = ?`, id))
	if err != nil {
		return err
	}
	reason := "duplicate of " + keep
	if m.ForgottenAt == nil {
		addWords(words, m.Content, -1)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE memories SET forgotten_at = CASE WHEN forgotten_at = 0 THEN ? ELSE forgotten_at END, forgot_reason = ? WHERE id = ?`,
		max(toMS(now), 1), reason, id); err != nil {
		return err
	}
	if err := closePairs(ctx, tx, id); err != nil {
		return err
	}
	if err := s.auditAs(ctx, tx, id, now, "forget", s.author, reason, m.Content); err != nil {
		return err
	}
	return s.stamp(ctx, tx, id, "forget", now)
}

// auditAs is audit with the change's author.
func (s *Store) auditAs(ctx context.Context, tx cachedTx, id string, now time.Time, op, author, reason, before string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO memory_log (memory_id, at, op, reason, before, author) VALUES (?, ?, ?, ?, ?, ?)`,
		id, toMS(now), op, reason, before, author)
	return err
}

// RetryKept applies the records kept for a format newer than the build that received them
// (an upgrade reads them now): each one this build reads leaves team_rejected and is
// applied, or stays there refused for what it is now; the others stay. It says how many
// it applied.
func (s *Store) RetryKept(ctx context.Context, now time.Time) (int, error) {
	type kept struct {
		id               int64
		project, subject string
		record           []byte
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, project, subject, record FROM team_rejected WHERE kind = ? ORDER BY id`, RejectFormat)
	if err != nil {
		return 0, fmt.Errorf("read kept team records: %w", err)
	}
	var ks []kept
	for rows.Next() {
		var k kept
		if err := rows.Scan(&k.id, &k.project, &k.subject, &k.record); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read kept team records: %w", err)
		}
		ks = append(ks, k)
	}
	rows.Close()
	applied := 0
	for _, k := range ks {
		v, err := DecodeVersion(k.record)
		if errors.Is(err, ErrNewerFormat) {
			continue
		}
		if err == nil {
			err = CheckVersion(v, k.project, strings.TrimPrefix(k.subject, "thatch.team."+k.project+"."), now)
		}
		err = s.withTx(ctx, func(tx cachedTx) error {
			var rej *RecordError
			if errors.As(err, &rej) {
				_, err := tx.ExecContext(ctx, `UPDATE team_rejected SET kind = ?, reason = ? WHERE id = ?`, rej.Kind, rej.Detail, k.id)
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM team_rejected WHERE id = ?`, k.id); err != nil {
				return err
			}
			if shared, err := isShared(ctx, tx, k.project); err != nil || !shared {
				return err
			}
			words := map[string]int{}
			out, err := s.apply(ctx, tx, v, now, words)
			if err != nil {
				return err
			}
			if out == Applied {
				applied++
			}
			return writeWords(ctx, tx, words)
		})
		if err != nil {
			return applied, fmt.Errorf("apply kept team record %d: %w", k.id, err)
		}
	}
	return applied, nil
}

// TeamRejected is a record refused from the team.
type TeamRejected struct {
	Project, Subject, Kind, Reason string
	StreamSeq                      uint64
	At                             time.Time
}

// Rejections are the last limit records refused from the team, newest first.
func (s *Store) Rejections(ctx context.Context, limit int) ([]TeamRejected, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT project, subject, kind, reason, stream_seq, at FROM team_rejected ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("read refused team records: %w", err)
	}
	defer rows.Close()
	var out []TeamRejected
	for rows.Next() {
		var r TeamRejected
		var at int64
		if err := rows.Scan(&r.Project, &r.Subject, &r.Kind, &r.Reason, &r.StreamSeq, &at); err != nil {
			return nil, err
		}
		r.At = toTime(at)
		out = append(out, r)
	}
	return out, rows.Err()
}
