package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Delivery is one message of the durable consumer.
type Delivery struct {
	Subject   string
	Data      []byte
	HostSeq   string // the Host-Seq header, "" when absent
	StreamSeq uint64
	// Stream is the identity of the stream it came from (its creation time): a stream
	// deleted and created again counts from 1 again.
	Stream string
	// Published is when the stream stored it (zero when unknown): a host that published
	// is connected, which can wake its waiting calls.
	Published time.Time
	Ack       func() error
	Nak       func() error // hands the message back for immediate redelivery

	// The message decoded (DecodeEvent) off the loop's goroutine, when decoded.
	ev      Event
	evErr   error
	decoded bool
}

// Caller performs one host call for a host of the given API generation.
type Caller interface {
	Do(ctx context.Context, api string, c Call) Result
}

// Answer is a tool call's reply as it goes back to the host.
type Answer struct {
	Output   string     `json:"output"`
	Metadata any        `json:"metadata"`
	Err      *HostError `json:"-"`
	// Caller, for a memory tool or a context method: who called (the caller acts on the
	// memory store). Payload, for thatch_get_extraction_payload: the claimed entries,
	// which the caller renders with FormatPayload (Output holds them rendered without
	// related memories).
	Caller  *CallerRef `json:"-"`
	Payload *Payload   `json:"-"`
}

// Payload is a claimed set read from the journal as a payload shows it
// (Journal.PayloadEntries: no metadata, args cut).
type Payload struct {
	Root      string
	Entries   []PayloadEntry
	Remaining int  // entries of Root left pending
	Again     bool // the caller is to call for them
}

// ErrStopped is returned to requests made after the loop stopped.
var ErrStopped = errors.New("thatch is stopping")

// Loop is the driver: the one goroutine that owns the State. Every other goroutine talks
// to it through its channels.
type Loop struct {
	Rules       Rules
	Prefix      string // event subject prefix
	Journal     Journal
	Caller      Caller
	Log         *slog.Logger
	Now         func() time.Time
	MaxBatch    int           // deliveries per transaction
	WaitApplied time.Duration // how long a tool call waits for the consumer to catch up
	// CommitWait is how long a tool call, once WaitApplied passed, may still wait for the
	// commit that answers it: a call is answered within WaitApplied + CommitWait whatever
	// the journal does, with UnavailableError when the commit did not complete in time. A
	// call made while commits fail (a full disk) is answered at once with the failure.
	CommitWait time.Duration
	// StopGrace is how long a stop lets the host calls in flight finish before it abandons
	// them to the outbox (rule 12: thatch stops within 2 s whatever its hosts do).
	StopGrace time.Duration
	// OnCommit, when set, sees the event ids each committed batch applied (benchmarks).
	OnCommit func(applied []Applied, at time.Time)
	// CommitTook, when set, sees how long each successful journal commit took (metrics).
	CommitTook func(time.Duration)
	// WorkerIdle is how long a host's call worker waits for a call before it exits; the
	// host's next call starts another. So a host that went quiet holds no goroutine.
	WorkerIdle time.Duration
	// RenderMax bounds the payloads read from the journal and rendered at once. They are
	// rendered off the loop's goroutine, after the commit of their claim; a payload can
	// be megabytes, and a thousand at once would hold a thousand of them in memory.
	RenderMax int

	deliveries chan Delivery
	decoded    chan Delivery // deliveries decoded beside the loop, in arrival order (decode)
	results    chan Result
	inputs     chan inputReq
	hellos     chan string
	tools      chan *toolReq
	queries    chan *query
	ready      chan struct{}
	stopped    chan struct{}
	draining   chan struct{} // closed at stop: workers finish their call in progress and take no other

	state       *State
	pos         uint64
	parked      []*toolReq // tool calls waiting for the events they must see (isReady)
	outstanding int        // host calls dispatched whose results are not committed
	journalErr  string     // the last commit error, while commits fail
	// down is journalErr for the callers' goroutines: a tool call whose commit does not
	// come in time says why.
	down atomic.Pointer[string]
	// waiting holds, per host, the calls that found no responder: they stay in the outbox
	// and go out again at the host's next hello (rule 12), and once at the host's first
	// event after they began to wait (nudge). moot holds the answers of those a new boot
	// made pointless, to be stepped in the next round.
	waiting  map[string][]waitingCall
	nWaiting int
	nudged   map[int64]bool // calls a nudge sent: if they find no responder again, only a hello sends them
	moot     []Result
	// heard counts each host's hellos (and new boots) applied by this run, and sent the
	// count each call in flight was sent under: a call that finds no responder after a
	// hello it could not see goes out again at once (or is moot) instead of waiting for
	// the next hello, which may never come.
	heard   map[string]helloCount
	sent    map[int64]helloCount
	workers map[string]*worker
	pruneAt int // prune exited workers from workers once it holds this many
	wg      sync.WaitGroup
	renders chan struct{} // a slot per payload being rendered (RenderMax)

	// snap is the status as of the last published round (snapshot.go); snapDirty says
	// the state or the loop's counts changed since.
	snap      atomic.Pointer[Snapshot]
	snapDirty bool
	round     uint64 // the last snapshot's round
	// dir is the hosts and live sessions published for the operator's page (table.go),
	// kept up to date by every commit once a reader turned it on (dirOn).
	dir   directory
	dirOn atomic.Bool
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

type toolReq struct {
	call     ToolCall
	minSeq   uint64
	deadline time.Time
	reply    chan *Reply
}

// inputReq is an input handed to the loop by Submit; done says whether the loop took it.
type inputReq struct {
	in   Input
	done chan error
}

type query struct {
	fn    func(View) any
	reply chan any
}

// View is what a query sees: the state, the consumer position, the host calls committed
// but not yet answered, and the journal's last write error while it fails.
type View struct {
	State        *State
	Pos          uint64
	Outstanding  int
	Waiting      int // host calls waiting in the outbox for their host's next hello
	JournalError string
}

func (l *Loop) view() View {
	return View{State: l.state, Pos: l.pos, Outstanding: l.outstanding, Waiting: l.nWaiting, JournalError: l.journalErr}
}

// DefaultWorkerIdle is how long a host's call worker waits for work before it exits.
const DefaultWorkerIdle = 30 * time.Second

// DefaultRenderMax is how many payloads are rendered at once: one fewer than the
// journal's read connections (4), so the other readers (status's ledger, the API's
// pages) never wait behind payloads.
const DefaultRenderMax = 3

// NewLoop returns a loop; set its fields before Run.
func NewLoop(j Journal, c Caller, log *slog.Logger) *Loop {
	return &Loop{
		Rules: DefaultRules, Prefix: "opencode", Journal: j, Caller: c, Log: log, Now: time.Now,
		MaxBatch: 512, WaitApplied: 10 * time.Second, CommitWait: 10 * time.Second, StopGrace: time.Second, WorkerIdle: DefaultWorkerIdle, RenderMax: DefaultRenderMax,
		deliveries: make(chan Delivery, 1024), decoded: make(chan Delivery, 512), results: make(chan Result, 64),
		inputs: make(chan inputReq), hellos: make(chan string, 64),
		tools: make(chan *toolReq), queries: make(chan *query),
		ready: make(chan struct{}), stopped: make(chan struct{}), draining: make(chan struct{}),
		workers: map[string]*worker{}, waiting: map[string][]waitingCall{}, nudged: map[int64]bool{},
		heard: map[string]helloCount{}, sent: map[int64]helloCount{},
	}
}

// Deliveries is where the consumer hands messages over. A message is acknowledged only
// after the transaction that applied it committed.
func (l *Loop) Deliveries() chan<- Delivery { return l.deliveries }

// Ready is closed once the state is loaded and the loop runs.
func (l *Loop) Ready() <-chan struct{} { return l.ready }

// Run loads the state, re-performs the outbox calls a previous run left, and applies
// inputs until ctx ends. A batch in progress is committed and acknowledged first.
func (l *Loop) Run(ctx context.Context) error {
	defer close(l.stopped)
	st, calls, pos, err := l.Journal.Load()
	if err != nil {
		return fmt.Errorf("load journal: %w", err)
	}
	l.state, l.pos = st, pos
	l.renders = make(chan struct{}, max(l.RenderMax, 1))
	wctx, stopWorkers := context.WithCancel(context.Background())
	defer func() {
		stopWorkers()
		l.wg.Wait()
	}()
	for _, c := range calls {
		l.dispatch(wctx, c)
	}
	if len(calls) > 0 {
		l.Log.Info("resuming host calls left by the previous run", "calls", len(calls))
	}
	l.publish()
	stopDecoding := l.startDecoding()
	defer stopDecoding()
	close(l.ready)

	// Each turn is a round: wait for something to do, gather what else is ready, play it.
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r := round{moot: l.moot}
		l.moot = nil
		if len(r.moot) == 0 { // else the round has work already: no waiting
			select {
			case <-ctx.Done():
				for _, q := range l.parked {
					q.reply <- &Reply{Err: &HostError{Name: protocol.Unavailable, Message: ErrStopped.Error()}}
				}
				stopDecoding()
				l.handBack()
				l.finishCalls(stopWorkers, wctx)
				return nil
			case d := <-l.decoded:
				r.deliveries = append(r.deliveries, d)
			case res := <-l.results:
				r.results = append(r.results, res)
			case q := <-l.tools:
				l.parked = append(l.parked, q)
			case req := <-l.inputs: // committed on its own, before the round
				req.done <- nil
				in := req.in
				ok := l.commit(ctx, wctx, func(now time.Time) (*Batch, error) {
					b := &Batch{Now: now, State: l.state, Effects: l.Rules.Step(l.state, in, now)}
					if _, tick := in.(Tick); tick {
						b.PruneApplied = now.Add(-AppliedRetention)
					}
					return b, nil
				})
				if !ok {
					return nil
				}
			case q := <-l.queries:
				q.reply <- q.fn(l.view())
			case <-timer.C:
				r.expired = true
			}
		}
		l.gather(&r)
		if !l.play(ctx, wctx, &r) {
			return nil
		}
		if len(l.parked) > 0 {
			timer.Reset(time.Until(l.parked[0].deadline))
		}
		l.maybePublish()
	}
}

// round is one turn of Loop.Run: the deliveries and host-call results that are ready, and
// the parked tool calls they make ready, stepped and committed in one transaction (a
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
	moot       []Result // waiting calls a new boot made pointless, answered by the loop (wake)
	expired    bool     // the parked tool calls' timer fired: a call past its deadline is answered as is
}

// gather adds to r what else is ready, without waiting, up to MaxBatch deliveries; the
// tool calls are parked until the events they must see are applied.
func (l *Loop) gather(r *round) {
	for len(r.deliveries) < l.MaxBatch {
		select {
		case d := <-l.decoded:
			r.deliveries = append(r.deliveries, d)
		case res := <-l.results:
			r.results = append(r.results, res)
		case q := <-l.tools:
			l.parked = append(l.parked, q)
		default:
			return
		}
	}
}

// play steps and commits r — its events and results, then the parked tool calls they make
// ready — and then, and only then, acknowledges its deliveries and answers those tool
// calls; commit performs the host calls. It returns false when ctx ended before the
// commit succeeded.
func (l *Loop) play(ctx, wctx context.Context, r *round) bool {
	results := l.park(wctx, r.results)
	answered := len(results)
	results = append(results, r.moot...)
	if len(r.deliveries)+len(results) == 0 && !l.anyReady(l.parked, l.pos, r.expired) {
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
		for _, q := range l.parked {
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
	l.outstanding -= answered
	l.nudge(wctx, r.deliveries)
	// The snapshot before the acknowledgements and replies: whoever saw this round's
	// effects gets a status at least as new.
	l.maybePublish()
	for _, d := range r.deliveries {
		if err := d.Ack(); err != nil {
			l.Log.Warn("acknowledge failed; the event will be redelivered and skipped", "stream_seq", d.StreamSeq, "err", err)
		}
	}
	l.parked = slices.DeleteFunc(l.parked, func(q *toolReq) bool { return slices.Contains(ready, q) })
	for i, q := range ready {
		q.reply <- replies[i] // rendered by the caller's goroutine, off the loop
	}
	return true
}

// isReady reports whether a parked tool call may be answered: every event the stream held
// when it arrived is applied (pos), or its wait expired.
func (l *Loop) isReady(q *toolReq, pos uint64, now time.Time, expired bool) bool {
	return q.minSeq <= pos || (expired && !now.Before(q.deadline))
}

func (l *Loop) anyReady(parked []*toolReq, pos uint64, expired bool) bool {
	now := l.Now()
	return slices.ContainsFunc(parked, func(q *toolReq) bool { return l.isReady(q, pos, now, expired) })
}

// render turns a committed tool call's reply into its answer, reading a payload's entries
// from the journal. It runs on the caller's goroutine, so the loop goes on meanwhile, and
// at most RenderMax payloads are read and rendered at once; the claim is committed
// already, so a caller that gives up waiting gets the same entries when it calls again.
func (l *Loop) render(ctx context.Context, reply *Reply) Answer {
	if reply.Err != nil {
		return Answer{Err: reply.Err}
	}
	a := Answer{Output: reply.Output, Metadata: reply.Metadata, Caller: reply.Caller}
	if p := reply.Payload; p != nil {
		select {
		case l.renders <- struct{}{}:
			defer func() { <-l.renders }()
		case <-ctx.Done():
			return Answer{Err: &HostError{Name: protocol.Unavailable, Message: "thatch claimed the entries but the call ended before they were read; call again for them: " + ctx.Err().Error()}}
		}
		entries, err := l.Journal.PayloadEntries(p.Root, p.Claimant)
		if err != nil {
			return Answer{Err: &HostError{Name: protocol.Unavailable, Message: "thatch could not read the claimed entries; call again: " + err.Error()}}
		}
		a.Payload = &Payload{Root: p.Root, Entries: entries, Remaining: p.Remaining, Again: p.Again}
		a.Output = FormatPayload(*a.Payload, nil)
	}
	return a
}

// park takes out of results the calls that found no responder and may wait for their
// host (rule 12): their outbox rows stay, and they go out again at the host's next hello.
// A call that was on its way while its host said hello cannot wait for that hello: it
// goes out again at once, or, after a new boot, is answered as moot in this round.
func (l *Loop) park(wctx context.Context, results []Result) []Result {
	if len(results) > 0 {
		l.changed()
	}
	out := results[:0]
	for _, r := range results {
		c := r.Call
		at, nudged := l.sent[c.ID], l.nudged[c.ID]
		delete(l.sent, c.ID)
		delete(l.nudged, c.ID)
		if r.Err == nil || !r.Err.NoResponder || !Parkable(c) {
			out = append(out, r)
			continue
		}
		now := l.heard[c.Host]
		switch {
		case now.boots != at.boots && Moot(c):
			r.Err = HostRestarted(c)
			out = append(out, r)
			continue
		case now.hellos != at.hellos:
			l.outstanding-- // dispatch counts it again
			l.dispatch(wctx, c)
			continue
		}
		if len(l.waiting[c.Host]) == 0 {
			l.Log.Warn("host is not answering: its calls wait in the outbox for its next hello", "host", c.Host, "method", string(c.Op))
		}
		l.waiting[c.Host] = append(l.waiting[c.Host], waitingCall{Call: c, since: l.Now(), nudged: nudged})
		l.nWaiting++
		l.outstanding--
	}
	return out
}

// wake sends a host's waiting calls again once it said hello; after a new boot, the moot
// ones are answered with HostRestartedError in the next round instead.
func (l *Loop) wake(wctx context.Context, a Awake) {
	h := l.heard[a.Host]
	h.hellos++
	if a.Restarted {
		h.boots++
	}
	l.heard[a.Host] = h
	calls := l.waiting[a.Host]
	if len(calls) == 0 {
		return
	}
	delete(l.waiting, a.Host)
	l.nWaiting -= len(calls)
	moot := 0
	for _, w := range calls {
		if a.Restarted && Moot(w.Call) {
			l.moot = append(l.moot, Result{Call: w.Call, Err: HostRestarted(w.Call)})
			moot++
			continue
		}
		l.dispatch(wctx, w.Call)
	}
	l.Log.Info("host is back: sending the calls that waited for it", "host", a.Host, "calls", len(calls)-moot, "moot_after_restart", moot)
}

// goneWaiting answers, as the host would (NotFoundError), the waiting calls whose session
// one of events deletes: a call waits for its host's next hello or until its session is
// gone (rule 12). The calls leave the waiting room once the answers are committed (unwait).
func (l *Loop) goneWaiting(events []Event) []Result {
	var out []Result
	answered := map[int64]bool{}
	for _, ev := range events {
		if ev.Type != protocol.EventSessionDeleted || ev.SessionID == "" {
			continue
		}
		for _, w := range l.waiting[ev.HostID] {
			if w.SessionID == ev.SessionID && !answered[w.ID] {
				answered[w.ID] = true
				out = append(out, Result{Call: w.Call, Err: &HostError{Name: protocol.NotFound, Message: "session " + w.SessionID + " was deleted while the call waited for its host"}})
			}
		}
	}
	return out
}

// unwait removes the calls a committed batch answered (done: outbox ids) from the waiting
// room, before the batch's hellos wake what waits: an answered call is never sent again.
func (l *Loop) unwait(done []int64) {
	if l.nWaiting == 0 || len(done) == 0 {
		return
	}
	removed := 0
	for host, ws := range l.waiting {
		n := len(ws)
		ws = slices.DeleteFunc(ws, func(w waitingCall) bool { return slices.Contains(done, w.ID) })
		removed += n - len(ws)
		if len(ws) == 0 {
			delete(l.waiting, host)
		} else {
			l.waiting[host] = ws
		}
	}
	l.nWaiting -= removed
	if removed > 0 {
		l.Log.Info("calls that waited for their host are done: their session was deleted", "calls", removed)
	}
}

// nudge sends once more the waiting calls of a host that published an event after they
// began to wait: the host is connected, though it may say no hello (it reconnected to a
// broker that restarted with thatch, after the calls thatch resumed at start found no
// responder). A call a nudge sent that finds no responder again waits for a hello only,
// so a host that lacks a method is not asked again at each of its events.
func (l *Loop) nudge(wctx context.Context, ds []Delivery) {
	if l.nWaiting == 0 {
		return
	}
	latest := map[string]time.Time{}
	for _, d := range ds {
		if host := hostOf(l.Prefix, d.Subject); host != "" && d.Published.After(latest[host]) {
			latest[host] = d.Published
		}
	}
	for host, at := range latest {
		sent := 0
		l.waiting[host] = slices.DeleteFunc(l.waiting[host], func(w waitingCall) bool {
			if w.nudged || !at.After(w.since) {
				return false
			}
			l.nudged[w.ID] = true
			l.dispatch(wctx, w.Call)
			sent++
			return true
		})
		if len(l.waiting[host]) == 0 {
			delete(l.waiting, host)
		}
		if sent > 0 {
			l.nWaiting -= sent
			l.Log.Info("host published an event: sending once more the calls that waited for it", "host", host, "calls", sent)
		}
	}
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

// finishCalls lets the calls in progress end for at most StopGrace and commits their
// results, so a clean stop repeats no host call; then it abandons the rest: calls not
// answered stay in the outbox, performed again at the next start with the same key.
func (l *Loop) finishCalls(stopWorkers context.CancelFunc, wctx context.Context) {
	close(l.draining)
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	grace := time.NewTimer(l.StopGrace)
	defer grace.Stop()
	cctx, cancel := context.WithTimeout(context.Background(), l.StopGrace+500*time.Millisecond)
	defer cancel()
	apply := func(r Result) {
		rs := l.park(wctx, []Result{r})
		if len(rs) == 0 {
			return
		}
		l.commit(cctx, wctx, func(now time.Time) (*Batch, error) {
			return &Batch{Now: now, State: l.state, Effects: l.Rules.Step(l.state, rs[0], now), Done: []int64{r.Call.ID}}, nil
		})
	}
	for {
		select {
		case r := <-l.results:
			apply(r)
		case <-grace.C:
			if l.outstanding > 0 {
				l.Log.Info("stopping: host calls still in flight are left in the outbox for the next start", "calls", l.outstanding)
			}
			stopWorkers()
		case <-done:
			for { // the workers are gone; what they sent is still buffered
				select {
				case r := <-l.results:
					apply(r)
				default:
					return
				}
			}
		}
	}
}

// handBack returns the deliveries not applied yet, so the next run gets them at once. The
// decoder is stopped (startDecoding).
func (l *Loop) handBack() {
	for {
		var d Delivery
		select {
		case d = <-l.decoded:
		case d = <-l.deliveries:
		default:
			return
		}
		if d.Nak != nil {
			_ = d.Nak()
		}
	}
}

// startDecoding starts the decoder: a goroutine that decodes the consumer's deliveries in
// arrival order and hands them to the loop (decoded), so that decoding, a quarter of the
// loop's work per event, overlaps the loop's commits instead of preceding them. The
// function it returns stops it and waits for it (once; later calls return at once); the
// delivery it held is handed back.
func (l *Loop) startDecoding() func() {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			var d Delivery
			select {
			case <-stop:
				return
			case d = <-l.deliveries:
			}
			d.ev, d.evErr = DecodeEvent(l.Prefix, d.Subject, d.Data)
			d.decoded = true
			if d.evErr == nil && d.ev.Tool != nil && !ownTool(d.ev.Tool.Tool) {
				l.Rules.PrepareBody(d.ev.Tool) // Rules do not change while the loop runs
			}
			select {
			case l.decoded <- d:
			case <-stop:
				if d.Nak != nil {
					_ = d.Nak()
				}
				return
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(stop)
		<-done
	})
}

// stepRound applies a round's deliveries (each event id at most once) and host-call
// results as one batch: a delivery of another stream, and one that does not decode, are
// inputs of Step like the events. It also answers the waiting calls whose session the
// events delete: they stop waiting once the batch is committed (unwait).
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
	gone := l.goneWaiting(events)
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
	backoff := 250 * time.Millisecond
	for {
		l.changed()
		b, err := build(l.Now())
		if err == nil && !b.Empty() { // nothing to write: nothing to wait for (a payload asked again)
			began := time.Now()
			err = l.Journal.Commit(b)
			if err == nil {
				l.journalErr = "" // a write succeeded: not said by a batch that wrote nothing
				l.down.Store(nil)
				if l.CommitTook != nil {
					l.CommitTook(time.Since(began))
				}
			}
		}
		if err == nil {
			if l.dirOn.Load() {
				l.dir.update(l.state, b.Effects, l.Now())
			}
			if l.OnCommit != nil && len(b.Applied) > 0 {
				l.OnCommit(b.Applied, l.Now())
			}
			if b.StreamSeq > l.pos {
				l.pos = b.StreamSeq
			}
			l.logNotes(b.Effects.Notes)
			l.unwait(b.Done)
			// Hellos first: the waiting calls are older than this batch's, and a call this
			// batch implies is sent after its hellos, under their count.
			for _, a := range b.Effects.Awake {
				l.wake(wctx, a)
			}
			for _, c := range b.Effects.Calls {
				l.dispatch(wctx, c)
			}
			for _, h := range b.Effects.Hellos {
				select {
				case l.hellos <- h:
				default: // the periodic sweep visits it anyway
				}
			}
			return true
		}
		l.Log.Error("journal write failed: not acknowledging events until it succeeds; check the disk holding the journal", "err", err, "retry_in", backoff.String())
		l.journalErr = err.Error()
		down := l.journalErr // a copy: the loop changes journalErr
		l.down.Store(&down)
		// The tool calls waiting for this commit, and those that come while the journal
		// fails, are answered now: nothing of them is applied, and a caller waiting for a
		// journal that may stay full for hours would get no answer at all. The round
		// steps again without them.
		refusal := JournalDown(err)
		for _, q := range l.parked {
			q.reply <- &Reply{Err: refusal}
		}
		if len(l.parked) > 0 {
			l.Log.Warn("tool calls answered with the journal's error", "calls", len(l.parked))
		}
		l.parked = nil
		if st, _, pos, lerr := l.Journal.Load(); lerr == nil {
			l.state, l.pos = st, pos
			if l.dirOn.Load() {
				l.dir.fill(l.state, l.Now())
			}
		}
		l.publish() // status says what is wrong while the loop waits
		// Wait out the backoff, still answering queries from the last committed state so
		// status can say what is wrong.
		wait := time.After(backoff)
	waiting:
		for {
			select {
			case <-ctx.Done():
				return false
			case <-wait:
				break waiting
			case q := <-l.queries:
				q.reply <- q.fn(l.view())
			case q := <-l.tools:
				q.reply <- &Reply{Err: refusal}
			case req := <-l.inputs:
				req.done <- errors.New(refusal.Message)
			}
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (l *Loop) logNotes(notes []Note) {
	for _, n := range notes {
		l.Log.Log(context.Background(), n.Level, n.Msg, n.Attrs...)
	}
}

// Tool answers a tool call against a state that includes every event up to stream
// sequence minSeq (the stream's last sequence when the call arrived), waiting at most
// WaitApplied for the consumer to get there.
func (l *Loop) Tool(ctx context.Context, c ToolCall, minSeq uint64) Answer {
	q := &toolReq{call: c, minSeq: minSeq, deadline: l.Now().Add(l.WaitApplied), reply: make(chan *Reply, 1)}
	// The answer's own bound: the loop may be inside a commit that does not return.
	late := time.NewTimer(l.WaitApplied + l.CommitWait)
	defer late.Stop()
	select {
	case l.tools <- q:
	case <-late.C:
		return Answer{Err: l.notCommitted()}
	case <-l.stopped:
		return Answer{Err: &HostError{Name: protocol.Unavailable, Message: ErrStopped.Error()}}
	case <-ctx.Done():
		return Answer{Err: &HostError{Name: protocol.Unavailable, Message: ctx.Err().Error()}}
	}
	select {
	case r := <-q.reply:
		return l.render(ctx, r)
	case <-late.C:
		// A commit that completes later applies the call all the same: a claim is then
		// the caller's, and its next call gets the same entries.
		return Answer{Err: l.notCommitted()}
	case <-l.stopped:
		return Answer{Err: &HostError{Name: protocol.Unavailable, Message: ErrStopped.Error()}}
	case <-ctx.Done():
		// The caller is gone (thatch stopping, its deadline): a claim the loop commits
		// later is the caller's all the same, and its next call gets the same entries.
		return Answer{Err: &HostError{Name: protocol.Unavailable, Message: ctx.Err().Error()}}
	}
}

// JournalDown is the error a tool call gets while the journal cannot commit: the cause
// first (a full disk says "disk full: free space in <folder>"), then what it means.
func JournalDown(err error) *HostError {
	return &HostError{Name: protocol.Unavailable, Message: err.Error() + "; thatch's journal cannot write, so nothing of this call was applied: call again once it can"}
}

// notCommitted is the error of a tool call that got no answer within WaitApplied +
// CommitWait: the journal's failure when it fails, else a commit that did not complete.
func (l *Loop) notCommitted() *HostError {
	if p := l.down.Load(); p != nil {
		return JournalDown(errors.New(*p))
	}
	return &HostError{Name: protocol.Unavailable, Message: fmt.Sprintf("thatch's journal did not commit within %s (a disk that is full, failing or very slow: see thatch's log); the call may still be applied: call again",
		l.WaitApplied+l.CommitWait)}
}

// AppliedRetention is how long applied event ids are kept: longer than the stream keeps
// an event, so no redelivery can outlive its id.
const AppliedRetention = 8 * 24 * time.Hour

// Submit hands an input (a Tick, a SweepApply) to the owner goroutine, which applies and
// commits it.
// While the journal cannot commit, it refuses the input with the journal's error.
func (l *Loop) Submit(ctx context.Context, in Input) error {
	req := inputReq{in: in, done: make(chan error, 1)}
	select {
	case l.inputs <- req:
		return <-req.done // answered as the loop takes it
	case <-l.stopped:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Hellos reports hosts that (re)started, for the strand sweep.
func (l *Loop) Hellos() <-chan string { return l.hellos }

// Query runs fn on the owner goroutine. fn must not keep or change what it is given.
func (l *Loop) Query(ctx context.Context, fn func(View) any) (any, error) {
	q := &query{fn: fn, reply: make(chan any, 1)}
	select {
	case l.queries <- q:
	case <-l.stopped:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return <-q.reply, nil
}

// worker performs one host's calls in order, so a slow host delays only itself. A worker
// without a call for idle exits (gone), and the host's next call starts a new one: a
// worker exits only once it has sent the result of its last call, so calls stay in order.
type worker struct {
	mu    sync.Mutex
	queue []queued
	gone  bool
	wake  chan struct{}
	idle  time.Duration
}

// push queues q, unless the worker exited.
func (w *worker) push(q queued) bool {
	w.mu.Lock()
	if w.gone {
		w.mu.Unlock()
		return false
	}
	w.queue = append(w.queue, q)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

func (w *worker) exited() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone
}

type queued struct {
	api  string
	call Call
}

// dispatch hands c to its host's worker, starting one when the host has none (or its
// worker exited for idleness).
func (l *Loop) dispatch(wctx context.Context, c Call) {
	c.Key = fmt.Sprintf("%s-%d", l.Journal.Instance(), c.ID)
	api := "v1"
	if h := l.state.Hosts[c.Host]; h != nil && h.API != "" {
		api = h.API
	}
	q := queued{api: api, call: c}
	if w := l.workers[c.Host]; w == nil || !w.push(q) {
		select {
		case <-l.draining:
			return // stopping: the call stays in the outbox for the next run
		default:
		}
		l.pruneWorkers()
		w = &worker{wake: make(chan struct{}, 1), queue: []queued{q}, idle: l.WorkerIdle}
		l.workers[c.Host] = w
		l.wg.Add(1)
		go l.work(wctx, w)
	}
	l.sent[c.ID] = l.heard[c.Host]
	l.outstanding++
	l.changed()
}

// pruneWorkers forgets the workers that exited, once there are twice as many as after
// the last pruning: the map stays within twice the hosts with a worker, at a cost
// spread over the workers started.
func (l *Loop) pruneWorkers() {
	if len(l.workers) < l.pruneAt {
		return
	}
	for host, w := range l.workers {
		if w.exited() {
			delete(l.workers, host)
		}
	}
	l.pruneAt = max(64, 2*len(l.workers))
}

func (l *Loop) work(ctx context.Context, w *worker) {
	defer l.wg.Done()
	idle := time.NewTimer(w.idle)
	defer idle.Stop()
	for {
		select {
		case <-l.draining:
			return
		default:
		}
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.mu.Unlock()
			idle.Reset(w.idle)
			select {
			case <-ctx.Done():
				return
			case <-l.draining:
				return
			case <-w.wake:
				continue
			case <-idle.C:
				w.mu.Lock()
				if w.gone = len(w.queue) == 0; w.gone {
					w.mu.Unlock()
					return
				}
				w.mu.Unlock()
				continue
			}
		}
		q := w.queue[0]
		w.queue = w.queue[1:]
		w.mu.Unlock()
		res := l.Caller.Do(ctx, q.api, q.call)
		if ctx.Err() != nil {
			return // the call stays in the outbox and is performed again at the next start
		}
		res.Call = q.call
		select {
		case l.results <- res:
		case <-ctx.Done():
			return
		}
	}
}
