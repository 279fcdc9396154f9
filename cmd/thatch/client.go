package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/runtime"
)

func version() string {
	if runtime.Version != "dev" {
		return runtime.Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return runtime.Version
}

// clientUsage is the --help of each subcommand that asks the running daemon.
var clientUsage = map[string]string{
	"status": `usage: thatch status [--json]
  the running daemon's counters: hosts, sessions, entries, events, host calls, memories,
  redactions, and what extraction cost today and over the last 7 days, its daily budget
  and its model. When the daemon cannot be reached, it prints the status the daemon last
  wrote to $THATCH_DATA_DIR/status.json, with its age, and exits 1.
  --json    print JSON`,
	"sessions": `usage: thatch sessions [--host ID] [--json]
  the live sessions thatch tracks
  --host ID    only this host's sessions
  --json       print JSON`,
	"entries": `usage: thatch entries SESSION [--json]
  the journaled entries of a top-level session
  --json    print JSON`,
	"sweep": `usage: thatch sweep [--dry-run] [--host ID] [--json]
  one strand sweep now, printing its plan
  --dry-run    only plan: change nothing
  --host ID    only this host's sessions
  --json       print JSON`,
	"costs": `usage: thatch costs [--days N] [--json]
  what extraction cost, by UTC day and project: extractions, entries, tokens in and out,
  cost in USD as the host reported it, models
  --days N    the last N UTC days, today included: 1 to 400 (default 30)
  --json      print JSON`,
	"deadletters": `usage: thatch deadletters [--json]
  the events thatch rejected as bad input (rule 11), newest first: stream sequence, when,
  subject, why, and the start of the body (--json: the body as kept, up to 2,000 characters)
  --json    print JSON`,
}

// client runs one of the subcommands that ask a running daemon through the thatch API.
func client(ctx context.Context, c Config, cmd string, args []string, out io.Writer) error {
	usage := clientUsage[cmd]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the errors and the usage are ours
	asJSON := fs.Bool("json", false, "print JSON")
	var hostID *string
	var dryRun *bool
	var days *int
	switch cmd {
	case "sessions":
		hostID = fs.String("host", "", "only this host")
	case "sweep":
		hostID = fs.String("host", "", "only this host")
		dryRun = fs.Bool("dry-run", false, "only plan")
	case "costs":
		days = fs.Int("days", 30, "the last N UTC days, today included")
	}
	pos, err := parseInterspersed(fs, args) // flags may come before or after the arguments
	if errors.Is(err, flag.ErrHelp) {
		_, err := fmt.Fprintln(out, usage)
		return err
	}
	if err != nil {
		return fmt.Errorf("%v\n%s", err, usage)
	}
	if cmd != "entries" && len(pos) > 0 {
		return fmt.Errorf("thatch %s takes no arguments, got %q\n%s", cmd, pos, usage)
	}
	params := map[string]any{}
	switch cmd {
	case "sessions":
		if *hostID != "" {
			params["hostID"] = *hostID
		}
	case "sweep":
		params["dryRun"] = *dryRun
		if *hostID != "" {
			params["hostID"] = *hostID
		}
	case "entries":
		if len(pos) != 1 {
			return fmt.Errorf("thatch entries takes one session id, got %q\n%s", pos, usage)
		}
		params["sessionID"] = pos[0]
	case "costs":
		if *days < 1 || *days > natsbus.MaxCostDays {
			return fmt.Errorf("--days must be between 1 and %d, got %d", natsbus.MaxCostDays, *days)
		}
		params["days"] = *days
	}
	var raw json.RawMessage
	if cmd == "sessions" || cmd == "entries" || cmd == "deadletters" {
		raw, err = requestAll(ctx, c, cmd, params)
	} else {
		raw, err = request(ctx, c, cmd, params)
	}
	var stale error // set when status falls back to the status file
	if err != nil && cmd == "status" {
		// The broker (or thatch) is unreachable: report what thatch last wrote.
		data, ferr := os.ReadFile(filepath.Join(c.DataDir, StatusFile))
		var f statusFile
		if ferr != nil || json.Unmarshal(data, &f) != nil {
			if *asJSON { // still one document: nothing known, and why
				data, _ := json.Marshal(map[string]any{"stale": true, "error": err.Error()})
				fmt.Fprintln(out, string(data))
			}
			return err
		}
		stale = fmt.Errorf("thatch is unreachable: the status above is from %s", f.At.Format(time.RFC3339))
		if f.Stopped != nil {
			err = fmt.Errorf("thatch is not running: it stopped at %s", f.Stopped.Local().Format(time.RFC3339))
			stale = err
			f.Status.Consuming = false
		}
		if *asJSON { // one document, marked stale, with its age and why
			doc := struct {
				runtime.StatusView
				Stale      bool       `json:"stale"`
				AgeSeconds float64    `json:"ageSeconds"`
				Error      string     `json:"error"`
				Stopped    *time.Time `json:"stopped,omitempty"`
			}{f.Status, true, time.Since(f.At).Seconds(), err.Error(), f.Stopped}
			data, _ := json.Marshal(doc)
			fmt.Fprintln(out, string(data))
			return stale
		}
		fmt.Fprintf(out, "%v\nlast status thatch wrote, %s ago (%s):\n", err, time.Since(f.At).Round(time.Second), filepath.Join(c.DataDir, StatusFile))
		raw, _ = json.Marshal(f.Status)
	} else if err != nil {
		return err
	}
	if *asJSON {
		_, err := fmt.Fprintln(out, string(raw))
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch cmd {
	case "status":
		var s runtime.StatusView
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		for _, row := range [][2]string{{"version", s.Version}, {"consuming", strconv.FormatBool(s.Consuming)},
			{"hosts online", itoa(s.Hosts)}, {"sessions", itoa(s.Sessions)}, {"entries pending", itoa(s.Pending)},
			{"entries accepted", itoa(s.Accepted)}, {"events applied", i64(s.Applied)}, {"events rejected", i64(s.Rejected)},
			{"gaps", i64(s.Gaps)}, {"last stream seq", strconv.FormatUint(s.LastStreamSeq, 10)},
			{"host calls outstanding", itoa(s.OutstandingCalls)}, {"host calls waiting for their host", itoa(s.WaitingCalls)}, {"memories", itoa(s.Memories)}, {"secrets redacted", i64(s.Redacted)}} {
			if row[0] == "version" && s.JournalError != "" {
				fmt.Fprintf(tw, "JOURNAL ERROR\t%s\n", s.JournalError)
			}
			if row[0] == "version" && s.BrokerError != "" {
				fmt.Fprintf(tw, "BROKER ERROR\t%s\n", s.BrokerError)
			}
			if row[0] == "version" && len(s.HostsMissingTools) > 0 {
				fmt.Fprintf(tw, "TOOLS MISSING\t%s: opencode has not loaded thatch's plugin, so its sessions get no memories and no extraction runs (entries wait); run thatch install if needed, then restart opencode or POST /instance/dispose to it\n", strings.Join(s.HostsMissingTools, ", "))
			}
			fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
			if row[0] == "hosts online" && s.Bridge != nil {
				// A host counts as online until its goodbye, and an opencode that went away sends none.
				fmt.Fprintf(tw, "opencode bridge\t%s\n", bridgeRow(s.Bridge, time.Now()))
			}
		}
		if c.NATSURL == "" {
			fmt.Fprintf(tw, "broker token\t%s (thatch env prints the URL a host connects with)\n", c.tokenSource())
		} else {
			fmt.Fprintf(tw, "broker token\t%s\n", c.tokenSource())
		}
		if x := s.Extraction; x != nil {
			spend := func(p runtime.Spend) string {
				return fmt.Sprintf("%d %s, %s %s (%s in, %s out), %s", p.Extractions, runtime.Plural(p.Extractions, "extraction", "extractions"),
					runtime.FormatTokens(p.Tokens), runtime.Plural(p.Tokens, "token", "tokens"),
					runtime.FormatTokens(p.TokensIn), runtime.FormatTokens(p.TokensOut), runtime.FormatUSD(p.USD))
			}
			if x.Error != "" {
				fmt.Fprintf(tw, "LEDGER ERROR\t%s\n", x.Error)
			}
			fmt.Fprintf(tw, "extraction today (UTC)\t%s\n", spend(x.Today))
			fmt.Fprintf(tw, "extraction last 7 days\t%s\n", spend(x.Week))
			budget := "no limit (THATCH_EXTRACT_DAILY_TOKENS unset)"
			if x.DailyTokens > 0 {
				budget = fmt.Sprintf("%s %s a day, %s used today", runtime.FormatTokens(x.DailyTokens),
					runtime.Plural(x.DailyTokens, "token", "tokens"), runtime.FormatTokens(x.Today.Tokens))
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
	case "costs":
		var rows []runtime.CostRow
		if err := json.Unmarshal(raw, &rows); err != nil {
			return err
		}
		if len(rows) == 0 {
			fmt.Fprintf(tw, "no extraction in the last %d %s\n", *days, runtime.Plural(*days, "day", "days"))
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
		fmt.Fprintf(tw, "total, %d %s\t\t%d\t%d\t%s\t%s\t%s\t\n", *days, runtime.Plural(*days, "day", "days"), total.Extractions, total.Entries,
			runtime.FormatTokens(total.TokensIn), runtime.FormatTokens(total.TokensOut), runtime.FormatUSD(total.USD))
	case "sessions":
		var rows []runtime.SessionView
		if err := json.Unmarshal(raw, &rows); err != nil {
			return err
		}
		fmt.Fprintln(tw, "SESSION\tHOST\tKIND\tSTATUS\tPENDING\tACCEPTED\tFLAGS\tDIRECTORY")
		for _, r := range rows {
			flags := ""
			for _, f := range []struct {
				on   bool
				name string
			}{{r.Extracting, "extracting"}, {r.Compacting, "compacting"}, {r.WrapUp != "", "wrap-up:" + string(r.WrapUp)}} {
				if f.on {
					flags += f.name + " "
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.SessionID, r.HostID, r.Kind, r.Status, r.Pending, r.Accepted, flags, r.Directory)
		}
	case "sweep":
		var res runtime.SweepResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return err
		}
		if len(res.Actions) == 0 {
			fmt.Fprintln(tw, "nothing stranded")
			return nil
		}
		fmt.Fprintln(tw, "ACTION\tSESSION\tDIRECTORY\tREASON")
		for _, a := range res.Actions {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Kind, a.SessionID, a.Directory, a.Reason)
		}
		if *dryRun {
			fmt.Fprintln(tw, "(dry run: nothing was changed)")
		}
	case "entries":
		var rows []runtime.EntryView
		if err := json.Unmarshal(raw, &rows); err != nil {
			return err
		}
		fmt.Fprintln(tw, "ENTRY\tTOOL\tSTATE\tCLAIMED BY")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Tool, r.State, r.ClaimedBy)
		}
	case "deadletters":
		var rows []runtime.DeadLetterView
		if err := json.Unmarshal(raw, &rows); err != nil {
			return err
		}
		if len(rows) == 0 {
			fmt.Fprintln(tw, "no dead letters: thatch rejected no event")
			return nil
		}
		fmt.Fprintln(tw, "SEQ\tAT\tSUBJECT\tREASON\tBODY")
		for _, r := range rows {
			body := strings.Join(strings.Fields(r.Body), " ")
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.StreamSeq, r.At.Local().Format(time.RFC3339), r.Subject, r.Reason, runtime.CutText(body, 60))
		}
	}
	return stale
}

// bridgeRow is status's line for the in-process opencode bridge: the server, as which
// host, and whether its event stream is open, since when (as of now).
func bridgeRow(b *runtime.BridgeStatus, now time.Time) string {
	at := func() string {
		if b.Since.IsZero() {
			return ""
		}
		return fmt.Sprintf(" since %s (%s ago)", b.Since.Local().Format(time.RFC3339), now.Sub(b.Since).Round(time.Second))
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

func itoa(n int) string  { return strconv.Itoa(n) }
func i64(n int64) string { return strconv.FormatInt(n, 10) }

// listPage is how many rows the CLI asks for in one page of a list method; the daemon
// cuts a page shorter when it would not fit the broker's max_payload.
const listPage = 1000

// requestAll calls a list method page by page (a cursor, then each page's nextCursor)
// and returns all its rows as one JSON array, each row once: a listing of a list that
// changes meanwhile may repeat a row, which is known by its id. A daemon from before
// pages ignores the cursor and answers the whole array at once.
func requestAll(ctx context.Context, c Config, method string, params map[string]any) (json.RawMessage, error) {
	nc, err := dial(c)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	return pages(ctx, nc, c, method, params, listPage, 0)
}

// pages calls a list method page by page, limit rows a page, until a page has no
// nextCursor or upTo rows came (0: no bound), and returns the rows as one JSON array
// without repeats (by their id or sessionID).
func pages(ctx context.Context, nc *nats.Conn, c Config, method string, params map[string]any, limit, upTo int) (json.RawMessage, error) {
	rows := []json.RawMessage{}
	seen := map[string]bool{}
	cursor := ""
	for {
		p := map[string]any{"cursor": cursor, "limit": limit}
		for k, v := range params {
			p[k] = v
		}
		raw, err := call(ctx, nc, c, method, p)
		if err != nil {
			return nil, err
		}
		if t := strings.TrimSpace(string(raw)); strings.HasPrefix(t, "[") {
			return raw, nil // a daemon from before pages: everything at once
		}
		var pg natsbus.Page
		if err := json.Unmarshal(raw, &pg); err != nil {
			return nil, fmt.Errorf("%s answered a page thatch cannot read: %v", method, err)
		}
		for _, row := range pg.Items {
			var key struct {
				ID        string `json:"id"`
				SessionID string `json:"sessionID"`
			}
			_ = json.Unmarshal(row, &key)
			// Pages of entries may repeat rows (their cursor restarts when its entry is
			// completed): drop repeats by id. Rows without an id (dead letters) never repeat.
			k := key.ID + "\x00" + key.SessionID
			if k != "\x00" && seen[k] {
				continue
			}
			seen[k] = true
			rows = append(rows, row)
		}
		if upTo > 0 && len(rows) >= upTo {
			rows = rows[:upTo]
			break
		}
		if pg.NextCursor == "" {
			break
		}
		if pg.NextCursor == cursor {
			return nil, fmt.Errorf("%s: the daemon gave the same cursor twice (%q); the listing would never end", method, cursor)
		}
		cursor = pg.NextCursor
	}
	return json.Marshal(rows)
}

// request calls one thatch API method and returns its result.
func request(ctx context.Context, c Config, method string, params any) (json.RawMessage, error) {
	nc, err := dial(c)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	return call(ctx, nc, c, method, params)
}

// dial connects the CLI to the broker thatch serves on: THATCH_NATS_URL's, else
// THATCH_NATS_LISTEN's, else the embedded broker's address that the daemon of
// THATCH_DATA_DIR last wrote in its status file (a daemon started with a THATCH_NATS_LISTEN
// of its own that this shell does not have). It presents the embedded broker's token from
// the data folder and trusts its certificate, so the CLI needs no set-up (§7).
func dial(c Config) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("thatch-cli")}
	if c.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(c.NATSCreds))
	}
	token, err := c.clientToken()
	if err != nil {
		return nil, err
	}
	if token != "" {
		opts = append(opts, nats.Token(token))
	}
	clientTLS, err := brokerTLS(c)
	if err != nil {
		return nil, err
	}
	if clientTLS != nil {
		opts = append(opts, nats.Secure(clientTLS))
	}
	nc, err := nats.Connect(c.natsURL(), opts...)
	if err != nil && c.NATSURL == "" {
		if alt := statusBroker(c.DataDir).BrokerURL; alt != "" && alt != c.natsURL() {
			if anc, aerr := nats.Connect(alt, opts...); aerr == nil {
				return anc, nil
			}
		}
	}
	if errors.Is(err, nats.ErrAuthorization) && c.NATSURL == "" {
		return nil, fmt.Errorf("the broker at %s refused thatch's token (%v): the CLI presents THATCH_NATS_TOKEN, else the token in %s; "+
			"run it with the THATCH_DATA_DIR (and THATCH_NATS_TOKEN) of thatch serve", shownURL(c.natsURL()), err, c.tokenPath())
	}
	if err != nil {
		return nil, fmt.Errorf("cannot reach the broker at %s (%v): is thatch serve running? "+
			"If it runs with its own THATCH_NATS_URL, THATCH_NATS_LISTEN or THATCH_DATA_DIR, set the same here", shownURL(c.natsURL()), err)
	}
	return nc, nil
}

// brokerTLS is the TLS configuration of thatch's own clients (clientTLS), else, for the
// embedded broker, trust in the certificate that the daemon of the data folder wrote in
// its status file; nil when the broker serves no TLS.
func brokerTLS(c Config) (*tls.Config, error) {
	cfg, err := c.clientTLS()
	if cfg != nil || err != nil || c.NATSURL != "" {
		return cfg, err
	}
	if cert := statusBroker(c.DataDir).BrokerCert; cert != "" {
		return natsbus.ClientTLS(natsbus.TLSFiles{Cert: cert})
	}
	return nil, nil
}

// statusBroker is the embedded broker's address and certificate in the status file of the
// daemon on dataDir, empty when the file names none.
func statusBroker(dataDir string) statusFile {
	var f statusFile
	data, err := os.ReadFile(filepath.Join(dataDir, StatusFile))
	if err != nil || json.Unmarshal(data, &f) != nil {
		return statusFile{}
	}
	return f
}

// shownURL is a broker URL list fit to print: without the credentials a URL may carry.
func shownURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			u.User = nil
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// call calls one thatch API method over nc and returns its result.
func call(ctx context.Context, nc *nats.Conn, c Config, method string, params any) (json.RawMessage, error) {
	return callWithin(ctx, nc, c, method, params, c.hostTimeout()+2*time.Second)
}

// callWithin is call with its own timeout, for methods that do much work in one request.
func callWithin(ctx context.Context, nc *nats.Conn, c Config, method string, params any, timeout time.Duration) (json.RawMessage, error) {
	data, _ := json.Marshal(params)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	subject := c.APIPrefix + ".api." + method
	msg, err := nc.RequestWithContext(rctx, subject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("no thatch answers on %s at %s: it is not running or not ready yet, or it runs with another THATCH_API_PREFIX",
			subject, nc.ConnectedUrlRedacted())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	var env struct {
		Result json.RawMessage    `json:"result"`
		Error  *runtime.HostError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &env); err != nil {
		return nil, fmt.Errorf("%s answered garbage: %v", subject, err)
	}
	if env.Error != nil {
		return nil, env.Error
	}
	return env.Result, nil
}
