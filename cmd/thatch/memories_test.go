package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// reminderTo returns the text of the session-start reminder prompt thatch sent a session.
func (r *rig) reminderTo(session string) string { r.t.Helper(); return r.ReminderTo(session) }

func (r *rig) memories(project string) []memory.Memory { r.t.Helper(); return r.Memories(project) }

// section returns the memories section of a session-start text, "" when it has none.
func section(text string) string {
	_, s, ok := strings.Cut(text, "Memories of this project:")
	if !ok {
		return ""
	}
	return "Memories of this project:" + s
}

// TestMemoriesThroughTheDaemon plays the whole loop over NATS with the fake host: an
// extraction child searches, remembers and updates through the tools; the toast reports
// thatch's own count of its writes; a new session of the same project gets the memories
// in its reminder, another project's does not; the section stays within its budget.
func TestMemoriesThroughTheDaemon(t *testing.T) {
	r := newRig(t, "v1")
	r.host.Model = true
	var searched string
	r.host.Write = func(ctx context.Context, child string, payload runtime.Answer, call func(string, any) (runtime.Answer, *runtime.HostError)) runtime.Metrics {
		a, herr := call(runtime.ToolSearch, map[string]any{"query": "deploy script"})
		if herr != nil {
			t.Errorf("memory_search: %v", herr)
		}
		searched = a.Output
		first, herr := call(runtime.ToolRemember, map[string]any{"content": "Deploy with scripts/deploy.sh --dry-run first; the real run needs VPN.", "kind": "command", "tags": []string{"deploy"}})
		if herr != nil {
			t.Errorf("memory_remember: %v", herr)
			return runtime.Metrics{}
		}
		id := first.Metadata.(map[string]any)["id"].(string)
		// The same text again (case and spacing aside) is not stored twice and not counted.
		if again, _ := call(runtime.ToolRemember, map[string]any{"content": "deploy with  scripts/deploy.sh --DRY-RUN first; the real run needs VPN."}); again.Metadata.(map[string]any)["created"] != false {
			t.Errorf("an exact duplicate was stored: %v", again.Metadata)
		}
		if _, herr := call(runtime.ToolRemember, map[string]any{"content": "The api-gw-02 gateway times out after 30 s; retry with backoff.", "kind": "pitfall"}); herr != nil {
			t.Errorf("memory_remember: %v", herr)
		}
		if _, herr := call(runtime.ToolUpdate, map[string]any{"id": id, "content": "Deploy with scripts/deploy.sh --dry-run first; the real run needs the office VPN."}); herr != nil {
			t.Errorf("memory_update: %v", herr)
		}
		return runtime.Metrics{New: 9, Updated: 9} // what a model might claim: the toast must not believe it
	}
	r.start()
	ctx := r.ctx()
	projA, projB := r.host.Dir, t.TempDir()
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", projA))
	if section(r.reminderTo("ses_a")) != "" {
		t.Fatal("a project without memories got a memories section")
	}
	must(t, r.host.ToolExecuted(ctx, "ses_a", "c1", "bash", "deployed"))
	must(t, r.host.Status(ctx, "ses_a", "idle"))
	waitFor(t, "the extraction toast", func() bool { return len(r.host.CallsTo("tui.showToast")) > 0 })
	toast := r.host.CallsTo("tui.showToast")[0]
	if got := toast.Params["message"]; got != "Memories: 2 new, 1 updated, 0 deleted" {
		t.Errorf("toast says %q, want thatch's own count: 2 new, 1 updated, 0 deleted", got)
	}
	if searched != "No memory of this project matches." {
		t.Errorf("the first search found %q in an empty store", searched)
	}

	ms := r.memories(projA)
	if len(ms) != 2 {
		t.Fatalf("project A has %d memories, want 2: %+v", len(ms), ms)
	}
	var deploy memory.Memory
	for _, m := range ms {
		if m.Kind == "command" {
			deploy = m
		}
	}
	if !strings.Contains(deploy.Content, "office VPN") || deploy.Source.SessionID == "" {
		t.Errorf("the updated memory is %+v", deploy)
	}
	// Its writer, the extraction child, is deleted once done: show names the session it
	// extracted, from the ledger.
	var shown strings.Builder
	waitFor(t, "thatch memories show to name the extracted session", func() bool {
		shown.Reset()
		return memoriesCmd(ctx, r.cfg, []string{"show", deploy.ID}, &shown) == nil &&
			regexp.MustCompile(`(?m)^extracted from\s+ses_a$`).MatchString(shown.String())
	})

	// A new session of the same project gets the memories; another project's does not.
	must(t, r.host.Created(ctx, "ses_b", "", "t", projA))
	sec := section(r.reminderTo("ses_b"))
	if !strings.Contains(sec, "- ["+deploy.ID+"] (command) Deploy with scripts/deploy.sh") || !strings.Contains(sec, "(pitfall) The api-gw-02 gateway") {
		t.Errorf("the same project's reminder lacks its memories:\n%s", sec)
	}
	must(t, r.host.Created(ctx, "ses_c", "", "t", projB))
	if sec := section(r.reminderTo("ses_c")); sec != "" {
		t.Errorf("another project's session got project A's memories:\n%s", sec)
	}
	var mctx struct {
		Text string `json:"text"`
	}
	must(t, r.tryAPI("memory.context", map[string]any{"sessionID": "ses_b"}, &mctx))
	if !strings.Contains(mctx.Text, deploy.ID) {
		t.Errorf("memory.context for a compaction lacks the project's memories: %q", mctx.Text)
	}

	// A top-level session may write too; a repeated callID repeats the first answer.
	for i := 0; i < 40; i++ {
		a, herr, err := r.host.ToolCall(ctx, "thatch", runtime.ToolRemember, "ses_b", fmt.Sprintf("call_%d", i),
			map[string]any{"content": fmt.Sprintf("Fact number %d about module m%d: its tests need the fixture folder testdata/m%d to exist.", i, i, i)})
		if err != nil || herr != nil {
			t.Fatalf("remember %d: %v %v", i, err, herr)
		}
		again, _, _ := r.host.ToolCall(ctx, "thatch", runtime.ToolRemember, "ses_b", fmt.Sprintf("call_%d", i),
			map[string]any{"content": fmt.Sprintf("Fact number %d about module m%d: its tests need the fixture folder testdata/m%d to exist.", i, i, i)})
		if fmt.Sprint(again.Metadata) != fmt.Sprint(a.Metadata) {
			t.Fatalf("a repeated callID answered %v, first %v", again.Metadata, a.Metadata)
		}
	}
	if n := len(r.memories(projA)); n != 42 {
		t.Fatalf("project A has %d memories after 40 remembers, each repeated once; want 42", n)
	}
	must(t, r.host.Created(ctx, "ses_d", "", "t", projA))
	sec = section(r.reminderTo("ses_d"))
	if n := len([]rune(sec)); n > r.cfg.MemoryInjectChars || n < r.cfg.MemoryInjectChars/2 {
		t.Errorf("the section has %d characters, want at most %d and not far under it:\n%s", n, r.cfg.MemoryInjectChars, sec)
	}
	if !strings.Contains(sec, "(pitfall) The api-gw-02") {
		t.Errorf("the pitfall is not among the memories injected first:\n%s", sec)
	}
	for _, line := range strings.Split(sec, "\n")[1:] {
		if !strings.HasPrefix(line, "- [mem_") {
			t.Errorf("a malformed section line: %q", line)
		}
	}

	// Searching for an identifier finds it; query syntax is text.
	for _, q := range []string{"api-gw-02", "\"unbalanced", "NEAR(", "scripts/deploy.sh"} {
		a, herr, err := r.host.Tool(ctx, "thatch", runtime.ToolSearch, "ses_b", map[string]any{"query": q})
		if err != nil || herr != nil {
			t.Errorf("search %q: %v %v", q, err, herr)
			continue
		}
		if q != "\"unbalanced" && q != "NEAR(" && a.Output == "No memory of this project matches." {
			t.Errorf("search %q found nothing", q)
		}
	}
	// Errors name what is wrong.
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{runtime.ToolRemember, map[string]any{"content": "  "}, "BadRequestError"},
		{runtime.ToolRemember, map[string]any{"content": "x", "kind": "opinion"}, "BadRequestError"},
		{runtime.ToolRemember, map[string]any{"content": 3}, "BadRequestError"},
		{runtime.ToolUpdate, map[string]any{"id": "mem_000000000000deadbeef", "content": "x"}, "NotFoundError"},
		{runtime.ToolForget, map[string]any{"id": deploy.ID}, ""},
		{runtime.ToolForget, map[string]any{"id": deploy.ID}, "NotFoundError"},
	} {
		_, herr, err := r.host.Tool(ctx, "thatch", tc.name, "ses_b", tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if got := ""; herr != nil {
			got = herr.Name
			if got != tc.want {
				t.Errorf("%s %v: %s, want %q", tc.name, tc.args, herr.Error(), tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("%s %v succeeded, want %s", tc.name, tc.args, tc.want)
		}
	}
	if _, herr, _ := r.host.Tool(ctx, "thatch", runtime.ToolSearch, "ses_c", map[string]any{"query": "api-gw-02"}); herr != nil {
		t.Errorf("search from project B: %v", herr)
	} else if a, _, _ := r.host.Tool(ctx, "thatch", runtime.ToolSearch, "ses_c", map[string]any{"query": "api-gw-02"}); a.Output != "No memory of this project matches." {
		t.Errorf("project B's search found project A's memory: %q", a.Output)
	}
	if _, herr, _ := r.host.Tool(ctx, "thatch", runtime.ToolUpdate, "ses_c", map[string]any{"id": ms[0].ID, "content": "x"}); herr == nil || herr.Name != "NotFoundError" {
		t.Errorf("project B updated project A's memory: %v", herr)
	}
	// status gives the store's count when it answers within 10 ms, else the last one: it
	// catches up.
	waitFor(t, "status to count 41 memories", func() bool { return r.status().Memories == 41 })
}

// TestMemoriesExportImport: thatch memories export, then import into a fresh data folder,
// gives the same memories; importing twice changes nothing.
func TestMemoriesExportImport(t *testing.T) {
	r := newRig(t, "v1")
	r.start()
	ctx := r.ctx()
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
	// More than two export pages: a few through the tool, the rest through the import
	// method (1,200 tool calls take too long under the race detector).
	var seed []memory.Memory
	for i := 0; i < 1200; i++ {
		content := fmt.Sprintf("Memory %d: the service s%d listens on port %d.", i, i, 8000+i)
		if i < 20 {
			if _, herr, err := r.host.Tool(ctx, "thatch", runtime.ToolRemember, "ses_a", map[string]any{
				"content": content, "kind": memory.Kinds[i%len(memory.Kinds)], "tags": []string{fmt.Sprintf("s%d", i)}}); err != nil || herr != nil {
				t.Fatal(err, herr)
			}
			continue
		}
		at := time.Now().Add(time.Duration(i) * time.Millisecond).UTC().Truncate(time.Millisecond)
		seed = append(seed, memory.Memory{ID: fmt.Sprintf("mem_%012x%08x", at.UnixMilli(), i), Project: r.host.Dir, Kind: memory.Kinds[i%len(memory.Kinds)],
			Content: content, Tags: []string{fmt.Sprintf("s%d", i)}, CreatedAt: at, UpdatedAt: at, Source: memory.Source{SessionID: "ses_a"}})
	}
	for start := 0; start < len(seed); start += 200 {
		var added struct {
			Added int `json:"added"`
		}
		batch := seed[start:min(start+200, len(seed))]
		must(t, r.tryAPI("memory.import", map[string]any{"memories": batch}, &added))
		if added.Added != len(batch) {
			t.Fatalf("seeded %d of %d", added.Added, len(batch))
		}
	}
	var export bytes.Buffer
	must(t, memoriesCmd(ctx, r.cfg, []string{"export"}, &export))
	want := r.memoriesAll()
	r.stop()

	fresh := newRig(t, "v1")
	fresh.start()
	file := filepath.Join(t.TempDir(), "memories.jsonl")
	must(t, os.WriteFile(file, export.Bytes(), 0o600))
	var out bytes.Buffer
	must(t, memoriesCmd(ctx, fresh.cfg, []string{"import", file}, &out))
	if !strings.Contains(out.String(), "imported 1200 of 1200") {
		t.Errorf("first import: %s", out.String())
	}
	out.Reset()
	must(t, memoriesCmd(ctx, fresh.cfg, []string{"import", file}, &out))
	if !strings.Contains(out.String(), "imported 0 of 1200 memories (1200 already here") {
		t.Errorf("second import: %s", out.String())
	}
	got := fresh.memoriesAll()
	if len(got) != len(want) {
		t.Fatalf("%d memories after import, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		w.UsedAt, g.UsedAt = nil, nil
		wj, _ := json.Marshal(w)
		gj, _ := json.Marshal(g)
		if !bytes.Equal(wj, gj) {
			t.Fatalf("memory %d differs after import:\n%s\n%s", i, wj, gj)
		}
	}
	// The CLI lists and shows them.
	out.Reset()
	must(t, memoriesCmd(ctx, fresh.cfg, []string{"--search", "port 8005", "--limit", "3"}, &out))
	if !strings.Contains(out.String(), "Memory 5: the service s5") {
		t.Errorf("thatch memories --search: %s", out.String())
	}
	out.Reset()
	must(t, memoriesCmd(ctx, fresh.cfg, []string{"show", got[0].ID}, &out))
	if !strings.Contains(out.String(), got[0].Content) || !strings.Contains(out.String(), "import") {
		t.Errorf("thatch memories show: %s", out.String())
	}
	out.Reset()
	must(t, memoriesCmd(ctx, fresh.cfg, []string{"forget", got[0].ID, "--reason", "obsolete"}, &out))
	out.Reset()
	must(t, memoriesCmd(ctx, fresh.cfg, []string{"show", got[0].ID}, &out))
	if !strings.Contains(out.String(), "forget: obsolete") {
		t.Errorf("thatch memories show after forget: %s", out.String())
	}
	out.Reset()
	must(t, memoriesCmd(ctx, fresh.cfg, []string{"restore", got[0].ID}, &out))
	if n := len(fresh.memoriesAll()); n != 1200 {
		t.Errorf("%d memories after a restore, want 1200", n)
	}
	if err := memoriesCmd(ctx, fresh.cfg, []string{"show"}, &out); err == nil {
		t.Error("thatch memories show without an id succeeded")
	}
}

// memoriesAll returns every live memory, oldest first, through the export method.
func (r *rig) memoriesAll() []memory.Memory {
	r.t.Helper()
	var all []memory.Memory
	after := ""
	for {
		var page []memory.Memory
		must(r.t, r.tryAPI("memory.export", map[string]any{"after": after, "limit": exportPage}, &page))
		all = append(all, page...)
		if len(page) < exportPage {
			return all
		}
		after = page[len(page)-1].ID
	}
}

// TestStatusJSONWhenDown: with thatch down, status --json is still one JSON document on
// stdout, marked stale with its age, and the command fails.
func TestStatusJSONWhenDown(t *testing.T) {
	r := newRig(t, "v1")
	r.start()
	waitFor(t, "the status file", func() bool { _, err := os.Stat(filepath.Join(r.dataDir, daemon.StatusFile)); return err == nil })
	r.stop()
	var out bytes.Buffer
	err := client(context.Background(), r.cfg, "status", []string{"--json"}, &out)
	if err == nil {
		t.Fatal("status with thatch down succeeded")
	}
	var doc struct {
		Stale      bool       `json:"stale"`
		AgeSeconds float64    `json:"ageSeconds"`
		Version    string     `json:"version"`
		Error      string     `json:"error"`
		Stopped    *time.Time `json:"stopped"`
		Consuming  bool       `json:"consuming"`
	}
	dec := json.NewDecoder(&out)
	if derr := dec.Decode(&doc); derr != nil || dec.More() {
		t.Fatalf("not one JSON document: %v\n%s", derr, out.String())
	}
	if !doc.Stale || doc.Version == "" || doc.Error == "" || doc.AgeSeconds < 0 {
		t.Errorf("stale status: %+v", doc)
	}
	// A clean stop is marked: the last status is not taken for a daemon gone quiet.
	if doc.Stopped == nil || doc.Consuming || !strings.Contains(doc.Error, "stopped") {
		t.Errorf("after a clean stop: stopped %v, consuming %v, error %q; want the stop's time, not consuming, and an error saying it stopped", doc.Stopped, doc.Consuming, doc.Error)
	}

	// A data folder thatch never ran on: still one JSON document, saying why.
	cfg := r.cfg
	cfg.DataDir = t.TempDir()
	out.Reset()
	if err := client(context.Background(), cfg, "status", []string{"--json"}, &out); err == nil {
		t.Fatal("status with no thatch ever run succeeded")
	}
	var none struct {
		Stale bool   `json:"stale"`
		Error string `json:"error"`
	}
	dec = json.NewDecoder(&out)
	if derr := dec.Decode(&none); derr != nil || dec.More() || !none.Stale || none.Error == "" {
		t.Fatalf("status --json with no status file: not one JSON document with an error (%v): %q", derr, out.String())
	}
}
