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
	_ = run
	for range 2 {
		chunked("range-count", `count(*)`)
		chunked("range-ids", `group_concat(entry_id, x'00')`)
		chunked("range-root", `group_concat(root_id, x'00')`)
		chunked("range-size", `group_concat(size, ',')`)
		chunked("range-7", `count(*), group_concat(entry_id, x'00'), group_concat(root_id, x'00'), group_concat(tool, x'00'), group_concat(claimed_by, x'00'), group_concat(claimed_at, ','), group_concat(size, ','), group_concat(trivial, '')`)
		chunked("range-7ord", `count(*), group_concat(entry_id, x'00' ORDER BY id), group_concat(root_id, x'00' ORDER BY id), group_concat(tool, x'00' ORDER BY id), group_concat(claimed_by, x'00' ORDER BY id), group_concat(claimed_at, ',' ORDER BY id), group_concat(size, ',' ORDER BY id), group_concat(trivial, '' ORDER BY id)`)
		chunked("range-json", `json_group_array(json_array(root_id, entry_id, tool, claimed_by, claimed_at, size, trivial))`)
	}
}
