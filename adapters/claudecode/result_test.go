package claudecode

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/runtime"
)

// startChild creates an extraction child of p1 and prompts it, returning its id.
func startChild(t *testing.T, r *hostRig) string {
	t.Helper()
	res, rerr := r.call("session.create", map[string]any{"parentID": "p1", "title": runtime.ExtractionTitle})
	var child runtime.SessionInfo
	if rerr != nil || json.Unmarshal(res, &child) != nil {
		t.Fatalf("session.create: %s %v", res, rerr)
	}
	r.next() // its session.created
	if _, rerr := r.call("session.prompt", map[string]any{"sessionID": child.ID, "parts": []any{map[string]any{"type": "text", "text": "extract"}}}); rerr != nil {
		t.Fatal(rerr)
	}
	r.next() // busy
	return child.ID
}

// TestHostChildNotFound: a claude that cannot run is the child's session.error naming the
// exec failure alone, not the JSON parse of its empty output that follows.
func TestHostChildNotFound(t *testing.T) {
	r, h := newHostRig(t)
	r.next() // stale-child's error
	must(t, os.Remove(h.Claude))
	id := startChild(t, r)
	typ, p := r.next()
	if typ != "session.error" || p["sessionID"] != id {
		t.Fatalf("a claude that cannot run: %s %v, want the child's session.error", typ, p)
	}
	msg := p["error"].(map[string]any)["data"].(map[string]any)["message"].(string)
	if !strings.HasPrefix(msg, "claude -p failed: fork/exec "+h.Claude+": no such file or directory") || strings.Contains(msg, "JSON") {
		t.Fatalf("the child's error says %q", msg)
	}
}

// TestHostChildModel: the ledger's model of a child is the full name its result's
// modelUsage gives, not the alias it was run with.
func TestHostChildModel(t *testing.T) {
	r, h := newHostRig(t)
	r.next() // stale-child's error
	must(t, os.WriteFile(h.Claude, []byte(`#!/bin/sh
echo '{"type":"result","subtype":"success","is_error":false,"result":"Extracted.","total_cost_usd":0.02,"usage":{"input_tokens":10,"output_tokens":2},"modelUsage":{"claude-haiku-4-5-20251001":{"inputTokens":10,"outputTokens":2,"costUSD":0.02},"claude-sonnet-4-5-20250929":{"inputTokens":3,"outputTokens":0,"costUSD":0.001}}}'
`), 0o755))
	id := startChild(t, r)
	if typ, _ := r.next(); typ != "session.status" {
		t.Fatalf("the child's turn ended with %s", typ)
	}
	res, _ := r.call("session.messages", map[string]any{"sessionID": id})
	var msgs []runtime.Message
	if err := json.Unmarshal(res, &msgs); err != nil || len(msgs) != 1 || msgs[0].Info.ModelID != "claude-haiku-4-5-20251001" {
		t.Fatalf("session.messages: %s, want the model claude-haiku-4-5-20251001", res)
	}
}
