package journal

import "github.com/thatch-dev/thatch/journal/sqlitedb"

// OpenReadOnly opens the journal at path for reading only, as the CLI reads a stopped
// thatch's (sqlitedb.OpenReadOnly): no migration, no checkpointer, no instance name, every
// connection mode=ro. The writing methods fail. A missing file is an error wrapping
// fs.ErrNotExist; a journal of another version is refused (migrate.Check).
func OpenReadOnly(path string) (*Store, error) {
	f, err := sqlitedb.OpenReadOnly(path, fileOptions)
	if err != nil {
		return nil, err
	}
	s := &Store{db: f.W, r: f.R, file: f, path: path, readOnly: true}
	if err := getMeta(s.db, "instance", &s.instance); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// readDSN is the data source name of a read connection of the journal with pragmas:
// mode=ro for a store of OpenReadOnly.
func (s *Store) readDSN(pragmas string) string { return s.file.ReadDSN(pragmas) }
