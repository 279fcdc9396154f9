package daemon

import (
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/journal"
)

func TestGCPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, 100},          // nothing measured yet: Go's default
		{4 * mib, 700},    // the next cycle at 32 MiB
		{3 * mib, 950},    // 966, in steps of 25
		{15 * mib, 100},   // 113, in steps of 25
		{16 * mib, 100},   // half the floor: Go's default
		{32*mib + 1, 100}, // over the floor
		{1 << 30, 100},    // a big journal's heap
	} {
		if got := gcPercent(tc.live, 32*mib); got != tc.want {
			t.Errorf("gcPercent(%d, 32 MiB) = %d, want %d", tc.live, got, tc.want)
		}
	}
}

// The floor is kept: after a cycle on a small heap, GOGC is raised so that the next
// starts at the floor; once stopped, GOGC is 100 again. (Started here directly:
// keepHeapFloor leaves a GOGC or GOMEMLIMIT of the environment alone, and the test must
// not depend on the environment.)
func TestHeapFloorRaisesGOGC(t *testing.T) {
	gogc := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	// cycleUntil runs cycles (the sentinel's finalizer runs after one, on its own
	// goroutine) until GOGC satisfies ok, for at most a minute.
	cycleUntil := func(what string, ok func(uint64) bool) {
		t.Helper()
		testkit.WaitFor(t, time.Minute, "GOGC "+what, func() error {
			if p := gogc(); !ok(p) {
				runtime.GC()
				return fmt.Errorf("GOGC is %d", p)
			}
			return nil
		})
	}
	stop := startHeapFloor(1 << 30) // far over this test's live heap
	cycleUntil("over 1000 under the floor", func(p uint64) bool { return p > 1000 })
	stop()
	cycleUntil("100 once stopped", func(p uint64) bool { return p == 100 })
}

// While the journal loads, the collector is off and a memory limit of about what the
// process holds plus a tenth more than the state should take bounds the heap; both are put
// back after. With GOGC or GOMEMLIMIT set by the operator, the load only lowers GOGC to 10.
func TestBoundLoadHeap(t *testing.T) {
	t.Setenv("GOGC", "") // the suite's own environment must not decide
	t.Setenv("GOMEMLIMIT", "")
	pct0, lim0 := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(pct0); debug.SetMemoryLimit(lim0) })

	big := journal.LoadSize{Sessions: 100_000, Entries: 1_000_000}
	restore := BoundLoadHeap(big)
	pct, lim := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1)
	state := big.Bytes()
	if pct != -1 || lim < state*110/100 || lim > state*110/100+1<<30 {
		t.Errorf("during Load: GOGC %d, limit %d MiB; want off, and the state's %d MiB and a tenth over what the process holds", pct, lim>>20, state>>20)
	}
	restore()
	if pct, lim := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1); pct != 100 || lim != math.MaxInt64 {
		t.Errorf("after Load: GOGC %d, limit %d; want 100 and none", pct, lim)
	}
	debug.SetGCPercent(100)

	// A small journal is bounded at 64 MiB of state at least.
	restore = BoundLoadHeap(journal.LoadSize{Sessions: 3, Entries: 10})
	if lim := debug.SetMemoryLimit(-1); lim < 64<<20*110/100 {
		t.Errorf("a small journal's limit is %d MiB, want at least 70", lim>>20)
	}
	restore()

	t.Setenv("GOGC", "50")
	restore = BoundLoadHeap(big)
	if pct, lim := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1); pct != loadGCPercent || lim != math.MaxInt64 {
		t.Errorf("with GOGC set: GOGC %d, limit %d; want %d and no limit", pct, lim, loadGCPercent)
	}
	debug.SetGCPercent(loadGCPercent)
	restore()
	if pct := debug.SetGCPercent(-1); pct != 100 {
		t.Errorf("after Load with GOGC set: GOGC %d, want 100 back", pct)
	}
	debug.SetGCPercent(100)
}
