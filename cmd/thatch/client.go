package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// How the commands reach thatch: a conn, that is one connection to the running daemon's
// broker (dial, dialDaemon) and its API's methods called over it (daemon.API), one result
// or a list page by page; or, for the commands that only read, the data folder's files
// while no thatch serve runs there (dialRead, daemon.Files), answered by the same code.

// conn is where a command's API calls go: the running daemon (nc), or the files of a data
// folder whose thatch is not running (files).
type conn struct {
	nc    *nats.Conn
	files *daemon.Files
}

// Close closes the connection or the files.
func (k *conn) Close() {
	if k.nc != nil {
		k.nc.Close()
	}
	if k.files != nil {
		_ = k.files.Close()
	}
}

// request calls one thatch API method that may change something, of the running daemon
// (dial), and returns its result.
func request(ctx context.Context, c daemon.Config, method string, params any) (json.RawMessage, error) {
	nc, err := dial(c)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	return call(ctx, nc, c, method, params)
}

// brokerRequest is request without dial's look at the data folder's lock and its first
// status request: thatch status asks whatever answers at the broker, and reads the status
// file when nothing does.
func brokerRequest(ctx context.Context, c daemon.Config, method string, params any) (json.RawMessage, error) {
	nc, err := dialBroker(c)
	if err != nil {
		return nil, err
	}
	k := &conn{nc: nc}
	defer k.Close()
	return call(ctx, k, c, method, params)
}

// readRequest is request for a method that only reads: while thatch is not running, the
// data folder's files answer it (dialRead).
func readRequest(ctx context.Context, c daemon.Config, method string, params any) (json.RawMessage, error) {
	nc, err := dialRead(c)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	return call(ctx, nc, c, method, params)
}

// listPage is how many rows the CLI asks for in one page of a list method; the daemon
// cuts a page shorter when it would not fit the broker's max_payload.
const listPage = 1000

// requestAll calls a list method page by page (a cursor, then each page's nextCursor)
// and returns all its rows as one JSON array, each row once: a listing of a list that
// changes meanwhile may repeat a row, which is known by its id. A daemon from before
// pages ignores the cursor and answers the whole array at once. The list methods only
// read: while thatch is not running, the data folder's files answer them (dialRead).
func requestAll(ctx context.Context, c daemon.Config, method string, params map[string]any) (json.RawMessage, error) {
	nc, err := dialRead(c)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	return pages(ctx, nc, c, method, params, listPage, 0)
}

// pages calls a list method page by page, limit rows a page, until a page has no
// nextCursor or upTo rows came (0: no bound), and returns the rows as one JSON array
// without repeats (by their id or sessionID).
func pages(ctx context.Context, nc *conn, c daemon.Config, method string, params map[string]any, limit, upTo int) (json.RawMessage, error) {
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

// dial connects the CLI to the running daemon, for a command that may change what it
// keeps (dialDaemon), and makes sure the daemon answers: a status request answered within
// answerWithin. So the command fails within seconds, naming the cause, rather than after
// its own request's timeout (a minute for an import's batch).
func dial(c daemon.Config) (*conn, error) {
	k, err := dialDaemon(c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
	defer cancel()
	if _, err := callWithin(ctx, k, c, protocol.APIStatus, map[string]any{}, answerWithin); err != nil {
		k.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("thatch does not answer at %s within %s (data folder %s): it may be starting, stopping or stuck; its log says which",
				shownURL(k.nc.ConnectedUrlRedacted()), answerWithin, c.DataDir)
		}
		return nil, err
	}
	return k, nil
}

// answerWithin is how long dial waits for the daemon's first answer.
const answerWithin = 3 * time.Second

// dialDaemon connects the CLI to the running daemon. A data folder that no thatch serve
// holds (daemon.Running) fails at once, naming the folder and what to do, instead of after
// a broker's or a request's timeout: with the embedded broker, which is the daemon's own,
// always; with an external one (THATCH_NATS_URL), when a thatch served this folder before
// (daemon.Served).
func dialDaemon(c daemon.Config) (*conn, error) {
	if running, err := daemon.Running(c.DataDir); err == nil && !running && (c.NATSURL == "" || daemon.Served(c.DataDir)) {
		return nil, daemon.NotRunning(c)
	}
	nc, err := dialBroker(c)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc}, nil
}

// dialRead is dial for a command that only reads: when no thatch serve holds the data
// folder (daemon.Running) and one did before (daemon.Served), the folder's files answer,
// read-only, and one line on standard error says so.
func dialRead(c daemon.Config) (*conn, error) {
	if running, err := daemon.Running(c.DataDir); err != nil || running || !daemon.Served(c.DataDir) {
		return dialDaemon(c)
	}
	files := daemon.NewFiles(c)
	files.Read = func(path string) { fmt.Fprintf(os.Stderr, "thatch is not running: read from %s\n", path) }
	return &conn{files: files}, nil
}

// dialBroker connects the CLI to the broker thatch serves on: THATCH_NATS_URL's, else
// THATCH_NATS_LISTEN's, else the embedded broker's address that the daemon of
// THATCH_DATA_DIR last wrote in its status file (a daemon started with a THATCH_NATS_LISTEN
// of its own that this shell does not have). It presents the embedded broker's token from
// the data folder and trusts its certificate, so the CLI needs no set-up (§7).
func dialBroker(c daemon.Config) (*nats.Conn, error) {
	return dialWith(c, nats.Name("thatch-cli"))
}

// dialWith is dialBroker with options of the caller's (its name, its reconnects and timeout).
func dialWith(c daemon.Config, options ...nats.Option) (*nats.Conn, error) {
	token, err := c.ClientToken()
	if err != nil {
		return nil, err
	}
	clientTLS, err := daemon.BrokerTLS(c)
	if err != nil {
		return nil, err
	}
	opts := append(options, natsbus.AuthOptions(c.NATSCreds, token, clientTLS)...)
	nc, err := nats.Connect(c.BrokerURL(), opts...)
	if err != nil && c.NATSURL == "" {
		if alt := savedStatus(c).BrokerURL; alt != "" && alt != c.BrokerURL() {
			if anc, aerr := nats.Connect(alt, opts...); aerr == nil {
				return anc, nil
			}
		}
	}
	if errors.Is(err, nats.ErrAuthorization) && c.NATSURL == "" {
		return nil, fmt.Errorf("the broker at %s refused thatch's token (%w): the CLI presents THATCH_NATS_TOKEN, else the token in %s; "+
			"run it with the THATCH_DATA_DIR (and THATCH_NATS_TOKEN) of thatch serve", shownURL(c.BrokerURL()), err, c.TokenPath())
	}
	if err != nil {
		return nil, fmt.Errorf("cannot reach the broker at %s (%v): is thatch serve running? "+
			"If it runs with its own THATCH_NATS_URL, THATCH_NATS_LISTEN or THATCH_DATA_DIR, set the same here", shownURL(c.BrokerURL()), err)
	}
	return nc, nil
}

// savedStatus is what the status file of the daemon of c's data folder holds: where its
// broker and its page are. Empty when there is no such file.
func savedStatus(c daemon.Config) daemon.SavedStatus {
	f, _ := daemon.ReadStatusFile(c.DataDir)
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
func call(ctx context.Context, nc *conn, c daemon.Config, method string, params any) (json.RawMessage, error) {
	return callWithin(ctx, nc, c, method, params, c.HostTimeout()+2*time.Second)
}

// callWithin is call with its own timeout, for methods that do much work in one request.
func callWithin(ctx context.Context, nc *conn, c daemon.Config, method string, params any, timeout time.Duration) (json.RawMessage, error) {
	if nc.files != nil {
		return nc.files.Raw(ctx, method, params)
	}
	return daemon.API{NC: nc.nc, Prefix: c.APIPrefix, Timeout: timeout}.Raw(ctx, method, params)
}

// printJSON prints a result as it came: the one JSON document of a --json.
// printTable prints a listing method's answer raw: as it came with asJSON (one document),
// else decoded into a T and laid out by table into columns.
func printTable[T any](out io.Writer, raw json.RawMessage, asJSON bool, table func(tw io.Writer, v T) error) error {
	if asJSON {
		return printJSON(out, raw)
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	return table(tw, v)
}

func printJSON(out io.Writer, raw json.RawMessage) error {
	_, err := fmt.Fprintln(out, string(raw))
	return err
}
