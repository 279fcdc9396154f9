package runtime

import (
	"context"
	"maps"
	"slices"
	"time"
)

// Table is the directory the operator's page shows: every host and every live session,
// as of one round. Like a Snapshot it is published and never changed: the page reads it
// without entering the loop, and the loop copies one out only when a reader asks for a
// newer one than the last (Loop.Table), so a page that nobody looks at costs nothing.
type Table struct {
	At       time.Time
	Round    uint64 // the snapshot round it shows
	Hosts    []HostRow
	Sessions []SessionRow // live sessions, id order
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

// BuildTable copies the hosts and live sessions of s; waiting counts host calls waiting
// per host. It costs a pass over the sessions: the loop runs it only when asked.
func BuildTable(s *State, waiting map[string]int, round uint64, now time.Time) *Table {
	t := &Table{At: now, Round: round, Hosts: make([]HostRow, 0, len(s.Hosts))}
	x := s.index()
	for _, id := range slices.Sorted(maps.Keys(s.Hosts)) {
		h := s.Hosts[id]
		row := HostRow{ID: h.ID, API: h.API, Version: h.Version, BootID: h.BootID, Online: h.Online,
			Directory: h.Directory, SmallModel: h.SmallModel, Missing: slices.Clone(h.MissingTools), Waiting: waiting[id]}
		if h.Heard > 0 {
			row.Heard = time.UnixMilli(h.Heard)
		}
		for _, sess := range x.byHost[id] {
			if !sess.Exited {
				row.Sessions++
			}
		}
		t.Hosts = append(t.Hosts, row)
	}
	views := LiveSessions(s, "")
	t.Sessions = make([]SessionRow, len(views))
	for i, v := range views {
		sess := s.Sessions[v.SessionID]
		t.Sessions[i] = SessionRow{SessionView: v, Child: sess.Child, Resolving: sess.Resolving, Touched: sess.Touched}
	}
	return t
}

// Table returns a published Table no older than maxAge, or as new as the state if the
// state did not change since. Only when neither holds does it ask the loop for a copy;
// concurrent readers share that one copy.
func (l *Loop) Table(ctx context.Context, maxAge time.Duration) (*Table, error) {
	fresh := func() *Table {
		t, snap := l.table.Load(), l.snap.Load()
		if t != nil && (snap == nil || t.Round == snap.round || l.Now().Sub(t.At) < maxAge) {
			return t
		}
		return nil
	}
	if t := fresh(); t != nil {
		return t, nil
	}
	l.tableMu.Lock()
	defer l.tableMu.Unlock()
	if t := fresh(); t != nil { // another reader had it copied meanwhile
		return t, nil
	}
	res, err := l.Query(ctx, func(View) any {
		waiting := make(map[string]int, len(l.waiting))
		for h, calls := range l.waiting {
			waiting[h] = len(calls)
		}
		return BuildTable(l.state, waiting, l.round, l.Now())
	})
	if err != nil {
		return nil, err
	}
	t := res.(*Table)
	l.table.Store(t)
	return t, nil
}
