package migrate

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Damaged tells whether err says the file is not a sound SQLite database: corrupt, or not
// a database at all.
func Damaged(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	code := e.Code() & 0xff
	return code == sqlite3.SQLITE_CORRUPT || code == sqlite3.SQLITE_NOTADB
}

// DiskFull tells whether err says the disk is full: SQLite's SQLITE_FULL (which it also
// answers when a database reaches its max_page_count), or the system's ENOSPC or EDQUOT
// (over quota) from a write.
func DiskFull(err error) bool {
	if err == nil {
		return false
	}
	var e *sqlite.Error
	if errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_FULL {
		return true
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// Apply runs the migrations of fsys matching pattern (e.g. "migrations/*.sql") that db has
// not had yet, in order. what names the database in errors.
func Apply(db *sql.DB, fsys fs.FS, pattern, what string) error {
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)`); err != nil {
		return fmt.Errorf("migrate %s: %w", what, err)
	}
	var current int
	if err := db.QueryRow(`SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("migrate %s: %w", what, err)
	}
	names, err := fs.Glob(fsys, pattern)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		v, err := strconv.Atoi(strings.SplitN(path.Base(name), "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s is not numbered", name)
		}
		if v <= current {
			continue
		}
		script, err := fs.ReadFile(fsys, name)
		if err == nil {
			err = apply(db, string(script), v)
		}
		if err != nil {
			return fmt.Errorf("apply migration %s of %s: %w", name, what, err)
		}
	}
	return nil
}

func apply(db *sql.DB, script string, version int) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(script); err != nil {
		return err
	}
	if _, err := tx.Exec(`INSERT INTO schema_migrations (version) VALUES (?)`, version); err != nil {
		return err
	}
	return tx.Commit()
}
