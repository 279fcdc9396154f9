package memory

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// sectionHeader opens the memory section of a session-start reminder (protocol §6).
const sectionHeader = "Memories of this project:"

// sectionCandidates bounds the memories Section ranks: the most recently used or updated of
// the project, read from one index, so injection costs the same at a thousand memories as at
// ten thousand.
const sectionCandidates = 1000

// minLine is the size of the shortest possible line: a one-character fact.
var minLine = utf8.RuneCountInString(linePrefix("mem_00000000000000000000", "fact") + "x")

// kindWeight ranks kinds for injection: what to do and what to avoid first, plain facts last.
var kindWeight = map[string]float64{
	"decision": 3, "pitfall": 3, "preference": 2.5, "command": 2, "todo": 1.5, "fact": 1,
}

// oneLine puts a content on one line without changing its length, which the ranking query
// reads from the index.
var oneLine = strings.NewReplacer("\n", " ", "\r", " ")

// sectionQuery reads a project's candidates for the section from the memories_recent index
// alone (TestSectionQueryIsCovered), packed into one text of "id kind touched length"
// quadruples separated by spaces (ids and kinds hold none): the 1,000 rows, four columns
// each, cost more to step through and scan one by one than the index walk itself
// (1.6 → 0.9 ms in process at 1,000 memories a project).
const sectionQuery = `
	SELECT coalesce(group_concat(id || ' ' || kind || ' ' || touched || ' ' || size, ' '), '') FROM (
		SELECT id, kind, max(used_at, updated_at) AS touched, length(content) AS size FROM memories
		WHERE project = ? AND forgotten_at = 0 AND max(used_at, updated_at) > ? AND (branch = '' OR branch = ?)
		ORDER BY max(used_at, updated_at) DESC LIMIT ?)`

// Section is the memory section injected at a session's start (protocol §6): the header line,
// then one line "- [mem_…] (kind) content" per live memory of project, most useful first,
// the whole at most budget characters; a line that does not fit is skipped and shorter ones
// after it may still fit. It is "" when no memory fits. The memories shown count as used.
//
// Usefulness is weight(kind) × (1 + exp(−d/30)), d being the days since the memory was last
// used or updated: a memory touched today counts twice its kind, an untouched one fades to
// its kind's weight within a few months, so an old decision still outranks a fresh fact.
// Ties go to the newest.
//
// Stale memories (neither used nor updated for Options.StaleAfter) are left out: showing one
// would count as a use and make it fresh again without anybody having needed it. A search
// still finds them, and that use brings them back.
func (s *Store) Section(ctx context.Context, project string, budget int, now time.Time) (string, error) {
	return s.SectionOn(ctx, project, "", budget, now)
}

// SectionOn is Section for a session whose checkout is on branch ("" when unknown or
// detached): a memory scoped to a branch is shown only on that branch, so neither another
// branch's nor a deleted branch's memories reach it (the hygiene signals name those).
func (s *Store) SectionOn(ctx context.Context, project, branch string, budget int, now time.Time) (string, error) {
	// Everything the choice needs (id, kind, time, length) is in the memories_recent index;
	// only the contents of the memories chosen are read from the table.
	var packed string
	if err := s.r.QueryRowContext(ctx, sectionQuery, project, s.staleBefore(now), branch, sectionCandidates).Scan(&packed); err != nil {
		return "", fmt.Errorf("memory section: %w", err)
	}
	type candidate struct {
		id, kind string
		size     int // of its line, newline included
		score    float64
	}
	var cands []candidate
	for packed != "" {
		var f [4]string
		for i := range f {
			f[i], packed, _ = strings.Cut(packed, " ")
		}
		touched, err1 := strconv.ParseInt(f[2], 10, 64)
		size, err2 := strconv.Atoi(f[3])
		if f[1] == "" || err1 != nil || err2 != nil {
			return "", fmt.Errorf("memory section: a candidate of project %q is not \"id kind touched length\": %q (an id or kind with a space?)", project, strings.Join(f[:], " "))
		}
		c := candidate{id: f[0], kind: f[1], size: size + prefixSize + len(f[0]) + len(f[1])} // id and kind are ASCII
		days := max(now.Sub(toTime(touched)).Hours()/24, 0)
		c.score = kindWeight[c.kind] * (1 + math.Exp(-days/30))
		cands = append(cands, c)
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		if a.score != b.score {
			return cmp.Compare(b.score, a.score)
		}
		return strings.Compare(b.id, a.id) // ids sort by creation
	})
	left := budget - utf8.RuneCountInString(sectionHeader)
	var chosen []candidate
	var ids []string
	for _, c := range cands {
		if left < minLine {
			break
		}
		if c.size <= left {
			chosen = append(chosen, c)
			ids = append(ids, c.id)
			left -= c.size
		}
	}
	if len(chosen) == 0 {
		return "", nil
	}
	contents, err := s.contents(ctx, ids)
	if err != nil {
		return "", fmt.Errorf("memory section: %w", err)
	}
	var b strings.Builder
	b.WriteString(sectionHeader)
	var shown []string
	for _, c := range chosen {
		content, ok := contents[c.id]
		line := linePrefix(c.id, c.kind) + oneLine.Replace(content)
		// A memory forgotten meanwhile is left out, and so is a content whose length SQLite
		// counts differently (a NUL inside), which might not fit.
		if ok && utf8.RuneCountInString(line) <= c.size {
			b.WriteString(line)
			shown = append(shown, c.id)
		}
	}
	if len(shown) == 0 {
		return "", nil
	}
	s.markUsedLater(shown, now)
	return b.String(), nil
}

// linePrefix starts a memory's line in the section, newline included.
func linePrefix(id, kind string) string {
	return "\n- [" + id + "] (" + kind + ") "
}

// prefixSize is the size of a line prefix without its id and kind.
var prefixSize = utf8.RuneCountInString(linePrefix("", ""))

// contents is the content of the live memories ids, by id.
func (s *Store) contents(ctx context.Context, ids []string) (map[string]string, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, content FROM memories WHERE id IN (`+placeholders(len(ids))+`) AND forgotten_at = 0`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]string, len(ids))
	for rows.Next() {
		var id, content string
		if err := rows.Scan(&id, &content); err != nil {
			return nil, err
		}
		out[id] = content
	}
	return out, rows.Err()
}
