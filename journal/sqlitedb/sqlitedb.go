package sqlitedb

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/thatch-dev/thatch/journal/checkpoint"
	"github.com/thatch-dev/thatch/journal/migrate"
	_ "modernc.org/sqlite"
)

// Options are what one store's file needs.
type Options struct {
	// Noun names the store in errors ("journal", "memories"); Name in the damaged message
	// and the migrations' errors ("the journal", "memories").
	Noun, Name string
	// Damaged is the verdict of the damaged message ("is damaged"), and DamagedHint what
	// to do about it, told by Open only (a read-only open changes nothing to move aside).
	Damaged, DamagedHint string
	// WrapMigrate wraps an error of the migrations other than a damaged file in
	// "open <Noun> <path>: ".
	WrapMigrate bool

	// Migrations holds the numbered .sql files matching Pattern ("migrations/*.sql").
	Migrations fs.FS
	Pattern    string

	// WriterPragmas go on the writer's connection after busy_timeout and before the WAL
	// mode (auto_vacuum, which takes effect on a new file only, must precede it);
	// ReaderPragmas on each read connection after busy_timeout and query_only.
	WriterPragmas, ReaderPragmas []string
	// Readers is the size of the read pool, all kept open (0: 4).
	Readers int
	// CheckpointEvery and CheckpointMaxFrames are checkpoint.Start's (0: its defaults).
	CheckpointEvery, CheckpointMaxFrames int
}

// DB is a store's open file.
type DB struct {
	// W is the one connection that writes (for a read-only DB, W is R); R the read pool.
	W, R *sql.DB
	// CP copies the WAL back beside the writer; nil for a read-only DB.
	CP       *checkpoint.Checkpointer
	Path     string
	ReadOnly bool
}

const busy = "_pragma=busy_timeout(5000)"

func dsn(path string, params ...string) string {
	return "file:" + path + "?" + strings.Join(params, "&")
}

func pragmas(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = "_pragma=" + p
	}
	return out
}

// Open opens (creating when absent, readable by its owner only) the store's file at path
// and brings it up to the latest migration.
//
// busy_timeout comes first so that the other pragmas wait for a lock too. The writer never
// checkpoints (wal_autocheckpoint(0)): a commit that crossed SQLite's threshold copied the
// WAL back and synced on the writer's path; CP does it beside the writer instead. Writes
// begin IMMEDIATE, so a transaction that reads first never fails to upgrade its lock.
func Open(path string, o Options) (*DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create %s folder: %w", o.Noun, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s %s: %w", o.Noun, path, err)
	}
	f.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, fmt.Errorf("make %s %s private: %w", o.Noun, path, err)
	}
	params := append([]string{busy}, pragmas(o.WriterPragmas)...)
	params = append(params, "_pragma=journal_mode(WAL)", "_pragma=synchronous(NORMAL)", "_pragma=wal_autocheckpoint(0)", "_txlock=immediate")
	w, err := sql.Open("sqlite", dsn(path, params...))
	if err != nil {
		return nil, fmt.Errorf("open %s %s: %w", o.Noun, path, err)
	}
	w.SetMaxOpenConns(1)
	if err := migrate.Apply(w, o.Migrations, o.Pattern, o.Name); err != nil {
		w.Close()
		if migrate.Damaged(err) {
			return nil, fmt.Errorf("%s %s %s (%v): %s", o.Name, path, o.Damaged, err, o.DamagedHint)
		}
		if o.WrapMigrate {
			return nil, fmt.Errorf("open %s %s: %w", o.Noun, path, err)
		}
		return nil, err
	}
	// After the migrations, so the file is in WAL mode: readers then see the last commit
	// without blocking the writer.
	r, err := openReaders(dsn(path, append([]string{busy, "_pragma=query_only(1)"}, pragmas(o.ReaderPragmas)...)...), o.Readers)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s %s for reading: %w", o.Noun, path, err)
	}
	cp, err := checkpoint.Start(path, o.CheckpointEvery, o.CheckpointMaxFrames)
	if err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("open %s %s for checkpoints: %w", o.Noun, path, err)
	}
	return &DB{W: w, R: r, CP: cp, Path: path}, nil
}

// openReaders opens the read pool. Its connections all stay open: database/sql keeps two
// idle by default and closed the others after each burst of reads, whose next burst opened
// them again and prepared their statements again.
func openReaders(dsn string, n int) (*sql.DB, error) {
	if n <= 0 {
		n = 4
	}
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	return r, nil
}

// OpenReadOnly opens the store's file at path for reading only, as the CLI reads a stopped
// thatch's: no migration, no checkpointer, and every connection mode=ro, so the file and
// its WAL are never written (a read-only connection never checkpoints or deletes the WAL
// when it closes; like any reader of a WAL database it may create an empty WAL and rebuild
// the -shm index beside them) and a daemon that starts meanwhile waits at most for a read
// in progress. W is R. A missing file is an error wrapping fs.ErrNotExist; a file of
// another version is refused (migrate.Check).
func OpenReadOnly(path string, o Options) (*DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open %s %s: %w", o.Noun, path, err)
	}
	r, err := openReaders(dsn(path, "mode=ro", busy, "_pragma=query_only(1)"), o.Readers)
	if err != nil {
		return nil, fmt.Errorf("open %s %s: %w", o.Noun, path, err)
	}
	if err := migrate.Check(r, o.Migrations, o.Pattern, o.Name+" "+path); err != nil {
		r.Close()
		if migrate.Damaged(err) {
			return nil, fmt.Errorf("%s %s %s (%v)", o.Name, path, o.Damaged, err)
		}
		return nil, err
	}
	return &DB{W: r, R: r, Path: path, ReadOnly: true}, nil
}

// ReadDSN is the data source name of a further read connection with params (a store that
// opens one of its own, e.g. for a long scan): mode=ro for a read-only DB.
func (d *DB) ReadDSN(params string) string {
	if d.ReadOnly {
		return "file:" + d.Path + "?mode=ro&" + params
	}
	return "file:" + d.Path + "?" + params
}

// Close stops the checkpointer and closes the connections.
func (d *DB) Close() error {
	if d.ReadOnly {
		return d.R.Close()
	}
	return errors.Join(d.R.Close(), d.CP.Close(), d.W.Close())
}
