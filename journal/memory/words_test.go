package memory

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// firstWords must be distinct(contentWords(text)) cut to n words.
func TestFirstWordsIsContentWordsCut(t *testing.T) {
	pieces := []string{"the", "The", "a", "Build", "build", "svc-12-04", "src/x/y.go", " ", "  ", "\n", ",", "é", "Éclair", "İstanbul", "K", "ω", "日本", "3.14", "\xff", "_", "of", "IS"}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		var text string
		for range rng.IntN(30) {
			text += pieces[rng.IntN(len(pieces))]
		}
		n := 1 + rng.IntN(8)
		if i%5 == 0 { // past the list a short set keeps (wordSet) into its map
			for range rng.IntN(400) {
				text += fmt.Sprintf(" w%d", rng.IntN(300))
			}
			n = 1 + rng.IntN(300)
		}
		want := distinct(contentWords(text))
		want = want[:min(len(want), n)]
		if got := firstWords(text, n); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("case %d: firstWords(%q, %d) = %q, want %q", i, text, n, got, want)
		}
	}
}

// tokens must split as FieldsFunc on non-word runes of the lower-cased text does.
func TestTokens(t *testing.T) {
	pieces := []string{"the", "The", "Build", "svc-12-04", "src/x/y.go", " ", "\t", "\n", ",", "-", "_", "é", "Éclair", "İstanbul", "K", "ω", "Σ",
		"日本", "٣", "e\u0301", "3.14", "\xff", "\xe6\x97", "\u00a0", "\U0001F600", "ǅ", "ẞ", "x"}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 20000 {
		var text string
		for range rng.IntN(30) {
			text += pieces[rng.IntN(len(pieces))]
		}
		want := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !isWordRune(r) })
		if got := tokens(text); !slices.Equal(got, want) {
			t.Fatalf("case %d: tokens(%q) = %q, want %q", i, text, got, want)
		}
	}
}

// tagWords must read a tags column's words as decoding it and tokenizing the tags joined
// does, for every column the store writes (json.Marshal of a list of strings).
func TestTagWordsAreTheDecodedTagsWords(t *testing.T) {
	pieces := []string{"go", "Build", "svc-12-04", "src/x/y.go", " ", ",", "[", "]", `"`, `\`, "<", ">", "&", "é", "日本", "\xff", "\u2028", "\t", "\n", "x"}
	rng := rand.New(rand.NewPCG(5, 6))
	fast := 0
	for i := range 20000 {
		tags := make([]string, rng.IntN(5))
		for j := range tags {
			for range rng.IntN(6) {
				tags[j] += pieces[rng.IntN(len(pieces))]
			}
		}
		col, err := json.Marshal(tags)
		if err != nil {
			t.Fatal(err)
		}
		want := tokens(strings.Join(decodeTags(string(col)), " "))
		if got := tagWords(string(col)); !slices.Equal(got, want) {
			t.Fatalf("case %d: tagWords(%s) = %q, want %q", i, col, got, want)
		}
		if !strings.Contains(string(col), `\`) {
			fast++
		}
	}
	if fast < 1000 {
		t.Fatalf("only %d of the columns took the way without decoding", fast)
	}
	for _, col := range []string{`null`, `[]`, `[""]`, `{"a":1}`, ``} {
		if got, want := tagWords(col), tokens(strings.Join(decodeTags(col), " ")); !slices.Equal(got, want) {
			t.Errorf("tagWords(%q) = %q, want %q", col, got, want)
		}
	}
}
