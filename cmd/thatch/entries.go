package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

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
	if e.json {
		return printJSON(out, raw)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	var rows []runtime.EntryView
	if err := json.Unmarshal(raw, &rows); err != nil {
		return err
	}
	fmt.Fprintln(tw, "ENTRY\tTOOL\tSTATE\tCLAIMED BY")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Tool, r.State, r.ClaimedBy)
	}
	return nil
}
