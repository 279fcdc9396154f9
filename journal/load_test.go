package journal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/journal/sqlitedb"
	"github.com/thatch-dev/thatch/runtime"
)

// loadFixture commits, in random order across roots, entries of the sessions in st and of
// roots that have no session row (forgotten sessions, whose rows the sweep drops), some of
// them claimed, and returns the store.
func loadFixture(t *testing.T, ids func(root string, i int) string) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.UnixMilli(1_700_000_000_000)
	st := runtime.NewState()
	fx := runtime.NewEffects()
	var roots []string
	for i := range 40 {
		id := fmt.Sprintf("ses_%02d", i)
		roots = append(roots, id)
		if i%7 == 3 {
			continue // a root without a session row
		}
		st.Sessions[id] = &runtime.Session{ID: id, HostID: fmt.Sprintf("h%d", i%3), Kind: runtime.KindTop, Status: runtime.StatusIdle,
			Title: "t" + id, Directory: "/w/" + id, Touched: now}
		fx.Sessions[id] = true
	}
	next := map[string]int{}
	tools := []string{"bash", "read", "edit", "", "ünïcode"}
	for range 600 {
		root := roots[rng.IntN(len(roots))]
		i := next[root]
		next[root]++
		fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryInsert, Root: root, ID: ids(root, i), At: now,
			Body: &runtime.Body{Tool: tools[rng.IntN(len(tools))], Output: "o"}, Size: rng.IntN(5000), Trivial: rng.IntN(4) == 0})
	}
	for _, root := range roots[:10] {
		var claim []string
		for i := range next[root] / 2 {
			claim = append(claim, ids(root, i))
		}
		fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryClaim, Root: root, IDs: claim, Claimant: "child_" + root, At: now.Add(time.Minute)})
	}
	if err := s.Commit(&runtime.Batch{Now: now, State: st, Effects: fx}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLoadEntriesAsPlain checks the fast entry reader (two parts, ids sliced from one buffer
// a session, on SQLite's C API) against the plain one: the same entries, in the same order,
// whatever the ids hold (a NUL, other scripts, nothing), and errReload for a row the count
// did not foresee.
func TestLoadEntriesAsPlain(t *testing.T) {
	for name, ids := range map[string]func(string, int) string{
		"plain ids": func(root string, i int) string { return fmt.Sprintf("call_%d", i) },
		"odd ids": func(root string, i int) string {
			return [...]string{"", "ü/é", root + "/call_x", "a\x00b", "x"}[i%5] + fmt.Sprint(i)
		},
		"empty id": func(root string, i int) string {
			if i == 0 {
				return ""
			}
			return fmt.Sprint(i)
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := loadFixture(t, ids)
			st, _, _, err := s.Load()
			if err != nil {
				t.Fatal(err)
			}
			want := runtime.NewState()
			for id, sess := range st.Sessions {
				c := *sess
				want.Sessions[id] = &c
			}
			if err := loadEntriesPlain(s.db, want); err != nil {
				t.Fatal(err)
			}
			n := 0
			for id, sess := range want.Sessions {
				n += len(sess.Entries)
				if !reflect.DeepEqual(st.Sessions[id].Entries, sess.Entries) {
					t.Fatalf("session %s: loaded %+v, want %+v", id, st.Sessions[id].Entries, sess.Entries)
				}
			}
			if len(st.Sessions) != 34 || n == 0 {
				t.Fatalf("%d sessions, %d entries", len(st.Sessions), n)
			}
			raw := func() (*sqlitedb.Raw, error) { return sqlitedb.OpenRaw(s.Path(), false) }
			db, err := raw()
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			lo, hi, empty, err := entrySpan(db)
			if err != nil || empty {
				t.Fatalf("span %d-%d, empty %v: %v", lo, hi, empty, err)
			}
			roots, err := loadEntries(db, raw, 0, lo, hi)
			if err != nil || len(roots) != 40 {
				t.Fatalf("%d roots, %v", len(roots), err)
			}
			// A root's rows that its count did not foresee (a writer between the count and
			// the read) are not placed: Load reads the entries the plain way then.
			k := slices.IndexFunc(roots, func(r rootLoad) bool { return r.end[0] > 0 })
			for i := range roots {
				r := &roots[i]
				r.next, r.nextB = [entryParts]int32{0, r.end[0]}, [entryParts]int32{0, r.endB[0]}
			}
			roots[k].end[0]--
			if err := readEntries(raw, roots, 0, lo-1, lo-1+(hi-lo+1)/entryParts); !errors.Is(err, errReload) {
				t.Fatalf("a row more than counted: %v, want errReload", err)
			}
		})
	}
}
