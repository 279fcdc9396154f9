package runtime

import (
	"sync/atomic"
	"time"
)

// Snapshot is the status of the loop's state as of a round: what the status method
// answers. The loop publishes one after each round that changed something, before that
// round's acknowledgements and replies, so the API reads it without entering the loop: a
// long round (a batch of large events, a slow commit) delays the next snapshot, never an
// answer. A Snapshot is never changed once published.
type Snapshot struct {
	// Status is Summary of the state, with the loop's own counts: host calls outstanding
	// and waiting, the journal's last write error while it fails.
	Status StatusView
	// At is when the loop published it.
	At       time.Time
	counters Counters
	round    uint64 // counts the snapshots the loop published
	waiting  map[string]int
}

// Position is the journal's committed position as of the snapshot: the identity of the
// stream it counts in ("" before the first event) and the last stream sequence applied.
func (s *Snapshot) Position() (stream string, seq uint64) {
	return s.counters.Stream, s.Status.LastStreamSeq
}

// WaitingByHost counts, per host, the host calls waiting in the outbox for the host's next
// hello; hosts without any are absent. The map is shared: only read it.
func (s *Snapshot) WaitingByHost() map[string]int { return s.waiting }

// Round tells snapshots apart: a newer snapshot has a larger round. A reader that saw
// round r knows the state changed when a snapshot shows another.
func (s *Snapshot) Round() uint64 { return s.round }

// BudgetReached reports whether a daily token budget (0: none) stopped new extractions
// at now, by the snapshot's spending: asked at now, a snapshot of yesterday says no.
func (s *Snapshot) BudgetReached(budget int64, now time.Time) bool {
	st := State{Counters: s.counters}
	return st.BudgetReached(budget, now)
}

// published is what the loop publishes for other goroutines: the status as of the last
// published round (snap), and the hosts and live sessions for the operator's page (dir,
// table.go), kept up to date by every commit once a reader turned it on (dirOn).
type published struct {
	snap  atomic.Pointer[Snapshot]
	dirty bool   // the state or the loop's counts changed since snap
	round uint64 // snap's round
	dir   directory
	dirOn atomic.Bool
}

// Snapshot returns the last status the loop published: nil before the loop is ready.
// It is safe to call from any goroutine and never waits for the loop.
func (l *Loop) Snapshot() *Snapshot { return l.pub.snap.Load() }

// changed marks the status as changed since the last snapshot.
func (l *Loop) changed() { l.pub.dirty = true }

// publish takes a snapshot now.
func (l *Loop) publish() {
	st := Summary(l.state, l.pos)
	st.OutstandingCalls, st.WaitingCalls, st.JournalError = l.workers.outstanding, l.room.n, l.journalErr
	l.pub.round++
	snap := &Snapshot{Status: st, At: l.Now(), counters: l.state.Counters, round: l.pub.round}
	if l.room.n > 0 { // a map per publish only while calls wait
		snap.waiting = make(map[string]int, len(l.room.byHost))
		for h, calls := range l.room.byHost {
			if len(calls) > 0 {
				snap.waiting[h] = len(calls)
			}
		}
	}
	l.pub.snap.Store(snap)
	l.pub.dirty = false
}

// maybePublish publishes a snapshot when the status changed. Summary reads counts the
// state keeps (it walks nothing), so every round that changed something publishes one:
// whoever saw a round's effects (an acknowledgement, a reply) then gets a status at least
// as new.
func (l *Loop) maybePublish() {
	if l.pub.dirty {
		l.publish()
	}
}
