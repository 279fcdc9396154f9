package redact

import "strings"

const (
	openTag  = "<private>"
	closeTag = "</private>"
)

// stripPrivate removes every <private>…</private> block (tags matched in ASCII without
// regard to case) and returns the rest and the number of blocks removed. Blocks nest: a
// block ends at the close tag that balances its open tag, so the text of
// "<private>a<private>b</private>c</private>" goes entirely. An open tag that is never
// balanced removes everything to the end (fail closed). A close tag with no open tag is
// left as it is.
//
// The text is built in out and every tag is looked for at the end of out, not in s: a
// removal can join "<priv" and "ate>" into a new open tag, and that tag is then honoured
// in the same call. So the result never contains an open tag, and a second call changes
// nothing.
func stripPrivate(s string) (string, int) {
	if !containsOpenTag(s) {
		return s, 0
	}
	out := make([]byte, 0, len(s))
	depth, bottom, n := 0, 0, 0
	for i := 0; i < len(s); {
		j := strings.IndexByte(s[i:], '>')
		if j < 0 {
			out = append(out, s[i:]...)
			break
		}
		out = append(out, s[i:i+j+1]...)
		i += j + 1
		switch {
		case hasSuffixFold(out, openTag):
			if depth == 0 {
				bottom = len(out) - len(openTag)
			}
			depth++
		case depth > 0 && hasSuffixFold(out, closeTag):
			depth--
			if depth == 0 {
				out = out[:bottom]
				n++
			}
		}
	}
	if depth > 0 {
		out = out[:bottom]
		n++
	}
	return string(out), n
}

func containsOpenTag(s string) bool {
	for i := 0; ; {
		j := strings.IndexByte(s[i:], '<')
		if j < 0 {
			return false
		}
		i += j
		if len(s)-i >= len(openTag) && equalFoldASCII(s[i:i+len(openTag)], openTag) {
			return true
		}
		i++
	}
}

func hasSuffixFold(b []byte, suffix string) bool {
	return len(b) >= len(suffix) && equalFoldASCII(b[len(b)-len(suffix):], suffix)
}

// equalFoldASCII compares a with the lower-case ASCII string lower, folding only A-Z, so
// that no Unicode folding (the Kelvin sign, a long s) makes a tag out of other letters.
func equalFoldASCII[T string | []byte](a T, lower string) bool {
	if len(a) != len(lower) {
		return false
	}
	for i := 0; i < len(a); i++ {
		c := a[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
