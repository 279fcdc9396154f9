package runtime

import (
	"testing"
	"time"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// A tool event writes its session's row only when it moves Touched into a new minute (the
// journal's Touched is then at most a minute behind, as touchCall's): within the minute
// the entry alone is journaled, and the tally still counts it.
func TestToolEventWritesItsSessionOncePerMinute(t *testing.T) {
	s := NewState()
	at := time.Date(2026, 12, 4, 10, 0, 5, 0, time.UTC)
	DefaultRules.Step(s, Event{ID: "e0", Type: protocol.EventSessionCreated, HostID: "h1", SessionID: "ses_a", Info: &SessionInfo{ID: "ses_a"}}, at)
	tool := func(call string, now time.Time) *Effects {
		t.Helper()
		fx := DefaultRules.Step(s, Event{ID: "e_" + call, Type: protocol.EventToolExecuteAfter, HostID: "h1", SessionID: "ses_a",
			Tool: &ToolExec{Tool: "bash", CallID: call, Output: "ok"}}, now)
		if len(fx.Entries) != 1 || fx.Entries[0].Kind != EntryInsert || fx.Entries[0].Root != "ses_a" {
			t.Fatalf("call %s: entries %+v, want its insert", call, fx.Entries)
		}
		if err := s.CheckIndex(); err != nil {
			t.Fatalf("call %s: %v", call, err)
		}
		return fx
	}
	for _, c := range []struct {
		call      string
		now       time.Time
		writesRow bool
	}{
		{"c1", at.Add(10 * time.Second), false}, // the minute of the session's creation
		{"c2", at.Add(50 * time.Second), false},
		{"c3", at.Add(70 * time.Second), true}, // 10:01:15: a new minute
		{"c4", at.Add(80 * time.Second), false},
	} {
		fx := tool(c.call, c.now)
		if fx.Sessions["ses_a"] != c.writesRow {
			t.Errorf("call %s at %s: session row written %v, want %v", c.call, c.now.Format("15:04:05"), fx.Sessions["ses_a"], c.writesRow)
		}
		if got := s.Sessions["ses_a"].Touched; !got.Equal(c.now) {
			t.Errorf("call %s: Touched %s, want %s", c.call, got, c.now)
		}
	}
	if got := s.index().total.Pending; got != 4 {
		t.Fatalf("the tally counts %d pending entries, want 4", got)
	}
}
