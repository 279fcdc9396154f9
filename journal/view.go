package journal

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/thatch-dev/thatch/runtime"
)

// SessionDetail is what the journal holds of one session, as committed: its row, a page
// of its entries with their claims, and its extractions' ledger rows.
type SessionDetail struct {
	Session     runtime.Session
	Entries     []EntryRow
	MoreEntries bool // entries follow the page
	Extractions []Extraction
	// Provenance is what the session's extractions completed, newest first (at most 50),
	// and, for an extraction child, what it completed so far.
	Provenance []runtime.Provenance
}

// EntryRow is a journaled entry as a person reads it.
type EntryRow struct {
	ID        string
	Tool      string
	Title     string
	ClaimedBy string
	ClaimedAt time.Time // zero while pending
	At        time.Time // journaled
}

// Extraction is one ledger row of a session: an extraction child and what it cost.
type Extraction struct {
	Child     string
	At        time.Time
	Entries   int
	TokensIn  int64
	TokensOut int64
	USD       float64
	Model     string
	Turns     int
}

// ErrNoSession is SessionDetail's answer for a session the journal does not hold.
var ErrNoSession = errors.New("thatch does not track this session (any more): an extraction child is deleted once its extraction ends, and the journal sweep drops sessions untouched for THATCH_RUNTIME_STATE_TTL_MS or whose folder is gone")

// SessionDetail reads session id through the read-only pool: the session row, its first
// limit entries (oldest first) and its 50 latest extractions. It is safe to call from any
// goroutine and never enters the loop.
func (s *Store) SessionDetail(id string, limit int) (SessionDetail, error) {
	var d SessionDetail
	tx, err := s.r.Begin() // one read transaction: the three parts describe one commit
	if err != nil {
		return d, fmt.Errorf("read session %s: %w", id, err)
	}
	defer tx.Rollback()
	var data []byte
	switch err := tx.QueryRow(`SELECT data FROM sessions WHERE session_id = ?`, id).Scan(&data); {
	case errors.Is(err, sql.ErrNoRows):
		return d, ErrNoSession
	case err != nil:
		return d, fmt.Errorf("read session %s: %w", id, err)
	}
	if err := json.Unmarshal(data, &d.Session); err != nil {
		return d, fmt.Errorf("read session %s: %w", id, err)
	}
	rows, err := tx.Query(`SELECT entry_id, tool, coalesce(CAST(body AS TEXT) ->> '$.title', ''), claimed_by, claimed_at, created_at
		FROM entries WHERE root_id = ? ORDER BY id LIMIT ?`, id, limit+1)
	if err != nil {
		return d, fmt.Errorf("read the entries of %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var e EntryRow
		var claimedAt, at int64
		if err := rows.Scan(&e.ID, &e.Tool, &e.Title, &e.ClaimedBy, &claimedAt, &at); err != nil {
			return d, fmt.Errorf("read the entries of %s: %w", id, err)
		}
		if e.ClaimedBy != "" {
			e.ClaimedAt = fromMS(claimedAt)
		}
		e.At = fromMS(at)
		d.Entries = append(d.Entries, e)
	}
	if err := rows.Err(); err != nil {
		return d, fmt.Errorf("read the entries of %s: %w", id, err)
	}
	if d.MoreEntries = len(d.Entries) > limit; d.MoreEntries {
		d.Entries = d.Entries[:limit]
	}
	xs, err := tx.Query(`SELECT child_id, at, entries, tokens_in, tokens_out, cost, model, turns
		FROM ledger WHERE root_id = ? ORDER BY at DESC LIMIT 50`, id)
	if err != nil {
		return d, fmt.Errorf("read the extractions of %s: %w", id, err)
	}
	defer xs.Close()
	for xs.Next() {
		var x Extraction
		var at int64
		if err := xs.Scan(&x.Child, &at, &x.Entries, &x.TokensIn, &x.TokensOut, &x.USD, &x.Model, &x.Turns); err != nil {
			return d, fmt.Errorf("read the extractions of %s: %w", id, err)
		}
		x.At = fromMS(at)
		d.Extractions = append(d.Extractions, x)
	}
	if err := xs.Err(); err != nil {
		return d, fmt.Errorf("read the extractions of %s: %w", id, err)
	}
	if d.Provenance, err = provenance(tx, `SELECT child_id, root_id, count(*), max(at) FROM provenance
		WHERE root_id = ?1 OR child_id = ?1 GROUP BY child_id ORDER BY max(at) DESC LIMIT 50`, id); err != nil {
		return d, fmt.Errorf("read the provenance of %s: %w", id, err)
	}
	return d, nil
}

// ProvenanceCalls is how many completed calls one runtime.Provenance lists; More counts the
// rest.
const ProvenanceCalls = 100

// Provenance reads what each of the extractions (claimants) completed, in the order given,
// leaving out those the journal keeps nothing of (no extraction, or older than it keeps),
// through the read-only pool. At most 50 are read. It is safe to call from any goroutine.
func (s *Store) Provenance(extractions []string) ([]runtime.Provenance, error) {
	out := []runtime.Provenance{}
	seen := map[string]bool{}
	for _, x := range extractions {
		if x == "" || seen[x] || len(seen) == 50 {
			continue
		}
		seen[x] = true
		tx, err := s.r.Begin()
		if err != nil {
			return nil, fmt.Errorf("read the provenance of %s: %w", x, err)
		}
		ps, err := provenance(tx, `SELECT child_id, root_id, count(*), max(at) FROM provenance WHERE child_id = ? GROUP BY child_id`, x)
		tx.Rollback()
		if err != nil {
			return nil, fmt.Errorf("read the provenance of %s: %w", x, err)
		}
		out = append(out, ps...)
	}
	return out, nil
}

// provenance reads the extractions query selects (child, root, count, last time) and the
// first ProvenanceCalls completed calls of each.
func provenance(tx *sql.Tx, query string, args ...any) ([]runtime.Provenance, error) {
	rows, err := tx.Query(query, args...)
	if err != nil {
		return nil, err
	}
	var out []runtime.Provenance
	for rows.Next() {
		var p runtime.Provenance
		var n int
		var at int64
		if err := rows.Scan(&p.Extraction, &p.Session, &n, &at); err != nil {
			rows.Close()
			return nil, err
		}
		p.At, p.More = fromMS(at), max(n-ProvenanceCalls, 0)
		out = append(out, p)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	for i := range out {
		calls, err := tx.Query(`SELECT entry_id, tool, title FROM provenance WHERE child_id = ? ORDER BY id LIMIT ?`, out[i].Extraction, ProvenanceCalls)
		if err != nil {
			return nil, err
		}
		out[i].Calls = []runtime.CompletedCall{}
		for calls.Next() {
			var c runtime.CompletedCall
			if err := calls.Scan(&c.ID, &c.Tool, &c.Title); err != nil {
				calls.Close()
				return nil, err
			}
			out[i].Calls = append(out[i].Calls, c)
		}
		if err := errors.Join(calls.Err(), calls.Close()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ExtractedFrom is the top-level session an extraction child extracted, from the ledger or
// else from the calls it completed (the ledger has no row of a child whose cost could not be
// read); "" when neither has a row of child (it was no extraction child, or its rows are
// older than the journal keeps).
func (s *Store) ExtractedFrom(child string) (string, error) {
	var root string
	err := s.r.QueryRow(`SELECT root_id FROM ledger WHERE child_id = ?1
		UNION ALL SELECT root_id FROM (SELECT root_id FROM provenance WHERE child_id = ?1 LIMIT 1) LIMIT 1`, child).Scan(&root)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return root, err
}

// HasSessions reports which of ids the journal holds a row of, through the read-only
// pool.
func (s *Store) HasSessions(ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		if id == "" || out[id] {
			continue
		}
		var one int
		switch err := s.r.QueryRow(`SELECT 1 FROM sessions WHERE session_id = ?`, id).Scan(&one); {
		case err == nil:
			out[id] = true
		case !errors.Is(err, sql.ErrNoRows):
			return nil, fmt.Errorf("read session %s: %w", id, err)
		}
	}
	return out, nil
}
