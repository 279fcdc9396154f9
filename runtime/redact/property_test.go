package redact_test

import (
	"encoding/json"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/thatch-dev/thatch/runtime/redact"
	"github.com/thatch-dev/thatch/runtime/redact/redacttest"
)

// TestPropertySecretAfterAnything: every rule's secret, after every kind of character
// (letters, digits, '_', '-', punctuation, each JSON escape, unicode), is removed from
// plain text, from JSON kept as text (a tool's output that is JSON), and from a JSON
// string inside a JSON document, whenever the rule promises it: a distinctive prefix
// after any character, the others at the start of a word, a JSON escape included.
func TestPropertySecretAfterAnything(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := redacttest.DrawSecret(t)
		b := redacttest.DrawBefore(t)
		after := redacttest.DrawAfter(t, s)
		if !redacttest.Promised(s, b) {
			t.Skip("not promised")
		}
		quote := redacttest.DrawQuote(t)
		// Plain text, the before as it stands (a JSON escape as its two characters).
		plain := "created" + b.Raw + s.Text + after
		checkGone(t, "plain text", plain, s)
		// JSON kept as text: the before is the logical character, written by a JSON
		// encoder (a line break as \n, é as é or \u00e9, '<' as \u003c).
		logical := "created" + redacttest.Unquote(b.Raw) + s.Text + redacttest.Unquote(after)
		doc := `{"log":` + quote(logical) + `,"n":1}`
		checkGone(t, "JSON as text", doc, s)
		checkGoneJSON(t, "JSON document", doc, s)
		// That document as a string inside another document (an argument, metadata).
		outer := `{"output":` + quote(doc) + `}`
		checkGone(t, "JSON string in JSON as text", outer, s)
		checkGoneJSON(t, "JSON string in JSON", outer, s)
	})
}

// TestEveryRuleAfterEveryCharacter is the whole product: every kind of secret after every
// character of redacttest, in plain text, JSON kept as text and a JSON string inside a
// JSON document, with what follows the secret, the secret's random body and the JSON
// encoder drawn. Ten products a run (about 8,000 placements in three containers each) keep
// it under a second; TestPropertySecretAfterAnything samples further.
func TestEveryRuleAfterEveryCharacter(t *testing.T) {
	checks, products := 0, 0
	rapid.Check(t, func(t *rapid.T) {
		if products == 10 {
			return
		}
		products++
		quote := redacttest.DrawQuote(t)
		for _, kind := range redacttest.Kinds {
			s := redacttest.SecretOf(t, kind)
			after := redacttest.DrawAfter(t, s)
			for _, b := range redacttest.Befores() {
				if !redacttest.Promised(s, b) {
					continue
				}
				checkGone(t, "plain text", "created"+b.Raw+s.Text+after, s)
				doc := `{"log":` + quote("created"+redacttest.Unquote(b.Raw)+s.Text+redacttest.Unquote(after)) + `}`
				checkGone(t, "JSON as text", doc, s)
				checkGoneJSON(t, "JSON string in JSON", `{"output":`+quote(doc)+`}`, s)
				checks++
			}
		}
	})
	if min := 10 * len(redacttest.Kinds) * 20; checks < min {
		t.Errorf("%d placements checked, want at least %d", checks, min)
	}
}

func checkGone(t *rapid.T, container, in string, s redacttest.Secret) {
	out, _ := redact.Text(in)
	if strings.Contains(out, s.Core) {
		t.Fatalf("%s: the %s secret survived\n in: %q\nout: %q", container, s.Rule, in, out)
	}
}

func checkGoneJSON(t *rapid.T, container, in string, s redacttest.Secret) {
	out, _ := redact.JSON([]byte(in))
	if !json.Valid(out) {
		t.Fatalf("%s: JSON made an invalid document\n in: %s\nout: %s", container, in, out)
	}
	if strings.Contains(string(out), s.Core) {
		t.Fatalf("%s: the %s secret survived\n in: %s\nout: %s", container, s.Rule, in, out)
	}
}

// TestPropertyFalsePositivesStay: what the README promises to leave alone (ordinary
// words, prose about secrets, hashes, UUIDs, base64 data, "sk-" in prose, identifiers that
// hold a prefix's letters) stays unredacted after any character and in every container.
func TestPropertyFalsePositivesStay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fp := rapid.SampledFrom(redacttest.FalsePositives).Draw(t, "text")
		b := redacttest.DrawBefore(t)
		// White space or the end after it: a quote or a '.' right after "Password: ****"
		// is part of the value, and no mask.
		after := rapid.SampledFrom([]string{"", " done", "\n", `\n`, `\t`}).Draw(t, "after")
		quote := redacttest.DrawQuote(t)
		for _, in := range []string{
			b.Raw + fp + after,
			`{"log":` + quote(redacttest.Unquote(b.Raw)+fp+redacttest.Unquote(after)) + `}`,
		} {
			if out, c := redact.Text(in); out != in {
				t.Fatalf("Text redacted %v\n in: %q\nout: %q", c, in, out)
			}
			if json.Valid([]byte(in)) {
				if out, c := redact.JSON([]byte(in)); string(out) != in {
					t.Fatalf("JSON redacted %v\n in: %s\nout: %s", c, in, out)
				}
			}
		}
	})
}
