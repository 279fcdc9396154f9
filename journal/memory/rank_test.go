package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// A search answers the best limit of the 4×limit most relevant memories once the recency
// bonus is applied, reading whole only what it answers: the same answer as reading the
// 4×limit whole and re-ranking them, checked against that here on a store whose memories
// were updated and used at many times.
func TestSearchRanksByRelevanceThenRecency(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	words := []string{"redis", "cache", "eviction", "postgres", "index", "deploy", "gateway", "timeout", "retry", "queue", "src/api/handler.go", "svc-12-04"}
	text := func(n int) string {
		var ws []string
		for range n {
			ws = append(ws, words[rng.IntN(len(words))])
		}
		return strings.Join(ws, " ")
	}
	var ids []string
	for i := range 300 {
		r, err := s.Remember(ctx, alice, RememberArgs{Content: fmt.Sprintf("%s (note %d)", text(3+rng.IntN(12)), i), Tags: []string{words[rng.IntN(len(words))]}},
			t0.Add(-time.Duration(rng.IntN(200*24))*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.Memory.ID)
	}
	for range 60 {
		if _, err := s.Update(ctx, alice, ids[rng.IntN(len(ids))], UpdateArgs{Kind: ptr("decision")}, t0.Add(-time.Duration(rng.IntN(100*24))*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	for range 40 { // used marks at many times
		if _, err := s.Search(ctx, alice, text(1+rng.IntN(2)), nil, 5, t0.Add(-time.Duration(rng.IntN(90*24))*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	path := s.Path()
	if err := s.Close(); err != nil { // writes the queued marks
		t.Fatal(err)
	}
	// Read-only: no search below marks anything, so the reference and the search read the
	// same rows.
	ro, err := OpenReadOnly(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	used := 0
	for i := range 200 {
		query, limit := text(1+rng.IntN(3)), 1+rng.IntN(12)
		got, err := ro.Search(ctx, alice, query, nil, limit, t0)
		if err != nil {
			t.Fatal(err)
		}
		terms, counts, err := ro.telling(ctx, queryTerms(query))
		if err != nil {
			t.Fatal(err)
		}
		want, err := ro.rank(ctx, one(alice.Project), terms, nil, 4*limit, true, counts)
		if err != nil {
			t.Fatal(err)
		}
		for j, h := range want {
			want[j].Score = h.Score * (1 + 0.25*recency(h.Memory.UsedAt, t0) + 0.15*recency(&h.Memory.UpdatedAt, t0))
			if h.Memory.UsedAt != nil {
				used++
			}
		}
		sort.SliceStable(want, func(a, b int) bool { return want[a].Score > want[b].Score })
		want = want[:min(limit, len(want))]
		if len(got.Hits) != len(want) || len(want) == 0 {
			t.Fatalf("case %d: %q limit %d: %d hits, want %d (and some)", i, query, limit, len(got.Hits), len(want))
		}
		for j := range want {
			g, w := got.Hits[j], want[j]
			if g.Memory.ID != w.Memory.ID || g.Score != w.Score || g.Memory.Content != w.Memory.Content || !slices.Equal(g.Memory.Tags, w.Memory.Tags) {
				t.Fatalf("case %d: %q limit %d: hit %d is %s (%.6f), want %s (%.6f)", i, query, limit, j, g.Memory.ID, g.Score, w.Memory.ID, w.Score)
			}
		}
	}
	if used == 0 {
		t.Fatal("no ranked memory had been used: the used bonus went untested")
	}
}

// readHits reads the first n of its list still live, in order: one forgotten since it was
// scored makes room for the next.
func TestReadHitsSkipsTheForgotten(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	for i := range 6 {
		remember(t, s, alice, fmt.Sprintf("kafka consumer lag alert %d", i))
	}
	best, err := s.scoreMatches(ctx, one(alice.Project), []string{"kafka"}, nil, 6, true, nil, rankCandidates)
	if err != nil || len(best) != 6 {
		t.Fatalf("scored %d, %v", len(best), err)
	}
	if _, err := s.Forget(ctx, alice, best[0].id, "", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forget(ctx, alice, best[2].id, "", t0); err != nil {
		t.Fatal(err)
	}
	hits, err := s.readHits(ctx, best, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hits {
		got = append(got, h.Memory.ID)
	}
	if want := []string{best[1].id, best[3].id, best[4].id}; !slices.Equal(got, want) {
		t.Fatalf("read %v, want %v", got, want)
	}
	if hits[0].Score != best[1].score {
		t.Fatalf("score %v, want %v", hits[0].Score, best[1].score)
	}
}
