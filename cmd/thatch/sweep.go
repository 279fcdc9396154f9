package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// sweepCommand is thatch sweep: one strand sweep now.
type sweepCommand struct {
	dryRun bool
	host   string
	json   bool
}

func (*sweepCommand) Usage() usage {
	return usage{Name: "sweep", Summary: "one strand sweep now, printing its plan"}
}

func (s *sweepCommand) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&s.dryRun, "dry-run", false, "only plan: change nothing")
	hostFlag(fs, &s.host)
	jsonFlag(fs, &s.json)
}

func (s *sweepCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, _ []string) error {
	params := map[string]any{"dryRun": s.dryRun}
	if s.host != "" {
		params["hostID"] = s.host
	}
	raw, err := request(ctx, c, protocol.APISweep, params)
	if err != nil {
		return err
	}
	return printTable(out, raw, s.json, func(tw io.Writer, res runtime.SweepResult) error {
		if len(res.Actions) == 0 {
			fmt.Fprintln(tw, "nothing stranded")
			return nil
		}
		fmt.Fprintln(tw, "ACTION\tSESSION\tDIRECTORY\tREASON")
		for _, a := range res.Actions {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Kind, a.SessionID, a.Directory, a.Reason)
		}
		if s.dryRun {
			fmt.Fprintln(tw, "(dry run: nothing was changed)")
		}
		return nil
	})
}
