package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/adapters/claudecode"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// hook runs thatch hook event with input as its standard input, against c, and returns
// what it printed.
func hook(t *testing.T, c daemon.Config, event, input string) string {
	t.Helper()
	var out bytes.Buffer
	h := &hookCommand{stdin: strings.NewReader(input)}
	if err := h.Run(context.Background(), c, &out, []string{event}); err != nil {
		t.Fatalf("thatch hook %s returned %v: a hook never fails", event, err)
	}
	return out.String()
}

// additional is the additionalContext a SessionStart hook printed.
func additional(t *testing.T, out string) string {
	t.Helper()
	var v struct {
		H struct {
			Event   string `json:"hookEventName"`
			Context string `json:"additionalContext"`
		} `json:"hookSpecificOutput"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.H.Event != "SessionStart" {
		t.Fatalf("SessionStart printed %q, not Claude Code's hookSpecificOutput (%v)", out, err)
	}
	return v.H.Context
}

// TestClaudeCodeHooks: thatch hook makes Claude Code's sessions sessions of a host of
// their own, keyed by the repository's root commit: SessionStart says hello and prints the
// reminder and the project's memories as additionalContext; PostToolUse journals an entry;
// a wrap-up command arms the session. (Inputs as the real Claude Code writes them.)
func TestClaudeCodeHooks(t *testing.T) {
	r := newRig(t, "v1")
	r.start()
	repo := t.TempDir()
	for _, args := range [][]string{{"init", "-q", "."}, {"-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "root"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	root, err := exec.Command("git", "-C", repo, "rev-list", "--max-parents=0", "HEAD").Output()
	must(t, err)
	key := strings.TrimSpace(string(root))
	start := func(sid string) string {
		return hook(t, r.cfg, "SessionStart", fmt.Sprintf(`{"session_id":%q,"transcript_path":"/x/%s.jsonl","cwd":%q,"hook_event_name":"SessionStart","source":"startup"}`, sid, sid, repo))
	}

	text := additional(t, start("cc-one"))
	if !strings.Contains(text, "[thatch] This session's tool calls are recorded") || strings.Contains(text, "Memories of this project:\n") {
		t.Fatalf("the first session's start text:\n%s", text)
	}
	host := daemon.ClaudeCodeHostID(r.cfg)
	s := r.sessions()["cc-one"]
	if s.HostID != host || s.Kind != runtime.KindTop || s.Directory != repo {
		t.Fatalf("session cc-one is %+v, want a top-level session of host %s in %s", s, host, repo)
	}
	if n := r.status().Hosts; n != 1 {
		t.Fatalf("thatch counts %d hosts online, want %s alone (the rig's fake host said no hello)", n, host)
	}

	// A memory the session writes is its repository's (the root commit) and reaches the
	// next session's start.
	r.tool(context.Background(), protocol.ToolRemember, "cc-one", map[string]any{"content": "make check runs staticcheck", "kind": "command"})
	if m := r.memories(key); len(m) != 1 || m[0].Content != "make check runs staticcheck" {
		t.Fatalf("project %s holds %+v", key, m)
	}
	if text := additional(t, start("cc-two")); !strings.Contains(text, "Memories of this project:\n- [") || !strings.Contains(text, "(command) make check runs staticcheck") {
		t.Fatalf("the second session's start text lacks the memory:\n%s", text)
	}

	// PostToolUse journals an entry; thatch's own tools are not journaled (rule 1).
	if out := hook(t, r.cfg, "PostToolUse", `{"session_id":"cc-one","cwd":"`+repo+`","prompt_id":"p1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"make check"},"tool_response":{"stdout":"ok","stderr":""},"tool_use_id":"toolu_1"}`); out != "" {
		t.Fatalf("PostToolUse printed %q", out)
	}
	hook(t, r.cfg, "PostToolUse", `{"session_id":"cc-one","cwd":"`+repo+`","hook_event_name":"PostToolUse","tool_name":"mcp__thatch__memory_search","tool_input":{"query":"x"},"tool_response":"none","tool_use_id":"toolu_2"}`)
	waitFor(t, "the entry of toolu_1", func() bool {
		es := r.entries("cc-one")
		return len(es) == 1 && es[0].ID == "toolu_1" && es[0].State == "pending"
	})

	// /thatch:compact arms the session's wrap-up.
	hook(t, r.cfg, "UserPromptSubmit", `{"session_id":"cc-one","cwd":"`+repo+`","prompt_id":"p2","hook_event_name":"UserPromptSubmit","prompt":"/thatch:compact"}`)
	waitFor(t, "cc-one armed for compact", func() bool { return r.sessions()["cc-one"].WrapUp == runtime.WrapCompact })

	// Its Stop hands thatch the reply, which ends with the token: greenlit (rule 6). The
	// session is interactive, which nothing outside Claude Code compacts: the compacting
	// flag clears, and the hook tells the user to run /compact.
	t.Setenv("CLAUDE_CODE_ENTRYPOINT", "cli")
	out := hook(t, r.cfg, "Stop", `{"session_id":"cc-one","cwd":"`+repo+`","prompt_id":"p2","hook_event_name":"Stop","last_assistant_message":"Flushed.\n\nTHATCH_COMPACT_READY"}`)
	if !strings.Contains(out, `"systemMessage"`) || !strings.Contains(out, "/compact") {
		t.Fatalf("the Stop of a greenlit /thatch:compact printed %q, want a systemMessage naming /compact", out)
	}
	waitFor(t, "cc-one's /thatch:compact greenlit", func() bool {
		s := r.sessions()["cc-one"]
		return s.WrapUp == runtime.WrapNone && !s.Compacting && s.Refused == nil
	})

	// A reply without the token: the wrap-up does not proceed, and the Stop prints nothing.
	hook(t, r.cfg, "UserPromptSubmit", `{"session_id":"cc-one","cwd":"`+repo+`","prompt_id":"p3","hook_event_name":"UserPromptSubmit","prompt":"/thatch:exit"}`)
	waitFor(t, "cc-one armed for exit", func() bool { return r.sessions()["cc-one"].WrapUp == runtime.WrapExit })
	if out := hook(t, r.cfg, "Stop", `{"session_id":"cc-one","cwd":"`+repo+`","prompt_id":"p3","hook_event_name":"Stop","last_assistant_message":"Blocked: I need your answer first."}`); out != "" {
		t.Fatalf("the Stop of a refused /thatch:exit printed %q", out)
	}
	waitFor(t, "cc-one's /thatch:exit refused", func() bool {
		s := r.sessions()["cc-one"]
		return s.Refused != nil && s.Refused.Command == runtime.WrapExit
	})
}

// TestClaudeCodeHookWithoutThatch: with thatch down, a hook prints nothing, fails nothing
// and returns within its budget; in thatch's own extraction child it does nothing at all.
func TestClaudeCodeHookWithoutThatch(t *testing.T) {
	c, err := daemon.LoadConfig()
	must(t, err)
	c.DataDir, c.NATSURL = t.TempDir(), fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	began := time.Now()
	if out := hook(t, c, "SessionStart", `{"session_id":"s","cwd":"/","hook_event_name":"SessionStart","source":"startup"}`); out != "" {
		t.Fatalf("SessionStart without thatch printed %q", out)
	}
	if took := time.Since(began); took > hookBudget+time.Second {
		t.Fatalf("a hook without thatch took %s, over its budget %s", took, hookBudget)
	}
	t.Setenv(claudecode.ChildEnv, "1")
	if out := hook(t, c, "SessionStart", `not even JSON`); out != "" {
		t.Fatalf("a hook in the extraction child printed %q", out)
	}
}

// TestMCPExtractionChild: thatch mcp --extraction SESSION, as Claude Code starts it for
// thatch's headless extraction child, serves that child over stdio: the memory tools and
// the extraction tools, its calls the child's (it claims its parent's entries, writes to
// the parent's project, completes them), and every answer text alone, since Claude Code
// gives its model a tool's structured content instead of its text.
func TestMCPExtractionChild(t *testing.T) {
	repo, root := gitRepo(t)
	r := newEmbeddedRig(t, "v1")
	r.start()
	ctx := r.ctx()
	must(t, r.host.Hello(ctx, "b1"))
	r.opencodeSession(ctx, "ses_p", repo, root)
	must(t, r.host.ToolExecuted(ctx, "ses_p", "call_1", "bash", "ok"))
	// The idle starts an extraction: thatch creates the child on the host (which plays no
	// turn: the test plays it through thatch mcp).
	_, err := r.host.Publish(ctx, "session.status", map[string]any{"sessionID": "ses_p", "status": map[string]any{"type": "idle"}})
	must(t, err)
	var childID string
	waitFor(t, "thatch's extraction child", func() bool {
		for id, s := range r.sessions() {
			if s.Kind == runtime.KindExtraction && s.ParentID == "ses_p" {
				childID = id
			}
		}
		return childID != ""
	})
	cs := mcpSession(t, r.mcpEnv(), repo, nil, "--extraction", childID)
	tools, err := cs.ListTools(ctx, nil)
	must(t, err)
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.OutputSchema != nil {
			t.Errorf("the child's tool %s has an output schema: its answers must be text alone", tl.Name)
		}
	}
	for _, want := range []string{protocol.ToolPayload, protocol.ToolDone, protocol.ToolRemember, protocol.ToolSearch, protocol.ToolUpdate, protocol.ToolForget} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("thatch mcp --extraction lists %v, missing %s", names, want)
		}
	}
	payload := toolOK(t, cs, protocol.ToolPayload, map[string]any{})
	if !strings.Contains(text(payload), "echo call_1") || payload.StructuredContent != nil {
		t.Fatalf("the payload: text %q, structured %v", text(payload), payload.StructuredContent)
	}
	if es := r.entries("ses_p"); len(es) != 1 || es[0].State != "accepted" || es[0].ClaimedBy != childID {
		t.Fatalf("after the payload the entries are %+v, want call_1 claimed by %s", es, childID)
	}
	toolOK(t, cs, protocol.ToolRemember, map[string]any{"content": "echo call_1 prints its name", "kind": "command"})
	if m := r.memories(root); len(m) != 1 || m[0].Source.SessionID != childID {
		t.Fatalf("project %s holds %+v, want the child's memory", root, m)
	}
	done := toolOK(t, cs, protocol.ToolDone, map[string]any{"new": 1, "updated": 0, "deleted": 0})
	if done.StructuredContent != nil || len(r.entries("ses_p")) != 0 {
		t.Fatalf("done: %q %v; entries %+v", text(done), done.StructuredContent, r.entries("ses_p"))
	}
}
