package claudecode

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// HostID is the host id of this user's Claude Code sessions for the thatch of dataDir:
// "cc-" and 12 hex digits of a hash of the user and the data folder, so every hook of one
// user that reaches one thatch speaks for one host, and thatch serve's responder answers
// for the same id.
func HostID(user, dataDir string) string {
	sum := sha256.Sum256([]byte(user + "\x00" + dataDir))
	return protocol.ClaudeCodeHostPrefix + hex.EncodeToString(sum[:6])
}

// Input is what Claude Code writes on a hook's standard input (the fields thatch reads).
type Input struct {
	SessionID      string          `json:"session_id"`
	TranscriptPath string          `json:"transcript_path"`
	Cwd            string          `json:"cwd"`
	Event          string          `json:"hook_event_name"`
	PromptID       string          `json:"prompt_id"`
	Source         string          `json:"source"`  // SessionStart: startup, resume, clear, compact
	Reason         string          `json:"reason"`  // SessionEnd
	Trigger        string          `json:"trigger"` // PreCompact: manual, auto
	Prompt         string          `json:"prompt"`  // UserPromptSubmit
	ToolName       string          `json:"tool_name"`
	ToolInput      json.RawMessage `json:"tool_input"`
	ToolResponse   json.RawMessage `json:"tool_response"`
	ToolUseID      string          `json:"tool_use_id"`
	Error          string          `json:"error"` // PostToolUseFailure
	StopHookActive bool            `json:"stop_hook_active"`
	// LastAssistant is Stop's last_assistant_message: the text of the turn's last reply,
	// which a wrap-up command's greenlight token ends (rule 6).
	LastAssistant string `json:"last_assistant_message"`
}

// Turn is what a Stop hook tells this host's responder of its session's turn, before the
// idle: the last reply's text (what session.messages answers for a wrap-up, rule 6),
// whether the session is headless (claude -p, which thatch can compact after its process
// ends) and that process's id.
type Turn struct {
	SessionID string `json:"sessionID"`
	Text      string `json:"text"`
	Headless  bool   `json:"headless"`
	PID       int    `json:"pid"`
}

// MethodTurn is the responder's method a Stop hook calls with its Turn: not a host API
// method thatch calls, but this host's own, on the same subject.
const MethodTurn = "claude.turn"

// Headless says whether a hook runs under a headless Claude Code: the entrypoint Claude
// Code gives its hooks' environment (CLAUDE_CODE_ENTRYPOINT) is sdk-cli for claude -p and
// sdk-… for the SDKs, cli for an interactive session.
func Headless(entrypoint string) bool { return strings.HasPrefix(entrypoint, "sdk") }

// lastLine is a text's last non-empty line, trimmed.
func lastLine(text string) string {
	lines := strings.Split(text, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}

// StopOutput is what a Stop hook prints: nothing, except in an interactive session whose
// reply ends with a wrap-up's greenlight token, where Claude Code shows the user a
// systemMessage. thatch cannot compact or close an interactive Claude Code session (its
// context lives in that process), so the message says what to do to finish the wrap-up.
func StopOutput(in Input, headless bool) []byte {
	if headless {
		return nil
	}
	var msg string
	switch lastLine(in.LastAssistant) {
	case runtime.WrapCompact.Token():
		msg = "thatch: the wrap-up is done and this session's memories are saved. Run /compact now: thatch cannot compact an interactive Claude Code session."
	case runtime.WrapExit.Token():
		msg = "thatch: the wrap-up is done and this session's memories are saved; thatch no longer lists it as live. End it with /exit."
	default:
		return nil
	}
	out, _ := json.Marshal(map[string]any{"systemMessage": msg})
	return out
}

// Event is one protocol event to publish for a hook: its id, type and properties.
type Event struct {
	ID    string
	Type  string
	Props map[string]any
}

// Body is the event's bus body.
func (e Event) Body() ([]byte, error) {
	return json.Marshal(map[string]any{"id": e.ID, "type": e.Type, "properties": e.Props})
}

// Info is the Session of a Claude Code session: its id, folder and project id (the key
// opencode gives the folder's repository; "" outside git).
func Info(in Input, projectID string) map[string]any {
	info := map[string]any{"id": in.SessionID, "directory": in.Cwd, "title": "claude-code"}
	if projectID != "" {
		info["projectID"] = projectID
	}
	return info
}

// wrapUp is the thatch wrap-up command a prompt runs, "thatch/compact" or "thatch/exit",
// or "": Claude Code names a custom command of ~/.claude/commands/thatch/compact.md
// /thatch:compact.
func wrapUp(prompt string) string {
	fields := strings.Fields(prompt)
	if len(fields) == 0 {
		return ""
	}
	switch fields[0] {
	case "/thatch:compact":
		return "thatch/compact"
	case "/thatch:exit":
		return "thatch/exit"
	}
	return ""
}

// Events maps one hook's input to the protocol events of its session (protocol §10):
// SessionStart → session.created (and session.compacted after a compaction); UserPromptSubmit
// → busy (and command.execute.before for a wrap-up command); PostToolUse and
// PostToolUseFailure → a tool.execute.after entry; Stop → session.updated (its folder) and idle; PreCompact → session.compacting; SessionEnd →
// an idle (the session stays resumable). seq makes ids unique where Claude Code gives none. An input without a
// session id maps to nothing.
func Events(in Input, projectID, seq string) ([]Event, error) {
	if in.SessionID == "" {
		return nil, fmt.Errorf("the hook's input has no session_id")
	}
	sid := in.SessionID
	id := func(kind string) string { return "cc_" + kind + "_" + sid + "_" + seq }
	created := Event{"cc_created_" + sid, protocol.EventSessionCreated, map[string]any{"sessionID": sid, "info": Info(in, projectID)}}
	switch in.Event {
	case "SessionStart":
		evs := []Event{created}
		if in.Source == "compact" {
			evs = append(evs, Event{id("compacted"), protocol.EventSessionCompacted, map[string]any{"sessionID": sid}})
		}
		return evs, nil
	case "UserPromptSubmit":
		evs := []Event{{id("busy"), protocol.EventSessionStatus, map[string]any{"sessionID": sid, "status": map[string]any{"type": "busy"}}}}
		if cmd := wrapUp(in.Prompt); cmd != "" {
			evs = append(evs, Event{id("command"), protocol.EventCommandExecuteBefore, map[string]any{"command": cmd, "sessionID": sid, "arguments": ""}})
		}
		return evs, nil
	case "PostToolUse", "PostToolUseFailure":
		if in.ToolUseID == "" || in.ToolName == "" {
			return nil, fmt.Errorf("%s without tool_use_id or tool_name", in.Event)
		}
		out := output(in.ToolResponse)
		if in.Event == "PostToolUseFailure" {
			out = in.Error // a failed call is worth as much: a pitfall
		}
		var args any = map[string]any{}
		if len(in.ToolInput) > 0 {
			if err := json.Unmarshal(in.ToolInput, &args); err != nil {
				return nil, fmt.Errorf("PostToolUse tool_input: %w", err)
			}
		}
		return []Event{{"cc_tool_" + sid + "_" + in.ToolUseID, protocol.EventToolExecuteAfter, map[string]any{"sessionID": sid,
			"callID": in.ToolUseID, "tool": toolName(in.ToolName), "args": args, "title": in.ToolName,
			"output": out, "metadata": map[string]any{}}}}, nil
	case "Stop":
		// The session's folder first: a session thatch has not seen start (it began before
		// thatch install, or the journal sweep dropped it and Claude Code resumed it) gets
		// one before its idle asks for an extraction in it.
		return []Event{{id("updated"), protocol.EventSessionUpdated, map[string]any{"sessionID": sid, "info": Info(in, projectID)}},
			{id("idle"), protocol.EventSessionStatus, map[string]any{"sessionID": sid, "status": map[string]any{"type": "idle"}}}}, nil
	case "PreCompact":
		return []Event{{id("compacting"), protocol.EventSessionCompacting, map[string]any{"sessionID": sid}}}, nil
	case "SessionEnd":
		// Claude Code keeps an ended session (claude --resume continues it), and its hooks
		// end a headless session right after its last turn's Stop: the session is not
		// deleted, which would drop the entries its extraction is about to read. Its end is
		// an idle (a turn the user interrupted has no Stop); the journal sweep drops it
		// after THATCH_RUNTIME_STATE_TTL_MS (rule 9).
		return []Event{{id("ended"), protocol.EventSessionStatus, map[string]any{"sessionID": sid, "status": map[string]any{"type": "idle"}}}}, nil
	}
	return nil, nil
}

// toolName is the entry's tool: Claude Code's name lower-cased ("Bash" → "bash"), as
// opencode names its tools, so payloads read the same under both hosts; thatch's own tools
// through its MCP server ("mcp__thatch__memory_search") by their own names, which thatch
// never journals (rule 1).
func toolName(name string) string {
	if t, ok := strings.CutPrefix(name, MCPPrefix); ok {
		return t
	}
	return strings.ToLower(name)
}

// MCPPrefix is how Claude Code names the tools of the MCP server thatch install adds as
// "thatch".
const MCPPrefix = "mcp__thatch__"

// output is a tool response as text: Bash's stdout and stderr, a string as it is, any
// other JSON as it is.
func output(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var bash struct {
		Stdout *string `json:"stdout"`
		Stderr string  `json:"stderr"`
	}
	if json.Unmarshal(raw, &bash) == nil && bash.Stdout != nil {
		if bash.Stderr != "" {
			return *bash.Stdout + "\n" + bash.Stderr
		}
		return *bash.Stdout
	}
	return string(raw)
}

// ContextOutput is what a SessionStart hook prints to give Claude Code the session-start
// text: Claude Code adds additionalContext to the session's system prompt. The reminder's
// wrap-up commands are named as Claude Code names them (/thatch:compact).
func ContextOutput(text string) ([]byte, error) {
	text = strings.NewReplacer("/thatch/compact", "/thatch:compact", "/thatch/exit", "/thatch:exit").Replace(text)
	return json.Marshal(map[string]any{"hookSpecificOutput": map[string]any{"hookEventName": "SessionStart", "additionalContext": text}})
}
