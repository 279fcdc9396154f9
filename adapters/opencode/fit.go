package opencode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// MaxEventBody is the largest event body thatch accepts (protocol rule 11): a larger one
// is dead-lettered, so the bridge cuts events to fit before publishing.
const MaxEventBody = 1 << 20

// fitMargin leaves room under the limit for the message's headers.
const fitMargin = 8 << 10

// minKept is how much of a cut string Fit keeps at least (its head and tail), and how
// long a string must be before Fit cuts it: ids and names are never cut.
const minKept = 2 << 10

// EventLimit is the largest event body the bridge publishes on a broker whose
// max_payload is maxPayload (0 when unknown).
func EventLimit(maxPayload int64) int {
	if maxPayload <= 0 || maxPayload > MaxEventBody {
		maxPayload = MaxEventBody
	}
	return int(maxPayload) - fitMargin
}

// Fit returns ev with a body of at most limit bytes, or as close as it gets: it cuts the
// longest string values of the properties (a tool's output, its args' strings, metadata),
// keeping each one's head and tail around a marker that says how much is gone, until the
// body fits. An event that fits is returned as it is. A large write's tool call then
// reaches thatch with its beginning and end instead of being refused for its size.
func Fit(ev Event, limit int) Event {
	if len(ev.Body()) <= limit {
		return ev
	}
	dec := json.NewDecoder(bytes.NewReader(ev.Properties))
	dec.UseNumber() // numbers stay as they were written
	var props any
	if err := dec.Decode(&props); err != nil {
		return ev
	}
	var leaves []*leaf
	collectLeaves(props, func(l *leaf) { leaves = append(leaves, l) })
	// json.Marshal's output is compact and escaped as Body's: Body adds only the envelope.
	envelope := len(Event{ID: ev.ID, Type: ev.Type, Properties: json.RawMessage("{}")}.Body()) - len("{}")
	for {
		data, err := json.Marshal(props)
		if err != nil {
			return ev
		}
		cut := ev
		cut.Properties = data
		over := envelope + len(data) - limit
		if over <= 0 {
			return cut
		}
		var longest *leaf
		for _, l := range leaves {
			if l.kept > minKept && (longest == nil || l.kept > longest.kept) {
				longest = l
			}
		}
		if longest == nil {
			return cut // nothing left to cut: too many small values
		}
		// Each byte cut saves at least one byte of JSON; the marker costs fewer than 64.
		longest.kept = max(longest.kept-over-64, minKept)
		longest.set(cutString(longest.orig, longest.kept))
	}
}

// leaf is one string value of decoded JSON that Fit may cut.
type leaf struct {
	orig string
	kept int // bytes of orig kept
	set  func(string)
}

// collectLeaves calls add for every string in v longer than minKept.
func collectLeaves(v any, add func(*leaf)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok {
				if len(s) > minKept {
					add(&leaf{orig: s, kept: len(s), set: func(n string) { v[k] = n }})
				}
				continue
			}
			collectLeaves(x, add)
		}
	case []any:
		for i, x := range v {
			if s, ok := x.(string); ok {
				if len(s) > minKept {
					add(&leaf{orig: s, kept: len(s), set: func(n string) { v[i] = n }})
				}
				continue
			}
			collectLeaves(x, add)
		}
	}
}

// cutString keeps about keep bytes of s, half from its head and half from its tail, on
// character boundaries, with a marker counting the characters cut between them.
func cutString(s string, keep int) string {
	if keep >= len(s) {
		return s
	}
	head, tail := keep/2, len(s)-(keep-keep/2)
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + fmt.Sprintf("…[cut %d characters to fit the broker]…", utf8.RuneCountInString(s[head:tail])) + s[tail:]
}
