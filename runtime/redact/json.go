package redact

import (
	"bytes"
	"encoding/json"
	"strings"
)

// JSON redacts every string value inside a JSON document, recursively, and returns a
// valid JSON document with the same layout: object keys, numbers, literals, white space
// and unchanged strings are copied byte for byte, and only a redacted string is written
// again (re-escaped). Object keys are never redacted, but they give their value context,
// as in Text: the value of a member whose key names a secret ("password", "DB_PASSWORD",
// "api_key", "client-key-data") is judged like the value of an assignment and replaced
// whole by "[REDACTED:assignment]"; a number under a password-like key becomes that
// string too. The elements of an array take the key of the member that holds the array.
//
// When nothing is redacted, JSON returns raw itself. When raw is not one valid JSON
// document (JSON lines, a truncated document, plain text), JSON returns Text(raw) as
// bytes: redacted text, not a JSON string; the caller decides what to store.
func JSON(raw []byte) ([]byte, Counts) {
	if !json.Valid(raw) {
		out, c := Text(string(raw))
		return []byte(out), c
	}
	w := jsonWalker{src: raw}
	w.value(0, "", clsNone)
	if w.out == nil {
		return raw, w.counts
	}
	return append(w.out, raw[w.last:]...), w.counts
}

// jsonWalker walks a document json.Valid accepted, so it checks nothing. It copies
// lazily: out holds the document up to last, with the replacements made so far.
type jsonWalker struct {
	src    []byte
	out    []byte
	last   int
	counts Counts
}

func (w *jsonWalker) replace(start, end int, with []byte) {
	if w.out == nil {
		w.out = make([]byte, 0, len(w.src)+64)
	}
	w.out = append(w.out, w.src[w.last:start]...)
	w.out = append(w.out, with...)
	w.last = end
}

func (w *jsonWalker) ws(i int) int {
	for i < len(w.src) && isSpace(w.src[i]) {
		i++
	}
	return i
}

// value walks the value at i (after white space) and returns the index after it. key
// and cls are the name and class of the member that holds the value.
func (w *jsonWalker) value(i int, key string, cls keyClass) int {
	i = w.ws(i)
	switch c := w.src[i]; {
	case c == '{':
		for i++; ; {
			i = w.ws(i)
			switch w.src[i] {
			case '}':
				return i + 1
			case ',':
				i++
				continue
			}
			ke := w.stringEnd(i)
			k := w.decode(i, ke)
			i = w.ws(ke) + 1 // the ':'
			i = w.value(i, k, classify(k))
		}
	case c == '[':
		// In an argument vector (["docker", "login", "--password", "x"]) a flag that
		// names a secret gives the element after it the flag's class.
		flag, flagCls := "", clsNone
		for i++; ; {
			i = w.ws(i)
			switch w.src[i] {
			case ']':
				return i + 1
			case ',':
				i++
				continue
			case '"':
				e := w.stringEnd(i)
				if flagCls != clsNone {
					w.str(i, e, flag, flagCls)
					flagCls = clsNone
				} else {
					v := w.str(i, e, key, cls)
					if name := strings.TrimLeft(v, "-"); len(name) < len(v) && !strings.ContainsAny(name, "= \t") {
						flag, flagCls = name, classify(name)
					}
				}
				i = e
				continue
			}
			flagCls = clsNone
			i = w.value(i, key, cls)
		}
	case c == '"':
		e := w.stringEnd(i)
		w.str(i, e, key, cls)
		return e
	default:
		e := i
		for e < len(w.src) && !isSpace(w.src[e]) && w.src[e] != ',' && w.src[e] != '}' && w.src[e] != ']' {
			e++
		}
		if cls == clsPassword && (c == '-' || isDigit(c)) {
			w.redactWhole(i, e, ruleAssignment)
		}
		return e
	}
}

// str redacts the string literal src[i:e] that is the value of key, and returns its
// text as it was.
func (w *jsonWalker) str(i, e int, key string, cls keyClass) string {
	v := w.decode(i, e)
	if r, ok := judge(cls, key, v, true); ok {
		w.redactWhole(i, e, r)
		return v
	}
	var red string
	var c Counts
	if strings.Contains(lowerASCII(key), "authorization") {
		// Give the header rule its context, as if the member were a header line.
		const h = "Authorization: "
		red, c = Text(h + v)
		red = strings.TrimPrefix(red, h)
	} else {
		red, c = Text(v)
	}
	if c.Total() == 0 {
		return v
	}
	w.addCounts(c)
	w.replace(i, e, appendQuoted(nil, red))
	return v
}

func (w *jsonWalker) redactWhole(i, e int, r ruleID) {
	w.replace(i, e, []byte(`"`+markerPrefix+ruleNames[r]+`]"`))
	w.addCounts(Counts{ruleNames[r]: 1})
}

func (w *jsonWalker) addCounts(c Counts) {
	if w.counts == nil {
		w.counts = make(Counts)
	}
	w.counts.Add(c)
}

// stringEnd returns the index after the string literal that starts at i.
func (w *jsonWalker) stringEnd(i int) int {
	for i++; i < len(w.src); i++ {
		switch w.src[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// decode returns the text of the string literal src[i:e].
func (w *jsonWalker) decode(i, e int) string {
	lit := w.src[i:e]
	body := lit[1 : len(lit)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body)
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return string(body) // unreachable: json.Valid accepted the literal
	}
	return s
}

// appendQuoted appends s as a JSON string literal. Only what JSON requires is escaped
// (quote, backslash, control characters), so that text stays readable: no \u003c for <.
func appendQuoted(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
