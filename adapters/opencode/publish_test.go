package opencode

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A publish the broker cannot store says why when the embedded broker knows (issue 29,
// point 6): with a full disk the broker's own answer is only a timeout. Here the stream is
// missing, so every publish fails as on a full disk, and Broker plays the embedded
// broker's watch; the shim's hook event carries the same cause.
func TestBridgePublishNamesTheBrokersProblem(t *testing.T) {
	b, addr, _ := startShim(t, ShimLimits{Call: 1500 * time.Millisecond})
	nc, js := brokerWithoutStream(t)
	b.NC, b.JS, b.Log = nc, js, slog.New(slog.NewTextHandler(io.Discard, nil))
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
