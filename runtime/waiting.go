package runtime

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// waitingRoom holds, per host, the host calls that found no responder (rule 12): they
// stay in the outbox and go out again at the host's next hello, and once at the host's
// first event after they began to wait (nudge). A call leaves the room when it goes out
// again, when a new boot made it moot (its answer is stepped in the next round), and when
// a committed batch answered it (its session was deleted).
//
// The room also counts each host's hellos (and new boots) applied by this run, and the
// count each call in flight was sent under: a call that finds no responder after a hello
// it could not see goes out again at once (or is moot) instead of waiting for the next
// hello, which may never come.
type waitingRoom struct {
	log    *slog.Logger
	byHost map[string][]waitingCall
	n      int            // the calls in byHost
	nudged map[int64]bool // calls a nudge sent: if they find no responder again, only a hello sends them
	moot   []Result       // the answers of the calls a new boot made pointless, for the next round
	hellos map[string]helloCount
	sentAt map[int64]helloCount // per call in flight, its host's count when it was sent
}

func newWaitingRoom() waitingRoom {
	return waitingRoom{byHost: map[string][]waitingCall{}, nudged: map[int64]bool{},
		hellos: map[string]helloCount{}, sentAt: map[int64]helloCount{}}
}

// waitingCall is a call in the waiting room: since when, and whether a nudge already
// sent it once since the last hello.
type waitingCall struct {
	Call
	since  time.Time
	nudged bool
}

// helloCount is how many hellos, and how many of them new boots, a host said.
type helloCount struct{ hellos, boots int }

// sent records that c went out under its host's current count of hellos.
func (r *waitingRoom) sent(c Call) { r.sentAt[c.ID] = r.hellos[c.Host] }

// enter takes out of results the calls that found no responder and may wait for their
// host: their outbox rows stay, and they go out again at the host's next hello. A call
// that was on its way while its host said hello cannot wait for that hello: it is to go
// out again at once (again), or, after a new boot, is answered as moot among the results
// it returns. entered counts the calls that now wait.
func (r *waitingRoom) enter(results []Result, now time.Time) (out []Result, again []Call, entered int) {
	out = results[:0]
	for _, res := range results {
		c := res.Call
		at, nudged := r.sentAt[c.ID], r.nudged[c.ID]
		delete(r.sentAt, c.ID)
		delete(r.nudged, c.ID)
		if res.Err == nil || !res.Err.NoResponder || !CanWait(c) {
			out = append(out, res)
			continue
		}
		cur := r.hellos[c.Host]
		switch {
		case cur.boots != at.boots && Moot(c):
			res.Err = HostRestarted(c)
			out = append(out, res)
			continue
		case cur.hellos != at.hellos:
			again = append(again, c)
			continue
		}
		if len(r.byHost[c.Host]) == 0 {
			r.log.Warn("host is not answering: its calls wait in the outbox for its next hello", "host", c.Host, "method", string(c.Op))
		}
		r.byHost[c.Host] = append(r.byHost[c.Host], waitingCall{Call: c, since: now, nudged: nudged})
		r.n++
		entered++
	}
	return out, again, entered
}

// hello counts h and returns the host's waiting calls, to go out again; after a new boot,
// the moot ones are answered with HostRestartedError in the next round instead.
func (r *waitingRoom) hello(h SaidHello) (again []Call) {
	cur := r.hellos[h.Host]
	cur.hellos++
	if h.NewBoot {
		cur.boots++
	}
	r.hellos[h.Host] = cur
	calls := r.byHost[h.Host]
	if len(calls) == 0 {
		return nil
	}
	delete(r.byHost, h.Host)
	r.n -= len(calls)
	moot := 0
	for _, w := range calls {
		if h.NewBoot && Moot(w.Call) {
			r.moot = append(r.moot, Result{Call: w.Call, Err: HostRestarted(w.Call)})
			moot++
			continue
		}
		again = append(again, w.Call)
	}
	r.log.Info("host is back: sending the calls that waited for it", "host", h.Host, "calls", len(calls)-moot, "moot_after_restart", moot)
	return again
}

// takeMoot returns the answers of the moot calls, for the next round, and forgets them.
func (r *waitingRoom) takeMoot() []Result {
	m := r.moot
	r.moot = nil
	return m
}

// deleted answers, as the host would (NotFoundError), the waiting calls whose session one
// of events deletes: a call waits for its host's next hello or until its session is gone
// (rule 12). The calls leave the room once the answers are committed (leave).
func (r *waitingRoom) deleted(events []Event) []Result {
	var out []Result
	answered := map[int64]bool{}
	for _, ev := range events {
		if ev.Type != protocol.EventSessionDeleted || ev.SessionID == "" {
			continue
		}
		for _, w := range r.byHost[ev.HostID] {
			if w.SessionID == ev.SessionID && !answered[w.ID] {
				answered[w.ID] = true
				out = append(out, Result{Call: w.Call, Err: &HostError{Name: protocol.NotFound, Message: "session " + w.SessionID + " was deleted while the call waited for its host"}})
			}
		}
	}
	return out
}

// leave removes the calls a committed batch answered (done: outbox ids) from the room,
// before the batch's hellos send what waits: an answered call is never sent again.
func (r *waitingRoom) leave(done []int64) {
	if r.n == 0 || len(done) == 0 {
		return
	}
	removed := 0
	for host, ws := range r.byHost {
		n := len(ws)
		ws = slices.DeleteFunc(ws, func(w waitingCall) bool { return slices.Contains(done, w.ID) })
		removed += n - len(ws)
		if len(ws) == 0 {
			delete(r.byHost, host)
		} else {
			r.byHost[host] = ws
		}
	}
	r.n -= removed
	if removed > 0 {
		r.log.Info("calls that waited for their host are done: their session was deleted", "calls", removed)
	}
}

// nudge returns, to go out once more, the waiting calls of a host that published one of
// ds after they began to wait: the host is connected, though it may say no hello (it
// reconnected to a broker that restarted with thatch, after the calls thatch resumed at
// start found no responder). A call a nudge sent that finds no responder again waits for
// a hello only, so a host that lacks a method is not asked again at each of its events.
func (r *waitingRoom) nudge(prefix string, ds []Delivery) (again []Call) {
	if r.n == 0 {
		return nil
	}
	latest := map[string]time.Time{}
	for _, d := range ds {
		if host := hostOf(prefix, d.Subject); host != "" && d.Published.After(latest[host]) {
			latest[host] = d.Published
		}
	}
	for host, at := range latest {
		sent := 0
		r.byHost[host] = slices.DeleteFunc(r.byHost[host], func(w waitingCall) bool {
			if w.nudged || !at.After(w.since) {
				return false
			}
			r.nudged[w.ID] = true
			again = append(again, w.Call)
			sent++
			return true
		})
		if len(r.byHost[host]) == 0 {
			delete(r.byHost, host)
		}
		if sent > 0 {
			r.n -= sent
			r.log.Info("host published an event: sending once more the calls that waited for it", "host", host, "calls", sent)
		}
	}
	return again
}

// hostOf reads the host id of an event subject, prefix.<host>.event.<type>.
func hostOf(prefix, subject string) string {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return ""
	}
	host, _, ok := strings.Cut(rest, ".event.")
	if !ok {
		return ""
	}
	return host
}

// waitCalls passes results through the waiting room (enter): it returns those to step,
// and sends again at once the calls that may not wait.
func (l *Loop) waitCalls(wctx context.Context, results []Result) []Result {
	if len(results) > 0 {
		l.changed()
	}
	out, again, entered := l.room.enter(results, l.Now())
	l.workers.outstanding -= entered + len(again) // dispatch counts again's once more
	l.send(wctx, again)
	return out
}

// send dispatches calls in order.
func (l *Loop) send(wctx context.Context, calls []Call) {
	for _, c := range calls {
		l.dispatch(wctx, c)
	}
}
