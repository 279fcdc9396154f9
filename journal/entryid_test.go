package journal_test

import (
	"testing"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/scenario"
)

// TestEntryIdentity checks that a parent's and its child's call_1 are two journaled
// entries, also when the child's call arrived before thatch knew it was a child (its entry
// moves to the root under a new id), and that the payload reads both bodies back.
func TestEntryIdentity(t *testing.T) {
	store := open(t)
	st := runtime.NewState()
	step := func(in runtime.Input) *runtime.Effects {
		t.Helper()
		fx := runtime.DefaultRules.Step(st, in, scenario.Epoch)
		if err := store.Commit(&runtime.Batch{Now: scenario.Epoch, State: st, Effects: fx}); err != nil {
			t.Fatal(err)
		}
		return fx
	}
	call := func(id, session, output string) runtime.Event {
		return runtime.Event{ID: id, Type: "tool.execute.after", HostID: "h1", SessionID: session,
			Tool: &runtime.ToolExec{CallID: "call_1", Tool: "bash", Output: output}}
	}
	created := func(id, session, parent string) runtime.Event {
		return runtime.Event{ID: id, Type: "session.created", HostID: "h1", SessionID: session,
			Info: &runtime.SessionInfo{ID: session, ParentID: parent, Title: "t", Directory: "/w"}}
	}
	step(call("e1", "ses_p", "child output")) // ses_p is not known yet: its own root for now
	step(created("e2", "ses_a", ""))
	step(call("e3", "ses_a", "parent output"))
	step(created("e4", "ses_p", "ses_a"))
	step(call("e5", "ses_p", "child output")) // the same call again: still one entry
	fx := step(runtime.ToolCall{Name: runtime.ToolPayload, SessionID: "ses_a"})
	if fx.Reply == nil || fx.Reply.Payload == nil {
		t.Fatalf("no payload reply: %+v", fx.Reply)
	}

	got, err := store.Payload("ses_a", "ses_a")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"call_1": "parent output", "ses_p/call_1": "child output"}
	if len(got) != len(want) {
		t.Fatalf("payload holds %d entries, want %d: %+v", len(got), len(want), got)
	}
	for _, e := range got {
		if want[e.ID] != e.Body.Output {
			t.Errorf("entry %s has output %q, want %q", e.ID, e.Body.Output, want[e.ID])
		}
	}
	loaded, _, _, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	if p := loaded.Sessions["ses_p"]; p == nil || len(p.Entries) != 0 {
		t.Errorf("the child keeps entries after the move: %+v", p)
	}
}
