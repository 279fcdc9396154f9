package journal

import (
	"fmt"

	"github.com/thatch-dev/thatch/runtime"
)

// payloadQuery is what PayloadEntries reads, through a statement the store prepares once on
// its read pool (database/sql prepares it on each connection of the pool as it is used):
// parsing and planning it at every call was a quarter of a payload read's CPU.
const payloadQuery = `SELECT entry_id, tool, coalesce(CAST(body AS TEXT) ->> '$.title', ''),
		coalesce(substr(CAST(body AS TEXT) -> '$.args', 1, ?), ''), coalesce(CAST(body AS TEXT) ->> '$.output', '')
		FROM entries WHERE root_id = ? AND claimed_by = ? ORDER BY id`

// PayloadEntries reads, through the read-only pool, what a payload shows of the entries of root
// claimed by claimant, oldest first: their tool, title and output, and their args cut to
// runtime.PayloadArgsMax+1 characters (FormatPayload cuts them to PayloadArgsMax, and a
// nested argument is not bounded when journaled). The metadata, up to four times
// THATCH_INTERACTION_OUTPUT_MAX bytes an entry, is never read: no payload shows it.
// SQLite takes the fields out of the body itself (the body is cast to text: a BLOB would
// be taken for JSONB), so only they reach Go. It is safe to call from any goroutine.
func (s *Store) PayloadEntries(root, claimant string) ([]runtime.PayloadEntry, error) {
	rows, err := s.payload.Query(runtime.PayloadArgsMax+1, root, claimant)
	if err != nil {
		return nil, fmt.Errorf("read payload of %s: %w", root, err)
	}
	defer rows.Close()
	var out []runtime.PayloadEntry
	for rows.Next() {
		var e runtime.PayloadEntry
		var args string
		if err := rows.Scan(&e.ID, &e.Body.Tool, &e.Body.Title, &args, &e.Body.Output); err != nil {
			return nil, fmt.Errorf("read payload of %s: %w", root, err)
		}
		if args != "" {
			e.Body.Args = []byte(args)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read payload of %s: %w", root, err)
	}
	return out, nil
}
