package natsbus

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Every caller gets a position read that started after it arrived; concurrent callers
// share reads, one at a time.
func TestProbeAnswersFromAReadStartedAfterArrival(t *testing.T) {
	var p probe
	var clock, reads, inFlight, most atomic.Int64
	read := func() (uint64, error) {
		reads.Add(1)
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		started := clock.Load()
		time.Sleep(200 * time.Microsecond) // a broker round trip
		inFlight.Add(-1)
		return uint64(started), nil
	}
	const callers, calls = 50, 40
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range callers {
		wg.Go(func() {
			for range calls {
				arrived := clock.Add(1)
				seq, err := p.lastSeq(read)
				if err != nil || int64(seq) < arrived {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d of %d calls got a position read before they arrived", bad.Load(), callers*calls)
	}
	if most.Load() > 1 {
		t.Fatalf("%d reads ran at once, want one at a time", most.Load())
	}
	if reads.Load() >= callers*calls {
		t.Fatalf("%d reads for %d calls: none shared", reads.Load(), callers*calls)
	}
	t.Logf("%d calls, %d reads, at most %d at once", callers*calls, reads.Load(), most.Load())
}

// lastSeq reads the position jetstream's full stream info gives, and names the stream and the
// broker's reason when it cannot.
func TestLastSeqIsTheStreamsLastSequence(t *testing.T) {
	ctx := context.Background()
	js := jetStream(t, 0)
	if _, err := EnsureStream(ctx, js, StreamConfig{Stream: "OPENCODE_EVENTS", Prefix: "opencode"}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if i > 0 {
			if err := publishEvent(ctx, js, fmt.Sprintf("e%d", i), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		got, err := lastSeq(ctx, js, "OPENCODE_EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(ctx, "OPENCODE_EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		if want := st.CachedInfo().State.LastSeq; got != want || got != uint64(i) {
			t.Fatalf("after %d events: lastSeq %d, stream info says %d", i, got, want)
		}
	}
	_, err := lastSeq(ctx, js, "NOPE")
	if err == nil || !strings.Contains(err.Error(), "stream NOPE") || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("unknown stream: %v, want an error naming the stream and the broker's reason", err)
	}
}

// The probe asks the API js asks: another prefix or a domain moves it.
func TestAPIPrefix(t *testing.T) {
	nc := jetStream(t, 0).Conn()
	for _, c := range []struct {
		make func() (jetstream.JetStream, error)
		want string
	}{
		{func() (jetstream.JetStream, error) { return jetstream.New(nc) }, "$JS.API."},
		{func() (jetstream.JetStream, error) { return jetstream.NewWithAPIPrefix(nc, "$JS.hub.API") }, "$JS.hub.API."},
		{func() (jetstream.JetStream, error) { return jetstream.NewWithAPIPrefix(nc, "imported.") }, "imported."},
		{func() (jetstream.JetStream, error) { return jetstream.NewWithDomain(nc, "leaf") }, "$JS.leaf.API."},
	} {
		js, err := c.make()
		if err != nil {
			t.Fatal(err)
		}
		if got := apiPrefix(js); got != c.want {
			t.Errorf("apiPrefix = %q, want %q", got, c.want)
		}
	}
}
