package runtime

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var toolBody = []byte(`{"id":"evt_1","type":"tool.execute.after","properties":{"sessionID":"ses_a","callID":"call_1","tool":"bash","args":{"command":"go test ./..."},"title":"t","output":"` + strings.Repeat("o", 1500) + `","metadata":{}}}`)

func BenchmarkDecodeEvent(b *testing.B) {
	b.SetBytes(int64(len(toolBody)))
	for b.Loop() {
		if _, err := DecodeEvent("opencode", "opencode.h1.event.tool.execute.after", toolBody); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStepToolEvent is the core of the apply loop: one interaction buffered.
func BenchmarkStepToolEvent(b *testing.B) {
	ev, err := DecodeEvent("opencode", "opencode.h1.event.tool.execute.after", toolBody)
	if err != nil {
		b.Fatal(err)
	}
	s := NewState()
	now := time.Now()
	DefaultRules.Step(s, Event{ID: "c", Type: "session.created", HostID: "h1", SessionID: "ses_a", Info: &SessionInfo{ID: "ses_a"}}, now)
	i := 0
	for b.Loop() {
		ev.Tool.CallID = fmt.Sprint(i)
		DefaultRules.Step(s, ev, now)
		i++
		if i%30 == 0 { // an extraction completes the session's entries now and then
			s.Sessions["ses_a"].Entries = nil
		}
	}
}

func BenchmarkPlanStrandActions(b *testing.B) {
	rows := make([]SessionInfo, 100_000)
	for i := range rows {
		rows[i] = SessionInfo{ID: fmt.Sprint(i), Directory: fmt.Sprintf("/w/%d", i%200), ProjectID: "p1"}
	}
	exists := func(d string) bool { return d < "/w/180" }
	for b.Loop() {
		PlanStrandActions(rows, exists, map[string]string{"p1": "/w/0"}, true)
	}
}
