package daemontest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/adapters/fakehost"
)

// The wrap-up commands end to end against a fake v1 and a fake v2 host: the adapter
// chosen by host.hello reads the messages and compacts, closes and toasts the host's way.
func TestWrapUpV1AndV2(t *testing.T) {
	want := map[string]struct{ read, compact, close, toast string }{
		"v1": {"session.messages", "tui.executeCommand", "tui.publish", "tui.showToast"},
		"v2": {"session.context", "session.compact", "bridge.emit", "bridge.emit"},
	}
	for _, api := range []string{"v1", "v2"} {
		t.Run(api, func(t *testing.T) {
			w := want[api]
			r := New(t, api)
			ctx := r.Ctx()
			r.Start()
			must(t, r.Host.Hello(ctx, "b1"))
			must(t, r.Host.Created(ctx, "ses_a", "", "t", r.Host.Dir))
			must(t, r.Host.Status(ctx, "ses_a", "busy"))
			must(t, r.Host.ToolExecuted(ctx, "ses_a", "c1", "bash", "x"))

			// compact, greenlit
			_, err := r.Host.Publish(ctx, "command.execute.before", map[string]any{"command": "thatch/compact", "sessionID": "ses_a", "arguments": ""})
			must(t, err)
			r.Host.SetReply("ses_a", "flushed.\nTHATCH_COMPACT_READY")
			must(t, r.Host.Status(ctx, "ses_a", "idle"))
			waitFor(t, "the compaction", func() bool { return len(r.Host.CallsTo(w.compact)) == 1 })
			if c := r.Host.CallsTo(w.compact)[0]; api == "v1" && c.Params["command"] != "session_compact" || api == "v2" && c.Params["sessionID"] != "ses_a" {
				t.Fatalf("compact call %v", c.Params)
			}
			if len(r.Host.CallsTo(w.read)) != 1 || !r.Sessions()["ses_a"].Compacting {
				t.Fatalf("want one %s and the session compacting", w.read)
			}
			if n := len(r.Host.CallsTo("session.create")); n != 0 {
				t.Fatalf("an extraction (%d creates) raced the compaction", n)
			}
			_, err = r.Host.Publish(ctx, "session.compacted", map[string]any{"sessionID": "ses_a"})
			must(t, err)
			waitFor(t, "compacting to clear", func() bool { return !r.Sessions()["ses_a"].Compacting })

			// exit, token absent: a warning toast, then the idle extracts as usual
			must(t, r.Host.Status(ctx, "ses_a", "busy"))
			_, err = r.Host.Publish(ctx, "command.execute.before", map[string]any{"command": "thatch/exit", "sessionID": "ses_a", "arguments": "bye"})
			must(t, err)
			r.Host.SetReply("ses_a", "cannot exit: tests fail")
			must(t, r.Host.Status(ctx, "ses_a", "idle"))
			waitFor(t, "the warning toast", func() bool { return len(r.Host.CallsTo(w.toast)) >= 1 })
			toast := fmt.Sprint(r.Host.CallsTo(w.toast)[0].Params)
			if !strings.Contains(toast, "warning") || !strings.Contains(toast, "/thatch/exit") {
				t.Fatalf("toast %s, want a warning naming /thatch/exit", toast)
			}
			waitFor(t, "the fall-through extraction", func() bool { return len(r.Host.CallsTo("session.create")) == 1 })

			// exit, greenlit: leaves the live directory and is closed the host's way
			must(t, r.Host.Status(ctx, "ses_a", "busy"))
			_, err = r.Host.Publish(ctx, "command.execute.before", map[string]any{"command": "thatch/exit", "sessionID": "ses_a", "arguments": ""})
			must(t, err)
			r.Host.SetReply("ses_a", "THATCH_EXIT_READY")
			must(t, r.Host.Status(ctx, "ses_a", "idle"))
			var closeCall fakehost.Call
			waitFor(t, "the close", func() bool {
				for _, c := range r.Host.CallsTo(w.close) {
					if c.Params["type"] != "toast" {
						closeCall = c
						return true
					}
				}
				return false
			})
			if api == "v1" && closeCall.Params["type"] != "tui.command.execute" || api == "v2" && closeCall.Params["type"] != "exit-tab-closed" {
				t.Fatalf("close call %v", closeCall.Params)
			}
			if _, live := r.Sessions()["ses_a"]; live {
				t.Fatal("an exited session is still in the live directory")
			}
		})
	}
}

// A host that only forwards events (no command.execute.before) resolves the wrap-up from
// command.executed; a v2 host without session.compact degrades to a logged no-op.
func TestWrapUpFromExecutedOnV2WithoutCompact(t *testing.T) {
	methods := []string{}
	for _, m := range fakehost.Methods("v2") {
		if m != "session.compact" {
			methods = append(methods, m)
		}
	}
	r := New(t, "v2", methods...)
	ctx := r.Ctx()
	r.Start()
	must(t, r.Host.Hello(ctx, "b1"))
	must(t, r.Host.Created(ctx, "ses_a", "", "t", r.Host.Dir))
	must(t, r.Host.Status(ctx, "ses_a", "busy"))
	must(t, r.Host.Status(ctx, "ses_a", "idle"))
	r.Host.SetReply("ses_a", "THATCH_COMPACT_READY")
	_, err := r.Host.Publish(ctx, "command.executed", map[string]any{"name": "thatch/compact", "sessionID": "ses_a", "arguments": "", "messageID": "msg_9"})
	must(t, err)
	waitFor(t, "the messages read", func() bool { return len(r.Host.CallsTo("session.context")) == 1 })
	r.WaitApplied(6)
	// The no-op compaction must not leave the session flagged compacting: the next idle
	// with pending entries extracts.
	must(t, r.Host.ToolExecuted(ctx, "ses_a", "c1", "bash", "x"))
	must(t, r.Host.Status(ctx, "ses_a", "busy"))
	must(t, r.Host.Status(ctx, "ses_a", "idle"))
	waitFor(t, "the next idle to extract", func() bool { return len(r.Host.CallsTo("session.create")) == 1 })
}
