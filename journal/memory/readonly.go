package memory

import (
	"cmp"
	"errors"

	"github.com/thatch-dev/thatch/journal/sqlitedb"
)

// OpenReadOnly opens the memory store at path for reading only, as the CLI reads a
// stopped thatch's (sqlitedb.OpenReadOnly): no migration, no checkpointer, no writer;
// every connection is mode=ro. Every write fails with ErrReadOnly. A missing file is an
// error wrapping fs.ErrNotExist; a store of another version is refused (migrate.Check).
func OpenReadOnly(path string, opts Options) (*Store, error) {
	f, err := sqlitedb.OpenReadOnly(path, fileOptions)
	if err != nil {
		return nil, err
	}
	s := &Store{w: newDB(f.W), r: newDB(f.R), file: f, path: path, redact: opts.Redact, staleAfter: cmp.Or(opts.StaleAfter, DefaultStaleAfter),
		stop: make(chan struct{}), readOnly: true}
	if s.redact == nil {
		s.redact = func(v string) string { return v }
	}
	return s, nil
}

// ErrReadOnly answers a write to a store of OpenReadOnly.
var ErrReadOnly = errors.New("the memory store is open read-only")
