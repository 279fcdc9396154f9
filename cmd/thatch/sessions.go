package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// sessionsCommand is thatch sessions: the live sessions thatch tracks.
type sessionsCommand struct {
	host string
	json bool
}

func (*sessionsCommand) Usage() usage {
	return usage{Name: "sessions", Summary: "the live sessions thatch tracks"}
}

func (s *sessionsCommand) Flags(fs *flag.FlagSet) {
	hostFlag(fs, &s.host)
	jsonFlag(fs, &s.json)
}

// hostFlag is the --host flag of the commands that can keep to one host's sessions.
func hostFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "host", "", "only the sessions of host `ID`")
}

func (s *sessionsCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, _ []string) error {
	params := map[string]any{}
	if s.host != "" {
		params["hostID"] = s.host
	}
	raw, err := requestAll(ctx, c, protocol.APISessions, params)
	if err != nil {
		return err
	}
	return printTable(out, raw, s.json, func(tw io.Writer, rows []runtime.SessionView) error {
		fmt.Fprintln(tw, "SESSION\tHOST\tKIND\tSTATUS\tPENDING\tACCEPTED\tFLAGS\tDIRECTORY\tWRAP-UP")
		for _, r := range rows {
			flags := ""
			for _, f := range []struct {
				on   bool
				name string
			}{{r.Extracting, "extracting"}, {r.Compacting, "compacting"}, {r.WrapUp != "", "wrap-up:" + string(r.WrapUp)},
				{r.Failed > 0, fmt.Sprintf("failed:%d", r.Failed)}, {r.RetryAt != nil, "retry:" + retryCell(r.RetryAt)}} {
				if f.on {
					flags += f.name + " "
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.SessionID, r.HostID, r.Kind, r.Status, r.Pending, r.Accepted, flags, r.Directory, wrapUpCell(r))
		}
		return nil
	})
}

// wrapUpCell says where a session's wrap-up stands: the command armed, or the last one
// that did not proceed, when, and why (last, since the reason is long).
func wrapUpCell(r runtime.SessionView) string {
	switch {
	case r.WrapUp != runtime.WrapNone:
		return "/" + r.WrapUp.CommandOn(r.HostID) + " armed"
	case r.Refused != nil:
		return fmt.Sprintf("/%s refused at %s: %s", r.Refused.Command.CommandOn(r.HostID), r.Refused.At.UTC().Format("2006-01-02 15:04:05Z"), r.Refused.Reason)
	}
	return "-"
}

// retryCell is when a failed extraction is retried, local time of day: at most 30 minutes on.
func retryCell(at *time.Time) string {
	if at == nil {
		return ""
	}
	return at.Local().Format("15:04:05")
}
