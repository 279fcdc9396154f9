package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// DuplicateThreshold is the Similarity at or above which two memories are duplicates: two
// texts of ten words that differ by one word score 0.9, by two words 0.8.
const DuplicateThreshold = 0.8

// SimilarFloor is the least Similarity of a memory listed as similar to one remembered.
const SimilarFloor = 0.5

const (
	maxQueryWords   = 32 // words of a query, so a pasted page stays one cheap FTS5 query
	similarWords    = 8  // rarest words of a remembered content that find its look-alikes
	similarScan     = 30 // candidates scored by Similarity
	relatedWords    = 16 // rarest words of a payload that find related memories
	maxRelatedTerms = 2000
	maxPostings     = 20000 // documents of the rarest words, in all, that one look-alike query walks
	queryPostings   = 5000  // likewise for a search's words beyond its rarest
)

// Hit is a memory found by Search, with its score (higher is better).
type Hit struct {
	Memory Memory  `json:"memory"`
	Score  float64 `json:"score"`
}

// SearchResult is memory_search's answer.
type SearchResult struct {
	Hits []Hit `json:"hits"`
}

var errNoWords = fmt.Errorf("%w: query has no words; search with words the memory would contain", ErrBadRequest)

// stopwords are dropped from queries and from Similarity: they match nearly everything.
var stopwords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an and are as at be been but by can do does for from had has have how i if in
		into is it its not no of on or so than that the their then there these they this to was
		we were what when where which who why will with you your`) {
		stopwords[w] = true
	}
}

// Search is the live memories of c.Project (every project when "") that match query's words,
// best first, counted as used. query is plain text, never FTS5 syntax. limit is 1 to 50
// (0 = 10); kinds, when given, restrict the kinds.
//
// It answers from the read pool alone: the hits' used marks, and the answer a repeated
// callID repeats, are queued for the writer (used.go).
//
// The score of a hit is relevance × (1 + 0.25·exp(−d_used/30) + 0.15·exp(−d_updated/30)),
// relevance being its BM25 score (see rank) and d the days since the memory was
// last used (never used: no bonus) or updated. The bonus is at most 40%: among close matches
// the ones that served or changed lately come first, but age never buries a clearly better one.
func (s *Store) Search(ctx context.Context, c Caller, query string, kinds []string, limit int, now time.Time) (SearchResult, error) {
	limit, err := checkLimit(limit, 10, 50)
	if err != nil {
		return SearchResult{}, err
	}
	for _, k := range kinds {
		if !slices.Contains(Kinds, k) {
			return SearchResult{}, fmt.Errorf("%w: kind %q is unknown; use one of %s", ErrBadRequest, k, strings.Join(Kinds, ", "))
		}
	}
	terms := queryTerms(query)
	if len(terms) == 0 {
		return SearchResult{}, errNoWords
	}
	if c.CallID != "" {
		if out, ok, err := s.searchedBefore(ctx, c); ok || err != nil {
			return out, err
		}
	}
	terms, counts, err := s.telling(ctx, terms)
	if err != nil {
		return SearchResult{}, fmt.Errorf("search memories: %w", err)
	}
	// The best 4×limit by relevance, re-ranked with the recency bonus; only the hits
	// answered are read whole.
	best, err := s.scoreMatches(ctx, one(c.Project), terms, kinds, 4*limit, true, counts, rankCandidates)
	if err != nil {
		return SearchResult{}, fmt.Errorf("search memories: %w", err)
	}
	for i, m := range best {
		var used *time.Time
		if m.usedAt != 0 {
			t := toTime(m.usedAt)
			used = &t
		}
		updated := toTime(m.updatedAt)
		best[i].score = m.score * (1 + 0.25*recency(used, now) + 0.15*recency(&updated, now))
	}
	sort.SliceStable(best, func(i, j int) bool { return best[i].score > best[j].score })
	hits, err := s.readHits(ctx, best, limit)
	if err != nil {
		return SearchResult{}, fmt.Errorf("search memories: %w", err)
	}
	ids := make([]string, len(hits))
	used := toTime(toMS(now))
	for i := range hits {
		ids[i] = hits[i].Memory.ID
		if hits[i].Memory.UsedAt == nil || hits[i].Memory.UsedAt.Before(used) {
			hits[i].Memory.UsedAt = &used
		}
	}
	s.markUsedLater(ids, now)
	out := SearchResult{Hits: hits}
	if c.CallID != "" && !s.readOnly { // a read-only store keeps nothing, as it marks nothing
		data, err := json.Marshal(out)
		if err != nil {
			return SearchResult{}, fmt.Errorf("search memories: %w", err)
		}
		if first, repeat := s.marks.keepLater(c, queuedAnswer{tool: toolSearch, result: data, at: toMS(now)}); repeat {
			return decodeAnswer(c, first)
		}
		s.marks.signal()
	}
	return out, nil
}

// searchedBefore answers the first answer of c's call when c repeats a search: queued for
// the writer, or kept in the calls table. A callID used for another tool is a bad request.
func (s *Store) searchedBefore(ctx context.Context, c Caller) (SearchResult, bool, error) {
	if a, ok := s.marks.queued(c); ok {
		out, err := decodeAnswer(c, a)
		return out, true, err
	}
	var out SearchResult
	ok, err := repeated(ctx, s.r, c, toolSearch, &out)
	if err != nil {
		return SearchResult{}, true, wrap("search memories", err)
	}
	return out, ok, nil
}

// decodeAnswer is a queued answer of c's call as a search's.
func decodeAnswer(c Caller, a queuedAnswer) (SearchResult, error) {
	if a.tool != toolSearch {
		return SearchResult{}, usedFor(c, a.tool)
	}
	var out SearchResult
	if err := json.Unmarshal(a.result, &out); err != nil {
		return SearchResult{}, fmt.Errorf("search memories: %w", err)
	}
	return out, nil
}

// recency is exp(−days since t / 30), 0 for never.
func recency(t *time.Time, now time.Time) float64 {
	if t == nil {
		return 0
	}
	days := max(now.Sub(*t).Hours()/24, 0)
	return math.Exp(-days / 30)
}

// Related is the live memories of project (every project when "") most like text, an
// arbitrary text such as an extraction payload: the best bm25 matches of its rarest words.
// They are not counted as used. limit is 1 to 50 (0 = 10).
func (s *Store) Related(ctx context.Context, project, text string, limit int) ([]Memory, error) {
	limit, err := checkLimit(limit, 10, 50)
	if err != nil {
		return nil, err
	}
	key := relatedKey{project: project, limit: limit, text: maphash.String(relatedSeed, text)}
	now := time.Now()
	young := func(a keptAnswer[[]Memory]) bool { return now.Sub(a.at) <= relatedMemoAge }
	if out, ok := s.related.get(key, s.writes.Load(), now, young); ok {
		return slices.Clone(out), nil
	}
	writes := s.writes.Load() // before the read: a write committed meanwhile makes the answer old at once
	rare, err := s.rarest(ctx, firstWords(text, maxRelatedTerms), relatedWords)
	if err != nil {
		return nil, fmt.Errorf("related memories: %w", err)
	}
	out := []Memory{}
	if len(rare) > 0 {
		hits, err := s.rank(ctx, one(project), rare, nil, limit, false, nil)
		if err != nil {
			return nil, fmt.Errorf("related memories: %w", err)
		}
		for _, h := range hits {
			out = append(out, h.Memory)
		}
	}
	s.related.put(key, writes, now, out)
	return slices.Clone(out), nil
}

// relatedMemo keeps the last Related answers. A payload asked for again (a retry, a model
// that lost its context) carries the same related memories, and looking them up was two
// fifths of a payload call's CPU (docs/performance.md). An answer is good while the store
// has committed no write since, for at most relatedMemoAge.
type relatedMemo = readMemo[relatedKey, []Memory]

type relatedKey struct {
	project string
	limit   int
	text    uint64 // the text's hash
}

// relatedSeed hashes Related's texts; relatedMemoAge is how long an answer is kept.
var relatedSeed = maphash.MakeSeed()

const relatedMemoAge = time.Minute

// similar is the live memories of project whose Similarity to content reaches SimilarFloor,
// best first, at most similarScan: Remember answers with the best five other than the memory
// itself, and every one at or above DuplicateThreshold makes a duplicate pair. It scores the
// best bm25 matches of content's rarest words: a look-alike shares most words, so it shares
// rare ones.
func (s *Store) similar(ctx context.Context, project, content string) ([]Similar, error) {
	words := contentWords(content)
	rare, err := s.rarest(ctx, distinct(words), similarWords)
	if err != nil || len(rare) == 0 {
		return nil, err
	}
	best, err := s.scoreMatches(ctx, one(project), rare, nil, similarScan, false, nil, similarCandidates)
	if err != nil {
		return nil, err
	}
	var out []Similar
	for _, m := range best {
		if score := dice(words, withoutStopwords(m.words)); score >= SimilarFloor {
			out = append(out, Similar{ID: m.id, Score: score})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Score > out[j].Score })
	return out, nil
}

// rarest is at most n of words that live memories hold, fewest documents first, as many as
// fit in maxPostings documents in all (the rarest one always). bm25 walks the whole document
// list of every word it ranks by, so the budget bounds the query's cost; words that common
// say little about which memory a text looks like anyway.
func (s *Store) rarest(ctx context.Context, words []string, n int) ([]string, error) {
	out := []string{}
	if len(words) == 0 {
		return out, nil
	}
	list, _ := json.Marshal(words)
	rows, err := s.r.QueryContext(ctx, `SELECT word, docs FROM words WHERE word IN (SELECT value FROM json_each(?)) AND docs > 0
		ORDER BY docs, word LIMIT ?`, string(list), n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	postings := 0
	for rows.Next() {
		var w string
		var docs int
		if err := rows.Scan(&w, &docs); err != nil {
			return nil, err
		}
		if postings += docs; postings > maxPostings && len(out) > 0 {
			break
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// countWords adds delta to the document frequency of the words of content.
func countWords(ctx context.Context, tx cachedTx, content string, delta int) error {
	counts := map[string]int{}
	addWords(counts, content, delta)
	return writeWords(ctx, tx, counts)
}

// addWords adds delta to counts of the distinct words of content.
func addWords(counts map[string]int, content string, delta int) {
	for _, w := range distinct(contentWords(content)) {
		if !stopwords[w] {
			counts[w] += delta
		}
	}
}

// writeWords adds counts to the words table's document frequencies.
func writeWords(ctx context.Context, tx cachedTx, counts map[string]int) error {
	if len(counts) == 0 {
		return nil
	}
	list, _ := json.Marshal(counts)
	_, err := tx.ExecContext(ctx, `INSERT INTO words (word, docs) SELECT key, value FROM json_each(?) WHERE true
		ON CONFLICT (word) DO UPDATE SET docs = docs + excluded.docs`, string(list))
	return err
}

// rankCandidates bounds the matches rank scores: the newest ones when more match (a word
// so common that more match says little about which memory is meant). Reading and
// tokenizing each candidate is most of a search's cost: 300 made a search's p99 over
// 10 ms and a look-alike check's over 20 ms at 100,000 memories (docs/performance.md).
const rankCandidates = 100

// similarCandidates is rankCandidates for the look-alike check of a write, which scores
// similarScan of them: a look-alike shares most rare words, so it stands among the first
// matches of the rarest, and the daily pass (FindDuplicates) pairs what a write misses.
// Reading the candidates' rows is most of a remember's work at 1,000,000 memories, where
// every commit empties the read connections' page caches: 100 made a remember cost 6–8 ms
// of CPU, 50 4.3–4.5 ms (docs/performance.md).
const similarCandidates = 50

// rank is the live memories of projects (none = every project) matching any of terms, best
// first, at most n; a Hit's Score is its BM25 relevance (see scoreMatches). Only the n
// best are read whole.
func (s *Store) rank(ctx context.Context, projects, terms, kinds []string, n int, whole bool, counts *wordCounts) ([]Hit, error) {
	best, err := s.scoreMatches(ctx, projects, terms, kinds, n, whole, counts, rankCandidates)
	if err != nil {
		return nil, err
	}
	return s.readHits(ctx, best, n)
}

// readHits reads whole the first n of best that are still live, in best's order, with
// their scores. A memory forgotten since it was scored makes room for the next.
func (s *Store) readHits(ctx context.Context, best []matched, n int) ([]Hit, error) {
	hits := make([]Hit, 0, min(n, len(best)))
	for len(best) > 0 && len(hits) < n {
		next := best[:min(n-len(hits), len(best))]
		best = best[len(next):]
		seqs := make([]int64, len(next))
		for i, m := range next {
			seqs[i] = m.seq
		}
		list, _ := json.Marshal(seqs)
		rows, err := s.r.QueryContext(ctx, `SELECT `+memoryCols+`, m.seq FROM memories m WHERE m.seq IN (SELECT value FROM json_each(?)) AND m.forgotten_at = 0`, string(list))
		if err != nil {
			return nil, err
		}
		read := make(map[int64]Memory, len(next))
		for rows.Next() {
			var seq int64
			m, err := scanMemory(rows, &seq)
			if err != nil {
				rows.Close()
				return nil, err
			}
			read[seq] = m
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for _, b := range next {
			if m, ok := read[b.seq]; ok {
				hits = append(hits, Hit{Memory: m, Score: b.score})
			}
		}
	}
	return hits, nil
}

// matched is a memory matching a ranked search: its row, its words as the index sees them,
// and its BM25 relevance.
type matched struct {
	seq       int64
	id        string
	usedAt    int64 // ms, 0 for never
	updatedAt int64 // ms
	content   string
	words     []string // tokens(content)
	tags      []string // tokens of its tags
	score     float64
}

// scoreMatches is the live memories of projects (none = every project) matching any of
// terms, best first, at most n, of at most candidates read. FTS5 finds the memories holding every term when whole (a
// query's words; not a look-alike's rare words, which a look-alike need not all share),
// then each term's matches in turn, rarest first (within the project's scope), the newest
// first, until candidates are found: the memories matching the whole query and a rare
// term's matches are always among them, and a very common term only fills up. The score is
// computed here, because FTS5's bm25() counts each term's documents by walking the term's
// whole document list, every project's, at every query: 4–5 ms a search at 100,000
// memories. The words table already holds those counts. Content weighs twice the tags, as
// in the index's rank setting. Only what scoring and a search's recency bonus need is read
// of each candidate (seq, id, its times, content, tags); reading all 14 columns of 100 rows
// was a fifth of a look-alike check.
func (s *Store) scoreMatches(ctx context.Context, projects, terms, kinds []string, n int, whole bool, counts *wordCounts, candidates int) ([]matched, error) {
	if counts == nil {
		c, err := s.frequencies(ctx, terms)
		if err != nil {
			return nil, err
		}
		counts = &c
	}
	docs, total := counts.docs, counts.total
	terms = slices.Clone(terms)
	slices.SortStableFunc(terms, func(a, b string) int { return termDocs(docs, a) - termDocs(docs, b) })
	seen := map[int64]bool{}
	var seqs []int64
	// The memories holding every term first (the best matches, whatever their age), then
	// each term's.
	var matches []string
	if whole && len(terms) > 1 {
		matches = append(matches, matchAll(projects, terms))
	}
	for _, t := range terms {
		matches = append(matches, match(projects, []string{t}))
	}
	for _, m := range matches {
		if len(seqs) >= candidates {
			break
		}
		rows, err := s.r.QueryContext(ctx, `SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rowid DESC LIMIT ?`,
			m, candidates)
		if err != nil {
			return nil, err
		}
		for rows.Next() && len(seqs) < candidates {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				rows.Close()
				return nil, err
			}
			if !seen[seq] {
				seen[seq] = true
				seqs = append(seqs, seq)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	if len(seqs) == 0 {
		return nil, nil
	}
	list, _ := json.Marshal(seqs)
	query := `SELECT m.seq, m.id, m.used_at, m.updated_at, m.content, m.tags FROM memories m WHERE m.seq IN (SELECT value FROM json_each(?)) AND m.forgotten_at = 0`
	args := []any{string(list)}
	if len(kinds) > 0 {
		query += ` AND m.kind IN (` + placeholders(len(kinds)) + `)`
		for _, k := range kinds {
			args = append(args, k)
		}
	}
	rows, err := s.r.QueryContext(ctx, query+` ORDER BY m.seq DESC`, args...)
	if err != nil {
		return nil, err
	}
	var found []matched
	for rows.Next() {
		var m matched
		var tagList string
		if err := rows.Scan(&m.seq, &m.id, &m.usedAt, &m.updatedAt, &m.content, &tagList); err != nil {
			rows.Close()
			return nil, err
		}
		m.words, m.tags = tokens(m.content), tagWords(tagList)
		found = append(found, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, nil
	}
	phrases := make([][]string, len(terms))
	for i, t := range terms {
		phrases[i] = tokens(t)
	}
	avg := 0.0
	for _, m := range found {
		avg += float64(len(m.words))
	}
	avg /= float64(len(found))
	idf := make([]float64, len(phrases))
	for i, ph := range phrases {
		df := len(found) // a phrase of words the table does not hold (tags, stopwords): as common as the matches
		for _, w := range ph {
			if d, ok := docs[w]; ok && d < df {
				df = d
			}
		}
		idf[i] = math.Log(1 + (float64(max(total, df))-float64(df)+0.5)/(float64(df)+0.5))
	}
	const k1, b = 1.2, 0.75
	for i := range found {
		dl := float64(len(found[i].words))
		score := 0.0
		for j, ph := range phrases {
			tf := 2*float64(occurrences(found[i].words, ph)) + float64(occurrences(found[i].tags, ph))
			if tf > 0 {
				score += idf[j] * tf * (k1 + 1) / (tf + k1*(1-b+b*dl/max(avg, 1)))
			}
		}
		found[i].score = score
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].score > found[j].score }) // ties: newest first, as read
	return found[:min(len(found), n)], nil
}

// telling is the terms of a query that tell memories apart: the rarest first, as many as fit
// in queryPostings documents in all (the rarest always). A word that half the store holds
// ranks nothing when a rarer one is asked for too, and matching it would cost a walk over
// its every document.
func (s *Store) telling(ctx context.Context, terms []string) ([]string, *wordCounts, error) {
	if len(terms) < 2 {
		return terms, nil, nil
	}
	counts, err := s.frequencies(ctx, terms)
	if err != nil {
		return nil, nil, err
	}
	df := func(t string) int { return termDocs(counts.docs, t) }
	sorted := slices.Clone(terms)
	slices.SortStableFunc(sorted, func(a, b string) int { return df(a) - df(b) })
	postings := 0
	for i, t := range sorted {
		if postings += df(t); postings > queryPostings && i > 0 {
			return sorted[:i], &counts, nil
		}
	}
	return sorted, &counts, nil
}

// termDocs is how many live memories hold term: a phrase is as rare as its rarest word, a
// word the table does not know is rarest of all.
func termDocs(docs map[string]int, term string) int {
	n := -1
	for _, w := range tokens(term) {
		if d := docs[w]; n < 0 || d < n {
			n = d
		}
	}
	return max(n, 0)
}

// wordCounts is what frequencies read: the number of live memories holding each word the
// words table knows, and the number of memories ever written, which stands for the
// store's size. Search reads it once, for telling and for scoring: the terms telling
// keeps are some of those it counted.
type wordCounts struct {
	docs  map[string]int
	total int
}

// frequencies reads the wordCounts of the words of terms.
func (s *Store) frequencies(ctx context.Context, terms []string) (wordCounts, error) {
	var words []string
	for _, t := range terms {
		words = append(words, tokens(t)...)
	}
	list, _ := json.Marshal(distinct(words))
	rows, err := s.r.QueryContext(ctx, `SELECT word, docs FROM words WHERE word IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return wordCounts{}, err
	}
	defer rows.Close()
	c := wordCounts{docs: map[string]int{}}
	for rows.Next() {
		var w string
		var d int
		if err := rows.Scan(&w, &d); err != nil {
			return wordCounts{}, err
		}
		c.docs[w] = d
	}
	if err := rows.Err(); err != nil {
		return wordCounts{}, err
	}
	err = s.r.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM memories`).Scan(&c.total)
	return c, err
}

// tokens is text's words as FTS5's unicode61 tokenizer sees them, lower-cased, stopwords kept
// (a phrase may hold one).
// It is strings.FieldsFunc(strings.ToLower(text), not isWordRune) (TestTokens), with ASCII
// looked up in a table instead of decoded and classified rune by rune: tokenizing the
// candidates was a fifth of a look-alike check.
func tokens(text string) []string {
	out := make([]string, 0, len(text)/8+1)
	for i := 0; ; {
		start, end := nextWord(text, i)
		if start < 0 {
			return out
		}
		out = append(out, strings.ToLower(text[start:end])) // no copy when it is lower-case ASCII
		i = end
	}
}

// tagWords is tokens of a memory's tags joined, from its tags column (a JSON list of
// strings, written by json.Marshal). A column without a backslash holds each tag's text
// as it is, between quotes, commas and brackets that are no word's: its words are the
// column's own, read without decoding it (decoding a hundred candidates' tags was a
// twelfth of a search's CPU at 1,000,000 memories). An escape takes the long way.
func tagWords(col string) []string {
	if strings.HasPrefix(col, "[") && !strings.Contains(col, `\`) {
		return tokens(col)
	}
	return tokens(strings.Join(decodeTags(col), " "))
}

// nextWord is the bounds of the first word of text at or after i, as FTS5's unicode61
// tokenizer sees words (the letters and numbers of the lower-cased text); start is -1 when
// there is none. Lower-casing maps rune by rune, so a word lower-cased on its own is the
// word of the lower-cased text, and a text with one non-ASCII character (a cut marker's
// "…") is not mapped in full.
func nextWord(text string, i int) (start, end int) {
	start = -1
	for i < len(text) {
		word, size := asciiWord[text[i]], 1
		if text[i] >= utf8.RuneSelf {
			var r rune
			r, size = utf8.DecodeRuneInString(text[i:])
			word = isWordRune(unicode.ToLower(r))
		}
		if word && start < 0 {
			start = i
		} else if !word && start >= 0 {
			return start, i
		}
		i += size
	}
	return start, len(text)
}

// asciiWord is isWordRune of each ASCII character.
var asciiWord = func() (t [256]bool) {
	for c := range utf8.RuneSelf {
		t[c] = isWordRune(rune(c))
	}
	return t
}()

// occurrences counts the places where phrase stands in words.
func occurrences(words, phrase []string) int {
	if len(phrase) == 0 {
		return 0
	}
	n := 0
	for i := 0; i+len(phrase) <= len(words); i++ {
		if slices.Equal(words[i:i+len(phrase)], phrase) {
			n++
		}
	}
	return n
}

// match is the FTS5 query for any of terms, within the scopes of projects when there are any
// (their scoped words, migration 6), else in every project's content and tags. Every term is
// quoted, so nothing a caller writes is FTS5 syntax.
func match(projects, terms []string) string { return matchJoined(projects, terms, " OR ") }

// matchAll is match of the memories holding every one of terms.
func matchAll(projects, terms []string) string { return matchJoined(projects, terms, " AND ") }

func matchJoined(projects, terms []string, op string) string {
	if len(projects) == 0 {
		quoted := make([]string, len(terms))
		for i, t := range terms {
			quoted[i] = `"` + strings.ReplaceAll(t, `"`, `""`) + `"`
		}
		return "{content tags} : (" + strings.Join(quoted, op) + ")"
	}
	var scoped []string
	for _, p := range projects {
		var phrases []string
		for _, t := range terms {
			if ph := scopedPhrase(scope(p), t); ph != "" {
				phrases = append(phrases, ph)
			}
		}
		if len(phrases) > 0 {
			scoped = append(scoped, "scoped : ("+strings.Join(phrases, op)+")")
		}
	}
	if len(scoped) == 0 {
		return `scoped : ""` // no word: matches nothing
	}
	return strings.Join(scoped, " OR ")
}

// queryTerms is the words of a query, at most maxQueryWords, stopwords dropped unless all are.
// A word is a whitespace-separated run stripped of leading and trailing characters that are
// not letters or digits; what is left of an identifier (api-gw-02, src/config/loader.go,
// col:val) stays one word, which becomes one FTS5 phrase.
func queryTerms(query string) []string {
	var terms, all []string
	seen := map[string]bool{}
	for _, f := range strings.Fields(query) {
		w := strings.TrimFunc(f, func(r rune) bool { return !isWordRune(r) })
		lower := strings.ToLower(w)
		if w == "" || seen[lower] {
			continue
		}
		seen[lower] = true
		all = append(all, w)
		if !stopwords[lower] {
			terms = append(terms, w)
		}
	}
	if len(terms) == 0 {
		terms = all
	}
	return terms[:min(len(terms), maxQueryWords)]
}

// Similarity is how alike two texts are, from 0 to 1: the Dice coefficient of their multisets
// of words (lower-cased, split on anything but letters and digits, stopwords dropped), so two
// texts of ten words that differ by one word score 0.9.
func Similarity(a, b string) float64 {
	return dice(contentWords(a), contentWords(b))
}

func dice(a, b []string) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	count := make(map[string]int, len(a))
	for _, w := range a {
		count[w]++
	}
	common := 0
	for _, w := range b {
		if count[w] > 0 {
			count[w]--
			common++
		}
	}
	return 2 * float64(common) / float64(len(a)+len(b))
}

// contentWords is text's words, lower-cased, split on anything but letters and digits, with
// stopwords dropped unless every word is one.
func contentWords(text string) []string { return withoutStopwords(tokens(text)) }

// withoutStopwords is all but its stopwords, or all when every word is one.
func withoutStopwords(all []string) []string {
	words := make([]string, 0, len(all))
	for _, w := range all {
		if !stopwords[w] {
			words = append(words, w)
		}
	}
	if len(words) == 0 {
		return all
	}
	return words
}

// firstWords is distinct(contentWords(text)) cut to n words, without splitting and
// deduplicating more of text than it takes: a payload runs to tens of kilobytes, and
// splitting all of it was half of what looking up its related memories cost.
func firstWords(text string, n int) []string {
	var seen wordSet
	var words, stops []string // distinct words in order; stopwords, for a text of nothing else
	for i := 0; i < len(text) && len(words) < n; {
		start, end := nextWord(text, i)
		if start < 0 {
			break
		}
		i = end
		w := strings.ToLower(text[start:end]) // no copy when it is lower-case ASCII
		if !seen.add(w) {
			continue
		}
		if stopwords[w] {
			if len(stops) < n {
				stops = append(stops, w)
			}
			continue
		}
		words = append(words, w)
	}
	if len(words) == 0 {
		return stops
	}
	return words
}

// wordSet is a set of words: a list searched in order while it is short, a map once it is
// not. A payload's few dozen distinct words fit in the list, which takes a sixth of the
// memory a map of them did.
type wordSet struct {
	list []string
	m    map[string]bool
}

// add adds w and reports whether it was not in the set.
func (s *wordSet) add(w string) bool {
	if s.m != nil {
		if s.m[w] {
			return false
		}
		s.m[w] = true
		return true
	}
	if slices.Contains(s.list, w) {
		return false
	}
	if s.list == nil {
		s.list = make([]string, 0, wordSetList)
	}
	s.list = append(s.list, w)
	if len(s.list) == wordSetList {
		s.m = make(map[string]bool, 2*wordSetList)
		for _, x := range s.list {
			s.m[x] = true
		}
		s.list = nil
	}
	return true
}

const wordSetList = 64

// isWordRune is what FTS5's unicode61 tokenizer keeps in a token: letters and numbers.
func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }

func distinct(words []string) []string {
	seen := make(map[string]bool, len(words))
	out := make([]string, 0, len(words))
	for _, w := range words {
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}
