package memory

import (
	"context"
	"fmt"
	"time"
)

// Written is one change a session made to a memory through the memory tools: op is create,
// update or forget.
type Written struct {
	MemoryID string    `json:"id"`
	Op       string    `json:"op"`
	At       time.Time `json:"at"`
}

// WrittenMax bounds what WrittenBy reads of one session.
const WrittenMax = 200

// WrittenBy is what each of sessions (extraction children, in provenance) created, updated
// and forgot, oldest first: at most WrittenMax changes a session. A session that changed
// nothing has no key.
func (s *Store) WrittenBy(ctx context.Context, sessions []string) (map[string][]Written, error) {
	out := map[string][]Written{}
	for _, id := range sessions {
		if _, done := out[id]; done || id == "" {
			continue
		}
		rows, err := s.r.QueryContext(ctx, `SELECT memory_id, op, at FROM memory_log
			WHERE session_id = ? AND session_id != '' AND op IN ('create', 'update', 'forget') ORDER BY id LIMIT ?`, id, WrittenMax)
		if err != nil {
			return nil, fmt.Errorf("read what session %s wrote: %w", id, err)
		}
		var ws []Written
		for rows.Next() {
			var w Written
			var at int64
			if err := rows.Scan(&w.MemoryID, &w.Op, &at); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read what session %s wrote: %w", id, err)
			}
			w.At = toTime(at)
			ws = append(ws, w)
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read what session %s wrote: %w", id, err)
		}
		rows.Close()
		if len(ws) > 0 {
			out[id] = ws
		}
	}
	return out, nil
}

// Writers are the sessions that wrote m through the memory tools, oldest first: its creator
// and the sessions of its history's creates, updates and forgets (a person's have none).
// Those that were extractions have a provenance in the journal.
func Writers(m Memory, audit []Audit) []string {
	ids := []string{m.Source.SessionID}
	for _, a := range audit {
		switch a.Op {
		case "create", "update", "forget":
			if a.SessionID != "" {
				ids = append(ids, a.SessionID)
			}
		}
	}
	return ids
}

// WroteAs is what session did to a memory whose history is audit: create, update or forget
// (the first of these it did, in that order), "" when it did none.
func WroteAs(audit []Audit, session string) string {
	did := map[string]bool{}
	for _, a := range audit {
		if a.SessionID == session && session != "" {
			did[a.Op] = true
		}
	}
	for _, op := range []string{"create", "update", "forget"} {
		if did[op] {
			return op
		}
	}
	return ""
}
