package runtime_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
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
