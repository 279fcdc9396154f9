package runtime

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Table is the directory the operator's page shows: every host and every live session.
// Readers build it from the loop's published directory (Loop.Table), on their own
// goroutine: the loop keeps that directory up to date one changed session at a time.
type Table struct {
	At       time.Time // the last commit it shows
	Hosts    []HostRow
	Sessions []SessionRow // live sessions, id order
	waiting  map[string]int
}

// HostRow is a host as the operator's page shows it.
type HostRow struct {
	ID         string    `json:"id"`
	API        string    `json:"api"`
	Version    string    `json:"version"`
	BootID     string    `json:"bootID"`
	Online     bool      `json:"online"`
	Directory  string    `json:"directory"`
	SmallModel string    `json:"smallModel,omitempty"`
	Missing    []string  `json:"missingTools,omitempty"`
	Heard      time.Time `json:"heard,omitzero"` // last event applied (to the minute)
	Sessions   int       `json:"sessions"`       // live sessions
	Waiting    int       `json:"waitingCalls"`   // host calls waiting for its next hello
}

// SessionRow is a live session as the operator's page shows it: the sessions method's row
// and what the page adds (the running extraction child, the last activity).
type SessionRow struct {
	SessionView
	Child     string    `json:"child,omitempty"`
	Resolving bool      `json:"resolving,omitempty"`
	Touched   time.Time `json:"touched"`
}

// directory is the loop's published copy of its hosts and live sessions, for readers on
// other goroutines. The loop writes only the rows a commit changed; a reader ranges over
// the maps without blocking it (sync.Map reads take no lock the writer waits for). Each
// row is immutable once stored; a reader may see rows of two adjacent rounds.
type directory struct {
	sessions sync.Map // id → *SessionRow, live sessions only
	hosts    sync.Map // id → *HostRow (Sessions and Waiting left to the reader)
	at       atomic.Int64
	version  atomic.Uint64 // counts fills and updates

	mu     sync.Mutex // the readers' cache
	cached *Table
	built  uint64 // the version cached was built at
}

// sessionRow is the row of sess, or nil when it is not in the live directory.
func sessionRow(s *State, sess *Session) *SessionRow {
	if sess == nil || sess.Exited {
		return nil
	}
	c := s.index().counted[sess.ID]
	return &SessionRow{SessionView: SessionView{SessionID: sess.ID, HostID: sess.HostID, ParentID: sess.ParentID,
		Kind: sess.Kind, Status: sess.Status, Pending: c.Pending, Accepted: c.Accepted,
		Extracting: sess.Extracting, Compacting: sess.Compacting, WrapUp: sess.WrapUp,
		Directory: sess.Directory, Title: sess.Title, Refused: sess.Refused, Failed: int(sess.Failed), RetryAt: retryAt(sess)}, Child: sess.Child, Resolving: sess.Resolving, Touched: sess.Touched}
}

func hostRow(h *Host) *HostRow {
	row := &HostRow{ID: h.ID, API: h.API, Version: h.Version, BootID: h.BootID, Online: h.Online,
		Directory: h.Directory, SmallModel: h.SmallModel, Missing: slices.Clone(h.MissingTools)}
	if h.Heard > 0 {
		row.Heard = time.UnixMilli(h.Heard)
	}
	return row
}

// fill publishes every host and session of s: when the first reader asks, and after the
// loop reloaded its state from the journal.
func (d *directory) fill(s *State, now time.Time) {
	d.sessions.Clear()
	d.hosts.Clear()
	for id, sess := range s.Sessions {
		if row := sessionRow(s, sess); row != nil {
			d.sessions.Store(id, row)
		}
	}
	for id, h := range s.Hosts {
		d.hosts.Store(id, hostRow(h))
	}
	d.at.Store(now.UnixNano())
	d.version.Add(1)
}

// update publishes what fx changed in s: its sessions and hosts, the sessions whose
// entries it changed and those it touched. It costs what the step changed, never a pass
// over the state.
func (d *directory) update(s *State, fx *Effects, now time.Time) {
	put := func(id string) {
		if row := sessionRow(s, s.Sessions[id]); row != nil {
			d.sessions.Store(id, row)
		} else {
			d.sessions.Delete(id)
		}
	}
	for id := range fx.Sessions {
		put(id)
	}
	for _, op := range fx.Entries {
		if !fx.Sessions[op.Root] {
			put(op.Root)
		}
	}
	for _, id := range fx.Touched {
		if !fx.Sessions[id] {
			put(id)
		}
	}
	for id := range fx.Hosts {
		if h := s.Hosts[id]; h != nil {
			d.hosts.Store(id, hostRow(h))
		} else {
			d.hosts.Delete(id)
		}
	}
	d.at.Store(now.UnixNano())
	d.version.Add(1)
}

// table returns a Table of the directory, built on the caller's goroutine, or the one
// the last reader built when the directory did not change since. waiting counts the host
// calls waiting per host. The Table is shared: only read it.
func (d *directory) table(waiting map[string]int) *Table {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.version.Load()
	if c := d.cached; c != nil && d.built == v && maps.Equal(c.waiting, waiting) {
		return c
	}
	t := d.build(waiting)
	d.cached, d.built = t, v
	return t
}

// build builds a Table from the directory.
func (d *directory) build(waiting map[string]int) *Table {
	t := &Table{At: time.Unix(0, d.at.Load()), waiting: waiting}
	count := map[string]int{}
	d.sessions.Range(func(_, v any) bool {
		row := v.(*SessionRow)
		t.Sessions = append(t.Sessions, *row)
		count[row.HostID]++
		return true
	})
	slices.SortFunc(t.Sessions, func(a, b SessionRow) int { return strings.Compare(a.SessionID, b.SessionID) })
	d.hosts.Range(func(_, v any) bool {
		row := *v.(*HostRow)
		row.Sessions, row.Waiting = count[row.ID], waiting[row.ID]
		t.Hosts = append(t.Hosts, row)
		return true
	})
	slices.SortFunc(t.Hosts, func(a, b HostRow) int { return strings.Compare(a.ID, b.ID) })
	return t
}

// BuildTable is the Table of s: what the loop's directory holds once filled from s.
func BuildTable(s *State, waiting map[string]int, now time.Time) *Table {
	var d directory
	d.fill(s, now)
	return d.build(waiting)
}

// Table returns the hosts and live sessions as the loop last published them. The first
// call asks the loop to publish its whole directory once (a pass over the sessions);
// from then on the loop publishes each commit's changes, and Table never waits for it.
func (l *Loop) Table(ctx context.Context) (*Table, error) {
	if !l.pub.dirOn.Load() {
		if _, err := l.Query(ctx, func(View) any {
			if !l.pub.dirOn.Load() {
				l.pub.dir.fill(l.state, l.Now())
				l.pub.dirOn.Store(true)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	var waiting map[string]int
	if snap := l.pub.snap.Load(); snap != nil {
		waiting = snap.waiting
	}
	return l.pub.dir.table(waiting), nil
}
