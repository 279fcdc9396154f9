package journal

import (
	"database/sql"
	"testing"
	"time"
)

func TestScratchQueries(t *testing.T) {
	s, err := Open("/tmp/rh/big.db")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := func(name, q string, args ...any) {
		t0 := time.Now()
		rows, err := s.r.Query(q, args...)
		if err != nil {
			t.Fatal(err)
		}
		n, bytes := 0, 0
		cols, _ := rows.Columns()
		dest := make([]any, len(cols))
		raw := make([]sql.RawBytes, len(cols))
		for i := range dest {
			dest[i] = &raw[i]
		}
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				t.Fatal(err)
			}
			n++
			for _, r := range raw {
				bytes += len(r)
			}
		}
		rows.Close()
		t.Logf("%-10s %6.0f ms  %d rows %d bytes", name, time.Since(t0).Seconds()*1000, n, bytes)
	}
	chunked := func(name, expr string) {
		t0 := time.Now()
		var max int64
		s.r.QueryRow(`SELECT max(id) FROM entries`).Scan(&max)
		n := 0
		for lo := int64(0); lo <= max; lo += 4096 {
			var b sql.RawBytes
			rows, err := s.r.Query(`SELECT `+expr+` FROM entries WHERE id > ? AND id <= ?`, lo, lo+4096)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				rows.Scan(&b)
				n += len(b)
			}
			rows.Close()
		}
		t.Logf("%-10s %6.0f ms  %d bytes", name, time.Since(t0).Seconds()*1000, n)
	}
	for range 2 {
		run("rows", `SELECT root_id, entry_id, tool, claimed_by, claimed_at, size, trivial FROM entries ORDER BY id`)
		run("rows-id", `SELECT id FROM entries ORDER BY id`)
		chunked("range-full", `group_concat(octet_length(root_id)||' '||root_id||octet_length(entry_id)||' '||entry_id||octet_length(tool)||' '||tool||octet_length(claimed_by)||' '||claimed_by||claimed_at||' '||size||' '||trivial||' ', '' ORDER BY id)`)
		chunked("range-noord", `group_concat(octet_length(root_id)||' '||root_id||octet_length(entry_id)||' '||entry_id||octet_length(tool)||' '||tool||octet_length(claimed_by)||' '||claimed_by||claimed_at||' '||size||' '||trivial||' ', '')`)
		chunked("range-ids", `group_concat(entry_id, '')`)
		chunked("range-count", `count(*)`)
		run("sessions", `SELECT data FROM sessions`)
		run("sessions-chunk", `SELECT group_concat(data, ',') FROM sessions GROUP BY substr(session_id,1,8)`)
	}
}
