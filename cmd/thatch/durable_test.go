package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
)

// Events published while thatch is down are applied when it comes back.
func TestEventsPublishedWhileStoppedAreApplied(t *testing.T) {
	r := newRig(t, "v1")
	ctx := r.ctx()
	r.start() // creates the stream and the durable consumer
	r.stop()

	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", t.TempDir()))
	for i := range 3 {
		must(t, r.host.ToolExecuted(ctx, "ses_a", fmt.Sprintf("c%d", i), "bash", "ok"))
	}
	r.start()
	r.waitApplied(5)
	if got := len(r.entries("ses_a")); got != 3 {
		t.Fatalf("ses_a has %d entries, want 3", got)
	}
	// The reminder for the session created while thatch was down was sent on return (the
	// call goes out after the commit).
	r.reminderTo("ses_a")
	if got := len(r.host.CallsTo("session.prompt")); got != 1 {
		t.Fatalf("sent %d reminders, want 1", got)
	}
}

// The same event id published twice, under two Nats-Msg-Ids, is applied once.
func TestDuplicateEventIDIsAppliedOnce(t *testing.T) {
	r := newRig(t, "v1")
	ctx := r.ctx()
	r.start()
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
	body := []byte(`{"id":"evt_dup","type":"tool.execute.after","properties":{"sessionID":"ses_a","callID":"c1","tool":"bash","args":{},"output":"x"}}`)
	body2 := []byte(`{"id":"evt_dup","type":"tool.execute.after","properties":{"sessionID":"ses_a","callID":"c2","tool":"bash","args":{},"output":"y"}}`)
	for i, b := range [][]byte{body, body2} {
		must(t, r.host.PublishRaw(ctx, "tool.execute.after", b, fmt.Sprintf("msg-%d", i), 0))
	}
	if _, err := r.host.Publish(ctx, "session.compacted", map[string]any{"sessionID": "ses_a"}); err != nil {
		t.Fatal(err)
	}
	r.waitApplied(4)
	if e := r.entries("ses_a"); len(e) != 1 || e[0].ID != "c1" {
		t.Fatalf("entries %+v, want only c1 (the second publish of evt_dup must be skipped)", e)
	}
	// And across a restart: the applied id is journaled.
	r.stop()
	must(t, r.host.PublishRaw(ctx, "tool.execute.after", body2, "msg-3", 0))
	if _, err := r.host.Publish(ctx, "session.compacted", map[string]any{"sessionID": "ses_a"}); err != nil {
		t.Fatal(err)
	}
	r.start()
	r.waitApplied(5)
	if e := r.entries("ses_a"); len(e) != 1 {
		t.Fatalf("entries %+v after restart, want only c1", e)
	}
}

// A restart in the middle of a stream loses nothing and applies nothing twice: the
// journal ends as it would after an uninterrupted run.
func TestRestartMidStream(t *testing.T) {
	play := func(r *rig, restarts bool) {
		ctx := r.ctx()
		r.start()
		must(t, r.host.Hello(ctx, "b1"))
		for s := range 20 {
			sid := fmt.Sprintf("ses_%02d", s)
			must(t, r.host.Created(ctx, sid, "", "t", r.host.Dir))
			for c := range 10 {
				must(t, r.host.ToolExecuted(ctx, sid, fmt.Sprintf("%s_c%d", sid, c), "bash", strings.Repeat("o", 100)))
			}
			if restarts && s%5 == 2 {
				r.stop()
				r.start()
			}
		}
		r.waitApplied(1 + 20*11)
		waitFor(t, "every host call to be answered", func() bool { return r.status().OutstandingCalls == 0 })
		r.stop()
	}
	// Without session.create the idle-free workload's journal depends on the events alone.
	a := newRig(t, "v1", "session.prompt")
	play(a, false)
	b := newRig(t, "v1", "session.prompt")
	play(b, true)
	da, db := a.journalDump(), b.journalDump()
	if strings.Contains(da, "outbox") || strings.Contains(db, "outbox") {
		t.Fatalf("host calls left in the outbox after every call was answered:\n%s\n%s", da, db)
	}
	if da != db {
		t.Fatalf("journal after restarts differs from an uninterrupted run:\n--- uninterrupted\n%s\n--- restarted\n%s", da, db)
	}
	if got := len(b.host.CallsTo("session.prompt")); got != 20 {
		t.Fatalf("sent %d reminders across restarts, want 20 (one per session)", got)
	}
}

// Each kind of bad input of rule 11 is acknowledged, counted, dead-lettered with its
// reason, and the consumer goes on.
func TestMalformedInputIsRejectedAndConsumerGoesOn(t *testing.T) {
	r := newRig(t, "v1")
	ctx := r.ctx()
	r.start()
	must(t, r.host.Hello(ctx, "b1"))
	bad := []struct {
		name, typ string
		body      string
		hostSeq   int64
		reason    string
	}{
		{"not json", "session.status", `{not json`, 0, "not a JSON object"},
		{"array", "session.status", `[1,2]`, 0, "not a JSON object"},
		{"no id", "session.status", `{"type":"session.status","properties":{}}`, 0, "no string id"},
		{"id not string", "session.status", `{"id":7,"type":"session.status","properties":{}}`, 0, "not a JSON object"},
		{"no type", "session.status", `{"id":"e1","properties":{}}`, 0, "no string type"},
		{"too big", "tool.execute.after", `{"id":"e2","type":"tool.execute.after","properties":{"output":"` + strings.Repeat("x", 1<<20) + `"}}`, 0, "over the"},
		{"status of wrong shape", "session.status", `{"id":"e3","type":"session.status","properties":{"sessionID":"s","status":"idle"}}`, 0, "session.status properties"},
		{"tool without callID", "tool.execute.after", `{"id":"e4","type":"tool.execute.after","properties":{"sessionID":"s","tool":"bash"}}`, 0, "callID"},
		{"created without info", "session.created", `{"id":"e5","type":"session.created","properties":{"sessionID":"s"}}`, 0, "info"},
		{"properties not object", "session.idle", `{"id":"e6","type":"session.idle","properties":"s"}`, 0, "not an object"},
		{"bad Host-Seq", "session.idle", `{"id":"e7","type":"session.idle","properties":{"sessionID":"s"}}`, -1, "Host-Seq"},
	}
	for i, b := range bad {
		msg := fmt.Sprintf("bad-%d", i)
		if b.hostSeq < 0 {
			m := r.host
			// A Host-Seq that is not a positive integer.
			must(t, m.PublishRawHeader(ctx, b.typ, []byte(b.body), msg, "abc"))
			continue
		}
		if err := r.host.PublishRaw(ctx, b.typ, []byte(b.body), msg, 0); err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
	}
	must(t, r.host.Created(ctx, "ses_after", "", "t", r.host.Dir))
	r.waitApplied(2)
	if _, ok := r.sessions()["ses_after"]; !ok {
		t.Fatal("the event after the bad ones was not applied")
	}
	if got := r.status().Rejected; got != int64(len(bad)) {
		t.Fatalf("rejected %d, want %d", got, len(bad))
	}
	r.stop()
	s, err := journal.Open(filepath.Join(r.dataDir, "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dl, err := s.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(dl), len(bad))
	}
	for i, b := range bad {
		if !strings.Contains(dl[i].Reason, b.reason) {
			t.Errorf("%s: dead-letter reason %q does not mention %q", b.name, dl[i].Reason, b.reason)
		}
	}
	// Rejected messages were acknowledged: a restart does not see them again.
	r.start()
	r.waitApplied(2)
	if got := r.status().Rejected; got != int64(len(bad)) {
		t.Fatalf("after restart rejected %d, want %d (redelivered?)", got, len(bad))
	}

	// thatch deadletters shows each, newest first, with its reason.
	var out bytes.Buffer
	must(t, client(r.ctx(), r.cfg, "deadletters", []string{"--json"}, &out))
	var rows []runtime.DeadLetterView
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != len(bad) {
		t.Fatalf("thatch deadletters --json: %d rows (%v), want %d:\n%s", len(rows), err, len(bad), out.String())
	}
	for i, b := range bad {
		if row := rows[len(rows)-1-i]; !strings.Contains(row.Reason, b.reason) || row.StreamSeq == 0 {
			t.Errorf("thatch deadletters row for %s: %+v, want the reason %q and its stream sequence", b.name, row, b.reason)
		}
	}
	out.Reset()
	must(t, client(r.ctx(), r.cfg, "deadletters", nil, &out))
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != len(bad)+1 || !strings.HasPrefix(lines[0], "SEQ") {
		t.Errorf("thatch deadletters printed %d lines, want a header and %d rows:\n%s", len(lines), len(bad), out.String())
	}
}

// A consumer deleted under thatch is recreated by itself; no event is lost or applied twice.
func TestConsumerDeletedIsRecreated(t *testing.T) {
	r := newRig(t, "v1", "session.prompt")
	ctx := r.ctx()
	r.start()
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
	r.waitApplied(2)
	stream, err := r.host.JS.Stream(ctx, "OPENCODE_EVENTS")
	must(t, err)
	must(t, stream.DeleteConsumer(ctx, "thatch"))
	for i := range 5 {
		must(t, r.host.ToolExecuted(ctx, "ses_a", fmt.Sprintf("c%d", i), "bash", "x"))
	}
	r.waitApplied(7)
	if got := len(r.entries("ses_a")); got != 5 {
		t.Fatalf("%d entries after the consumer was recreated, want 5", got)
	}
	if _, err := stream.Consumer(ctx, "thatch"); err != nil {
		t.Fatalf("the durable consumer was not recreated: %v", err)
	}
}
