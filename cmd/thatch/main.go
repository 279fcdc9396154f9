// Command thatch is the session-lifecycle sidecar for opencode-style coding-agent hosts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/thatch-dev/thatch/adapters/natsbus"
)

const usage = `thatch: the session-lifecycle sidecar for opencode-style hosts

Usage:
  thatch serve                       run the daemon (embedded NATS and SQLite by default)
  thatch bridge                      bridge THATCH_OPENCODE_URL to a running thatch (serve does it itself when set)
  thatch status [--json]             the daemon's counters
  thatch sessions [--host ID] [--json]
                                     the live sessions thatch tracks
  thatch entries SESSION [--json]    the journaled entries of a top-level session
  thatch sweep [--dry-run] [--host ID] [--json]
                                     one strand sweep now, printing its plan
  thatch costs [--days N] [--json]   what extraction cost, by UTC day and project (default: 30 days)
  thatch deadletters [--json]        the events thatch rejected, newest first, and why
  thatch memories [--project P] [--search Q] [--kind K] [--limit N] [--json]
                                     the memories thatch keeps (show, forget, restore, export, import, hygiene, dismiss: see thatch memories --help)
  thatch ui [--no-open]              print the web page's link (and open it): sessions, memories, dead letters, sweep
  thatch install                     install the /thatch/compact and /thatch/exit commands and the plugin for opencode
  thatch env                         what a host needs to connect: the broker URL with its token, the prefixes
  thatch bench [--quick] [--out FILE] measure thatch against the bare pipeline (see the README)
  thatch version                     print the version

thatch COMMAND --help describes one command. Configuration is by THATCH_* environment
variables: see the README.
`

// commandUsage is the --help of the commands that take no flags.
var commandUsage = map[string]string{
	"serve": `usage: thatch serve
  run the daemon: the embedded NATS broker on THATCH_NATS_LISTEN (none with THATCH_NATS_URL),
  the journal and memories in THATCH_DATA_DIR, the sweeps, and the opencode bridge when
  THATCH_OPENCODE_URL is set. It takes no arguments: configuration is by THATCH_*
  environment variables (see the README).`,
	"bridge": `usage: thatch bridge
  bridge the opencode server at THATCH_OPENCODE_URL to a thatch that is already running
  (thatch serve does it itself when THATCH_OPENCODE_URL is set). It takes no arguments:
  configuration is by THATCH_* environment variables (see the README).`,
	"install": `usage: thatch install
  write the /thatch/compact and /thatch/exit commands (command/thatch/) and thatch's plugin
  (plugin/thatch.js, which gives opencode's models the memory and extraction tools) into
  opencode's config folder, $XDG_CONFIG_HOME/opencode, printing what changed. Restart
  opencode afterwards so it loads them. thatch serve does the same at start unless
  THATCH_INSTALL_COMMANDS=off.`,
	"env": `usage: thatch env
  print, as shell assignments, what a protocol host (or thatch bridge in another shell)
  needs to reach this thatch: THATCH_NATS_URL with the embedded broker's token (from
  $THATCH_DATA_DIR/broker.token, made if absent, or THATCH_NATS_TOKEN), the certificate
  to trust when the broker serves TLS, and the subject prefixes. The output holds the
  token: keep it private. With THATCH_NATS_URL, the external broker's own users apply.`,
	"version": `usage: thatch version
  print the version`,
}

func main() {
	// A --help answered by the flag package (thatch bench --help) is not a failure.
	if err := run(os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		// An error may quote a URL with its credentials (a bad THATCH_NATS_URL).
		fmt.Fprintln(os.Stderr, "thatch:", natsbus.RedactURLs(err.Error()))
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("no command given")
	}
	cmd, args := args[0], args[1:]
	if help, ok := commandUsage[cmd]; ok && len(args) > 0 {
		// These take no flags: a --help must not start a daemon or write files.
		if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
			fmt.Println(help)
			return nil
		}
		return fmt.Errorf("thatch %s takes no arguments (configuration is by THATCH_* variables: see the README), got %q\n%s", cmd, args, help)
	}
	switch cmd {
	case "version", "--version", "-v":
		fmt.Println(version())
		return nil
	case "help", "--help", "-h":
		fmt.Print(usage)
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "bench":
		var progress io.Writer
		if isTerminal(os.Stderr) {
			progress = os.Stderr
		}
		return bench(ctx, args, os.Stdout, progress)
	case "bench-rehydrate": // the child process of thatch bench
		if len(args) < 1 || len(args) > 2 {
			return fmt.Errorf("usage: thatch bench-rehydrate JOURNAL [CPUPROFILE]")
		}
		return benchRehydrate(args[0], strings.Join(args[1:], ""), os.Stdout)
	}
	c, err := loadConfig()
	if err != nil {
		return err
	}
	switch cmd {
	case "serve":
		return serve(ctx, c, newLogger(os.Stderr, c.LogLevel, c.LogFormat))
	case "bridge":
		return bridge(ctx, c, newLogger(os.Stderr, c.LogLevel, c.LogFormat))
	case "install":
		// The changes are printed below; the log says only what needs attention (an
		// unsafe token replaced).
		changes, err := install(c, newLogger(os.Stderr, "warn", c.LogFormat))
		if err != nil {
			return err
		}
		for _, ch := range changes {
			verb := "updated"
			if ch.Created {
				verb = "created"
			}
			fmt.Printf("%s %s\n", verb, ch.Path)
		}
		if len(changes) == 0 {
			fmt.Printf("up to date in %s\n", c.OpencodeDir)
		} else {
			fmt.Println("restart opencode (or POST /instance/dispose) so it loads the new files")
		}
		return nil
	case "env":
		return env(c, os.Stdout, newLogger(os.Stderr, c.LogLevel, c.LogFormat))
	case "status", "sessions", "entries", "sweep", "costs", "deadletters":
		return client(ctx, c, cmd, args, os.Stdout)
	case "memories":
		return memoriesCmd(ctx, c, args, os.Stdout)
	case "ui":
		return ui(ctx, c, args, os.Stdout)
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}
