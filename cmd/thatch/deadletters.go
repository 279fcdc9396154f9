package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// deadLettersCommand is thatch deadletters: the events thatch rejected as bad input.
type deadLettersCommand struct{ json bool }

func (*deadLettersCommand) Usage() usage {
	return usage{Name: "deadletters", Summary: "the events thatch rejected, newest first, and why",
		Help: `the events thatch rejected as bad input (rule 11), newest first: stream sequence, when,
subject, why, and the start of the body (--json: the body as kept, up to 2,000 characters)`}
}

func (d *deadLettersCommand) Flags(fs *flag.FlagSet) { jsonFlag(fs, &d.json) }

func (d *deadLettersCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, _ []string) error {
	raw, err := requestAll(ctx, c, protocol.APIDeadLetters, map[string]any{})
	if err != nil {
		return err
	}
	return printTable(out, raw, d.json, func(tw io.Writer, rows []runtime.DeadLetterView) error {
		if len(rows) == 0 {
			fmt.Fprintln(tw, "no dead letters: thatch rejected no event")
			return nil
		}
		fmt.Fprintln(tw, "SEQ\tAT\tSUBJECT\tREASON\tBODY")
		for _, r := range rows {
			body := strings.Join(strings.Fields(r.Body), " ")
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.StreamSeq, r.At.Local().Format(time.RFC3339), r.Subject, r.Reason, runtime.CutText(body, 60))
		}
		return nil
	})
}
