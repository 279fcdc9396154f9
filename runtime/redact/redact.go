package redact

import (
	"cmp"
	"slices"
	"strings"
)

// Counts says how many redactions of each rule were made (rule name -> count). Text and
// JSON return nil when they redacted nothing.
type Counts map[string]int

// Total is the number of redactions of all rules.
func (c Counts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// Add adds o's counts to c. Like any map write, it panics when c is nil and o is not
// empty: start from make(Counts).
func (c Counts) Add(o Counts) {
	for k, v := range o {
		c[k] += v
	}
}

// add counts one rule into *c, making the map on first use so that a pass that redacts
// nothing allocates nothing.
func (c *Counts) add(rule string, n int) {
	if n == 0 {
		return
	}
	if *c == nil {
		*c = make(Counts)
	}
	(*c)[rule] += n
}

// markerPrefix starts every replacement; a value that starts with it is never redacted
// again, which is what makes Text idempotent.
const markerPrefix = "[REDACTED:"

// maxPasses bounds Text's passes. One pass reaches the fixed point already (the tests and
// FuzzText check the first pass alone), so a second pass runs only after a redaction and
// finds nothing. The later passes are a safety net against an interaction between rules
// that the fuzzer has not found yet, so that Text(Text(s)) == Text(s) holds anyway.
const maxPasses = 4

// Text returns s with <private>…</private> removed and secrets replaced by
// [REDACTED:<rule>], and what it redacted. See the package documentation for the rules.
func Text(s string) (string, Counts) {
	var counts Counts
	for range maxPasses {
		out, n := pass(s, &counts)
		s = out
		if n == 0 {
			break
		}
	}
	return s, counts
}

// pass runs every rule once over s and returns the result and the number of redactions.
func pass(s string, counts *Counts) (string, int) {
	s, n := stripPrivate(s)
	counts.add(rulePrivate, n)
	sc := scanner{s: s}
	for _, f := range finders {
		f(&sc)
	}
	if len(sc.spans) == 0 {
		return s, n
	}
	out, m := sc.apply(counts)
	return out, n + m
}

// span is one secret found by a rule: s[start:end] is replaced by the rule's marker.
type span struct {
	start, end int
	rule       ruleID
}

// scanner holds one pass over a text: the text, its ASCII-lower-cased twin (same byte
// offsets, made on first use) and the secrets found so far.
type scanner struct {
	s     string
	lower string
	spans []span
}

func (sc *scanner) add(start, end int, r ruleID) {
	if start < end {
		sc.spans = append(sc.spans, span{start, end, r})
	}
}

// low returns s lower-cased in ASCII only, so that an index into it is an index into s.
func (sc *scanner) low() string {
	if sc.lower == "" && sc.s != "" {
		sc.lower = lowerASCII(sc.s)
	}
	return sc.lower
}

// apply replaces the spans with markers. Overlapping spans merge into one replacement
// that covers them all (nothing of either secret remains) and is labelled with the most
// specific rule among them (the lowest ruleID).
func (sc *scanner) apply(counts *Counts) (string, int) {
	sp := sc.spans
	slices.SortFunc(sp, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.rule, b.rule))
	})
	var b strings.Builder
	b.Grow(len(sc.s))
	last, n := 0, 0
	for i := 0; i < len(sp); {
		cur := sp[i]
		for i++; i < len(sp) && sp[i].start < cur.end; i++ {
			cur.end = max(cur.end, sp[i].end)
			cur.rule = min(cur.rule, sp[i].rule)
		}
		name := ruleNames[cur.rule]
		b.WriteString(sc.s[last:cur.start])
		b.WriteString(markerPrefix)
		b.WriteString(name)
		b.WriteByte(']')
		last = cur.end
		counts.add(name, 1)
		n++
	}
	b.WriteString(sc.s[last:])
	return b.String(), n
}

func lowerASCII(s string) string {
	i := 0
	for i < len(s) && (s[i] < 'A' || s[i] > 'Z') {
		i++
	}
	if i == len(s) {
		return s
	}
	b := []byte(s)
	for ; i < len(b); i++ {
		if c := b[i]; 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
