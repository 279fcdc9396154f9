package redact

import "strings"

// Byte classes and scanning helpers. Everything here is ASCII: a span found with them
// starts and ends on ASCII bytes, so cutting it out never splits a UTF-8 sequence.

func isDigit(c byte) bool      { return '0' <= c && c <= '9' }
func isUpper(c byte) bool      { return 'A' <= c && c <= 'Z' }
func isLower(c byte) bool      { return 'a' <= c && c <= 'z' }
func isLetter(c byte) bool     { return isUpper(c) || isLower(c) }
func isAlnum(c byte) bool      { return isLetter(c) || isDigit(c) }
func isWord(c byte) bool       { return isAlnum(c) || c == '_' }
func isUpperDigit(c byte) bool { return isUpper(c) || isDigit(c) }
func isHex(c byte) bool        { return isDigit(c) || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F') }
func isB64URL(c byte) bool     { return isWord(c) || c == '-' }
func isB64(c byte) bool        { return isAlnum(c) || c == '+' || c == '/' || c == '=' }
func isSlackChar(c byte) bool  { return isAlnum(c) || c == '-' }
func isSchemeChar(c byte) bool {
	return isAlnum(c) || c == '+' || c == '.' || c == '-'
}
func isWebhookChar(c byte) bool { return isWord(c) || c == '/' || c == '-' }

// isTokenChar is the token68 alphabet of HTTP credentials (RFC 9110, 11.2).
func isTokenChar(c byte) bool {
	return isAlnum(c) || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' || c == '=' || c == '-'
}

// isNameChar is what a key name in an assignment is made of: DB_PASSWORD, x-api-key,
// spring.datasource.password, --password.
func isNameChar(c byte) bool { return isWord(c) || c == '.' || c == '-' }

func isIdentChar(c byte) bool  { return isWord(c) || c == '$' }
func isIdentStart(c byte) bool { return isLetter(c) || c == '_' || c == '$' }

func isQuote(c byte) bool { return c == '"' || c == '\'' || c == '`' }
func isBlank(c byte) bool { return c == ' ' || c == '\t' }
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// spanWhile returns the end of the run of bytes of class f that starts at i.
func spanWhile(s string, i int, f func(byte) bool) int {
	for i < len(s) && f(s[i]) {
		i++
	}
	return i
}

// boundaryBefore reports whether s[i] starts a word: nothing, a character that is not a
// letter, digit or '_', or a JSON escape stands before it.
func boundaryBefore(s string, i int) bool {
	return i == 0 || !isWord(s[i-1]) || escapeBefore(s, i) > 0
}

// escapeBefore returns the length of the JSON string escape that ends just before s[i]
// (\n, \t, \r, \b, \f, \", \\, \/ or \uXXXX), or 0. JSON text kept as text (a tool's
// output that is JSON, a dead letter's body, a JSON string inside a JSON string) has
// its line breaks and tabs as such escapes: the word after one starts there.
func escapeBefore(s string, i int) int {
	if i >= 2 && s[i-2] == '\\' {
		switch s[i-1] {
		case 'n', 't', 'r', 'b', 'f', '"', '\\', '/':
			return 2
		}
	}
	if i >= 6 && s[i-6] == '\\' && s[i-5] == 'u' && isHex(s[i-4]) && isHex(s[i-3]) && isHex(s[i-2]) && isHex(s[i-1]) {
		return 6
	}
	return 0
}

// escapeAt returns the length of the JSON string escape the name s[i:e] starts with when
// a backslash stands before i (the name grew back over an escape's letters), or 0.
func escapeAt(s string, i, e int) int {
	if i == 0 || s[i-1] != '\\' || i >= e {
		return 0
	}
	switch s[i] {
	case 'n', 't', 'r', 'b', 'f':
		return 1
	case 'u':
		if i+5 <= e && isHex(s[i+1]) && isHex(s[i+2]) && isHex(s[i+3]) && isHex(s[i+4]) {
			return 5
		}
	}
	return 0
}

func skipBlanks(s string, i int) int { return spanWhile(s, i, isBlank) }

// escapedStop reports whether s[i] is a backslash that starts an escaped quote or line
// break, as in a JSON document shown as text.
func escapedStop(s string, i int) bool {
	if s[i] != '\\' || i+1 >= len(s) {
		return false
	}
	switch s[i+1] {
	case '"', '\'', 'n', 'r', 't':
		return true
	}
	return false
}

// wordEnd returns the end of the bare value that starts at i: it stops at white space,
// quotes and the punctuation that ends a value in shell, URLs, logfmt and code
// (; & , ) ] }).
func wordEnd(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r', '\f', '\v', '"', '\'', '`', ';', '&', ',', ')', ']', '}':
			return i
		case '\\':
			if escapedStop(s, i) {
				return i
			}
		case '[':
			// A marker stands where a word was: it is part of the word, as the
			// secret it replaced was, so that a second pass reads the same words.
			if k := markerLen(s[i:]); k > 0 {
				i += k - 1
			}
		}
		i++
	}
	return i
}

// restEnd returns the end of the line that starts at i, or of the quoted string it is in
// when encl is that string's quote.
func restEnd(s string, i int, encl byte) int {
	for i < len(s) {
		c := s[i]
		if c == '\n' || c == '\r' || (encl != 0 && c == encl) {
			return i
		}
		if c == '\\' && escapedStop(s, i) {
			if (encl != 0 && s[i+1] == encl) || s[i+1] == 'n' || s[i+1] == 'r' {
				return i
			}
			i++
		}
		i++
	}
	return i
}

func lineStart(s string, i int) int {
	for i > 0 && s[i-1] != '\n' {
		i--
	}
	return i
}

// nearLineStart is lineStart looking back at most n bytes, so that looking back from
// many places in one long line stays linear.
func nearLineStart(s string, i, n int) int {
	lo := max(0, i-n)
	for i > lo && s[i-1] != '\n' {
		i--
	}
	return i
}

func lineEnd(s string, i int) int {
	for i < len(s) && s[i] != '\n' {
		i++
	}
	return i
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

func hasDigitAndLetter(s string) bool {
	d, l := false, false
	for i := 0; i < len(s); i++ {
		d = d || isDigit(s[i])
		l = l || isLetter(s[i])
	}
	return d && l
}

func hasBlank(s string) bool {
	for i := 0; i < len(s); i++ {
		if isSpace(s[i]) {
			return true
		}
	}
	return false
}

// markerLen returns the length of the marker s starts with ("[REDACTED:rule-name]"), or 0
// when it starts with none.
func markerLen(s string) int {
	if !strings.HasPrefix(s, markerPrefix) {
		return 0
	}
	i := len(markerPrefix)
	j := spanWhile(s, i, func(c byte) bool { return isLower(c) || isDigit(c) || c == '-' })
	if j == i || j >= len(s) || s[j] != ']' {
		return 0
	}
	return j + 1
}
