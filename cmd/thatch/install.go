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
type installCommand struct{ force bool }

func (*installCommand) Usage() usage {
	return usage{Name: "install", Summary: "install the /thatch/compact and /thatch/exit commands and the plugin for opencode",
		Help: `write the /thatch/compact and /thatch/exit commands (command/thatch/) and thatch's plugin
(plugin/thatch.js, which gives opencode's models the memory and extraction tools) into
opencode's config folder, $XDG_CONFIG_HOME/opencode, printing what changed. Restart
opencode afterwards so it loads them. thatch serve does the same at start unless
THATCH_INSTALL_COMMANDS=off. A plugin installed for another data folder whose thatch is
running is left to it (thatch install refuses, naming that folder; thatch serve warns);
--force takes it over. One of a stopped thatch is taken over, and said so.`}
}

func (i *installCommand) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&i.force, "force", false, "take the plugin over from the running thatch of another data folder")
}

func (i *installCommand) Run(_ context.Context, c daemon.Config, out io.Writer, _ []string) error {
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
