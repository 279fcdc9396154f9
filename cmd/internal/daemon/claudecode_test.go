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
