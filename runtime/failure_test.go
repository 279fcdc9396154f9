package runtime

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestLastExtractionFailure: an extraction child's session.error is kept as the last
// extraction failure (host, session, child, when, the message redacted), in the counters
// the journal persists and in status.
func TestLastExtractionFailure(t *testing.T) {
	s, now := NewState(), time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	step := func(in Input) *Effects {
		t.Helper()
		now = now.Add(time.Second)
		return DefaultRules.Step(s, in, now)
	}
	step(Event{ID: "e1", Type: "host.hello", HostID: "h1", Hello: &Hello{HostID: "h1", API: "v1", BootID: "b1", Caps: Capabilities{Context: true}}})
	step(Event{ID: "e2", Type: "session.created", HostID: "h1", SessionID: "ses_a", Info: &SessionInfo{ID: "ses_a", Title: "t", Directory: "/p"}})
	step(Event{ID: "e3", Type: "tool.execute.after", HostID: "h1", SessionID: "ses_a",
		Tool: &ToolExec{CallID: "c1", Tool: "bash", Args: json.RawMessage(`{"command":"go test ./..."}`), Output: "ok: all tests passed"}})
	var create Call
	for _, c := range step(Event{ID: "e4", Type: "session.idle", HostID: "h1", SessionID: "ses_a"}).Calls {
		if c.Op == OpCreate && c.Purpose == PurposeExtract {
			create = c
		}
	}
	step(Result{Call: create, Session: &SessionInfo{ID: "ses_x", ParentID: "ses_a", Title: ExtractionTitle, Directory: "/p"}})
	if v := Summary(s, 0); v.LastExtractionFailure != nil {
		t.Fatalf("a failure before any: %+v", v.LastExtractionFailure)
	}
	secret := "ghp_" + strings.Repeat("aB3dE6gH9j", 4)[:36]
	e := &ErrorInfo{Name: "ClaudeCodeError"}
	e.Data.Message = "claude -p failed: exec: claude: executable file not found in $PATH token=" + secret
	fx := step(Event{ID: "e5", Type: "session.error", HostID: "h1", SessionID: "ses_x", Error: e})
	f := Summary(s, 0).LastExtractionFailure
	if f == nil || f.Host != "h1" || f.Session != "ses_a" || f.Child != "ses_x" || !f.At.Equal(now) ||
		!strings.HasPrefix(f.Message, "ClaudeCodeError: claude -p failed: exec: claude: executable file not found") || strings.Contains(f.Message, secret) {
		t.Fatalf("status's last extraction failure is %+v", f)
	}
	if !fx.Counters {
		t.Fatal("the failure is not persisted with the counters")
	}
}
