package sqlitedb

import (
	"path/filepath"
	"strings"
	"testing"
)

// A Raw reads what a writer committed (texts with a NUL and other scripts, blobs, NULLs,
// integers bound to its parameters), cannot write, and says what was wrong with a query
// or a path.
func TestRawReadsWhatWasCommitted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	d, err := Open(path, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.W.Exec(`CREATE TABLE r (i INTEGER, s TEXT, b BLOB)`); err != nil {
		t.Fatal(err)
	}
	for i, s := range []any{"plain", "a\x00b", "ünïcödé", nil} {
		if _, err := d.W.Exec(`INSERT INTO r VALUES (?, ?, ?)`, 1<<40+i, s, []byte{byte(i), 0, 255}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ro := range []bool{false, true} {
		r, err := OpenRaw(path, ro, "PRAGMA cache_size = -256")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		err = r.Query(`SELECT i, s, b FROM r WHERE i >= ?1 AND i < ?2 ORDER BY i`, []int64{1<<40 + 1, 1<<40 + 4}, func(w *Row) error {
			got = append(got, strings.Clone(w.Text(1))+"|"+string(w.Bytes(2))+"|"+string(rune('0'+w.Int(0)-1<<40)))
			return nil
		})
		want := []string{"a\x00b|\x01\x00\xff|1", "ünïcödé|\x02\x00\xff|2", "|\x03\x00\xff|3"}
		if err != nil || strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("read-only %v: %q, %v; want %q", ro, got, err, want)
		}
		if err := r.Query(`INSERT INTO r VALUES (9, 'x', NULL)`, nil, func(*Row) error { return nil }); err == nil || !strings.Contains(err.Error(), "readonly") {
			t.Fatalf("a Raw wrote: %v", err)
		}
		if err := r.Query(`SELECT nope FROM r`, nil, func(*Row) error { return nil }); err == nil || !strings.Contains(err.Error(), "no such column: nope") {
			t.Fatalf("a bad query: %v", err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := OpenRaw(filepath.Join(t.TempDir(), "absent.db"), true); err == nil || !strings.Contains(err.Error(), "absent.db") {
		t.Fatalf("a missing file: %v", err)
	}
}
