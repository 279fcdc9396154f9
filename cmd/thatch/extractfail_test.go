package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/runtime"
)

// TestStatusShowsExtractionFailure: when a Claude Code session's extraction child cannot
// run (no claude on the PATH), status says so (host, session, when, why), in text and in
// --json, and not only that entries are pending.
func TestStatusShowsExtractionFailure(t *testing.T) {
	r := newRig(t, "v1")
	r.cfg.ClaudeBin = filepath.Join(t.TempDir(), "no-claude-here")
	r.start()
	repo := t.TempDir()
	hook(t, r.cfg, "SessionStart", `{"session_id":"cc-fail","cwd":"`+repo+`","hook_event_name":"SessionStart","source":"startup"}`)
	hook(t, r.cfg, "PostToolUse", `{"session_id":"cc-fail","cwd":"`+repo+`","prompt_id":"p1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"make"},"tool_response":{"stdout":"built","stderr":""},"tool_use_id":"toolu_1"}`)
	hook(t, r.cfg, "Stop", `{"session_id":"cc-fail","cwd":"`+repo+`","prompt_id":"p1","hook_event_name":"Stop"}`)
	waitFor(t, "the extraction's failure in status", func() bool { return r.status().LastExtractionFailure != nil })

	var st runtime.StatusView
	if err := json.Unmarshal([]byte(cli(t, r, "status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	f := st.LastExtractionFailure
	if f == nil || f.Session != "cc-fail" || !strings.HasPrefix(f.Host, "cc-") || f.At.IsZero() ||
		!strings.Contains(f.Message, "no-claude-here: no such file or directory") || strings.Contains(f.Message, "JSON") {
		t.Fatalf("status --json's last extraction failure: %+v", f)
	}
	text := cli(t, r, "status")
	if !strings.Contains(text, "LAST EXTRACTION FAILURE") || !strings.Contains(text, "session cc-fail: ClaudeCodeError: claude -p failed") {
		t.Fatalf("status does not show the extraction's failure:\n%s", text)
	}
}
