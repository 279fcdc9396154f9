package memory

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

var scale = flag.Int("memory.scale", 0, "run TestLatency over this many memories (100 projects); 0 skips it")

// synthetic draws memory texts from a Zipf-distributed vocabulary, like prose: a few words
// are everywhere, most are rare.
type synthetic struct {
	rng   *rand.Rand
	zipf  *rand.Zipf
	vocab []string
}

func newSynthetic(seed uint64) *synthetic {
	rng := rand.New(rand.NewPCG(seed, seed))
	vocab := make([]string, 20000)
	const letters = "abcdefghijklmnopqrstuvwxyz"
	for i := range vocab {
		var b strings.Builder
		for range 3 + rng.IntN(7) {
			b.WriteByte(letters[rng.IntN(len(letters))])
		}
		vocab[i] = b.String()
	}
	return &synthetic{rng: rng, zipf: rand.NewZipf(rng, 1.1, 2, uint64(len(vocab)-1)), vocab: vocab}
}

func (g *synthetic) word() string { return g.vocab[g.zipf.Uint64()] }

// text is a memory of 8 to 40 words, some with an identifier or a path.
func (g *synthetic) text() string {
	words := make([]string, 8+g.rng.IntN(33))
	for i := range words {
		words[i] = g.word()
	}
	switch g.rng.IntN(4) {
	case 0:
		words[0] = fmt.Sprintf("svc-%s-%02d", g.word(), g.rng.IntN(100))
	case 1:
		words[len(words)-1] = fmt.Sprintf("src/%s/%s.go", g.word(), g.word())
	}
	return strings.Join(words, " ")
}

// query is two or three words as a person would search them.
func (g *synthetic) query() string {
	n := 2 + g.rng.IntN(2)
	words := make([]string, n)
	for i := range words {
		words[i] = g.vocab[g.rng.IntN(2000)] // not the rarest: queries that find something
	}
	return strings.Join(words, " ")
}

func project(i int) string { return fmt.Sprintf("/home/dev/src/project-%03d", i) }

// seedSynthetic fills s with perProject synthetic memories in each of projects projects,
// created over the 180 days before t0, a third of them used since, and returns the generator
// for more of the same.
func seedSynthetic(tb testing.TB, s *Store, projects, perProject int) *synthetic {
	tb.Helper()
	g := newSynthetic(1)
	ctx := context.Background()
	span := int64(180 * 24 * time.Hour / time.Millisecond)
	for p := range projects {
		err := s.withTx(ctx, func(tx cachedTx) error {
			for range perProject {
				created := t0.Add(-time.Duration(g.rng.Int64N(span)) * time.Millisecond).Truncate(time.Millisecond)
				m := Memory{
					ID: newID(created), Project: project(p), Kind: Kinds[g.rng.IntN(len(Kinds))],
					Content: g.text(), Tags: []string{g.word()}, CreatedAt: created, UpdatedAt: created,
					Source: Source{SessionID: "ses_seed"},
				}
				if g.rng.IntN(3) == 0 {
					used := created.Add(time.Duration(g.rng.Int64N(int64(t0.Sub(created)) + 1))).Truncate(time.Millisecond)
					m.UsedAt = &used
				}
				if err := insert(ctx, tx, m); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatalf("seed: %v", err)
		}
	}
	return g
}

// benchStore is a store seeded with 1,000 memories in each of benchProjects projects: 20, or
// -memory.scale/1000.
func benchStore(b *testing.B) (*Store, *synthetic) {
	s := setup(b)
	g := seedSynthetic(b, s, benchProjects(), 1000)
	return s, g
}

func benchProjects() int {
	if *scale > 0 {
		return *scale / 1000
	}
	return 20
}

func BenchmarkSearch(b *testing.B) {
	s, g := benchStore(b)
	ctx := context.Background()
	for b.Loop() {
		c := Caller{Project: project(g.rng.IntN(benchProjects()))}
		if _, err := s.Search(ctx, c, g.query(), nil, 10, t0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRemember(b *testing.B) {
	s, g := benchStore(b)
	ctx := context.Background()
	for b.Loop() {
		c := Caller{Project: project(g.rng.IntN(benchProjects())), SessionID: "ses_bench"}
		if _, err := s.Remember(ctx, c, RememberArgs{Content: g.text()}, t0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSection(b *testing.B) {
	s, g := benchStore(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.Section(ctx, project(g.rng.IntN(benchProjects())), 2000, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLatency measures the p50 and p99 latencies of the hot calls at -memory.scale memories
// over 100 projects, and the file size per 1,000 memories. It is a measurement, not a unit
// test: go test ./journal/memory -run Latency -memory.scale 100000 -v
func TestLatency(t *testing.T) {
	if *scale == 0 {
		t.Skip("set -memory.scale to run")
	}
	s := setup(t)
	start := time.Now()
	g := seedSynthetic(t, s, 100, *scale/100)
	t.Logf("seeded %d memories in %v", *scale, time.Since(start).Round(time.Millisecond))
	if _, err := s.w.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(s.Path())
	t.Logf("file: %d bytes, %.0f KB per 1,000 memories", fi.Size(), float64(fi.Size())/float64(*scale/1000)/1024)

	ctx := context.Background()
	measure := func(name string, n int, fn func() error) {
		d := make([]time.Duration, n)
		for i := range d {
			start := time.Now()
			if err := fn(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			d[i] = time.Since(start)
		}
		slices.Sort(d)
		t.Logf("%-25s p50 %8v  p99 %8v  max %8v", name, d[n/2], d[n*99/100], d[n-1])
	}
	measure("remember", 2000, func() error {
		_, err := s.Remember(ctx, Caller{Project: project(g.rng.IntN(100)), SessionID: "ses_l"}, RememberArgs{Content: g.text()}, t0)
		return err
	})
	// Remembering a near-duplicate of a memory (one word changed) records its pairs too.
	dups := nearDuplicates(t, s, g, 2000)
	i := 0
	measure("remember (near-duplicate)", len(dups), func() error {
		d := dups[i]
		i++
		r, err := s.Remember(ctx, Caller{Project: d.Project, SessionID: "ses_l"}, RememberArgs{Content: d.Content}, t0)
		if err == nil && r.Created && len(r.Similar) == 0 {
			err = fmt.Errorf("no look-alike of %q", d.Content)
		}
		return err
	})
	measure("search", 2000, func() error {
		_, err := s.Search(ctx, Caller{Project: project(g.rng.IntN(100))}, g.query(), nil, 10, t0)
		return err
	})
	measure("section", 2000, func() error {
		_, err := s.Section(ctx, project(g.rng.IntN(100)), 2000, t0)
		return err
	})
	measure("related", 500, func() error {
		payload := strings.Repeat(g.text()+"\n", 20)
		_, err := s.Related(ctx, project(g.rng.IntN(100)), payload, 10)
		return err
	})
}

// nearDuplicates is n live memories of s drawn at random, each with one word (not the first)
// replaced by another of g's vocabulary.
func nearDuplicates(tb testing.TB, s *Store, g *synthetic, n int) []Memory {
	tb.Helper()
	var top int64
	if err := s.r.QueryRow(`SELECT max(seq) FROM memories`).Scan(&top); err != nil {
		tb.Fatal(err)
	}
	var out []Memory
	for len(out) < n {
		var m Memory
		err := s.r.QueryRow(`SELECT project, content FROM memories WHERE seq = ? AND forgotten_at = 0`, 1+g.rng.Int64N(top)).Scan(&m.Project, &m.Content)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			tb.Fatal(err)
		}
		words := strings.Fields(m.Content)
		words[1+g.rng.IntN(len(words)-1)] = g.word()
		m.Content = strings.Join(words, " ")
		out = append(out, m)
	}
	return out
}

// TestFindDuplicatesLatency measures FindDuplicates at -memory.scale memories over 100
// projects, 1% of them planted near-duplicates written without the write-time check (as an
// import writes them), and the share of the planted pairs it finds. It is a measurement, not
// a unit test: go test ./journal/memory -run FindDuplicatesLatency -memory.scale 100000 -v
func TestFindDuplicatesLatency(t *testing.T) {
	if *scale == 0 {
		t.Skip("set -memory.scale to run")
	}
	s := setup(t)
	g := seedSynthetic(t, s, 100, *scale/100)
	ctx := context.Background()
	planted := nearDuplicates(t, s, g, *scale/100)
	alike := 0
	err := s.withTx(ctx, func(tx cachedTx) error {
		for i, m := range planted {
			at := t0.Add(time.Duration(i) * time.Millisecond)
			m.ID, m.Kind, m.Tags, m.CreatedAt, m.UpdatedAt = newID(at), "fact", []string{}, at, at
			if _, err := liveByNorm(ctx, tx, m.Project, normalize(m.Content)); err == nil {
				continue // the replacement drew the same word
			}
			if err := insert(ctx, tx, m); err != nil {
				return err
			}
			// One word of n changed: 1 − 1/n, at or above the threshold from 5 words on.
			if len(contentWords(m.Content)) >= 5 {
				alike++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := s.Count(ctx)
	for pass := 1; pass <= 2; pass++ {
		start := time.Now()
		found, err := s.FindDuplicates(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pass %d over %d memories: %v, %d pairs recorded", pass, n, time.Since(start).Round(time.Millisecond), found)
	}
	start := time.Now()
	h, err := s.Hygiene(ctx, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hygiene of every project: %v (%d pairs, %d stale)", time.Since(start).Round(time.Millisecond), len(h.DuplicatePairs), len(h.Stale))
	start = time.Now()
	if _, err := s.Signals(ctx, []string{project(0)}, 10, t0); err != nil {
		t.Fatal(err)
	}
	t.Logf("signals of one project: %v", time.Since(start).Round(time.Microsecond))
	t.Logf("open pairs %d, planted near-duplicates about %d", len(h.DuplicatePairs), alike)
	if len(h.DuplicatePairs) < alike*99/100 {
		t.Errorf("found %d pairs of about %d planted", len(h.DuplicatePairs), alike)
	}
}

func BenchmarkFindDuplicates(b *testing.B) {
	s, _ := benchStore(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.FindDuplicates(ctx, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMinhashPairs is the duplicate pass's comparison of one project of 10,000
// memories (the bench's store of 1,000,000 over 100 projects), without SQLite.
func BenchmarkMinhashPairs(b *testing.B) {
	g := newSynthetic(3)
	docs := make([]dupDoc, 10000)
	for i := range docs {
		docs[i].id = newID(t0.Add(time.Duration(i) * time.Millisecond))
		docs[i].norm = normalize(g.text())
		docs[i].words = contentWords(docs[i].norm)
		slices.Sort(docs[i].words)
	}
	h := newMinhash(1)
	for b.Loop() {
		h.pairs("p", docs)
	}
}
