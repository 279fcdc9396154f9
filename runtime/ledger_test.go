package runtime

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestSensitivePath(t *testing.T) {
	for p, want := range map[string]bool{
		"/w/.env": true, ".env.local": true, "/w/.env.production": true, "prod.env": true,
		"/home/u/.ssh/id_ed25519": true, "/home/u/.ssh/id_rsa": true, "certs/server.key": true, "tls.PEM": true,
		"/home/u/.aws/credentials": true, "~/.netrc": true, ".npmrc": true, "deploy/secrets.yaml": true,
		"gcp-service-account.json": true, "infra/prod.tfvars": true, `C:\Users\u\.git-credentials`: true,
		"/w/.env.example": false, ".env.sample": false, ".env.template": false, "/home/u/.ssh/id_ed25519.pub": false,
		"/home/u/.ssh/known_hosts": false, "src/keyboard.go": false, "main.go": false, "package.json": false,
		"docs/secrets.md": false, "environment.ts": false, "": false,
	} {
		if got := SensitivePath(p); got != want {
			t.Errorf("SensitivePath(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestSensitiveRead(t *testing.T) {
	for _, c := range []struct {
		tool, args, want string
	}{
		{"read", `{"filePath":"/w/.env"}`, ".env"},
		{"read", `{"filePath":"/w/.env.example"}`, ""},
		{"read", `{"filePath":"/w/main.go"}`, ""},
		{"view", `{"path":"/w/certs/tls.key"}`, "tls.key"},
		{"bash", `{"command":"cat ~/.aws/credentials"}`, "credentials"},
		{"bash", `{"command":"grep -n DATABASE_URL .env.local | head -1"}`, ".env.local"},
		{"bash", `{"command":"cd /w && head -c 100 \"id_rsa\""}`, "id_rsa"},
		{"bash", `{"command":"cp .env.example .env"}`, ""}, // copies, prints nothing of it
		{"bash", `{"command":"ls -la ~/.ssh"}`, ""},
		{"bash", `{"command":"go test ./..."}`, ""},
		{"write", `{"filePath":"/w/.env","content":"A=1"}`, ""}, // its output is a confirmation
		{"edit", `{"filePath":"/w/.env"}`, ""},
		{"read", `not json`, ""},
	} {
		if got := SensitiveRead(c.tool, json.RawMessage(c.args)); got != c.want {
			t.Errorf("SensitiveRead(%s, %s) = %q, want %q", c.tool, c.args, got, c.want)
		}
	}
}

// A read of a credentials file keeps nothing of the file: not in the output, not in the
// metadata opencode copies it into, and the entry is trivial.
func TestEntryBodyLeavesCredentialsOut(t *testing.T) {
	st := &step{Rules: DefaultRules, s: NewState(), fx: NewEffects()}
	body, _ := st.entryBody(&ToolExec{CallID: "c1", Tool: "read", Args: json.RawMessage(`{"filePath":"/w/.env"}`),
		Title: ".env", Output: "STRIPE=plainvalue123", Metadata: json.RawMessage(`{"preview":"STRIPE=plainvalue123"}`)})
	data, _ := json.Marshal(body)
	if strings.Contains(string(data), "plainvalue123") {
		t.Fatalf("the file's content was kept: %s", data)
	}
	if !TrivialEntry(body) || !strings.Contains(body.Output, ".env holds credentials") {
		t.Fatalf("body = %+v, want a trivial left-out entry", body)
	}
}

func TestCutMiddle(t *testing.T) {
	s := strings.Repeat("h", 300) + strings.Repeat("m", 1000) + "FAIL: TestX" + strings.Repeat("t", 289)
	out := cutMiddle(s, 500)
	if !strings.HasPrefix(out, strings.Repeat("h", 200)+"\n[… 1100 characters left out …]\n") || !strings.HasSuffix(out, "FAIL: TestX"+strings.Repeat("t", 289)) {
		t.Fatalf("cutMiddle kept %q", out)
	}
	if cutMiddle("short", 500) != "short" {
		t.Fatal("a short text changed")
	}
	// Runes, not bytes: a multi-byte text is cut on character boundaries.
	u := strings.Repeat("é", 30)
	if got := cutMiddle(u, 10); !utf8.ValidString(got) || !strings.HasPrefix(got, "éééé\n[… 20") || !strings.HasSuffix(got, "\néééééé") {
		t.Fatalf("cutMiddle(é×30, 10) = %q", got)
	}
}

// TestCutMiddleKeepsRunesAsWalkedFromTheStart: the head is counted from the start and the
// tail from the end; on any text, valid UTF-8 or not, the cut is where counting every rune
// from the start puts it.
func TestCutMiddleKeepsRunesAsWalkedFromTheStart(t *testing.T) {
	byWalk := func(s string, n int) string {
		total := utf8.RuneCountInString(s)
		if n <= 0 || total <= n {
			return s
		}
		head, tail := n*2/5, n-n*2/5
		hi, ti, i := 0, len(s), 0
		for j := range s {
			if i == head {
				hi = j
			}
			if i == total-tail {
				ti = j
				break
			}
			i++
		}
		return s[:hi] + fmt.Sprintf("\n[… %d characters left out …]\n", total-head-tail) + s[ti:]
	}
	pieces := []string{"a", "é", "€", "😀", "\xe2\x82", "\x80", "\xff", "\xed\xa0\x80", "\xf0\x9f", "\xc3", "\n", "z"}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 20000 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		n := rng.IntN(30)
		if got, want := cutMiddle(b.String(), n), byWalk(b.String(), n); got != want {
			t.Fatalf("case %d: cutMiddle(%q, %d) = %q, want %q", i, b.String(), n, got, want)
		}
	}
}

func TestCostOf(t *testing.T) {
	var msgs []Message
	if err := json.Unmarshal([]byte(`[
		{"info": {"id": "m1", "role": "user"}, "parts": []},
		{"info": {"id": "m2", "role": "assistant", "providerID": "anthropic", "modelID": "claude-haiku-4-5",
			"tokens": {"input": 1000, "output": 200, "reasoning": 50, "cache": {"read": 300, "write": 20}}, "cost": 0.002}},
		{"info": {"id": "m3", "role": "assistant", "providerID": "anthropic", "modelID": "claude-haiku-4-5",
			"tokens": {"input": -5, "output": 10, "reasoning": 0, "cache": {"read": 0, "write": 0}}, "cost": -1}},
		{"info": {"id": "m4", "role": "assistant"}}
	]`), &msgs); err != nil {
		t.Fatal(err)
	}
	c := CostOf(msgs)
	want := Cost{TokensIn: 1320, TokensOut: 260, USD: 0.002, Model: "anthropic/claude-haiku-4-5", Turns: 3}
	if c != want {
		t.Fatalf("CostOf = %+v, want %+v", c, want)
	}
	if FormatCost(c) != "1.6k tokens, $0.0020" {
		t.Fatalf("FormatCost = %q", FormatCost(c))
	}
}

func TestParseModel(t *testing.T) {
	for s, ok := range map[string]bool{
		"anthropic/claude-haiku-4-5": true, "openrouter/anthropic/claude-3.5-haiku": true, "fake/fake-small": true,
		"haiku": false, "/x": false, "x/": false, "": false, "a/b c": false,
	} {
		if _, _, got := ParseModel(s); got != ok {
			t.Errorf("ParseModel(%q) ok = %v, want %v", s, got, ok)
		}
	}
}

// TestFormatCostAndPlural: one token is "1 token", and a logged cost has no float noise.
func TestFormatCostAndPlural(t *testing.T) {
	for _, c := range []struct {
		cost Cost
		want string
	}{
		{Cost{TokensIn: 1}, "1 token"},
		{Cost{TokensOut: 2}, "2 tokens"},
		{Cost{}, "0 tokens"},
		{Cost{TokensIn: 1200, TokensOut: 100, USD: 0.0042}, "1.3k tokens, $0.0042"},
	} {
		if got := FormatCost(c.cost); got != c.want {
			t.Errorf("FormatCost(%+v) = %q, want %q", c.cost, got, c.want)
		}
	}
	if got := plural(1, "day", "days") + " " + plural(int64(0), "day", "days") + " " + plural(7, "day", "days"); got != "day days days" {
		t.Errorf("Plural for 1, 0, 7: %q", got)
	}
	if got := RoundUSD(0.0007 + 0.0014); got != 0.0021 {
		t.Errorf("RoundUSD(0.0007+0.0014) = %v, want 0.0021", got)
	}
	if got := RoundUSD(0.12345678); got != 0.123457 {
		t.Errorf("RoundUSD(0.12345678) = %v, want 0.123457", got)
	}
}

// TestLedgerDirectory: an ended extraction child's cost names its root's project key (here
// opencode's project id, a hash) and the root's folder, which thatch costs shows; a
// LedgerRef journaled before the folder was kept loads without it.
func TestLedgerDirectory(t *testing.T) {
	const project, dir = "4b0ea68d7af9a6031a7ffda7ad66e0cb83315750", "/home/u/proj"
	s, now := NewState(), time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	step := func(in Input) *Effects {
		t.Helper()
		now = now.Add(time.Second)
		return DefaultRules.Step(s, in, now)
	}
	call := func(fx *Effects, op Op, purpose Purpose) Call {
		t.Helper()
		for _, c := range fx.Calls {
			if c.Op == op && c.Purpose == purpose {
				return c
			}
		}
		t.Fatalf("no %s call of purpose %q in %+v", op, purpose, fx.Calls)
		return Call{}
	}
	step(Event{ID: "e1", Type: "host.hello", HostID: "h1", Hello: &Hello{HostID: "h1", API: "v1", BootID: "b1", Caps: Capabilities{Context: true}}})
	step(Event{ID: "e2", Type: "session.created", HostID: "h1", SessionID: "ses_a", Info: &SessionInfo{ID: "ses_a", Title: "t", Directory: dir, ProjectID: project}})
	step(Event{ID: "e3", Type: "tool.execute.after", HostID: "h1", SessionID: "ses_a",
		Tool: &ToolExec{CallID: "c1", Tool: "bash", Args: json.RawMessage(`{"command":"go test ./..."}`), Output: "ok: all tests passed"}})
	create := call(step(Event{ID: "e4", Type: "session.idle", HostID: "h1", SessionID: "ses_a"}), OpCreate, PurposeExtract)
	step(Result{Call: create, Session: &SessionInfo{ID: "ses_x", ParentID: "ses_a", Title: ExtractionTitle, Directory: dir, ProjectID: project}})
	read := call(step(Event{ID: "e5", Type: "session.error", HostID: "h1", SessionID: "ses_x", Error: &ErrorInfo{Name: "APIError"}}), OpMessages, PurposeLedger)
	if ref := read.Ledger; ref == nil || ref.Root != "ses_a" || ref.Project != project || ref.Directory != dir {
		t.Fatalf("the ledger read names %+v, want root ses_a, project %s, directory %s", ref, project, dir)
	}
	usd := 0.001
	fx := step(Result{Call: read, Messages: []Message{{Info: MessageInfo{ID: "m1", Role: "assistant", Tokens: &Tokens{Input: 10, Output: 2}, Cost: &usd}}}})
	if len(fx.Ledger) != 1 || fx.Ledger[0].Project != project || fx.Ledger[0].Directory != dir {
		t.Fatalf("ledger rows %+v, want one of project %s in %s", fx.Ledger, project, dir)
	}

	var old Call
	if err := json.Unmarshal([]byte(`{"op":"session.messages","ledger":{"root":"ses_a","project":"/p","entries":1}}`), &old); err != nil ||
		old.Ledger == nil || old.Ledger.Project != "/p" || old.Ledger.Directory != "" {
		t.Errorf("an outbox call from before the folder: %+v (%v)", old.Ledger, err)
	}
}

// TestReminderHygieneCounts: the reminder's hygiene line counts in words that agree with
// the numbers, and its counters restart from zero once reported.
func TestReminderHygieneCounts(t *testing.T) {
	for _, c := range []struct {
		stale, healed, swept int64
		want                 string
	}{
		{1, 1, 1, "Hygiene since the last session: 1 stale claim requeued, 1 stranded session healed, 1 session's journal rows swept."},
		{2, 3, 4, "Hygiene since the last session: 2 stale claims requeued, 3 stranded sessions healed, 4 sessions' journal rows swept."},
		{0, 1, 0, "Hygiene since the last session: 1 stranded session healed."},
	} {
		s := NewState()
		s.Counters.StaleRequeued, s.Counters.Healed, s.Counters.Swept = c.stale, c.healed, c.swept
		tt := &step{Rules: DefaultRules, s: s, fx: NewEffects()}
		text := tt.reminder()
		if _, line, _ := strings.Cut(text, "\nHygiene"); "Hygiene"+line != c.want {
			t.Errorf("counters %d, %d, %d: reminder ends %q, want %q", c.stale, c.healed, c.swept, "Hygiene"+line, c.want)
		}
		if s.Counters.StaleRequeued+s.Counters.Healed+s.Counters.Swept != 0 || !tt.fx.Counters {
			t.Errorf("counters %d, %d, %d: not reset once reported: %+v", c.stale, c.healed, c.swept, s.Counters)
		}
	}
}

// The body the loop's decoder prepares is the body Step would make, redactions counted
// alike; Step takes it only for the OutputMax it was made for.
func TestPreparedBodyIsEntryBody(t *testing.T) {
	long := strings.Repeat("build output line\n", 300)
	execs := []ToolExec{
		{CallID: "c1", Tool: "bash", Args: json.RawMessage(`{"command":"export GITHUB_TOKEN=ghp_R8x2Kq9LmZ4vT7wN1pB6yC3dF5gH0jS2aE4u"}`),
			Title: "deploy", Output: "DB_PASSWORD=hunter2\n" + long, Metadata: json.RawMessage(`{"exit":0,"out":"` + strings.Repeat("m", 5000) + `"}`)},
		{CallID: "c2", Tool: "read", Args: json.RawMessage(`{"filePath":"/w/.env"}`), Title: ".env", Output: "STRIPE=plainvalue123"},
		{CallID: "c3", Tool: "edit", Args: json.RawMessage(`{"filePath":"/w/a.go","oldString":"` + strings.Repeat("é", 3000) + `"}`), Output: "ok"},
		{CallID: "c4", Tool: "todowrite", Args: json.RawMessage(`null`)},
	}
	for _, limit := range []int{DefaultRules.OutputMax, 100} {
		r := DefaultRules
		r.OutputMax = limit
		for _, x := range execs {
			plain, prepared := x, x
			want, wn := (&step{Rules: r}).entryBody(&plain)
			DefaultRules.PrepareBody(&prepared) // made for the default OutputMax
			if prepared.prepared == nil {
				t.Fatal("PrepareBody made nothing")
			}
			got, gn := (&step{Rules: r}).entryBody(&prepared)
			if !reflect.DeepEqual(got, want) || gn != wn {
				t.Errorf("OutputMax %d, %s: prepared body %+v (%d redactions), Step's %+v (%d)", limit, x.CallID, got, gn, want, wn)
			}
			if (got == prepared.prepared) != (limit == DefaultRules.OutputMax) {
				t.Errorf("OutputMax %d, %s: the prepared body was taken: %v", limit, x.CallID, got == prepared.prepared)
			}
		}
	}
}
