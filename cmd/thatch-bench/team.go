package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/team"
	"github.com/thatch-dev/thatch/adapters/team/teamtest"
	"github.com/thatch-dev/thatch/journal/memory"
)

// The team part (protocol §9): an in-process 3-node JetStream cluster on loopback, and
// teammates made of a memory store and its team connection, each on its own node.

const (
	teamRate    = 50 // changes a second
	teamProject = "b1e2c3d4e5f60718293a4b5c6d7e8f9012345678"
)

// benchTB is what teamtest needs of a test, for the benchmark: a failure panics with its
// message, and the clean-ups run when the part ends.
type benchTB struct {
	dir      string
	n        int
	cleanups []func()
}

func (t *benchTB) Helper()                      {}
func (t *benchTB) Fatal(args ...any)            { panic(fmt.Sprint(args...)) }
func (t *benchTB) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (t *benchTB) Cleanup(f func())             { t.cleanups = append(t.cleanups, f) }
func (t *benchTB) TempDir() string {
	t.n++
	d := filepath.Join(t.dir, fmt.Sprint("t", t.n))
	if err := os.MkdirAll(d, 0o700); err != nil {
		panic(err)
	}
	return d
}
func (t *benchTB) close() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}

type benchMate struct {
	store *memory.Store
	stop  func() error
}

func (b *benchRun) joinTeam(tb *benchTB, name, url string) (*benchMate, error) {
	st, err := memory.Open(filepath.Join(tb.TempDir(), "memories.db"), memory.Options{Author: name})
	if err != nil {
		return nil, err
	}
	if err := st.Share(context.Background(), teamProject, true, time.Now()); err != nil {
		st.Close()
		return nil, err
	}
	tm := team.New(team.Config{URL: url, Author: name, Store: st})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tm.Run(ctx) }()
	return &benchMate{store: st, stop: func() error {
		cancel()
		return errors.Join(<-done, st.Close())
	}}, nil
}

func (b *benchRun) teamBench(ctx context.Context) (err error) {
	tb := &benchTB{dir: filepath.Join(b.dir, "team")}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
		tb.close()
	}()
	c := teamtest.Start(tb, 3)
	a, err := b.joinTeam(tb, "alice", c.URL(0))
	if err != nil {
		return err
	}
	defer a.stop()
	bb, err := b.joinTeam(tb, "bob", c.URL(1))
	if err != nil {
		return err
	}
	defer bb.stop()

	// Replication lag: remember on A at 50 changes/s, searchable on B (its listing of the
	// project, read every 2 ms, holds the memory).
	n := teamRate * b.size.TeamSeconds
	var mu sync.Mutex
	sent := map[string]time.Time{}
	var lags []time.Duration
	done := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(time.Duration(b.size.TeamSeconds)*time.Second + 30*time.Second)
		for poll := 0; ; poll++ {
			ms, err := bb.store.List(ctx, memory.ListQuery{Projects: []string{teamProject}, Limit: 200})
			if err != nil {
				done <- err
				return
			}
			now := time.Now()
			mu.Lock()
			for _, m := range ms {
				if at, ok := sent[m.ID]; ok {
					lags = append(lags, now.Sub(at))
					delete(sent, m.ID)
				}
			}
			// The listing holds the newest 200: a teammate that applies more than that at
			// once (a batch after a stall) lists some of them never. Each 50th poll looks
			// up, by id, those a second old or more.
			var late []string
			if poll%50 == 0 {
				for id, at := range sent {
					if now.Sub(at) >= time.Second {
						late = append(late, id)
					}
				}
			}
			mu.Unlock()
			for _, id := range late {
				_, _, err := bb.store.Get(ctx, id)
				if err != nil && !errors.Is(err, memory.ErrNotFound) {
					done <- err
					return
				}
				if err == nil {
					mu.Lock()
					lags = append(lags, now.Sub(sent[id]))
					delete(sent, id)
					mu.Unlock()
				}
			}
			mu.Lock()
			all := len(lags) == n
			mu.Unlock()
			if all {
				done <- nil
				return
			}
			if now.After(deadline) {
				done <- fmt.Errorf("%d of %d memories reached the teammate within 30 s of the last", len(lags), n)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	// Each tick, a remember on A and a search on B, which applies A's versions beside it.
	tick := time.NewTicker(time.Second / teamRate)
	var remember, search []time.Duration
	for i := range n {
		<-tick.C
		start := time.Now()
		r, err := a.store.Remember(ctx, memory.Caller{Project: teamProject, SessionID: "ses_bench"},
			memory.RememberArgs{Content: fmt.Sprintf("Service svc-%d listens on port %d behind gateway gw-%d", i, 8000+i, i%7)}, start)
		if err != nil {
			tick.Stop()
			return err
		}
		remember = append(remember, time.Since(start))
		mu.Lock()
		sent[r.Memory.ID] = start
		mu.Unlock()
		start = time.Now()
		if _, err := bb.store.Search(ctx, memory.Caller{Project: teamProject, SessionID: "ses_bench_b"},
			fmt.Sprintf("gateway gw-%d port", i%7), nil, 10, start); err != nil {
			tick.Stop()
			return err
		}
		search = append(search, time.Since(start))
	}
	tick.Stop()
	if err := <-done; err != nil {
		return err
	}
	p50, p99 := percentiles(lags)
	b.add(Figure{Name: "team replication lag p50", Value: ms(p50), Unit: "ms",
		Definition: fmt.Sprintf("remember on A to listed on B, %d changes at %d/s, 3-node cluster on loopback", n, teamRate)})
	b.add(Figure{Name: "team replication lag p99", Value: ms(p99), Unit: "ms", Target: "< 1000 ms", Goal: under(1000),
		Definition: "as above, 99th percentile"})
	_, rp99 := percentiles(remember)
	b.add(Figure{Name: "team remember p99 (store)", Value: ms(rp99), Unit: "ms", Target: "≤ 20 ms", Goal: atMost(20),
		Definition: "memory store Remember with the project shared and the team connection running (no NATS tool round trip)"})
	_, sp99 := percentiles(search)
	b.add(Figure{Name: "team search p99 (store)", Value: ms(sp99), Unit: "ms", Target: "≤ 10 ms", Goal: atMost(10),
		Definition: "memory store Search on B, with the project shared, while B applies A's versions (no NATS tool round trip)"})

	// Backfill: A holds TeamBackfill memories (imported, sent through the outbox); a new
	// teammate that shares the project receives them all.
	ms := make([]memory.Memory, 0, b.size.TeamBackfill)
	base := time.Now()
	for i := range b.size.TeamBackfill {
		at := base.Add(time.Duration(i) * time.Millisecond)
		ms = append(ms, memory.Memory{ID: fmt.Sprintf("mem_%012x%08x", at.UnixMilli(), i), Project: teamProject, Kind: "fact",
			Content: fmt.Sprintf("Backfill fact %d: host h%d runs job j%d nightly", i, i%97, i), CreatedAt: at, UpdatedAt: at})
	}
	if _, err := a.store.Import(ctx, ms, time.Now()); err != nil {
		return err
	}
	want := n + b.size.TeamBackfill
	b.say("sending %d memories to the team…", b.size.TeamBackfill)
	sending := time.Now()
	for { // the outbox's first row, not a count(*) of 100,000 rows every 50 ms
		out, err := a.store.Outbox(ctx, 1)
		if err != nil {
			return err
		}
		if len(out) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.add(Figure{Name: "team send", Value: time.Since(sending).Seconds(), Unit: "s",
		Definition: fmt.Sprintf("A's outbox of %d imported memories drained to the cluster (acknowledged)", b.size.TeamBackfill)})
	// The stream's last sequence: the new teammate has everything once its position in the
	// project reaches it (a one-row read; counting 100,000 rows every 20 ms took a fifth of
	// the CPU the backfill had).
	last, err := teamLastSeq(ctx, c.URL(0))
	if err != nil {
		return err
	}
	start := time.Now()
	// The new teammate's goroutines (its store's writer, its team reader) carry the phase
	// in the profiles: go tool pprof -tagfocus phase=backfill.
	var d *benchMate
	pprof.Do(ctx, pprof.Labels("phase", "backfill"), func(context.Context) { d, err = b.joinTeam(tb, "dave", c.URL(2)) })
	if err != nil {
		return err
	}
	defer d.stop()
	for {
		ps, err := d.store.SharedProjects(ctx)
		if err != nil {
			return err
		}
		if len(ps) == 1 && ps[0].Cursor >= last {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return fmt.Errorf("the new teammate read %v of %d stream messages in 10 minutes", ps, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	if live, err := d.store.Count(ctx); err != nil || live != want {
		return fmt.Errorf("the new teammate read the whole stream and holds %d of %d memories (%v)", live, want, err)
	}
	// Received is searchable: the last memory sent is found by its words.
	lastSent := ms[len(ms)-1]
	res, err := d.store.Search(ctx, memory.Caller{Project: teamProject, SessionID: "ses_bench_d"}, fmt.Sprintf("job j%d", b.size.TeamBackfill-1), nil, 10, time.Now())
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(res.Hits, func(h memory.Hit) bool { return h.Memory.ID == lastSent.ID }) {
		return fmt.Errorf("the new teammate holds %d memories but a search does not find the last one sent", want)
	}
	b.add(Figure{Name: "team backfill", Value: took.Seconds(), Unit: "s", Target: "< 60 s at 100,000", Goal: under(60),
		Definition: fmt.Sprintf("a new teammate shares the project and receives all %d memories", want)})
	return nil
}

// teamLastSeq is the team stream's last sequence.
func teamLastSeq(ctx context.Context, url string) (uint64, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	st, err := js.Stream(ctx, team.Stream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}
