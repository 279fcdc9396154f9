package runtime_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/scenario"
)

// genEvents draws a valid event sequence of one host: sessions created (some children),
// status changes, tool calls, errors, wrap-up arming, deletions.
func genEvents(t *rapid.T) []runtime.Event {
	n := rapid.IntRange(1, 60).Draw(t, "events")
	evs := []runtime.Event{{ID: "evt_hello", Type: "host.hello", HostID: "h1", BootID: "b1",
		Hello: &runtime.Hello{HostID: "h1", API: "v1", BootID: "b1"}}}
	sessions := []string{"ses_a", "ses_b", "ses_c", "ses_d"}
	for i := range n {
		sid := rapid.SampledFrom(sessions).Draw(t, "session")
		ev := runtime.Event{ID: fmt.Sprintf("evt_%03d", i), HostID: "h1", SessionID: sid}
		switch kind := rapid.IntRange(0, 7).Draw(t, "kind"); kind {
		case 0:
			ev.Type = "session.created"
			ev.Info = &runtime.SessionInfo{ID: sid, Title: "t", Directory: "/w"}
			if sid == "ses_c" || sid == "ses_d" {
				ev.Info.ParentID = "ses_a"
				if sid == "ses_d" {
					ev.Info.Title = runtime.ExtractionTitle
				}
			}
		case 1, 2:
			ev.Type, ev.Status = "session.status", rapid.SampledFrom([]runtime.Status{runtime.StatusIdle, runtime.StatusBusy}).Draw(t, "status")
		case 3, 4:
			ev.Type = "tool.execute.after"
			ev.Tool = &runtime.ToolExec{CallID: fmt.Sprintf("c%d", rapid.IntRange(0, 15).Draw(t, "call")), Tool: "bash", Output: "x"}
		case 5:
			ev.Type = "session.error"
		case 6:
			ev.Type, ev.Command = "command.execute.before", rapid.SampledFrom([]string{"thatch/compact", "thatch/exit"}).Draw(t, "command")
		case 7:
			ev.Type = "session.deleted"
			ev.Info = &runtime.SessionInfo{ID: sid, Title: "t", Directory: "/w"}
		}
		evs = append(evs, ev)
	}
	for i := range evs {
		evs[i].Seq = uint64(i + 1)
	}
	return evs
}

func render(t *rapid.T, s *runtime.State) string {
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	out := string(data) + "\n" + scenario.Dump(s, scenario.Epoch)
	for _, id := range []string{"ses_a", "ses_b", "ses_c", "ses_d"} {
		if sess := s.Sessions[id]; sess != nil {
			e, _ := json.Marshal(sess.Entries)
			out += "\n" + id + string(e)
		}
	}
	return out
}

// TestRedeliveriesAndDuplicatesChangeNothing: any interleaving of redeliveries (the same
// message again, later) and duplicates (the same event id published again under a new
// stream sequence) of a valid sequence, delivered in batches of any size, ends in the
// state of the sequence applied once in order.
func TestRedeliveriesAndDuplicatesChangeNothing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs := genEvents(t)
		want := runtime.NewState()
		runtime.DefaultRules.ApplyEvents(want, evs, map[string]bool{}, scenario.Epoch)

		// Each event's first delivery comes in order; copies come at any later point.
		var deliveries []runtime.Event
		var pending []runtime.Event
		next := uint64(len(evs))
		for _, ev := range evs {
			deliveries = append(deliveries, ev)
			for range rapid.IntRange(0, 2).Draw(t, "copies") {
				c := ev
				if rapid.Bool().Draw(t, "duplicate") {
					next++
					c.Seq = next // published again: a new stream message, the same id
				}
				pending = append(pending, c)
			}
			for len(pending) > 0 && rapid.Bool().Draw(t, "deliver a copy now") {
				i := rapid.IntRange(0, len(pending)-1).Draw(t, "which copy")
				deliveries = append(deliveries, pending[i])
				pending = append(pending[:i], pending[i+1:]...)
			}
		}
		deliveries = append(deliveries, pending...)

		got := runtime.NewState()
		seen := map[string]bool{}
		for len(deliveries) > 0 {
			n := rapid.IntRange(1, len(deliveries)).Draw(t, "batch")
			runtime.DefaultRules.ApplyEvents(got, deliveries[:n], seen, scenario.Epoch)
			deliveries = deliveries[n:]
		}
		if w, g := render(t, want), render(t, got); w != g {
			t.Fatalf("state differs from the sequence applied once:\n--- once\n%s\n--- with redeliveries and duplicates\n%s", w, g)
		}
	})
}

// TestLateStatusNeverUndoesNewer: a status event whose first delivery comes after a newer
// status change of its session (its original delivery was lost, then redelivered) leaves
// every session's status as the in-order sequence does.
func TestLateStatusNeverUndoesNewer(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs := genEvents(t)
		want := runtime.NewState()
		runtime.DefaultRules.ApplyEvents(want, evs, map[string]bool{}, scenario.Epoch)

		// Move one status event behind a later status event of the same session, both
		// after its creation (a status of an unknown session is ignored, in any order).
		created := map[string]int{}
		var late []int
		for i, ev := range evs {
			if ev.Type == "session.created" {
				if _, ok := created[ev.SessionID]; !ok {
					created[ev.SessionID] = i
				}
			}
			if c, ok := created[ev.SessionID]; ev.Type != "session.status" || !ok || c > i {
				continue
			}
			for _, later := range evs[i+1:] {
				if later.Type == "session.status" && later.SessionID == ev.SessionID {
					late = append(late, i)
					break
				}
			}
		}
		if len(late) == 0 {
			t.Skip("no status event is superseded in this sequence")
		}
		i := rapid.SampledFrom(late).Draw(t, "late event")
		reordered := append(append([]runtime.Event{}, evs[:i]...), evs[i+1:]...)
		reordered = append(reordered, evs[i])

		got := runtime.NewState()
		runtime.DefaultRules.ApplyEvents(got, reordered, map[string]bool{}, scenario.Epoch)
		for id, w := range want.Sessions {
			if g := got.Sessions[id]; g != nil && g.Status != w.Status {
				t.Fatalf("%s: status %s after a late %s, want %s", id, g.Status, evs[i].Status, w.Status)
			}
		}
	})
}

// A bridge catching up republishes events thatch has applied, under new Host-Seq
// numbers: they change nothing, and the numbers they take are not a gap.
func TestRepublishedEventIsNoGap(t *testing.T) {
	s := runtime.NewState()
	seen := map[string]bool{}
	tool := func(seq int64) runtime.Event {
		return runtime.Event{ID: "tool_c1", Type: "tool.execute.after", HostID: "h1", SessionID: "ses_a", HostSeq: seq,
			Tool: &runtime.ToolExec{CallID: "c1", Tool: "bash", Output: "x"}}
	}
	runtime.DefaultRules.ApplyEvents(s, []runtime.Event{
		{ID: "evt_hello", Type: "host.hello", HostID: "h1", HostSeq: 1, Hello: &runtime.Hello{HostID: "h1", API: "v1", BootID: "b1"}},
		{ID: "evt_1", Type: "session.created", HostID: "h1", SessionID: "ses_a", HostSeq: 2, Info: &runtime.SessionInfo{ID: "ses_a", Title: "t", Directory: "/w"}},
		tool(3),
	}, seen, scenario.Epoch)
	fx, applied := runtime.DefaultRules.ApplyEvents(s, []runtime.Event{
		tool(4), // the same call, republished
		{ID: "evt_2", Type: "session.status", HostID: "h1", SessionID: "ses_a", HostSeq: 5, Status: runtime.StatusBusy},
	}, seen, scenario.Epoch)
	if len(applied) != 1 || applied[0].ID != "evt_2" {
		t.Fatalf("applied %+v, want evt_2 only", applied)
	}
	if s.Counters.Gaps != 0 || len(fx.Calls) != 0 || s.Hosts["h1"].Seq != 5 {
		t.Fatalf("gaps=%d calls=%v seq=%d: a republished event counted as a lost one", s.Counters.Gaps, fx.Calls, s.Hosts["h1"].Seq)
	}
	if n := len(s.Sessions["ses_a"].Entries); n != 1 {
		t.Fatalf("%d entries after a republished call, want 1", n)
	}
}

// A hello of the same boot (the opencode bridge says it again when the tools it lacks
// change) restarts nothing and takes its Host-Seq number like any event, also when it is
// republished: the numbers are no gap.
func TestSameBootHelloIsNoGap(t *testing.T) {
	s := runtime.NewState()
	seen := map[string]bool{}
	hello := func(id string, seq int64, missing ...string) runtime.Event {
		return runtime.Event{ID: id, Type: "host.hello", HostID: "h1", HostSeq: seq,
			Hello: &runtime.Hello{HostID: "h1", API: "v1", BootID: "b1", MissingTools: missing}}
	}
	status := func(id string, seq int64, st runtime.Status) runtime.Event {
		return runtime.Event{ID: id, Type: "session.status", HostID: "h1", SessionID: "ses_a", HostSeq: seq, Status: st}
	}
	runtime.DefaultRules.ApplyEvents(s, []runtime.Event{
		hello("hello_b1", 1, runtime.ToolPayload),
		{ID: "evt_1", Type: "session.created", HostID: "h1", SessionID: "ses_a", HostSeq: 2, Info: &runtime.SessionInfo{ID: "ses_a", Title: "t", Directory: "/w"}},
		status("evt_2", 3, runtime.StatusBusy),
		hello("hello_b1_1", 4),
		hello("hello_b1_1", 5), // republished
		status("evt_3", 6, runtime.StatusBusy),
	}, seen, scenario.Epoch)
	h := s.Hosts["h1"]
	if s.Counters.Gaps != 0 || h.Seq != 6 || len(h.MissingTools) != 0 {
		t.Fatalf("gaps=%d seq=%d missing=%v: want no gap, seq 6, no missing tools", s.Counters.Gaps, h.Seq, h.MissingTools)
	}
	if st := s.Sessions["ses_a"].Status; st != runtime.StatusBusy {
		t.Fatalf("ses_a is %s after a hello of its boot, want busy (no restart)", st)
	}
}
