package commands

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

//go:embed templates/*.md plugin/thatch.js
var templates embed.FS

// File is one file the installer manages, relative to the opencode config folder.
type File struct {
	Path    string // e.g. command/thatch/compact.md
	Content []byte
}

// Files returns the command files, in a stable order.
func Files() []File {
	names, _ := fs.Glob(templates, "templates/*.md")
	sort.Strings(names)
	var out []File
	for _, n := range names {
		data, _ := templates.ReadFile(n)
		out = append(out, File{Path: filepath.Join("command", "thatch", filepath.Base(n)), Content: data})
	}
	return out
}

// Plugin is the opencode plugin shim, pointed at the bridge's loopback endpoint and the
// file holding its token. It goes to plugin/thatch.js in the opencode config folder.
func Plugin(endpoint, tokenFile string) File {
	data, _ := templates.ReadFile("plugin/thatch.js")
	js, _ := json.Marshal(endpoint) // JSON string literals are JavaScript ones
	tf, _ := json.Marshal(tokenFile)
	text := strings.ReplaceAll(string(data), `"__ENDPOINT__"`, string(js))
	text = strings.ReplaceAll(text, `"__TOKEN_FILE__"`, string(tf))
	return File{Path: filepath.Join("plugin", "thatch.js"), Content: []byte(text)}
}

// Change is one file the installer wrote.
type Change struct {
	Path    string
	Created bool // false: an existing file was rewritten
}

// Install writes files under dir (the opencode config folder), skipping those whose
// content is already right. It returns what it changed.
func Install(dir string, files []File) ([]Change, error) {
	var changes []Change
	for _, f := range files {
		path := filepath.Join(dir, f.Path)
		old, err := os.ReadFile(path)
		if err == nil && bytes.Equal(old, f.Content) {
			continue
		}
		created := os.IsNotExist(err)
		if err != nil && !created {
			return changes, fmt.Errorf("read %s: %w", path, err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return changes, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
		}
		tmp := path + ".thatch-tmp"
		if err := os.WriteFile(tmp, f.Content, 0o644); err != nil {
			return changes, fmt.Errorf("write %s: %w", path, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
			return changes, fmt.Errorf("write %s: %w", path, err)
		}
		changes = append(changes, Change{Path: path, Created: created})
	}
	return changes, nil
}

// ClaudeFile is a Claude Code custom command: Name in ~/.claude/commands/thatch, which
// Claude Code offers as /thatch:<name without .md>.
type ClaudeFile struct {
	Name string
	Data []byte
}

// ClaudeCodeFiles are the wrap-up commands for Claude Code: the opencode commands' text,
// named as Claude Code names them (/thatch:compact). Their flush step holds as it is: a
// Claude Code session's thatch mcp offers it thatch_get_extraction_payload and
// thatch_extraction_done as its own (the session id Claude Code gives its MCP servers).
func ClaudeCodeFiles() []ClaudeFile {
	var out []ClaudeFile
	for _, f := range Files() {
		text := strings.ReplaceAll(string(f.Content), "/thatch/", "/thatch:")
		out = append(out, ClaudeFile{Name: filepath.Base(f.Path), Data: []byte(text)})
	}
	return out
}
