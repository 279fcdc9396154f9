package opencode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// catchUp publishes the sessions updated since then, each as a session.updated after
// its ancestors, then their completed tool calls, then an idle for each of them that is
// idle now (catchUpIdles). The ones thatch already has are the same event ids
// (ToolEventID, sync_<sessionID>_<time.updated>, sync_idle_…), which it drops. A
// child created while thatch was away (a task's sub-agent) is thus known to thatch, as a
// child, before its tool calls arrive.
func (b *Bridge) catchUp(ctx context.Context, since time.Time) error {
	get := func(fn func(context.Context) error) error { // a hung request must not hold the stream
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return fn(rctx)
	}
	var sessions []listedSession
	if err := get(func(ctx context.Context) error { return b.Client.sessions(ctx, since.UnixMilli(), &sessions) }); err != nil {
		return err
	}
	ordered, err := b.lineage(get, sessions)
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, s := range sessions {
		listed[s.ID] = true
	}
	for _, s := range ordered {
		if err := b.publish(ctx, s.event()); err != nil {
			return &publishError{err}
		}
	}
	published := 0
	var read []listedSession // the listed sessions whose messages were read: not deleted meanwhile
	for _, s := range ordered {
		if !listed[s.ID] {
			continue // an ancestor updated before then: no new tool calls
		}
		var msgs []struct {
			Parts []part `json:"parts"`
		}
		err := get(func(ctx context.Context) error {
			return b.Client.do(ctx, "GET", "/session/"+url.PathEscape(s.ID)+"/message", nil, &msgs)
		})
		if he, ok := err.(*protocol.Error); ok && he.Name == protocol.NotFound {
			continue // deleted meanwhile
		} else if err != nil {
			return err
		}
		for _, m := range msgs {
			for _, p := range m.Parts {
				if ev, ok := p.toolEvent(); ok {
					if err := b.publish(ctx, ev); err != nil {
						return &publishError{err}
					}
					published++
				}
			}
		}
		read = append(read, s)
	}
	idles, unknown, err := b.catchUpIdles(ctx, get, read)
	if err != nil {
		return err
	}
	b.Log.Info("caught up on tool calls", "since", since.Format(time.RFC3339), "sessions", len(sessions),
		"ancestors", len(ordered)-len(sessions), "tool_calls", published, "idle", idles, "status_unknown", unknown)
	return nil
}

// catchUpIdles publishes, after every caught-up tool call, a session.status idle for each
// session of read (listed, not deleted) that opencode says is idle now: one that went idle
// while the bridge was away would otherwise wait, its entries pending, for its next turn
// (opencode keeps no event history, and thatch extracts at an idle). Children come before
// their parents, as opencode's own idles do: a task's calls count for its root, whose idle
// must find them. The id, sync_idle_<sessionID>_<time.updated>_<bootID>, makes a repeat
// within the boot a duplicate; a new boot, whose hello reset the sessions' status in
// thatch, says it again. opencode keeps statuses per directory (GET /session/status
// answers for the directory of the request, and lists only the sessions that are not
// idle), so each session's own directory is asked. A directory whose statuses cannot be
// read (an opencode without the route) gets no idle: its sessions wait as before. It
// returns how many idles it published and how many sessions it could not tell.
func (b *Bridge) catchUpIdles(ctx context.Context, get func(func(context.Context) error) error, read []listedSession) (idles, unknown int, err error) {
	boot := b.bootID()
	type status struct {
		Type string `json:"type"`
	}
	statuses := map[string]map[string]status{} // directory → its sessions that are not idle
	known := map[string]bool{}                 // directory → its statuses were read
	checked := false
	for _, s := range slices.Backward(read) {
		if _, asked := known[s.Directory]; !asked {
			route := "/session/status"
			if s.Directory != "" {
				route += "?directory=" + url.QueryEscape(s.Directory)
			}
			var st map[string]status
			err := get(func(ctx context.Context) error { return b.Client.do(ctx, "GET", route, nil, &st) })
			if err != nil {
				b.Log.Debug("could not read opencode's session statuses; its sessions that went idle while the bridge was away wait for their next turn", "directory", s.Directory, "err", err)
			}
			statuses[s.Directory], known[s.Directory] = st, err == nil
		}
		if !known[s.Directory] {
			unknown++
			continue
		}
		st := statuses[s.Directory]
		if cur, busy := st[s.ID]; busy && cur.Type != "idle" {
			continue // the stream tells of its idle when it comes
		}
		if !checked {
			// As before an idle of the stream: thatch should know of tools opencode loaded.
			if err := b.recheckTools(ctx, false); err != nil {
				return idles, unknown, &publishError{err}
			}
			checked = true
		}
		if err := b.publish(ctx, s.idleEvent(boot)); err != nil {
			return idles, unknown, &publishError{err}
		}
		idles++
	}
	return idles, unknown, nil
}

// listedSession is a session as GET /session, /experimental/session and /session/{id}
// return it: what the catch-up orders by, and the object as it came.
type listedSession struct {
	ID        string
	ParentID  string
	Directory string
	Updated   int64           // time.updated, in ms
	Info      json.RawMessage // the whole object, as session.updated carries it
}

func (s *listedSession) UnmarshalJSON(data []byte) error {
	var f struct {
		ID        string `json:"id"`
		ParentID  string `json:"parentID"`
		Directory string `json:"directory"`
		Time      struct {
			Updated int64 `json:"updated"`
		} `json:"time"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	*s = listedSession{ID: f.ID, ParentID: f.ParentID, Directory: f.Directory, Updated: f.Time.Updated, Info: bytes.Clone(data)}
	return nil
}

// event is the session.updated that tells thatch of s as it is now, as opencode's own
// would. Its id names the update, so a repeat of the same state is one event.
func (s listedSession) event() Event {
	props, _ := json.Marshal(map[string]any{"sessionID": s.ID, "info": s.Info})
	return Event{ID: fmt.Sprintf("sync_%s_%d", s.ID, s.Updated), Type: protocol.EventSessionUpdated, Properties: props}
}

// idleEvent is the session.status idle that tells thatch s is idle now, as opencode's
// own would, in boot (catchUpIdles).
func (s listedSession) idleEvent(boot string) Event {
	props, _ := json.Marshal(map[string]any{"sessionID": s.ID, "status": map[string]string{"type": "idle"}})
	id := fmt.Sprintf("sync_idle_%s_%d", s.ID, s.Updated)
	if boot != "" {
		id += "_" + boot
	}
	return Event{ID: id, Type: protocol.EventSessionStatus, Properties: props}
}

// lineage orders sessions parents first, adding the ancestors the list lacks (opencode
// lists the sessions updated since a time, and a child's parent may not be one of them),
// read with GET /session/{id}. An ancestor deleted meanwhile is left out.
func (b *Bridge) lineage(get func(func(context.Context) error) error, sessions []listedSession) ([]listedSession, error) {
	byID := map[string]listedSession{}
	for _, s := range sessions {
		byID[s.ID] = s
	}
	var out []listedSession
	seen := map[string]bool{}
	var visit func(s listedSession) error
	visit = func(s listedSession) error {
		if seen[s.ID] {
			return nil
		}
		seen[s.ID] = true // before the parent: a cycle ends here
		if p := s.ParentID; p != "" && !seen[p] {
			parent, ok := byID[p]
			if !ok {
				err := get(func(ctx context.Context) error {
					return b.Client.do(ctx, "GET", "/session/"+url.PathEscape(p), nil, &parent)
				})
				if he, isHE := err.(*protocol.Error); isHE && he.Name == protocol.NotFound {
					parent = listedSession{} // deleted meanwhile
				} else if err != nil {
					return err
				}
				ok = parent.ID == p
				if ok {
					byID[p] = parent
				}
			}
			if ok {
				if err := visit(parent); err != nil {
					return err
				}
			}
		}
		out = append(out, s)
		return nil
	}
	for _, s := range sessions {
		if s.ID == "" {
			continue // not a session thatch could take
		}
		if err := visit(s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type publishError struct{ err error }

func (e *publishError) Error() string { return "publish: " + e.err.Error() }
func (e *publishError) Unwrap() error { return e.err }
