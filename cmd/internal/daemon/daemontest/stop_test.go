package daemontest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Rule 12 (a host away and back, a recreated stream) against the embedded broker:
// thatch's default, where hosts connect to the broker thatch runs.

// hostAway plays a host that goes away while thatch has calls for it: an extraction
// child fails (its messages, then its deletion, are due), a new session needs its
// reminder, and another session's idle starts an extraction. It returns the rig, its
// log and the extraction child once those calls wait for the host.
func hostAway(t *testing.T) (*Rig, *SyncBuf, string) {
	r := NewEmbedded(t, "v1")
	r.Cfg.StrandSweep = false // a new boot's sweep would call the host too
	logs := r.CaptureLog()
	ctx := r.Ctx()
	r.Start()
	child := r.ExtractionOfOneEntry(ctx) // hello b1, ses_a with c1, its child created and prompted
	waitFor(t, "the host's calls to be answered", func() bool { return r.Status().OutstandingCalls == 0 })
	h := r.Host
	must(t, h.Away())
	_, err := h.Publish(ctx, "session.error", map[string]any{"sessionID": child,
		"error": map[string]any{"name": "APIError", "data": map[string]any{"message": "overloaded"}}})
	must(t, err)
	must(t, h.Created(ctx, "ses_b", "", "t", h.Dir))
	must(t, h.Created(ctx, "ses_c", "", "t", h.Dir))
	must(t, h.ToolExecuted(ctx, "ses_c", "c2", "bash", "x"))
	must(t, h.Status(ctx, "ses_c", "idle"))
	// The child's messages (its cost), two reminders, ses_c's create.
	waitFor(t, "four calls waiting for the host", func() bool {
		s := r.Status()
		return s.WaitingCalls == 4 && s.OutstandingCalls == 0
	})
	return r, logs, child
}

// TestHostAwayThenBack: calls to a host that went away wait (status.waitingCalls); its
// hello of the same boot sends them all; a hello of a new boot answers the moot one (the
// extraction's create) with HostRestartedError, while the reminders, the failed child's
// messages and its deletion still go out.
func TestHostAwayThenBack(t *testing.T) {
	t.Run("same boot", func(t *testing.T) {
		r, _, child := hostAway(t)
		h := r.Host
		before := len(h.Calls())
		must(t, h.Back())
		must(t, h.HelloAgain(r.Ctx()))
		waitFor(t, "the waiting calls to go out", func() bool {
			s := r.Status()
			return s.WaitingCalls == 0 && s.OutstandingCalls == 0 && len(h.CallsTo("session.delete")) == 1
		})
		var got []string
		for _, c := range h.Calls()[before:] {
			got = append(got, c.String())
		}
		for _, want := range []string{"session.messages " + child, "session.delete " + child, "session.prompt ses_b", "session.prompt ses_c", "session.create parent=ses_c"} {
			if !slices.Contains(got, want) {
				t.Errorf("after the hello the host got %v: %s missing", got, want)
			}
		}
	})
	t.Run("new boot", func(t *testing.T) {
		r, logs, child := hostAway(t)
		h := r.Host
		before := len(h.Calls())
		must(t, h.Back())
		must(t, h.Hello(r.Ctx(), "b2"))
		waitFor(t, "the waiting room to empty", func() bool {
			s := r.Status()
			return s.WaitingCalls == 0 && s.OutstandingCalls == 0 && len(h.CallsTo("session.delete")) == 1
		})
		var got []string
		for _, c := range h.Calls()[before:] {
			got = append(got, c.String())
		}
		// The reminders are no-reply prompts to sessions that outlive the restart: they go
		// out (in the order they began to wait); the deletion follows the messages.
		first := slices.Clone(got[:min(3, len(got))])
		slices.Sort(first)
		if want := []string{"session.messages " + child, "session.prompt ses_b", "session.prompt ses_c"}; len(got) != 4 ||
			!slices.Equal(first, want) || got[3] != "session.delete "+child {
			t.Errorf("after the new boot the host got %v, want %v then session.delete %s: the moot create is not sent", got, want, child)
		}
		if !strings.Contains(string(logs.Bytes()), "moot_after_restart=1") {
			t.Error("the log does not say the moot create was answered as such")
		}
		if r.Sessions()["ses_c"].Extracting {
			t.Error("ses_c still extracting after its create was answered as moot")
		}
		r.Stop()
		if dump := r.JournalDump(); strings.Contains(dump, "outbox ") {
			t.Fatalf("calls left in the outbox:\n%s", dump)
		}
	})
}

// TestRecreatedStream: a session extracted once, then its stream is lost (deleted under
// thatch, or thatch restarted on a fresh broker store with its old journal); the events
// of the new stream count from 1 again. The same session's next idle, and a new
// session's, still start an extraction: thatch follows the new stream's sequence instead
// of taking its events for stale redeliveries.
func TestRecreatedStream(t *testing.T) {
	for _, how := range []string{"stream deleted", "fresh broker store"} {
		t.Run(how, func(t *testing.T) {
			r := NewEmbedded(t, "v1")
			logs := r.CaptureLog()
			defer func() {
				if t.Failed() {
					t.Logf("thatch's log:\n%s", logs.Bytes())
				}
			}()
			h := r.Host
			h.Model = true
			ctx := r.Ctx()
			r.Start()
			must(t, h.Hello(ctx, "b1"))
			must(t, h.Created(ctx, "ses_a", "", "t", h.Dir))
			must(t, h.ToolExecuted(ctx, "ses_a", "c1", "bash", "x"))
			must(t, h.Status(ctx, "ses_a", "busy"))
			must(t, h.Status(ctx, "ses_a", "idle"))
			extracted := func(ids ...string) bool {
				got := h.Extracted()
				for _, id := range ids {
					if got[id] != 1 {
						return false
					}
				}
				return true
			}
			waitFor(t, "ses_a's first extraction", func() bool {
				return extracted("c1") && len(h.CallsTo("session.delete")) == 1 && r.Status().OutstandingCalls == 0
			})
			old := r.Status().LastStreamSeq
			switch how {
			case "stream deleted":
				must(t, h.JS.DeleteStream(ctx, r.Cfg.Stream))
			case "fresh broker store":
				r.Stop()
				must(t, os.RemoveAll(filepath.Join(r.DataDir, "nats")))
				r.Start() // the host's connection comes back and it says hello again
			}
			// Published once thatch made the stream again (the host retries until then).
			must(t, h.ToolExecuted(ctx, "ses_a", "c2", "bash", "x"))
			must(t, h.Status(ctx, "ses_a", "busy"))
			must(t, h.Status(ctx, "ses_a", "idle"))
			must(t, h.Created(ctx, "ses_b", "", "t", h.Dir))
			must(t, h.ToolExecuted(ctx, "ses_b", "c3", "bash", "x"))
			must(t, h.Status(ctx, "ses_b", "busy"))
			must(t, h.Status(ctx, "ses_b", "idle"))
			waitFor(t, "the extractions of the new stream's idles", func() bool { return extracted("c1", "c2", "c3") })
			// thatch's position is the new stream's last sequence once it has consumed it all.
			waitFor(t, "thatch's position to be the new stream's", func() bool {
				s, err := h.JS.Stream(ctx, r.Cfg.Stream)
				if err != nil {
					return false
				}
				info, err := s.Info(ctx)
				return err == nil && r.Status().LastStreamSeq == info.State.LastSeq
			})
			log := string(logs.Bytes())
			t.Logf("old stream ended at %d; the new one at %d; the consumer was recreated %d times; the embedded JetStream went down meanwhile: %v",
				old, r.Status().LastStreamSeq, strings.Count(log, "consumer stopped; recreating it"), strings.Contains(log, "embedded JetStream is down"))
		})
	}
}
