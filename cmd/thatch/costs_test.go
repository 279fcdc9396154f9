package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/runtime"
)

// helloSmallModel announces the host with a smallModel in its hello.
func helloSmallModel(ctx context.Context, h *fakehost.Host, boot, small string) error {
	h.SmallModel = small
	return h.Hello(ctx, boot)
}

// hostToast is one toast a host was asked to show.
type hostToast struct{ Message, Variant string }

// toasts returns the toasts the fake host received, whatever its API.
func (r *rig) toasts() []hostToast {
	var out []hostToast
	for _, c := range r.host.Calls() {
		p := c.Params
		switch {
		case c.Method == "tui.showToast":
		case c.Method == "bridge.emit" && p["type"] == "toast":
			p, _ = p["properties"].(map[string]any)
		default:
			continue
		}
		msg, _ := p["message"].(string)
		variant, _ := p["variant"].(string)
		out = append(out, hostToast{msg, variant})
	}
	return out
}

// extractionPrompts returns the instruction prompts (not noReply) thatch sent to
// extraction children, by child.
func (r *rig) extractionPrompts() map[string]fakehost.Call {
	out := map[string]fakehost.Call{}
	for _, c := range r.host.CallsTo("session.prompt") {
		if sid, _ := c.Params["sessionID"].(string); strings.HasPrefix(sid, "ses_"+r.host.ID+"_c") && c.Params["noReply"] == nil {
			out[sid] = c
		}
	}
	return out
}

// extractionCreates counts the extraction children thatch asked the host to create.
func (r *rig) extractionCreates() int {
	n := 0
	for _, c := range r.host.CallsTo("session.create") {
		if c.Params["title"] == runtime.ExtractionTitle {
			n++
		}
	}
	return n
}

// extractedOnce waits until the one extraction child thatch created was prompted, ran and
// was deleted, and returns it with its prompt.
func (r *rig) extractedOnce() (string, fakehost.Call) {
	r.t.Helper()
	var child string
	var prompt fakehost.Call
	waitFor(r.t, "the extraction child's prompt", func() bool {
		for id, c := range r.extractionPrompts() {
			child, prompt = id, c
			return true
		}
		return false
	})
	waitFor(r.t, "the deletion of "+child, func() bool {
		for _, c := range r.host.CallsTo("session.delete") {
			if c.Params["sessionID"] == child {
				return true
			}
		}
		return false
	})
	return child, prompt
}

// settled waits until every event published so far is applied and every host call they
// implied was answered: a marker session is seen, then nothing is outstanding.
func (r *rig) settled(ctx context.Context, marker string) {
	r.t.Helper()
	must(r.t, r.host.Created(ctx, marker, "", "t", r.host.Dir))
	waitFor(r.t, marker+" to be tracked", func() bool { _, ok := r.sessions()[marker]; return ok })
	waitFor(r.t, "no host call outstanding", func() bool { return r.status().OutstandingCalls == 0 })
}

// statusJSON is thatch status --json, as a user's script reads it.
func (r *rig) statusJSON() runtime.StatusView {
	r.t.Helper()
	var out bytes.Buffer
	must(r.t, client(r.ctx(), r.cfg, "status", []string{"--json"}, &out))
	var s runtime.StatusView
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		r.t.Fatalf("status --json printed %q: %v", out.String(), err)
	}
	if s.Extraction == nil {
		r.t.Fatalf("status --json has no extraction: %s", out.String())
	}
	return s
}

// squash collapses the runs of spaces a table pads its columns with.
func squash(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

func cli(t *testing.T, r *rig, cmd string, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := client(r.ctx(), r.cfg, cmd, args, &out); err != nil {
		t.Fatalf("thatch %s %v: %v\n%s", cmd, args, err, out.String())
	}
	return out.String()
}

// sameDay skips the rest of a test that straddled UTC midnight: its "today" moved.
func sameDay(t *testing.T, day string) {
	t.Helper()
	if now := runtime.Day(time.Now()); now != day {
		t.Skipf("the UTC day changed during the test (%s → %s)", day, now)
	}
}

func wantSpend(t *testing.T, what string, got runtime.Spend, extractions int, in, out int64, usd float64) {
	t.Helper()
	if got.Extractions != extractions || got.TokensIn != in || got.TokensOut != out || got.Tokens != in+out || math.Abs(got.USD-usd) > 1e-9 {
		t.Errorf("%s: %+v, want %d extractions, %d in, %d out, %d tokens, $%g", what, got, extractions, in, out, in+out, usd)
	}
}

// fakeTurn makes the fake host's model cost 1200 input, 100 cache-read and 300 output
// tokens and $0.0042 per extraction: 1300 in, 300 out, 1600 tokens.
func fakeTurn(h *fakehost.Host) {
	h.Model = true
	h.Tokens = runtime.Tokens{Input: 1200, Output: 300}
	h.Tokens.Cache.Read = 100
	h.Cost = 0.0042
}

// costsProject is an opencode project id, as TestExtractionCostLedger's session has one.
const costsProject = "4b0ea68d7af9a6031a7ffda7ad66e0cb83315750"

// TestExtractionCostLedger: an extraction child's cost, as the host reports it on the
// child's assistant message, reaches the ledger before the child is deleted, and costs
// (API, thatch costs --json and its table, which names the session's folder rather than
// its project id), status --json and the status table show it. The child's prompt names
// THATCH_EXTRACT_MODEL when set, else the hello's smallModel, else no model (the host's
// choice, "fake/session-model" in the fake).
func TestExtractionCostLedger(t *testing.T) {
	for _, tc := range []struct {
		api, small, setting string
		model               string // the model the child's prompt names and the ledger lists
	}{
		{api: "v1", small: "fakeprov/small-1", model: "fakeprov/small-1"},
		{api: "v2", small: "fakeprov/small-1", setting: "cfgprov/extract-1", model: "cfgprov/extract-1"},
		{api: "v1", model: ""},
	} {
		t.Run(fmt.Sprintf("%s/small=%q/setting=%q", tc.api, tc.small, tc.setting), func(t *testing.T) {
			if tc.setting != "" {
				t.Setenv("THATCH_EXTRACT_MODEL", tc.setting)
			}
			r := newRig(t, tc.api)
			if r.cfg.ExtractModel != tc.setting {
				t.Fatalf("config's extraction model %q, want %q", r.cfg.ExtractModel, tc.setting)
			}
			fakeTurn(r.host)
			r.start()
			ctx := r.ctx()
			day := runtime.Day(time.Now())
			must(t, helloSmallModel(ctx, r.host, "b1", tc.small))
			must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
			// opencode's project id is a hash: the ledger keys the cost by it, and thatch
			// costs shows the session's folder.
			_, err := r.host.Publish(ctx, "session.updated", map[string]any{"sessionID": "ses_a",
				"info": runtime.SessionInfo{ID: "ses_a", Title: "t", Directory: r.host.Dir, ProjectID: costsProject}})
			must(t, err)
			must(t, r.host.ToolExecuted(ctx, "ses_a", "c1", "bash", "deployed with scripts/deploy.sh --dry-run"))
			must(t, r.host.Status(ctx, "ses_a", "idle"))
			child, prompt := r.extractedOnce()

			// The prompt names the model.
			m, named := prompt.Params["model"].(map[string]any)
			if tc.model == "" {
				if _, ok := prompt.Params["model"]; ok {
					t.Errorf("the prompt names model %v though neither the setting nor the hello named one", prompt.Params["model"])
				}
			} else if !named || fmt.Sprint(m["providerID"], "/", m["modelID"]) != tc.model {
				t.Errorf("the prompt's model is %v, want %s", prompt.Params["model"], tc.model)
			}
			ledgerModel := tc.model
			if ledgerModel == "" {
				ledgerModel = "fake/session-model" // the fake's model when none is asked
			}

			// The child's messages were read (for its cost) before it was deleted.
			messages := "session.messages"
			if tc.api == "v2" {
				messages = "session.context"
			}
			var read, deleted = -1, -1
			for i, c := range r.host.Calls() {
				if c.Params["sessionID"] == child && c.Method == messages && read < 0 {
					read = i
				}
				if c.Params["sessionID"] == child && c.Method == "session.delete" {
					deleted = i
				}
			}
			if read < 0 || read > deleted {
				t.Errorf("%s of %s at call %d, its deletion at %d: the messages must be read first", messages, child, read, deleted)
			}
			waitFor(t, "the extraction toast", func() bool { return len(r.toasts()) > 0 })
			if ts := r.toasts(); len(ts) != 1 || ts[0].Variant != "success" || !strings.HasPrefix(ts[0].Message, "Memories: ") ||
				!strings.HasSuffix(ts[0].Message, " · 1.6k tokens, $0.0042") {
				t.Errorf("toasts %+v, want one success toast ending with the cost \" · 1.6k tokens, $0.0042\"", ts)
			}

			sameDay(t, day)
			want := runtime.CostRow{Day: day, Project: costsProject, Directory: r.host.Dir, Extractions: 1, Entries: 1, Tokens: 1600, TokensIn: 1300, TokensOut: 300,
				USD: 0.0042, Models: []string{ledgerModel}}
			var api []runtime.CostRow
			must(t, r.tryAPI("costs", map[string]any{"days": 1}, &api))
			if len(api) != 1 || math.Abs(api[0].USD-want.USD) > 1e-9 {
				t.Fatalf("costs API: %+v, want [%+v]", api, want)
			}
			api[0].USD = want.USD
			if !reflect.DeepEqual(api[0], want) {
				t.Errorf("costs API: %+v, want %+v", api[0], want)
			}
			var js []runtime.CostRow
			out := cli(t, r, "costs", "--json")
			if err := json.Unmarshal([]byte(out), &js); err != nil || len(js) != 1 {
				t.Fatalf("thatch costs --json printed %q (%v)", out, err)
			}
			js[0].USD = math.Round(js[0].USD*1e9) / 1e9
			if !reflect.DeepEqual(js[0], want) {
				t.Errorf("thatch costs --json: %+v, want %+v", js[0], want)
			}
			table := cli(t, r, "costs", "--days", "7")
			var line string
			for _, l := range strings.Split(table, "\n") {
				if strings.HasPrefix(l, day) {
					line = l
				}
			}
			if f := strings.Fields(line); !strings.HasPrefix(table, "DAY (UTC)") || len(f) != 8 ||
				!reflect.DeepEqual(f, []string{day, r.host.Dir, "1", "1", "1.3k", "300", "$0.0042", ledgerModel}) ||
				!strings.Contains(table, "total, 7 days") {
				t.Errorf("thatch costs:\n%s", table)
			}

			st := r.statusJSON()
			x := st.Extraction
			wantSpend(t, "status today", x.Today, 1, 1300, 300, 0.0042)
			wantSpend(t, "status week", x.Week, 1, 1300, 300, 0.0042)
			if x.DailyTokens != 0 || x.BudgetReached || x.Model != tc.setting || x.Error != "" {
				t.Errorf("status extraction: %+v, want no budget, not reached, model %q", x, tc.setting)
			}
			text := squash(cli(t, r, "status"))
			model := "the host's small model, else the session's own (THATCH_EXTRACT_MODEL unset)"
			if tc.setting != "" {
				model = tc.setting + " (THATCH_EXTRACT_MODEL)"
			}
			for _, w := range []string{"extraction today (UTC) 1 extraction, 1.6k tokens (1.3k in, 300 out), $0.0042",
				"extraction last 7 days 1 extraction, 1.6k tokens (1.3k in, 300 out), $0.0042",
				"extraction budget no limit", "extraction model " + model} {
				if !strings.Contains(text, w) {
					t.Errorf("thatch status lacks %q:\n%s", w, text)
				}
			}
		})
	}
}

// TestExtractionDailyBudget: with THATCH_EXTRACT_DAILY_TOKENS=1000, one extraction of 1600
// tokens spends the day's budget; the next idles with new entries create no child, keep
// the entries pending, and warn once (one warning toast, whatever the idles); status says
// the budget is reached, also after a restart.
func TestExtractionDailyBudget(t *testing.T) {
	for _, api := range []string{"v1", "v2"} {
		t.Run(api, func(t *testing.T) {
			t.Setenv("THATCH_EXTRACT_DAILY_TOKENS", "1000")
			r := newRig(t, api)
			if r.cfg.ExtractDailyTokens != 1000 {
				t.Fatalf("config's daily tokens %d, want 1000", r.cfg.ExtractDailyTokens)
			}
			fakeTurn(r.host)
			r.start()
			ctx := r.ctx()
			day := runtime.Day(time.Now())
			must(t, r.host.Hello(ctx, "b1"))
			must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
			if st := r.statusJSON(); st.Extraction.BudgetReached || st.Extraction.DailyTokens != 1000 {
				t.Fatalf("before any extraction: %+v", st.Extraction)
			}
			must(t, r.host.ToolExecuted(ctx, "ses_a", "c1", "bash", "go test ./... passed"))
			must(t, r.host.Status(ctx, "ses_a", "idle"))
			r.extractedOnce()
			waitFor(t, "the extraction toast", func() bool { return len(r.toasts()) > 0 })
			sameDay(t, day)
			if st := r.statusJSON(); !st.Extraction.BudgetReached || st.Extraction.Today.Tokens != 1600 {
				t.Fatalf("after 1600 tokens of a 1000-token budget: %+v", st.Extraction)
			}

			// A new turn, new entries, an idle: no child.
			must(t, r.host.Status(ctx, "ses_a", "busy"))
			must(t, r.host.ToolExecuted(ctx, "ses_a", "c2", "bash", "make lint found 3 issues"))
			must(t, r.host.ToolExecuted(ctx, "ses_a", "c3", "read", "package main"))
			must(t, r.host.Status(ctx, "ses_a", "idle"))
			waitFor(t, "the budget's warning", func() bool {
				for _, ts := range r.toasts() {
					if ts.Variant == "warning" {
						return true
					}
				}
				return false
			})
			r.settled(ctx, "ses_marker1")
			// Once more: still no child, and no second warning the same day.
			must(t, r.host.Status(ctx, "ses_a", "busy"))
			must(t, r.host.ToolExecuted(ctx, "ses_a", "c4", "bash", "git log shows the fix landed"))
			must(t, r.host.Status(ctx, "ses_a", "idle"))
			r.settled(ctx, "ses_marker2")
			sameDay(t, day)

			if n := r.extractionCreates(); n != 1 {
				t.Errorf("thatch asked for %d extraction children, want 1: the budget was reached after the first", n)
			}
			var warnings []hostToast
			for _, ts := range r.toasts() {
				if ts.Variant == "warning" {
					warnings = append(warnings, ts)
				}
			}
			if len(warnings) != 1 || !strings.Contains(warnings[0].Message, "budget") || !strings.Contains(warnings[0].Message, "1.0k tokens") {
				t.Errorf("warning toasts %+v, want exactly one naming the budget (1.0k tokens)", warnings)
			}
			var ids []string
			for _, e := range r.entries("ses_a") {
				if e.State != "pending" {
					t.Errorf("entry %+v is not pending", e)
				}
				ids = append(ids, e.ID)
			}
			if !reflect.DeepEqual(ids, []string{"c2", "c3", "c4"}) {
				t.Errorf("ses_a's entries %v, want c2, c3, c4 pending", ids)
			}
			if s := r.sessions()["ses_a"]; s.Extracting {
				t.Errorf("ses_a is flagged extracting: %+v", s)
			}
			st := r.statusJSON()
			if x := st.Extraction; !x.BudgetReached || x.DailyTokens != 1000 {
				t.Errorf("status --json extraction %+v, want budgetReached, dailyTokens 1000", x)
			}
			wantSpend(t, "status today", st.Extraction.Today, 1, 1300, 300, 0.0042)
			if text := squash(cli(t, r, "status")); !strings.Contains(text, "extraction budget 1.0k tokens a day, 1.6k used today: REACHED") {
				t.Errorf("thatch status does not say the budget is reached:\n%s", text)
			}

			// The day's spending and its warning come back from the journal: after a
			// restart an idle still creates no child and warns no more.
			r.stop()
			r.start()
			if x := r.statusJSON().Extraction; !x.BudgetReached {
				t.Errorf("after a restart: %+v, want the budget still reached", x)
			}
			must(t, r.host.Status(ctx, "ses_a", "busy"))
			must(t, r.host.ToolExecuted(ctx, "ses_a", "c5", "bash", "the release notes are in docs/CHANGES.md"))
			must(t, r.host.Status(ctx, "ses_a", "idle"))
			r.settled(ctx, "ses_marker3")
			sameDay(t, day)
			warnings = nil
			for _, ts := range r.toasts() {
				if ts.Variant == "warning" {
					warnings = append(warnings, ts)
				}
			}
			if n := r.extractionCreates(); n != 1 || len(warnings) != 1 || len(r.entries("ses_a")) != 4 {
				t.Errorf("after a restart and an idle: %d extraction children, %d warnings, entries %+v; want 1, 1, 4 pending",
					n, len(warnings), r.entries("ses_a"))
			}
		})
	}
}
