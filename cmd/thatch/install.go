package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// installCommand is thatch install: opencode's slash commands and thatch's plugin, or, with
// --host mcp, the configuration an MCP client needs to start thatch mcp.
type installCommand struct {
	host  string
	force bool
}

func (*installCommand) Usage() usage {
	return usage{Name: "install", Summary: "install the /thatch/compact and /thatch/exit commands and the plugin for opencode",
		Help: `write the /thatch/compact and /thatch/exit commands (command/thatch/) and thatch's plugin
(plugin/thatch.js, which gives opencode's models the memory and extraction tools) into
opencode's config folder, $XDG_CONFIG_HOME/opencode, printing what changed. Restart
opencode afterwards so it loads them. thatch serve does the same at start unless
THATCH_INSTALL_COMMANDS=off. A plugin installed for another data folder whose thatch is
running is left to it (thatch install refuses, naming that folder; thatch serve warns);
--force takes it over. One of a stopped thatch is taken over, and said so.
With --host claude-code, add thatch's MCP server (~/.claude.json), its hooks
(~/.claude/settings.json) and the commands /thatch:compact and /thatch:exit
(~/.claude/commands/thatch) to Claude Code's user settings, keeping the rest; run it again
after moving thatch. With --host mcp, write nothing: print the configuration an MCP client (Claude Code,
Cursor, Codex…) needs to run thatch mcp, this thatch binary with its environment.`}
}

func (i *installCommand) Flags(fs *flag.FlagSet) {
	fs.StringVar(&i.host, "host", "opencode", "the `HOST` to set up: opencode, claude-code, or mcp to print an MCP client's configuration")
	fs.BoolVar(&i.force, "force", false, "take the plugin over from the running thatch of another data folder")
}

func (i *installCommand) Run(_ context.Context, c daemon.Config, out io.Writer, _ []string) error {
	switch i.host {
	case "opencode":
	case "mcp":
		return printMCPConfig(c, out)
	case "claude-code":
		home, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("thatch install --host claude-code needs your home folder (set HOME): %w", err)
		}
		bin, err := thatchBinary()
		if err != nil {
			return err
		}
		return installClaudeCode(home, bin, mcpEnv(c), out)
	default:
		return fmt.Errorf("thatch install --host %q: the hosts are opencode, claude-code and mcp", i.host)
	}
	// The changes are printed below; the log says only what needs attention (an unsafe
	// token replaced).
	in, err := daemon.InstallWith(c, daemon.NewLogger(os.Stderr, "warn", c.LogFormat), daemon.InstallOptions{Force: i.force})
	if err != nil {
		return err
	}
	for _, ch := range in.Changes {
		verb := "updated"
		if ch.Created {
			verb = "created"
		}
		fmt.Fprintf(out, "%s %s\n", verb, ch.Path)
	}
	switch {
	case in.From != "" && in.FromRunning:
		fmt.Fprintf(out, "took the plugin over from the running thatch of the data folder %s (--force): its opencode sessions now reach this one, %s\n", in.From, c.DataDir)
	case in.From != "":
		fmt.Fprintf(out, "took the plugin over from the data folder %s, whose thatch is not running: it now reaches this one, %s\n", in.From, c.DataDir)
	}
	if len(in.Changes) == 0 {
		fmt.Fprintf(out, "up to date in %s\n", c.OpencodeDir)
	} else {
		fmt.Fprintln(out, "restart opencode (or POST /instance/dispose) so it loads the new files")
	}
	return nil
}

// printMCPConfig prints the configuration of an MCP client's server thatch: the absolute
// path of this thatch binary, the arguments ["mcp"], and the THATCH_* variables thatch mcp
// needs to reach this thatch (the data folder always: the client's environment may put it
// elsewhere), in the mcpServers form that Claude Code's .mcp.json, Cursor's mcp.json and
// others read. A token is never printed: it says where to put one instead.
func printMCPConfig(c daemon.Config, out io.Writer) error {
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this thatch binary's path: %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(bin); err == nil {
		bin = resolved
	}
	env := mcpEnv(c)
	cfg := map[string]any{"mcpServers": map[string]any{"thatch": map[string]any{"command": bin, "args": []string{"mcp"}, "env": env}}}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "%s\n", data); err != nil {
		return err
	}
	if c.NATSToken != "" {
		fmt.Fprintln(os.Stderr, "thatch: THATCH_NATS_TOKEN is set here: add it to the env above yourself (it is a secret, so thatch does not print it)")
	}
	return nil
}

// mcpEnv is what thatch mcp needs of this configuration to reach this thatch: the data
// folder (the embedded broker's token and address) and whatever else differs from the
// defaults of how commands reach the broker.
func mcpEnv(c daemon.Config) map[string]string {
	env := map[string]string{"THATCH_DATA_DIR": c.DataDir}
	v := reflect.ValueOf(c)
	for _, field := range []string{"NATSURL", "NATSCreds", "NATSListen", "NATSTLSCA", "NATSTLSCert", "APIPrefix", "HostTimeoutMS"} {
		f, _ := v.Type().FieldByName(field)
		if value := fmt.Sprint(v.FieldByName(field).Interface()); value != f.Tag.Get("default") {
			env["THATCH_"+f.Tag.Get("envconfig")] = value
		}
	}
	if c.NATSURL != "" {
		env["THATCH_NATS_URL"] = shownURL(c.NATSURL) // without the credentials a URL may carry
	}
	return env
}
