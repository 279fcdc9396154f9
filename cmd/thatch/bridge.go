package main

import (
	"context"
	"flag"
	"io"
	"os"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// bridgeCommand is thatch bridge: the opencode bridge next to a thatch already running.
type bridgeCommand struct{}

func (*bridgeCommand) Usage() usage {
	return usage{Name: "bridge", Summary: "bridge THATCH_OPENCODE_URL to a running thatch (serve does it itself when set)",
		Help: `bridge the opencode server at THATCH_OPENCODE_URL to a thatch that is already running
(thatch serve does it itself when THATCH_OPENCODE_URL is set). It takes no arguments:
configuration is by THATCH_* environment variables (see docs/configuration.md).`}
}

func (*bridgeCommand) Flags(*flag.FlagSet) {}

func (*bridgeCommand) Run(ctx context.Context, c daemon.Config, _ io.Writer, _ []string) error {
	return daemon.Bridge(ctx, c, daemon.NewLogger(os.Stderr, c.LogLevel, c.LogFormat))
}
