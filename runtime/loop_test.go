package runtime_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
)

// fakeCaller is a runtime.Caller whose answers a test chooses.
type fakeCaller struct {
	mu    sync.Mutex
	calls []runtime.Call
	do    func(runtime.Call) runtime.Result
}

var _ runtime.Caller = (*fakeCaller)(nil)

func (f *fakeCaller) Do(_ context.Context, _ string, c runtime.Call) runtime.Result {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	return f.do(c)
}

func (f *fakeCaller) ops() []runtime.Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []runtime.Op
	for _, c := range f.calls {
		out = append(out, c.Op)
	}
	return out
}

// The loop applies deliveries, acknowledges them after the commit, performs the calls
// they imply with idempotency keys, and stops leaving no goroutine behind.
func TestLoopRunsAndStopsCleanly(t *testing.T) {
	defer goleak.VerifyNone(t)
	store, err := journal.Open(filepath.Join(t.TempDir(), "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	caller := &fakeCaller{do: func(c runtime.Call) runtime.Result {
		r := runtime.Result{Call: c}
		if c.Op == runtime.OpCreate {
			r.Session = &runtime.SessionInfo{ID: "ses_child", ParentID: c.SessionID, Title: c.Title}
		}
		return r
	}}
	loop := runtime.NewLoop(store, caller, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()

	var mu sync.Mutex
	acked := 0
	bodies := []string{
		`{"id":"e1","type":"session.created","properties":{"sessionID":"ses_a","info":{"id":"ses_a","title":"t","directory":"/w"}}}`,
		`{"id":"e2","type":"tool.execute.after","properties":{"sessionID":"ses_a","callID":"c1","tool":"bash","args":{},"output":"x"}}`,
		`{"id":"e3","type":"session.status","properties":{"sessionID":"ses_a","status":{"type":"idle"}}}`,
	}
	for i, b := range bodies {
		loop.Deliveries() <- runtime.Delivery{Subject: "opencode.h1.event.x", Data: []byte(b), StreamSeq: uint64(i + 1),
			Ack: func() error { mu.Lock(); acked++; mu.Unlock(); return nil }, Nak: func() error { return nil }}
	}
	deadline := time.Now().Add(10 * time.Second)
	for fmt.Sprint(caller.ops()) != "[session.prompt session.create session.prompt]" {
		if time.Now().After(deadline) {
			t.Fatalf("calls %v, want the reminder, the create and the instruction prompt", caller.ops())
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	if acked != 3 {
		t.Errorf("%d deliveries acknowledged, want 3", acked)
	}
	mu.Unlock()
	caller.mu.Lock()
	defer caller.mu.Unlock()
	for _, c := range caller.calls {
		if c.Key == "" {
			t.Errorf("call %s without an idempotency key", c.Op)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// loopRig is a loop on a journal in a temporary folder, fed deliveries by the test.
type loopRig struct {
	t      *testing.T
	dir    string
	store  *journal.Store
	loop   *runtime.Loop
	cancel context.CancelFunc
	done   chan error
	seq    uint64
	stream string // Delivery.Stream of the next deliveries
}

func startLoop(t *testing.T, dir string, c runtime.Caller) *loopRig {
	t.Helper()
	store, err := journal.Open(filepath.Join(dir, "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	r := &loopRig{t: t, dir: dir, store: store, done: make(chan error, 1), stream: "s1"}
	r.loop = runtime.NewLoop(store, c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.loop.Run(ctx) }()
	<-r.loop.Ready()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop stops the loop as thatch's stop does, and reports how long it took.
func (r *loopRig) stop() time.Duration {
	if r.cancel == nil {
		return 0
	}
	began := time.Now()
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Error(err)
		}
	case <-time.After(20 * time.Second):
		r.t.Fatal("the loop did not stop")
	}
	took := time.Since(began)
	r.store.Close()
	return took
}

// deliver hands the loop one event of host h1 at the next stream sequence.
func (r *loopRig) deliver(id, typ, props string) {
	r.seq++
	body := fmt.Sprintf(`{"id":%q,"type":%q,"properties":%s}`, id, typ, props)
	r.loop.Deliveries() <- runtime.Delivery{Subject: "opencode.h1.event." + typ, Data: []byte(body), StreamSeq: r.seq, Stream: r.stream,
		Published: time.Now(), Ack: func() error { return nil }, Nak: func() error { return nil }}
}

func (r *loopRig) hello(boot string) {
	r.deliver("hello_"+boot+fmt.Sprint(r.seq), "host.hello", `{"hostID":"h1","api":"v1","version":"x","bootID":"`+boot+`","directory":"/w","worktree":"/w","capabilities":{},"resumed":[]}`)
}

func (r *loopRig) created(sid string) {
	r.deliver("created_"+sid, "session.created", `{"sessionID":"`+sid+`","info":{"id":"`+sid+`","title":"t","directory":"/w"}}`)
}

func (r *loopRig) view() runtime.View {
	r.t.Helper()
	v, err := r.loop.Query(context.Background(), func(v runtime.View) any {
		return runtime.View{Pos: v.Pos, Outstanding: v.Outstanding, Waiting: v.Waiting}
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return v.(runtime.View)
}

func (r *loopRig) waitView(what string, cond func(runtime.View) bool) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond(r.view()) {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s: %+v", what, r.view())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// outbox reads the calls a stopped loop left in its journal.
func outbox(t *testing.T, dir string) []runtime.Call {
	t.Helper()
	store, err := journal.Open(filepath.Join(dir, "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	_, calls, _, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

// hostSwitch answers like a host that can be away (no responder for anything) or there.
type hostSwitch struct {
	mu    sync.Mutex
	away  bool
	calls []runtime.Call // every call, answered or not
}

func (h *hostSwitch) Do(_ context.Context, _ string, c runtime.Call) runtime.Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, c)
	r := runtime.Result{Call: c}
	switch {
	case h.away:
		r.Err = &runtime.HostError{Name: "NoResponderError", Message: "away", NoResponder: true}
	case c.Op == runtime.OpCreate:
		r.Session = &runtime.SessionInfo{ID: "ses_child", ParentID: c.SessionID, Title: c.Title, Directory: "/w"}
	}
	return r
}

func (h *hostSwitch) set(away bool) {
	h.mu.Lock()
	h.away = away
	h.mu.Unlock()
}

// sent returns "op session" of each call made, answered or not, with its key.
func (h *hostSwitch) sent() (ops []string, keys []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.calls {
		ops = append(ops, string(c.Op)+" "+c.SessionID)
		keys = append(keys, c.Key)
	}
	return ops, keys
}

// A call that finds no responder waits (rule 12): counted in Waiting, not outstanding,
// never retried by itself; the host's hello of the same boot sends it again with the same
// key. After a new boot, a waiting reminder is moot and not sent, while a waiting
// deletion goes out; either way the outbox ends empty.
func TestLoopCallsWaitForTheirHost(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the loop stops
	host := &hostSwitch{away: true}
	dir := t.TempDir()
	r := startLoop(t, dir, host)
	r.hello("b1")
	r.created("ses_a")
	r.waitView("the reminder to wait", func(v runtime.View) bool { return v.Waiting == 1 && v.Outstanding == 0 })
	if ops, _ := host.sent(); len(ops) != 1 {
		t.Fatalf("calls %v: a waiting call was retried by itself", ops)
	}

	host.set(false)
	r.hello("b1")
	r.waitView("the reminder to go out again", func(v runtime.View) bool { return v.Waiting == 0 && v.Outstanding == 0 })
	ops, keys := host.sent()
	if len(ops) != 2 || ops[1] != "session.prompt ses_a" || keys[0] != keys[1] || keys[0] == "" {
		t.Fatalf("calls %v keys %v: want the reminder twice with one key", ops, keys)
	}

	// An extraction child, then the host goes away: the child's error asks for its
	// deletion and a new session's reminder; both wait.
	r.deliver("tool_c1", "tool.execute.after", `{"sessionID":"ses_a","callID":"c1","tool":"bash","args":{},"output":"x"}`)
	r.deliver("idle_1", "session.status", `{"sessionID":"ses_a","status":{"type":"idle"}}`)
	r.waitView("the extraction to start", func(v runtime.View) bool {
		ops, _ := host.sent()
		return len(ops) == 4 && v.Outstanding == 0 // create, instruction prompt
	})
	host.set(true)
	r.deliver("err_child", "session.error", `{"sessionID":"ses_child","error":{"name":"APIError","data":{"message":"x"}}}`)
	r.created("ses_b")
	r.waitView("the deletion and the reminder to wait", func(v runtime.View) bool { return v.Waiting == 2 && v.Outstanding == 0 })

	before, _ := host.sent()
	host.set(false)
	r.hello("b2")
	r.waitView("the new boot to empty the waiting room", func(v runtime.View) bool { return v.Waiting == 0 && v.Outstanding == 0 })
	ops, _ = host.sent()
	// The ended child's messages (its cost, rule 14) are not moot; the deletion follows them.
	if got := fmt.Sprint(ops[len(before):]); got != "[messages ses_child session.delete ses_child]" {
		t.Fatalf("calls after the new boot %s: want the child's messages and deletion, and not the moot reminder", got)
	}
	r.stop()
	if calls := outbox(t, dir); len(calls) != 0 {
		t.Fatalf("outbox %v, want empty", calls)
	}
}

// A call on its way while its host says hello, that finds no responder only after the
// hello was applied, cannot wait for that hello: it goes out again at once (same boot),
// or is moot (new boot). Waiting for the next hello would strand it.
func TestLoopNoResponderAfterAHello(t *testing.T) {
	for _, boot := range []string{"b1", "b2"} {
		t.Run("hello "+boot, func(t *testing.T) {
			t.Cleanup(func() { goleak.VerifyNone(t) }) // after the loop stops
			release := make(chan struct{})
			var mu sync.Mutex
			var calls []runtime.Call
			caller := &fakeCaller{do: func(c runtime.Call) runtime.Result {
				mu.Lock()
				calls = append(calls, c)
				first := len(calls) == 1
				mu.Unlock()
				if first {
					<-release // the host was away when this one went out
					return runtime.Result{Call: c, Err: &runtime.HostError{Name: "NoResponderError", NoResponder: true}}
				}
				return runtime.Result{Call: c}
			}}
			r := startLoop(t, t.TempDir(), caller)
			r.hello("b1")
			r.created("ses_a")
			r.waitView("the reminder to be on its way", func(v runtime.View) bool { return v.Outstanding == 1 })
			r.hello(boot)
			r.waitView("the hello to be applied", func(v runtime.View) bool { return v.Pos == 3 })
			close(release)
			r.waitView("the reminder to be done", func(v runtime.View) bool { return v.Outstanding == 0 && v.Waiting == 0 })
			mu.Lock()
			defer mu.Unlock()
			want := 2 // sent again at once
			if boot == "b2" {
				want = 1 // moot after the new boot
			}
			if len(calls) != want || calls[len(calls)-1].Key != calls[0].Key {
				t.Fatalf("after a hello of %s the reminder was sent %d times, want %d with one key", boot, len(calls), want)
			}
		})
	}
}

// A stop gives a call in flight StopGrace, then abandons it: it stays in the outbox and
// the next run performs it with the same idempotency key.
func TestLoopStopAbandonsACallInFlight(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the loop stops
	var mu sync.Mutex
	var first runtime.Call
	inFlight := make(chan struct{})
	stuckDo := func(ctx context.Context, c runtime.Call) runtime.Result {
		mu.Lock()
		first = c
		mu.Unlock()
		close(inFlight)
		<-ctx.Done() // a host that never answers
		return runtime.Result{Call: c, Err: &runtime.HostError{Name: "TimeoutError"}}
	}
	dir := t.TempDir()
	r := startLoop(t, dir, callerFunc(stuckDo))
	r.loop.StopGrace = 200 * time.Millisecond // read by the loop only at the stop
	r.hello("b1")
	r.created("ses_a")
	<-inFlight
	t.Logf("stop with a call in flight took %s (StopGrace 200ms)", r.stop())
	calls := outbox(t, dir)
	if len(calls) != 1 || calls[0].Op != runtime.OpPrompt {
		t.Fatalf("outbox %v, want the abandoned reminder", calls)
	}

	again := &hostSwitch{}
	r2 := startLoop(t, dir, again)
	r2.waitView("the abandoned call to be performed", func(v runtime.View) bool {
		ops, _ := again.sent()
		return len(ops) == 1 && v.Outstanding == 0
	})
	r2.stop()
	_, keys := again.sent()
	mu.Lock()
	defer mu.Unlock()
	if keys[0] != first.Key || first.Key == "" {
		t.Fatalf("the repeat's key %q differs from the first attempt's %q", keys[0], first.Key)
	}
	if calls := outbox(t, dir); len(calls) != 0 {
		t.Fatalf("outbox %v after the repeat, want empty", calls)
	}
}

type callerFunc func(ctx context.Context, c runtime.Call) runtime.Result

func (f callerFunc) Do(ctx context.Context, _ string, c runtime.Call) runtime.Result {
	return f(ctx, c)
}

// A stream deleted and created again counts from 1: its events are not taken for stale
// redeliveries of the old one (rule 12), and the position follows the new stream.
func TestLoopFollowsARecreatedStream(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the loop stops
	creates := 0
	var mu sync.Mutex
	caller := &fakeCaller{do: func(c runtime.Call) runtime.Result {
		r := runtime.Result{Call: c}
		if c.Op == runtime.OpCreate {
			mu.Lock()
			creates++
			mu.Unlock()
			r.Err = &runtime.HostError{Name: "InternalError", Message: "no child today"} // the next idle retries
		}
		return r
	}}
	nCreates := func() int { mu.Lock(); defer mu.Unlock(); return creates }
	r := startLoop(t, t.TempDir(), caller)
	r.hello("b1")
	r.created("ses_a")
	r.deliver("tool_c1", "tool.execute.after", `{"sessionID":"ses_a","callID":"c1","tool":"bash","args":{},"output":"x"}`)
	r.deliver("busy_1", "session.status", `{"sessionID":"ses_a","status":{"type":"busy"}}`)
	r.deliver("idle_1", "session.status", `{"sessionID":"ses_a","status":{"type":"idle"}}`)
	r.waitView("the first extraction's create to fail", func(v runtime.View) bool { return nCreates() == 1 && v.Outstanding == 0 })

	r.stream, r.seq = "s2", 0
	r.deliver("busy_2", "session.status", `{"sessionID":"ses_a","status":{"type":"busy"}}`)
	r.deliver("idle_2", "session.status", `{"sessionID":"ses_a","status":{"type":"idle"}}`)
	r.waitView("the new stream's events to be applied", func(v runtime.View) bool { return v.Pos == 2 && v.Outstanding == 0 })
	if n := nCreates(); n != 2 {
		t.Fatalf("%d creates: the new stream's idle was taken for a stale one", n)
	}
}

// A host that publishes an event after its calls began to wait is connected, hello or
// not (it reconnected to a broker that restarted with thatch): its waiting calls go out
// once more. One that finds no responder again (the host lacks the method) then waits
// for a hello only: the host's next events do not send it again.
func TestLoopHostPublishingSendsItsCallsOnce(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	host := &hostSwitch{away: true}
	r := startLoop(t, t.TempDir(), host)
	sends := func() int { ops, _ := host.sent(); return len(ops) }
	settled := func(pos uint64, waiting int) func(runtime.View) bool {
		return func(v runtime.View) bool { return v.Pos == pos && v.Outstanding == 0 && v.Waiting == waiting }
	}
	r.hello("b1")
	r.created("ses_a")
	r.waitView("the reminder to wait", settled(2, 1))
	if n := sends(); n != 1 {
		t.Fatalf("%d sends, want 1", n)
	}

	// Still away: the host's next event sends it once more, in vain; later events do not.
	r.deliver("busy_1", "session.status", `{"sessionID":"ses_a","status":{"type":"busy"}}`)
	r.waitView("the event", settled(3, 1))
	if n := sends(); n != 2 {
		t.Fatalf("%d sends after the host's event, want 2", n)
	}
	r.deliver("idle_1", "session.status", `{"sessionID":"ses_a","status":{"type":"idle"}}`)
	r.waitView("the next event", settled(4, 1))
	if n := sends(); n != 2 {
		t.Fatalf("%d sends after another event, want still 2", n)
	}

	// A hello sends it again (the host still away), and makes it eligible again.
	r.hello("b1")
	r.waitView("the hello", settled(5, 1))
	if n := sends(); n != 3 {
		t.Fatalf("%d sends after the hello, want 3", n)
	}

	// Back, without a hello: its next event sends the reminder, which it answers.
	host.set(false)
	r.deliver("busy_2", "session.status", `{"sessionID":"ses_a","status":{"type":"busy"}}`)
	r.waitView("the reminder to be answered", settled(6, 0))
	ops, keys := host.sent()
	if len(ops) != 4 || slices.Compact(slices.Clone(keys))[0] != keys[0] || len(slices.Compact(slices.Clone(keys))) != 1 {
		t.Fatalf("calls %v keys %v: want the reminder 4 times with one key", ops, keys)
	}
}
