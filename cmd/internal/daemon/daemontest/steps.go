package daemontest

import (
	"context"
	"strings"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime"
)

// ChildOf waits for thatch to create the nth extraction child of parent on the host and
// returns the id of the extraction child thatch knows of parent.
func (r *Rig) ChildOf(parent string, nth int) string {
	r.T.Helper()
	var id string
	testkit.WaitFor(r.T, WaitTimeout, "an extraction child of "+parent, func() bool {
		n := 0
		for _, c := range r.Host.CallsTo("session.create") {
			if c.Params["parentID"] == parent && c.Params["title"] == runtime.ExtractionTitle {
				n++
			}
		}
		if n < nth {
			return false
		}
		for sid, s := range r.Sessions() {
			if s.ParentID == parent && s.Kind == runtime.KindExtraction {
				id = sid
				return true
			}
		}
		return false
	})
	return id
}

// Prompted waits for thatch to send session its instruction prompt (one that expects a
// reply, unlike a reminder).
func (r *Rig) Prompted(session string) {
	r.T.Helper()
	testkit.WaitFor(r.T, WaitTimeout, "the instruction prompt to "+session, func() bool {
		for _, c := range r.Host.CallsTo("session.prompt") {
			if c.Params["sessionID"] == session && c.Params["noReply"] == nil {
				return true
			}
		}
		return false
	})
}

// ExtractionOfOneEntry plays a host's hello and a session ses_a with one tool call (c1)
// going idle, and returns the extraction child thatch created and prompted for it.
func (r *Rig) ExtractionOfOneEntry(ctx context.Context) string {
	r.T.Helper()
	h := r.Host
	for _, step := range []func() error{
		func() error { return h.Hello(ctx, "b1") },
		func() error { return h.Created(ctx, "ses_a", "", "t", h.Dir) },
		func() error { return h.ToolExecuted(ctx, "ses_a", "c1", "bash", "x") },
		func() error { return h.Status(ctx, "ses_a", "idle") },
	} {
		if err := step(); err != nil {
			r.T.Fatal(err)
		}
	}
	child := r.ChildOf("ses_a", 1)
	r.Prompted(child)
	return child
}

// Tool calls one of thatch's tools as the host's model does, and fails the test when the
// call fails or thatch answers with an error.
func (r *Rig) Tool(ctx context.Context, name, session string, args any) runtime.Answer {
	r.T.Helper()
	a, herr, err := r.Host.Tool(ctx, "thatch", name, session, args)
	if err != nil {
		r.T.Fatal(err)
	}
	if herr != nil {
		r.T.Fatalf("%s for %s: %s", name, session, herr.Error())
	}
	return a
}

// EntryIDs are the entry ids a tool's answer names in its metadata.
func EntryIDs(a runtime.Answer) []string {
	var ids []string
	for _, id := range a.Metadata.(map[string]any)["entryIDs"].([]any) {
		ids = append(ids, id.(string))
	}
	return ids
}

// PlanOf is a sweep's plan on one line: each action's kind and session.
func PlanOf(res runtime.SweepResult) string {
	var out []string
	for _, a := range res.Actions {
		out = append(out, string(a.Kind)+" "+a.SessionID)
	}
	return strings.Join(out, ", ")
}
