package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/adapters/claudecode"
	"github.com/thatch-dev/thatch/runtime"
)

// fakeClaudeChild is a claude that records the folder of the extraction child it runs and
// prints a headless run's JSON result.
const fakeClaudeChild = `#!/bin/sh
pwd >> "$0.record"
echo '{"type":"result","subtype":"success","is_error":false,"result":"Extracted.","session_id":"x","total_cost_usd":0.01,"usage":{"input_tokens":10,"output_tokens":2}}'
`

// TestClaudeCodeHookSpool: the hooks of a Claude Code session that runs while thatch is
// down keep their events, redacted, in the data folder's spool (0700, files 0600); thatch
// serve delivers them at its start: the tool call is journaled once and the session's
// Stop starts its extraction as usual. A spool sent twice (a drainer that died mid-way)
// changes nothing, and the next hook that gets through delivers it before its own events.
func TestClaudeCodeHookSpool(t *testing.T) {
	r := newRig(t, "v1")
	claude := filepath.Join(t.TempDir(), "claude")
	must(t, os.WriteFile(claude, []byte(fakeClaudeChild), 0o755))
	r.cfg.ClaudeBin = claude
	down := r.cfg
	down.NATSURL = fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	repo := t.TempDir()
	secret := "ghp_" + strings.Repeat("aB3dE6gH9j", 4)[:36]

	hook(t, down, "SessionStart", `{"session_id":"cc-down","cwd":"`+repo+`","hook_event_name":"SessionStart","source":"startup"}`)
	hook(t, down, "PostToolUse", `{"session_id":"cc-down","cwd":"`+repo+`","prompt_id":"p1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"GITHUB_TOKEN=`+secret+` make release"},"tool_response":{"stdout":"released","stderr":""},"tool_use_id":"toolu_1"}`)
	hook(t, down, "Stop", `{"session_id":"cc-down","cwd":"`+repo+`","prompt_id":"p1","hook_event_name":"Stop"}`)
	hook(t, down, "SessionEnd", `{"session_id":"cc-down","cwd":"`+repo+`","hook_event_name":"SessionEnd","reason":"other"}`)

	dir := claudecode.SpoolDir(r.dataDir)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the hook spool %s: %v %v, want a 0700 folder", dir, fi, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) != 4 {
		t.Fatalf("the hook spool holds %d files, want one per hook (4)", len(files))
	}
	var kept []string
	for _, f := range files {
		fi, err := os.Stat(f)
		must(t, err)
		data, err := os.ReadFile(f)
		must(t, err)
		if fi.Mode().Perm() != 0o600 || strings.Contains(string(data), secret) {
			t.Fatalf("spool file %s (%v) holds the secret or is not 0600:\n%s", f, fi.Mode(), data)
		}
		kept = append(kept, string(data))
	}
	if !strings.Contains(strings.Join(kept, ""), "toolu_1") {
		t.Fatalf("the spool lacks the tool call:\n%s", strings.Join(kept, ""))
	}

	r.start()
	waitFor(t, "the spooled tool call journaled", func() bool {
		es := spooledEntries(r, "cc-down")
		return len(es) == 1 && es[0].ID == "toolu_1"
	})
	waitFor(t, "the spool emptied", func() bool { files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl*")); return len(files) == 0 })
	waitFor(t, "the extraction child of the delivered Stop to run in the session's folder", func() bool {
		data, _ := os.ReadFile(claude + ".record")
		return strings.Contains(string(data), repo)
	})

	// The same spool again (a drainer died after sending it): the next hook that gets
	// through sends it first, and nothing is journaled twice.
	for i, data := range kept {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%020d-1.jsonl", i)), []byte(data), 0o600))
	}
	hook(t, r.cfg, "PostToolUse", `{"session_id":"cc-down","cwd":"`+repo+`","prompt_id":"p2","hook_event_name":"PostToolUse","tool_name":"Read","tool_input":{"file_path":"x"},"tool_response":"x","tool_use_id":"toolu_2"}`)
	if files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl*")); len(files) != 0 {
		t.Fatalf("a hook that reached thatch left the spool %v", files)
	}
	waitFor(t, "toolu_2 journaled", func() bool {
		for _, e := range r.entries("cc-down") {
			if e.ID == "toolu_2" {
				return true
			}
		}
		return false
	})
	n := 0
	for _, e := range r.entries("cc-down") {
		if e.ID == "toolu_1" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("toolu_1 journaled %d times after its spool was sent twice", n)
	}
}

// TestClaudeCodeHookEventTooBig: a hook event over the largest body thatch takes (a tool
// call with megabytes of output) is cut to fit, as opencode's bridge cuts its events,
// whether a hook publishes it live or thatch serve sends it from the spool: both tool
// calls are journaled instead of dead-lettered. A spool file that cannot be decoded is
// set aside in hook-spool/rejected/ with a WARN naming it, its good events sent.
func TestClaudeCodeHookEventTooBig(t *testing.T) {
	r := newRig(t, "v1")
	logs := r.captureLog()
	down := r.cfg
	down.NATSURL = fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	repo := t.TempDir()
	big := strings.Repeat("0123456789abcdef", (2<<20)/16) // 2 MiB, over opencode.MaxEventBody
	toolCall := func(id string) string {
		return `{"session_id":"cc-big","cwd":"` + repo + `","prompt_id":"p1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"cat big"},"tool_response":{"stdout":"` + big + `","stderr":""},"tool_use_id":"` + id + `"}`
	}
	hook(t, down, "SessionStart", `{"session_id":"cc-big","cwd":"`+repo+`","hook_event_name":"SessionStart","source":"startup"}`)
	hook(t, down, "PostToolUse", toolCall("toolu_spooled"))
	dir := claudecode.SpoolDir(r.dataDir)
	damaged := filepath.Join(dir, "99999999999999999999-1.jsonl") // after the hooks' files
	must(t, os.WriteFile(damaged, []byte("{\"subject\":\"opencode.cc-x.ev\n"), 0o600))

	r.start()
	waitFor(t, "the spooled big tool call journaled", func() bool {
		es := spooledEntries(r, "cc-big")
		return len(es) == 1 && es[0].ID == "toolu_spooled"
	})
	waitFor(t, "the damaged spool file set aside", func() bool {
		_, err := os.Stat(filepath.Join(claudecode.RejectedDir(dir), filepath.Base(damaged)))
		return err == nil
	})
	if files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl*")); len(files) != 0 {
		t.Fatalf("the spool holds %v after thatch serve's drain", files)
	}
	waitFor(t, "a WARN naming the damaged file", func() bool {
		for line := range strings.Lines(string(logs.Bytes())) {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, filepath.Base(damaged)) {
				return true
			}
		}
		return false
	})

	hook(t, r.cfg, "PostToolUse", toolCall("toolu_live"))
	waitFor(t, "the live big tool call journaled", func() bool { return len(r.entries("cc-big")) == 2 })
	if st := r.status(); st.Rejected != 0 {
		t.Fatalf("%d events rejected, want none: both were cut to fit", st.Rejected)
	}
}

// spooledEntries is the entries of a session that only the spool announces: none while
// thatch does not know the session yet (its SessionStart not applied), not a failure.
func spooledEntries(r *rig, session string) []runtime.EntryView {
	var es []runtime.EntryView
	if r.TryAPI("entries", map[string]any{"sessionID": session}, &es) != nil {
		return nil
	}
	return es
}
