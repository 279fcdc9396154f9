// Command thatch is the session-lifecycle sidecar for opencode-style coding-agent hosts:
// thatch serve runs the daemon (cmd/internal/daemon), and the other subcommands ask it,
// or set up what a host needs. Each subcommand is a command type in a file of its own
// (command.go says how they run).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, errorLine(err))
		os.Exit(1)
	}
}

// errorLine is how thatch reports a command's error on standard error: "thatch: " and
// the error, or the error alone when it names thatch first already ("thatch is not
// running…": not "thatch: thatch is not running…").
func errorLine(err error) string {
	msg := err.Error()
	// thatch's answer to a request it refused: its words, without the error's wire name
	// (BadRequestError, …), which is for programs.
	if pe, ok := errors.AsType[*protocol.Error](err); ok && pe.Message != "" && msg == pe.Error() {
		msg = pe.Message
	}
	// An error may quote a URL with its credentials (a bad THATCH_NATS_URL).
	msg = natsbus.RedactURLs(msg)
	if strings.HasPrefix(msg, "thatch ") || strings.HasPrefix(msg, "thatch:") {
		return msg
	}
	return "thatch: " + msg
}

// run runs thatch's command line, with the configuration of the THATCH_* variables, until
// it ends or a SIGINT or SIGTERM stops it.
func run(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runCommand(ctx, daemon.LoadConfig, os.Stdout, args)
}
