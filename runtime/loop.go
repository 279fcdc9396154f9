package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// is connected, which can send its waiting calls again (nudge).
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

// ErrStopped is returned to requests made after the loop stopped.
var ErrStopped = errors.New("thatch is stopping")

// Loop is the driver: the one goroutine that owns the State. Every other goroutine talks
// to it through its requests (requests.go). A round of the loop (round.go) steps what is
// ready and commits it, then acknowledges, answers and sends the host calls; beside it
// work the decoder (decode.go), the per-host workers that perform the host calls
// (workers.go), and the waiting room of the calls that found no responder (waiting.go).
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

	ready    chan struct{}
	stopped  chan struct{}
	newBoots chan string // hosts whose hello began a new boot (NewBoots)

	// The state as of the last commit, the consumer position it applied, and the last
	// commit error while commits fail.
	state      *State
	pos        uint64
	journalErr string
	// held are the tool calls waiting for the events they must see (isReady).
	held []*toolReq

	decoder decoder
	workers workers
	room    waitingRoom
	req     requests
	pub     published // the status and directory published for other goroutines
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
	return View{State: l.state, Pos: l.pos, Outstanding: l.workers.outstanding, Waiting: l.room.n, JournalError: l.journalErr}
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
		ready: make(chan struct{}), stopped: make(chan struct{}), newBoots: make(chan string, 64),
		decoder: newDecoder(), workers: newWorkers(), room: newWaitingRoom(), req: newRequests(),
	}
}

// Deliveries is where the consumer hands messages over. A message is acknowledged only
// after the transaction that applied it committed.
func (l *Loop) Deliveries() chan<- Delivery { return l.decoder.in }

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
	l.req.renders = make(chan struct{}, max(l.RenderMax, 1))
	l.workers.caller, l.workers.idle = l.Caller, l.WorkerIdle
	l.room.log = l.Log
	wctx, stopWorkers := context.WithCancel(context.Background())
	defer func() {
		stopWorkers()
		l.workers.wg.Wait()
	}()
	l.send(wctx, calls)
	if len(calls) > 0 {
		l.Log.Info("resuming host calls left by the previous run", "calls", len(calls))
	}
	l.publish()
	stopDecoding := l.decoder.start(l.Prefix, &l.Rules)
	defer stopDecoding()
	close(l.ready)

	// Each turn is a round: wait for something to do, gather what else is ready, play it.
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r := round{moot: l.room.takeMoot()}
		if len(r.moot) == 0 { // else the round has work already: no waiting
			select {
			case <-ctx.Done():
				for _, q := range l.held {
					q.reply <- &Reply{Err: &HostError{Name: protocol.Unavailable, Message: ErrStopped.Error()}}
				}
				stopDecoding()
				l.decoder.handBack()
				l.finishCalls(stopWorkers, wctx)
				return nil
			case d := <-l.decoder.out:
				r.deliveries = append(r.deliveries, d)
			case res := <-l.workers.results:
				r.results = append(r.results, res)
			case q := <-l.req.tools:
				l.held = append(l.held, q)
			case req := <-l.req.inputs: // committed on its own, before the round
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
			case q := <-l.req.queries:
				q.reply <- q.fn(l.view())
			case <-timer.C:
				r.expired = true
			}
		}
		l.gather(&r)
		if !l.play(ctx, wctx, &r) {
			return nil
		}
		if len(l.held) > 0 {
			timer.Reset(time.Until(l.held[0].deadline))
		}
		l.maybePublish()
	}
}

// AppliedRetention is how long applied event ids are kept: longer than the stream keeps
// an event, so no redelivery can outlive its id.
const AppliedRetention = 8 * 24 * time.Hour
