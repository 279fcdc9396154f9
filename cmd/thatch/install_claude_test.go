package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/adapters/claudecode"
)

// TestInstallClaudeCode: thatch install --host claude-code adds the MCP server, the hooks
// and the commands to Claude Code's user settings, keeps the user's own settings and hooks,
// and changes nothing the second time; a moved thatch replaces its hooks, not adds them.
func TestInstallClaudeCode(t *testing.T) {
	home := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(home, ".claude"), 0o755))
	must(t, os.WriteFile(filepath.Join(home, ".claude.json"), []byte(`{"userID":"u1","mcpServers":{"other":{"command":"x"}}}`), 0o600))
	must(t, os.WriteFile(filepath.Join(home, ".claude", "settings.json"), []byte(`{"model":"opus","permissions":{"allow":["Bash(ls)"]},"hooks":{"Stop":[{"hooks":[{"type":"command","command":"notify-send done"}]}]}}`), 0o644))
	env := map[string]string{"THATCH_DATA_DIR": "/data dir"}

	var out bytes.Buffer
	must(t, installClaudeCode(home, "/opt/thatch/bin/thatch", env, &out))
	for _, want := range []string{".claude.json: the MCP server thatch", "settings.json: thatch's hooks", "commands/thatch/compact.md", "commands/thatch/exit.md"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("first install printed %q, missing %q", out.String(), want)
		}
	}
	var user struct {
		UserID     string                    `json:"userID"`
		MCPServers map[string]map[string]any `json:"mcpServers"`
	}
	data, err := os.ReadFile(filepath.Join(home, ".claude.json"))
	must(t, err)
	must(t, json.Unmarshal(data, &user))
	if user.UserID != "u1" || user.MCPServers["other"]["command"] != "x" || user.MCPServers["thatch"]["command"] != "/opt/thatch/bin/thatch" ||
		user.MCPServers["thatch"]["env"].(map[string]any)["THATCH_DATA_DIR"] != "/data dir" {
		t.Fatalf(".claude.json: %s", data)
	}
	if fi, _ := os.Stat(filepath.Join(home, ".claude.json")); fi.Mode().Perm() != 0o600 {
		t.Fatalf(".claude.json mode %v, want 0600 kept", fi.Mode().Perm())
	}

	type hook struct {
		Type, Command string
		Timeout       int
	}
	var settings struct {
		Model       string `json:"model"`
		Permissions struct {
			Allow []string `json:"allow"`
		} `json:"permissions"`
		Hooks map[string][]struct {
			Matcher string `json:"matcher"`
			Hooks   []hook `json:"hooks"`
		} `json:"hooks"`
	}
	read := func() {
		data, err := os.ReadFile(filepath.Join(home, ".claude", "settings.json"))
		must(t, err)
		settings.Hooks, settings.Permissions.Allow = nil, nil
		must(t, json.Unmarshal(data, &settings))
	}
	read()
	if settings.Model != "opus" {
		t.Fatalf("the user's model setting is gone: %q", settings.Model)
	}
	for _, ev := range claudeHooks {
		var ours []string
		for _, g := range settings.Hooks[ev] {
			for _, h := range g.Hooks {
				if strings.Contains(h.Command, " hook "+ev) {
					ours = append(ours, h.Command)
					if strings.HasPrefix(ev, "PostToolUse") && g.Matcher != "*" {
						t.Errorf("%s hook without the matcher *", ev)
					}
				}
			}
		}
		if want := "THATCH_DATA_DIR='/data dir' /opt/thatch/bin/thatch hook " + ev; len(ours) != 1 || ours[0] != want {
			t.Errorf("%s: thatch's hooks %q, want [%q]", ev, ours, want)
		}
	}
	if got := settings.Hooks["Stop"]; len(got) != 2 || got[0].Hooks[0].Command != "notify-send done" {
		t.Fatalf("the user's Stop hook is not kept first: %+v", got)
	}
	compact, err := os.ReadFile(filepath.Join(home, ".claude", "commands", "thatch", "compact.md"))
	must(t, err)
	// The flush step as opencode's: a Claude Code session's thatch mcp offers it the
	// extraction tools as its own.
	if !strings.Contains(string(compact), "/thatch:compact") || !strings.Contains(string(compact), "THATCH_COMPACT_READY") || !strings.Contains(string(compact), "call `thatch_get_extraction_payload`") {
		t.Fatalf("compact.md for Claude Code:\n%s", compact)
	}
	// thatch's tools are allowed (a headless wrap-up cannot ask), the user's rules kept.
	if want := append([]string{"Bash(ls)"}, claudecode.ExtractionTools()...); !slices.Equal(settings.Permissions.Allow, want) {
		t.Fatalf("permissions.allow %q, want %q", settings.Permissions.Allow, want)
	}

	out.Reset()
	must(t, installClaudeCode(home, "/opt/thatch/bin/thatch", env, &out))
	if !strings.Contains(out.String(), "up to date") {
		t.Fatalf("second install printed %q, want up to date", out.String())
	}

	out.Reset()
	must(t, installClaudeCode(home, "/usr/local/bin/th", env, &out)) // moved, and renamed
	must(t, installClaudeCode(home, "/usr/local/bin/th", env, &out)) // its hooks are known by their THATCH_ variables
	read()
	if want := append([]string{"Bash(ls)"}, claudecode.ExtractionTools()...); !slices.Equal(settings.Permissions.Allow, want) {
		t.Fatalf("after installs again, permissions.allow %q, want %q", settings.Permissions.Allow, want)
	}
	n := 0
	for _, g := range settings.Hooks["PostToolUse"] {
		for _, h := range g.Hooks {
			if strings.HasSuffix(h.Command, " hook PostToolUse") {
				n++
				if !strings.Contains(h.Command, "/usr/local/bin/th hook") {
					t.Errorf("a moved thatch left its old hook: %q", h.Command)
				}
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d PostToolUse hooks of thatch after it moved, want 1", n)
	}
}
