package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/runtime"
)

// childOf waits for thatch to create an extraction child of parent on the host and
// returns its id.
func (r *rig) childOf(parent string, nth int) string {
	r.t.Helper()
	var id string
	waitFor(r.t, "an extraction child of "+parent, func() bool {
		n := 0
		for _, c := range r.host.CallsTo("session.create") {
			if c.Params["parentID"] == parent && c.Params["title"] == runtime.ExtractionTitle {
				n++
			}
		}
		if n < nth {
			return false
		}
		for sid, s := range r.sessions() {
			if s.ParentID == parent && s.Kind == runtime.KindExtraction {
				id = sid
				return true
			}
		}
		return false
	})
	return id
}

func (r *rig) prompted(session string) {
	r.t.Helper()
	waitFor(r.t, "the instruction prompt to "+session, func() bool {
		for _, c := range r.host.CallsTo("session.prompt") {
			if c.Params["sessionID"] == session && c.Params["noReply"] == nil {
				return true
			}
		}
		return false
	})
}

// extractionOfOneEntry plays a host's hello and a session ses_a with one tool call (c1)
// going idle, and returns the extraction child thatch created and prompted for it.
func (r *rig) extractionOfOneEntry(ctx context.Context) string {
	r.t.Helper()
	must(r.t, r.host.Hello(ctx, "b1"))
	must(r.t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
	must(r.t, r.host.ToolExecuted(ctx, "ses_a", "c1", "bash", "x"))
	must(r.t, r.host.Status(ctx, "ses_a", "idle"))
	child := r.childOf("ses_a", 1)
	r.prompted(child)
	return child
}

func (r *rig) tool(ctx context.Context, name, session string, args any) runtime.Answer {
	r.t.Helper()
	a, herr, err := r.host.Tool(ctx, "thatch", name, session, args)
	if err != nil {
		r.t.Fatal(err)
	}
	if herr != nil {
		r.t.Fatalf("%s for %s: %s", name, session, herr.Error())
	}
	return a
}

func entryIDs(a runtime.Answer) []string {
	var ids []string
	for _, id := range a.Metadata.(map[string]any)["entryIDs"].([]any) {
		ids = append(ids, id.(string))
	}
	return ids
}

// A session goes through a whole extraction over NATS: entries, idle, child created and
// prompted, claim, completion, toast, child deleted. With restart set, thatch is stopped
// and started between every step: claims and flags come back from the journal.
func TestExtractionEndToEnd(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			r := newRig(t, "v1")
			ctx := r.ctx()
			r.start()
			bounce := func() {
				if restart {
					r.stop()
					r.start()
				}
			}
			must(t, r.host.Hello(ctx, "b1"))
			must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
			must(t, r.host.Status(ctx, "ses_a", "busy"))
			for i := range 3 {
				must(t, r.host.ToolExecuted(ctx, "ses_a", fmt.Sprintf("c%d", i), "bash", fmt.Sprintf("output %d", i)))
			}
			bounce()
			must(t, r.host.Status(ctx, "ses_a", "idle"))
			child := r.childOf("ses_a", 1)
			r.prompted(child)
			bounce()
			must(t, r.host.Status(ctx, child, "busy"))
			a := r.tool(ctx, runtime.ToolPayload, child, map[string]any{})
			if got := strings.Join(entryIDs(a), ","); got != "c0,c1,c2" {
				t.Fatalf("claimed %s, want c0,c1,c2", got)
			}
			if !strings.Contains(a.Output, "output 2") {
				t.Fatalf("payload lacks the entries' outputs:\n%s", a.Output)
			}
			bounce()
			for _, e := range r.entries("ses_a") {
				if e.State != "accepted" || e.ClaimedBy != child {
					t.Fatalf("after the claim and a restart, entry %+v is not accepted by %s", e, child)
				}
			}
			if !r.sessions()["ses_a"].Extracting {
				t.Fatal("the parent lost its extracting flag")
			}
			must(t, r.host.ToolExecuted(ctx, child, "m1", "memory_remember", "saved"))
			done := r.tool(ctx, runtime.ToolDone, child, map[string]any{"new": 2, "updated": 1, "deleted": 0})
			if done.Metadata.(map[string]any)["completed"] != float64(3) {
				t.Fatalf("completed %v, want 3", done.Metadata)
			}
			bounce()
			must(t, r.host.Status(ctx, child, "idle"))
			waitFor(t, "the child to be deleted on the host", func() bool { return !r.host.HasSession(child) })
			waitFor(t, "the child to leave the live directory", func() bool { _, ok := r.sessions()[child]; return !ok })
			if got := len(r.entries("ses_a")); got != 0 {
				t.Fatalf("%d entries left, want 0", got)
			}
			if r.sessions()["ses_a"].Extracting {
				t.Fatal("the parent is still flagged extracting")
			}
			toasts := r.host.CallsTo("tui.showToast")
			if len(toasts) != 1 || !strings.Contains(fmt.Sprint(toasts[0].Params["message"]), "2 new, 1 updated") {
				t.Fatalf("toasts %v, want one with the metrics", toasts)
			}
			if n := len(r.host.CallsTo("session.create")); n != 1 {
				t.Fatalf("%d extraction children created, want 1", n)
			}
		})
	}
}

// An extraction child that errors after claiming: its entries go back, thatch deletes
// it, and the parent's next idle extracts them again in a new child.
func TestChildErrorRequeuesAndDeletes(t *testing.T) {
	r := newRig(t, "v1")
	ctx := r.ctx()
	r.start()
	child := r.extractionOfOneEntry(ctx)
	r.tool(ctx, runtime.ToolPayload, child, nil)
	_, err := r.host.Publish(ctx, "session.error", map[string]any{"sessionID": child,
		"error": map[string]any{"name": "APIError", "data": map[string]any{"message": "provider down"}}})
	must(t, err)
	waitFor(t, "the failed child to be deleted", func() bool { return !r.host.HasSession(child) })
	waitFor(t, "its entries to go back", func() bool {
		e := r.entries("ses_a")
		return len(e) == 1 && e[0].State == "pending"
	})
	must(t, r.host.Status(ctx, "ses_a", "busy"))
	must(t, r.host.Status(ctx, "ses_a", "idle"))
	second := r.childOf("ses_a", 2)
	if second == child {
		t.Fatal("the retry reused the failed child")
	}
	r.prompted(second)
	if got := entryIDs(r.tool(ctx, runtime.ToolPayload, second, nil)); len(got) != 1 || got[0] != "c1" {
		t.Fatalf("the retry claimed %v, want [c1]", got)
	}
}

// Deleting a parent (children first, as opencode does) completes its accepted entries,
// drops its pending ones and leaves nothing behind.
func TestParentDeletionCascade(t *testing.T) {
	r := newRig(t, "v1")
	ctx := r.ctx()
	r.start()
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
	must(t, r.host.Created(ctx, "ses_t", "ses_a", "sub-agent", r.host.Dir))
	must(t, r.host.ToolExecuted(ctx, "ses_t", "c1", "bash", "x"))
	must(t, r.host.Status(ctx, "ses_a", "idle"))
	child := r.childOf("ses_a", 1)
	r.prompted(child)
	r.tool(ctx, runtime.ToolPayload, child, nil)
	must(t, r.host.ToolExecuted(ctx, "ses_a", "c2", "bash", "y"))
	for _, id := range []string{child, "ses_t", "ses_a"} {
		_, err := r.host.Publish(ctx, "session.deleted", map[string]any{"sessionID": id,
			"info": map[string]any{"id": id, "title": "t", "directory": r.host.Dir}})
		must(t, err)
	}
	waitFor(t, "every session to be forgotten", func() bool { return len(r.sessions()) == 0 })
	if s := r.status(); s.Pending != 0 || s.Accepted != 0 {
		t.Fatalf("entries left after the parent's deletion: %+v", s)
	}
	var e []runtime.EntryView
	if err := r.tryAPI("entries", map[string]any{"sessionID": "ses_a"}, &e); err == nil || !strings.Contains(err.Error(), "UnknownSessionError") {
		t.Fatalf("entries of a deleted session: %v, %v", e, err)
	}
}

// A tool call right after the event that announces its session is never told the
// session is unknown: thatch answers against every event the stream held at the call.
func TestToolCallSeesEveryPriorEvent(t *testing.T) {
	r := newRig(t, "v1")
	ctx := r.ctx()
	r.start()
	must(t, r.host.Hello(ctx, "b1"))
	for i := range 20 {
		sid := fmt.Sprintf("ses_%d", i)
		must(t, r.host.Created(ctx, sid, "", "t", r.host.Dir))
		must(t, r.host.ToolExecuted(ctx, sid, "c", "bash", "x"))
		a := r.tool(ctx, runtime.ToolPayload, sid, nil)
		if got := entryIDs(a); len(got) != 1 {
			t.Fatalf("%s: claimed %v right after publishing, want its one entry", sid, got)
		}
	}
	_, herr, err := r.host.Tool(ctx, "thatch", runtime.ToolPayload, "ses_unknown", nil)
	if err != nil || herr == nil || herr.Name != "UnknownSessionError" {
		t.Fatalf("unknown caller: %v, %v", herr, err)
	}
	_, herr, err = r.host.Tool(ctx, "thatch", runtime.ToolDone, "ses_0", map[string]any{"new": "x"})
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
	r := newRig(t, "v1", "session.prompt")
	logs := r.captureLog()
	ctx := r.ctx()
	r.start()
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
	must(t, r.host.ToolExecuted(ctx, "ses_a", "c1", "bash", "x"))
	for range 3 {
		must(t, r.host.Status(ctx, "ses_a", "busy"))
		must(t, r.host.Status(ctx, "ses_a", "idle"))
	}
	r.waitApplied(1 + 2 + 3*3)
	waitFor(t, "the create to wait for the host", func() bool { return r.status().WaitingCalls == 1 })
	if s := r.status(); s.OutstandingCalls != 0 {
		t.Fatalf("status %+v: the waiting create still counts as outstanding", s)
	}
	if !r.sessions()["ses_a"].Extracting {
		t.Fatal("ses_a is not extracting while its create waits")
	}
	if e := r.entries("ses_a"); len(e) != 1 || e[0].State != "pending" {
		t.Fatalf("entries %+v, want c1 still pending", e)
	}
	woken := func() int {
		return strings.Count(string(logs.Bytes()), "host is back: sending the calls that waited for it")
	}

	// A hello of the same boot: the create goes out once more, finds no responder, waits.
	must(t, r.host.Hello(ctx, "b1"))
	waitFor(t, "the waiting create to be sent again", func() bool { return woken() == 1 })
	waitFor(t, "the create to wait again", func() bool {
		s := r.status()
		return s.WaitingCalls == 1 && s.OutstandingCalls == 0
	})

	// A new boot: the create is moot. The next idle starts an extraction again, whose
	// create waits in its turn.
	must(t, r.host.Hello(ctx, "b2"))
	waitFor(t, "the moot create to be answered", func() bool {
		s := r.status()
		return woken() == 2 && s.WaitingCalls == 0 && s.OutstandingCalls == 0
	})
	if !strings.Contains(string(logs.Bytes()), "moot_after_restart=1") {
		t.Fatal("the new boot did not answer the waiting create as moot")
	}
	if r.sessions()["ses_a"].Extracting {
		t.Fatal("ses_a still extracting after the host's new boot")
	}
	must(t, r.host.Status(ctx, "ses_a", "busy"))
	must(t, r.host.Status(ctx, "ses_a", "idle"))
	waitFor(t, "the next idle's create to wait", func() bool { return r.status().WaitingCalls == 1 })

	// The session is deleted: its create stops waiting, and the outbox is empty.
	_, err := r.host.Publish(ctx, "session.deleted", map[string]any{"sessionID": "ses_a", "info": map[string]any{"id": "ses_a", "title": "t", "directory": r.host.Dir}})
	must(t, err)
	waitFor(t, "the deleted session's create to stop waiting", func() bool {
		s := r.status()
		return s.WaitingCalls == 0 && s.OutstandingCalls == 0
	})
	r.stop()
	if dump := r.journalDump(); strings.Contains(dump, "outbox ") {
		t.Fatalf("calls left in the outbox:\n%s", dump)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The CLI as a user types it: flags before or after the session, one clear error for a
// missing or unexpected argument.
func TestCLIArguments(t *testing.T) {
	r := newRig(t, "v1", "session.create", "session.prompt", "session.delete")
	r.start()
	defer r.stop()
	r.extractionOfOneEntry(r.ctx())
	for _, args := range [][]string{{"ses_a", "--json"}, {"--json", "ses_a"}} {
		var out strings.Builder
		if err := client(r.ctx(), r.cfg, "entries", args, &out); err != nil {
			t.Fatalf("entries %v: %v", args, err)
		}
		var rows []runtime.EntryView
		if err := json.Unmarshal([]byte(out.String()), &rows); err != nil || len(rows) != 1 || rows[0].ID != "c1" {
			t.Fatalf("entries %v printed %q (%v)", args, out.String(), err)
		}
	}
	for _, c := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"entries", []string{"--json"}, "usage: thatch entries SESSION"},
		{"sessions", []string{"ses_a"}, `thatch sessions takes no arguments, got ["ses_a"]`},
	} {
		if err := client(r.ctx(), r.cfg, c.cmd, c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v, want %q", c.cmd, c.args, err, c.want)
		}
	}
}
