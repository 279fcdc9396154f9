package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// ten is a memory of ten words; oneOff and twoOff differ from it by one and two words
// (Similarity 0.9 and 0.8).
const (
	ten    = "alpha bravo charlie delta echo foxtrot golf hotel india juliet"
	oneOff = "alpha bravo charlie delta echo foxtrot golf hotel india kilo"
	twoOff = "alpha bravo charlie delta echo foxtrot golf hotel lima kilo"
)

// hygiene is Hygiene of project at now that must succeed.
func hygiene(t *testing.T, s *Store, project string, now time.Time) Hygiene {
	t.Helper()
	h, err := s.Hygiene(context.Background(), one(project), now)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// pairOf is the pair of a and b as Hygiene lists it.
func pairOf(a, b string) [2]string {
	if b < a {
		a, b = b, a
	}
	return [2]string{a, b}
}

func pairsString(ps [][2]string) string { return fmt.Sprint(ps) }

// importAll imports ms, which must all be added.
func importAll(t *testing.T, s *Store, ms []Memory) {
	t.Helper()
	n, err := s.Import(context.Background(), ms, t0)
	if err != nil || n != len(ms) {
		t.Fatalf("import: %d of %d, %v", n, len(ms), err)
	}
}

// imported is a memory for Import, created at t0 plus i seconds.
func imported(i int, project, content string) Memory {
	at := t0.Add(time.Duration(i) * time.Second)
	return Memory{ID: fmt.Sprintf("mem_%012x%08x", at.UnixMilli(), i), Project: project, Content: content, CreatedAt: at, UpdatedAt: at}
}

func TestDuplicatePairs(t *testing.T) {
	ctx := context.Background()
	later := t0.Add(time.Hour)
	// Each case starts from a pair (a = ten, b = oneOff), an unrelated memory of the project
	// and a look-alike in another project; change does something, and want is the pairs then.
	tests := []struct {
		name   string
		change func(t *testing.T, s *Store, a, b, c string)
		want   func(a, b, c string) [][2]string
	}{
		{"found at remember", func(*testing.T, *Store, string, string, string) {},
			func(a, b, c string) [][2]string { return [][2]string{pairOf(a, b)} }},
		{"update to an unrelated text closes it", func(t *testing.T, s *Store, a, b, c string) {
			if _, err := s.Update(ctx, alice, b, UpdateArgs{Content: ptr("the queue drains every night at two")}, later); err != nil {
				t.Fatal(err)
			}
		}, func(a, b, c string) [][2]string { return [][2]string{} }},
		{"update to another similar text finds it again", func(t *testing.T, s *Store, a, b, c string) {
			if _, err := s.Update(ctx, alice, b, UpdateArgs{Content: ptr(twoOff)}, later); err != nil {
				t.Fatal(err)
			}
		}, func(a, b, c string) [][2]string { return [][2]string{pairOf(a, b)} }},
		{"forget closes it", func(t *testing.T, s *Store, a, b, c string) {
			if _, err := s.Forget(ctx, alice, a, "", later); err != nil {
				t.Fatal(err)
			}
		}, func(a, b, c string) [][2]string { return [][2]string{} }},
		{"a change of a side by any path closes it", func(t *testing.T, s *Store, a, b, c string) {
			// Not through Update: the read-time check alone closes the pair.
			if _, err := s.w.Exec(`UPDATE memories SET updated_at = updated_at + 1 WHERE id = ?`, a); err != nil {
				t.Fatal(err)
			}
		}, func(a, b, c string) [][2]string { return [][2]string{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := setup(t)
			r := remember(t, s, alice, ten)
			if len(r.Similar) != 0 {
				t.Fatalf("similar %v", r.Similar)
			}
			a := r.Memory.ID
			b := remember(t, s, alice, oneOff).Memory.ID
			c := remember(t, s, alice, "the coffee machine is descaled on fridays").Memory.ID
			remember(t, s, Caller{Project: "elsewhere"}, ten+" november")
			tt.change(t, s, a, b, c)
			got := hygiene(t, s, alice.Project, later).DuplicatePairs
			if want := tt.want(a, b, c); pairsString(got) != pairsString(want) {
				t.Errorf("pairs %v, want %v", got, want)
			}
			if all := hygiene(t, s, "", later).DuplicatePairs; pairsString(all) != pairsString(got) {
				t.Errorf("every project: %v, want %v (the other project has no pair)", all, got)
			}
			if other := hygiene(t, s, "elsewhere", later).DuplicatePairs; len(other) != 0 {
				t.Errorf("other project: %v", other)
			}
		})
	}
}

func TestDismiss(t *testing.T) {
	ctx := context.Background()
	s := setup(t)
	a := remember(t, s, alice, ten).Memory.ID
	b := remember(t, s, alice, oneOff).Memory.ID
	later := t0.Add(time.Hour)
	c := Caller{Project: alice.Project, SessionID: "ses_d", CallID: "call_d"}
	if err := s.Dismiss(ctx, c, b, a, later); err != nil {
		t.Fatal(err)
	}
	if got := hygiene(t, s, "", later).DuplicatePairs; len(got) != 0 {
		t.Fatalf("dismissed pair still open: %v", got)
	}
	for _, id := range []string{a, b} {
		_, log, _ := s.Get(ctx, id)
		last := log[len(log)-1]
		if last.Op != "dismiss" || last.CallID != "call_d" || !strings.HasPrefix(last.Reason, "not a duplicate of mem_") || !last.At.Equal(later) {
			t.Errorf("audit of %s: %+v", id, log)
		}
	}
	// Neither the pass nor a write that keeps the texts finds it again.
	if n, err := s.FindDuplicates(ctx, later); err != nil || n != 0 {
		t.Errorf("pass after dismiss: %d %v", n, err)
	}
	if _, err := s.Update(ctx, alice, b, UpdateArgs{Tags: ptr([]string{"greek"}), Content: ptr("ALPHA bravo charlie delta echo foxtrot golf hotel india   kilo")}, later); err != nil {
		t.Fatal(err)
	}
	if got := hygiene(t, s, "", later).DuplicatePairs; len(got) != 0 {
		t.Errorf("a change of case and tags reopened it: %v", got)
	}
	// The repeat of the call changes nothing, even with other ids.
	if err := s.Dismiss(ctx, c, a, "mem_000000000000deadbeef", later.Add(time.Hour)); err != nil {
		t.Errorf("repeat: %v", err)
	}
	if _, log, _ := s.Get(ctx, a); len(log) != 2 {
		t.Errorf("repeat audited again: %+v", log)
	}
	// Another still-similar text: the pair is found again.
	if _, err := s.Update(ctx, alice, b, UpdateArgs{Content: ptr(twoOff)}, later.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := hygiene(t, s, "", later).DuplicatePairs; pairsString(got) != pairsString([][2]string{pairOf(a, b)}) {
		t.Errorf("after a text change: %v, want the pair again", got)
	}
	// Dismissed again, then the other side changes: found again by the periodic pass too.
	if err := s.Dismiss(ctx, Caller{}, a, b, later); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`UPDATE memories SET content = ?, norm = ?, updated_at = updated_at + 1 WHERE id = ?`, oneOff+" x", normalize(oneOff+" x"), a); err != nil {
		t.Fatal(err)
	}
	if n, err := s.FindDuplicates(ctx, later); err != nil || n != 1 {
		t.Errorf("pass after a text change: %d %v, want 1", n, err)
	}
}

func TestDismissRefusals(t *testing.T) {
	ctx := context.Background()
	s := setup(t)
	a := remember(t, s, alice, ten).Memory.ID
	b := remember(t, s, alice, oneOff).Memory.ID
	bob := Caller{Project: "/home/bob/shop", SessionID: "ses_b"}
	theirs := remember(t, s, bob, ten).Memory.ID
	gone := remember(t, s, alice, twoOff).Memory.ID
	if _, err := s.Forget(ctx, alice, gone, "", t0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		c    Caller
		a, b string
		want error
	}{
		{"another project's pair", bob, a, b, ErrNotFound},
		{"one side of another project", alice, a, theirs, ErrNotFound},
		{"a person, two projects", Caller{}, a, theirs, ErrBadRequest},
		{"forgotten side", alice, a, gone, ErrNotFound},
		{"unknown side", alice, a, "mem_000000000000deadbeef", ErrNotFound},
		{"twice the same", alice, a, a, ErrBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Dismiss(ctx, tt.c, tt.a, tt.b, t0); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
	if got := hygiene(t, s, alice.Project, t0).DuplicatePairs; len(got) != 1 {
		t.Errorf("a refused dismissal closed the pair: %v", got)
	}
	// A person may dismiss any project's pair.
	if err := s.Dismiss(ctx, Caller{}, a, b, t0); err != nil {
		t.Errorf("person: %v", err)
	}
}

func TestFindDuplicates(t *testing.T) {
	ctx := context.Background()
	s := setup(t)
	p, q := "proj-p", "proj-q"
	ms := []Memory{
		imported(1, p, ten),
		imported(2, p, oneOff), // pair with 1
		imported(3, p, "deploys go through the blue green switch after the smoke tests pass"), // pair with 4
		imported(4, p, "deploys go through the blue green switch after smoke tests have passed"),
		imported(5, p, "the coffee machine is descaled on fridays"),
		imported(6, q, ten+" november"), // alike, but in another project
		imported(7, q, "nothing like the others at all"),
		imported(8, q, "make make make make make make make make build"), // multisets: pair with 9
		imported(9, q, "make make make make make make make make test"),
	}
	importAll(t, s, ms)
	if got := hygiene(t, s, "", t0).DuplicatePairs; len(got) != 0 {
		t.Fatalf("import paired %v; the pass is what pairs imports", got)
	}
	found, err := s.FindDuplicates(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{pairOf(ms[0].ID, ms[1].ID), pairOf(ms[2].ID, ms[3].ID), pairOf(ms[7].ID, ms[8].ID)} // best first: 0.9, 0.9, 0.889
	got := hygiene(t, s, "", t0).DuplicatePairs
	if found != 3 || pairsString(got) != pairsString(want) {
		t.Errorf("found %d: %v, want %v", found, got, want)
	}
	for i, w := range want {
		if a, b := mustGet(t, s, w[0]), mustGet(t, s, w[1]); Similarity(a.Content, b.Content) < DuplicateThreshold {
			t.Errorf("pair %d is below the threshold", i)
		}
	}
	if got := hygiene(t, s, q, t0).DuplicatePairs; pairsString(got) != pairsString(want[2:]) {
		t.Errorf("project q: %v", got)
	}
	// Idempotent: nothing new, the pairs unchanged.
	if n, err := s.FindDuplicates(ctx, t0.Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("second pass found %d, %v", n, err)
	}
	var foundAt int64
	if err := s.r.QueryRow(`SELECT max(found_at) FROM pairs`).Scan(&foundAt); err != nil || foundAt != t0.UnixMilli() {
		t.Errorf("second pass touched the pairs: found_at %d %v", foundAt, err)
	}
	// A pair the writes found is not counted again by the pass.
	remember(t, s, Caller{Project: p}, twoOff)
	if n, err := s.FindDuplicates(ctx, t0); err != nil || n != 0 {
		t.Errorf("pass after a write that paired: %d %v", n, err)
	}
	if got := hygiene(t, s, p, t0).DuplicatePairs; len(got) != 4 {
		t.Errorf("project p: %v, want 4 pairs (twoOff with ten and oneOff)", got)
	}
}

func mustGet(t *testing.T, s *Store, id string) Memory {
	t.Helper()
	m, _, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMinhashFindsWhatBruteForceFinds compares the pass's pairs, for a few hash families,
// with every pair of a few hundred texts compared by Similarity.
func TestMinhashFindsWhatBruteForceFinds(t *testing.T) {
	g := newSynthetic(3)
	var docs []dupDoc
	add := func(text string) {
		d := dupDoc{side: side{id: fmt.Sprintf("mem_%020d", len(docs)), norm: normalize(text)}, words: contentWords(text)}
		slices.Sort(d.words)
		docs = append(docs, d)
	}
	for range 200 {
		text := g.text()
		add(text)
		words := strings.Fields(text)
		// A third get a look-alike with one to three words changed: some above the
		// threshold, some below.
		if g.rng.IntN(3) == 0 {
			for range 1 + g.rng.IntN(3) {
				words[g.rng.IntN(len(words))] = g.word()
			}
			add(strings.Join(words, " "))
		}
	}
	want := map[[2]string]bool{}
	for i := range docs {
		for j := i + 1; j < len(docs); j++ {
			if Similarity(docs[i].norm, docs[j].norm) >= DuplicateThreshold {
				want[pairOf(docs[i].id, docs[j].id)] = true
			}
		}
	}
	if len(want) < 30 {
		t.Fatalf("only %d pairs to find", len(want))
	}
	for seed := range uint64(5) {
		got := map[[2]string]bool{}
		for _, p := range newMinhash(seed).pairs("p", docs) {
			if got[[2]string{p.a, p.b}] {
				t.Errorf("seed %d: pair %s %s twice", seed, p.a, p.b)
			}
			got[[2]string{p.a, p.b}] = true
			if !want[[2]string{p.a, p.b}] {
				t.Errorf("seed %d: %s %s is below the threshold", seed, p.a, p.b)
			}
		}
		if len(got) != len(want) {
			t.Errorf("seed %d: %d pairs of %d", seed, len(got), len(want))
		}
	}
}

// TestMinhashMissRate checks the hash family against the odds FindDuplicates states: pairs
// exactly at the threshold (Jaccard 2/3) are missed with probability (1 − (2/3)⁴)³² ≈ 0.09%.
// Over 4,000 such pairs that is 3.5 expected misses; 15 would mean the hashes are worse than
// random permutations.
func TestMinhashMissRate(t *testing.T) {
	const pairs = 4000
	rng := rand.New(rand.NewPCG(9, 9))
	word := func() string { return fmt.Sprintf("w%x", rng.Uint64()) }
	missed := 0
	for k := range 4 {
		h := newMinhash(uint64(k))
		var docs []dupDoc
		for i := range pairs / 4 {
			// Ten words each, eight in common: Dice 0.8. Some words repeat, as in prose.
			common := make([]string, 8)
			for j := range common {
				common[j] = word()
			}
			common[7] = common[0]
			a := append(slices.Clone(common), word(), word())
			b := append(slices.Clone(common), word(), word())
			for n, ws := range [][]string{a, b} {
				slices.Sort(ws)
				docs = append(docs, dupDoc{side: side{id: fmt.Sprintf("mem_%d_%d", i, n)}, words: ws})
			}
		}
		found := map[string]bool{}
		for _, p := range h.pairs("p", docs) {
			if p.score != DuplicateThreshold {
				t.Fatalf("pair %s %s scores %v", p.a, p.b, p.score)
			}
			found[p.a] = true
		}
		missed += pairs/4 - len(found)
	}
	t.Logf("missed %d of %d pairs at the threshold", missed, pairs)
	if missed > 15 {
		t.Errorf("missed %d of %d pairs at the threshold, expected about 3.5", missed, pairs)
	}
}

func TestStale(t *testing.T) {
	ctx := context.Background()
	day := 24 * time.Hour
	tests := []struct {
		name  string
		after time.Duration // Options.StaleAfter
		at    time.Duration // since the memory's creation
		stale bool
	}{
		{"default, a day short", 0, 89 * day, false},
		{"default, at 90 days", 0, 90 * day, true},
		{"30 days, a minute short", 30 * day, 30*day - time.Minute, false},
		{"30 days, past", 30 * day, 31 * day, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := setup(t, Options{StaleAfter: tt.after})
			m := remember(t, s, alice, "the nightly backup runs at three").Memory
			now := t0.Add(tt.at)
			fresh := remember(t, s, alice, "the weekly report goes out on mondays", RememberArgs{}).Memory
			if _, err := s.Update(ctx, alice, fresh.ID, UpdateArgs{Kind: ptr("decision")}, now); err != nil {
				t.Fatal(err)
			}
			h := hygiene(t, s, alice.Project, now)
			if got := slices.Contains(h.Stale, m.ID); got != tt.stale || slices.Contains(h.Stale, fresh.ID) {
				t.Fatalf("stale %v, want %s: %v", h.Stale, m.ID, tt.stale)
			}
			sec, err := s.Section(ctx, alice.Project, 2000, now)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(sec, m.ID) == tt.stale || !strings.Contains(sec, fresh.ID) {
				t.Errorf("section (stale %v):\n%s", tt.stale, sec)
			}
			if !tt.stale {
				return
			}
			// Still found, and found it is fresh again.
			if ids := found(t, s, alice, "backup"); len(ids) != 1 || ids[0] != m.ID {
				t.Fatalf("search %v", ids)
			}
			if _, err := s.Search(ctx, alice, "nightly backup", nil, 0, now); err != nil {
				t.Fatal(err)
			}
			flushUsed(t, s)
			if h := hygiene(t, s, "", now); len(h.Stale) != 0 {
				t.Errorf("stale after a search: %v", h.Stale)
			}
			if sec, _ := s.Section(ctx, alice.Project, 2000, now); !strings.Contains(sec, m.ID) {
				t.Errorf("section after a search:\n%s", sec)
			}
		})
	}
	if _, err := Open(filepath.Join(t.TempDir(), "m.db"), Options{StaleAfter: -time.Hour}); err == nil || !strings.Contains(err.Error(), "StaleAfter") {
		t.Errorf("negative StaleAfter: %v", err)
	}
}

func TestSignals(t *testing.T) {
	ctx := context.Background()
	s := setup(t, Options{StaleAfter: 30 * 24 * time.Hour})
	// One a second, so the ids sort as written.
	n := 0
	write := func(c Caller, content string, a RememberArgs) Memory {
		n++
		a.Content = content
		r, err := s.Remember(ctx, c, a, t0.Add(time.Duration(n)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return r.Memory
	}
	a := write(alice, ten, RememberArgs{})
	b := write(alice, oneOff, RememberArgs{}) // 0.9 with a
	c := write(alice, twoOff, RememberArgs{}) // 0.9 with b, 0.8 with a
	orphan := write(alice, "the feature flag lives in flags.yaml", RememberArgs{Branch: "feat-x", Directory: "/src/api"})
	merged := write(alice, "the parser handles tabs now", RememberArgs{Branch: "feat-y", Directory: "/src/api"})
	write(Caller{Project: "other"}, ten, RememberArgs{})
	// Verdicts as CheckBranches records them (it has its own test with a real repository).
	for id, v := range map[string]string{orphan.ID: SignalOrphaned, merged.ID: SignalMerged} {
		if _, err := s.w.Exec(`UPDATE memories SET branch_verdict = ? WHERE id = ?`, v, id); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(40 * 24 * time.Hour)
	// Everything is stale at now but the memory used then.
	if _, err := s.Search(ctx, alice, "feature flag", nil, 1, now); err != nil {
		t.Fatal(err)
	}
	flushUsed(t, s)
	sigs, err := s.Signals(ctx, one(alice.Project), 0, now)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sig := range sigs {
		var ids []string
		for _, m := range sig.Memories {
			ids = append(ids, m.ID)
		}
		got = append(got, sig.Kind+":"+strings.Join(ids, ","))
	}
	want := []string{
		"duplicate:" + a.ID + "," + b.ID, // 0.9, then by id
		"duplicate:" + b.ID + "," + c.ID, // 0.9
		"duplicate:" + a.ID + "," + c.ID, // 0.8
		"orphaned:" + orphan.ID,
		"merged:" + merged.ID,
		"stale:" + a.ID, "stale:" + b.ID, "stale:" + c.ID, "stale:" + merged.ID,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("signals\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Full texts, for the payload.
	if sigs[0].Memories[0].Content == "" || sigs[0].Memories[0].Content == sigs[0].Memories[1].Content {
		t.Errorf("first signal %+v", sigs[0])
	}
	if sigs, _ := s.Signals(ctx, one(alice.Project), 4, now); len(sigs) != 4 || sigs[3].Kind != SignalOrphaned {
		t.Errorf("limit 4: %+v", sigs)
	}
	if m, _, _ := s.Get(ctx, a.ID); m.UsedAt != nil {
		t.Error("signals marked a memory used")
	}
	if _, err := s.Signals(ctx, nil, 101, now); !errors.Is(err, ErrBadRequest) {
		t.Errorf("limit 101: %v", err)
	}
	// Page by page, with the counts: the same signals in the same order.
	var paged []string
	for offset := 0; offset < 12; offset += 2 {
		p, err := s.SignalsPage(ctx, one(alice.Project), offset, 2, now)
		if err != nil {
			t.Fatal(err)
		}
		if p.Total != len(want) || p.Offset != offset || p.Counts[SignalDuplicate] != 3 || p.Counts[SignalOrphaned] != 1 ||
			p.Counts[SignalMerged] != 1 || p.Counts[SignalStale] != 4 {
			t.Errorf("page at %d: total %d, counts %v", offset, p.Total, p.Counts)
		}
		if offset >= len(want) && (p.Signals == nil || len(p.Signals) != 0) {
			t.Errorf("a page past the end: %+v", p.Signals)
		}
		for _, sig := range p.Signals {
			var ids []string
			for _, m := range sig.Memories {
				if m.Content == "" {
					t.Errorf("a paged signal's memory %s has no text", m.ID)
				}
				ids = append(ids, m.ID)
			}
			paged = append(paged, sig.Kind+":"+strings.Join(ids, ","))
		}
	}
	if strings.Join(paged, "\n") != strings.Join(want, "\n") {
		t.Errorf("paged signals\n%s\nwant\n%s", strings.Join(paged, "\n"), strings.Join(want, "\n"))
	}
	if _, err := s.SignalsPage(ctx, nil, -1, 2, now); !errors.Is(err, ErrBadRequest) {
		t.Errorf("offset -1: %v", err)
	}
	if _, err := s.SignalsPage(ctx, nil, 0, 101, now); !errors.Is(err, ErrBadRequest) {
		t.Errorf("limit 101: %v", err)
	}
	h := hygiene(t, s, alice.Project, now)
	if len(h.DuplicatePairs) != 3 || len(h.Orphaned) != 1 || len(h.Merged) != 1 || len(h.Stale) != 4 {
		t.Errorf("hygiene %+v", h)
	}
	// Never null in JSON, even with nothing to report.
	data, _ := json.Marshal(hygiene(t, s, "nobody", now))
	if string(data) != `{"duplicatePairs":[],"stale":[],"orphaned":[],"merged":[]}` {
		t.Errorf("empty hygiene: %s", data)
	}
	data, _ = json.Marshal(h)
	if !strings.Contains(string(data), `"duplicatePairs":[["mem_`) {
		t.Errorf("hygiene JSON %s", data)
	}
	if sigs, err := s.Signals(ctx, one("nobody"), 0, now); err != nil || sigs == nil || len(sigs) != 0 {
		t.Errorf("no signals: %#v %v", sigs, err)
	}
}

func TestRestore(t *testing.T) {
	ctx := context.Background()
	s := setup(t)
	m := remember(t, s, alice, ten).Memory
	if _, err := s.Forget(ctx, alice, m.ID, "", t0); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(time.Hour)
	look := remember(t, s, alice, oneOff).Memory // written while m was forgotten: no pair
	if got := hygiene(t, s, "", later).DuplicatePairs; len(got) != 0 {
		t.Fatalf("pairs with a forgotten memory: %v", got)
	}
	if _, err := s.Restore(ctx, Caller{Project: "/home/bob/shop"}, m.ID, later); !errors.Is(err, ErrNotFound) {
		t.Errorf("restore from another project: %v", err)
	}
	c := Caller{Project: alice.Project, SessionID: "ses_r", CallID: "call_r"}
	r, err := s.Restore(ctx, c, m.ID, later)
	if err != nil || r.Memory.ForgottenAt != nil || r.Memory.Content != ten || r.Repeat {
		t.Fatalf("restore %+v %v", r, err)
	}
	if ids := found(t, s, alice, "juliet"); len(ids) != 1 || ids[0] != m.ID {
		t.Errorf("search after restore: %v", ids)
	}
	_, log, _ := s.Get(ctx, m.ID)
	if len(log) != 3 || log[2].Op != "restore" || log[2].CallID != "call_r" {
		t.Errorf("audit %+v", log)
	}
	if got := hygiene(t, s, "", later).DuplicatePairs; pairsString(got) != pairsString([][2]string{pairOf(m.ID, look.ID)}) {
		t.Errorf("restore did not pair: %v", got)
	}
	if again, err := s.Restore(ctx, c, m.ID, later); err != nil || !again.Repeat || again.Memory.ID != m.ID {
		t.Errorf("repeat %+v %v", again, err)
	}
	if _, err := s.Restore(ctx, alice, m.ID, later); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "not forgotten") {
		t.Errorf("restore a live memory: %v", err)
	}
	// A live memory with the same text blocks it, and says which.
	if _, err := s.Forget(ctx, alice, m.ID, "", later); err != nil {
		t.Fatal(err)
	}
	same := remember(t, s, alice, strings.ToUpper(ten)).Memory
	if _, err := s.Restore(ctx, Caller{}, m.ID, later); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), same.ID) {
		t.Errorf("restore over a live duplicate: %v", err)
	}
	if _, err := s.Restore(ctx, Caller{}, "mem_000000000000deadbeef", later); !errors.Is(err, ErrNotFound) {
		t.Errorf("restore unknown: %v", err)
	}
}

func TestRememberDirectoryAndTip(t *testing.T) {
	ctx := context.Background()
	s := setup(t)
	r, err := s.Remember(ctx, alice, RememberArgs{Content: "x", Branch: "feat", Directory: "/src/api/", BranchTip: "ABCDEF0123456789"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	m := mustGet(t, s, r.Memory.ID)
	stored := m
	stored.Folder = "" // Get's, not the memory's: the project's folder
	if m.Directory != "/src/api" || m.BranchTip != "abcdef0123456789" || m.Folder != "/src/api" || !equal(stored, r.Memory) {
		t.Errorf("stored %+v, answered %+v", m, r.Memory)
	}
	// Exported and imported with the rest.
	dst := setup(t)
	if n, err := dst.Import(ctx, []Memory{m}, t0); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if got := mustGet(t, dst, m.ID); got.Directory != m.Directory || got.BranchTip != m.BranchTip {
		t.Errorf("imported %+v", got)
	}
	// A directory of another system is dropped on import, not refused.
	foreign := m
	foreign.ID, foreign.Content, foreign.Directory = "mem_000000000000aaaaaaaa", "from elsewhere", `C:\src\api`
	if n, err := dst.Import(ctx, []Memory{foreign}, t0); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if got := mustGet(t, dst, foreign.ID); got.Directory != "" || got.BranchTip != m.BranchTip {
		t.Errorf("imported from another system %+v", got)
	}
	for _, a := range []RememberArgs{{Content: "y", Directory: "relative/dir"}, {Content: "y", BranchTip: "--output=/tmp/x"}, {Content: "y", BranchTip: "main"}} {
		if _, err := s.Remember(ctx, alice, a, t0); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%+v: %v", a, err)
		}
	}
}

// TestMigrateFromVersion1 opens a store written by the first schema: its memories keep
// everything and take part in hygiene.
func TestMigrateFromVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memories.db")
	db := storeAtVersion(t, path, 1)
	for i, content := range []string{ten, oneOff} {
		if _, err := db.Exec(`INSERT INTO memories (id, project, scope, branch, kind, content, norm, created_at, updated_at)
			VALUES (?, 'p', ?, 'main', 'fact', ?, ?, ?, ?)`, fmt.Sprintf("mem_0000000000000000000%d", i), scope("p"), content, normalize(content), t0.UnixMilli(), t0.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s := openAt(t, path, Options{})
	m := mustGet(t, s, "mem_00000000000000000000")
	if m.Content != ten || m.Branch != "main" || m.Directory != "" {
		t.Errorf("after migration: %+v", m)
	}
	if n, err := s.FindDuplicates(context.Background(), t0); err != nil || n != 1 {
		t.Errorf("pass over old memories: %d %v", n, err)
	}
}

func TestDuplicatePassDue(t *testing.T) {
	ctx := context.Background()
	s := setup(t)
	day := 24 * time.Hour
	due := func(s *Store, now time.Time) bool {
		t.Helper()
		d, err := s.DuplicatePassDue(ctx, now, day)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if !due(s, t0) {
		t.Fatal("a store no pass ever ran on: not due")
	}
	if _, err := s.FindDuplicates(ctx, t0); err != nil {
		t.Fatal(err)
	}
	if due(s, t0.Add(time.Hour)) {
		t.Fatal("due an hour after a pass")
	}
	// A restart of thatch reads the same store: the pass is not redone.
	s.Close()
	s, err := Open(s.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if due(s, t0.Add(time.Hour)) {
		t.Fatal("due again after reopening the store an hour after a pass")
	}
	if !due(s, t0.Add(day)) {
		t.Fatal("not due a day after the pass")
	}
	// An import that adds nothing changes nothing; one that adds makes the pass due.
	if n, err := s.Import(ctx, nil, t0.Add(2*time.Hour)); err != nil || n != 0 {
		t.Fatal(n, err)
	}
	if due(s, t0.Add(3*time.Hour)) {
		t.Fatal("due after an empty import")
	}
	if n, err := s.Import(ctx, []Memory{imported(1, "proj-p", ten)}, t0.Add(2*time.Hour)); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if !due(s, t0.Add(3*time.Hour)) {
		t.Fatal("not due after an import added a memory")
	}
	if _, err := s.FindDuplicates(ctx, t0.Add(4*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if due(s, t0.Add(5*time.Hour)) {
		t.Fatal("due after the pass that followed the import")
	}
}

// A project's signals are kept between calls, and what is kept is what the store says at
// every step: after a write, when a memory becomes stale with no write, and when the clock
// goes back.
func TestSignalsMemoFollowsTheStore(t *testing.T) {
	ctx := context.Background()
	s := setup(t, Options{StaleAfter: 30 * 24 * time.Hour})
	write := func(content string, at time.Time) Memory {
		r, err := s.Remember(ctx, alice, RememberArgs{Content: content}, at)
		if err != nil {
			t.Fatal(err)
		}
		return r.Memory
	}
	render := func(sigs []Signal) string {
		var b strings.Builder
		for _, sig := range sigs {
			b.WriteString(sig.Kind)
			for _, m := range sig.Memories {
				b.WriteString(" " + m.ID + "=" + m.Content)
			}
			b.WriteString("\n")
		}
		return b.String()
	}
	check := func(step string, now time.Time, want int) {
		t.Helper()
		for range 2 { // the second is the memo's
			got, err := s.Signals(ctx, one(alice.Project), 0, now)
			if err != nil {
				t.Fatal(err)
			}
			read, _, err := s.readSignals(ctx, one(alice.Project), 10, now, false)
			if err != nil {
				t.Fatal(err)
			}
			if render(got) != render(read) || len(got) != want {
				t.Fatalf("%s: signals\n%s\nthe store says (%d wanted)\n%s", step, render(got), want, render(read))
			}
		}
	}
	a := write("the nightly backup runs at three", t0.Add(time.Second))
	write("the weekly report goes out on mondays", t0.Add(2*time.Second))
	stale := t0.Add(30 * 24 * time.Hour)
	check("nothing to say", t0.Add(24*time.Hour), 0)
	check("the first memory stale, no write", stale.Add(1500*time.Millisecond), 1)
	check("both stale", stale.Add(3*time.Second), 2)
	check("the clock back", t0.Add(24*time.Hour), 0)
	write(ten, t0.Add(3*time.Second))
	write(oneOff, t0.Add(4*time.Second)) // a duplicate pair, by a write
	check("a duplicate written", t0.Add(24*time.Hour), 1)
	if _, err := s.Forget(ctx, alice, a.ID, "obsolete", stale.Add(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	check("one forgotten", stale.Add(5*time.Second), 4) // the pair, the report, ten and oneOff stale
}

// TestVerdictsUseTheirIndex: the memories of a branch verdict are read through the partial
// index of the verdicts, whatever the projects: through a project's index instead, a
// session's start read every live memory of its project.
func TestVerdictsUseTheirIndex(t *testing.T) {
	s := setup(t)
	for _, projects := range [][]string{nil, {"/p/a"}, {"/p/a", "/p/b"}} {
		query, args := verdictsQuery(projects, SignalOrphaned, -1)
		rows, err := s.r.Query(`EXPLAIN QUERY PLAN `+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if got := strings.Join(plan, "; "); !strings.Contains(got, "USING INDEX memories_verdict") {
			t.Errorf("projects %q: plan %q, want the index memories_verdict", projects, got)
		}
	}
}
