package claudecode

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/runtime"
)

// The inputs are what the real Claude Code 2.1.328 wrote on its hooks' standard input
// (docs/claude-code.md), cut to what thatch reads.
const (
	startIn = `{"session_id":"s1","transcript_path":"/h/.claude/projects/-p/s1.jsonl","cwd":"/p","hook_event_name":"SessionStart","source":"startup"}`
	toolIn  = `{"session_id":"s1","cwd":"/p","prompt_id":"p1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"echo hi","description":"d"},"tool_response":{"stdout":"hi","stderr":"","interrupted":false,"isImage":false},"tool_use_id":"toolu_1","duration_ms":824}`
	failIn  = `{"session_id":"s1","cwd":"/p","prompt_id":"p1","hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_input":{"command":"ls /x"},"tool_use_id":"toolu_2","error":"Exit code 2\nls: cannot access '/x'","is_interrupt":false}`
	stopIn  = `{"session_id":"s1","cwd":"/p","prompt_id":"p1","hook_event_name":"Stop","stop_hook_active":false,"last_assistant_message":"done"}`
	endIn   = `{"session_id":"s1","cwd":"/p","prompt_id":"p1","hook_event_name":"SessionEnd","reason":"other"}`
	userIn  = `{"session_id":"s1","cwd":"/p","prompt_id":"p2","hook_event_name":"UserPromptSubmit","prompt":"/thatch:compact now"}`
	mcpIn   = `{"session_id":"s1","cwd":"/p","hook_event_name":"PostToolUse","tool_name":"mcp__thatch__memory_search","tool_input":{"query":"x"},"tool_response":"mem_1 (fact) x","tool_use_id":"toolu_3"}`
)

func events(t *testing.T, in string) []Event {
	t.Helper()
	var hi Input
	if err := json.Unmarshal([]byte(in), &hi); err != nil {
		t.Fatal(err)
	}
	evs, err := Events(hi, "rootcommit", "seq1")
	if err != nil {
		t.Fatal(err)
	}
	// Every event decodes as the runtime decodes a host's.
	for _, e := range evs {
		body, err := e.Body()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := runtime.DecodeEvent("opencode", "opencode.cc-x.event."+e.Type, body); err != nil {
			t.Errorf("%s: the runtime refuses %s: %v", in, body, err)
		}
	}
	return evs
}

func TestEvents(t *testing.T) {
	evs := events(t, startIn)
	if len(evs) != 1 || evs[0].Type != "session.created" || evs[0].ID != "cc_created_s1" {
		t.Fatalf("SessionStart: %+v", evs)
	}
	if info := evs[0].Props["info"].(map[string]any); info["projectID"] != "rootcommit" || info["directory"] != "/p" || info["id"] != "s1" {
		t.Fatalf("SessionStart's Session: %v", info)
	}
	if evs := events(t, strings.Replace(startIn, `"startup"`, `"compact"`, 1)); len(evs) != 2 || evs[1].Type != "session.compacted" {
		t.Fatalf("SessionStart after a compaction: %+v", evs)
	}

	evs = events(t, toolIn)
	p := evs[0].Props
	if len(evs) != 1 || evs[0].Type != "tool.execute.after" || p["callID"] != "toolu_1" || p["tool"] != "bash" || p["output"] != "hi" ||
		p["args"].(map[string]any)["command"] != "echo hi" || evs[0].ID != "cc_tool_s1_toolu_1" {
		t.Fatalf("PostToolUse: %+v", evs)
	}
	if evs := events(t, failIn); len(evs) != 1 || evs[0].Props["output"] != "Exit code 2\nls: cannot access '/x'" || evs[0].Props["callID"] != "toolu_2" {
		t.Fatalf("PostToolUseFailure: %+v", evs)
	}
	if evs := events(t, mcpIn); evs[0].Props["tool"] != "memory_search" || evs[0].Props["output"] != "mem_1 (fact) x" {
		t.Fatalf("thatch's own tool through MCP keeps its name (rule 1 leaves it out): %+v", evs)
	}
	for _, in := range []string{stopIn, endIn} {
		evs := events(t, in)
		last := evs[len(evs)-1]
		if last.Type != "session.status" || last.Props["status"].(map[string]any)["type"] != "idle" {
			t.Fatalf("%s: %+v, want an idle", in, evs)
		}
	}
	if evs := events(t, stopIn); len(evs) != 2 || evs[0].Type != "session.updated" || evs[0].Props["info"].(map[string]any)["directory"] != "/p" ||
		evs[0].Props["info"].(map[string]any)["projectID"] != "rootcommit" {
		t.Fatalf("Stop: %+v, want the session's folder and project before its idle", evs)
	}
	evs = events(t, userIn)
	if len(evs) != 2 || evs[0].Props["status"].(map[string]any)["type"] != "busy" || evs[1].Type != "command.execute.before" ||
		evs[1].Props["command"] != "thatch/compact" {
		t.Fatalf("UserPromptSubmit of /thatch:compact: %+v", evs)
	}
	if evs := events(t, strings.Replace(userIn, "/thatch:compact now", "fix the bug", 1)); len(evs) != 1 {
		t.Fatalf("a plain prompt is a busy only: %+v", evs)
	}
	if _, err := Events(Input{Event: "Stop"}, "", "x"); err == nil {
		t.Fatal("an input without a session id maps to events")
	}
}

func TestHostIDAndContext(t *testing.T) {
	a, b := HostID("ann", "/d"), HostID("ann", "/e")
	if a == b || a != HostID("ann", "/d") || !strings.HasPrefix(a, "cc-") || len(a) != 15 {
		t.Fatalf("host ids %q %q", a, b)
	}
	out, err := ContextOutput("run /thatch/compact or /thatch/exit\nMemories of this project:\n- x")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		H struct {
			Event   string `json:"hookEventName"`
			Context string `json:"additionalContext"`
		} `json:"hookSpecificOutput"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.H.Event != "SessionStart" || v.H.Context != "run /thatch:compact or /thatch:exit\nMemories of this project:\n- x" {
		t.Fatalf("context output %s", out)
	}
}

// TestStopOutput: an interactive session's Stop shows the user what finishes a greenlit
// wrap-up thatch cannot do itself; a headless one, or any other reply, prints nothing.
func TestStopOutput(t *testing.T) {
	for _, c := range []struct {
		reply    string
		headless bool
		want     string
	}{
		{"Done.\n\nTHATCH_COMPACT_READY\n", false, "Run /compact now"},
		{"Done.\n  THATCH_EXIT_READY  ", false, "End it with /exit"},
		{"Done.\n\nTHATCH_COMPACT_READY", true, ""},
		{"THATCH_COMPACT_READY\nbut something blocks it", false, ""},
		{"", false, ""},
	} {
		out := StopOutput(Input{LastAssistant: c.reply}, c.headless)
		if c.want == "" {
			if out != nil {
				t.Errorf("%q (headless %v): printed %s, want nothing", c.reply, c.headless, out)
			}
			continue
		}
		var o struct {
			SystemMessage string `json:"systemMessage"`
		}
		if err := json.Unmarshal(out, &o); err != nil || !strings.Contains(o.SystemMessage, c.want) {
			t.Errorf("%q: printed %s, want a systemMessage saying %q", c.reply, out, c.want)
		}
	}
	if !Headless("sdk-cli") || !Headless("sdk-ts") || Headless("cli") || Headless("") {
		t.Error("Headless: sdk-… is headless, cli and nothing are not")
	}
}
