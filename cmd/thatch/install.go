package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// installCommand is thatch install: opencode's slash commands and thatch's plugin.
type installCommand struct{}

func (*installCommand) Usage() usage {
	return usage{Name: "install", Summary: "install the /thatch/compact and /thatch/exit commands and the plugin for opencode",
		Help: `write the /thatch/compact and /thatch/exit commands (command/thatch/) and thatch's plugin
(plugin/thatch.js, which gives opencode's models the memory and extraction tools) into
opencode's config folder, $XDG_CONFIG_HOME/opencode, printing what changed. Restart
opencode afterwards so it loads them. thatch serve does the same at start unless
THATCH_INSTALL_COMMANDS=off.`}
}

func (*installCommand) Flags(*flag.FlagSet) {}

func (*installCommand) Run(_ context.Context, c daemon.Config, out io.Writer, _ []string) error {
	// The changes are printed below; the log says only what needs attention (an unsafe
	// token replaced).
	changes, err := daemon.Install(c, daemon.NewLogger(os.Stderr, "warn", c.LogFormat))
	if err != nil {
		return err
	}
	for _, ch := range changes {
		verb := "updated"
		if ch.Created {
			verb = "created"
		}
		fmt.Fprintf(out, "%s %s\n", verb, ch.Path)
	}
	if len(changes) == 0 {
		fmt.Fprintf(out, "up to date in %s\n", c.OpencodeDir)
	} else {
		fmt.Fprintln(out, "restart opencode (or POST /instance/dispose) so it loads the new files")
	}
	return nil
}
