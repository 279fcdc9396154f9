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
