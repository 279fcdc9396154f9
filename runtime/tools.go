package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Payload cuts (protocol §3): what an extractor reads of each entry.
const (
	PayloadOutputMax = 500
	PayloadArgsMax   = 120
)

func toolError(name, format string, args ...any) *Reply {
	return &Reply{Err: &HostError{Name: name, Message: fmt.Sprintf(format, args...)}}
}

// tool decides one tool call (protocol §3). The claim is a state change: the driver
// commits it before it replies.
func (t *step) tool(c ToolCall) *Reply {
	caller := t.s.Sessions[c.SessionID]
	if caller == nil {
		return toolError(protocol.UnknownSession, "session %q is not tracked by thatch: it never appeared in the host's events", c.SessionID)
	}
	root := t.s.Sessions[t.s.Root(caller.ID)]
	if root == nil {
		return toolError(protocol.UnknownSession, "session %q has no top-level ancestor thatch tracks", c.SessionID)
	}
	t.touchCall(caller.ID)
	if MemoryTool(c.Name) || c.Name == CallSessionContext || c.Name == CallMemoryContext {
		return t.identify(c, caller, root)
	}
	switch c.Name {
	case ToolPayload:
		if err := argsObject(c.Args); err != nil {
			return toolError(protocol.BadRequest, "%s takes an empty object: %v", ToolPayload, err)
		}
		claimed := t.claim(root, caller.ID)
		if len(claimed) > 0 {
			t.fx.Entries = append(t.fx.Entries, EntryOp{Kind: EntryClaim, Root: root.ID, Claimant: caller.ID, At: t.now, IDs: claimed})
			t.dirty(root)
		}
		ids := root.Claimed(caller.ID)
		if ids == nil {
			ids = []string{}
		}
		remaining := root.Pending()
		// Caller: the driver adds the project's related memories and hygiene signals.
		return &Reply{Metadata: map[string]any{"parentID": root.ID, "entryIDs": ids, "remaining": remaining},
			Payload: &PayloadRef{Root: root.ID, Claimant: caller.ID, Remaining: remaining, Again: caller.Kind == KindTop},
			Caller:  Identify(t.s, caller.ID)}
	case ToolDone:
		m, err := doneArgs(c.Args)
		if err != nil {
			return toolError(protocol.BadRequest, "%s takes {new, updated, deleted} as non-negative integers: %v", ToolDone, err)
		}
		caller.Metrics.New += m.New
		caller.Metrics.Updated += m.Updated
		caller.Metrics.Deleted += m.Deleted
		t.dirty(caller)
		n := t.complete(root, caller.ID)
		caller.Completed += n
		return &Reply{Output: fmt.Sprintf("Extraction recorded: %d %s completed (%d new, %d updated, %d deleted memories).",
			n, plural(n, "entry", "entries"), m.New, m.Updated, m.Deleted), Metadata: map[string]any{"completed": n}}
	}
	return toolError(protocol.BadRequest, "unknown tool %q: thatch serves %s, %s, %s, %s, %s and %s",
		c.Name, ToolPayload, ToolDone, ToolRemember, ToolSearch, ToolUpdate, ToolForget)
}

func argsObject(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("args are not a JSON object")
	}
	return nil
}

func doneArgs(raw json.RawMessage) (Metrics, error) {
	var m Metrics
	if err := argsObject(raw); err != nil {
		return m, err
	}
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return m, nil
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(raw, &fields)
	for name, dst := range map[string]*int64{"new": &m.New, "updated": &m.Updated, "deleted": &m.Deleted} {
		v, ok := fields[name]
		if !ok {
			continue
		}
		var n json.Number
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		if err := dec.Decode(&n); err != nil {
			return m, fmt.Errorf("%s is not a number", name)
		}
		i, err := n.Int64()
		if err != nil || i < 0 {
			return m, fmt.Errorf("%s is %s", name, v)
		}
		*dst = i
	}
	return m, nil
}

// claim gives claimant the oldest pending entries of root that fit the payload budget
// with what it holds already, at least one, and returns their ids. It stops at the first
// entry that does not fit, so entries are extracted in the order they happened.
func (t *step) claim(root *Session, claimant string) []string {
	used := 0
	for _, e := range root.Entries {
		if e.Claimant() == claimant {
			used += int(e.Size)
		}
	}
	c := NewClaim(claimant, t.now.UnixMilli()) // one for all the entries it takes
	var ids []string
	for i, e := range root.Entries {
		if e.Accepted() {
			continue
		}
		if t.PayloadChars > 0 && (used > 0 || len(ids) > 0) && used+int(e.Size) > t.PayloadChars {
			break
		}
		root.Entries[i].claim = c
		used += int(e.Size)
		ids = append(ids, e.ID)
	}
	return ids
}

// PayloadEntry is one claimed entry as the extractor reads it.
type PayloadEntry struct {
	ID   string
	Body Body
}

// FormatPayload renders a claimed set for the extractor's model, each output cut to
// PayloadOutputMax characters (its head and its tail) and its args to PayloadArgsMax,
// followed by the project's memories that look related (lines "- [mem_…] (kind)
// content"), so the extractor updates rather than repeats, and by what is left pending.
func FormatPayload(p Payload, related []string) string {
	if len(p.Entries) == 0 {
		return "No entries to extract: nothing is pending for session " + p.Root + ". Call " + ToolDone +
			" with {\"new\":0,\"updated\":0,\"deleted\":0}."
	}
	var b strings.Builder
	size := 512 // what surrounds the entries, without the related memories
	for _, e := range p.Entries {
		size += 64 + len(e.ID) + len(e.Body.Tool) + min(len(e.Body.Title)+len(e.Body.Args), 2*PayloadArgsMax) + min(len(e.Body.Output), PayloadOutputMax+48)
	}
	for _, line := range related {
		size += len(line) + 1
	}
	b.Grow(size) // about what is written: the builder grows once, not once a doubling
	if len(p.Entries) == 1 {
		fmt.Fprintf(&b, "1 tool interaction of session %s to extract memories from.\n", p.Root)
	} else {
		fmt.Fprintf(&b, "%d tool interactions of session %s to extract memories from.\n", len(p.Entries), p.Root)
	}
	for i, e := range p.Entries {
		writeEntry(&b, i+1, e)
	}
	if len(related) > 0 {
		fmt.Fprintf(&b, "\n## Existing memories of this project that look related\nUpdate (%s) or forget (%s) these by id rather than adding what they already say.\n", ToolUpdate, ToolForget)
		for _, line := range related {
			b.WriteString(line + "\n")
		}
	}
	fmt.Fprintf(&b, "\nWhen the memories are written, call %s with the counts of memories you created, updated and deleted.\n", ToolDone)
	more := fmt.Sprintf("%d more entries", p.Remaining)
	if p.Remaining == 1 {
		more = "1 more entry"
	}
	switch {
	case p.Remaining > 0 && p.Again:
		fmt.Fprintf(&b, "%s pending: after %s, call %s again, until it says nothing is pending.\n", more, ToolDone, ToolPayload)
	case p.Remaining > 0:
		fmt.Fprintf(&b, "%s pending for a later extraction: do not wait for them.\n", more)
	}
	return b.String()
}

// textWriter is where writeEntry writes: a payload's builder, or EntrySize's counter.
type textWriter interface{ WriteString(string) (int, error) }

// writeEntry renders the entry numbered n of a payload.
func writeEntry(w textWriter, n int, e PayloadEntry) {
	w.WriteString("\n## ")
	w.WriteString(strconv.Itoa(n))
	w.WriteString(". ")
	w.WriteString(e.Body.Tool)
	w.WriteString(" (")
	w.WriteString(e.ID)
	w.WriteString(")\n")
	if e.Body.Title != "" {
		w.WriteString("title: ")
		w.WriteString(cut(e.Body.Title, PayloadArgsMax))
		w.WriteString("\n")
	}
	if args := bytes.TrimSpace(e.Body.Args); len(args) > 0 && string(args) != "{}" && string(args) != "null" {
		w.WriteString("args: ")
		w.WriteString(cut(string(args), PayloadArgsMax))
		w.WriteString("\n")
	}
	w.WriteString("output:\n")
	writeCutMiddle(w, e.Body.Output, PayloadOutputMax)
	w.WriteString("\n")
}

// runeCount is a textWriter that counts the characters written to it.
type runeCount int

func (c *runeCount) WriteString(s string) (int, error) {
	*c += runeCount(utf8.RuneCountInString(s))
	return len(s), nil
}

// EntrySize is the number of characters an entry takes in a payload: what the payload
// budget counts. It counts what writeEntry writes, without keeping it.
func EntrySize(id string, body *Body) int {
	var c runeCount
	writeEntry(&c, 1, PayloadEntry{ID: id, Body: *body})
	return int(c)
}

// cutMiddle returns s cut to about n characters by keeping its head and its tail, with a
// line saying how much was left out between them: a long tool output often ends with
// what matters (a test's failure, a command's result), and opencode puts its own
// truncation notice at the start of a big one.
func cutMiddle(s string, n int) string {
	if n <= 0 || len(s) <= n { // n bytes hold at most n characters
		return s
	}
	var b strings.Builder
	writeCutMiddle(&b, s, n)
	return b.String()
}

// writeCutMiddle writes cutMiddle(s, n) to w.
func writeCutMiddle(w textWriter, s string, n int) {
	total := utf8.RuneCountInString(s)
	if n <= 0 || total <= n {
		w.WriteString(s)
		return
	}
	head := n * 2 / 5
	tail := n - head
	// The head's runes from the start, the tail's from the end: an output of megabytes
	// is not walked rune by rune for the few hundred characters kept.
	hi, ti := runeOffset(s, head), len(s)
	for range tail {
		_, size := utf8.DecodeLastRuneInString(s[:ti])
		ti -= size
	}
	writeLeftOut(w, s[:hi], total-head-tail, s[ti:])
}

// writeLeftOut writes head and tail with the line saying n characters were left out
// between them.
func writeLeftOut(w textWriter, head string, n int, tail string) {
	w.WriteString(head)
	w.WriteString("\n[… ")
	w.WriteString(strconv.Itoa(n))
	w.WriteString(" characters left out …]\n")
	w.WriteString(tail)
}

// runeOffset is the byte offset of s's nth rune (len(s) when s has fewer).
func runeOffset(s string, n int) int {
	i := 0
	for range n {
		if i == len(s) {
			break
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i
}

// cut returns s cut to at most n characters (runes), marking the cut.
func cut(s string, n int) string {
	if n <= 0 || len(s) <= n || utf8.RuneCountInString(s) <= n { // n bytes hold at most n characters
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j] + "…"
		}
		i++
	}
	return s
}

// boundJSON cuts every string inside a JSON document to n characters and, when the result
// is still over 4n bytes (a metadata object with many fields), keeps only a note that it
// was dropped: opencode copies a tool's whole output into its metadata.
func boundJSON(raw json.RawMessage, n int) json.RawMessage {
	return boundJSONAs(raw, n, 4*n, `{"thatch":"metadata dropped: over the size thatch keeps"}`)
}

// boundJSONAs cuts every string of raw to n characters and, when the result is still over
// max bytes, stands dropped in for it.
func boundJSONAs(raw json.RawMessage, n, max int, dropped string) json.RawMessage {
	if len(raw) == 0 || len(raw) <= n && n <= max && json.Valid(raw) {
		return raw // no string in it is over n characters, nor is the whole over max bytes
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return json.RawMessage(strconv.Quote(cut(string(raw), n)))
	}
	var walk func(any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			return cut(x, n)
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		}
		return v
	}
	out, _ := json.Marshal(walk(v))
	if len(out) > max {
		return json.RawMessage(dropped)
	}
	return out
}

// cutArgs bounds a tool call's args: the top-level strings cut to n characters (rule 1),
// and, when that leaves more than 8n bytes, every nested string too; what is still over
// is dropped for a note.
func cutArgs(raw json.RawMessage, n int) json.RawMessage {
	out := cutTopArgs(raw, n)
	if len(out) <= 8*n {
		return out
	}
	// Nested values too (a multiedit's edits, an array): every string cut, and the whole
	// bounded, so no argument makes an entry bigger than thatch keeps.
	return boundJSONAs(out, n, 8*n, `{"thatch":"args dropped: over the size thatch keeps"}`)
}

// cutTopArgs cuts the top-level string arguments to n characters.
func cutTopArgs(raw json.RawMessage, n int) json.RawMessage {
	var m map[string]json.RawMessage
	if len(raw) <= n || json.Unmarshal(raw, &m) != nil {
		return raw // no string of n bytes or fewer has more than n characters
	}
	changed := false
	for k, v := range m {
		var s string
		if json.Unmarshal(v, &s) == nil && utf8.RuneCountInString(s) > n {
			b, _ := json.Marshal(cut(s, n))
			m[k] = b
			changed = true
		}
	}
	if !changed {
		return raw
	}
	out, _ := json.Marshal(m)
	return out
}
