package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

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

// requests is how other goroutines talk to the loop: tool calls, inputs and queries go
// in on its channels and their answers come back on each request's own.
type requests struct {
	tools   chan *toolReq
	inputs  chan inputReq
	queries chan *query
	// renders holds a slot per payload being rendered on a caller's goroutine (RenderMax).
	renders chan struct{}
	// down is the loop's last commit error for the callers' goroutines, while commits
	// fail: a tool call whose commit does not come in time says why.
	down atomic.Pointer[string]
}

func newRequests() requests {
	return requests{tools: make(chan *toolReq), inputs: make(chan inputReq), queries: make(chan *query)}
}

// toolReq is a tool call held by the loop until the events it must see are applied
// (minSeq) or its deadline passed.
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

// Tool answers a tool call against a state that includes every event up to stream
// sequence minSeq (the stream's last sequence when the call arrived), waiting at most
// WaitApplied for the consumer to get there.
func (l *Loop) Tool(ctx context.Context, c ToolCall, minSeq uint64) Answer {
	q := &toolReq{call: c, minSeq: minSeq, deadline: l.Now().Add(l.WaitApplied), reply: make(chan *Reply, 1)}
	// The answer's own bound: the loop may be inside a commit that does not return.
	late := time.NewTimer(l.WaitApplied + l.CommitWait)
	defer late.Stop()
	select {
	case l.req.tools <- q:
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
		case l.req.renders <- struct{}{}:
			defer func() { <-l.req.renders }()
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

// JournalDown is the error a tool call gets while the journal cannot commit: the cause
// first (a full disk says "disk full: free space in <folder>"), then what it means.
func JournalDown(err error) *HostError {
	return &HostError{Name: protocol.Unavailable, Message: err.Error() + "; thatch's journal cannot write, so nothing of this call was applied: call again once it can"}
}

// notCommitted is the error of a tool call that got no answer within WaitApplied +
// CommitWait: the journal's failure when it fails, else a commit that did not complete.
func (l *Loop) notCommitted() *HostError {
	if p := l.req.down.Load(); p != nil {
		return JournalDown(errors.New(*p))
	}
	return &HostError{Name: protocol.Unavailable, Message: fmt.Sprintf("thatch's journal did not commit within %s (a disk that is full, failing or very slow: see thatch's log); the call may still be applied: call again",
		l.WaitApplied+l.CommitWait)}
}

// Submit hands an input (a Tick, a SweepApply) to the owner goroutine, which applies and
// commits it.
// While the journal cannot commit, it refuses the input with the journal's error.
func (l *Loop) Submit(ctx context.Context, in Input) error {
	req := inputReq{in: in, done: make(chan error, 1)}
	select {
	case l.req.inputs <- req:
		return <-req.done // answered as the loop takes it
	case <-l.stopped:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NewBoots reports the hosts whose hello began a new boot, for the strand sweep.
func (l *Loop) NewBoots() <-chan string { return l.newBoots }

// Query runs fn on the owner goroutine. fn must not keep or change what it is given.
func (l *Loop) Query(ctx context.Context, fn func(View) any) (any, error) {
	q := &query{fn: fn, reply: make(chan any, 1)}
	select {
	case l.req.queries <- q:
	case <-l.stopped:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return <-q.reply, nil
}
