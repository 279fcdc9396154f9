package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/journal/memory"
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
		if len(rows) == 0 {
			// An entry leaves the journal once its extraction is done: an empty table
			// would read as "nothing happened".
			_, err := fmt.Fprintln(tw, noEntries(ctx, c, args[0]))
			return err
		}
		fmt.Fprintln(tw, "ENTRY\tTOOL\tSTATE\tCLAIMED BY")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Tool, r.State, r.ClaimedBy)
		}
		return nil
	})
}

// noEntries is what thatch entries says of a session with no entry journaled: how many of
// its tool calls were extracted and the memories those extractions wrote, read from this
// data folder's journal and memory store (read-only) when it has them.
func noEntries(ctx context.Context, c daemon.Config, session string) string {
	const none = "no entries pending: an entry leaves the journal once its extraction is done"
	j, err := journal.OpenReadOnly(filepath.Join(c.DataDir, "thatch.db"))
	if err != nil {
		return none + " (thatch ui's page of the session shows its extractions)"
	}
	defer j.Close()
	d, err := j.SessionDetail(session, 1)
	if err != nil {
		return none + " (thatch ui's page of the session shows its extractions)"
	}
	extracted := 0
	var children []string
	for _, p := range d.Provenance {
		extracted += len(p.Calls) + p.More
		children = append(children, p.Extraction)
	}
	if extracted == 0 {
		return "no entries pending, and no extraction of this session is in the journal: it made no tool call yet"
	}
	msg := fmt.Sprintf("no entries pending (%d extracted by %d extraction", extracted, len(children))
	if len(children) > 1 {
		msg += "s"
	}
	var ids []string
	if m, err := memory.OpenReadOnly(filepath.Join(c.DataDir, "memories.db"), memory.Options{}); err == nil {
		defer m.Close()
		if written, err := m.WrittenBy(ctx, children); err == nil {
			for _, child := range children {
				for _, w := range written[child] {
					if !slices.Contains(ids, w.MemoryID) {
						ids = append(ids, w.MemoryID)
					}
				}
			}
		}
	}
	switch {
	case len(ids) == 0:
		return msg + ", which wrote no memory)"
	case len(ids) > 5:
		return msg + fmt.Sprintf(", which wrote %d memories: see thatch memories show %s and %d more)", len(ids), strings.Join(ids[:5], ", "), len(ids)-5)
	}
	return msg + fmt.Sprintf(", which wrote %d: see thatch memories show %s)", len(ids), strings.Join(ids, ", "))
}
