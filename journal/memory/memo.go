package memory

import (
	"sync"
	"time"
)

// readMemo keeps answers of the store's reads by key, each good while the store has committed
// no write since it was read and the clock has not gone back, and while its reader's own
// test holds (good). The hygiene signals and the related memories of an extraction payload
// are kept this way (signalsMemo, relatedMemo). Past readMemoMax answers it starts again.
type readMemo[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]keptAnswer[V]
}

type keptAnswer[V any] struct {
	writes int64     // the store's writes when it was read
	at     time.Time // when it was read
	v      V
}

const readMemoMax = 256

// get is key's answer if it is still good at now with writes committed. The answer is
// shared: read it, do not change it.
func (m *readMemo[K, V]) get(key K, writes int64, now time.Time, good func(keptAnswer[V]) bool) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.m[key]
	if !ok || a.writes != writes || now.Before(a.at) || !good(a) {
		var none V
		return none, false
	}
	return a.v, true
}

// put keeps v, read at at with writes committed (read before the read began: a write
// committed meanwhile makes the answer old at once).
func (m *readMemo[K, V]) put(key K, writes int64, at time.Time, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil || len(m.m) >= readMemoMax {
		m.m = map[K]keptAnswer[V]{}
	}
	m.m[key] = keptAnswer[V]{writes: writes, at: at, v: v}
}
