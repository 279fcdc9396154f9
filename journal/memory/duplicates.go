package memory

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"
)

// FindDuplicates records the duplicate pairs that writes missed: memories imported, written
// before pairs existed, or whose look-alike was not among a write's candidates. It compares
// every project's live memories with each other, records each pair at or above
// DuplicateThreshold that is neither open already nor dismissed with both current texts, and
// reports how many it recorded: a second pass over an unchanged store records none. It
// deletes no memory, only the rows of pairs closed already. Run it after imports and at most
// daily: it reads every live memory (1.3 s at 100,000 memories over 100 projects on two
// cores, most of it SQLite reading the texts).
//
// The method is MinHash with LSH banding, per project. Similarity is the Dice coefficient of
// two word multisets; over the sets of (word, occurrence) tokens (the second "make" of a text
// is the token make#2) Dice D and Jaccard J measure the same thing, D = 2J/(1+J), so the
// threshold D ≥ 0.8 is J ≥ 2/3 exactly. A MinHash value of a text is the least of its tokens
// under one random hash; two texts share it with probability J. Each text gets minhashRows ×
// minhashBands values; texts that share all minhashRows values of a band land in one bucket,
// and only texts sharing a bucket are compared with Similarity. A pair of Jaccard J shares no
// bucket with probability (1 − J⁴)³²: 0.09% at the threshold (Dice 0.8), 5·10⁻⁹ at Dice 0.9,
// while a pair of J = 0.2 is compared with probability 5%. The alternatives cost more: all
// pairs exactly is n²/2 Dice computations per project (5·10⁹ for one project of 100,000), and
// the write-time look-alike query for every memory is 100,000 × 3 ms; this is n × 128 hash
// steps and a sort, with a near-linear number of comparisons, and needs no stored state.
// Each pass draws its hash functions anew, so a pair one pass misses is found by the next
// one with the same odds.
func (s *Store) FindDuplicates(ctx context.Context, now time.Time) (found int, err error) {
	// The writes delete the pairs of what they change, and readers check both sides anyway;
	// this clears whatever a side changed by another path (a restore of an old file) left.
	err = s.withTx(ctx, func(tx cachedTx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM pairs WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = pairs.a AND m.forgotten_at = 0 AND m.updated_at = pairs.a_updated)
			OR NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = pairs.b AND m.forgotten_at = 0 AND m.updated_at = pairs.b_updated)`)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("find duplicates: drop closed pairs: %w", err)
	}
	projects, err := ids(ctx, s.r, `SELECT DISTINCT project FROM memories WHERE forgotten_at = 0 ORDER BY project LIMIT -1`)
	if err != nil {
		return 0, fmt.Errorf("find duplicates: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	h := newMinhash(rand.Uint64())
	type result struct {
		project string
		pairs   []pair
	}
	// Reading and hashing a project runs on every core; recording is the single writer's,
	// here, one transaction a project that has anything new.
	todo := make(chan string)
	results := make(chan result)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for project := range todo {
				docs, err := s.dupDocs(ctx, project)
				if err != nil {
					cancel(fmt.Errorf("read memories of %s: %w", project, err))
					return
				}
				select {
				case results <- result{project, h.pairs(project, docs)}:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	go func() {
		defer close(todo)
		for _, p := range projects {
			select {
			case todo <- p:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(results)
	}()
	for r := range results {
		if ctx.Err() != nil {
			continue // drain, so the workers end
		}
		n, err := s.recordPairs(ctx, r.project, r.pairs, now)
		if err != nil {
			cancel(fmt.Errorf("record pairs of %s: %w", r.project, err))
			continue
		}
		found += n
	}
	if err := context.Cause(ctx); err != nil {
		return found, fmt.Errorf("find duplicates: %w", err)
	}
	// The pass's start: an import that ran beside it makes the next one due.
	if err := s.withTx(ctx, func(tx cachedTx) error { return setMeta(ctx, tx, metaPassAt, toMS(now)) }); err != nil {
		return found, fmt.Errorf("find duplicates: %w", err)
	}
	return found, nil
}

// mergeSteps bounds the pages of the full-text index that one merge step writes (FTS5's
// 'merge' command): a step is a write of its own, some 50 ms, so the memory tools' writes go
// on between steps.
const mergeSteps = 256

// MergeIndex merges the full-text index's segments into one, a step at a time; the daily
// pass runs it after FindDuplicates. Every commit that changes memories adds a segment, and
// FTS5 merges them only as far as it must: a dozen segments, each of which every word of
// every query seeks. One segment instead of a dozen made an identifier's search take
// 0.5 ms instead of 1.3 ms at 100,000 memories, and a look-alike check about 2 ms instead
// of 3–4 ms.
func (s *Store) MergeIndex(ctx context.Context) error {
	for {
		var worked bool
		err := s.withTx(ctx, func(tx cachedTx) error {
			var before, after int64
			if err := tx.QueryRowContext(ctx, `SELECT total_changes()`).Scan(&before); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO memories_fts (memories_fts, rank) VALUES ('merge', ?)`, -mergeSteps); err != nil {
				return err
			}
			if err := tx.QueryRowContext(ctx, `SELECT total_changes()`).Scan(&after); err != nil {
				return err
			}
			worked = after-before >= 2 // FTS5's sign of a merge that did some work
			return nil
		})
		if err != nil {
			return fmt.Errorf("merge the memories' index: %w", err)
		}
		if !worked {
			return nil
		}
	}
}

// The keys of the meta table.
const (
	metaPassAt   = "pass_at"   // the last complete duplicate pass's start
	metaImportAt = "import_at" // the last import that added memories
)

// DuplicatePassDue says whether FindDuplicates should run: no pass has completed in this
// store, the last one started every or longer before now, or an import added memories since
// it started. It is kept in the store, so a restart of thatch does not redo a pass (seconds
// of every core at 100,000 memories) that ran an hour ago.
func (s *Store) DuplicatePassDue(ctx context.Context, now time.Time, every time.Duration) (bool, error) {
	var passAt, importAt int64
	err := s.r.QueryRowContext(ctx, `SELECT coalesce((SELECT value FROM meta WHERE key = ?), 0), coalesce((SELECT value FROM meta WHERE key = ?), 0)`,
		metaPassAt, metaImportAt).Scan(&passAt, &importAt)
	if err != nil {
		return false, fmt.Errorf("duplicate pass due: %w", err)
	}
	return passAt == 0 || toMS(now)-passAt >= every.Milliseconds() || importAt >= passAt, nil
}

func setMeta(ctx context.Context, tx cachedTx, key string, value int64) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	return err
}

// dupDoc is a live memory as the duplicate pass sees it.
type dupDoc struct {
	side
	words []string // contentWords of the text, sorted
}

// dupDocs reads the live memories of project.
func (s *Store) dupDocs(ctx context.Context, project string) ([]dupDoc, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, norm, updated_at FROM memories WHERE project = ? AND forgotten_at = 0`, project)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var docs []dupDoc
	for rows.Next() {
		var d dupDoc
		if err := rows.Scan(&d.id, &d.norm, &d.updated); err != nil {
			return nil, err
		}
		d.words = contentWords(d.norm)
		slices.Sort(d.words)
		docs = append(docs, d)
	}
	return docs, rows.Err()
}

// recordPairs records the pairs of project that are not open already with the same sides, in
// one transaction, and counts those recorded.
func (s *Store) recordPairs(ctx context.Context, project string, pairs []pair, now time.Time) (int, error) {
	if len(pairs) == 0 {
		return 0, nil
	}
	// The pairs recorded already are most of them from the second pass on: leaving them out
	// here spares the writer a statement each.
	type key struct{ a, b string }
	known := map[key][2]int64{}
	rows, err := s.r.QueryContext(ctx, `SELECT a, b, a_updated, b_updated FROM pairs WHERE project = ?`, project)
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		var k key
		var at [2]int64
		if err := rows.Scan(&k.a, &k.b, &at[0], &at[1]); err != nil {
			rows.Close()
			return 0, err
		}
		known[k] = at
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var fresh []pair
	for _, p := range pairs {
		if at, ok := known[key{p.a, p.b}]; !ok || at != [2]int64{p.aUpdated, p.bUpdated} {
			fresh = append(fresh, p)
		}
	}
	if len(fresh) == 0 {
		return 0, nil
	}
	n := 0
	err = s.withBulkTx(ctx, func(tx cachedTx) error {
		n = 0
		for _, p := range fresh {
			ok, err := recordPair(ctx, tx, p, now)
			if err != nil {
				return err
			}
			if ok {
				n++
			}
		}
		return nil
	})
	return n, err
}

// MinHash parameters: see FindDuplicates. Four rows a band keep unrelated texts apart (a pair
// of J = 0.2 shares a given band with probability 0.16%, one of 32 with 5%); 32 bands bring
// the miss at J = 2/3 under one in a thousand.
const (
	minhashRows  = 4
	minhashBands = 32
	minhashSize  = minhashRows * minhashBands
	// maxBucket bounds the comparisons of one bucket: a member is compared with the next
	// maxBucket members only. A bucket that large is a family of memories alike enough to be
	// reported through their neighbours; comparing all of them would cost n² again.
	maxBucket = 200
)

// minhash is one pass's family of hash functions: a seeded word hash, and minhashSize
// permutations of its values, x ↦ mul·x + add (mod 2⁶⁴, mul odd). A seed gives the same
// family every time, so a test can replay a pass.
type minhash struct {
	seed     uint64
	mul, add [minhashSize]uint64
}

func newMinhash(seed uint64) *minhash {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := &minhash{seed: rng.Uint64()}
	for i := range minhashSize {
		h.mul[i] = rng.Uint64() | 1
		h.add[i] = rng.Uint64()
	}
	return h
}

// bandKeys appends the keys of words' minhashSize values, one a band, to keys. words are
// sorted, so the occurrences of a word are one run.
func (h *minhash) bandKeys(words []string, keys []uint64) []uint64 {
	var mins [minhashSize]uint64
	for i := range mins {
		mins[i] = math.MaxUint64
	}
	occurrence := uint64(0)
	for i, w := range words {
		if i > 0 && w == words[i-1] {
			occurrence++
		} else {
			occurrence = 0
		}
		x := mix((fnv(w) ^ h.seed) + occurrence*0x9e3779b97f4a7c15)
		for j := range mins {
			if v := x*h.mul[j] + h.add[j]; v < mins[j] {
				mins[j] = v
			}
		}
	}
	for b := range minhashBands {
		k := uint64(b)
		for _, v := range mins[b*minhashRows : (b+1)*minhashRows] {
			k = mix(k ^ v)
		}
		keys = append(keys, k)
	}
	return keys
}

// fnv is the 64-bit FNV-1a hash of w.
func fnv(w string) uint64 {
	x := uint64(0xcbf29ce484222325)
	for i := 0; i < len(w); i++ {
		x ^= uint64(w[i])
		x *= 0x100000001b3
	}
	return x
}

// mix is splitmix64's finalizer: every bit of x moves every bit of the result.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// pairs is the pairs of docs (the live memories of project) whose Similarity reaches
// DuplicateThreshold among those that share a bucket. It is a pure function of its input and
// the hash family.
//
// A pair is compared in the first band whose bucket it shares. The pairs that share a
// bucket grow with the square of the project's memories (texts of common words share
// some bands at random): at 10,000 memories a project, a map of the pairs compared already
// and string comparisons of their words were most of a pass that took minutes. Each
// text's band keys are kept instead, so a pair met again in a later band is known by its
// keys, and the words are compared as numbers.
func (h *minhash) pairs(project string, docs []dupDoc) []pair {
	type entry struct {
		key  uint64
		doc  int32
		band int32
	}
	entries := make([]entry, 0, len(docs)*minhashBands)
	keys := make([]uint64, 0, len(docs)*minhashBands) // doc i's band keys: keys[i*minhashBands:][:minhashBands]
	ids := make([][]int32, len(docs))                 // doc i's words as numbers, sorted
	numbers := map[string]int32{}
	for i, d := range docs {
		start := len(keys)
		if len(d.words) == 0 {
			keys = append(keys, make([]uint64, minhashBands)...)
			continue
		}
		keys = h.bandKeys(d.words, keys)
		for b, k := range keys[start:] {
			entries = append(entries, entry{k, int32(i), int32(b)})
		}
		ws := make([]int32, len(d.words))
		for j, w := range d.words {
			n, ok := numbers[w]
			if !ok {
				n = int32(len(numbers))
				numbers[w] = n
			}
			ws[j] = n
		}
		slices.Sort(ws)
		ids[i] = ws
	}
	slices.SortFunc(entries, func(x, y entry) int {
		return cmp.Or(cmp.Compare(x.key, y.key), cmp.Compare(x.doc, y.doc), cmp.Compare(x.band, y.band))
	})
	// metBefore says whether docs i and j share a bucket of a band before band.
	metBefore := func(i, j, band int32) bool {
		ki, kj := keys[int(i)*minhashBands:][:band], keys[int(j)*minhashBands:][:band]
		for b := range ki {
			if ki[b] == kj[b] {
				return true
			}
		}
		return false
	}
	var out []pair
	for start := 0; start < len(entries); {
		end := start + 1
		for end < len(entries) && entries[end].key == entries[start].key {
			end++
		}
		bucket := entries[start:end]
		for x := range bucket {
			for y := x + 1; y < len(bucket) && y <= x+maxBucket; y++ {
				i, j := bucket[x].doc, bucket[y].doc
				// i == j: two bands of one text whose keys collide; a key of two bands
				// (one in 2⁶⁴) is no bucket of either.
				if i == j || bucket[x].band != bucket[y].band || metBefore(i, j, bucket[x].band) {
					continue
				}
				// At most min(a, b) words in common: lengths too far apart cannot reach it.
				if la, lb := len(ids[i]), len(ids[j]); 2*float64(min(la, lb)) < DuplicateThreshold*float64(la+lb) {
					continue
				}
				if score := numberDice(ids[i], ids[j]); score >= DuplicateThreshold {
					out = append(out, newPair(project, docs[i].side, docs[j].side, score))
				}
			}
		}
		start = end
	}
	return out
}

// numberDice is sortedDice of two sorted lists of word numbers.
func numberDice(a, b []int32) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	common := 0
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			common++
			i++
			j++
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return 2 * float64(common) / float64(len(a)+len(b))
}

// sortedDice is dice of two sorted word lists, without a map.
func sortedDice(a, b []string) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	common := 0
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch c := cmp.Compare(a[i], b[j]); {
		case c == 0:
			common++
			i++
			j++
		case c < 0:
			i++
		default:
			j++
		}
	}
	return 2 * float64(common) / float64(len(a)+len(b))
}
