package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// TestMemoriesShowProvenance (issue 29): after an extraction, thatch memories show names
// the session it extracted, the extraction child, and the tool calls that child completed
// (tool, title, call id), in text and in --json.
func TestMemoriesShowProvenance(t *testing.T) {
	r := newRig(t, "v1")
	r.host.Model = true
	r.host.Write = func(ctx context.Context, child string, _ runtime.Answer, call func(string, any) (runtime.Answer, *runtime.HostError)) runtime.Metrics {
		if _, herr := call(runtime.ToolRemember, map[string]any{"content": "Release builds need CGO_ENABLED=0 for the static binary.", "kind": "command"}); herr != nil {
			t.Errorf("memory_remember: %v", herr)
		}
		return runtime.Metrics{New: 1}
	}
	r.start()
	ctx := r.ctx()
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
	for _, c := range []struct{ id, tool, title string }{
		{"call_build", "bash", "Build the release binary"},
		{"call_read", "read", "Makefile"},
	} {
		_, err := r.host.Publish(ctx, protocol.EventToolExecuteAfter, map[string]any{"sessionID": "ses_a", "callID": c.id, "tool": c.tool,
			"args": map[string]any{"command": "make release"}, "title": c.title, "output": "CGO_ENABLED=0 go build", "metadata": map[string]any{}})
		must(t, err)
	}
	must(t, r.host.Status(ctx, "ses_a", "idle"))
	waitFor(t, "the extraction toast", func() bool { return len(r.host.CallsTo("tui.showToast")) > 0 })
	ms := r.memories(r.host.Dir)
	if len(ms) != 1 {
		t.Fatalf("%d memories, want 1: %+v", len(ms), ms)
	}
	m := ms[0]
	child := m.Source.SessionID

	var text strings.Builder
	must(t, memoriesCmd(ctx, r.cfg, []string{"show", m.ID}, &text))
	want := "extracted from session ses_a by extraction " + child + ", from calls:\n" +
		"  bash Build the release binary (call_build)\n" +
		"  read Makefile (call_read)\n"
	if !strings.Contains(text.String(), want) {
		t.Errorf("thatch memories show %s:\n%s\nwant it to contain:\n%s", m.ID, text.String(), want)
	}

	var raw strings.Builder
	must(t, memoriesCmd(ctx, r.cfg, []string{"show", "--json", m.ID}, &raw))
	var shown struct {
		Memory     memory.Memory        `json:"memory"`
		Provenance []runtime.Provenance `json:"provenance"`
	}
	must(t, json.Unmarshal([]byte(raw.String()), &shown))
	if len(shown.Provenance) != 1 {
		t.Fatalf("--json provenance: %+v", shown.Provenance)
	}
	p := shown.Provenance[0]
	calls := []runtime.CompletedCall{{ID: "call_build", Tool: "bash", Title: "Build the release binary"}, {ID: "call_read", Tool: "read", Title: "Makefile"}}
	if p.Extraction != child || p.Session != "ses_a" || p.At.IsZero() || len(p.Calls) != 2 || p.Calls[0] != calls[0] || p.Calls[1] != calls[1] {
		t.Errorf("--json provenance %+v, want extraction %s of ses_a with %+v", p, child, calls)
	}
}

// TestEntriesAfterExtraction: thatch entries of a session whose tool calls were all
// extracted says so, with how many and the memories written, rather than printing an
// empty table; a session that made no tool call is told apart.
func TestEntriesAfterExtraction(t *testing.T) {
	r := newRig(t, "v1")
	r.host.Model = true
	r.host.Write = func(ctx context.Context, child string, _ runtime.Answer, call func(string, any) (runtime.Answer, *runtime.HostError)) runtime.Metrics {
		if _, herr := call(runtime.ToolRemember, map[string]any{"content": "Release builds need CGO_ENABLED=0 for the static binary.", "kind": "command"}); herr != nil {
			t.Errorf("memory_remember: %v", herr)
		}
		return runtime.Metrics{New: 1}
	}
	r.start()
	ctx := r.ctx()
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
	must(t, r.host.Created(ctx, "ses_quiet", "", "t", r.host.Dir))
	for _, id := range []string{"call_build", "call_read"} {
		_, err := r.host.Publish(ctx, protocol.EventToolExecuteAfter, map[string]any{"sessionID": "ses_a", "callID": id, "tool": "bash",
			"args": map[string]any{"command": "make release"}, "title": "t", "output": "ok", "metadata": map[string]any{}})
		must(t, err)
	}
	must(t, r.host.Status(ctx, "ses_a", "idle"))
	waitFor(t, "the extraction toast", func() bool { return len(r.host.CallsTo("tui.showToast")) > 0 })
	waitFor(t, "the entries completed", func() bool { return len(r.entries("ses_a")) == 0 })
	ms := r.memories(r.host.Dir)
	if len(ms) != 1 {
		t.Fatalf("%d memories, want 1: %+v", len(ms), ms)
	}

	var out strings.Builder
	must(t, client(ctx, r.cfg, "entries", []string{"ses_a"}, &out))
	if want := "no entries pending (2 extracted by 1 extraction, which wrote 1: see thatch memories show " + ms[0].ID + ")\n"; out.String() != want {
		t.Errorf("thatch entries ses_a printed %q, want %q", out.String(), want)
	}
	out.Reset()
	must(t, client(ctx, r.cfg, "entries", []string{"ses_quiet"}, &out))
	if !strings.Contains(out.String(), "no entries pending, and no extraction") {
		t.Errorf("thatch entries ses_quiet printed %q", out.String())
	}
}
