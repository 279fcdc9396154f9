package daemon

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/thatch-dev/thatch/journal"
)

// HeapFloor is the heap below which thatch does not let the garbage collector start a cycle.
// Go collects when the heap has grown by GOGC percent (100) of what the last cycle left
// live, and thatch's live heap is small, so under a burst of tool calls it was collected
// many times a second; a cycle pauses the loop and takes a share of the CPU, and most of
// the slowest tool calls overlapped one (docs/performance.md). The floor costs at most its
// size in memory; once the live heap is half of it, collection is Go's default.
const HeapFloor = 64 << 20

var heapFloorOnce sync.Once

// keepHeapFloor raises GOGC while the live heap is under half of floor, so that a cycle
// starts at floor bytes rather than at twice the live heap, and sets it back to 100 once
// the live heap is over half of floor: a journal of a million entries loads and runs as it
// would without it. It adjusts after every cycle (a finalizer runs once per cycle), for
// the whole process, once whatever the number of daemons in it. GOGC or GOMEMLIMIT in the
// environment turns it off: the operator's setting stands.
func keepHeapFloor(floor uint64) {
	heapFloorOnce.Do(func() {
		if !gcSetByEnvironment() {
			startHeapFloor(floor)
		}
	})
}

// startHeapFloor starts keeping floor; stop ends it, leaving GOGC at 100.
func startHeapFloor(floor uint64) (stop func()) {
	var stopped atomic.Bool
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	percent := 100
	var arm func()
	arm = func() {
		runtime.SetFinalizer(&cycleSentinel{}, func(*cycleSentinel) {
			if stopped.Load() {
				debug.SetGCPercent(100)
				return
			}
			metrics.Read(live)
			if live[0].Value.Kind() == metrics.KindUint64 {
				if p := gcPercent(live[0].Value.Uint64(), floor); p != percent {
					debug.SetGCPercent(p)
					percent = p
				}
			}
			arm()
		})
	}
	arm()
	return func() { stopped.Store(true) }
}

// cycleSentinel is garbage as soon as it is made: its finalizer runs after the next cycle.
// It holds a pointer, so the allocator does not batch it with other tiny objects (a
// finalizer on a batched object may never run).
type cycleSentinel struct {
	_ *byte
	_ [16]byte
}

// gcPercent is the GOGC that starts the next cycle at floor bytes for a live heap of live
// bytes, in steps of 25 (a heap that moves a little does not change it each cycle), and
// 100, Go's default, once live is half of floor or more.
func gcPercent(live, floor uint64) int {
	if live == 0 || 2*live >= floor {
		return 100
	}
	return int(100*(floor-live)/live) / 25 * 25
}

// gcSetByEnvironment reports whether the operator set the collector with GOGC or GOMEMLIMIT.
func gcSetByEnvironment() bool { return os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" }

// heapFloorState says, for the log, whether the floor is on.
func heapFloorState() string {
	if gcSetByEnvironment() {
		return "off (GOGC or GOMEMLIMIT is set)"
	}
	return strconv.Itoa(HeapFloor>>20) + " MiB"
}

// BoundLoadHeap bounds the heap while the journal loads (journal.Store.BeforeLoad) and
// returns what puts the collector back. Load allocates most of what it keeps early, then
// reads rows whose strings are garbage at once: at Go's default GOGC the heap grew to
// twice what it keeps, and a low GOGC collected at every tenth of growth. So the collector
// is off and a soft memory limit of what the process holds now plus a tenth more than the
// state should take (at least 64 MiB) makes it collect only as the heap nears that, and
// give freed pages back. A state larger than expected is not an error: over the limit
// the collector runs more often, and Go caps its share of the CPU at half. With GOGC or
// GOMEMLIMIT in the environment the operator's setting stands, and the load only lowers
// GOGC to loadGCPercent. It is the process's setting: whatever else runs meanwhile
// collects under the same bound.
func BoundLoadHeap(z journal.LoadSize) func() {
	if gcSetByEnvironment() {
		return lowerGC(loadGCPercent)
	}
	m := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(m)
	inUse := int64(m[0].Value.Uint64() - m[1].Value.Uint64())
	state := max(z.Bytes(), 64<<20)
	pct := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(inUse + state*110/100)
	return func() {
		debug.SetMemoryLimit(limit)
		debug.SetGCPercent(pct)
	}
}

// loadGCPercent is the collector's target while the journal loads when the operator set
// GOGC or GOMEMLIMIT (BoundLoadHeap): lower keeps the peak smaller and takes longer.
const loadGCPercent = 10

// lowerGC lowers the GC's target percentage to pct until the returned function runs,
// unless it is lower already (GOGC) or the GC is off.
func lowerGC(pct int) func() {
	prev := debug.SetGCPercent(pct)
	if prev < pct {
		debug.SetGCPercent(prev)
	}
	return func() { debug.SetGCPercent(prev) }
}
