package memory

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestLatencyMixed measures memory_search's latency while another caller remembers back
// to back, and memory_remember's while another searches back to back, at -memory.scale
// memories over 100 projects: a search that waits for the writer shows here. A
// measurement, not a unit test: go test ./journal/memory -run LatencyMixed -memory.scale 100000 -v
func TestLatencyMixed(t *testing.T) {
	if *scale == 0 {
		t.Skip("set -memory.scale to run")
	}
	s := setup(t)
	g := seedSynthetic(t, s, 100, *scale/100)
	if _, err := s.w.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	texts, queries := make([]string, 4000), make([]string, 4000)
	for i := range texts {
		texts[i], queries[i] = g.text(), g.query()
	}
	// beside runs fn over and over until measure is done; measure's n calls are timed.
	run := func(name string, n int, measure func(i int) error, beside func(i int) error) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := beside(i); err != nil {
					t.Error(err)
					return
				}
			}
		})
		d := make([]time.Duration, n)
		for i := range d {
			start := time.Now()
			if err := measure(i); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			d[i] = time.Since(start)
		}
		close(stop)
		wg.Wait()
		slices.Sort(d)
		t.Logf("%-32s p50 %8v  p99 %8v  max %8v", name, d[n/2], d[n*99/100], d[n-1])
	}
	remember := func(i int) error {
		_, err := s.Remember(ctx, Caller{Project: project(i % 100), SessionID: "ses_l"}, RememberArgs{Content: texts[i%len(texts)]}, t0)
		return err
	}
	search := func(i int) error {
		_, err := s.Search(ctx, Caller{Project: project(i % 100)}, queries[i%len(queries)], nil, 10, t0)
		return err
	}
	run("search beside remembers", 2000, search, remember)
	run("remember beside searches", 2000, remember, search)
}
