package sqlitedb

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testOptions() Options {
	return Options{
		Noun: "things", Name: "the things", Damaged: "is damaged", DamagedHint: "move it aside",
		Migrations: os.DirFS("testdata"), Pattern: "migrations/*.sql",
	}
}

func TestOpenIsPrivateMigratedAndReadableReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "t.db")
	d, err := Open(path, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.W.Exec(`INSERT INTO t (v) VALUES (7)`); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := d.R.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q, %v; want wal", mode, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	ro, err := OpenReadOnly(path, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var v int
	if err := ro.R.QueryRow(`SELECT v FROM t`).Scan(&v); err != nil || v != 7 {
		t.Fatalf("read %d, %v; want 7", v, err)
	}
	if _, err := ro.W.Exec(`INSERT INTO t (v) VALUES (8)`); err == nil {
		t.Fatal("a read-only DB wrote")
	}
}

func TestDamagedFileSaysWhatToDo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("not a database ", 512)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, testOptions())
	if err == nil || !strings.Contains(err.Error(), "the things "+path+" is damaged") || !strings.HasSuffix(err.Error(), ": move it aside") {
		t.Fatalf("Open of a damaged file: %v", err)
	}
	_, err = OpenReadOnly(path, testOptions())
	if err == nil || !strings.Contains(err.Error(), "is damaged") || strings.Contains(err.Error(), "move it aside") {
		t.Fatalf("OpenReadOnly of a damaged file: %v", err)
	}
	if _, err := OpenReadOnly(filepath.Join(t.TempDir(), "absent.db"), testOptions()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenReadOnly of a missing file: %v; want fs.ErrNotExist", err)
	}
}
