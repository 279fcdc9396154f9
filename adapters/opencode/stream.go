package opencode

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/runtime/protocol"
	"github.com/thatch-dev/thatch/runtime/redact"
)

// streamHeaders opens the event stream; a server that does not answer with headers in
// time is taken as unreachable (a request that went in while it was starting can hang).
var streamHeaders = &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 10 * time.Second}}

// stream reads /global/event until it ends or falls silent. With *needHello, it first
// announces a new boot of the host with host.hello, and clears *needHello once that is
// published. It reports whether the stream connected.
func (b *Bridge) stream(ctx context.Context, needHello *bool) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idleFor := cmp.Or(b.StreamIdle, DefaultStreamIdle)
	watchdog := time.AfterFunc(idleFor, cancel)
	defer watchdog.Stop()
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(b.Client.BaseURL, "/")+"/global/event", nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if b.Client.Password != "" {
		req.SetBasicAuth("opencode", b.Client.Password)
	}
	resp, err := streamHeaders.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusUnauthorized {
			return false, fmt.Errorf("opencode refused the credentials: set OPENCODE_SERVER_PASSWORD (or THATCH_OPENCODE_SERVER_PASSWORD) to the server's password")
		}
		return false, fmt.Errorf("GET /global/event: HTTP %d", resp.StatusCode)
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "text/event-stream" {
		return false, fmt.Errorf("GET /global/event answered %q, not an event stream: is %s an opencode server (opencode serve)?", ct, b.Client.BaseURL)
	}
	b.link.reachable()
	if *needHello {
		if err := b.hello(ctx); err != nil {
			return true, err
		}
		*needHello = false
	} else if b.turnedAway.Load() {
		// The boot goes on (a break, or a restart faster than the first reconnect), and
		// calls were turned away meanwhile: they wait in thatch for a hello.
		if err := b.helloAgain(ctx, "calls were turned away while opencode could not be reached"); err != nil {
			return true, err
		}
	}
	// Events from here on are in the stream; the tool calls completed before it are read
	// from the sessions themselves.
	since := b.lastSeen.Add(-time.Minute) // the margin covers opencode's clock and in-flight writes
	if b.lastSeen.IsZero() {
		since = time.Now().Add(-cmp.Or(b.CatchUp, DefaultCatchUp))
	}
	connected := time.Now()
	watchdog.Stop() // the catch-up may take a while; the stream waits in its socket
	var pe *publishError
	if err := b.catchUp(ctx, since); errors.As(err, &pe) || ctx.Err() != nil {
		return true, err // the broker: try again from the same point
	} else if err != nil {
		b.Log.Warn("could not look for tool calls made while the bridge was away; some may be missing", "err", err)
	}
	b.lastSeen = connected
	watchdog.Reset(idleFor)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // a large write's tool part; publish cuts it
	var data bytes.Buffer
	for sc.Scan() {
		watchdog.Reset(idleFor)
		b.lastSeen = time.Now()
		line := sc.Bytes()
		if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data.Write(bytes.TrimPrefix(rest, []byte(" ")))
			continue
		}
		if len(line) != 0 || data.Len() == 0 {
			continue
		}
		events, err := Translate(data.Bytes())
		data.Reset()
		if err != nil {
			b.Log.Warn("skipping an opencode event", "err", err)
			continue
		}
		for _, ev := range events {
			if idle(ev) {
				// An idle is when thatch would extract: it should know of tools opencode
				// loaded meanwhile. The look holds the bridge's ToolsTTL.
				if err := b.recheckTools(ctx, false); err != nil {
					return true, err
				}
			}
			if err := b.publish(ctx, ev); err != nil {
				return true, err
			}
		}
	}
	return true, sc.Err()
}

// idle says whether ev tells that a session went idle.
func idle(ev Event) bool {
	switch ev.Type {
	case protocol.EventSessionIdle:
		return true
	case protocol.EventSessionStatus:
		var p struct {
			Status struct {
				Type string `json:"type"`
			} `json:"status"`
		}
		return json.Unmarshal(ev.Properties, &p) == nil && p.Status.Type == "idle"
	}
	return false
}

// publish puts one event on the stream, retrying until it is acknowledged.
func (b *Bridge) publish(ctx context.Context, ev Event) error {
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	return b.publishLocked(ctx, ev)
}

// publishLocked is publish for a caller that holds pubMu.
func (b *Bridge) publishLocked(ctx context.Context, ev Event) error {
	// Secrets never reach the broker's files (rule 13): opencode's events carry tool inputs
	// and outputs verbatim.
	if props, n := redact.JSON(ev.Properties); n.Total() > 0 {
		ev.Properties = props
		b.Redacted.Add(int64(n.Total()))
		b.Log.Debug("redacted before publishing", "event", ev.Type, "redactions", n.Total())
	}
	// A body over the broker's max_payload is refused, one over 1 MiB is dead-lettered
	// by thatch (rule 11): a large write's tool call would be lost whole. Cut it instead.
	body := ev.Body()
	if limit := EventLimit(b.NC.MaxPayload()); len(body) > limit {
		size := len(body)
		ev = Fit(ev, limit)
		body = ev.Body()
		b.Log.Info("cut an event to fit the broker", "event", ev.Type, "id", ev.ID, "bytes", size, "cut_to", len(body))
	}
	b.seq++
	tooBig := func(size int) error {
		// Publishing it would fail at every try and hold up every later event: it is left
		// out, and its Host-Seq number with it, so thatch counts a gap and resyncs.
		b.Log.Warn("an event too big for the broker, even cut, is left out: thatch will count a gap", "event", ev.Type, "id", ev.ID, "bytes", size)
		return nil
	}
	if len(body) > EventLimit(b.NC.MaxPayload()) { // Fit cannot cut many small values
		return tooBig(len(body))
	}
	dup, err := natsbus.PublishEvent(ctx, b.JS, b.Prefix+"."+b.HostID+".event."+ev.Type, body, ev.ID, fmt.Sprint(b.seq))
	if errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) || errors.Is(err, nats.ErrMaxPayload) {
		return tooBig(len(body))
	}
	if dup || err != nil {
		// Not stored, or not known to be: the number goes to the next event. A number spent
		// on nothing would look like a lost event to thatch (a gap, and a resync); should a
		// publish that gave up have been stored after all, thatch sees the number twice,
		// which it ignores.
		b.seq--
	}
	if err != nil && b.Broker != nil {
		if p := b.Broker(); p != "" {
			return fmt.Errorf("%s (%w)", p, err)
		}
	}
	return err
}
