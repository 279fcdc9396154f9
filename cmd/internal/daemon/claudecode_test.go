package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClaudeMissing: serve warns when Claude Code's hooks name this thatch's data folder
// and the claude binary is not found, and only then.
func TestClaudeMissing(t *testing.T) {
	home, data := t.TempDir(), filepath.Join(t.TempDir(), "my data")
	settings := `{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"THATCH_DATA_DIR='` + data + `' /usr/bin/thatch hook Stop"}]}]}}`
	if err := os.MkdirAll(filepath.Join(home, ".claude"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".claude", "settings.json"), []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{DataDir: data, ClaudeBin: "no-such-claude-here"}
	if w := claudeMissing(home, c); !strings.Contains(w, `"no-such-claude-here" is not found`) || !strings.Contains(w, "THATCH_CLAUDE_BIN") {
		t.Fatalf("with Claude Code set up for this thatch and no claude: %q", w)
	}
	sh, err := os.Executable() // any executable stands for claude
	if err != nil {
		t.Fatal(err)
	}
	if w := claudeMissing(home, Config{DataDir: data, ClaudeBin: sh}); w != "" {
		t.Fatalf("with claude found: %q", w)
	}
	if w := claudeMissing(home, Config{DataDir: filepath.Join(t.TempDir(), "other"), ClaudeBin: "no-such-claude-here"}); w != "" {
		t.Fatalf("with Claude Code set up for another thatch: %q", w)
	}
	if w := claudeMissing(t.TempDir(), c); w != "" {
		t.Fatalf("without Claude Code: %q", w)
	}
}

// TestHostsLine: serve's start log names each host and how it reaches thatch: opencode's
// bridge only when THATCH_OPENCODE_URL is set, Claude Code as set up for this data folder
// (its hooks name it) or not, MCP clients always; nothing reads as a missing step.
func TestHostsLine(t *testing.T) {
	home, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
	c := Config{DataDir: data}
	attrs := func(c Config, hooks bool) map[string]string {
		kv := hostsLine(c, hooks)
		out := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1].(string)
		}
		return out
	}
	if claudeSetUp(home, c) {
		t.Fatal("Claude Code set up in an empty home")
	}
	got := attrs(c, claudeSetUp(home, c))
	if !strings.HasPrefix(got["opencode"], "no bridge") || !strings.Contains(got["claude_code"], "thatch install --host claude-code") || got["mcp"] == "" {
		t.Fatalf("without opencode or Claude Code: %v", got)
	}
	settings := `{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"THATCH_DATA_DIR=` + data + ` /usr/bin/thatch hook Stop"}]}]}}`
	if err := os.MkdirAll(filepath.Join(home, ".claude"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".claude", "settings.json"), []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
	c.OpencodeURL = "http://127.0.0.1:4096"
	got = attrs(c, claudeSetUp(home, c))
	if got["opencode"] != "bridging http://127.0.0.1:4096" || !strings.HasPrefix(got["claude_code"], "hooks installed") {
		t.Fatalf("with both: %v", got)
	}
	for k, v := range got {
		if strings.Contains(v, "no opencode") || strings.Contains(v, "missing") {
			t.Errorf("%s=%q reads as a missing step", k, v)
		}
	}
}
