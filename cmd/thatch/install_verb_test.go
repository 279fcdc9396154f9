package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallClaudeCodeCreated: install --host claude-code says "created" for the files it
// wrote anew and "updated" for those it changed.
func TestInstallClaudeCodeCreated(t *testing.T) {
	home := t.TempDir()
	must(t, os.WriteFile(filepath.Join(home, ".claude.json"), []byte(`{"theme":"dark"}`), 0o600))
	var out bytes.Buffer
	must(t, installClaudeCode(home, "/opt/thatch/bin/thatch", map[string]string{"THATCH_DATA_DIR": "/d"}, &out))
	got := out.String()
	for _, want := range []string{
		"updated " + filepath.Join(home, ".claude.json") + ": the MCP server thatch\n",
		"created " + filepath.Join(home, ".claude", "settings.json") + ": thatch's hooks and its tools' permissions\n",
		"created " + filepath.Join(home, ".claude", "commands", "thatch", "compact.md") + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("install printed:\n%s\nwithout %q", got, want)
		}
	}
}
