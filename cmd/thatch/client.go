package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// How the commands that ask the running daemon reach it: one connection to its broker
// (dial), and its API's methods called over it (daemon.API), one result or a list page by
// page.

// request calls one thatch API method and returns its result.
func request(ctx context.Context, c daemon.Config, method string, params any) (json.RawMessage, error) {
	nc, err := dial(c)
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
// pages ignores the cursor and answers the whole array at once.
func requestAll(ctx context.Context, c daemon.Config, method string, params map[string]any) (json.RawMessage, error) {
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
func pages(ctx context.Context, nc *nats.Conn, c daemon.Config, method string, params map[string]any, limit, upTo int) (json.RawMessage, error) {
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

// dial connects the CLI to the broker thatch serves on: THATCH_NATS_URL's, else
// THATCH_NATS_LISTEN's, else the embedded broker's address that the daemon of
// THATCH_DATA_DIR last wrote in its status file (a daemon started with a THATCH_NATS_LISTEN
// of its own that this shell does not have). It presents the embedded broker's token from
// the data folder and trusts its certificate, so the CLI needs no set-up (§7).
func dial(c daemon.Config) (*nats.Conn, error) {
	return dialWith(c, nats.Name("thatch-cli"))
}

// dialWith is dial with options of the caller's (its name, its reconnects and timeout).
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
		return nil, fmt.Errorf("the broker at %s refused thatch's token (%v): the CLI presents THATCH_NATS_TOKEN, else the token in %s; "+
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
func call(ctx context.Context, nc *nats.Conn, c daemon.Config, method string, params any) (json.RawMessage, error) {
	return callWithin(ctx, nc, c, method, params, c.HostTimeout()+2*time.Second)
}

// callWithin is call with its own timeout, for methods that do much work in one request.
func callWithin(ctx context.Context, nc *nats.Conn, c daemon.Config, method string, params any, timeout time.Duration) (json.RawMessage, error) {
	return daemon.API{NC: nc, Prefix: c.APIPrefix, Timeout: timeout}.Raw(ctx, method, params)
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
