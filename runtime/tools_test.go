package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestWriteEntry: an entry renders as its definition, written with fmt, says, and
// EntrySize counts the characters of that rendering, on any text, valid UTF-8 or not.
func TestWriteEntry(t *testing.T) {
	byDefinition := func(n int, e PayloadEntry) string {
		var b strings.Builder
		fmt.Fprintf(&b, "\n## %d. %s (%s)\n", n, e.Body.Tool, e.ID)
		if e.Body.Title != "" {
			fmt.Fprintf(&b, "title: %s\n", cut(e.Body.Title, PayloadArgsMax))
		}
		if args := bytes.TrimSpace(e.Body.Args); len(args) > 0 && string(args) != "{}" && string(args) != "null" {
			fmt.Fprintf(&b, "args: %s\n", cut(string(args), PayloadArgsMax))
		}
		fmt.Fprintf(&b, "output:\n%s\n", cutMiddle(e.Body.Output, PayloadOutputMax))
		return b.String()
	}
	pieces := []string{"a", "é", "€", "😀", "\xe2\x82", "\xff", "\n", " ", "{}", "null", "z"}
	rng := rand.New(rand.NewPCG(7, 8))
	text := func(max int) string {
		var b strings.Builder
		for range rng.IntN(max) {
			b.WriteString(strings.Repeat(pieces[rng.IntN(len(pieces))], 1+rng.IntN(40)))
		}
		return b.String()
	}
	for i := range 5000 {
		e := PayloadEntry{ID: text(3), Body: Body{Tool: text(3), Title: text(8), Args: json.RawMessage(text(8)), Output: text(60)}}
		n := rng.IntN(200)
		var b strings.Builder
		writeEntry(&b, n, e)
		if want := byDefinition(n, e); b.String() != want {
			t.Fatalf("case %d: writeEntry(%d, %+v) = %q, want %q", i, n, e, b.String(), want)
		}
		if got, want := EntrySize(e.ID, &e.Body), utf8.RuneCountInString(byDefinition(1, e)); got != want {
			t.Fatalf("case %d: EntrySize = %d, want %d", i, got, want)
		}
	}
}

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven char", 10, "eleven cha…"},
		{"héllo wörld", 5, "héllo…"}, // characters, not bytes
		{"", 3, ""},
	} {
		if got := cut(tc.in, tc.n); got != tc.want {
			t.Errorf("cut(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestCutArgs(t *testing.T) {
	long, mid := strings.Repeat("a", 50), strings.Repeat("a", 20)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"top-level string cut", `{"p":"` + long + `"}`, `{"p":"` + strings.Repeat("a", 10) + `…"}`},
		{"nested values untouched while the whole is within 8n", `{"o":{"k":"` + mid + `"},"l":["` + mid + `"]}`, `{"o":{"k":"` + mid + `"},"l":["` + mid + `"]}`},
		{"nested values cut past 8n", `{"o":{"k":"` + long + `"},"l":["` + long + `"]}`, `{"l":["` + strings.Repeat("a", 10) + `…"],"o":{"k":"` + strings.Repeat("a", 10) + `…"}}`},
		{"numbers untouched", `{"n":12345678901234567890}`, `{"n":12345678901234567890}`},
		{"not an object stays", `"` + long + `"`, `"` + long + `"`},
		{"empty", ``, ``},
	} {
		got := string(cutArgs(json.RawMessage(tc.in), 10))
		if got != tc.want {
			t.Errorf("%s: cutArgs = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestGreenlit(t *testing.T) {
	msg := func(role, text string) Message {
		m := Message{Parts: []Part{{Type: "text", Text: text}}}
		m.Info.Role = role
		return m
	}
	const tok = "THATCH_EXIT_READY"
	for _, tc := range []struct {
		name string
		msgs []Message
		want bool
	}{
		{"token on its own last line", []Message{msg("assistant", "done.\n\nTHATCH_EXIT_READY")}, true},
		{"trailing blank lines and spaces", []Message{msg("assistant", "ok\n  THATCH_EXIT_READY  \n\n")}, true},
		{"token not last", []Message{msg("assistant", "THATCH_EXIT_READY\nbut one more thing")}, false},
		{"token inside a line", []Message{msg("assistant", "say THATCH_EXIT_READY when")}, false},
		{"last assistant message counts, not an earlier one", []Message{msg("assistant", tok), msg("user", "wait"), msg("assistant", "blocked")}, false},
		{"a user message after the reply is skipped", []Message{msg("assistant", tok), msg("user", "thanks")}, true},
		{"the other command's token", []Message{msg("assistant", "THATCH_COMPACT_READY")}, false},
		{"no messages", nil, false},
	} {
		if got := Greenlit(tc.msgs, tok); got != tc.want {
			t.Errorf("%s: Greenlit = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestMetadataIsBounded: opencode copies a tool's whole output into its metadata; the
// journal keeps its strings cut like the output, and drops a metadata still too large.
func TestMetadataIsBounded(t *testing.T) {
	big := strings.Repeat("x", 30000)
	got := string(boundJSON(json.RawMessage(`{"output":"`+big+`","exit":0,"nested":{"a":["`+big+`"]}}`), 2000))
	if len(got) > 8000 || !strings.Contains(got, `"exit":0`) || !strings.Contains(got, `"output":"`+strings.Repeat("x", 2000)+`…"`) {
		t.Errorf("bounded metadata is %d bytes: %.200s", len(got), got)
	}
	many := `{`
	for i := range 50 {
		many += fmt.Sprintf(`"k%d":"%s",`, i, strings.Repeat("y", 1900))
	}
	many += `"z":1}`
	if got := string(boundJSON(json.RawMessage(many), 2000)); len(got) > 8000 || !strings.Contains(got, "metadata dropped") {
		t.Errorf("a metadata of 50 large fields kept %d bytes", len(got))
	}
	// Args: top-level strings cut as before; nested ones once the whole is over 8n.
	if got := string(cutArgs(json.RawMessage(`{"command":"`+big+`"}`), 2000)); len(got) > 2100 || !strings.HasPrefix(got, `{"command":"`) {
		t.Errorf("a long top-level argument: %d bytes", len(got))
	}
	nested := `{"edits":[{"oldString":"` + big + `","newString":"` + big + `"}],"filePath":"/w/a.go"}`
	if got := string(cutArgs(json.RawMessage(nested), 2000)); len(got) > 16000 || !strings.Contains(got, `"filePath":"/w/a.go"`) {
		t.Errorf("nested arguments not bounded: %d bytes", len(got))
	}
	hugeArr := "[" + strings.Repeat(`"`+strings.Repeat("y", 1500)+`",`, 200) + `"z"]`
	if got := string(cutArgs(json.RawMessage(hugeArr), 2000)); len(got) > 16000 || !strings.Contains(got, "args dropped") {
		t.Errorf("an array of args: %d bytes, want the note", len(got))
	}
	if got := string(boundJSON(json.RawMessage(`not json`), 2000)); got != `"not json"` {
		t.Errorf("invalid metadata became %s", got)
	}
}
