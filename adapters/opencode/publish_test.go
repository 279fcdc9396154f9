package opencode

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/internal/testkit"
)

// A publish the broker cannot store says why when the embedded broker knows (issue 29,
// point 6): with a full disk the broker's own answer is only a timeout. Here the stream is
// missing, so every publish fails as on a full disk, and Broker plays the embedded
// broker's watch; the shim's hook event carries the same cause.
func TestBridgePublishNamesTheBrokersProblem(t *testing.T) {
	b, addr, _ := startShim(t, ShimLimits{Call: 1500 * time.Millisecond})
	nc, js := brokerWithoutStream(t)
	b.NC, b.JS, b.Log = nc, js, testkit.Logger(t)
	const problem = "disk full: free space in /data/nats/jetstream: the embedded broker cannot store events"
	b.Broker = func() string { return problem }

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := b.publish(ctx, Event{ID: "e1", Type: "session.idle", Properties: json.RawMessage(`{"sessionID":"ses_a"}`)})
	if err == nil || !strings.HasPrefix(err.Error(), problem+" (publish to opencode.oc-test.event.session.idle: ") {
		t.Fatalf("publish error %v, want the broker's problem first", err)
	}

	req, _ := http.NewRequest("POST", "http://"+addr+"/event", strings.NewReader(`{"type":"session.idle","properties":{"sessionID":"ses_a"}}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "could not publish: "+problem) {
		t.Errorf("the shim's event answer %d %s, want 503 naming the broker's problem", resp.StatusCode, body)
	}
}

// A publish that fails (the shim's hook gave up waiting, the broker did not answer) spends
// no Host-Seq number: the next event takes it, so thatch sees no gap where nothing was lost.
func TestFailedPublishSpendsNoHostSeq(t *testing.T) {
	nc, js := brokerWithoutStream(t)
	b := &Bridge{NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test", Log: testkit.Logger(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	failing, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	if err := b.publish(failing, Event{ID: "e1", Type: "session.idle", Properties: json.RawMessage(`{"sessionID":"ses_a"}`)}); err == nil {
		t.Fatal("a publish with no stream succeeded")
	}
	stream, err := natsbus.EnsureStream(ctx, js, natsbus.StreamConfig{Stream: "OPENCODE_EVENTS", Prefix: "opencode"})
	must(t, err)
	must(t, b.publish(ctx, Event{ID: "e2", Type: "session.idle", Properties: json.RawMessage(`{"sessionID":"ses_a"}`)}))
	if m := storedEvent(t, ctx, stream, 1); m.Header.Get("Host-Seq") != "1" {
		t.Fatalf("the first stored event has Host-Seq %q, want 1: the failed publish spent a number", m.Header.Get("Host-Seq"))
	}
}
