package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// workers performs the host calls, a worker per host so a slow host delays only itself;
// their results come back to the loop on results. A host that went quiet holds no
// goroutine: its worker exits after idle without a call, and its next call starts one.
type workers struct {
	caller  Caller
	idle    time.Duration
	results chan Result
	// draining is closed at stop: the workers finish their call in progress and take no
	// other.
	draining chan struct{}
	byHost   map[string]*worker
	pruneAt  int // prune exited workers from byHost once it holds this many
	wg       sync.WaitGroup
	// outstanding counts the host calls dispatched whose results are not committed.
	outstanding int
}

func newWorkers() workers {
	return workers{results: make(chan Result, 64), draining: make(chan struct{}), byHost: map[string]*worker{}}
}

// worker performs one host's calls in order. A worker without a call for idle exits
// (gone), and the host's next call starts a new one: a worker exits only once it has sent
// the result of its last call, so calls stay in order.
type worker struct {
	mu    sync.Mutex
	queue []queued
	gone  bool
	wake  chan struct{}
	idle  time.Duration
}

// push queues q, unless the worker exited.
func (w *worker) push(q queued) bool {
	w.mu.Lock()
	if w.gone {
		w.mu.Unlock()
		return false
	}
	w.queue = append(w.queue, q)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

func (w *worker) exited() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone
}

type queued struct {
	api  string
	call Call
}

// dispatch hands c to its host's worker, starting one when the host has none (or its
// worker exited for idleness), and counts it outstanding.
func (l *Loop) dispatch(wctx context.Context, c Call) {
	c.Key = fmt.Sprintf("%s-%d", l.Journal.Instance(), c.ID)
	api := "v1"
	if h := l.state.Hosts[c.Host]; h != nil && h.API != "" {
		api = h.API
	}
	if !l.workers.send(wctx, c.Host, queued{api: api, call: c}) {
		return // stopping: the call stays in the outbox for the next run
	}
	l.room.sent(c)
	l.workers.outstanding++
	l.changed()
}

// send queues q on host's worker, starting one when needed; it returns false, queuing
// nothing, when a worker is needed while the workers drain.
func (ws *workers) send(wctx context.Context, host string, q queued) bool {
	if w := ws.byHost[host]; w == nil || !w.push(q) {
		select {
		case <-ws.draining:
			return false
		default:
		}
		ws.prune()
		w = &worker{wake: make(chan struct{}, 1), queue: []queued{q}, idle: ws.idle}
		ws.byHost[host] = w
		ws.wg.Add(1)
		go ws.work(wctx, w)
	}
	return true
}

// prune forgets the workers that exited, once there are twice as many as after the last
// pruning: the map stays within twice the hosts with a worker, at a cost spread over the
// workers started.
func (ws *workers) prune() {
	if len(ws.byHost) < ws.pruneAt {
		return
	}
	for host, w := range ws.byHost {
		if w.exited() {
			delete(ws.byHost, host)
		}
	}
	ws.pruneAt = max(64, 2*len(ws.byHost))
}

func (ws *workers) work(ctx context.Context, w *worker) {
	defer ws.wg.Done()
	idle := time.NewTimer(w.idle)
	defer idle.Stop()
	for {
		select {
		case <-ws.draining:
			return
		default:
		}
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.mu.Unlock()
			idle.Reset(w.idle)
			select {
			case <-ctx.Done():
				return
			case <-ws.draining:
				return
			case <-w.wake:
				continue
			case <-idle.C:
				w.mu.Lock()
				if w.gone = len(w.queue) == 0; w.gone {
					w.mu.Unlock()
					return
				}
				w.mu.Unlock()
				continue
			}
		}
		q := w.queue[0]
		w.queue = w.queue[1:]
		w.mu.Unlock()
		res := ws.caller.Do(ctx, q.api, q.call)
		if ctx.Err() != nil {
			return // the call stays in the outbox and is performed again at the next start
		}
		res.Call = q.call
		select {
		case ws.results <- res:
		case <-ctx.Done():
			return
		}
	}
}
