package natsbus

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
