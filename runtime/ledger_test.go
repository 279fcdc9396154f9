package runtime

import (
	"encoding/json"
	"strings"
	"testing"
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
	if got := Plural(1, "day", "days") + " " + Plural(int64(0), "day", "days") + " " + Plural(7, "day", "days"); got != "day days days" {
		t.Errorf("Plural for 1, 0, 7: %q", got)
	}
	if got := RoundUSD(0.0007 + 0.0014); got != 0.0021 {
		t.Errorf("RoundUSD(0.0007+0.0014) = %v, want 0.0021", got)
	}
	if got := RoundUSD(0.12345678); got != 0.123457 {
		t.Errorf("RoundUSD(0.12345678) = %v, want 0.123457", got)
	}
}
