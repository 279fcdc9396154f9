package daemontest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/runtime"
)

// A session goes through a whole extraction over NATS: entries, idle, child created and
// prompted, claim, completion, toast, child deleted. With restart set, thatch is stopped
// and started between every step: claims and flags come back from the journal.
func TestExtractionEndToEnd(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			r := New(t, "v1")
			ctx := r.Ctx()
			r.Start()
			bounce := func() {
				if restart {
					r.Stop()
					r.Start()
				}
			}
			must(t, r.Host.Hello(ctx, "b1"))
			must(t, r.Host.Created(ctx, "ses_a", "", "t", r.Host.Dir))
			must(t, r.Host.Status(ctx, "ses_a", "busy"))
			for i := range 3 {
				must(t, r.Host.ToolExecuted(ctx, "ses_a", fmt.Sprintf("c%d", i), "bash", fmt.Sprintf("output %d", i)))
			}
			bounce()
			must(t, r.Host.Status(ctx, "ses_a", "idle"))
			child := r.ChildOf("ses_a", 1)
			r.Prompted(child)
			bounce()
			must(t, r.Host.Status(ctx, child, "busy"))
			a := r.Tool(ctx, runtime.ToolPayload, child, map[string]any{})
			if got := strings.Join(EntryIDs(a), ","); got != "c0,c1,c2" {
				t.Fatalf("claimed %s, want c0,c1,c2", got)
			}
			if !strings.Contains(a.Output, "output 2") {
				t.Fatalf("payload lacks the entries' outputs:\n%s", a.Output)
			}
			bounce()
			for _, e := range r.Entries("ses_a") {
				if e.State != "accepted" || e.ClaimedBy != child {
					t.Fatalf("after the claim and a restart, entry %+v is not accepted by %s", e, child)
				}
			}
			if !r.Sessions()["ses_a"].Extracting {
				t.Fatal("the parent lost its extracting flag")
			}
			must(t, r.Host.ToolExecuted(ctx, child, "m1", "memory_remember", "saved"))
			done := r.Tool(ctx, runtime.ToolDone, child, map[string]any{"new": 2, "updated": 1, "deleted": 0})
			if done.Metadata.(map[string]any)["completed"] != float64(3) {
				t.Fatalf("completed %v, want 3", done.Metadata)
			}
			bounce()
			must(t, r.Host.Status(ctx, child, "idle"))
			waitFor(t, "the child to be deleted on the host", func() bool { return !r.Host.HasSession(child) })
			waitFor(t, "the child to leave the live directory", func() bool { _, ok := r.Sessions()[child]; return !ok })
			if got := len(r.Entries("ses_a")); got != 0 {
				t.Fatalf("%d entries left, want 0", got)
			}
			if r.Sessions()["ses_a"].Extracting {
				t.Fatal("the parent is still flagged extracting")
			}
			toasts := r.Host.CallsTo("tui.showToast")
			if len(toasts) != 1 || !strings.Contains(fmt.Sprint(toasts[0].Params["message"]), "2 new, 1 updated") {
				t.Fatalf("toasts %v, want one with the metrics", toasts)
			}
			if n := len(r.Host.CallsTo("session.create")); n != 1 {
				t.Fatalf("%d extraction children created, want 1", n)
			}
		})
	}
}

// An extraction child that errors after claiming: its entries go back, thatch deletes
// it, and the parent's next idle extracts them again in a new child.
func TestChildErrorRequeuesAndDeletes(t *testing.T) {
	r := New(t, "v1")
	ctx := r.Ctx()
	r.Start()
	child := r.ExtractionOfOneEntry(ctx)
	r.Tool(ctx, runtime.ToolPayload, child, nil)
	_, err := r.Host.Publish(ctx, "session.error", map[string]any{"sessionID": child,
		"error": map[string]any{"name": "APIError", "data": map[string]any{"message": "provider down"}}})
	must(t, err)
	waitFor(t, "the failed child to be deleted", func() bool { return !r.Host.HasSession(child) })
	waitFor(t, "its entries to go back", func() bool {
		e := r.Entries("ses_a")
		return len(e) == 1 && e[0].State == "pending"
	})
	must(t, r.Host.Status(ctx, "ses_a", "busy"))
	must(t, r.Host.Status(ctx, "ses_a", "idle"))
	second := r.ChildOf("ses_a", 2)
	if second == child {
		t.Fatal("the retry reused the failed child")
	}
	r.Prompted(second)
	if got := EntryIDs(r.Tool(ctx, runtime.ToolPayload, second, nil)); len(got) != 1 || got[0] != "c1" {
		t.Fatalf("the retry claimed %v, want [c1]", got)
	}
}

// Deleting a parent (children first, as opencode does) completes its accepted entries,
// drops its pending ones and leaves nothing behind.
func TestParentDeletionCascade(t *testing.T) {
	r := New(t, "v1")
	ctx := r.Ctx()
	r.Start()
	must(t, r.Host.Hello(ctx, "b1"))
	must(t, r.Host.Created(ctx, "ses_a", "", "t", r.Host.Dir))
	must(t, r.Host.Created(ctx, "ses_t", "ses_a", "sub-agent", r.Host.Dir))
	must(t, r.Host.ToolExecuted(ctx, "ses_t", "c1", "bash", "x"))
	must(t, r.Host.Status(ctx, "ses_a", "idle"))
	child := r.ChildOf("ses_a", 1)
	r.Prompted(child)
	r.Tool(ctx, runtime.ToolPayload, child, nil)
	must(t, r.Host.ToolExecuted(ctx, "ses_a", "c2", "bash", "y"))
	for _, id := range []string{child, "ses_t", "ses_a"} {
		_, err := r.Host.Publish(ctx, "session.deleted", map[string]any{"sessionID": id,
			"info": map[string]any{"id": id, "title": "t", "directory": r.Host.Dir}})
		must(t, err)
	}
	waitFor(t, "every session to be forgotten", func() bool { return len(r.Sessions()) == 0 })
	if s := r.Status(); s.Pending != 0 || s.Accepted != 0 {
		t.Fatalf("entries left after the parent's deletion: %+v", s)
	}
	var e []runtime.EntryView
	if err := r.TryAPI("entries", map[string]any{"sessionID": "ses_a"}, &e); err == nil || !strings.Contains(err.Error(), "UnknownSessionError") {
		t.Fatalf("entries of a deleted session: %v, %v", e, err)
	}
}

// A tool call right after the event that announces its session is never told the
// session is unknown: thatch answers against every event the stream held at the call.
func TestToolCallSeesEveryPriorEvent(t *testing.T) {
	r := New(t, "v1")
	ctx := r.Ctx()
	r.Start()
	must(t, r.Host.Hello(ctx, "b1"))
	for i := range 20 {
		sid := fmt.Sprintf("ses_%d", i)
		must(t, r.Host.Created(ctx, sid, "", "t", r.Host.Dir))
		must(t, r.Host.ToolExecuted(ctx, sid, "c", "bash", "x"))
		a := r.Tool(ctx, runtime.ToolPayload, sid, nil)
		if got := EntryIDs(a); len(got) != 1 {
			t.Fatalf("%s: claimed %v right after publishing, want its one entry", sid, got)
		}
	}
	_, herr, err := r.Host.Tool(ctx, "thatch", runtime.ToolPayload, "ses_unknown", nil)
	if err != nil || herr == nil || herr.Name != "UnknownSessionError" {
		t.Fatalf("unknown caller: %v, %v", herr, err)
	}
	_, herr, err = r.Host.Tool(ctx, "thatch", runtime.ToolDone, "ses_0", map[string]any{"new": "x"})
	if err != nil || herr == nil || herr.Name != "BadRequestError" {
		t.Fatalf("bad args: %v, %v", herr, err)
	}
}

// A host that does not serve session.create (rule 12): the create finds no responder and
// waits in the outbox, counted in status.waitingCalls, with the session still extracting
// and its entry pending; later idles start nothing more (no retry in a loop). Each hello of
// the same boot sends it once more; a new boot answers it as moot (HostRestartedError),
// after which the next idle tries again; the session's deletion ends the wait.
func TestHostWithoutCreate(t *testing.T) {
	r := New(t, "v1", "session.prompt")
	logs := r.CaptureLog()
	ctx := r.Ctx()
	r.Start()
	must(t, r.Host.Hello(ctx, "b1"))
	must(t, r.Host.Created(ctx, "ses_a", "", "t", r.Host.Dir))
	must(t, r.Host.ToolExecuted(ctx, "ses_a", "c1", "bash", "x"))
	for range 3 {
		must(t, r.Host.Status(ctx, "ses_a", "busy"))
		must(t, r.Host.Status(ctx, "ses_a", "idle"))
	}
	r.WaitApplied(1 + 2 + 3*3)
	waitFor(t, "the create to wait for the host", func() bool { return r.Status().WaitingCalls == 1 })
	if s := r.Status(); s.OutstandingCalls != 0 {
		t.Fatalf("status %+v: the waiting create still counts as outstanding", s)
	}
	if !r.Sessions()["ses_a"].Extracting {
		t.Fatal("ses_a is not extracting while its create waits")
	}
	if e := r.Entries("ses_a"); len(e) != 1 || e[0].State != "pending" {
		t.Fatalf("entries %+v, want c1 still pending", e)
	}
	woken := func() int {
		return strings.Count(string(logs.Bytes()), "host is back: sending the calls that waited for it")
	}

	// A hello of the same boot: the create goes out once more, finds no responder, waits.
	must(t, r.Host.Hello(ctx, "b1"))
	waitFor(t, "the waiting create to be sent again", func() bool { return woken() == 1 })
	waitFor(t, "the create to wait again", func() bool {
		s := r.Status()
		return s.WaitingCalls == 1 && s.OutstandingCalls == 0
	})

	// A new boot: the create is moot. The next idle starts an extraction again, whose
	// create waits in its turn.
	must(t, r.Host.Hello(ctx, "b2"))
	waitFor(t, "the moot create to be answered", func() bool {
		s := r.Status()
		return woken() == 2 && s.WaitingCalls == 0 && s.OutstandingCalls == 0
	})
	if !strings.Contains(string(logs.Bytes()), "moot_after_restart=1") {
		t.Fatal("the new boot did not answer the waiting create as moot")
	}
	if r.Sessions()["ses_a"].Extracting {
		t.Fatal("ses_a still extracting after the host's new boot")
	}
	must(t, r.Host.Status(ctx, "ses_a", "busy"))
	must(t, r.Host.Status(ctx, "ses_a", "idle"))
	waitFor(t, "the next idle's create to wait", func() bool { return r.Status().WaitingCalls == 1 })

	// The session is deleted: its create stops waiting, and the outbox is empty.
	_, err := r.Host.Publish(ctx, "session.deleted", map[string]any{"sessionID": "ses_a", "info": map[string]any{"id": "ses_a", "title": "t", "directory": r.Host.Dir}})
	must(t, err)
	waitFor(t, "the deleted session's create to stop waiting", func() bool {
		s := r.Status()
		return s.WaitingCalls == 0 && s.OutstandingCalls == 0
	})
	r.Stop()
	if dump := r.JournalDump(); strings.Contains(dump, "outbox ") {
		t.Fatalf("calls left in the outbox:\n%s", dump)
	}
}
