// Command thatch-bench measures thatch: it starts its own broker, plays seeded fake hosts
// against thatch's daemon wiring, and reports throughput, latencies, rehydrate time and
// memory, the memory store and the operator's page against the bare pipeline (see
// docs/performance.md). It is a tool of the repository, apart from thatch so that
// thatch's binary links no test double.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// rehydrateChild is the hidden first argument that makes thatch-bench the child process of
// the rehydrate figure, which loads a journal in a process of its own to measure its memory.
const rehydrateChild = "rehydrate-child"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "thatch-bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 && args[0] == rehydrateChild {
		if len(args) < 2 || len(args) > 3 {
			return fmt.Errorf("usage: thatch-bench %s JOURNAL [CPUPROFILE]", rehydrateChild)
		}
		profile := ""
		if len(args) == 3 {
			profile = args[2]
		}
		return benchRehydrate(args[1], profile, os.Stdout)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var progress io.Writer
	if daemon.IsTerminal(os.Stderr) {
		progress = os.Stderr
	}
	err := bench(ctx, args, os.Stdout, progress)
	if errors.Is(err, flag.ErrHelp) { // the flag package printed the usage
		return nil
	}
	return err
}
