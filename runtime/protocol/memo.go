package protocol

import (
	"container/list"
	"sync"
)

// MemoSize is how many keys' replies the hosts' Memos keep. thatch repeats a call when it
// restarted before it saw the answer, so a repeat follows its first request closely: only
// the latest keys need their replies.
const MemoSize = 4096

// Memo is a host's idempotency memory: it answers a repeat of a call's idempotency key
// with the reply the first call got, without acting again. It keeps the replies of the
// size keys used last (answered or repeated); the least recently used is forgotten
// first. The zero Memo is not usable: make one with NewMemo.
type Memo struct {
	mu      sync.Mutex
	size    int
	entries map[string]*memoEntry // kept replies and the requests in flight
	used    *list.List            // kept keys, most recently used first
}

type memoEntry struct {
	done  chan struct{} // closed once reply and kept are set
	reply []byte
	kept  bool
	elem  *list.Element // in used, once kept
}

// NewMemo returns a Memo that keeps the replies of at most size keys.
func NewMemo(size int) *Memo {
	return &Memo{size: max(size, 1), entries: map[string]*memoEntry{}, used: list.New()}
}

// Do answers a request with idempotency key key. A key kept before gets its reply, with
// repeat true, and act does not run; a request that arrives while the first with its key
// is in flight calls wait (when not nil) and waits for that one's reply (repeat too, when
// it is kept). Otherwise act runs and its reply is returned, and kept for the key when
// keep is true: a reply that must not answer a repeat (a refusal that did nothing) is
// not, so that the requests waiting for it, and a later repeat, act for themselves. An
// empty key is never kept.
func (m *Memo) Do(key string, act func() (reply []byte, keep bool), wait func()) (reply []byte, repeat bool) {
	if key == "" {
		reply, _ = act()
		return reply, false
	}
	for {
		m.mu.Lock()
		e, ok := m.entries[key]
		if !ok {
			e = &memoEntry{done: make(chan struct{})}
			m.entries[key] = e
			m.mu.Unlock()
			e.reply, e.kept = act()
			m.settle(key, e)
			return e.reply, false
		}
		inFlight := e.elem == nil // a kept reply is in used
		if !inFlight {
			m.used.MoveToFront(e.elem)
		}
		m.mu.Unlock()
		if inFlight && wait != nil {
			wait()
		}
		<-e.done
		if e.kept {
			return e.reply, true
		}
		// The first request's reply is not one to keep: this one acts for itself.
	}
}

// settle keeps e for key when it is to be kept, forgetting the least recently used key
// past the bound, or forgets it, and then wakes the requests waiting for it.
func (m *Memo) settle(key string, e *memoEntry) {
	m.mu.Lock()
	if e.kept {
		e.elem = m.used.PushFront(key)
		if m.used.Len() > m.size {
			delete(m.entries, m.used.Remove(m.used.Back()).(string))
		}
	} else {
		delete(m.entries, key)
	}
	m.mu.Unlock()
	close(e.done)
}

// Len returns how many keys' replies m keeps.
func (m *Memo) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used.Len()
}
