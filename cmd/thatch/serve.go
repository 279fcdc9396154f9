package main

import (
	"context"
	"flag"
	"io"
	"os"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// serveCommand is thatch serve: the daemon.
type serveCommand struct{}

func (*serveCommand) Usage() usage {
	return usage{Name: "serve", Summary: "run the daemon (embedded NATS and SQLite by default)",
		Help: `run the daemon: the embedded NATS broker on THATCH_NATS_LISTEN (none with THATCH_NATS_URL),
the journal and memories in THATCH_DATA_DIR, the sweeps, and the opencode bridge when
THATCH_OPENCODE_URL is set. It takes no arguments: configuration is by THATCH_*
environment variables (see docs/configuration.md).`}
}

func (*serveCommand) Flags(*flag.FlagSet) {}

func (*serveCommand) Run(ctx context.Context, c daemon.Config, _ io.Writer, _ []string) error {
	return daemon.Serve(ctx, c, daemon.NewLogger(os.Stderr, c.LogLevel, c.LogFormat))
}
