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

// entriesCommand is thatch entries: the journaled entries of a top-level session.
type entriesCommand struct{ json bool }

func (*entriesCommand) Usage() usage {
	return usage{Name: "entries", Args: []string{"SESSION"}, Summary: "the journaled entries of a top-level session"}
}

func (e *entriesCommand) Flags(fs *flag.FlagSet) { jsonFlag(fs, &e.json) }

func (e *entriesCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, args []string) error {
	raw, err := requestAll(ctx, c, protocol.APIEntries, map[string]any{"sessionID": args[0]})
	if err != nil {
		return err
	}
	return printTable(out, raw, e.json, func(tw io.Writer, rows []runtime.EntryView) error {
		fmt.Fprintln(tw, "ENTRY\tTOOL\tSTATE\tCLAIMED BY")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Tool, r.State, r.ClaimedBy)
		}
		return nil
	})
}
