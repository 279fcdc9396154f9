package memory

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	fixture        = flag.String("memory.fixture", "", "run TestLatencyFixture over a copy of this memories.db (thatch-bench's memory1m fixture); empty skips it")
	fixtureCallers = flag.Int("memory.callers", 1, "TestLatencyFixture's callers calling at once, back to back")
)

// TestLatencyFixture measures memory_search and memory_remember over a copy of a large
// store, such as thatch-bench's store of 1,000,000 memories over 100 projects: -memory.callers
// goroutines call back to back (1: a call's own cost), without NATS. A measurement, not a
// unit test: go test ./journal/memory -run LatencyFixture -v \
// -memory.fixture /var/tmp/thatch-bench-fixtures/memories-1000000x100-seed1/memories.db
func TestLatencyFixture(t *testing.T) {
	if *fixture == "" {
		t.Skip("set -memory.fixture to run")
	}
	dir := t.TempDir()
	for _, suffix := range []string{"", "-wal"} {
		if err := copyFixtureFile(*fixture+suffix, filepath.Join(dir, "memories.db"+suffix)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	s := openAt(t, filepath.Join(dir, "memories.db"), Options{})
	ctx := context.Background()
	var projects []string
	rows, err := s.r.Query(`SELECT DISTINCT project FROM memories`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		rows.Scan(&p)
		projects = append(projects, p)
	}
	rows.Close()
	// Queries of one to three words of memories, or one of their identifiers, as the
	// bench asks; texts of ten to sixty of their words, as it remembers.
	rng := rand.New(rand.NewPCG(7, 7))
	var words []string
	rows, err = s.r.Query(`SELECT content FROM memories WHERE seq % 997 = 0`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		rows.Scan(&c)
		words = append(words, strings.Fields(c)...)
	}
	rows.Close()
	word := func() string { return words[rng.IntN(len(words))] }
	queries, texts := make([]string, 4000), make([]string, 4000)
	for i := range queries {
		q := []string{word()}
		for range i % 3 {
			q = append(q, word())
		}
		queries[i] = strings.Join(q, " ")
		t := make([]string, 10+rng.IntN(50))
		for j := range t {
			t[j] = word()
		}
		texts[i] = strings.Join(t, " ")
	}
	t.Logf("%d projects; %d words drawn from", len(projects), len(words))
	callers := *fixtureCallers
	measure := func(name string, n int, fn func(i int) error) {
		var mu sync.Mutex
		var d []time.Duration
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for i := c; i < n; i += callers {
					start := time.Now()
					if err := fn(i); err != nil {
						t.Errorf("%s: %v", name, err)
						return
					}
					took := time.Since(start)
					mu.Lock()
					d = append(d, took)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(d)
		t.Logf("%-16s %d callers: p50 %8v  p99 %8v  max %8v", name, callers, d[len(d)/2], d[len(d)*99/100], d[len(d)-1])
	}
	for round := range 2 {
		measure(fmt.Sprint("search ", round), 2000, func(i int) error {
			_, err := s.Search(ctx, Caller{Project: projects[i%len(projects)]}, queries[i%len(queries)], nil, 10, t0)
			return err
		})
		measure(fmt.Sprint("remember ", round), 1000, func(i int) error {
			_, err := s.Remember(ctx, Caller{Project: projects[i%len(projects)], SessionID: "ses_l"}, RememberArgs{Content: texts[(i+round*1000)%len(texts)]}, t0)
			return err
		})
	}
}

func copyFixtureFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
