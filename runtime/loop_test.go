package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/thatch-dev/thatch/internal/testkit"
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
	testkit.WaitFor(t, 10*time.Second, "the reminder, the create and the instruction prompt", func() error {
		if ops := fmt.Sprint(caller.ops()); ops != "[session.prompt session.create session.prompt]" {
			return fmt.Errorf("calls %s", ops)
		}
		return nil
	})
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
	return startLoopTuned(t, dir, c, nil)
}

// startLoopTuned is startLoop with the loop's fields set by tune, when not nil, before it
// runs.
func startLoopTuned(t *testing.T, dir string, c runtime.Caller, tune func(*runtime.Loop)) *loopRig {
	t.Helper()
	store, err := journal.Open(filepath.Join(dir, "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	r := &loopRig{t: t, dir: dir, store: store, done: make(chan error, 1), stream: "s1"}
	r.loop = runtime.NewLoop(store, c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if tune != nil {
		tune(r.loop)
	}
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
	testkit.WaitFor(r.t, 10*time.Second, what, func() error {
		if v := r.view(); !cond(v) {
			return fmt.Errorf("%+v", v)
		}
		return nil
	})
}

// outbox reads the calls a stopped loop left in its journal.
func outbox(t *testing.T, dir string) []runtime.Call {
	t.Helper()
	_, calls := reload(t, dir)
	return calls
}

// reload loads the journal a stopped loop left in dir: its state and its outbox.
func reload(t *testing.T, dir string) (*runtime.State, []runtime.Call) {
	t.Helper()
	store, err := journal.Open(filepath.Join(dir, "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	st, calls, _, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	return st, calls
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
// key. After a new boot, a waiting extraction create is moot and not sent, while a
// waiting deletion and a waiting reminder (a no-reply prompt: nothing else would send it)
// go out; either way the outbox ends empty.
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
	// messages (then its deletion), a new session's reminder, and ses_a's next idle an
	// extraction child; all wait.
	r.deliver("tool_c1", "tool.execute.after", `{"sessionID":"ses_a","callID":"c1","tool":"bash","args":{},"output":"x"}`)
	r.deliver("idle_1", "session.status", `{"sessionID":"ses_a","status":{"type":"idle"}}`)
	r.waitView("the extraction to start", func(v runtime.View) bool {
		ops, _ := host.sent()
		return len(ops) == 4 && v.Outstanding == 0 // create, instruction prompt
	})
	host.set(true)
	r.deliver("err_child", "session.error", `{"sessionID":"ses_child","error":{"name":"APIError","data":{"message":"x"}}}`)
	r.created("ses_b")
	r.deliver("tool_c2", "tool.execute.after", `{"sessionID":"ses_a","callID":"c2","tool":"bash","args":{},"output":"y"}`)
	r.deliver("busy_2", "session.status", `{"sessionID":"ses_a","status":{"type":"busy"}}`)
	r.deliver("idle_2", "session.status", `{"sessionID":"ses_a","status":{"type":"idle"}}`)
	r.waitView("the messages, the reminder and the create to wait", func(v runtime.View) bool { return v.Waiting == 3 && v.Outstanding == 0 })
	if ops, _ := host.sent(); !slices.Contains(ops, "session.create ses_a") {
		t.Fatalf("calls %v: no extraction create waits", ops)
	}

	before, _ := host.sent()
	host.set(false)
	r.hello("b2")
	r.waitView("the new boot to empty the waiting room", func(v runtime.View) bool { return v.Waiting == 0 && v.Outstanding == 0 })
	ops, _ = host.sent()
	// The ended child's messages (its cost, rule 14) are not moot; the deletion follows
	// them. The create is moot: rule 7 ended ses_a's extraction.
	after := ops[len(before):]
	if got := fmt.Sprint(after); len(after) != 3 || !slices.Contains(after, "session.prompt ses_b") ||
		!slices.Contains(after, "messages ses_child") || after[2] != "session.delete ses_child" {
		t.Fatalf("calls after the new boot %s: want the reminder, the child's messages then its deletion, and not the moot create", got)
	}
	r.stop()
	if calls := outbox(t, dir); len(calls) != 0 {
		t.Fatalf("outbox %v, want empty", calls)
	}
}

// A call on its way while its host says hello, that finds no responder only after the
// hello was applied, cannot wait for that hello: it goes out again at once (same boot),
// or, unless it still makes sense after a restart (a reminder), is moot (new boot).
// Waiting for the next hello would strand it.
func TestLoopNoResponderAfterAHello(t *testing.T) {
	for _, tc := range []struct {
		call, boot string
		want       int // times the call is sent
	}{
		{"reminder", "b1", 2}, // sent again at once
		{"reminder", "b2", 2}, // a reminder is not moot
		{"create", "b2", 1},   // moot after the new boot
	} {
		t.Run(tc.call+" hello "+tc.boot, func(t *testing.T) {
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
			if tc.call == "reminder" {
				r.hello("b1")
				r.created("ses_a")
			} else {
				// A host that takes the session-start text itself gets no reminder: the
				// first call is the extraction's create.
				r.deliver("hello_b1", "host.hello", `{"hostID":"h1","api":"v1","version":"x","bootID":"b1","directory":"/w","worktree":"/w","capabilities":{"context":true},"resumed":[]}`)
				r.created("ses_a")
				r.deliver("tool_c1", "tool.execute.after", `{"sessionID":"ses_a","callID":"c1","tool":"bash","args":{},"output":"x"}`)
				r.deliver("idle_1", "session.status", `{"sessionID":"ses_a","status":{"type":"idle"}}`)
			}
			r.waitView("the "+tc.call+" to be on its way", func(v runtime.View) bool { return v.Outstanding == 1 })
			r.hello(tc.boot)
			pos := r.seq
			r.waitView("the hello to be applied", func(v runtime.View) bool { return v.Pos == pos })
			close(release)
			r.waitView("the "+tc.call+" to be done", func(v runtime.View) bool { return v.Outstanding == 0 && v.Waiting == 0 })
			mu.Lock()
			defer mu.Unlock()
			if calls[0].Op != map[string]runtime.Op{"reminder": runtime.OpPrompt, "create": runtime.OpCreate}[tc.call] {
				t.Fatalf("the first call is %s, want the %s", calls[0].Op, tc.call)
			}
			if len(calls) != tc.want || calls[len(calls)-1].Key != calls[0].Key {
				t.Fatalf("after a hello of %s the %s was sent %d times, want %d with one key", tc.boot, tc.call, len(calls), tc.want)
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
	// The create goes out after the idle's commit: wait for it, not for the commit alone. A
	// new stream's idle taken for a stale one never creates, and the wait fails.
	r.waitView("the new stream's idle applied and its extraction created (not taken for a stale one)", func(v runtime.View) bool {
		return v.Pos == 2 && v.Outstanding == 0 && nCreates() == 2
	})
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

// deliverAs hands the loop one event of host at the next stream sequence.
func (r *loopRig) deliverAs(host, id, typ, props string) {
	r.seq++
	body := fmt.Sprintf(`{"id":%q,"type":%q,"properties":%s}`, id, typ, props)
	r.loop.Deliveries() <- runtime.Delivery{Subject: "opencode." + host + ".event." + typ, Data: []byte(body), StreamSeq: r.seq, Stream: r.stream,
		Published: time.Now(), Ack: func() error { return nil }, Nak: func() error { return nil }}
}

// bigTool is the properties of a tool.execute.after of sid whose output, metadata and a
// nested argument are large: about output+meta+100,000 bytes.
func bigTool(sid, call string, output, meta int) string {
	m := map[string]string{}
	for i := 0; meta > 0; i++ {
		s := strings.Repeat(string(rune('a'+i%26)), min(meta, 1500))
		m[fmt.Sprintf("field_%04d", i)] = s
		meta -= len(s) + 16
	}
	props, _ := json.Marshal(map[string]any{"sessionID": sid, "callID": call, "tool": "multiedit",
		"args":   map[string]any{"filePath": "/w/" + call + ".go", "edits": []any{map[string]any{"oldString": strings.Repeat("n", 100_000)}}},
		"output": strings.Repeat("build output line\n", output/18), "metadata": m})
	return string(props)
}

// countingJournal counts the payload reads in progress, and checks each reads a claim
// that is committed: the loop hands the rendering off only after the commit.
type countingJournal struct {
	*journal.Store
	mu            sync.Mutex
	now, most     int
	reads         int
	uncommitted   int
	renderStarted chan struct{} // closed at the first read
	once          sync.Once
}

func (j *countingJournal) PayloadEntries(root, claimant string) ([]runtime.PayloadEntry, error) {
	j.once.Do(func() { close(j.renderStarted) })
	j.mu.Lock()
	j.now++
	j.reads++
	j.most = max(j.most, j.now)
	j.mu.Unlock()
	defer func() { j.mu.Lock(); j.now--; j.mu.Unlock() }()
	out, err := j.Store.PayloadEntries(root, claimant)
	if err == nil && len(out) == 0 {
		j.mu.Lock()
		j.uncommitted++
		j.mu.Unlock()
	}
	return out, err
}

// statusProbe reads the loop's snapshot, as the status method does, every few
// milliseconds until stop is closed; it counts the reads, those that found no snapshot,
// and the slowest.
func statusProbe(l *runtime.Loop, stop <-chan struct{}) (reads, missed int, worst time.Duration) {
	for {
		select {
		case <-stop:
			return reads, missed, worst
		case <-time.After(2 * time.Millisecond):
		}
		began := time.Now()
		snap := l.Snapshot()
		worst = max(worst, time.Since(began))
		reads++
		if snap == nil || snap.Status.Version == "" {
			missed++
		}
	}
}

// loopLatency asks the loop an empty query every few milliseconds until stop is closed,
// and returns the slowest answer: how long a status computed on the loop would wait.
func loopLatency(l *runtime.Loop, stop <-chan struct{}) (worst time.Duration) {
	for {
		select {
		case <-stop:
			return worst
		case <-time.After(5 * time.Millisecond):
		}
		began := time.Now()
		if _, err := l.Query(context.Background(), func(runtime.View) any { return nil }); err != nil {
			return worst
		}
		worst = max(worst, time.Since(began))
	}
}

// 1,000 concurrent payload calls, on entries whose events carried megabytes of output,
// metadata and nested arguments, all complete; the payloads are read and rendered off the
// loop, after the claim's commit, at most RenderMax at once, without the metadata; and
// the status snapshot answers throughout, while the events are applied too.
func TestLoopPayloadsUnderLoad(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const sessions, perSession, calls = 10, 2, 1000
	dir := t.TempDir()
	var j *countingJournal
	r := startLoopTuned(t, dir, &hostSwitch{}, func(l *runtime.Loop) {
		j = &countingJournal{Store: l.Journal.(*journal.Store), renderStarted: make(chan struct{})}
		l.Journal = j
	})
	stopStatus, stopLoop := make(chan struct{}), make(chan struct{})
	type probe struct {
		reads, missed int
		worst         time.Duration
	}
	probed, queried := make(chan probe, 1), make(chan time.Duration, 1)
	stopProbes := sync.OnceFunc(func() { close(stopStatus) })
	defer stopProbes()
	go func() { n, m, w := statusProbe(r.loop, stopStatus); probed <- probe{n, m, w} }()
	go func() { queried <- loopLatency(r.loop, stopLoop) }()

	r.hello("b1")
	began := time.Now()
	for s := range sessions {
		sid := fmt.Sprintf("ses_%03d", s)
		r.created(sid)
		for e := range perSession {
			r.deliver(fmt.Sprintf("tool_%s_%d", sid, e), "tool.execute.after", bigTool(sid, fmt.Sprintf("c%d", e), 200_000, 600_000))
		}
	}
	want := uint64(1 + sessions*(1+perSession))
	r.waitView("the events to be applied", func(v runtime.View) bool { return v.Pos == want })
	close(stopLoop)
	ingestWorst := <-queried
	t.Logf("%d events of about 900 KB applied in %s; the loop took up to %s to answer a query meanwhile (status reads its snapshot instead)",
		sessions*perSession, time.Since(began).Round(time.Millisecond), ingestWorst.Round(time.Millisecond))

	stopLoop = make(chan struct{})
	go func() { queried <- loopLatency(r.loop, stopLoop) }()
	began = time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for i := range calls {
		wg.Go(func() {
			sid := fmt.Sprintf("ses_%03d", i%sessions)
			a := r.loop.Tool(context.Background(), runtime.ToolCall{Name: runtime.ToolPayload, SessionID: sid, Args: json.RawMessage(`{}`)}, 0)
			bad := ""
			switch {
			case a.Err != nil:
				bad = a.Err.Message
			case a.Payload == nil || len(a.Payload.Entries) != perSession:
				bad = fmt.Sprintf("payload %+v", a.Payload)
			case !strings.Contains(a.Output, sid+" to extract") || !strings.Contains(a.Output, fmt.Sprintf("(c%d)", perSession-1)) || strings.Contains(a.Output, strings.Repeat("n", 200)):
				bad = "output " + a.Output[:min(len(a.Output), 300)]
			case a.Payload.Entries[0].Body.Metadata != nil:
				bad = "the metadata was read"
			}
			if bad != "" {
				mu.Lock()
				failures = append(failures, sid+": "+bad)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(began)
	close(stopLoop)
	stopProbes()
	payloadWorst, st := <-queried, <-probed
	if len(failures) > 0 {
		t.Fatalf("%d of %d payload calls failed, the first: %s", len(failures), calls, failures[0])
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.most > runtime.DefaultRenderMax || j.uncommitted > 0 || j.reads != calls {
		t.Fatalf("%d payload reads, at most %d at once (RenderMax %d), %d found no committed claim", j.reads, j.most, runtime.DefaultRenderMax, j.uncommitted)
	}
	if st.missed > 0 {
		t.Fatalf("%d of %d status reads found no snapshot", st.missed, st.reads)
	}
	t.Logf("%d concurrent payload calls answered in %s, at most %d read at once; the loop took up to %s to answer a query meanwhile; "+
		"%d status snapshot reads throughout, the slowest %s", calls, took.Round(time.Millisecond), j.most,
		payloadWorst.Round(time.Millisecond), st.reads, st.worst)
}

// A host's call worker exits once idle and comes back with the host's next call: 2,000
// hosts saying hello and each getting a call leave no goroutine behind (10,000 hosts over
// NATS: TestLoadHellosLeaveNoWorkers in cmd/thatch).
func TestLoopIdleWorkersExit(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const hosts = 2_000
	host := &hostSwitch{}
	r := startLoopTuned(t, t.TempDir(), host, func(l *runtime.Loop) { l.WorkerIdle = 50 * time.Millisecond })
	baseline := goruntime.NumGoroutine()
	peak := make(chan int, 1)
	stop := make(chan struct{})
	stopSampling := sync.OnceFunc(func() { close(stop) })
	defer stopSampling()
	go func() {
		most := 0
		for {
			most = max(most, goruntime.NumGoroutine())
			select {
			case <-stop:
				peak <- most
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	began := time.Now()
	for i := range hosts {
		h, sid := fmt.Sprintf("h%05d", i), fmt.Sprintf("ses_%05d", i)
		r.deliverAs(h, "hello_"+h, "host.hello", `{"hostID":"`+h+`","api":"v1","version":"x","bootID":"b1","directory":"/w","worktree":"/w","capabilities":{},"resumed":[]}`)
		r.deliverAs(h, "created_"+sid, "session.created", `{"sessionID":"`+sid+`","info":{"id":"`+sid+`","title":"t","directory":"/w"}}`)
	}
	r.waitView("every host's reminder to be answered", func(v runtime.View) bool { return v.Pos == 2*hosts && v.Outstanding == 0 })
	if ops, _ := host.sent(); len(ops) != hosts {
		t.Fatalf("%d calls, want %d reminders", len(ops), hosts)
	}
	answered := time.Since(began)
	testkit.WaitFor(t, 20*time.Second, "the idle workers to exit", func() error {
		if n := goruntime.NumGoroutine(); n > baseline+5 {
			return fmt.Errorf("%d goroutines %s after the calls, baseline %d", n, time.Since(began), baseline)
		}
		return nil
	})
	stopSampling()
	t.Logf("%d hosts' hellos and reminders applied and answered in %s; goroutines: %d before, %d at most, %d after (%s after the last answer)",
		hosts, answered.Round(time.Millisecond), baseline, <-peak, goruntime.NumGoroutine(), (time.Since(began) - answered).Round(time.Millisecond))

	// A host whose worker exited gets a new one for its next calls, in order.
	for i := range 3 {
		sid := fmt.Sprintf("ses_again_%d", i)
		r.deliverAs("h00007", "created_"+sid, "session.created", `{"sessionID":"`+sid+`","info":{"id":"`+sid+`","title":"t","directory":"/w"}}`)
	}
	r.waitView("the host's next calls", func(v runtime.View) bool { return v.Pos == 2*hosts+3 && v.Outstanding == 0 })
	ops, _ := host.sent()
	if got := fmt.Sprint(ops[hosts:]); got != "[session.prompt ses_again_0 session.prompt ses_again_1 session.prompt ses_again_2]" {
		t.Fatalf("calls after the workers exited: %s", got)
	}
}

// Workers that exit as soon as their queue drains still perform each host's calls one at
// a time in the order they were committed, and the waiting room works as before.
func TestLoopWorkersKeepOrderWhileExiting(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	var mu sync.Mutex
	seen := map[string][]int64{}
	busy := map[string]bool{}
	overlap := 0
	caller := callerFunc(func(_ context.Context, c runtime.Call) runtime.Result {
		mu.Lock()
		if busy[c.Host] {
			overlap++
		}
		busy[c.Host] = true
		seen[c.Host] = append(seen[c.Host], c.ID)
		mu.Unlock()
		time.Sleep(time.Duration(c.ID%3) * 100 * time.Microsecond)
		mu.Lock()
		busy[c.Host] = false
		mu.Unlock()
		return runtime.Result{Call: c}
	})
	r := startLoopTuned(t, t.TempDir(), caller, func(l *runtime.Loop) { l.WorkerIdle = time.Nanosecond })
	const hosts, perHost = 4, 150
	for i := range hosts {
		h := fmt.Sprintf("h%d", i)
		r.deliverAs(h, "hello_"+h, "host.hello", `{"hostID":"`+h+`","api":"v1","version":"x","bootID":"b1","directory":"/w","worktree":"/w","capabilities":{},"resumed":[]}`)
	}
	for n := range perHost {
		for i := range hosts {
			h, sid := fmt.Sprintf("h%d", i), fmt.Sprintf("ses_%d_%d", i, n)
			r.deliverAs(h, "created_"+sid, "session.created", `{"sessionID":"`+sid+`","info":{"id":"`+sid+`","title":"t","directory":"/w"}}`)
		}
		if n%10 == 0 {
			time.Sleep(time.Millisecond) // let some queues drain and their workers exit
		}
	}
	r.waitView("every call to be answered", func(v runtime.View) bool { return v.Pos == hosts*(perHost+1) && v.Outstanding == 0 })
	mu.Lock()
	defer mu.Unlock()
	if overlap > 0 {
		t.Fatalf("%d calls of a host were performed while another of its calls was", overlap)
	}
	for h, ids := range seen {
		if len(ids) != perHost || !slices.IsSorted(ids) {
			t.Fatalf("host %s: %d calls in the order %v, want %d in outbox order", h, len(ids), ids, perHost)
		}
	}
}

// A waiting call whose session is deleted in the same round as its host's hello is
// answered once (NotFoundError) and never sent: the hello wakes only what still waits.
func TestLoopGoneAndHelloInOneRound(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the loop stops
	host := &hostSwitch{away: true}
	dir := t.TempDir()
	r := startLoop(t, dir, host)
	r.hello("b1")
	r.created("ses_a")
	r.waitView("the reminder to wait", func(v runtime.View) bool { return v.Waiting == 1 && v.Outstanding == 0 })
	host.set(false)

	// Hold the loop while both events queue, so that one round takes them together.
	gate, held := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = r.loop.Query(context.Background(), func(runtime.View) any { close(held); <-gate; return nil })
	}()
	<-held
	r.hello("b1")
	r.deliver("deleted_ses_a", "session.deleted", `{"sessionID":"ses_a","info":{"id":"ses_a","title":"t","directory":"/w"}}`)
	testkit.WaitFor(t, 10*time.Second, "the decoder to hand both events to the held loop", func() error {
		if n := r.loop.DecodedWaiting(); n < 2 {
			return fmt.Errorf("%d handed", n)
		}
		return nil
	})
	close(gate)
	r.waitView("the round to apply both", func(v runtime.View) bool { return v.Pos == r.seq })
	if v := r.view(); v.Waiting != 0 || v.Outstanding != 0 {
		t.Fatalf("after the hello and the deletion: %d waiting, %d outstanding; want none", v.Waiting, v.Outstanding)
	}
	if ops, _ := host.sent(); len(ops) != 1 {
		t.Fatalf("calls %v: the reminder of a deleted session was sent again", ops)
	}
	// The count stays right: a new waiting call counts one.
	host.set(true)
	r.created("ses_b")
	r.waitView("ses_b's reminder to wait", func(v runtime.View) bool { return v.Waiting == 1 && v.Outstanding == 0 })
	r.stop()
	if calls := outbox(t, dir); len(calls) != 1 {
		t.Fatalf("outbox %v, want ses_b's reminder only", calls)
	}
}

// commitCounting is a journal that counts the batches committed to it.
type commitCounting struct {
	*journal.Store
	mu      sync.Mutex
	commits int
}

func (j *commitCounting) Commit(b *runtime.Batch) error {
	j.mu.Lock()
	j.commits++
	j.mu.Unlock()
	return j.Store.Commit(b)
}

func (j *commitCounting) count() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.commits
}

// A payload asked for again in the minute of the caller's last touch changes nothing and
// commits nothing; in a new minute the caller's Touched is written, and what the journal
// reloads is at most that minute behind.
func TestLoopPayloadAskedAgainCommitsNothing(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	now := time.Date(2026, 12, 2, 10, 0, 5, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	var j *commitCounting
	r := startLoopTuned(t, dir, &hostSwitch{}, func(l *runtime.Loop) {
		j = &commitCounting{Store: l.Journal.(*journal.Store)}
		l.Journal, l.Now = j, clock
	})
	r.hello("b1")
	r.created("ses_a")
	r.deliver("tool_c1", "tool.execute.after", `{"sessionID":"ses_a","callID":"c1","tool":"bash","args":{},"output":"x"}`)
	// Applied, and the session-start reminder answered: its answer is a commit of its own,
	// which a loaded machine could otherwise make land among the payloads below.
	r.waitView("the events to be applied and the reminder answered", func(v runtime.View) bool { return v.Pos == 3 && v.Outstanding == 0 })
	payload := func() runtime.Answer {
		t.Helper()
		a := r.loop.Tool(context.Background(), runtime.ToolCall{Name: runtime.ToolPayload, SessionID: "ses_a", Args: json.RawMessage(`{}`)}, 0)
		if a.Err != nil || a.Payload == nil || len(a.Payload.Entries) != 1 || a.Payload.Entries[0].ID == "" {
			t.Fatalf("payload: %+v", a)
		}
		return a
	}
	first := payload() // claims c1: committed
	r.waitView("no host call outstanding", func(v runtime.View) bool { return v.Outstanding == 0 })
	claimed := j.count()
	advance(20 * time.Second)
	for range 3 {
		if again := payload(); again.Output != first.Output {
			t.Fatalf("the payload asked again changed:\n%s\nwant\n%s", again.Output, first.Output)
		}
	}
	if n := j.count(); n != claimed {
		t.Fatalf("%d commits for three payloads asked again in the same minute, want none", n-claimed)
	}
	advance(time.Minute) // 10:01:25
	payload()
	if n := j.count(); n != claimed+1 {
		t.Fatalf("%d commits for a payload asked again in a new minute, want 1 (the caller's Touched)", n-claimed)
	}
	r.stop()
	st, _ := reload(t, dir)
	if got := st.Sessions["ses_a"].Touched; !got.Equal(now) {
		t.Fatalf("the journal reloads Touched %s, want %s", got, now)
	}
}
