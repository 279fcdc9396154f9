package journal

import (
	"math"
	"runtime/debug"
	"testing"
)

// While Load runs, the collector is off and a memory limit of about what the process holds
// plus a tenth more than the state should take bounds the heap; both are put back after.
// With GOGC or GOMEMLIMIT set by the operator, Load only lowers GOGC to 10.
func TestBoundHeap(t *testing.T) {
	t.Setenv("GOGC", "") // the suite's own environment must not decide
	t.Setenv("GOMEMLIMIT", "")
	pct0, lim0 := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(pct0); debug.SetMemoryLimit(lim0) })

	restore := boundHeap(100_000, 1_000_000)
	pct, lim := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1)
	state := int64(100_000*sessionBytes + 1_000_000*entryBytes)
	if pct != -1 || lim < state*110/100 || lim > state*110/100+1<<30 {
		t.Errorf("during Load: GOGC %d, limit %d MiB; want off, and the state's %d MiB and a tenth over what the process holds", pct, lim>>20, state>>20)
	}
	restore()
	if pct, lim := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1); pct != 100 || lim != math.MaxInt64 {
		t.Errorf("after Load: GOGC %d, limit %d; want 100 and none", pct, lim)
	}
	debug.SetGCPercent(100)

	// A small journal is bounded at 64 MiB of state at least.
	restore = boundHeap(3, 10)
	if lim := debug.SetMemoryLimit(-1); lim < 64<<20*110/100 {
		t.Errorf("a small journal's limit is %d MiB, want at least 70", lim>>20)
	}
	restore()

	t.Setenv("GOGC", "50")
	restore = boundHeap(100_000, 1_000_000)
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
