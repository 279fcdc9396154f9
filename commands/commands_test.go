package commands

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestInstallWritesOnlyWhatDiffers(t *testing.T) {
	dir := t.TempDir()
	changes, err := Install(dir, Files())
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 2 || !changes[0].Created || !changes[1].Created {
		t.Fatalf("first install changed %+v, want both files created", changes)
	}
	compact := filepath.Join(dir, "command", "thatch", "compact.md")
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	for _, p := range []string{compact, filepath.Join(dir, "command", "thatch", "exit.md")} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	changes, err = Install(dir, Files())
	if err != nil || len(changes) != 0 {
		t.Fatalf("second install changed %+v (%v), want nothing", changes, err)
	}
	if fi, _ := os.Stat(compact); !fi.ModTime().Equal(old) {
		t.Fatalf("an unchanged file was rewritten: mtime %v, want %v", fi.ModTime(), old)
	}
	if err := os.WriteFile(compact, []byte("edited by hand"), 0o644); err != nil {
		t.Fatal(err)
	}
	changes, err = Install(dir, Files())
	if err != nil || len(changes) != 1 || changes[0].Path != compact || changes[0].Created {
		t.Fatalf("after an edit the install changed %+v (%v), want compact.md restored", changes, err)
	}
	if data, _ := os.ReadFile(compact); string(data) != string(Files()[0].Content) {
		t.Fatal("the edited file was not restored")
	}
}

// opencode substitutes $ARGUMENTS mechanically, with no default for an empty value.
func substitute(template, args string) string {
	return strings.ReplaceAll(template, "$ARGUMENTS", args)
}

func TestTemplates(t *testing.T) {
	for _, f := range Files() {
		kind := strings.TrimSuffix(filepath.Base(f.Path), ".md")
		text := string(f.Content)
		token := map[string]string{"compact": "THATCH_COMPACT_READY", "exit": "THATCH_EXIT_READY"}[kind]
		t.Run(kind, func(t *testing.T) {
			if !strings.HasPrefix(text, "---\ndescription: ") {
				t.Error("no description front matter")
			}
			if n := strings.Count(text, "$ARGUMENTS"); n != 1 {
				t.Fatalf("$ARGUMENTS appears %d times, want once", n)
			}
			user := strings.Index(text, "# User Message")
			check := strings.Index(text, "# Pre-"+kind+" wrap-up checklist")
			if user < 0 || check < 0 || user > check {
				t.Fatal("want a # User Message section before the checklist section")
			}
			for _, want := range []string{"thatch_get_extraction_payload", "thatch_extraction_done", "\n" + token + "\n", "todos"} {
				if !strings.Contains(text[check:], want) {
					t.Errorf("checklist lacks %q", want)
				}
			}
			// The user's words land under # User Message, ahead of the checklist.
			got := substitute(text, "please also bump the version")
			at := strings.Index(got, "please also bump the version")
			if at < strings.Index(got, "# User Message") || at > strings.Index(got, "# Pre-") {
				t.Fatal("the user's text does not land in the User Message section")
			}
			// An empty argument leaves the fallback line meaningful.
			empty := substitute(text, "")
			section := empty[strings.Index(empty, "# User Message"):strings.Index(empty, "# Pre-")]
			if !strings.Contains(section, "If it is empty") || !strings.Contains(section, "n/a") {
				t.Fatalf("an empty User Message section has no fallback line:\n%s", section)
			}
		})
	}
}

func TestPluginShim(t *testing.T) {
	f := Plugin("http://127.0.0.1:4223", `/home/a "b"/shim.token`)
	text := string(f.Content)
	if f.Path != filepath.Join("plugin", "thatch.js") || strings.Contains(text, "__ENDPOINT__") || strings.Contains(text, "__TOKEN_FILE__") {
		t.Fatalf("placeholders left in %s", f.Path)
	}
	for _, want := range []string{`const ENDPOINT = "http://127.0.0.1:4223"`, `const TOKEN_FILE = "/home/a \"b\"/shim.token"`,
		"thatch_get_extraction_payload: tool(", "thatch_extraction_done: tool(", "memory_search: tool(", "memory_remember: tool(",
		"memory_update: tool(", "memory_forget: tool(", `"command.execute.before"`, `"tool.execute.after"`,
		`"experimental.chat.system.transform"`, `"experimental.session.compacting"`, `"/api/" + method`,
		`contextText("session.context", { sessionID, projectID: project?.id, directory })`, `contextText("memory.context", { sessionID: input.sessionID })`} {
		if !strings.Contains(text, want) {
			t.Errorf("the shim lacks %s", want)
		}
	}
}
