package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/thatch-dev/thatch/adapters/claudecode"
	"github.com/thatch-dev/thatch/commands"
)

// thatchBinary is the absolute path of this thatch binary, links resolved.
func thatchBinary() (string, error) {
	bin, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this thatch binary's path: %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(bin); err == nil {
		bin = resolved
	}
	return bin, nil
}

// claudeHooks are the Claude Code hook events thatch hook handles (docs/claude-code.md).
var claudeHooks = []string{"SessionStart", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop", "PreCompact", "SessionEnd"}

// claudeHookTimeout is the timeout, in seconds, written with each hook: thatch hook itself
// gives up after hookBudget.
const claudeHookTimeout = 10

// hookCommandLine is the command of thatch's hook for event: the environment thatch hook
// needs to reach this thatch, then the binary.
func hookCommandLine(bin string, env map[string]string, event string) string {
	var b strings.Builder
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s ", k, shellQuote(env[k]))
	}
	fmt.Fprintf(&b, "%s hook %s", shellQuote(bin), event)
	return b.String()
}

// isThatchHook says whether a hook command is thatch's for event, written by any thatch
// install (each starts with THATCH_DATA_DIR=, whatever the binary is called).
func isThatchHook(command, event string) bool {
	return strings.Contains(strings.ToLower(command), "thatch") && strings.HasSuffix(strings.TrimSpace(command), " hook "+event)
}

// changeVerb is what install says it did to path, asked before writing it: "created"
// when it does not exist yet, else "updated".
func changeVerb(path string) string {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return "created"
	}
	return "updated"
}

// readJSONObject reads a JSON object file; a missing file is an empty object.
func readJSONObject(path string) (map[string]any, os.FileMode, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]any{}, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	obj := map[string]any{}
	if len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, &obj); err != nil {
			return nil, 0, fmt.Errorf("%s is not a JSON object (%v): fix it by hand, then run thatch install --host claude-code again", path, err)
		}
	}
	return obj, fi.Mode().Perm(), nil
}

// writeJSONObject writes obj to path when it differs from what is there, through a file
// beside it renamed over it; mode is kept (new files get def).
func writeJSONObject(path string, obj map[string]any, mode, def os.FileMode) (bool, error) {
	data, err := json.MarshalIndent(obj, "", "  ")
	if err != nil {
		return false, err
	}
	data = append(data, '\n')
	if old, err := os.ReadFile(path); err == nil {
		var a, b any
		if json.Unmarshal(old, &a) == nil && json.Unmarshal(data, &b) == nil && jsonEqual(a, b) {
			return false, nil
		}
	}
	if mode == 0 {
		mode = def
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, err
	}
	tmp := path + ".thatch-tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return false, err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, path)
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// installClaudeCode adds thatch to Claude Code's user settings under home: the MCP server
// "thatch" (~/.claude.json, where claude mcp add --scope user puts it), the hooks
// (~/.claude/settings.json) and the commands /thatch:compact and /thatch:exit
// (~/.claude/commands/thatch). What was there besides thatch's stays. It prints what it
// changed, and "up to date" when nothing.
func installClaudeCode(home, bin string, env map[string]string, out io.Writer) error {
	var changed []string

	// The MCP server.
	userFile := filepath.Join(home, ".claude.json")
	userVerb := changeVerb(userFile)
	user, mode, err := readJSONObject(userFile)
	if err != nil {
		return err
	}
	servers, _ := user["mcpServers"].(map[string]any)
	if servers == nil {
		servers = map[string]any{}
	}
	envAny := map[string]any{}
	for k, v := range env {
		envAny[k] = v
	}
	servers["thatch"] = map[string]any{"type": "stdio", "command": bin, "args": []any{"mcp"}, "env": envAny}
	user["mcpServers"] = servers
	if ok, err := writeJSONObject(userFile, user, mode, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", userFile, err)
	} else if ok {
		changed = append(changed, userVerb+" "+userFile+": the MCP server thatch")
	}

	// The hooks.
	settingsFile := filepath.Join(home, ".claude", "settings.json")
	settingsVerb := changeVerb(settingsFile)
	settings, mode, err := readJSONObject(settingsFile)
	if err != nil {
		return err
	}
	hooks, _ := settings["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
	}
	for _, event := range claudeHooks {
		groups, _ := hooks[event].([]any)
		var kept []any // the user's hooks of this event, thatch's taken out
		for _, g := range groups {
			group, ok := g.(map[string]any)
			if !ok {
				kept = append(kept, g)
				continue
			}
			list, _ := group["hooks"].([]any)
			var others []any
			for _, h := range list {
				if hm, ok := h.(map[string]any); ok {
					if cmd, _ := hm["command"].(string); isThatchHook(cmd, event) {
						continue
					}
				}
				others = append(others, h)
			}
			if len(list) > 0 && len(others) == 0 {
				continue // a group that held only thatch's hook
			}
			group["hooks"] = others
			kept = append(kept, group)
		}
		ours := map[string]any{"hooks": []any{map[string]any{"type": "command", "command": hookCommandLine(bin, env, event), "timeout": claudeHookTimeout}}}
		if strings.HasPrefix(event, "PostToolUse") {
			ours["matcher"] = "*"
		}
		hooks[event] = append(kept, ours)
	}
	settings["hooks"] = hooks
	// thatch's own tools run without asking: a wrap-up command's flush calls them in a
	// row, and a headless session (claude -p) cannot ask at all.
	perms, _ := settings["permissions"].(map[string]any)
	if perms == nil {
		perms = map[string]any{}
	}
	allow, _ := perms["allow"].([]any)
	for _, tool := range claudecode.ExtractionTools() {
		if !slices.Contains(allow, any(tool)) {
			allow = append(allow, tool)
		}
	}
	perms["allow"] = allow
	settings["permissions"] = perms
	if ok, err := writeJSONObject(settingsFile, settings, mode, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", settingsFile, err)
	} else if ok {
		changed = append(changed, settingsVerb+" "+settingsFile+": thatch's hooks and its tools' permissions")
	}

	// The wrap-up commands: ~/.claude/commands/thatch/compact.md is /thatch:compact.
	dir := filepath.Join(home, ".claude", "commands", "thatch")
	for _, f := range commands.ClaudeCodeFiles() {
		path := filepath.Join(dir, f.Name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, f.Data) {
			continue
		}
		verb := changeVerb(path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.Data, 0o644); err != nil {
			return err
		}
		changed = append(changed, verb+" "+path)
	}

	if len(changed) == 0 {
		_, err := fmt.Fprintf(out, "Claude Code is set up for thatch: up to date in %s\n", home)
		return err
	}
	for _, c := range changed {
		fmt.Fprintln(out, c)
	}
	_, err = fmt.Fprintln(out, "Start a new Claude Code session to load them (thatch serve must be running).")
	return err
}
