package redact

import (
	"math"
	"slices"
	"strings"
)

// keyClass says how a key name's value is judged.
type keyClass int

const (
	// clsNone: not a secret's name.
	clsNone keyClass = iota
	// clsToken: token, key or credential names; the value is redacted only when it
	// looks random, so that "token: expired" survives.
	clsToken
	// clsPassword: password and secret names; the value is always redacted unless it is
	// a placeholder.
	clsPassword
)

// assignAnchors are the lower-case words that put a name in a class; each occurrence in
// the text is grown into the whole name around it.
var assignAnchors = []string{"passw", "passphrase", "pwd", "secret", "token", "key", "auth", "credential"}

// findAssignments finds key = value, key: value, "key": "value", key := "value",
// key => value and --key value (flags), and redacts the value when the key names a
// secret (classify) and the value passes judge.
func findAssignments(sc *scanner) {
	low := sc.low()
	var hits []int
	for _, a := range assignAnchors {
		for off := 0; ; {
			k := strings.Index(low[off:], a)
			if k < 0 {
				break
			}
			hits = append(hits, off+k)
			off += k + len(a)
		}
	}
	if len(hits) == 0 {
		return
	}
	slices.Sort(hits)
	next := 0
	for _, h := range hits {
		if h < next {
			continue
		}
		ns, ne := h, h
		for ns > 0 && isNameChar(sc.s[ns-1]) {
			ns--
		}
		for ne < len(sc.s) && isNameChar(sc.s[ne]) {
			ne++
		}
		ns, ne, skip := sc.trimName(h, ns, ne)
		if skip > 0 {
			next = skip
			continue
		}
		next = max(ne, sc.assignment(ns, ne))
	}
}

// trimName shrinks the name s[ns:ne] around the anchor found at h to what no secret found
// by another rule covers: a secret is no part of a key's name (ghp_…key=, ghp_….secret=),
// just as a marker is not once the secret is replaced, so a second pass reads the same
// names. When the anchor itself is inside a secret, skip is where to go on.
func (sc *scanner) trimName(h, ns, ne int) (int, int, int) {
	for _, sp := range sc.spans {
		switch {
		case sp.start >= ne || sp.end <= ns:
		case sp.start <= h && h < sp.end:
			return ns, ne, sp.end
		case sp.end <= h:
			ns = max(ns, sp.end)
		default:
			ne = min(ne, sp.start)
		}
	}
	return ns, ne, 0
}

// assignment looks at the name s[ns:ne] and what follows it, and returns the end of the
// value it read (0 when none): names inside a value are not looked at again, which keeps
// a long line of "k=k=k=…" linear.
func (sc *scanner) assignment(ns, ne int) int {
	s := sc.s
	// A name does not run back into a JSON escape before it: in "…\nDB_PASSWORD=x" and
	// "…\tPWD=/home" the name is DB_PASSWORD and PWD.
	ns += escapeAt(s, ns, ne)
	if ns > 0 && s[ns-1] == '/' {
		// A path component (/etc/passwd, /run/secrets/token) or URL user info: the
		// URL rule owns the latter.
		return 0
	}
	raw := s[ns:ne]
	name := strings.TrimLeft(raw, "-.")
	flag := len(name) < len(raw) && raw[0] == '-' && (ns == 0 || isSpace(s[ns-1]) || escapeBefore(s, ns) > 0)
	cls := classify(name)
	if cls == clsNone {
		return 0
	}
	p := ne
	keyQuoted := false
	if p < len(s) && isQuote(s[p]) {
		p, keyQuoted = p+1, true
	} else if p+1 < len(s) && s[p] == '\\' && isQuote(s[p+1]) {
		p, keyQuoted = p+2, true
	}
	// encl is the quote of a string that holds "key: value" whole, as in
	// curl -H "X-Api-Key: …"; the value ends there.
	var encl byte
	if !keyQuoted && ns > 0 && isQuote(s[ns-1]) {
		encl = s[ns-1]
	}
	p0 := p
	p = skipBlanks(s, p)
	if p >= len(s) {
		return 0
	}
	var sep byte
	switch rest := s[p:]; {
	case strings.HasPrefix(rest, "=>"), strings.HasPrefix(rest, ":="),
		strings.HasPrefix(rest, "?="), strings.HasPrefix(rest, "=="):
		sep, p = '=', p+2
	case rest[0] == '=':
		sep, p = '=', p+1
	case rest[0] == ':':
		if strings.HasPrefix(rest, "::") {
			return 0 // a path in code: token::Kind
		}
		sep, p = ':', p+1
	case p > p0 && !keyQuoted && (flag || netrc(s, ns, name)):
		sep = ' '
	default:
		return 0
	}
	p1 := p
	p = skipBlanks(s, p)
	spaced := p > p1
	if p >= len(s) {
		return 0
	}
	var vs, ve int
	quoted := false
	switch c := s[p]; {
	case c == '\n' || c == '\r':
		return 0
	case encl != 0 && c == encl:
		return 0 // the end of a string that holds only the key: "password=" + pw
	case sep == ' ' && c == '-':
		return 0 // the next flag
	case isQuote(c):
		vs, ve, quoted = p+1, closingQuote(s, p+1, c), true
	case c == '\\' && p+1 < len(s) && isQuote(s[p+1]):
		vs, ve, quoted = p+2, closingEscapedQuote(s, p+2, s[p+1]), true
	case !spaced || sep == ' ':
		vs, ve = p, max(wordEnd(s, p), standInEnd(s, p))
	default:
		// "key: value" with a space, as in YAML, headers and prose: the value is the
		// rest of the line (less a comment), and a value of several words is prose, not
		// a secret. Only the first word and what follows it are read.
		vs, ve = p, max(lineWordEnd(s, p, encl), standInEnd(s, p))
		if after := skipBlanks(s, ve); !endsValue(s, after, encl) {
			return 0
		}
		if sep == ':' && isBlockScalar(s[vs:ve]) {
			if bs, be := blockScalar(s, ns, ve); bs < be && !hasMarker(s[bs:be]) {
				sc.add(bs, be, ruleAssignment)
			}
			return ve
		}
		ve = vs + len(strings.TrimRight(s[vs:ve], ",;"))
	}
	if r, ok := judge(cls, name, s[vs:ve], quoted); ok {
		sc.add(vs, ve, r)
	}
	return ve
}

// standInEnd returns the end of a stand-in that starts at i and may hold blanks
// (<your api key>, {{ .Values.secret }}, ${VAR}), or i when there is none, so that the
// whole stand-in is judged a placeholder.
func standInEnd(s string, i int) int {
	var closer string
	switch {
	case strings.HasPrefix(s[i:], "{{"), strings.HasPrefix(s[i:], "${{"):
		closer = "}}"
	case strings.HasPrefix(s[i:], "${"):
		closer = "}"
	case strings.HasPrefix(s[i:], "<"):
		closer = ">"
	case strings.HasPrefix(s[i:], `\u003c`):
		closer = `\u003e` // <…> in JSON written by Go's encoder, kept as text
	default:
		return i
	}
	le := lineEnd(s, i)
	if k := strings.Index(s[i:le], closer); k >= 0 {
		return i + k + len(closer)
	}
	return i
}

// lineWordEnd returns the end of the word that starts at i: it stops at white space, at
// the quote encl, and at an escaped line break or quote.
func lineWordEnd(s string, i int, encl byte) int {
	for i < len(s) && !isSpace(s[i]) && !(encl != 0 && s[i] == encl) && !escapedEnd(s, i, encl) {
		i++
	}
	return i
}

// endsValue reports whether the value that ends before i ends its line: nothing but the
// line's end, the quote encl or a comment follows.
func endsValue(s string, i int, encl byte) bool {
	if i >= len(s) {
		return true
	}
	c := s[i]
	return c == '\n' || c == '\r' || c == '#' || (encl != 0 && c == encl) || escapedEnd(s, i, encl) ||
		strings.HasPrefix(s[i:], "//")
}

// escapedEnd reports whether s[i:] starts with an escaped line break or tab, or an
// escaped quote encl, as in a JSON document shown as text.
func escapedEnd(s string, i int, encl byte) bool {
	if s[i] != '\\' || i+1 >= len(s) {
		return false
	}
	c := s[i+1]
	return c == 'n' || c == 'r' || c == 't' || (encl != 0 && c == encl)
}

// judge decides whether value v of a key named name, of class cls, is redacted, and
// under which rule.
func judge(cls keyClass, name, v string, quoted bool) (ruleID, bool) {
	if cls == clsNone || hasMarker(v) || isPlaceholder(v) || (!quoted && isCodeRef(v)) {
		return 0, false
	}
	if cls == clsToken && (hasBlank(v) || !looksRandom(v) || looksLikePath(v)) {
		return 0, false
	}
	low := lowerASCII(name)
	if (strings.Contains(low, "aws") || strings.Contains(low, "secret_access_key")) && strings.Contains(low, "secret") &&
		len(v) == 40 && spanWhile(v, 0, isB64) == 40 {
		return ruleAWSSecret, true
	}
	return ruleAssignment, true
}

// excludedLast are last words of a name that make it the name of something about a
// secret (DB_PASSWORD_FILE, secretName, password_min_length), not of a secret.
var excludedLast = map[string]bool{
	"name": true, "names": true, "file": true, "files": true, "path": true, "dir": true,
	"ref": true, "refs": true, "type": true, "kind": true, "field": true, "fields": true,
	"length": true, "len": true, "min": true, "max": true, "size": true, "count": true,
	"policy": true, "prompt": true, "hint": true, "env": true, "var": true, "url": true,
	"uri": true, "endpoint": true, "stdin": true, "days": true, "ttl": true, "timeout": true,
	"expiry": true, "expires": true, "expiration": true, "rotation": true, "required": true,
	"enabled": true, "disabled": true, "regex": true, "pattern": true, "format": true,
	"label": true, "description": true, "help": true, "mode": true, "provider": true,
	"store": true, "manager": true, "version": true, "arn": true, "selector": true,
	"mount": true, "volume": true, "source": true, "template": true, "header": true,
	"method": true, "methods": true, "scheme": true, "strategy": true, "backend": true,
	"plugin": true, "flow": true, "at": true, "date": true, "time": true, "changed": true,
	"updated": true, "created": true, "location": true, "command": true, "cmd": true,
	"helper": true, "error": true, "errors": true, "message": true, "msg": true,
	"status": true, "limit": true, "limits": true, "used": true, "usage": true,
	"scope": true, "scopes": true, "audience": true, "issuer": true, "algorithm": true,
	"alg": true, "encoding": true, "kid": true, "fingerprint": true,
}

// classify returns the class of a key name (matched without regard to case, also inside
// longer names).
func classify(name string) keyClass {
	low := lowerASCII(name)
	if low == "pwd" || low == "oldpwd" {
		return clsNone // the shell's working directories
	}
	if strings.Contains(low, "public") || strings.Contains(low, "pubkey") {
		return clsNone
	}
	if last := lastWord(name); len(last) < len(name) && excludedLast[lowerASCII(last)] {
		return clsNone
	}
	switch {
	case strings.Contains(low, "passw"), strings.Contains(low, "passphrase"), strings.Contains(low, "pwd"),
		strings.Contains(low, "secret") && !strings.Contains(low, "secretar"):
		return clsPassword
	case strings.Contains(low, "token"), strings.Contains(low, "credential"),
		strings.Contains(low, "api_key"), strings.Contains(low, "api-key"), strings.Contains(low, "apikey"),
		strings.Contains(low, "access_key"), strings.Contains(low, "access-key"), strings.Contains(low, "accesskey"),
		strings.Contains(low, "private_key"), strings.Contains(low, "private-key"), strings.Contains(low, "privatekey"),
		strings.Contains(low, "key_data"), strings.Contains(low, "key-data"), strings.Contains(low, "keydata"),
		len(low) > 3 && strings.HasSuffix(low, "key"),
		low == "auth", strings.HasSuffix(low, "auth"),
		strings.HasPrefix(low, "auth_"), strings.HasPrefix(low, "auth-"), strings.HasPrefix(low, "auth."):
		return clsToken
	}
	return clsNone
}

// lastWord returns the last word of a name: after its last '_', '-' or '.', or from its
// last lower-to-upper change (secretName -> Name).
func lastWord(name string) string {
	i := len(name)
	for i > 0 {
		c := name[i-1]
		if c == '_' || c == '-' || c == '.' {
			break
		}
		if isUpper(c) && i >= 2 && isLower(name[i-2]) {
			i--
			break
		}
		i--
	}
	return name[i:]
}

// netrc reports whether a "password" name without a separator is a .netrc entry
// (machine h login u password p, on one line or on lines that follow).
func netrc(s string, ns int, name string) bool {
	if lowerASCII(name) != "password" {
		return false
	}
	ls := nearLineStart(s, ns, 256)
	line := strings.TrimLeft(s[ls:ns], " \t")
	if strings.HasPrefix(line, "machine ") || strings.HasPrefix(line, "default ") || strings.HasPrefix(line, "login ") {
		return true
	}
	if line != "" || ls == 0 || s[ls-1] != '\n' {
		return false
	}
	prev := strings.TrimLeft(s[nearLineStart(s, ls-1, 256):ls-1], " \t")
	return strings.HasPrefix(prev, "machine ") || strings.HasPrefix(prev, "login ")
}

// closingQuote returns the index of the quote q that closes a string whose text starts
// at i, honouring backslash escapes in a double-quoted one; an unclosed string runs to
// the end of its line.
func closingQuote(s string, i int, q byte) int {
	for i < len(s) {
		switch c := s[i]; {
		case c == q:
			return i
		case c == '\n' || c == '\r':
			return i
		case c == '\\' && q == '"' && i+1 < len(s) && s[i+1] != '\n':
			i++
		}
		i++
	}
	return i
}

// closingEscapedQuote is closingQuote for a string inside a string: \"…\".
func closingEscapedQuote(s string, i int, q byte) int {
	for i < len(s) {
		c := s[i]
		if c == '\n' || c == '\r' || (c == '\\' && i+1 < len(s) && s[i+1] == q) {
			return i
		}
		i++
	}
	return i
}

func isBlockScalar(v string) bool {
	switch v {
	case "|", "|-", "|+", ">", ">-", ">+":
		return true
	}
	return false
}

// blockScalar returns the lines of a YAML block scalar that follows the key at ns: every
// following line indented deeper than the key's line (blank lines included), from the
// first one's text to the last one's end.
func blockScalar(s string, ns, valueEnd int) (int, int) {
	ls := lineStart(s, ns)
	indent := skipBlanks(s, ls) - ls
	start, end := -1, -1
	for i := lineEnd(s, valueEnd) + 1; i < len(s); {
		le := lineEnd(s, i)
		text := skipBlanks(s, i)
		if text < le && s[text] != '\r' {
			if text-i <= indent {
				break
			}
			if start < 0 {
				start = text
			}
			end = le
			if end > 0 && s[end-1] == '\r' {
				end--
			}
		}
		i = le + 1
	}
	if start < 0 {
		return 0, 0
	}
	return start, end
}

// placeholderWords are values that hold no secret: empty values in code and type names
// (password: string in a TypeScript interface).
var placeholderWords = map[string]bool{
	"nil": true, "null": true, "none": true, "true": true, "false": true, "undefined": true,
	"string": true, "str": true, "number": true, "int": true, "bool": true, "boolean": true,
	"bytes": true, "[]byte": true, "any": true, "object": true, "optional": true,
}

// isPlaceholder reports whether a value carries no secret by construction: empty, a
// marker, a mask (***, xxxx, ••••), a variable or template reference ($VAR, ${VAR},
// $(cmd), {{ .X }}, {name}, %s, %VAR%), a <…> stand-in, or a word from placeholderWords.
// Words like "changeme" or "password" are not placeholders: they may be the real value.
func isPlaceholder(v string) bool {
	v = strings.Trim(v, " \t")
	if v == "" || strings.HasPrefix(v, markerPrefix) || placeholderWords[lowerASCII(v)] {
		return true
	}
	if strings.Trim(v, "*xX.#?_-•…●") == "" {
		return true
	}
	if t := strings.TrimRight(v, "\"'`)]},;\\"); t != "" && len(t) < len(v) && isPlaceholder(t) {
		// A value read to the end of its line inside a JSON string kept as text takes
		// the string's closing quote and the document's closers with it: "********\"}".
		return true
	}
	if strings.HasPrefix(v, `\u003c`) && strings.HasSuffix(v, `\u003e`) {
		return true // a <…> stand-in in JSON written by Go's encoder, kept as text
	}
	last := v[len(v)-1]
	switch v[0] {
	case '$':
		if len(v) < 2 {
			return false
		}
		switch c := v[1]; {
		case c == '{' || c == '(':
			return true
		case isLetter(c) || c == '_':
			return spanWhile(v, 1, isWord) == len(v)
		}
	case '<':
		return last == '>'
	case '{':
		return last == '}'
	case '%':
		if len(v) >= 3 && last == '%' && spanWhile(v, 1, isWord) == len(v)-1 {
			return true
		}
		return len(v) <= 4 && isLetter(last) && spanWhile(v[:len(v)-1], 1, isPrintfFlag) == len(v)-1
	}
	return false
}

func isPrintfFlag(c byte) bool {
	return isDigit(c) || c == '-' || c == '+' || c == '#' || c == ' ' || c == '.'
}

// isCodeRef reports whether a bare value is code rather than a literal: a call or an
// index (os.Getenv("X"), getpass(), os.environ["X"]) or a field that names a secret
// (cfg.Password, process.env.API_TOKEN).
func isCodeRef(v string) bool {
	i, words, last := 0, 0, 0
	for i < len(v) && isIdentStart(v[i]) {
		last = i
		i = spanWhile(v, i, isIdentChar)
		words++
		if i+1 < len(v) && v[i] == '.' && isIdentStart(v[i+1]) {
			i++
			continue
		}
		break
	}
	switch {
	case words == 0:
		return false
	case i < len(v):
		return v[i] == '(' || v[i] == '['
	default:
		return words >= 2 && hasAnchor(lowerASCII(v[last:]))
	}
}

func hasAnchor(low string) bool {
	for _, a := range assignAnchors {
		if strings.Contains(low, a) {
			return true
		}
	}
	return false
}

// looksRandom reports whether a value looks like a generated token rather than a word:
// 16 or more characters with Shannon entropy of at least 3 bits per character and a
// digit or both cases, or 20 or more characters with letters and digits.
func looksRandom(v string) bool {
	if len(v) < 16 {
		return false
	}
	var freq [256]int
	lower, upper, digit := 0, 0, 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		freq[c]++
		switch {
		case isLower(c):
			lower++
		case isUpper(c):
			upper++
		case isDigit(c):
			digit++
		}
	}
	if digit > 0 && lower+upper > 0 && len(v) >= 20 {
		return true
	}
	if digit == 0 && (lower == 0 || upper == 0) {
		return false
	}
	h, n := 0.0, float64(len(v))
	for _, f := range freq {
		if f > 0 {
			p := float64(f) / n
			h -= p * math.Log2(p)
		}
	}
	return h >= 3.0
}

// looksLikePath reports whether a value is a file path or a URL: what a token-ish key
// points at, not a token.
func looksLikePath(v string) bool {
	return strings.HasPrefix(v, "/") || strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../") ||
		strings.HasPrefix(v, "~/") || strings.Contains(v, "://")
}
