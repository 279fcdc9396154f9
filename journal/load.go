package journal

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"unsafe"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/thatch-dev/thatch/journal/sqlitedb"
	"github.com/thatch-dev/thatch/runtime"
)

// Rehydrate (Load) reads the whole journal once, at start: 100,000 sessions and a million
// entries take it about a second on two cores. What it costs, and what it does about it:
//
//   - Per row, database/sql and the driver cost more than SQLite: every column of every
//     row is a driver.Value (a text a new string, an integer boxed), copied again by Scan,
//     and at a million rows that garbage kept the collector running through the load,
//     under the memory limit Load runs in. The sessions and entries are read on SQLite's
//     C API (sqlitedb.Raw), whose rows lend their columns: what is kept is copied once,
//     into the state's own buffers.
//   - An entry's id is its only string of its own. The ids of one root session are copied
//     into one buffer of that session's, sized by a first pass over the (root_id, entry_id)
//     index, and each Entry.ID is a slice of it: one allocation a session instead of one an
//     entry. Each session's Entries is allocated once, at its exact length.
//   - The sessions (JSON) are decoded on one goroutine while the entries are read on two
//     others, each over half the rows (by rowid), each through its own read-only connection:
//     SQLite's readers run side by side in WAL mode. Each half writes its rows into its own
//     region of each session's slice and buffer, counted by the first pass, so the halves
//     share nothing they write.
//   - An entry's tool and claim are shared, not its own (runtime.Entry): each reader makes
//     the Entry of each (tool, trivial) pair and the Claim of each (claimant, time) once
//     (entryMaker).
//
// Load runs before the loop, when nothing writes: if the pass that counts and the passes
// that read ever disagreed (a writer in between), Load reads the entries again the plain
// way (loadEntriesPlain).

// entryParts is how many goroutines read the entries.
const entryParts = 2

// errReload says the fast entry reader cannot place a row: read the entries the plain way.
var errReload = errors.New("entries changed while loading")

// Load rebuilds the state from the journal.
func (s *Store) Load() (*runtime.State, []runtime.Call, uint64, error) {
	st := runtime.NewState()
	var pos uint64
	if err := getMeta(s.db, "counters", &st.Counters); err != nil {
		return nil, nil, 0, err
	}
	if err := getMeta(s.db, "stream_seq", &pos); err != nil {
		return nil, nil, 0, err
	}
	if err := scanJSON(s.db, `SELECT data FROM hosts`, func(data []byte) error {
		h := &runtime.Host{}
		if err := json.Unmarshal(data, h); err != nil {
			return err
		}
		st.Hosts[h.ID] = h
		return nil
	}); err != nil {
		return nil, nil, 0, fmt.Errorf("load hosts: %w", err)
	}
	grows, err := s.db.Query(`SELECT session_id, at FROM gone`)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("load tombstones: %w", err)
	}
	for grows.Next() {
		var id string
		var at int64
		if err := grows.Scan(&id, &at); err != nil {
			grows.Close()
			return nil, nil, 0, fmt.Errorf("load tombstones: %w", err)
		}
		st.Gone[id] = at
	}
	if err := grows.Close(); err != nil {
		return nil, nil, 0, err
	}

	// The sessions and entries are read on connections of their own (sqlitedb.Raw),
	// closed after: a scan reads each page once, and SQLite's default page cache, 2 MiB on
	// each of the four connections the reads take, was 8 to 11 MiB of the peak RSS.
	open := func() (*sqlitedb.Raw, error) {
		return sqlitedb.OpenRaw(s.file.Path, s.file.ReadOnly, "PRAGMA cache_size = -256")
	}
	ld, err := open()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("load: %w", err)
	}
	defer ld.Close()
	var n int
	if err := ld.Query(`SELECT count(*) FROM sessions`, nil, func(r *sqlitedb.Row) error { n = int(r.Int(0)); return nil }); err != nil {
		return nil, nil, 0, fmt.Errorf("load sessions: %w", err)
	}
	lo, hi, empty, err := entrySpan(ld)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("load entries: %w", err)
	}
	if s.BeforeLoad != nil {
		size := LoadSize{Sessions: n}
		if !empty {
			size.Entries = int(hi - lo + 1)
		}
		defer s.BeforeLoad(size)()
	}
	var wg sync.WaitGroup
	var sessErr error
	wg.Go(func() {
		if err := loadSessions(open, st, n); err != nil {
			sessErr = fmt.Errorf("load sessions: %w", err)
		}
	})
	var roots []rootLoad
	var entErr error
	if !empty {
		roots, entErr = loadEntries(ld, open, n, lo, hi)
	}
	wg.Wait()
	if sessErr != nil {
		return nil, nil, 0, sessErr
	}
	switch {
	case errors.Is(entErr, errReload):
		if err := loadEntriesPlain(s.db, st); err != nil {
			return nil, nil, 0, fmt.Errorf("load entries: %w", err)
		}
	case entErr != nil:
		return nil, nil, 0, fmt.Errorf("load entries: %w", entErr)
	default:
		for _, r := range roots {
			if sess := st.Sessions[r.root]; sess != nil {
				sess.Entries = r.entries
			} // else rows of a forgotten session: the journal sweep drops them
		}
	}
	st.Reindex() // the index is derived, never stored

	var calls []runtime.Call
	crows, err := s.db.Query(`SELECT id, call FROM outbox ORDER BY id`)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("load outbox: %w", err)
	}
	defer crows.Close()
	for crows.Next() {
		var c runtime.Call
		var data []byte
		if err := crows.Scan(&c.ID, &data); err != nil {
			return nil, nil, 0, fmt.Errorf("load outbox: %w", err)
		}
		if err := json.Unmarshal(data, &c); err != nil {
			return nil, nil, 0, fmt.Errorf("load outbox call %d: %w", c.ID, err)
		}
		calls = append(calls, c)
	}
	return st, calls, pos, crows.Err()
}

// loadSessions decodes the session rows into st.Sessions, through a read-only connection.
// encoding/json took 6 µs a session; go-json-experiment/json (encoding/json/v2 to be)
// takes half that, and allocates only what the session keeps. It is told to match names
// as encoding/json does (without regard to case), and a row it refuses is decoded by
// encoding/json, which decides. Kinds, statuses, hosts, folders and projects repeat from
// session to session: one string each is kept.
func loadSessions(open func() (*sqlitedb.Raw, error), st *runtime.State, n int) error {
	db, err := open()
	if err != nil {
		return err
	}
	defer db.Close()
	st.Sessions = make(map[string]*runtime.Session, n)
	intern := map[string]string{}
	in := func(s string) string {
		if v, ok := intern[s]; ok {
			return v
		}
		intern[s] = s
		return s
	}
	opts := jsonv2.MatchCaseInsensitiveNames(true)
	return db.Query(`SELECT data FROM sessions`, nil, func(row *sqlitedb.Row) error {
		data := row.Bytes(0) // lent: both decoders copy what they keep
		sess := &runtime.Session{}
		if jsonv2.Unmarshal(data, sess, opts) != nil {
			sess = &runtime.Session{}
			if err := json.Unmarshal(data, sess); err != nil {
				return err
			}
		}
		sess.HostID, sess.Directory, sess.ProjectID = in(sess.HostID), in(sess.Directory), in(sess.ProjectID)
		sess.Kind, sess.Status = runtime.Kind(in(string(sess.Kind))), runtime.Status(in(string(sess.Status)))
		st.Sessions[sess.ID] = sess
		return nil
	})
}

// rootLoad is what the entry readers fill for one root session: its entries in arrival
// order and the buffer its entries' ids are slices of. Part p of the readers writes
// entries[next[p]:end[p]] and ids[nextB[p]:endB[p]], which the counting pass sized.
type rootLoad struct {
	root        string
	entries     []runtime.Entry
	ids         []byte
	next, end   [entryParts]int32
	nextB, endB [entryParts]int32
}

// loadEntries reads every entry, by root session: a pass over the (root_id, entry_id) index
// on db counts them and their ids' bytes for each part, then entryParts goroutines read the
// rows, each on a connection of its own (open). The roots are a slice sorted by id, sized
// by sessions (the number of sessions), not a map of pointers: at 100,000 roots, a map and
// its rootLoads were 20 MiB more of the peak. lo and hi are the entries' rowid span
// (entrySpan), which Load reads first to bound its heap.
func loadEntries(db *sqlitedb.Raw, open func() (*sqlitedb.Raw, error), sessions int, lo, hi int64) ([]rootLoad, error) {
	// Part p reads the rows bounds[p] < id <= bounds[p+1].
	var bounds [entryParts + 1]int64
	bounds[0] = lo - 1
	for p := 1; p < entryParts; p++ {
		bounds[p] = lo - 1 + (hi-lo+1)*int64(p)/entryParts
	}
	bounds[entryParts] = hi

	roots := make([]rootLoad, 0, sessions)
	// The count of the first part and of all, and the same of the ids' bytes (entryParts is 2).
	err := db.Query(`SELECT root_id, count(*), sum(id <= ?1), sum(octet_length(entry_id)),
		sum(CASE WHEN id <= ?1 THEN octet_length(entry_id) ELSE 0 END) FROM entries GROUP BY root_id`,
		[]int64{bounds[1]}, func(row *sqlitedb.Row) error {
			n, n0, b, b0 := int32(row.Int(1)), int32(row.Int(2)), int32(row.Int(3)), int32(row.Int(4))
			roots = append(roots, rootLoad{root: strings.Clone(row.Text(0)), entries: make([]runtime.Entry, n), ids: make([]byte, b),
				next: [entryParts]int32{0, n0}, end: [entryParts]int32{n0, n}, nextB: [entryParts]int32{0, b0}, endB: [entryParts]int32{b0, b}})
			return nil
		})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(roots, func(a, b rootLoad) int { return strings.Compare(a.root, b.root) }) // GROUP BY sorted them: a pass
	errs := make([]error, entryParts)
	var wg sync.WaitGroup
	for p := range entryParts {
		wg.Go(func() { errs[p] = readEntries(open, roots, p, bounds[p], bounds[p+1]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, r := range roots {
		if r.next != r.end || r.nextB != r.endB {
			return nil, errReload
		}
	}
	return roots, nil
}

// entrySpan is the least and the greatest rowid of the entries (at least as many rows as
// the entries); empty when there are none.
func entrySpan(db *sqlitedb.Raw) (lo, hi int64, empty bool, err error) {
	err = db.Query(`SELECT (SELECT min(id) FROM entries), (SELECT max(id) FROM entries), NOT EXISTS (SELECT 1 FROM entries)`, nil,
		func(row *sqlitedb.Row) error {
			lo, hi, empty = row.Int(0), row.Int(1), row.Int(2) != 0
			return nil
		})
	return lo, hi, empty, err
}

// readEntries reads part p of the entries, the rows lo < id <= hi, into their roots. A
// row's texts are lent (sqlitedb.Row): the id is copied into its root's buffer, the tool
// and claimant are looked up (entryMaker clones what it keeps), and the root is compared.
func readEntries(open func() (*sqlitedb.Raw, error), roots []rootLoad, p int, lo, hi int64) error {
	db, err := open()
	if err != nil {
		return err
	}
	defer db.Close()
	var m entryMaker
	var r *rootLoad // the root of the last row: each part writes its own fields of it
	return db.Query(`SELECT root_id, entry_id, tool, claimed_by, claimed_at, size, trivial
		FROM entries WHERE id > ?1 AND id <= ?2 ORDER BY id`, []int64{lo, hi},
		func(row *sqlitedb.Row) error {
			root, id := row.Text(0), row.Bytes(1)
			if r == nil || root != r.root {
				// By index, reading only the root field: the other part writes its own fields of
				// these rootLoads meanwhile, and a comparison by value would copy them.
				i := sort.Search(len(roots), func(i int) bool { return roots[i].root >= root })
				if i == len(roots) || roots[i].root != root {
					return errReload
				}
				r = &roots[i]
			}
			i, b := r.next[p], r.nextB[p]
			if i >= r.end[p] || int(b)+len(id) > int(r.endB[p]) {
				return errReload
			}
			r.next[p]++
			r.nextB[p] += int32(copy(r.ids[b:], id))
			e := m.entry(row.Text(2), row.Text(3), row.Int(4), int32(row.Int(5)), row.Int(6) != 0)
			if len(id) > 0 {
				// r.ids[b:b+len(id)] is written once, here, and never again.
				e.ID = unsafe.String(&r.ids[b], len(id))
			}
			r.entries[i] = e
			return nil
		})
}

// entryMaker makes the entries of one reader: runtime.NewEntry takes a lock and looks up
// runtime's table, and claims are shared, so each (tool, trivial) pair and each claim is
// made once, and looked up in maps of the reader's own. The keys may be slices of a row:
// a map lookup with them allocates nothing, and what a map keeps is a copy.
type entryMaker struct {
	kinds  map[kindKey]runtime.Entry
	claims map[claimKey]*runtime.Claim
}

type kindKey struct {
	tool    string
	trivial bool
}

type claimKey struct {
	claimant string
	at       int64
}

// entry returns an entry without its id.
func (m *entryMaker) entry(tool, claimant string, at int64, size int32, trivial bool) runtime.Entry {
	e, ok := m.kinds[kindKey{tool, trivial}]
	if !ok {
		if m.kinds == nil {
			m.kinds, m.claims = map[kindKey]runtime.Entry{}, map[claimKey]*runtime.Claim{}
		}
		tool = strings.Clone(tool)
		e = runtime.NewEntry("", tool, 0, trivial)
		m.kinds[kindKey{tool, trivial}] = e
	}
	e.Size = size
	if claimant != "" {
		c, ok := m.claims[claimKey{claimant, at}]
		if !ok {
			claimant = strings.Clone(claimant)
			c = runtime.NewClaim(claimant, at)
			m.claims[claimKey{claimant, at}] = c
		}
		e = e.WithClaim(c)
	}
	return e
}

// loadEntriesPlain reads every entry into its root session, one Scan a row: what Load
// falls back to when the fast reader cannot place a row.
func loadEntriesPlain(db *sql.DB, st *runtime.State) error {
	for _, sess := range st.Sessions {
		sess.Entries = nil
	}
	rows, err := db.Query(`SELECT root_id, entry_id, tool, claimed_by, claimed_at, size, trivial FROM entries ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var m entryMaker
	var root, id, tool, claimant sql.RawBytes
	var at int64
	var size int32
	var trivial bool
	var last *runtime.Session
	for rows.Next() {
		if err := rows.Scan(&root, &id, &tool, &claimant, &at, &size, &trivial); err != nil {
			return err
		}
		if last == nil || last.ID != string(root) {
			if last = st.Sessions[string(root)]; last == nil {
				continue // rows of a forgotten session: the journal sweep drops them
			}
		}
		e := m.entry(string(tool), string(claimant), at, size, trivial)
		e.ID = string(id)
		last.Entries = append(last.Entries, e)
	}
	return rows.Err()
}

// sessionBytes and entryBytes are what Load expects a session and an entry to take: a
// Session (320 bytes) with its strings, its place in the state's map and the index; an
// Entry (32 bytes) with an id of 24 bytes (opencode's call ids: 16 in the bench's journal).
const (
	sessionBytes = 480
	entryBytes   = 56
)

// LoadSize is what Load is about to read, told to BeforeLoad before it allocates the state.
type LoadSize struct {
	Sessions, Entries int
}

// Bytes is what the sessions and entries should take in memory once loaded.
func (z LoadSize) Bytes() int64 {
	return int64(z.Sessions)*sessionBytes + int64(max(z.Entries, 0))*entryBytes
}
