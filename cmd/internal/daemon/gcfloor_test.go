package daemon

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
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
		for deadline := time.Now().Add(time.Minute); !ok(gogc()); {
			if time.Now().After(deadline) {
				t.Fatalf("GOGC is %d after a minute of cycles, want %s", gogc(), what)
			}
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
	}
	stop := startHeapFloor(1 << 30) // far over this test's live heap
	cycleUntil("over 1000 under the floor", func(p uint64) bool { return p > 1000 })
	stop()
	cycleUntil("100 once stopped", func(p uint64) bool { return p == 100 })
}
