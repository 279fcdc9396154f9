package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// costsCommand is thatch costs: what extraction cost, by UTC day and project.
type costsCommand struct {
	days int
	json bool
}

func (*costsCommand) Usage() usage {
	return usage{Name: "costs", Summary: "what extraction cost, by UTC day and project",
		Help: `what extraction cost, by UTC day and project: extractions, entries, tokens in and out,
cost in USD as the host reported it, models`}
}

func (k *costsCommand) Flags(fs *flag.FlagSet) {
	fs.IntVar(&k.days, "days", 30, fmt.Sprintf("the last `N` UTC days, today included: 1 to %d", natsbus.MaxCostDays))
	jsonFlag(fs, &k.json)
}

func (k *costsCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, _ []string) error {
	if k.days < 1 || k.days > natsbus.MaxCostDays {
		return fmt.Errorf("--days must be between 1 and %d, got %d", natsbus.MaxCostDays, k.days)
	}
	raw, err := readRequest(ctx, c, protocol.APICosts, map[string]any{"days": k.days})
	if err != nil {
		return err
	}
	return printTable(out, raw, k.json, func(tw io.Writer, rows []runtime.CostRow) error {
		if len(rows) == 0 {
			fmt.Fprintf(tw, "no extraction in the last %d %s\n", k.days, runtime.Plural(k.days, "day", "days"))
			return nil
		}
		fmt.Fprintln(tw, "DAY (UTC)\tPROJECT\tEXTRACTIONS\tENTRIES\tTOKENS IN\tTOKENS OUT\tCOST\tMODELS")
		var total runtime.CostRow
		for _, r := range rows {
			// The project key may be a hash (opencode's project id): a folder of the
			// project says more; rows journaled before thatch kept one have only the key.
			project := r.Project
			if r.Directory != "" {
				project = r.Directory
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.Day, project, r.Extractions, r.Entries,
				runtime.FormatTokens(r.TokensIn), runtime.FormatTokens(r.TokensOut), runtime.FormatUSD(r.USD), strings.Join(r.Models, ","))
			total.Extractions, total.Entries = total.Extractions+r.Extractions, total.Entries+r.Entries
			total.TokensIn, total.TokensOut, total.USD = total.TokensIn+r.TokensIn, total.TokensOut+r.TokensOut, total.USD+r.USD
		}
		fmt.Fprintf(tw, "total, %d %s\t\t%d\t%d\t%s\t%s\t%s\t\n", k.days, runtime.Plural(k.days, "day", "days"), total.Extractions, total.Entries,
			runtime.FormatTokens(total.TokensIn), runtime.FormatTokens(total.TokensOut), runtime.FormatUSD(total.USD))
		return nil
	})
}
