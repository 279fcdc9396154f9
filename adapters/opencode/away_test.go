package opencode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/internal/testkit"
)

// request sends one host API request of the bridge at host and returns its reply or error.
func request(nc *nats.Conn, host, method, params string) (string, error) {
	msg, err := nc.Request("opencode."+host+".api."+method, []byte(params), 5*time.Second)
	if err != nil {
		return "", err
	}
	return string(msg.Data), nil
}

// helloOf reads the host.hello stored at seq, its event id and its bootID.
func helloOf(t *testing.T, m *jetstream.RawStreamMsg) (id, boot string) {
	t.Helper()
	var ev struct {
		Type       string
		Properties struct{ BootID string }
	}
	must(t, json.Unmarshal(m.Data, &ev))
	if ev.Type != "host.hello" {
		t.Fatalf("event %s (%s) at seq %d, want host.hello", ev.Type, m.Header.Get(jetstream.MsgIDHeader), m.Sequence)
	}
	return m.Header.Get(jetstream.MsgIDHeader), ev.Properties.BootID
}

// serving reports whether b serves the host API.
func (b *Bridge) serving() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sub != nil
}

// countRequests counts the requests of fake that start with prefix.
func countRequests(fake *fakeOpencode, prefix string) int {
	n := 0
	for _, r := range fake.seen() {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// TestBridgeOpencodeDown: while opencode cannot be reached, the bridge serves no host API,
// so thatch's calls find no responder and wait for the host's next hello (rule 12)
// instead of failing; a call in flight when opencode dies is turned away the same way
// (status 503, nats.ErrNoResponders). When opencode is back, the bridge serves the API
// again before the new boot's hello is stored, and the turned-away call, repeated with
// its key, reaches opencode.
func TestBridgeOpencodeDown(t *testing.T) {
	nc, js, stream := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake := &fakeOpencode{events: make(chan string, 16), hold: make(chan struct{})}
	srv := httptest.NewServer(fake)
	addr := srv.Listener.Addr().String()
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test", Log: testkit.Logger(t)}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	var once sync.Once
	halt := func() { once.Do(func() { stop(); <-done }) } // before a server's Close, which waits for the stream
	defer halt()
	_, boot1 := helloOf(t, storedEvent(t, ctx, stream, 1))
	if got, err := request(nc, "oc-test", "session.delete", `{"sessionID":"ses_x","idempotencyKey":"k0"}`); err != nil || got != `{"result":true}` {
		t.Fatalf("delete while opencode is up: %q %v", got, err)
	}

	// A deletion in flight when opencode dies.
	inFlight := make(chan error, 1)
	go func() {
		_, err := request(nc, "oc-test", "session.delete", `{"sessionID":"ses_hold","idempotencyKey":"k1"}`)
		inFlight <- err
	}()
	testkit.WaitFor(t, 30*time.Second, "the deletion to reach opencode", func() bool {
		return countRequests(fake, "DELETE /session/ses_hold") > 0
	})
	srv.CloseClientConnections() // as a dying server does
	srv.Close()
	if err := <-inFlight; !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("the deletion in flight when opencode died: %v, want nats.ErrNoResponders", err)
	}

	// Down, once the bridge's stream saw it: the host API is not served at all.
	testkit.WaitFor(t, 30*time.Second, "the host API to be withdrawn while opencode is down", func() bool { return !b.serving() })
	for _, method := range []string{"session.delete", "session.list"} {
		if _, err := request(nc, "oc-test", method, `{"sessionID":"ses_y","idempotencyKey":"k2"}`); !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("%s while opencode is down: %v, want nats.ErrNoResponders", method, err)
		}
	}

	// Back: a new boot, whose hello is stored only once the API is served again.
	fake2 := &fakeOpencode{events: make(chan string, 16), hold: make(chan struct{})}
	close(fake2.hold) // deletes at once
	srv2 := listenAt(t, addr, fake2)
	defer srv2.Close()
	defer halt()
	seq := uint64(2)
	var m *jetstream.RawStreamMsg
	for ; ; seq++ {
		m = storedEvent(t, ctx, stream, seq)
		var ev Event
		must(t, json.Unmarshal(m.Data, &ev))
		if ev.Type == "host.hello" {
			break
		}
	}
	id, boot2 := helloOf(t, m)
	if boot2 == boot1 || id != "hello_"+boot2 || m.Header.Get("Host-Seq") != "1" {
		t.Fatalf("hello after opencode came back: id %s, boot %s (was %s), Host-Seq %s; want a new boot from 1", id, boot2, boot1, m.Header.Get("Host-Seq"))
	}
	// thatch sends its waiting calls when it applies that hello: they must find the bridge.
	if got, err := request(nc, "oc-test", "session.delete", `{"sessionID":"ses_hold","idempotencyKey":"k1"}`); err != nil || got != `{"result":true}` {
		t.Fatalf("the turned-away deletion sent again after the hello: %q %v", got, err)
	}
	if n := countRequests(fake2, "DELETE /session/ses_hold"); n != 1 {
		t.Fatalf("%d DELETEs of ses_hold reached the restarted opencode, want 1: a turned-away key is not remembered", n)
	}
}

// TestBridgeTurnedAwayThenSameBoot: a call turned away because its connection to opencode
// broke (opencode restarting faster than the bridge's first reconnect, or a fluke) waits
// in thatch for a hello; the boot goes on, so the next stream connection says the boot's
// hello again (same bootID, the next Host-Seq) to send it.
func TestBridgeTurnedAwayThenSameBoot(t *testing.T) {
	nc, js, stream := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake := &fakeOpencode{events: make(chan string, 16)}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test", Log: testkit.Logger(t)}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	defer func() { stop(); <-done }()
	seq := uint64(1)
	first, _ := nextHello(t, ctx, stream, &seq)

	if _, err := request(nc, "oc-test", "session.delete", `{"sessionID":"ses_reset","idempotencyKey":"k1"}`); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a deletion whose connection broke: %v, want nats.ErrNoResponders", err)
	}
	fake.events <- "" // the stream breaks; opencode is still there
	again, _ := nextHello(t, ctx, stream, &seq)
	if again.hello.BootID != first.hello.BootID || again.id != "hello_"+first.hello.BootID+"_1" {
		t.Fatalf("hello after the reconnection: id %s, boot %s; want hello_%s_1", again.id, again.hello.BootID, first.hello.BootID)
	}
	// Only once: the next break owes no hello.
	fake.events <- ""
	fake.events <- `{"payload":{"id":"evt_after","type":"session.idle","properties":{"sessionID":"ses_a"}}}`
	for {
		m := storedEvent(t, ctx, stream, seq)
		seq++
		var ev Event
		must(t, json.Unmarshal(m.Data, &ev))
		if ev.Type == "host.hello" {
			t.Fatalf("a second hello (%s) after a break that owed none", m.Header.Get(jetstream.MsgIDHeader))
		}
		if ev.ID == "evt_after" {
			break
		}
	}
}

// TestBridgeRehello: Rehello (called on a restored broker connection) says the current
// boot's hello again: thatch sends the calls that found no responder meanwhile.
func TestBridgeRehello(t *testing.T) {
	nc, js, stream := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fake := &fakeOpencode{events: make(chan string, 16)}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test", Log: testkit.Logger(t)}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	defer func() { stop(); <-done }()
	seq := uint64(1)
	first, _ := nextHello(t, ctx, stream, &seq)
	b.Rehello()
	again, before := nextHello(t, ctx, stream, &seq)
	if again.hello.BootID != first.hello.BootID || again.id != "hello_"+first.hello.BootID+"_1" {
		t.Fatalf("hello on Rehello: id %s, boot %s; want hello_%s_1", again.id, again.hello.BootID, first.hello.BootID)
	}
	if before.seq == "" { // nothing between the two hellos
		before = first
	}
	if prev := cmpSeq(before.seq); again.seq != prev {
		t.Fatalf("hello on Rehello at Host-Seq %s after %s: thatch would count a gap", again.seq, before.seq)
	}
}

// cmpSeq returns the Host-Seq that follows seq.
func cmpSeq(seq string) string {
	var n int
	_ = json.Unmarshal([]byte(seq), &n)
	b, _ := json.Marshal(n + 1)
	return string(b)
}

// TestBridgeRepeatWhileInFlight: a request repeating the idempotency key of one still in
// flight waits for its answer instead of acting again.
func TestBridgeRepeatWhileInFlight(t *testing.T) {
	nc, js, _ := broker(t)
	fake := &fakeOpencode{events: make(chan string), hold: make(chan struct{})}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	var logs syncBuffer
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test",
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	must(t, b.Start())
	defer b.Close()
	replies := make(chan string, 2)
	ask := func() {
		got, err := request(nc, "oc-test", "session.delete", `{"sessionID":"ses_hold","idempotencyKey":"k1"}`)
		if err != nil {
			got = err.Error()
		}
		replies <- got
	}
	go ask()
	testkit.WaitFor(t, 30*time.Second, "the first request to reach opencode", func() bool {
		return countRequests(fake, "DELETE /session/ses_hold") > 0
	})
	go ask()
	testkit.WaitFor(t, 30*time.Second, "the repeat to wait for the first", func() error {
		if !strings.Contains(logs.String(), "a repeat of a request in flight waits for its answer") {
			return fmt.Errorf("the log:\n%s", logs.String())
		}
		return nil
	})
	close(fake.hold)
	for range 2 {
		if got := <-replies; got != `{"result":true}` {
			t.Fatalf("reply %q, want the first request's", got)
		}
	}
	if n := countRequests(fake, "DELETE /session/ses_hold"); n != 1 {
		t.Fatalf("%d DELETEs reached opencode for one idempotency key", n)
	}
}
