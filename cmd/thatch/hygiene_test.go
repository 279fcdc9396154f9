package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

func (r *rig) hygiene(project string) memory.Hygiene { r.t.Helper(); return r.Hygiene(project) }

// TestDuplicatePairClosedByExtraction: a near-duplicate pair written through the tools is
// named in the next session's reminder, handed to the extraction child with both texts,
// and closed by the child's update and forget; a dismissed pair stays closed.
func TestDuplicatePairClosedByExtraction(t *testing.T) {
	r := newRig(t, "v1")
	r.host.Model = true
	var payload string
	r.host.Write = func(ctx context.Context, child string, a runtime.Answer, call func(string, any) (runtime.Answer, *runtime.HostError)) runtime.Metrics {
		payload = a.Output
		var ids []string
		for _, line := range strings.Split(a.Output, "\n") {
			if i := strings.Index(line, "- [mem_"); i >= 0 && strings.Contains(a.Output[:strings.Index(a.Output, line)], "Memory hygiene to resolve") {
				ids = append(ids, line[i+3:i+3+24])
			}
		}
		if len(ids) != 2 {
			t.Errorf("the payload's hygiene section names %v, want the pair:\n%s", ids, a.Output)
			return runtime.Metrics{}
		}
		if _, herr := call(runtime.ToolUpdate, map[string]any{"id": ids[0], "content": "The staging database listens on port 5432; reach it through the office VPN."}); herr != nil {
			t.Errorf("merge, update: %v", herr)
		}
		if _, herr := call(runtime.ToolForget, map[string]any{"id": ids[1], "reason": "merged into " + ids[0]}); herr != nil {
			t.Errorf("merge, forget: %v", herr)
		}
		return runtime.Metrics{Updated: 1, Deleted: 1}
	}
	r.start()
	ctx := r.ctx()
	proj := r.host.Dir
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", proj))
	for _, text := range []string{
		"The staging database listens on port 5432 and needs the office VPN for access.",
		"The staging database listens on port 5432 and needs the office VPN to access.",
	} {
		if _, herr, err := r.host.Tool(ctx, "thatch", runtime.ToolRemember, "ses_a", map[string]any{"content": text}); err != nil || herr != nil {
			t.Fatal(err, herr)
		}
	}
	if h := r.hygiene(proj); len(h.DuplicatePairs) != 1 {
		t.Fatalf("hygiene after two near-duplicates: %+v", h)
	}
	must(t, r.host.Created(ctx, "ses_b", "", "t", proj))
	if text := r.reminderTo("ses_b"); !strings.Contains(text, "Memory hygiene: 1 duplicate pair") {
		t.Errorf("the reminder names no duplicate pair:\n%s", text)
	}
	var out bytes.Buffer
	must(t, memoriesCmd(ctx, r.cfg, []string{"hygiene"}, &out))
	if !strings.Contains(out.String(), "duplicate:") || !strings.Contains(out.String(), "needs the office VPN to access") {
		t.Errorf("thatch memories hygiene:\n%s", out.String())
	}

	must(t, r.host.ToolExecuted(ctx, "ses_a", "c1", "bash", "psql -p 5432"))
	must(t, r.host.Status(ctx, "ses_a", "idle"))
	waitFor(t, "the extraction toast", func() bool { return len(r.host.CallsTo("tui.showToast")) > 0 })
	if got := r.host.CallsTo("tui.showToast")[0].Params["message"]; got != "Memories: 0 new, 1 updated, 1 deleted" {
		t.Errorf("toast %q", got)
	}
	if !strings.Contains(payload, "needs the office VPN for access") || !strings.Contains(payload, "needs the office VPN to access") {
		t.Errorf("the payload lacks the pair's texts:\n%s", payload)
	}
	if !strings.Contains(payload, "## Existing memories of this project that look related") {
		t.Errorf("the payload lists no related memory though its entry names port 5432:\n%s", payload)
	}
	if h := r.hygiene(proj); len(h.DuplicatePairs) != 0 {
		t.Errorf("the merge left the pair open: %+v", h)
	}

	// Two memories alike in words but distinct in meaning: a person dismisses the pair.
	var ids []string
	for _, text := range []string{"Run make test before every push to the main branch.", "Run make e2e before every push to the main branch."} {
		a, herr, err := r.host.Tool(ctx, "thatch", runtime.ToolRemember, "ses_a", map[string]any{"content": text})
		if err != nil || herr != nil {
			t.Fatal(err, herr)
		}
		ids = append(ids, a.Metadata.(map[string]any)["id"].(string))
	}
	if h := r.hygiene(proj); len(h.DuplicatePairs) != 1 {
		t.Fatalf("hygiene: %+v", h)
	}
	out.Reset()
	must(t, memoriesCmd(ctx, r.cfg, []string{"dismiss", ids[0], ids[1]}, &out))
	if h := r.hygiene(proj); len(h.DuplicatePairs) != 0 {
		t.Errorf("the dismissed pair is still open: %+v", h)
	}
}

// TestHygieneCLIPages: thatch memories hygiene says how many findings there are and pages
// through them with --offset and --limit; --json is the page with its total.
func TestHygieneCLIPages(t *testing.T) {
	r := newRig(t, "v1")
	r.start()
	ctx := r.ctx()
	proj := r.host.Dir
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", proj))
	// Five memories of one template: every two of them are a pair, ten pairs.
	for _, svc := range []string{"billing", "search", "ledger", "mailer", "gateway"} {
		text := "The " + svc + " service listens on port 8080 inside the cluster and needs the office VPN for access from laptops."
		if _, herr, err := r.host.Tool(ctx, "thatch", runtime.ToolRemember, "ses_a", map[string]any{"content": text}); err != nil || herr != nil {
			t.Fatal(err, herr)
		}
	}
	if h := r.hygiene(proj); len(h.DuplicatePairs) != 10 {
		t.Fatalf("hygiene of five templated memories: %d pairs, want 10", len(h.DuplicatePairs))
	}
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		must(t, memoriesCmd(ctx, r.cfg, append([]string{"hygiene"}, args...), &out))
		return out.String()
	}
	out := run("--limit", "4")
	if !strings.HasPrefix(out, "10 findings: 10 duplicate pairs\n") || strings.Count(out, "duplicate:\n") != 4 ||
		!strings.Contains(out, "shown: 1 to 4 of 10; the next: thatch memories hygiene --offset 4\n") {
		t.Errorf("hygiene --limit 4:\n%s", out)
	}
	out = run("--limit", "4", "--offset", "8")
	if !strings.HasPrefix(out, "10 findings: 10 duplicate pairs\n") || strings.Count(out, "duplicate:\n") != 2 ||
		!strings.Contains(out, "shown: 9 to 10 of 10\n") || strings.Contains(out, "the next:") {
		t.Errorf("hygiene --limit 4 --offset 8:\n%s", out)
	}
	if out := run(); strings.Count(out, "duplicate:\n") != 10 || strings.Contains(out, "shown:") {
		t.Errorf("hygiene, all on one page:\n%s", out)
	}
	var page memory.SignalPage
	must(t, json.Unmarshal([]byte(run("--json", "--limit", "4", "--offset", "4")), &page))
	if page.Total != 10 || page.Offset != 4 || len(page.Signals) != 4 || page.Counts[memory.SignalDuplicate] != 10 {
		t.Errorf("hygiene --json: total %d, offset %d, %d signals, counts %v", page.Total, page.Offset, len(page.Signals), page.Counts)
	}
	for _, bad := range [][]string{{"--limit", "0"}, {"--limit", "101"}, {"--offset", "-1"}} {
		var out bytes.Buffer
		if err := memoriesCmd(ctx, r.cfg, append([]string{"hygiene"}, bad...), &out); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("hygiene %v: %v", bad, err)
		}
	}
}
