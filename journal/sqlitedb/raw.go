package sqlitedb

import (
	"errors"
	"fmt"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// Raw is a read-only connection on SQLite's C API (modernc.org/sqlite/lib), for a reader
// that visits a million rows: database/sql and the driver make a Go value of every column
// of every row (a text a new string, an integer boxed), and at the journal's size that
// garbage kept the collector running through the whole load. A Raw's rows lend their
// columns; the caller copies what it keeps. One goroutine uses a Raw at a time.
type Raw struct {
	tls *libc.TLS
	db  uintptr
}

// OpenRaw opens path for reading (readOnly: without write access to its folder, as
// mode=ro), waits out a writer's lock for up to 5 s, and runs pragmas on it.
func OpenRaw(path string, readOnly bool, pragmas ...string) (*Raw, error) {
	r := &Raw{tls: libc.NewTLS()}
	if err := r.open(path, readOnly); err != nil {
		r.Close()
		return nil, err
	}
	sqlite3.Xsqlite3_busy_timeout(r.tls, r.db, 5000)
	for _, p := range append([]string{"PRAGMA query_only = 1"}, pragmas...) {
		if err := r.Query(p, nil, func(*Row) error { return nil }); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// open opens the handle (r.db is set even when the open fails: Close frees it).
func (r *Raw) open(path string, readOnly bool) error {
	flags := int32(sqlite3.SQLITE_OPEN_READWRITE)
	if readOnly {
		flags = sqlite3.SQLITE_OPEN_READONLY
	}
	db, rc, err := r.withOut(path, func(name, out uintptr) int32 {
		return sqlite3.Xsqlite3_open_v2(r.tls, name, out, flags|sqlite3.SQLITE_OPEN_NOMUTEX, 0)
	})
	r.db = db
	if err == nil && rc != sqlite3.SQLITE_OK {
		err = r.err(rc, "open "+path)
	}
	return err
}

// withOut calls f with s as a C string and room for the pointer f's C function returns
// through its last argument (a sqlite3** or a sqlite3_stmt**), and returns that pointer and
// f's result. Both are freed before it returns, so that Close, which ends the TLS, may follow.
func (r *Raw) withOut(s string, f func(cs, out uintptr) int32) (uintptr, int32, error) {
	cs, err := libc.CString(s)
	if err != nil {
		return 0, 0, err
	}
	defer libc.Xfree(r.tls, cs)
	size := int(unsafe.Sizeof(uintptr(0)))
	out := r.tls.Alloc(size)
	defer r.tls.Free(size)
	rc := f(cs, out)
	return *(*uintptr)(ptr(out)), rc, nil
}

// Close closes the connection.
func (r *Raw) Close() error {
	var err error
	if r.db != 0 {
		if rc := sqlite3.Xsqlite3_close_v2(r.tls, r.db); rc != sqlite3.SQLITE_OK {
			err = r.err(rc, "close")
		}
		r.db = 0
	}
	r.tls.Close()
	return err
}

// Query runs query with its integer args bound to ?1, ?2… and calls fn with each row; fn
// must not keep what a Row lends past its call.
func (r *Raw) Query(query string, args []int64, fn func(*Row) error) error {
	stmt, rc, err := r.withOut(query, func(q, out uintptr) int32 {
		return sqlite3.Xsqlite3_prepare_v2(r.tls, r.db, q, -1, out, 0)
	})
	if err != nil {
		return err
	}
	if rc != sqlite3.SQLITE_OK {
		return r.err(rc, "prepare "+query)
	}
	if stmt == 0 { // only a comment or white space
		return nil
	}
	defer sqlite3.Xsqlite3_finalize(r.tls, stmt)
	for i, v := range args {
		if rc := sqlite3.Xsqlite3_bind_int64(r.tls, stmt, int32(i+1), v); rc != sqlite3.SQLITE_OK {
			return r.err(rc, "bind "+query)
		}
	}
	row := &Row{tls: r.tls, stmt: stmt}
	for {
		switch rc := sqlite3.Xsqlite3_step(r.tls, stmt); rc {
		case sqlite3.SQLITE_ROW:
			if err := fn(row); err != nil {
				return err
			}
		case sqlite3.SQLITE_DONE:
			return nil
		default:
			return r.err(rc, query)
		}
	}
}

func (r *Raw) err(rc int32, what string) error {
	msg := "SQLite error " + fmt.Sprint(rc)
	if r.db != 0 {
		msg = libc.GoString(sqlite3.Xsqlite3_errmsg(r.tls, r.db))
	}
	return fmt.Errorf("%s: %w", what, errors.New(msg))
}

// Row is the row a Query is at.
type Row struct {
	tls  *libc.TLS
	stmt uintptr
}

// Int is column i as an integer (NULL is 0).
func (w *Row) Int(i int) int64 { return sqlite3.Xsqlite3_column_int64(w.tls, w.stmt, int32(i)) }

// Bytes is column i as text or a blob (NULL is empty), lent until the next row.
func (w *Row) Bytes(i int) []byte {
	p := sqlite3.Xsqlite3_column_blob(w.tls, w.stmt, int32(i))
	n := sqlite3.Xsqlite3_column_bytes(w.tls, w.stmt, int32(i))
	if p == 0 || n <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(ptr(p)), n)
}

// Text is Bytes as a string, lent as Bytes is: compare it, look it up, clone what is kept.
func (w *Row) Text(i int) string {
	b := w.Bytes(i)
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// ptr is SQLite's memory at p, which its allocator keeps outside Go's heap.
func ptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }
