package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// latency offers tool.execute.after events at a fixed rate and measures publish → commit.
func (b *benchRun) latency(ctx context.Context) error {
	published := sync.Map{}
	var mu sync.Mutex
	var lat []time.Duration
	_, stop, err := b.startThatch("latency", func(l *runtime.Loop) {
		l.OnCommit = func(a []runtime.Applied, at time.Time) {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range a {
				if t0, ok := published.LoadAndDelete(e.ID); ok {
					lat = append(lat, at.Sub(t0.(time.Time)))
				}
			}
		}
	})
	if err != nil {
		return err
	}
	defer stop()
	fh, err := fakehost.New(b.nc, "lat", "v1")
	if err != nil {
		return err
	}
	defer fh.Close()
	for s := range 100 {
		if err := fh.Created(ctx, fmt.Sprintf("ses_lat_%03d", s), "", "t", os.TempDir()); err != nil {
			return err
		}
	}
	rate := b.size.OfferedEventsPerSec
	total := rate * b.size.LatencySeconds
	const tick = 10 * time.Millisecond
	per := rate / int(time.Second/tick)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	output := strings.Repeat("o", 900)
	var futures []jetstream.PubAckFuture
	for i := 0; i < total; {
		<-ticker.C
		for j := 0; j < per && i < total; j, i = j+1, i+1 {
			id := fmt.Sprintf("evt_lat_%07d", i)
			body := fmt.Sprintf(`{"id":%q,"type":"tool.execute.after","properties":{"sessionID":"ses_lat_%03d","callID":"c%d","tool":"bash","args":{},"output":%q}}`, id, i%100, i, output)
			m := nats.NewMsg("opencode.lat.event.tool.execute.after")
			m.Data = []byte(body)
			m.Header.Set(jetstream.MsgIDHeader, id)
			published.Store(id, time.Now())
			f, err := b.js.PublishMsgAsync(m)
			if err != nil {
				return err
			}
			futures = append(futures, f)
		}
		// An acknowledged publish goes: each future holds its message, and keeping all
		// 50,000 (80 MB) made every collection of this process, thatch's included, mark them.
		acked := 0
		for _, f := range futures {
			select {
			case <-f.Ok():
				acked++
				continue
			case err := <-f.Err():
				return err
			default:
			}
			break
		}
		futures = slices.Delete(futures, 0, acked)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		got := len(lat)
		mu.Unlock()
		if got >= total {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d events committed", got, total)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p50, p99 := percentiles(lat)
	b.say("publish → commit at %d events/s: p50 %s, p99 %s", rate, p50, p99)
	b.add(Figure{Name: "publish → commit p50", Value: ms(p50), Unit: "ms", Definition: fmt.Sprintf("time from a host's JetStream publish to thatch's commit of the event, at %d tool events/s offered for %ds", rate, b.size.LatencySeconds)})
	b.add(Figure{Name: "publish → commit p99", Value: ms(p99), Unit: "ms", Target: "< 15 ms", Goal: under(15), Definition: "as above, 99th percentile"})
	return nil
}

// toolLatency measures thatch_get_extraction_payload with concurrent callers, each for
// its own session holding 10 entries.
func (b *benchRun) toolLatency(ctx context.Context) error {
	_, stop, err := b.startThatch("tools", nil)
	if err != nil {
		return err
	}
	defer stop()
	fh, err := fakehost.New(b.nc, "tools", "v1")
	if err != nil {
		return err
	}
	defer fh.Close()
	callers := b.size.ToolCallers
	for s := range callers {
		sid := fmt.Sprintf("ses_tool_%03d", s)
		if err := fh.Created(ctx, sid, "", "t", os.TempDir()); err != nil {
			return err
		}
		for c := range 10 {
			if err := fh.ToolExecuted(ctx, sid, fmt.Sprintf("%s_c%d", sid, c), "bash", strings.Repeat("o", 1500)); err != nil {
				return err
			}
		}
	}
	// Closed loop (no pause between calls) measures capacity; paced (each caller 20 calls/s,
	// 1,000 calls/s in all with 50 callers) measures latency under a load the machine
	// carries.
	for _, paced := range []bool{false, true} {
		lat, elapsed, err := b.callTools(ctx, fh, callers, paced)
		if err != nil {
			return err
		}
		p50, p99 := percentiles(lat)
		if !paced {
			rate := float64(len(lat)) / elapsed.Seconds()
			b.say("%s closed loop, %d callers: %.0f calls/s, p50 %s, p99 %s", runtime.ToolPayload, callers, rate, p50, p99)
			b.add(Figure{Name: "tool calls, closed loop", Value: rate, Unit: "calls/s", Definition: fmt.Sprintf("%s round trips over NATS per second, %d callers calling back to back, each for its session of 10 entries of 1.5 KB (client and server share the machine)", runtime.ToolPayload, callers)})
			b.add(Figure{Name: "tool call p99, closed loop", Value: ms(p99), Unit: "ms", Definition: "as above: latency at saturation, queueing included"})
			continue
		}
		b.say("%s paced, %d callers at 20 calls/s each: p50 %s, p99 %s", runtime.ToolPayload, callers, p50, p99)
		b.add(Figure{Name: "tool call p50", Value: ms(p50), Unit: "ms", Definition: fmt.Sprintf("%s round trip over NATS, %d concurrent callers each calling 20 times a second, 10 entries of 1.5 KB each", runtime.ToolPayload, callers)})
		b.add(Figure{Name: "tool call p99", Value: ms(p99), Unit: "ms", Target: "< 5 ms", Goal: under(5), Definition: "as above, 99th percentile"})
	}
	return nil
}

// callTools has each caller call the payload tool for its own session.
func (b *benchRun) callTools(ctx context.Context, fh *fakehost.Host, callers int, paced bool) ([]time.Duration, time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	start := time.Now()
	for s := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := fmt.Sprintf("ses_tool_%03d", s)
			req, _ := json.Marshal(map[string]any{"sessionID": sid, "args": map[string]any{}})
			want := []byte(`{"result":{"output":"10 tool interactions of session ` + sid + ` to extract memories from.\n`)
			next := time.Now().Add(time.Duration(s) * time.Millisecond) // spread the callers' phases
			for range b.size.ToolCalls {
				if paced {
					time.Sleep(time.Until(next))
					next = next.Add(50 * time.Millisecond)
				}
				t0 := time.Now()
				msg, err := fh.NC.RequestWithContext(ctx, "thatch.tool."+runtime.ToolPayload, req)
				d := time.Since(t0)
				if err != nil {
					errs <- fmt.Errorf("tool call for %s: %v", sid, err)
					return
				}
				// The answer's bytes are checked, not decoded: decoding took a third of this
				// process's allocations, which a real caller, another process, does not add
				// to thatch's collections.
				if !bytes.HasPrefix(msg.Data, want) || !bytes.HasSuffix(msg.Data, []byte("}}")) {
					_, herr, err := protocol.Decode(msg.Data)
					errs <- fmt.Errorf("tool call for %s did not return its 10 entries: %v %v %.300s", sid, err, herr, msg.Data)
					return
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, 0, err
	}
	return lat, time.Since(start), nil
}
