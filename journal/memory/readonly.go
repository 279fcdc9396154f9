package memory

import (
	"cmp"
	"database/sql"
	"errors"
	"fmt"
	"os"

	"github.com/thatch-dev/thatch/journal/migrate"
)

// OpenReadOnly opens the memory store at path for reading only, as the CLI reads a
// stopped thatch's: no migration, no checkpointer, no writer; its connections are
// mode=ro, so the file and its WAL are never written (a read-only connection never
// checkpoints or deletes the WAL when it closes; like any reader of a WAL database it may
// create an empty WAL and rebuild the -shm index beside them). Every write fails with
// ErrReadOnly. A missing file is an error wrapping fs.ErrNotExist; a store of another
// version is refused (migrate.Check).
func OpenReadOnly(path string, opts Options) (*Store, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open memories %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	if err != nil {
		return nil, fmt.Errorf("open memories %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	s := &Store{w: newDB(r), r: newDB(r), path: path, redact: opts.Redact, staleAfter: cmp.Or(opts.StaleAfter, DefaultStaleAfter),
		stop: make(chan struct{}), readOnly: true}
	if s.redact == nil {
		s.redact = func(v string) string { return v }
	}
	if err := migrate.Check(r, migrations, "migrations/*.sql", "the memories "+path); err != nil {
		s.Close()
		if migrate.Damaged(err) {
			return nil, fmt.Errorf("memories %s is damaged (%v)", path, err)
		}
		return nil, err
	}
	return s, nil
}

// ErrReadOnly answers a write to a store of OpenReadOnly.
var ErrReadOnly = errors.New("the memory store is open read-only")
