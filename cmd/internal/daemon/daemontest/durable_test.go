package daemontest

import (
	"fmt"
	"strings"
	"testing"
)

// Events published while thatch is down are applied when it comes back.
func TestEventsPublishedWhileStoppedAreApplied(t *testing.T) {
	r := New(t, "v1")
	ctx := r.Ctx()
	r.Start() // creates the stream and the durable consumer
	r.Stop()

	must(t, r.Host.Hello(ctx, "b1"))
	must(t, r.Host.Created(ctx, "ses_a", "", "t", t.TempDir()))
	for i := range 3 {
		must(t, r.Host.ToolExecuted(ctx, "ses_a", fmt.Sprintf("c%d", i), "bash", "ok"))
	}
	r.Start()
	r.WaitApplied(5)
	if got := len(r.Entries("ses_a")); got != 3 {
		t.Fatalf("ses_a has %d entries, want 3", got)
	}
	// The reminder for the session created while thatch was down was sent on return (the
	// call goes out after the commit).
	r.ReminderTo("ses_a")
	if got := len(r.Host.CallsTo("session.prompt")); got != 1 {
		t.Fatalf("sent %d reminders, want 1", got)
	}
}

// The same event id published twice, under two Nats-Msg-Ids, is applied once.
func TestDuplicateEventIDIsAppliedOnce(t *testing.T) {
	r := New(t, "v1")
	ctx := r.Ctx()
	r.Start()
	must(t, r.Host.Hello(ctx, "b1"))
	must(t, r.Host.Created(ctx, "ses_a", "", "t", r.Host.Dir))
	body := []byte(`{"id":"evt_dup","type":"tool.execute.after","properties":{"sessionID":"ses_a","callID":"c1","tool":"bash","args":{},"output":"x"}}`)
	body2 := []byte(`{"id":"evt_dup","type":"tool.execute.after","properties":{"sessionID":"ses_a","callID":"c2","tool":"bash","args":{},"output":"y"}}`)
	for i, b := range [][]byte{body, body2} {
		must(t, r.Host.PublishRaw(ctx, "tool.execute.after", b, fmt.Sprintf("msg-%d", i), 0))
	}
	if _, err := r.Host.Publish(ctx, "session.compacted", map[string]any{"sessionID": "ses_a"}); err != nil {
		t.Fatal(err)
	}
	r.WaitApplied(4)
	if e := r.Entries("ses_a"); len(e) != 1 || e[0].ID != "c1" {
		t.Fatalf("entries %+v, want only c1 (the second publish of evt_dup must be skipped)", e)
	}
	// And across a restart: the applied id is journaled.
	r.Stop()
	must(t, r.Host.PublishRaw(ctx, "tool.execute.after", body2, "msg-3", 0))
	if _, err := r.Host.Publish(ctx, "session.compacted", map[string]any{"sessionID": "ses_a"}); err != nil {
		t.Fatal(err)
	}
	r.Start()
	r.WaitApplied(5)
	if e := r.Entries("ses_a"); len(e) != 1 {
		t.Fatalf("entries %+v after restart, want only c1", e)
	}
}

// A restart in the middle of a stream loses nothing and applies nothing twice: the
// journal ends as it would after an uninterrupted run.
func TestRestartMidStream(t *testing.T) {
	play := func(r *Rig, restarts bool) {
		ctx := r.Ctx()
		r.Start()
		must(t, r.Host.Hello(ctx, "b1"))
		for s := range 20 {
			sid := fmt.Sprintf("ses_%02d", s)
			must(t, r.Host.Created(ctx, sid, "", "t", r.Host.Dir))
			for c := range 10 {
				must(t, r.Host.ToolExecuted(ctx, sid, fmt.Sprintf("%s_c%d", sid, c), "bash", strings.Repeat("o", 100)))
			}
			if restarts && s%5 == 2 {
				r.Stop()
				r.Start()
			}
		}
		r.WaitApplied(1 + 20*11)
		waitFor(t, "every host call to be answered", func() bool { return r.Status().OutstandingCalls == 0 })
		r.Stop()
	}
	// Without session.create the idle-free workload's journal depends on the events alone.
	a := New(t, "v1", "session.prompt")
	play(a, false)
	b := New(t, "v1", "session.prompt")
	play(b, true)
	da, db := a.JournalDump(), b.JournalDump()
	if strings.Contains(da, "outbox") || strings.Contains(db, "outbox") {
		t.Fatalf("host calls left in the outbox after every call was answered:\n%s\n%s", da, db)
	}
	if da != db {
		t.Fatalf("journal after restarts differs from an uninterrupted run:\n--- uninterrupted\n%s\n--- restarted\n%s", da, db)
	}
	if got := len(b.Host.CallsTo("session.prompt")); got != 20 {
		t.Fatalf("sent %d reminders across restarts, want 20 (one per session)", got)
	}
}

// A consumer deleted under thatch is recreated by itself; no event is lost or applied twice.
func TestConsumerDeletedIsRecreated(t *testing.T) {
	r := New(t, "v1", "session.prompt")
	ctx := r.Ctx()
	r.Start()
	must(t, r.Host.Hello(ctx, "b1"))
	must(t, r.Host.Created(ctx, "ses_a", "", "t", r.Host.Dir))
	r.WaitApplied(2)
	stream, err := r.Host.JS.Stream(ctx, "OPENCODE_EVENTS")
	must(t, err)
	must(t, stream.DeleteConsumer(ctx, "thatch"))
	for i := range 5 {
		must(t, r.Host.ToolExecuted(ctx, "ses_a", fmt.Sprintf("c%d", i), "bash", "x"))
	}
	r.WaitApplied(7)
	if got := len(r.Entries("ses_a")); got != 5 {
		t.Fatalf("%d entries after the consumer was recreated, want 5", got)
	}
	if _, err := stream.Consumer(ctx, "thatch"); err != nil {
		t.Fatalf("the durable consumer was not recreated: %v", err)
	}
}
