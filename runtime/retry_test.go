package runtime

import (
	"encoding/json"
	"testing"
	"time"
)

// TestRetrySchedule: each failure of a session's extraction schedules its retry 1, 5 and
// 30 minutes on, and nothing starts before; a retry is one extraction (a second timer
// round starts none); a due retry waits while its host is offline; the fourth failure
// schedules none, and the session's next idle extracts as rule 3 says.
func TestRetrySchedule(t *testing.T) {
	s, now := NewState(), time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	step := func(in Input) *Effects {
		t.Helper()
		fx := DefaultRules.Step(s, in, now)
		if err := s.CheckIndex(); err != nil {
			t.Fatal(err)
		}
		return fx
	}
	creates := func(fx *Effects) []Call {
		var out []Call
		for _, c := range fx.Calls {
			if c.Op == OpCreate && c.Purpose == PurposeExtract {
				out = append(out, c)
			}
		}
		return out
	}
	step(Event{ID: "e1", Type: "host.hello", HostID: "h1", Hello: &Hello{HostID: "h1", API: "v1", BootID: "b1"}})
	step(Event{ID: "e2", Type: "session.created", HostID: "h1", SessionID: "ses_a", Info: &SessionInfo{ID: "ses_a", Title: "t", Directory: "/p"}})
	step(Event{ID: "e3", Type: "tool.execute.after", HostID: "h1", SessionID: "ses_a",
		Tool: &ToolExec{CallID: "c1", Tool: "bash", Args: json.RawMessage(`{"command":"go test ./..."}`), Output: "ok: all tests passed"}})
	started := creates(step(Event{ID: "e4", Type: "session.idle", HostID: "h1", SessionID: "ses_a"}))
	sess := s.Sessions["ses_a"]
	for i, wait := range []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 0} {
		if len(started) != 1 {
			t.Fatalf("attempt %d: %d extractions started, want 1", i+1, len(started))
		}
		step(Result{Call: started[0], Err: &HostError{Name: "TimeoutError", Message: "scripted"}})
		if int(sess.Failed) != i+1 {
			t.Fatalf("after failure %d the session counts %d", i+1, sess.Failed)
		}
		if wait == 0 {
			if sess.RetryAt != 0 || len(DefaultRules.RetriesDue(s, now.Add(time.Hour))) != 0 {
				t.Fatalf("a fourth failure scheduled a retry at %d", sess.RetryAt)
			}
			break
		}
		if got := time.UnixMilli(sess.RetryAt); !got.Equal(now.Add(wait)) {
			t.Fatalf("failure %d: retry at %v, want %v", i+1, got, now.Add(wait))
		}
		now = now.Add(wait - time.Millisecond)
		if due := DefaultRules.RetriesDue(s, now); len(due) != 0 || len(creates(step(RetryTick{}))) != 0 {
			t.Fatalf("failure %d: a retry started before it was due (%v)", i+1, due)
		}
		now = now.Add(time.Millisecond)
		if i == 1 {
			step(Event{ID: "bye", Type: "host.goodbye", HostID: "h1"})
			if due := DefaultRules.RetriesDue(s, now); len(due) != 0 || len(creates(step(RetryTick{}))) != 0 {
				t.Fatalf("a retry started for a host offline (%v)", due)
			}
			step(Event{ID: "hi", Type: "host.hello", HostID: "h1", Hello: &Hello{HostID: "h1", API: "v1", BootID: "b1"}})
		}
		if due := DefaultRules.RetriesDue(s, now); len(due) != 1 || due[0] != "ses_a" {
			t.Fatalf("failure %d: due %v at its retry time", i+1, due)
		}
		started = creates(step(RetryTick{}))
		if len(creates(step(RetryTick{}))) != 0 {
			t.Fatal("a second timer round started a second extraction")
		}
	}
	step(Event{ID: "busy", Type: "session.status", HostID: "h1", SessionID: "ses_a", Status: StatusBusy})
	if len(creates(step(Event{ID: "idle", Type: "session.idle", HostID: "h1", SessionID: "ses_a"}))) != 1 {
		t.Fatal("the next idle after the last timed retry does not extract")
	}
}
