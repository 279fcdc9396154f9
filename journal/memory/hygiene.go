package memory

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The kinds of a hygiene Signal.
const (
	SignalDuplicate = "duplicate"
	SignalOrphaned  = "orphaned"
	SignalMerged    = "merged"
	SignalStale     = "stale"
)

// Hygiene is what needs a look in a store (protocol §6, memory.hygiene): the open duplicate
// pairs (best score first, each pair's ids in id order), the stale memories (longest untouched
// first), and the memories of a deleted branch, orphaned or merged into the default branch (a
// candidate to make project-wide), by id. The slices are never nil, so JSON shows [].
type Hygiene struct {
	DuplicatePairs [][2]string `json:"duplicatePairs"`
	Stale          []string    `json:"stale"`
	Orphaned       []string    `json:"orphaned"`
	Merged         []string    `json:"merged"`
}

// Signal is one open hygiene signal with its memories in full, for an extraction payload:
// Kind is SignalDuplicate (two memories) or SignalOrphaned, SignalMerged or SignalStale (one).
type Signal struct {
	Kind     string   `json:"kind"`
	Memories []Memory `json:"memories"`
}

// Hygiene is the open hygiene signals of the project keys projects (none = every project) at
// now. It changes nothing: looking at a stale memory here does not count as a use.
func (s *Store) Hygiene(ctx context.Context, projects []string, now time.Time) (Hygiene, error) {
	// One read transaction, so the four lists describe one state of the store.
	tx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return Hygiene{}, fmt.Errorf("memory hygiene: %w", err)
	}
	defer tx.Rollback()
	h, err := s.hygiene(ctx, tx, projects, now)
	if err != nil {
		return Hygiene{}, fmt.Errorf("memory hygiene: %w", err)
	}
	return h, nil
}

// hygiene reads Hygiene's lists through q.
func (s *Store) hygiene(ctx context.Context, q queryer, projects []string, now time.Time) (Hygiene, error) {
	h := Hygiene{DuplicatePairs: [][2]string{}, Stale: []string{}, Orphaned: []string{}, Merged: []string{}}
	pairs, err := openPairs(ctx, q, projects, -1)
	if err != nil {
		return Hygiene{}, err
	}
	for _, p := range pairs {
		h.DuplicatePairs = append(h.DuplicatePairs, [2]string{p.a, p.b})
	}
	if h.Orphaned, err = verdicts(ctx, q, projects, SignalOrphaned, -1); err != nil {
		return Hygiene{}, err
	}
	if h.Merged, err = verdicts(ctx, q, projects, SignalMerged, -1); err != nil {
		return Hygiene{}, err
	}
	if h.Stale, err = s.stale(ctx, q, projects, now, -1); err != nil {
		return Hygiene{}, err
	}
	return h, nil
}

// Signals is up to max open signals of the project keys projects (none = every project) at
// now, with their memories in full: duplicate pairs first (best score first), then orphaned,
// merged and stale memories (as Hygiene orders them). limit is 1 to 100 (0 = 10). Nothing is
// marked used, so a stale memory stays stale until somebody acts on it. One project's answer
// is kept (signalsMemo) until a write or the clock may change it; its Memories may be shared
// with other callers: read them, do not change them.
func (s *Store) Signals(ctx context.Context, projects []string, limit int, now time.Time) ([]Signal, error) {
	limit, err := checkLimit(limit, 10, 100)
	if err != nil {
		return nil, err
	}
	if len(projects) != 1 {
		out, _, err := s.readSignals(ctx, projects, limit, now, false)
		return out, err
	}
	// One project's, as every extraction payload asks for: kept until they may change.
	key := signalsKey{projects[0], limit}
	staleBefore := s.staleBefore(now)
	noneStale := func(a keptAnswer[keptSignals]) bool { return staleBefore < a.v.next }
	if a, ok := s.signals.get(key, s.writes.Load(), now, noneStale); ok {
		return slices.Clone(a.signals), nil
	}
	writes := s.writes.Load() // before the read: a write committed meanwhile makes the answer old at once
	out, next, err := s.readSignals(ctx, projects, limit, now, true)
	if err != nil {
		return nil, err
	}
	s.signals.put(key, writes, now, keptSignals{next: next, signals: out})
	return slices.Clone(out), nil
}

// SignalPage is one page of the open signals, in Signals' order, with how many there are
// in all and of each kind: a person pages through them knowing how many remain.
type SignalPage struct {
	Total   int            `json:"total"`
	Counts  map[string]int `json:"counts"` // by kind; a kind without signals is left out
	Offset  int            `json:"offset"`
	Signals []Signal       `json:"signals"` // never nil
}

// Kinds says how many signals there are of each kind, in Signals' order, for people:
// "1 duplicate pair, 60 stale memories"; "" when there are none.
func (p SignalPage) Kinds() string {
	var parts []string
	for _, k := range []struct{ kind, one, many string }{
		{SignalDuplicate, "duplicate pair", "duplicate pairs"},
		{SignalOrphaned, "memory of a deleted branch", "memories of deleted branches"},
		{SignalMerged, "memory of a merged branch", "memories of merged branches"},
		{SignalStale, "stale memory", "stale memories"},
	} {
		switch n := p.Counts[k.kind]; n {
		case 0:
		case 1:
			parts = append(parts, "1 "+k.one)
		default:
			parts = append(parts, fmt.Sprintf("%d %s", n, k.many))
		}
	}
	return strings.Join(parts, ", ")
}

// SignalsPage is the open signals of projects (none = every project) at now from the
// offset-th (from 0), at most limit (1 to 100, 0 = 10) of them, and how many there are:
// one read of the store, so the counts and the page agree. Nothing is marked used.
func (s *Store) SignalsPage(ctx context.Context, projects []string, offset, limit int, now time.Time) (SignalPage, error) {
	limit, err := checkLimit(limit, 10, 100)
	if err != nil {
		return SignalPage{}, err
	}
	if offset < 0 {
		return SignalPage{}, fmt.Errorf("%w: offset %d is negative; give 0 for the first signals", ErrBadRequest, offset)
	}
	p := SignalPage{Counts: map[string]int{}, Offset: offset, Signals: []Signal{}}
	err = func() error {
		tx, err := s.r.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		h, err := s.hygiene(ctx, tx, projects, now)
		if err != nil {
			return err
		}
		var list []Signal // each with its memories' ids only, until the page is known
		for _, pair := range h.DuplicatePairs {
			list = append(list, Signal{Kind: SignalDuplicate, Memories: []Memory{{ID: pair[0]}, {ID: pair[1]}}})
		}
		for _, k := range []struct {
			kind string
			ids  []string
		}{{SignalOrphaned, h.Orphaned}, {SignalMerged, h.Merged}, {SignalStale, h.Stale}} {
			for _, id := range k.ids {
				list = append(list, Signal{Kind: k.kind, Memories: []Memory{{ID: id}}})
			}
		}
		p.Total = len(list)
		for _, sg := range list {
			p.Counts[sg.Kind]++
		}
		list = list[min(offset, len(list)):min(offset+limit, len(list))]
		var ids []string
		for _, sg := range list {
			for _, m := range sg.Memories {
				ids = append(ids, m.ID)
			}
		}
		byID, err := memoriesByID(ctx, tx, ids)
		if err != nil {
			return err
		}
		for _, sg := range list {
			full := Signal{Kind: sg.Kind}
			for _, m := range sg.Memories {
				full.Memories = append(full.Memories, byID[m.ID])
			}
			p.Signals = append(p.Signals, full)
		}
		return nil
	}()
	if err != nil {
		return SignalPage{}, fmt.Errorf("memory signals: %w", err)
	}
	return p, nil
}

// readSignals reads Signals from the store, in one read transaction so the lists describe
// one state of it; with next, also the time in unix ms of the last use or update of the
// live memory of projects that becomes stale next (when staleBefore reaches it),
// math.MaxInt64 when none will.
func (s *Store) readSignals(ctx context.Context, projects []string, limit int, now time.Time, withNext bool) ([]Signal, int64, error) {
	out, next, err := func() ([]Signal, int64, error) {
		tx, err := s.r.BeginTx(ctx, nil)
		if err != nil {
			return nil, 0, err
		}
		defer tx.Rollback()
		type pending struct {
			kind string
			ids  []string
		}
		var list []pending
		pairs, err := openPairs(ctx, tx, projects, limit)
		if err != nil {
			return nil, 0, err
		}
		for _, p := range pairs {
			list = append(list, pending{SignalDuplicate, []string{p.a, p.b}})
		}
		for _, kind := range []string{SignalOrphaned, SignalMerged, SignalStale} {
			left := limit - len(list)
			if left == 0 {
				break
			}
			var ids []string
			if kind == SignalStale {
				ids, err = s.stale(ctx, tx, projects, now, left)
			} else {
				ids, err = verdicts(ctx, tx, projects, kind, left)
			}
			if err != nil {
				return nil, 0, err
			}
			for _, id := range ids {
				list = append(list, pending{kind, []string{id}})
			}
		}
		next := int64(math.MaxInt64)
		if withNext {
			if next, err = s.nextStale(ctx, tx, projects, now); err != nil {
				return nil, 0, err
			}
		}
		out := []Signal{}
		if len(list) == 0 {
			return out, next, nil
		}
		var ids []string
		for _, p := range list {
			ids = append(ids, p.ids...)
		}
		byID, err := memoriesByID(ctx, tx, ids)
		if err != nil {
			return nil, 0, err
		}
		for _, p := range list {
			sig := Signal{Kind: p.kind}
			for _, id := range p.ids {
				sig.Memories = append(sig.Memories, byID[id])
			}
			out = append(out, sig)
		}
		return out, next, nil
	}()
	if err != nil {
		return nil, 0, fmt.Errorf("memory signals: %w", err)
	}
	return out, next, nil
}

// signalsMemo keeps the last Signals answer of each project. An extraction payload carries
// its project's signals, and 1,000 payloads a second read them 1,000 times (a tenth of a
// payload call's CPU, docs/performance.md); they change only with a write to the store or
// when a memory becomes stale.
type signalsMemo = readMemo[signalsKey, keptSignals]

type signalsKey struct {
	project string
	limit   int
}

// keptSignals is an answer good until staleBefore reaches next.
type keptSignals struct {
	next    int64
	signals []Signal
}

// nextStale is the least last use or update, in unix ms, of the live memories of projects
// that are not stale at now: when staleBefore reaches it, that memory is stale.
// math.MaxInt64 when every live memory is stale already, or there is none.
func (s *Store) nextStale(ctx context.Context, q queryer, projects []string, now time.Time) (int64, error) {
	cond, args := inProjects("project", projects)
	var next sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT min(max(used_at, updated_at)) FROM memories WHERE forgotten_at = 0 AND max(used_at, updated_at) > ?`+cond,
		append([]any{s.staleBefore(now)}, args...)...).Scan(&next)
	if err != nil || !next.Valid {
		return math.MaxInt64, err
	}
	return next.Int64, nil
}

// memoriesByID reads the memories ids (forgotten ones too) by id.
func memoriesByID(ctx context.Context, q queryer, ids []string) (map[string]Memory, error) {
	list, _ := json.Marshal(ids)
	rows, err := q.QueryContext(ctx, `SELECT `+memoryCols+` FROM memories m WHERE m.id IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]Memory, len(ids))
	for rows.Next() {
		m, err := scanMemory(rows)
		if err != nil {
			return nil, err
		}
		out[m.ID] = m
	}
	return out, rows.Err()
}

// staleBefore is the time in unix ms at or before which a memory last used or updated is
// stale at now.
func (s *Store) staleBefore(now time.Time) int64 {
	return toMS(now.Add(-s.staleAfter))
}

// stale is the stale memories of projects (none = every project) at now, longest untouched
// first, at most limit (-1 = all). With a project, the memories_recent index answers alone.
func (s *Store) stale(ctx context.Context, q queryer, projects []string, now time.Time, limit int) ([]string, error) {
	cond, args := inProjects("project", projects)
	query := `SELECT id FROM memories WHERE forgotten_at = 0 AND max(used_at, updated_at) <= ?` + cond
	return ids(ctx, q, query+` ORDER BY max(used_at, updated_at), id LIMIT ?`, append(append([]any{s.staleBefore(now)}, args...), limit)...)
}

// verdicts is the live memories of projects (none = every project) that the last branch
// check judged verdict (SignalOrphaned or SignalMerged), by id, at most limit (-1 = all).
func verdicts(ctx context.Context, q queryer, projects []string, verdict string, limit int) ([]string, error) {
	// branch_verdict != '' lets SQLite use the partial index memories_verdict, and INDEXED
	// BY makes it: for one project (project = ?) the planner chose memories_live and read
	// every live memory of the project, 10,000 rows and 50–150 ms a call at 1,000,000
	// memories over 100 projects, at every session's start (HygieneLine).
	query, args := verdictsQuery(projects, verdict, limit)
	return ids(ctx, q, query, args...)
}

// verdictsQuery is verdicts' query and its arguments.
func verdictsQuery(projects []string, verdict string, limit int) (string, []any) {
	cond, args := inProjects("project", projects)
	query := `SELECT id FROM memories INDEXED BY memories_verdict WHERE forgotten_at = 0 AND branch_verdict != '' AND branch_verdict = ?` + cond
	return query + ` ORDER BY id LIMIT ?`, append(append([]any{verdict}, args...), limit)
}

// ids runs a query selecting one id a row; the answer is never nil.
func ids(ctx context.Context, q queryer, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// pair is two memories of one project that look alike, a < b, with what was true of each side
// when the pair was found: its updated_at and the hash of its normalized content.
type pair struct {
	a, b, project      string
	score              float64
	aUpdated, bUpdated int64
	aHash, bHash       string
}

// side is one memory as pairs see it.
type side struct {
	id, norm string
	updated  int64
}

// newPair orders x and y into a pair of project.
func newPair(project string, x, y side, score float64) pair {
	if y.id < x.id {
		x, y = y, x
	}
	return pair{a: x.id, b: y.id, project: project, score: score,
		aUpdated: x.updated, bUpdated: y.updated, aHash: normHash(x.norm), bHash: normHash(y.norm)}
}

// normHash identifies a normalized content in a dismissal, without keeping the text twice.
func normHash(norm string) string {
	sum := sha256.Sum256([]byte(norm))
	return hex.EncodeToString(sum[:16])
}

// openPairs is the open duplicate pairs of projects (none = every project), best score first,
// at most limit (-1 = all). The join with both sides' current state is what makes a pair closed
// once a side changed, whatever wrote the change.
func openPairs(ctx context.Context, q queryer, projects []string, limit int) ([]pair, error) {
	cond, args := inProjects("p.project", projects)
	query := `SELECT p.a, p.b, p.project, p.score FROM pairs p
		JOIN memories ma ON ma.id = p.a AND ma.forgotten_at = 0 AND ma.updated_at = p.a_updated
		JOIN memories mb ON mb.id = p.b AND mb.forgotten_at = 0 AND mb.updated_at = p.b_updated
		WHERE true` + cond
	rows, err := q.QueryContext(ctx, query+` ORDER BY p.score DESC, p.a, p.b LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pair
	for rows.Next() {
		var p pair
		if err := rows.Scan(&p.a, &p.b, &p.project, &p.score); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// recordPair records p as found at now, unless it is dismissed with both current texts,
// either side is no longer as p saw it, or it is recorded already with the same sides (so
// the periodic pass is idempotent). It reports whether it recorded anything.
func recordPair(ctx context.Context, tx cachedTx, p pair, now time.Time) (bool, error) {
	res, err := tx.ExecContext(ctx, `
		INSERT INTO pairs (a, b, project, score, found_at, a_updated, b_updated)
		SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7
		WHERE NOT EXISTS (SELECT 1 FROM dismissed WHERE a = ?1 AND b = ?2 AND a_hash = ?8 AND b_hash = ?9)
			AND EXISTS (SELECT 1 FROM memories WHERE id = ?1 AND forgotten_at = 0 AND updated_at = ?6)
			AND EXISTS (SELECT 1 FROM memories WHERE id = ?2 AND forgotten_at = 0 AND updated_at = ?7)
		ON CONFLICT (a, b) DO UPDATE SET score = excluded.score, found_at = excluded.found_at,
			a_updated = excluded.a_updated, b_updated = excluded.b_updated
		WHERE pairs.a_updated != excluded.a_updated OR pairs.b_updated != excluded.b_updated`,
		p.a, p.b, p.project, p.score, toMS(now), p.aUpdated, p.bUpdated, p.aHash, p.bHash)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// pairUp records a pair of m, just written in tx, with each of its look-alikes at or above
// DuplicateThreshold. The look-alikes were scored before the transaction; each is scored
// again here against its text as tx sees it, which a concurrent write may have changed.
func pairUp(ctx context.Context, tx cachedTx, m Memory, similar []Similar, now time.Time) error {
	var cands []string
	for _, x := range similar {
		if x.ID != m.ID && x.Score >= DuplicateThreshold {
			cands = append(cands, x.ID)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	list, _ := json.Marshal(cands)
	rows, err := tx.QueryContext(ctx, `SELECT id, norm, updated_at FROM memories
		WHERE id IN (SELECT value FROM json_each(?)) AND project = ? AND forgotten_at = 0`, string(list), m.Project)
	if err != nil {
		return err
	}
	var others []side
	for rows.Next() {
		var o side
		if err := rows.Scan(&o.id, &o.norm, &o.updated); err != nil {
			rows.Close()
			return err
		}
		others = append(others, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	self := side{id: m.ID, norm: normalize(m.Content), updated: toMS(m.UpdatedAt)}
	words := contentWords(m.Content)
	for _, o := range others {
		// contentWords of the normalized text are those of the text: normalizing only
		// lower-cases and collapses whitespace.
		if score := dice(words, contentWords(o.norm)); score >= DuplicateThreshold {
			if _, err := recordPair(ctx, tx, newPair(m.Project, self, o, score), now); err != nil {
				return err
			}
		}
	}
	return nil
}

// closePairs deletes the pairs of the memory id, in the transaction that changes it.
func closePairs(ctx context.Context, tx cachedTx, id string) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM pairs WHERE a = ?1 OR b = ?1`, id)
	return err
}

// dismissal is the memo of a Dismiss.
type dismissal struct {
	A string `json:"a"`
	B string `json:"b"`
}

// Dismiss says the live memories a and b of c.Project are not duplicates (c.Project "" = a
// person: any project, but both of one). Their pair closes, and no write or pass records it
// again while both texts stay as they are now (compared normalized); a change of either text
// lets it be found again. Audited as "dismiss" on both memories. A repeated callID changes
// nothing.
func (s *Store) Dismiss(ctx context.Context, c Caller, a, b string, now time.Time) error {
	if a == b {
		return fmt.Errorf("%w: %s twice; give the two ids of the pair", ErrBadRequest, a)
	}
	if b < a {
		a, b = b, a
	}
	err := s.withTx(ctx, func(tx cachedTx) error {
		var first dismissal
		if ok, err := s.repeatedWrite(ctx, tx, c, toolDismiss, &first); ok || err != nil {
			return err
		}
		ma, err := live(ctx, tx, a, c.Project)
		if err != nil {
			return err
		}
		mb, err := live(ctx, tx, b, c.Project)
		if err != nil {
			return err
		}
		if ma.Project != mb.Project {
			return fmt.Errorf("%w: %s and %s are memories of different projects, never a pair; give two memories of one project", ErrBadRequest, a, b)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO dismissed (a, b, project, a_hash, b_hash, at, session_id) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (a, b) DO UPDATE SET a_hash = excluded.a_hash, b_hash = excluded.b_hash, at = excluded.at, session_id = excluded.session_id`,
			a, b, ma.Project, normHash(normalize(ma.Content)), normHash(normalize(mb.Content)), toMS(now), c.SessionID)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM pairs WHERE a = ? AND b = ?`, a, b); err != nil {
			return err
		}
		if err := audit(ctx, tx, a, now, "dismiss", c, "not a duplicate of "+b, ""); err != nil {
			return err
		}
		if err := audit(ctx, tx, b, now, "dismiss", c, "not a duplicate of "+a, ""); err != nil {
			return err
		}
		return memo(ctx, tx, c, toolDismiss, dismissal{A: a, B: b}, now)
	})
	if err != nil {
		return wrap("dismiss "+a+" and "+b, err)
	}
	return nil
}

// Restore undoes the forget of the memory id of c.Project (c.Project "" = a person: any
// project): it is live again, searchable and injected, unless a live memory of its project
// says the same (normalized content), which is ErrBadRequest. Its times stay as they were;
// its branch is judged again by the next branch check, and its look-alikes are paired as at a
// Remember. Audited as "restore". A repeated callID repeats the first answer.
func (s *Store) Restore(ctx context.Context, c Caller, id string, now time.Time) (Changed, error) {
	// The look-alikes are read before the write transaction, as Remember does. A forgotten
	// memory is not in the full-text index, so it cannot find itself.
	var similar []Similar
	m, err := scanMemory(s.r.QueryRowContext(ctx, `SELECT `+memoryCols+` FROM memories m WHERE m.id = ?`, id))
	if err == nil && m.ForgottenAt != nil {
		if similar, err = s.similar(ctx, m.Project, m.Content); err != nil {
			return Changed{}, fmt.Errorf("restore %s: find similar memories: %w", id, err)
		}
	}
	var out Changed
	err = s.withTx(ctx, func(tx cachedTx) error {
		if ok, err := s.repeatedWrite(ctx, tx, c, toolRestore, &out); ok || err != nil {
			out.Repeat = ok
			return err
		}
		m, err := scanMemory(tx.QueryRowContext(ctx, `SELECT `+memoryCols+` FROM memories m WHERE m.id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) || err == nil && c.Project != "" && m.Project != c.Project {
			return fmt.Errorf("%w: no memory %s in this project; list the project's memories for its id", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		if m.ForgottenAt == nil {
			return fmt.Errorf("%w: memory %s is not forgotten; there is nothing to restore", ErrBadRequest, id)
		}
		other, err := liveByNorm(ctx, tx, m.Project, normalize(m.Content))
		if err == nil {
			return fmt.Errorf("%w: memory %s already says this; forget it first to restore %s instead", ErrBadRequest, other.ID, id)
		}
		if !errors.Is(err, ErrNotFound) {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE memories SET forgotten_at = 0, forgot_reason = '', branch_verdict = '' WHERE id = ?`, m.ID); err != nil {
			return err
		}
		if err := countWords(ctx, tx, m.Content, 1); err != nil {
			return err
		}
		if err := audit(ctx, tx, m.ID, now, "restore", c, "", ""); err != nil {
			return err
		}
		if err := s.stamp(ctx, tx, m.ID, "restore", now); err != nil {
			return err
		}
		m.Author = s.author
		m.ForgottenAt = nil
		if err := pairUp(ctx, tx, m, similar, now); err != nil {
			return err
		}
		out = Changed{Memory: m}
		return memo(ctx, tx, c, toolRestore, out, now)
	})
	if err != nil {
		return Changed{}, wrap("restore "+id, err)
	}
	return out, nil
}
