package journal

import (
	"database/sql"
	"fmt"
	"os"

	"github.com/thatch-dev/thatch/journal/migrate"
)

// OpenReadOnly opens the journal at path for reading only, as the CLI reads a stopped
// thatch's: no migration, no checkpointer, no instance name, and every connection opened
// with mode=ro, so the file and its WAL are never written (a read-only connection never
// checkpoints or deletes the WAL when it closes; like any reader of a WAL database it may
// create an empty WAL and rebuild the -shm index beside them) and a daemon that starts
// meanwhile waits at most for a read in progress. The writing methods fail. A missing file
// is an error wrapping fs.ErrNotExist; a journal of another version is refused
// (migrate.Check).
func OpenReadOnly(path string) (*Store, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	dsn := "file:" + path + "?mode=ro&_pragma=busy_timeout(5000)&_pragma=query_only(1)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	s := &Store{db: db, r: r, path: path, readOnly: true}
	if err := migrate.Check(db, migrations, "migrations/*.sql", "the journal "+path); err != nil {
		s.Close()
		if migrate.Damaged(err) {
			return nil, fmt.Errorf("the journal %s is damaged or not thatch's (%v)", path, err)
		}
		return nil, err
	}
	if err := getMeta(db, "instance", &s.instance); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// readDSN is the data source name of a read connection of the journal with pragmas:
// mode=ro for a store of OpenReadOnly.
func (s *Store) readDSN(pragmas string) string {
	if s.readOnly {
		return "file:" + s.path + "?mode=ro&" + pragmas
	}
	return "file:" + s.path + "?" + pragmas
}
