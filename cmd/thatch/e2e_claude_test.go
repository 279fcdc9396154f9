//go:build e2e

package main

// The end-to-end test against the real Claude Code (make e2e): the claude binary that
// THATCH_E2E_CLAUDE names (testdata/e2e/setup-claude.sh installs the pinned one from npm),
// in a private HOME, against adapters/fakellm's scripted Anthropic model, with thatch serve
// and thatch install --host claude-code as a user runs them (docs/claude-code.md).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/fakellm"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

type ccE2E struct {
	t         *testing.T
	root      string
	home      string
	proj      string
	claude    string
	llm       *fakellm.Anthropic
	bin       string
	env       []string
	thatchLog string
	thatch    *exec.Cmd // thatch serve, while it runs
}

func TestClaudeCodeEndToEnd(t *testing.T) {
	claude := os.Getenv("THATCH_E2E_CLAUDE")
	if claude == "" {
		t.Fatal("THATCH_E2E_CLAUDE is unset: run make e2e")
	}
	x := &ccE2E{t: t, root: t.TempDir(), claude: claude, llm: &fakellm.Anthropic{}}
	x.home = filepath.Join(x.root, "home")
	x.proj = filepath.Join(x.root, "proj")
	must(t, os.MkdirAll(x.home, 0o755))
	must(t, os.MkdirAll(x.proj, 0o755))
	llm := httptest.NewServer(x.llm)
	defer llm.Close()
	x.bin = binary(t)
	dataDir := filepath.Join(x.root, "thatch")
	x.env = append(os.Environ(), "HOME="+x.home, "THATCH_DATA_DIR="+dataDir,
		"THATCH_NATS_LISTEN="+fmt.Sprintf("127.0.0.1:%d", freePort(t)), "THATCH_HTTP_LISTEN=off",
		"THATCH_INSTALL_COMMANDS=off", "THATCH_CLAUDE_BIN="+claude, "THATCH_LOG_FORMAT=json",
		// Claude Code talks to the scripted model alone, with a key it never checks.
		"ANTHROPIC_BASE_URL="+llm.URL, "ANTHROPIC_API_KEY=test", "DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1", "DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
	t.Cleanup(x.keepLogs)

	// The project: a git repository, whose root commit is its key under every host.
	x.git("init", "-q", ".")
	x.git("-c", "user.email=e2e@thatch", "-c", "user.name=e2e", "commit", "-q", "--allow-empty", "-m", "root")
	key := strings.TrimSpace(x.git("rev-list", "--max-parents=0", "HEAD"))

	// As docs/claude-code.md says: thatch install --host claude-code, then thatch serve.
	out, err := x.cli("install", "--host", "claude-code")
	if err != nil || !strings.Contains(string(out), "settings.json: thatch's hooks") {
		t.Fatalf("thatch install --host claude-code: %v\n%s", err, out)
	}
	t.Logf("thatch install --host claude-code:\n%s", out)
	list, _ := x.run(x.proj, "mcp", "list")
	if !strings.Contains(list, "thatch") {
		t.Fatalf("claude mcp list does not name thatch's MCP server:\n%s", list)
	}
	t.Logf("claude mcp list: %s", strings.TrimSpace(list))
	x.startThatch()

	// 1. A session's tool call is journaled; at the end of its turn a headless Claude Code
	// child extracts it through thatch's tools, on the small model, and writes a memory.
	res := x.session("please RUN echo thatch-cc-one")
	s1 := res.Session
	t.Logf("step 1: session %s ran its turn: %q", s1, res.Result)
	mem := x.memoryWith("The project ran: echo thatch-cc-one")
	if mem.Project != key {
		t.Fatalf("the memory's project is %q, want the repository's root commit %s", mem.Project, key)
	}
	t.Logf("step 1: the extraction wrote %s %q in project %s (the root commit)", mem.ID, mem.Content, mem.Project)
	// The ledger has the extraction's tokens and cost, from the child's JSON result, once
	// the child ended (it is read before the child is deleted, rule 14).
	var costs []runtime.CostRow
	x.eventually("the extraction in the ledger", func() bool {
		out, err := x.cli("costs", "--json")
		return err == nil && json.Unmarshal(out, &costs) == nil && len(costs) > 0
	})
	if len(costs) != 1 || costs[0].Project != key || costs[0].Extractions != 1 || costs[0].Entries != 1 || costs[0].TokensIn <= 0 || costs[0].TokensOut <= 0 ||
		costs[0].USD <= 0 || !slices.ContainsFunc(costs[0].Models, func(m string) bool { return strings.Contains(m, "haiku") }) {
		t.Fatalf("thatch costs: %+v, want one extraction of one entry of project %s with its tokens and cost on haiku", costs, key)
	}
	out, err = x.cli("entries", s1, "--json")
	must(t, err)
	if strings.Contains(string(out), "pending") || strings.Contains(string(out), "accepted") {
		t.Fatalf("session %s still has entries after its extraction: %s", s1, out)
	}
	var child []fakellm.AnthropicRequest
	for _, r := range x.llm.Log() {
		if slices.Contains(r.Tools, "mcp__thatch__thatch_get_extraction_payload") {
			child = append(child, r)
		}
	}
	if len(child) < 3 {
		t.Fatalf("%d model requests of an extraction child, want its payload, remember and done turns", len(child))
	}
	for _, r := range child {
		if !strings.Contains(r.Model, "haiku") {
			t.Errorf("the extraction child ran on %q, want the small model (haiku)", r.Model)
		}
		for _, tool := range r.Tools {
			if !strings.HasPrefix(tool, "mcp__thatch__") && tool != "DeferredToolPlaceholder" {
				t.Errorf("the extraction child was offered %q: it must have thatch's tools alone", tool)
			}
		}
	}
	t.Logf("step 1: the child made %d model requests on %s, offered %v", len(child), child[0].Model, child[0].Tools)
	var childIn, childOut int
	for _, r := range child {
		childIn, childOut = childIn+r.InputTokens, childOut+r.OutputTokens
	}
	// Claude Code's JSON result sums the usage of every request of the child's run.
	if costs[0].TokensIn != int64(childIn) || costs[0].TokensOut != int64(childOut) {
		t.Errorf("the ledger has %d in and %d out, the model reported %d and %d to the child", costs[0].TokensIn, costs[0].TokensOut, childIn, childOut)
	}
	t.Logf("step 1: the ledger has %d in, %d out, $%.6f on %v (as the model reported them)", costs[0].TokensIn, costs[0].TokensOut,
		costs[0].USD, costs[0].Models)

	// Nothing is left behind: no extraction session tracked, no transcript of the child.
	var sessions []struct{ SessionID, Kind string }
	out, err = x.cli("sessions", "--json")
	must(t, err)
	must(t, json.Unmarshal(out, &sessions))
	for _, s := range sessions {
		if s.Kind == "extraction" {
			t.Errorf("extraction session %s is still tracked", s.SessionID)
		}
	}
	transcripts, _ := filepath.Glob(filepath.Join(x.home, ".claude", "projects", "*", "*.jsonl"))
	if len(transcripts) != 1 || !strings.HasSuffix(transcripts[0], s1+".jsonl") {
		t.Errorf("Claude Code's transcripts %v, want the user's session's alone", transcripts)
	}

	// 2. The next session's first model request carries the memory.
	res = x.session("hello, memories")
	first := x.firstRequest("hello, memories")
	if !strings.Contains(first.Text, "SessionStart hook additional context: [thatch] This session's tool calls are recorded") ||
		!strings.Contains(first.Text, "/thatch:compact") || strings.Contains(first.Text, "/thatch/compact") ||
		!strings.Contains(first.Text, "Memories of this project:") || !strings.Contains(first.Text, "["+mem.ID+"] (command) The project ran: echo thatch-cc-one") {
		t.Fatalf("the first model request of %s lacks the memory:\n%s", res.Session, first.Text)
	}
	t.Logf("step 2: the first model request of %s carries %s", res.Session, mem.ID)

	// 3. One repository, one set of memories: a memory written from an opencode session
	// of the same repository (a protocol host whose sessions carry opencode's projectID,
	// the root commit) reaches the next Claude Code session, and the Claude Code memory
	// reaches the opencode session's start text.
	oc := x.opencodeSession(key)
	ocMem := x.tool(oc, protocol.ToolRemember, map[string]any{"content": "opencode says: run make e2e before a release", "kind": "fact"})
	res = x.session("hello again, memories")
	first = x.firstRequest("hello again, memories")
	if !strings.Contains(first.Text, "opencode says: run make e2e before a release") {
		t.Fatalf("the Claude Code session %s does not get the opencode session's memory %s:\n%s", res.Session, ocMem, first.Text)
	}
	start := x.api("session.context", map[string]string{"sessionID": oc})
	if !strings.Contains(start, "The project ran: echo thatch-cc-one") {
		t.Fatalf("the opencode session's start text lacks the Claude Code memory:\n%s", start)
	}
	t.Logf("step 3: the opencode session's memory reaches Claude Code session %s, and the Claude Code memory the opencode session", res.Session)

	// 5. /thatch:compact (rule 6): the session's model flushes the session's pending
	// entries through its own thatch mcp (Claude Code gives it the session's id) and
	// replies the token; the Stop hook hands thatch that reply, the idle greenlights it,
	// and thatch compacts the session with claude -p /compact --resume once its process
	// has ended: its transcript gets Claude Code's compact boundary.
	res = x.session("hello, wrap-up")
	s5 := res.Session
	// A tool call of the session, still pending: thatch hook PostToolUse, as Claude Code
	// runs it (step 1 shows Claude Code running it).
	x.hook("PostToolUse", map[string]any{"session_id": s5, "cwd": x.proj, "hook_event_name": "PostToolUse", "tool_name": "Bash",
		"tool_input": map[string]any{"command": "echo thatch-cc-wrap"}, "tool_response": map[string]any{"stdout": "thatch-cc-wrap", "stderr": ""},
		"tool_use_id": "toolu_wrap1"})
	x.eventually("the wrap-up's entry pending", func() bool { return x.liveSession(s5).Pending == 1 })
	res = x.resume(s5, "/thatch:compact END WITH THATCH_COMPACT_READY")
	if last := strings.TrimSpace(res.Result); !strings.HasSuffix(last, "\nTHATCH_COMPACT_READY") {
		t.Fatalf("/thatch:compact's reply %q does not end with the token", last)
	}
	wrapMem := x.memoryWith("The project ran: echo thatch-cc-wrap")
	var flush []fakellm.AnthropicRequest
	for _, r := range x.llm.Log() {
		if strings.Contains(r.LastUser, "Pre-compact wrap-up checklist") {
			flush = append(flush, r)
		}
	}
	// Claude Code defers MCP tools in a main session: the model loads them with ToolSearch.
	if len(flush) < 4 || strings.Contains(flush[0].Model, "haiku") || !slices.Contains(flush[len(flush)-1].Tools, "mcp__thatch__thatch_get_extraction_payload") {
		var tools []string
		var last string
		if len(flush) > 0 {
			tools, last = flush[0].Tools, flush[0].LastUser
		}
		t.Fatalf("the session's own model did not flush: %d requests of /thatch:compact's turn, offered %v, asked:\n%s", len(flush), tools, last)
	}
	t.Logf("step 5: the session's model (%s) flushed its entry through thatch's tools: %s", flush[0].Model, wrapMem.ID)
	transcripts, _ = filepath.Glob(filepath.Join(x.home, ".claude", "projects", "*", s5+".jsonl"))
	if len(transcripts) != 1 {
		t.Fatalf("no transcript of session %s: %v", s5, transcripts)
	}
	x.eventually("Claude Code's compact boundary in the session's transcript", func() bool {
		data, _ := os.ReadFile(transcripts[0])
		return bytes.Contains(data, []byte(`"compact_boundary"`))
	})
	x.eventually("the session compacted, nothing pending or claimed", func() bool {
		v := x.liveSession(s5)
		return v.SessionID != "" && !v.Compacting && v.Pending == 0 && v.Accepted == 0 && v.WrapUp == ""
	})
	if log, _ := os.ReadFile(x.thatchLog); !bytes.Contains(log, []byte("wrap-up greenlit")) || !bytes.Contains(log, []byte(`"command":"thatch:compact"`)) {
		t.Fatalf("thatch's log does not say /thatch:compact was greenlit")
	}
	out, err = x.cli("costs", "--json")
	must(t, err)
	must(t, json.Unmarshal(out, &costs))
	if len(costs) != 1 || costs[0].Extractions != 1 {
		t.Errorf("thatch costs: %+v, want step 1's extraction alone (the flush was the session's own)", costs)
	}
	t.Logf("step 5: /thatch:compact greenlit; claude -p /compact --resume %s compacted it", s5)

	// 6. /thatch:exit: greenlit, the session leaves the live directory.
	res = x.session("hello, exit")
	s6 := res.Session
	x.eventually("the session live", func() bool { return x.liveSession(s6).SessionID == s6 })
	res = x.resume(s6, "/thatch:exit END WITH THATCH_EXIT_READY")
	x.eventually("the exited session out of the live directory", func() bool { return x.liveSession(s6).SessionID == "" })
	t.Logf("step 6: /thatch:exit greenlit: %s left the live directory", s6)

	// 7. A wrap-up the model does not greenlight (no token) warns, and the session stays.
	res = x.session("hello, refused")
	s7 := res.Session
	res = x.resume(s7, "/thatch:exit")
	x.eventually("the refusal", func() bool {
		v := x.liveSession(s7)
		return v.Refused != nil && v.Refused.Command == runtime.WrapExit
	})
	if log, _ := os.ReadFile(x.thatchLog); !bytes.Contains(log, []byte("/thatch:exit did not proceed")) {
		t.Errorf("thatch's log has no warning toast for the refused /thatch:exit")
	}
	t.Logf("step 7: /thatch:exit without the token: a warning, and %s stays live", s7)

	// 8. memory_search's lines reach a Claude Code model: Claude Code shows it the
	// structured content, which carries them too (text).
	x.resume(s7, "SEARCH thatch-cc-wrap")
	var after *fakellm.AnthropicRequest
	for _, r := range x.llm.Log() {
		if strings.Contains(r.LastUser, "SEARCH thatch-cc-wrap") && strings.Contains(r.Text, "thatch-cc-wrap") && r.Model == flush[0].Model {
			after = &r
		}
	}
	if after == nil || !strings.Contains(after.Text, wrapMem.ID+" (command) The project ran: echo thatch-cc-wrap") {
		t.Fatalf("the model request after memory_search lacks its line %s (command) …", wrapMem.ID)
	}
	t.Logf("step 8: the model request after memory_search carries %s's line", wrapMem.ID)

	// 4. thatch not running: a hook answers at once with nothing, and the turn goes on.
	x.stopThatch()
	began := time.Now()
	res = x.session("hello while thatch is away")
	if res.IsError || res.Result == "" {
		t.Fatalf("a session while thatch is down failed: %+v", res)
	}
	t.Logf("step 4: with thatch down, a session ran its turn in %s: %q", time.Since(began).Round(time.Millisecond), res.Result)
}

// ccResult is what claude -p --output-format json prints.
type ccResult struct {
	Session string  `json:"session_id"`
	Result  string  `json:"result"`
	IsError bool    `json:"is_error"`
	Cost    float64 `json:"total_cost_usd"`
}

// session runs one headless Claude Code session of one turn in the project.
func (x *ccE2E) session(prompt string) ccResult {
	x.t.Helper()
	out, errOut := x.run(x.proj, "-p", prompt, "--output-format", "json", "--allowedTools", "Bash")
	var r ccResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Session == "" {
		x.t.Fatalf("claude -p %q printed no result (%v):\n%s\n%s", prompt, err, out, errOut)
	}
	return r
}

// resume runs one more headless turn of session.
func (x *ccE2E) resume(session, prompt string) ccResult {
	x.t.Helper()
	out, errOut := x.run(x.proj, "-p", prompt, "--resume", session, "--output-format", "json", "--allowedTools", "Bash")
	var r ccResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Session != session {
		x.t.Fatalf("claude -p %q --resume %s printed no result of that session (%v):\n%s\n%s", prompt, session, err, out, errOut)
	}
	return r
}

// hook runs thatch hook event with input on its standard input, as Claude Code does.
func (x *ccE2E) hook(event string, input map[string]any) {
	x.t.Helper()
	data, _ := json.Marshal(input)
	cmd := exec.Command(x.bin, "hook", event)
	cmd.Env, cmd.Dir, cmd.Stdin = x.env, x.proj, bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		x.t.Fatalf("thatch hook %s: %v\n%s", event, err, out)
	}
}

// session5 is the live session id as thatch sessions lists it (a zero row when it is not).
func (x *ccE2E) liveSession(id string) runtime.SessionView {
	x.t.Helper()
	out, err := x.cli("sessions", "--json")
	var rows []runtime.SessionView
	if err != nil || json.Unmarshal(out, &rows) != nil {
		return runtime.SessionView{}
	}
	for _, r := range rows {
		if r.SessionID == id {
			return r
		}
	}
	return runtime.SessionView{}
}

// run runs claude with args in dir.
func (x *ccE2E) run(dir string, args ...string) (string, string) {
	x.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, x.claude, args...)
	cmd.Dir, cmd.Env = dir, x.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		x.t.Logf("claude %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), errb.String()
}

func (x *ccE2E) git(args ...string) string {
	x.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = x.proj
	out, err := cmd.CombinedOutput()
	if err != nil {
		x.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (x *ccE2E) cli(args ...string) ([]byte, error) { return runThatch(x.bin, x.env, args...) }

func (x *ccE2E) startThatch() {
	x.t.Helper()
	x.thatchLog = filepath.Join(x.root, "thatch.log")
	x.thatch = serveProcess(x.t, x.t, x.bin, x.env, x.thatchLog)
	x.eventually("thatch to answer", func() bool {
		_, err := x.cli("status", "--json")
		return err == nil
	})
}

func (x *ccE2E) stopThatch() {
	must(x.t, x.thatch.Process.Signal(os.Interrupt))
	_ = x.thatch.Wait()
}

func (x *ccE2E) eventually(what string, cond func() bool) {
	x.t.Helper()
	if !poll(90*time.Second, cond) {
		x.t.Fatalf("timed out waiting for %s", what)
	}
}

type ccMemory struct{ ID, Kind, Content, Project string }

// memoryWith waits for a memory with content.
func (x *ccE2E) memoryWith(content string) ccMemory {
	x.t.Helper()
	var found ccMemory
	x.eventually("a memory "+content, func() bool {
		out, err := x.cli("memories", "--json")
		var mems []ccMemory
		if err != nil || json.Unmarshal(out, &mems) != nil {
			return false
		}
		for _, m := range mems {
			if m.Content == content {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// firstRequest is the first model request whose last user text holds text.
func (x *ccE2E) firstRequest(text string) fakellm.AnthropicRequest {
	x.t.Helper()
	for _, r := range x.llm.Log() {
		if strings.Contains(r.LastUser, text) {
			return r
		}
	}
	x.t.Fatalf("no model request carried %q", text)
	return fakellm.AnthropicRequest{}
}

// conn connects to thatch's embedded broker with its token.
func (x *ccE2E) conn() *nats.Conn {
	x.t.Helper()
	var addr, dataDir string
	for _, kv := range x.env {
		if v, ok := strings.CutPrefix(kv, "THATCH_NATS_LISTEN="); ok {
			addr = v
		}
		if v, ok := strings.CutPrefix(kv, "THATCH_DATA_DIR="); ok {
			dataDir = v
		}
	}
	token, err := os.ReadFile(filepath.Join(dataDir, "broker.token"))
	must(x.t, err)
	nc, err := nats.Connect("nats://"+addr, nats.Token(strings.TrimSpace(string(token))))
	must(x.t, err)
	x.t.Cleanup(nc.Close)
	return nc
}

// opencodeSession publishes, as an opencode host does, a session of the project whose
// opencode projectID is key, and returns its id.
func (x *ccE2E) opencodeSession(key string) string {
	x.t.Helper()
	nc := x.conn()
	js, err := jetstream.New(nc)
	must(x.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub := func(id, typ string, props map[string]any) {
		body, _ := json.Marshal(map[string]any{"id": id, "type": typ, "properties": props})
		msg := nats.NewMsg("opencode.oc-e2e.event." + typ)
		msg.Data = body
		msg.Header.Set(jetstream.MsgIDHeader, id)
		_, err := js.PublishMsg(ctx, msg)
		must(x.t, err)
	}
	pub("oc_hello", protocol.EventHostHello, map[string]any{"hostID": "oc-e2e", "api": "v1", "version": "1.18.33", "bootID": "b1",
		"directory": x.proj, "worktree": x.proj, "projectID": key, "capabilities": map[string]any{"context": true}})
	pub("oc_created", protocol.EventSessionCreated, map[string]any{"sessionID": "ses_oc1",
		"info": map[string]any{"id": "ses_oc1", "directory": x.proj, "projectID": key, "title": "opencode"}})
	return "ses_oc1"
}

// tool calls a thatch tool as session, and returns its output.
func (x *ccE2E) tool(session, name string, args any) string {
	x.t.Helper()
	body, _ := json.Marshal(map[string]any{"sessionID": session, "callID": "e2e_" + name, "args": args})
	return x.request("thatch.tool."+name, body)
}

// api calls thatch's API method and returns its text result.
func (x *ccE2E) api(method string, params any) string {
	x.t.Helper()
	body, _ := json.Marshal(params)
	var r struct{ Text string }
	must(x.t, json.Unmarshal([]byte(x.request("thatch.api."+method, body)), &r))
	return r.Text
}

func (x *ccE2E) request(subject string, body []byte) string {
	x.t.Helper()
	m, err := x.conn().Request(subject, body, 30*time.Second)
	must(x.t, err)
	res, rerr, err := protocol.Decode(m.Data)
	must(x.t, err)
	if rerr != nil {
		x.t.Fatalf("%s: %s: %s", subject, rerr.Name, rerr.Message)
	}
	return string(res)
}

// keepLogs copies thatch's log to THATCH_E2E_LOGS when set, and shows its end on failure.
func (x *ccE2E) keepLogs() {
	if x.thatchLog == "" {
		return
	}
	data, _ := os.ReadFile(x.thatchLog)
	if dir := os.Getenv("THATCH_E2E_LOGS"); dir != "" {
		_ = os.MkdirAll(dir, 0o755)
		_ = os.WriteFile(filepath.Join(dir, "thatch-claude.log"), data, 0o644)
	}
	if x.t.Failed() {
		lines := strings.Split(string(data), "\n")
		x.t.Logf("thatch's log, last lines:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

// TestCrossHostEndToEnd: one repository, one set of memories, under the real opencode and
// the real Claude Code at once, each against its scripted model, with one thatch: a memory
// that an opencode session's extraction wrote is in the first model request of a Claude
// Code session in the same repository, and a memory that a Claude Code session's
// extraction wrote is in the next opencode session's.
func TestCrossHostEndToEnd(t *testing.T) {
	ocBin, modules, claude := os.Getenv("THATCH_E2E_OPENCODE"), os.Getenv("THATCH_E2E_MODULES"), os.Getenv("THATCH_E2E_CLAUDE")
	if ocBin == "" || modules == "" || claude == "" {
		t.Fatal("THATCH_E2E_OPENCODE, THATCH_E2E_MODULES and THATCH_E2E_CLAUDE are unset: run make e2e")
	}
	x := &e2e{t: t, main: t, root: t.TempDir(), hc: &http.Client{Timeout: 60 * time.Second}, llm: &fakellm.Server{}}
	t.Cleanup(x.keepLogs)
	defer x.hc.CloseIdleConnections()
	llm := httptest.NewServer(x.llm)
	defer llm.Close()
	ant := &fakellm.Anthropic{}
	antSrv := httptest.NewServer(ant)
	defer antSrv.Close()
	home := filepath.Join(x.root, "home")
	x.ocURL = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	x.bin = binary(t)
	x.env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"THATCH_DATA_DIR="+filepath.Join(x.root, "thatch"), "THATCH_NATS_LISTEN="+fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"THATCH_SHIM_LISTEN="+fmt.Sprintf("127.0.0.1:%d", freePort(t)), "THATCH_OPENCODE_URL="+x.ocURL, "THATCH_HTTP_LISTEN=off",
		"OPENCODE_SERVER_PASSWORD="+ocPassword, "THATCH_LOG_FORMAT=json", "THATCH_CLAUDE_BIN="+claude,
		"ANTHROPIC_BASE_URL="+antSrv.URL, "ANTHROPIC_API_KEY=test", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1",
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
	for _, args := range [][]string{{"install"}, {"install", "--host", "claude-code"}} {
		if out, err := x.cli(args...); err != nil {
			t.Fatalf("thatch %v: %v\n%s", args, err, out)
		}
	}
	x.startOpencode(ocBin, modules, llm.URL, home)
	cc := &ccE2E{t: t, root: x.root, home: home, proj: x.proj, claude: claude, llm: ant, bin: x.bin, env: x.env}
	cc.git("init", "-q", ".")
	cc.git("-c", "user.email=e2e@thatch", "-c", "user.name=e2e", "commit", "-q", "--allow-empty", "-m", "root")
	key := strings.TrimSpace(cc.git("rev-list", "--max-parents=0", "HEAD"))
	ctx, cancel := context.WithCancel(context.Background())
	watching := x.watch(ctx)
	defer func() { cancel(); <-watching }()
	x.startThatch()

	// opencode → Claude Code.
	s1 := x.session(x.proj, "opencode side")
	x.runTool(s1, "echo from-opencode")
	ocMem := cc.memoryWith("The project ran: echo from-opencode")
	if ocMem.Project != key {
		t.Fatalf("opencode's memory is in project %q, want the root commit %s", ocMem.Project, key)
	}
	cc.session("hello from Claude Code")
	if first := cc.firstRequest("hello from Claude Code"); !strings.Contains(first.Text, "["+ocMem.ID+"] (command) The project ran: echo from-opencode") {
		t.Fatalf("the Claude Code session's first request lacks opencode's memory %s:\n%s", ocMem.ID, first.Text)
	}
	t.Logf("opencode's memory %s (project %s) is in the Claude Code session's first model request", ocMem.ID, key)

	// Claude Code → opencode.
	cc.session("please RUN echo from-claude-code")
	ccMem := cc.memoryWith("The project ran: echo from-claude-code")
	if ccMem.Project != key {
		t.Fatalf("Claude Code's memory is in project %q, want %s", ccMem.Project, key)
	}
	// The Claude Code child has ended once its cost is in the ledger (read before its
	// deletion): nothing of it outlives the test.
	x.eventually("both extractions in the ledger", func() bool {
		var costs []runtime.CostRow
		out, err := x.cli("costs", "--json")
		return err == nil && json.Unmarshal(out, &costs) == nil && len(costs) == 1 && costs[0].Extractions == 2
	})
	s2 := x.session(x.proj, "opencode again")
	x.post("/session/"+s2+"/message", map[string]any{"parts": []any{map[string]string{"type": "text", "text": "hello from opencode"}}}, nil)
	r, ok := x.firstRequest("hello from opencode")
	if !ok || !strings.Contains(r.System, "["+ccMem.ID+"] (command) The project ran: echo from-claude-code") {
		t.Fatalf("the opencode session's first request lacks Claude Code's memory %s:\n%s", ccMem.ID, r.System)
	}
	t.Logf("Claude Code's memory %s is in the opencode session's first model request", ccMem.ID)
}
