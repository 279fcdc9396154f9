package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/opencode"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// statusCommand is thatch status: the running daemon's counters, else the status it last
// wrote, as it was then.
type statusCommand struct{ json bool }

func (*statusCommand) Usage() usage {
	return usage{Name: "status", Summary: "the daemon's counters",
		Help: `the running daemon's counters: hosts, sessions, entries, events, host calls, memories,
redactions, and what extraction cost today and over the last 7 days, its daily budget
and its model. A host online whose opencode the bridge cannot reach is named beside the
count. When the daemon is not running (no thatch serve holds $THATCH_DATA_DIR) or cannot
be reached, it prints the status the daemon last wrote to $THATCH_DATA_DIR/status.json as
it was then (when it was written, the bridge connected until then), and exits 1.`}
}

func (s *statusCommand) Flags(fs *flag.FlagSet) { jsonFlag(fs, &s.json) }

func (s *statusCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, _ []string) error {
	// A data folder whose lock no thatch serve holds has no daemon to ask: its status file
	// says at once what it was.
	var raw json.RawMessage
	err := daemon.NotRunning(c)
	running, lerr := daemon.Running(c.DataDir)
	notRunning := lerr == nil && !running && daemon.Served(c.DataDir)
	if !notRunning {
		raw, err = brokerRequest(ctx, c, protocol.APIStatus, map[string]any{})
	}
	var stale error // set when status falls back to the status file
	var asOf *time.Time
	if err != nil {
		// The broker (or thatch) is unreachable: report what thatch last wrote.
		f, ferr := daemon.ReadStatusFile(c.DataDir)
		if ferr != nil {
			if s.json { // still one document: nothing known, and why
				data, _ := json.Marshal(map[string]any{"stale": true, "error": err.Error()})
				fmt.Fprintln(out, string(data))
			}
			return err
		}
		when := fmt.Sprintf("last status written %s ago at %s", time.Since(f.At).Round(time.Second), f.At.Local().Format(time.TimeOnly))
		header := fmt.Sprintf("thatch is unreachable (%v); %s, as it was then:", err, when)
		stale = fmt.Errorf("thatch is unreachable: the status above is from %s", f.At.Local().Format(time.RFC3339))
		switch {
		case f.Stopped != nil:
			err = fmt.Errorf("thatch is not running: it stopped at %s", f.Stopped.Local().Format(time.RFC3339))
			header = fmt.Sprintf("thatch is not running (it stopped at %s); %s, as it was then:", f.Stopped.Local().Format(time.TimeOnly), when)
			stale = err
			f.Status.Consuming = false
		case notRunning:
			err = fmt.Errorf("thatch is not running (data folder %s): it ended without a clean stop", c.DataDir)
			header = fmt.Sprintf("thatch is not running (it ended without a clean stop); %s, as it was then:", when)
			stale = err
			f.Status.Consuming = false
		}
		if s.json { // one document, marked stale, with its age, when it was written and why
			doc := struct {
				runtime.StatusView
				Stale      bool       `json:"stale"`
				Running    bool       `json:"running"`
				WrittenAt  time.Time  `json:"writtenAt"`
				AgeSeconds float64    `json:"ageSeconds"`
				Error      string     `json:"error"`
				Stopped    *time.Time `json:"stopped,omitempty"`
			}{f.Status, true, !notRunning && f.Stopped == nil, f.At, time.Since(f.At).Seconds(), err.Error(), f.Stopped}
			data, _ := json.Marshal(doc)
			fmt.Fprintln(out, string(data))
			if errors.Is(err, nats.ErrAuthorization) {
				return err
			}
			return stale
		}
		fmt.Fprintf(out, "%s\n(%s)\n", header, filepath.Join(c.DataDir, daemon.StatusFile))
		raw, _ = json.Marshal(f.Status)
		asOf = &f.At
		if errors.Is(err, nats.ErrAuthorization) {
			stale = err // not unreachable: refused, and the error says which token to present
		}
	}
	if s.json {
		return printJSON(out, raw)
	}
	var st runtime.StatusView
	if err := json.Unmarshal(raw, &st); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	for _, row := range [][2]string{{"version", st.Version}, {"consuming", strconv.FormatBool(st.Consuming)},
		{"hosts online", itoa(st.Hosts)}, {"sessions", itoa(st.Sessions)}, {"entries pending", itoa(st.Pending)},
		{"entries accepted", itoa(st.Accepted)}, {"events applied", i64(st.Applied)}, {"events rejected", i64(st.Rejected)},
		{"gaps", i64(st.Gaps)}, {"last stream seq", strconv.FormatUint(st.LastStreamSeq, 10)},
		{"host calls outstanding", itoa(st.OutstandingCalls)}, {"host calls waiting for their host", itoa(st.WaitingCalls)}, {"memories", itoa(st.Memories)}, {"secrets redacted", i64(st.Redacted)}} {
		if row[0] == "version" && st.JournalError != "" {
			fmt.Fprintf(tw, "JOURNAL ERROR\t%s\n", st.JournalError)
		}
		if row[0] == "version" && st.BrokerError != "" {
			fmt.Fprintf(tw, "BROKER ERROR\t%s\n", st.BrokerError)
		}
		if row[0] == "version" && len(st.HostsMissingTools) > 0 {
			fmt.Fprintf(tw, "TOOLS MISSING\t%s: opencode has not loaded thatch's plugin, so its sessions get no memories and no extraction runs (entries wait); run thatch install if needed, then restart opencode or POST /instance/dispose to it\n", strings.Join(st.HostsMissingTools, ", "))
		}
		b := bridgeOf(st)
		if row[0] == "hosts online" && b != nil && !b.Connected {
			// A host counts as online until its goodbye, and an opencode that went away
			// sends none: the count says which one it may hold that is not there.
			row[1] += " (" + bridgeAway(b) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
		if row[0] == "hosts online" && b != nil {
			fmt.Fprintf(tw, "opencode bridge\t%s\n", bridgeRow(b, time.Now(), asOf))
		}
	}
	if c.NATSURL == "" {
		fmt.Fprintf(tw, "broker token\t%s (thatch env prints the URL a host connects with)\n", c.TokenSource())
	} else {
		fmt.Fprintf(tw, "broker token\t%s\n", c.TokenSource())
	}
	if tm := st.Team; tm != nil {
		state := "connected"
		if !tm.Connected {
			state = "NOT CONNECTED (changes wait in the outbox)"
		}
		last := "never"
		if tm.LastApplied != nil {
			last = tm.LastApplied.Local().Format(time.RFC3339)
		}
		shared := strings.Join(tm.SharedProjects, ", ")
		if shared == "" {
			shared = "none (thatch memories share)"
		}
		fmt.Fprintf(tw, "team\t%s as %s: %s since %s; outbox %d, bad records %d, last applied %s; sharing %s\n", tm.URL, tm.Author, state,
			tm.Since.Local().Format(time.RFC3339), tm.Outbox, tm.Rejected, last, shared)
		for _, p := range tm.PublishRefused {
			fmt.Fprintf(tw, "team publish\tpublish refused by the team server (not granted?) for project %s: its versions stay in the outbox, nothing is lost; grant it in the server's config and reload it, or thatch memories unshare --project %s\n", p, p)
		}
		for _, r := range tm.Refused {
			fmt.Fprintf(tw, "team refused\t%s %s (%s, stream seq %d): %s: %s\n", r.At.Local().Format(time.RFC3339), r.Subject, r.Kind, r.StreamSeq, r.Project, r.Reason)
		}
	}
	if x := st.Extraction; x != nil {
		spend := func(p runtime.Spend) string {
			return fmt.Sprintf("%d %s, %s %s (%s in, %s out), %s", p.Extractions, plural(p.Extractions, "extraction", "extractions"),
				runtime.FormatTokens(p.Tokens), plural(p.Tokens, "token", "tokens"),
				runtime.FormatTokens(p.TokensIn), runtime.FormatTokens(p.TokensOut), formatUSD(p.USD))
		}
		if x.Error != "" {
			fmt.Fprintf(tw, "LEDGER ERROR\t%s\n", x.Error)
		}
		fmt.Fprintf(tw, "extraction today (UTC)\t%s\n", spend(x.Today))
		fmt.Fprintf(tw, "extraction last 7 days\t%s\n", spend(x.Week))
		budget := "no limit (THATCH_EXTRACT_DAILY_TOKENS unset)"
		if x.DailyTokens > 0 {
			budget = fmt.Sprintf("%s %s a day, %s used today", runtime.FormatTokens(x.DailyTokens),
				plural(x.DailyTokens, "token", "tokens"), runtime.FormatTokens(x.Today.Tokens))
			if x.BudgetReached {
				budget += ": REACHED, extraction waits for the next UTC day"
			}
		}
		fmt.Fprintf(tw, "extraction budget\t%s\n", budget)
		model := "the host's small model, else the session's own (THATCH_EXTRACT_MODEL unset)"
		if x.Model != "" {
			model = x.Model + " (THATCH_EXTRACT_MODEL)"
		}
		fmt.Fprintf(tw, "extraction model\t%s\n", model)
	}
	if f := st.LastExtractionFailure; f != nil {
		// Capitals mark a current problem; a failure an extraction succeeded after is history.
		label, since := "LAST EXTRACTION FAILURE", ""
		if s := st.LastExtractionSuccess; f.SucceededSince && s != nil {
			label, since = "last extraction failure", fmt.Sprintf(" (an extraction has succeeded since, last at %s)", s.Local().Format(time.RFC3339))
		}
		fmt.Fprintf(tw, "%s\t%s, host %s, session %s: %s%s\n", label, f.At.Local().Format(time.RFC3339), f.Host, f.Session,
			strings.Join(strings.Fields(f.Message), " "), since)
	}
	return stale
}

// bridgeOf reads status's row of the in-process opencode bridge: nil without one.
func bridgeOf(st runtime.StatusView) *opencode.BridgeStatus {
	if len(st.Bridge) == 0 {
		return nil
	}
	var b opencode.BridgeStatus
	if json.Unmarshal(st.Bridge, &b) != nil {
		return nil
	}
	return &b
}

// bridgeRow is status's line for the in-process opencode bridge: the server, as which
// host, and whether its event stream is open, since when, as of now; or, for the status of
// a thatch that cannot be asked (asOf: when its status file was written), as it was then:
// "connected until" that time, for how long.
func bridgeRow(b *opencode.BridgeStatus, now time.Time, asOf *time.Time) string {
	at := func() string {
		switch {
		case b.Since.IsZero() && asOf == nil:
			return ""
		case b.Since.IsZero():
			return " until " + asOf.Local().Format(time.RFC3339)
		case asOf == nil:
			return fmt.Sprintf(" since %s (%s ago)", b.Since.Local().Format(time.RFC3339), now.Sub(b.Since).Round(time.Second))
		}
		return fmt.Sprintf(" until %s (for %s, since %s)", asOf.Local().Format(time.RFC3339), asOf.Sub(b.Since).Round(time.Second),
			b.Since.Local().Format(time.RFC3339))
	}
	state := "connected" + at()
	switch {
	case !b.Connected && b.Error != "":
		state = "UNREACHABLE" + at() + ": " + b.Error
	case !b.Connected:
		state = "connecting" + at()
	}
	return fmt.Sprintf("%s (host %s): %s", b.URL, b.HostID, state)
}

// bridgeAway says which host the bridge's opencode is while its event stream is closed,
// and since when: "opencode oc-1 unreachable since 12:01:02".
func bridgeAway(b *opencode.BridgeStatus) string {
	state := "connecting"
	if b.Error != "" {
		state = "unreachable"
	}
	text := "opencode " + b.HostID + " " + state
	if !b.Since.IsZero() {
		text += " since " + b.Since.Local().Format(time.TimeOnly)
	}
	return text
}

func itoa(n int) string  { return strconv.Itoa(n) }
func i64(n int64) string { return strconv.FormatInt(n, 10) }
