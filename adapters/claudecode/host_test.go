package claudecode

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// fakeClaude is a claude that records its arguments, folder and environment, and prints
// the JSON result of a headless run (or fails, when its prompt says FAIL).
const fakeClaude = `#!/bin/sh
{ printf '%s\n' "$@"; echo "cwd=$(pwd)"; echo "child=$THATCH_CLAUDE_CHILD"; } > "$RECORD"
case "$2" in *FAIL*) echo "boom" >&2; exit 1;; esac
echo '{"type":"result","subtype":"success","is_error":false,"result":"Extracted.","session_id":"x","total_cost_usd":0.0125,"usage":{"input_tokens":1200,"output_tokens":34,"cache_read_input_tokens":5,"cache_creation_input_tokens":7}}'
`

type hostRig struct {
	t      *testing.T
	nc     *nats.Conn
	js     jetstream.JetStream
	events jetstream.Consumer
	dir    string
	record string
	logs   *logSink // the host's log, as text
}

// logSink is a log buffer the host's goroutines write and a test reads.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logSink) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }

func (l *logSink) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func newHostRig(t *testing.T) (*hostRig, *Host) {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OPENCODE_EVENTS", Subjects: []string{"opencode.*.event.>"}})
	if err != nil {
		t.Fatal(err)
	}
	events, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r := &hostRig{t: t, nc: nc, js: js, events: events, dir: t.TempDir(), record: filepath.Join(t.TempDir(), "record"), logs: &logSink{}}
	// thatch's sessions: the parent p1 in r.dir, and an extraction child that no process runs.
	_, err = nc.Subscribe("thatch.api.sessions", func(m *nats.Msg) {
		data, _ := protocol.Encode([]map[string]string{{"sessionID": "p1", "kind": "top", "directory": r.dir},
			{"sessionID": "stale-child", "kind": "extraction", "directory": r.dir}}, nil)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(bin, []byte(fakeClaude), 0o755); err != nil {
		t.Fatal(err)
	}
	h := &Host{NC: nc, JS: js, Prefix: "opencode", APIPrefix: "thatch", ID: "cc-test", Claude: bin, Thatch: "/opt/thatch",
		Env: []string{"RECORD=" + r.record}, Log: slog.New(slog.NewTextHandler(r.logs, nil)), CompactWait: 300 * time.Millisecond}
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(hctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return r, h
}

// next is the next event the host published: its type and properties.
func (r *hostRig) next() (string, map[string]any) {
	r.t.Helper()
	m, err := r.events.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		r.t.Fatalf("no event: %v", err)
	}
	var ev struct {
		ID, Type   string
		Properties map[string]any
	}
	if err := json.Unmarshal(m.Data(), &ev); err != nil {
		r.t.Fatal(err)
	}
	if m.Headers().Get(jetstream.MsgIDHeader) != ev.ID || !strings.HasPrefix(m.Subject(), "opencode.cc-test.event.") {
		r.t.Fatalf("event %s on %s without its id as Nats-Msg-Id", ev.ID, m.Subject())
	}
	return ev.Type, ev.Properties
}

// call performs a host method as thatch's host client does.
func (r *hostRig) call(method string, params map[string]any) (json.RawMessage, *protocol.Error) {
	r.t.Helper()
	data, _ := json.Marshal(params)
	m, err := r.nc.Request("opencode.cc-test.api."+method, data, 30*time.Second)
	if err != nil {
		r.t.Fatal(err)
	}
	res, rerr, err := protocol.Decode(m.Data)
	if err != nil {
		r.t.Fatal(err)
	}
	return res, rerr
}

// TestHostRunsExtractionChildren: the responder of a Claude Code host ends the children
// that died with the thatch before, creates a child in its parent's folder, runs its turn
// as a headless claude restricted to thatch's tools, publishes its busy and idle, answers
// its tokens and cost, and deletes it; a run that fails is the child's session.error.
func TestHostRunsExtractionChildren(t *testing.T) {
	r, _ := newHostRig(t)
	if typ, p := r.next(); typ != "session.error" || p["sessionID"] != "stale-child" {
		t.Fatalf("at start: %s %v, want stale-child's session.error", typ, p)
	}

	res, rerr := r.call("session.create", map[string]any{"parentID": "p1", "title": runtime.ExtractionTitle, "idempotencyKey": "k1"})
	var child runtime.SessionInfo
	if rerr != nil || json.Unmarshal(res, &child) != nil || child.ParentID != "p1" || child.Directory != r.dir || len(child.ID) != 36 {
		t.Fatalf("session.create: %s %v", res, rerr)
	}
	if again, _ := r.call("session.create", map[string]any{"parentID": "p1", "title": runtime.ExtractionTitle, "idempotencyKey": "k1"}); string(again) != string(res) {
		t.Fatalf("a repeated session.create made another child: %s", again)
	}
	if typ, p := r.next(); typ != "session.created" || p["sessionID"] != child.ID || p["info"].(map[string]any)["parentID"] != "p1" {
		t.Fatalf("after session.create: %s %v", typ, p)
	}

	if _, rerr := r.call("session.prompt", map[string]any{"sessionID": child.ID, "parts": []any{map[string]any{"type": "text", "text": "call thatch_get_extraction_payload"}},
		"model": map[string]string{"providerID": "anthropic", "modelID": "claude-haiku-4-5"}}); rerr != nil {
		t.Fatal(rerr)
	}
	for _, want := range []string{"busy", "idle"} {
		typ, p := r.next()
		if typ != "session.status" || p["sessionID"] != child.ID || p["status"].(map[string]any)["type"] != want {
			t.Fatalf("the child's turn: %s %v, want %s", typ, p, want)
		}
	}
	rec, err := os.ReadFile(r.record)
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSpace(string(rec)), "\n")
	joined := strings.Join(args, " ")
	for _, want := range []string{"-p call thatch_get_extraction_payload", "--output-format json", "--model claude-haiku-4-5", "--strict-mcp-config",
		"--no-session-persistence", `"args":["mcp","--extraction","` + child.ID + `"]`, `"command":"/opt/thatch"`,
		"--allowedTools mcp__thatch__thatch_get_extraction_payload,mcp__thatch__thatch_extraction_done,mcp__thatch__memory_remember",
		"cwd=" + r.dir, "child=1"} {
		if !strings.Contains(joined, want) {
			t.Errorf("claude ran with %q, missing %q", args, want)
		}
	}
	if i := strings.Index(joined, "--tools"); i < 0 || args[indexOf(args, "--tools")+1] != "" {
		t.Errorf("claude ran with built-in tools: %q", args)
	}

	res, _ = r.call("session.messages", map[string]any{"sessionID": child.ID})
	var msgs []runtime.Message
	if err := json.Unmarshal(res, &msgs); err != nil || len(msgs) != 1 {
		t.Fatalf("session.messages: %s", res)
	}
	cost := runtime.CostOf(msgs)
	if msgs[0].Info.Role != "assistant" || msgs[0].Info.Tokens.Input != 1200 || msgs[0].Info.Tokens.Output != 34 || msgs[0].Info.Tokens.Cache.Read != 5 ||
		*msgs[0].Info.Cost != 0.0125 || msgs[0].Parts[0].Text != "Extracted." || msgs[0].Info.ModelID != "claude-haiku-4-5" {
		t.Fatalf("session.messages: %s (cost %+v)", res, cost)
	}
	if res, rerr := r.call("session.delete", map[string]any{"sessionID": child.ID}); rerr != nil || string(res) != "true" {
		t.Fatalf("session.delete: %s %v", res, rerr)
	}
	if _, rerr := r.call("session.delete", map[string]any{"sessionID": child.ID}); rerr == nil || rerr.Name != protocol.NotFound {
		t.Fatalf("deleting a deleted child: %v, want NotFoundError", rerr)
	}

	// A run that fails is the child's error. A model of another provider than Anthropic's
	// (THATCH_EXTRACT_MODEL set for opencode) gives way to Claude Code's small model.
	res, _ = r.call("session.create", map[string]any{"parentID": "p1", "title": runtime.ExtractionTitle})
	must(t, json.Unmarshal(res, &child))
	r.next() // its session.created
	r.call("session.prompt", map[string]any{"sessionID": child.ID, "parts": []any{map[string]any{"type": "text", "text": "FAIL please"}},
		"model": map[string]string{"providerID": "openai", "modelID": "gpt-5-mini"}})
	r.next() // busy
	if typ, p := r.next(); typ != "session.error" || p["sessionID"] != child.ID || !strings.Contains(p["error"].(map[string]any)["data"].(map[string]any)["message"].(string), "boom") {
		t.Fatalf("a failed run: %s %v, want the child's session.error saying why", typ, p)
	}
	if rec, _ := os.ReadFile(r.record); !strings.Contains(string(rec), "--model\nhaiku\n") {
		t.Fatalf("with an OpenAI model asked, claude ran with:\n%s", rec)
	}

	// A no-reply prompt (a start reminder, which Claude Code takes through its hook) and a
	// parent's messages are answered with nothing; compact is not Claude Code's to offer.
	if res, rerr := r.call("session.prompt", map[string]any{"sessionID": "p1", "noReply": true, "parts": []any{map[string]any{"type": "text", "text": "hi"}}}); rerr != nil || string(res) != "{}" {
		t.Fatalf("a no-reply prompt: %s %v", res, rerr)
	}
	if res, _ := r.call("session.messages", map[string]any{"sessionID": "p1"}); string(res) != "[]" {
		t.Fatalf("a parent's messages: %s", res)
	}
	if _, rerr := r.call("tui.executeCommand", map[string]any{"command": "session_compact", "sessionID": "p1"}); rerr == nil || rerr.Name != protocol.NotImplemented {
		t.Fatalf("compact: %v, want NotImplementedError", rerr)
	}
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestHostWrapUp: the responder's side of rule 6 for Claude Code sessions. The Stop hook's
// turn answers session.messages; an interactive session cannot be compacted from outside
// (NotImplementedError, which clears the compacting flag); a headless one is compacted by
// claude -p /compact --resume <session> in its folder, with the session's own hooks (no
// child marker), between a busy and an idle; the close of a greenlit exit is acknowledged.
func TestHostWrapUp(t *testing.T) {
	r, _ := newHostRig(t)
	r.next() // stale-child's session.error

	reply := "Flushed: 1 new.\n\nTHATCH_COMPACT_READY\n"
	if res, rerr := r.call(MethodTurn, map[string]any{"sessionID": "p1", "text": reply, "headless": false, "pid": 0}); rerr != nil || string(res) != "true" {
		t.Fatalf("%s: %s %v", MethodTurn, res, rerr)
	}
	res, _ := r.call("session.messages", map[string]any{"sessionID": "p1"})
	var msgs []runtime.Message
	if err := json.Unmarshal(res, &msgs); err != nil || len(msgs) != 1 || !runtime.Greenlit(msgs, runtime.WrapCompact.Token()) || msgs[0].Parts[0].Text != reply {
		t.Fatalf("session.messages after the turn: %s", res)
	}
	if _, rerr := r.call("tui.executeCommand", map[string]any{"command": "session_compact", "sessionID": "p1"}); rerr == nil || rerr.Name != protocol.NotImplemented ||
		!strings.Contains(rerr.Message, "/compact") {
		t.Fatalf("compacting an interactive session: %v, want NotImplementedError naming /compact", rerr)
	}
	if res, rerr := r.call("tui.publish", map[string]any{"type": "tui.command.execute", "properties": map[string]any{"command": "app.exit"}}); rerr != nil || string(res) != "true" {
		t.Fatalf("close: %s %v", res, rerr)
	}

	// A headless session: its process (pid 0: none to wait for) has ended.
	r.call(MethodTurn, map[string]any{"sessionID": "p1", "text": reply, "headless": true, "pid": 0})
	if res, rerr := r.call("tui.executeCommand", map[string]any{"command": "session_compact", "sessionID": "p1"}); rerr != nil || string(res) != "true" {
		t.Fatalf("compacting a headless session: %s %v", res, rerr)
	}
	for _, want := range []string{"busy", "idle"} {
		typ, p := r.next()
		if typ != "session.status" || p["sessionID"] != "p1" || p["status"].(map[string]any)["type"] != want {
			t.Fatalf("the compaction: %s %v, want p1 %s", typ, p, want)
		}
	}
	rec, err := os.ReadFile(r.record)
	must(t, err)
	if want := strings.Join(CompactArgs("p1"), "\n") + "\ncwd=" + r.dir + "\nchild=\n"; string(rec) != want {
		t.Fatalf("the compaction ran claude with:\n%s\nwant:\n%s", rec, want)
	}
	// The compaction says at INFO when it starts and how it ended (logged before the idle).
	for _, want := range []string{"compaction starts", "compaction done"} {
		found := false
		for line := range strings.Lines(r.logs.String()) {
			found = found || strings.Contains(line, "level=INFO") && strings.Contains(line, want) &&
				strings.Contains(line, "session=p1") && strings.Contains(line, "/thatch:compact") &&
				(want != "compaction done" || strings.Contains(line, "outcome=compacted"))
		}
		if !found {
			t.Errorf("no INFO line %q naming the session, why and outcome in the host's log:\n%s", want, r.logs.String())
		}
	}

	// A session whose process still runs (this test's) past CompactWait is not compacted:
	// session.compacted ends its compacting, and no claude runs.
	must(t, os.Remove(r.record))
	r.call(MethodTurn, map[string]any{"sessionID": "p1", "text": reply, "headless": true, "pid": os.Getpid()})
	r.call("tui.executeCommand", map[string]any{"command": "session_compact", "sessionID": "p1"})
	if typ, p := r.next(); typ != "session.compacted" || p["sessionID"] != "p1" {
		t.Fatalf("compacting a session whose process runs: %s %v, want its session.compacted", typ, p)
	}
	if _, err := os.Stat(r.record); err == nil {
		t.Fatal("claude ran beside the session's live process")
	}
}
