package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if f.SucceededSince || st.LastExtractionSuccess != nil {
		t.Fatalf("status --json says an extraction succeeded since: %+v, %v", f, st.LastExtractionSuccess)
	}
	// The failure's retry a minute on, in thatch sessions.
	s := r.sessions()["cc-fail"]
	if s.Failed != 1 || s.RetryAt == nil || s.RetryAt.Sub(f.At.Truncate(time.Millisecond)) != time.Minute {
		t.Fatalf("the failed session's row %+v, want 1 failure and a retry a minute after %v", s, f.At)
	}
	if text := cli(t, r, "sessions"); !strings.Contains(text, "failed:1 retry:"+s.RetryAt.Local().Format("15:04:05")) {
		t.Fatalf("thatch sessions does not flag the failure and its retry:\n%s", text)
	}
}

// TestFailedExtractionRetried: a headless Claude Code session's failed extraction is
// retried on the timer although the session never goes idle again (issue 32's newcomer),
// as many times as the schedule says and no more; thatch sessions shows the failures and
// the next retry. The schedule is shortened here; its real waits are the runtime's tests'.
func TestFailedExtractionRetried(t *testing.T) {
	r := newRig(t, "v1")
	r.cfg.ClaudeBin = filepath.Join(t.TempDir(), "no-claude-here")
	r.cfg.StrandSweepMS = 100 // the retry check runs at every sweep when sweeps are this frequent
	r.startTuned(func(l *runtime.Loop) {
		l.Rules.RetryAfter = []time.Duration{time.Millisecond, time.Millisecond, time.Hour}
	})
	repo := t.TempDir()
	hook(t, r.cfg, "SessionStart", `{"session_id":"cc-retry","cwd":"`+repo+`","hook_event_name":"SessionStart","source":"startup"}`)
	hook(t, r.cfg, "PostToolUse", `{"session_id":"cc-retry","cwd":"`+repo+`","prompt_id":"p1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"make"},"tool_response":{"stdout":"built","stderr":""},"tool_use_id":"toolu_1"}`)
	hook(t, r.cfg, "Stop", `{"session_id":"cc-retry","cwd":"`+repo+`","prompt_id":"p1","hook_event_name":"Stop"}`)
	hook(t, r.cfg, "SessionEnd", `{"session_id":"cc-retry","cwd":"`+repo+`","hook_event_name":"SessionEnd","reason":"other"}`)
	// The Stop's extraction and two timed retries fail; the third retry waits an hour.
	waitFor(t, "three failed extractions, the next retry an hour on", func() bool {
		s := r.sessions()["cc-retry"]
		return s.Failed == 3 && s.RetryAt != nil && time.Until(*s.RetryAt) > 50*time.Minute
	})
	s := r.sessions()["cc-retry"]
	if s.Pending != 1 || s.Extracting {
		t.Fatalf("after the failures the session is %+v, want its entry pending and no extraction", s)
	}
	text := cli(t, r, "sessions")
	if !strings.Contains(text, "failed:3") || !strings.Contains(text, "retry:"+s.RetryAt.Local().Format("15:04:05")) {
		t.Fatalf("thatch sessions does not flag the failures and the next retry:\n%s", text)
	}
	st := r.status()
	if f := st.LastExtractionFailure; f == nil || f.Session != "cc-retry" || f.SucceededSince || st.LastExtractionSuccess != nil {
		t.Fatalf("status's failure %+v, last success %v: want a current failure", f, st.LastExtractionSuccess)
	}
}

// TestExtractionFailureSucceededSince: once an extraction completes entries after a
// failure, status says so (succeededSince, lastExtractionSuccess) and no longer shows the
// failure as a current problem, and the session's failures are cleared.
func TestExtractionFailureSucceededSince(t *testing.T) {
	r := newRig(t, "v1")
	ctx := r.ctx()
	r.start()
	child := r.extractionOfOneEntry(ctx)
	r.tool(ctx, runtime.ToolPayload, child, nil)
	_, err := r.host.Publish(ctx, "session.error", map[string]any{"sessionID": child,
		"error": map[string]any{"name": "APIError", "data": map[string]any{"message": "provider down"}}})
	must(t, err)
	waitFor(t, "the failure counted", func() bool { return r.sessions()["ses_a"].Failed == 1 })
	if text := cli(t, r, "status"); !strings.Contains(text, "LAST EXTRACTION FAILURE") || !strings.Contains(text, "APIError: provider down") {
		t.Fatalf("status does not show the current failure:\n%s", text)
	}

	must(t, r.host.Status(ctx, "ses_a", "busy"))
	must(t, r.host.Status(ctx, "ses_a", "idle"))
	second := r.childOf("ses_a", 2)
	r.prompted(second)
	r.tool(ctx, runtime.ToolPayload, second, nil)
	r.tool(ctx, runtime.ToolDone, second, map[string]any{"new": 1})
	must(t, r.host.Status(ctx, second, "idle"))
	waitFor(t, "the success recorded", func() bool { return r.status().LastExtractionSuccess != nil })

	var st runtime.StatusView
	must(t, json.Unmarshal([]byte(cli(t, r, "status", "--json")), &st))
	if f := st.LastExtractionFailure; f == nil || !f.SucceededSince || st.LastExtractionSuccess.Before(f.At) {
		t.Fatalf("status --json after a success: failure %+v, last success %v", f, st.LastExtractionSuccess)
	}
	text := cli(t, r, "status")
	if strings.Contains(text, "LAST EXTRACTION FAILURE") || !strings.Contains(text, "last extraction failure") ||
		!strings.Contains(text, "an extraction has succeeded since") {
		t.Fatalf("status still shows the failure as a current problem:\n%s", text)
	}
	if s := r.sessions()["ses_a"]; s.Failed != 0 || s.RetryAt != nil {
		t.Fatalf("the session keeps its failures after a success: %+v", s)
	}
	if text := cli(t, r, "sessions"); strings.Contains(text, "failed:") {
		t.Fatalf("thatch sessions flags a session whose extraction succeeded:\n%s", text)
	}
}
