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
	return d, xs.Err()
}

// ExtractedFrom is the top-level session an extraction child extracted, from the ledger;
// "" when the ledger has no row of child (it was no extraction child, or its row is older
// than the ledger keeps).
func (s *Store) ExtractedFrom(child string) (string, error) {
	var root string
	err := s.r.QueryRow(`SELECT root_id FROM ledger WHERE child_id = ?`, child).Scan(&root)
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
