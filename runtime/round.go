package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/thatch-dev/thatch/internal/backoff"
)

// round is one turn of Loop.Run: the deliveries and host-call results that are ready, and
// the held tool calls they make ready, stepped and committed in one transaction (a
// commit is the loop's main cost).
//
// Nothing of a round leaves the loop before its commit: its deliveries are acknowledged,
// its tool calls given Step's replies and the host calls it implies performed only once
// the transaction that journals its effects committed. A round whose commit never
// succeeds (thatch stops while the journal fails) acknowledges nothing and performs none
// of its calls: the stream redelivers its events, and the outbox keeps the calls whose
// results it held. Its tool calls, and those that arrive while commits fail, get the
// journal's error (JournalDown) at the first failure, so their callers call again.
// An input submitted to the loop (a Tick, a sweep) commits on its own, under the same rule.
type round struct {
	deliveries []Delivery
	results    []Result // host-call results the workers sent
	moot       []Result // waiting calls a new boot made pointless, answered by the loop (takeMoot)
	expired    bool     // the held tool calls' timer fired: a call past its deadline is answered as is
}

// gather adds to r what else is ready, without waiting, up to MaxBatch deliveries; the
// tool calls are held until the events they must see are applied.
func (l *Loop) gather(r *round) {
	for len(r.deliveries) < l.MaxBatch {
		select {
		case d := <-l.decoder.out:
			r.deliveries = append(r.deliveries, d)
		case res := <-l.workers.results:
			r.results = append(r.results, res)
		case q := <-l.req.tools:
			l.held = append(l.held, q)
		default:
			return
		}
	}
}

// play steps and commits r — its events and results, then the held tool calls they make
// ready — and then, and only then, acknowledges its deliveries and answers those tool
// calls; commit performs the host calls. It returns false when ctx ended before the
// commit succeeded.
func (l *Loop) play(ctx, wctx context.Context, r *round) bool {
	results := l.waitCalls(wctx, r.results)
	answered := len(results)
	results = append(results, r.moot...)
	if len(r.deliveries)+len(results) == 0 && !l.anyReady(l.held, l.pos, r.expired) {
		return true
	}
	var ready []*toolReq
	var replies []*Reply
	ok := l.commit(ctx, wctx, func(now time.Time) (*Batch, error) {
		b, err := l.stepRound(r.deliveries, results, now)
		if err != nil {
			return nil, err
		}
		ready, replies = nil, nil
		for _, q := range l.held {
			if l.isReady(q, max(l.pos, b.StreamSeq), now, r.expired) {
				one := l.Rules.Step(l.state, q.call, now)
				b.Effects.Merge(one)
				ready, replies = append(ready, q), append(replies, one.Reply)
			}
		}
		return b, nil
	})
	if !ok {
		return false
	}
	l.workers.outstanding -= answered
	l.send(wctx, l.room.nudge(l.Prefix, r.deliveries))
	// The snapshot before the acknowledgements and replies: whoever saw this round's
	// effects gets a status at least as new.
	l.maybePublish()
	for _, d := range r.deliveries {
		if err := d.Ack(); err != nil {
			l.Log.Warn("acknowledge failed; the event will be redelivered and skipped", "stream_seq", d.StreamSeq, "err", err)
		}
	}
	l.held = slices.DeleteFunc(l.held, func(q *toolReq) bool { return slices.Contains(ready, q) })
	for i, q := range ready {
		q.reply <- replies[i] // rendered by the caller's goroutine, off the loop
	}
	return true
}

// isReady reports whether a held tool call may be answered: every event the stream held
// when it arrived is applied (pos), or its wait expired.
func (l *Loop) isReady(q *toolReq, pos uint64, now time.Time, expired bool) bool {
	return q.minSeq <= pos || (expired && !now.Before(q.deadline))
}

func (l *Loop) anyReady(held []*toolReq, pos uint64, expired bool) bool {
	now := l.Now()
	return slices.ContainsFunc(held, func(q *toolReq) bool { return l.isReady(q, pos, now, expired) })
}

// stepRound applies a round's deliveries (each event id at most once) and host-call
// results as one batch: a delivery of another stream, and one that does not decode, are
// inputs of Step like the events. It also answers the waiting calls whose session the
// events delete: they leave the waiting room once the batch is committed.
func (l *Loop) stepRound(batch []Delivery, results []Result, now time.Time) (*Batch, error) {
	b := &Batch{Now: now, State: l.state, Effects: NewEffects()}
	events := make([]Event, 0, len(batch))
	var ids []string
	for _, d := range batch {
		if d.Stream != "" && d.Stream != l.state.Counters.Stream {
			replaced := l.state.Counters.Stream != "" // else the first stream this journal knows
			b.Effects.Merge(l.Rules.Step(l.state, StreamSwitch{ID: d.Stream}, now))
			if replaced {
				l.pos, b.StreamSeq = 0, 0 // the journal takes the new stream's lower position
			}
		}
		b.StreamSeq = max(b.StreamSeq, d.StreamSeq)
		ev, err := d.ev, d.evErr
		if !d.decoded {
			ev, err = DecodeEvent(l.Prefix, d.Subject, d.Data)
		}
		if err == nil {
			ev.Seq = d.StreamSeq
			ev.HostSeq, err = parseHostSeq(d.HostSeq)
		}
		if err != nil {
			rj := Reject(d.StreamSeq, d.Subject, d.Data, err)
			b.Effects.Merge(l.Rules.Step(l.state, rj, now))
			b.DeadLetters = append(b.DeadLetters, rj.DeadLetter())
			continue
		}
		if !Known(ev.Type) {
			continue
		}
		events = append(events, ev)
		ids = append(ids, ev.ID)
	}
	seen, err := l.Journal.Applied(ids)
	if err != nil {
		return nil, err
	}
	fx, applied := l.Rules.ApplyEvents(l.state, events, seen, now)
	b.Effects.Merge(fx)
	b.Applied = applied
	if b.StreamSeq <= l.pos {
		b.StreamSeq = 0 // redeliveries only: the position stays
	}
	gone := l.room.deleted(events)
	for _, r := range slices.Concat(results, gone) {
		b.Effects.Merge(l.Rules.Step(l.state, r, now))
		b.Done = append(b.Done, r.Call.ID)
	}
	return b, nil
}

func parseHostSeq(h string) (int64, error) {
	if h == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(h, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: Host-Seq header %q is not a positive integer", ErrBadEvent, h)
	}
	return n, nil
}

// commit steps inputs through build and commits the batch, then performs its calls. A
// journal that fails (a full or read-only disk) is retried with backoff after reloading
// the state it last committed, so nothing is lost and nothing is acknowledged meanwhile.
// It returns false when ctx ended first.
func (l *Loop) commit(ctx, wctx context.Context, build func(time.Time) (*Batch, error)) bool {
	var retry backoff.Backoff
	for {
		l.changed()
		b, err := build(l.Now())
		if err == nil && !b.Empty() { // nothing to write: nothing to wait for (a payload asked again)
			began := time.Now()
			err = l.Journal.Commit(b)
			if err == nil {
				l.journalErr = "" // a write succeeded: not said by a batch that wrote nothing
				l.req.down.Store(nil)
				if l.CommitTook != nil {
					l.CommitTook(time.Since(began))
				}
			}
		}
		if err == nil {
			if l.pub.dirOn.Load() {
				l.pub.dir.update(l.state, b.Effects, l.Now())
			}
			if l.OnCommit != nil && len(b.Applied) > 0 {
				l.OnCommit(b.Applied, l.Now())
			}
			if b.StreamSeq > l.pos {
				l.pos = b.StreamSeq
			}
			l.logNotes(b.Effects.Notes)
			l.room.leave(b.Done)
			// Hellos first: the waiting calls are older than this batch's, and a call this
			// batch implies is sent after its hellos, under their count.
			for _, h := range b.Effects.Hellos {
				l.send(wctx, l.room.hello(h))
			}
			l.send(wctx, b.Effects.Calls)
			for _, h := range b.Effects.Hellos {
				if !h.NewBoot {
					continue
				}
				select {
				case l.newBoots <- h.Host:
				default: // the periodic sweep visits it anyway
				}
			}
			return true
		}
		wait := retry.Next()
		l.Log.Error("journal write failed: not acknowledging events until it succeeds; check the disk holding the journal", "err", err, "retry_in", wait.String())
		l.journalErr = err.Error()
		down := l.journalErr // a copy: the loop changes journalErr
		l.req.down.Store(&down)
		// The tool calls waiting for this commit, and those that come while the journal
		// fails, are answered now: nothing of them is applied, and a caller waiting for a
		// journal that may stay full for hours would get no answer at all. The round
		// steps again without them.
		refusal := JournalDown(err)
		for _, q := range l.held {
			q.reply <- &Reply{Err: refusal}
		}
		if len(l.held) > 0 {
			l.Log.Warn("tool calls answered with the journal's error", "calls", len(l.held))
		}
		l.held = nil
		if st, _, pos, lerr := l.Journal.Load(); lerr == nil {
			l.state, l.pos = st, pos
			if l.pub.dirOn.Load() {
				l.pub.dir.fill(l.state, l.Now())
			}
		}
		l.publish() // status says what is wrong while the loop waits
		// Wait out the backoff, still answering queries from the last committed state so
		// status can say what is wrong.
		waited := time.After(wait)
	waiting:
		for {
			select {
			case <-ctx.Done():
				return false
			case <-waited:
				break waiting
			case q := <-l.req.queries:
				q.reply <- q.fn(l.view())
			case q := <-l.req.tools:
				q.reply <- &Reply{Err: refusal}
			case req := <-l.req.inputs:
				req.done <- errors.New(refusal.Message)
			}
		}
	}
}

func (l *Loop) logNotes(notes []Note) {
	for _, n := range notes {
		l.Log.Log(context.Background(), n.Level, n.Msg, n.Attrs...)
	}
}

// finishCalls lets the calls in progress end for at most StopGrace and commits their
// results, so a clean stop repeats no host call; then it abandons the rest: calls not
// answered stay in the outbox, performed again at the next start with the same key.
func (l *Loop) finishCalls(stopWorkers context.CancelFunc, wctx context.Context) {
	close(l.workers.draining)
	done := make(chan struct{})
	go func() {
		l.workers.wg.Wait()
		close(done)
	}()
	grace := time.NewTimer(l.StopGrace)
	defer grace.Stop()
	cctx, cancel := context.WithTimeout(context.Background(), l.StopGrace+500*time.Millisecond)
	defer cancel()
	apply := func(r Result) {
		rs := l.waitCalls(wctx, []Result{r})
		if len(rs) == 0 {
			return
		}
		l.commit(cctx, wctx, func(now time.Time) (*Batch, error) {
			return &Batch{Now: now, State: l.state, Effects: l.Rules.Step(l.state, rs[0], now), Done: []int64{r.Call.ID}}, nil
		})
	}
	for {
		select {
		case r := <-l.workers.results:
			apply(r)
		case <-grace.C:
			if l.workers.outstanding > 0 {
				l.Log.Info("stopping: host calls still in flight are left in the outbox for the next start", "calls", l.workers.outstanding)
			}
			stopWorkers()
		case <-done:
			for { // the workers are gone; what they sent is still buffered
				select {
				case r := <-l.workers.results:
					apply(r)
				default:
					return
				}
			}
		}
	}
}
