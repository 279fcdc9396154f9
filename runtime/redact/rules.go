package redact

import (
	"encoding/base64"
	"strings"
)

// ruleID orders the rules from the most specific to the most generic: when the secrets
// two rules found overlap, the replacement is labelled with the lower ID.
type ruleID int

const (
	rulePEM ruleID = iota
	ruleAWSKey
	ruleGitHub
	ruleGitLab
	ruleAnthropic
	ruleOpenAI
	ruleSlack
	ruleSlackWebhook
	ruleGoogle
	ruleStripe
	ruleNPM
	rulePyPI
	ruleHuggingFace
	ruleAge
	ruleJWT
	ruleAWSSecret
	ruleURLPassword
	ruleBasicAuth
	ruleBearer
	ruleAuthorization
	ruleAssignment
	numRules
)

// rulePrivate counts the <private> blocks removed; it has no marker.
const rulePrivate = "private"

// ruleNames are the names in markers and Counts.
var ruleNames = [numRules]string{
	rulePEM:           "pem-private-key",
	ruleAWSKey:        "aws-access-key",
	ruleGitHub:        "github-token",
	ruleGitLab:        "gitlab-token",
	ruleAnthropic:     "anthropic-key",
	ruleOpenAI:        "openai-key",
	ruleSlack:         "slack-token",
	ruleSlackWebhook:  "slack-webhook",
	ruleGoogle:        "google-api-key",
	ruleStripe:        "stripe-key",
	ruleNPM:           "npm-token",
	rulePyPI:          "pypi-token",
	ruleHuggingFace:   "huggingface-token",
	ruleAge:           "age-secret-key",
	ruleJWT:           "jwt",
	ruleAWSSecret:     "aws-secret",
	ruleURLPassword:   "url-password",
	ruleBasicAuth:     "basic-auth",
	ruleBearer:        "bearer",
	ruleAuthorization: "authorization",
	ruleAssignment:    "assignment",
}

// finders run in this order on every pass; each adds the spans it finds. Each starts
// from a literal (strings.Index, which is vectorised) so that text without the literal
// costs one fast scan per literal and nothing more.
var finders = []func(*scanner){
	findPrefixed,
	findJWT,
	findPEM,
	findBase64PEM,
	findURLPassword,
	findSlackWebhook,
	findBearer,
	findAuthorization,
	findCurlUser,
	findAssignments,
}

// prefixRule is a token with a fixed prefix and a body of at least min characters of one
// class. The whole run of body characters is replaced, however long.
type prefixRule struct {
	rule     ruleID
	prefixes []string
	body     func(byte) bool
	min      int
	// dots lets the body go on after a '.' followed by a body character (GitLab's
	// newer tokens have dotted parts).
	dots bool
	// valid, when set, vetoes a body.
	valid func(body string) bool
	// anywhere marks a prefix distinctive enough to start a token after any character
	// (a letter, a digit, '_'): "xghp_…" and "created\nghp_…" hold a token too. The
	// others must start a word (boundaryBefore).
	anywhere bool
	// inWord, when set, also vetoes a body whose prefix does not start a word, where an
	// identifier is likelier than a token ("framework_test_integrationSuite").
	inWord func(body string) bool
}

var prefixRules = []prefixRule{
	{rule: ruleAWSKey, prefixes: []string{"AKIA", "ASIA"}, body: isUpperDigit, min: 16},
	{rule: ruleGitHub, prefixes: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_"}, body: isAlnum, min: 36, anywhere: true},
	{rule: ruleGitHub, prefixes: []string{"github_pat_"}, body: isWord, min: 22, anywhere: true},
	{rule: ruleGitLab, prefixes: []string{"glpat-", "glptt-", "gldt-", "glrt-", "glcbt-", "gloas-"}, body: isB64URL, min: 20, dots: true, anywhere: true},
	{rule: ruleAnthropic, prefixes: []string{"sk-ant-"}, body: isB64URL, min: 20, anywhere: true, inWord: mixedCase},
	// sk- starts a word; sk-proj- (a project key) may stand anywhere.
	{rule: ruleOpenAI, prefixes: []string{"sk-"}, body: isB64URL, min: 17, valid: notKebab, anywhere: true, inWord: projectKey},
	{rule: ruleSlack, prefixes: []string{"xoxa-", "xoxb-", "xoxe-", "xoxp-", "xoxr-", "xoxs-", "xapp-"}, body: isSlackChar, min: 10, anywhere: true},
	{rule: ruleGoogle, prefixes: []string{"AIza"}, body: isB64URL, min: 35},
	{rule: ruleStripe, prefixes: []string{"sk_live_", "sk_test_", "rk_live_", "rk_test_"}, body: isAlnum, min: 16, anywhere: true, inWord: hasDigit},
	{rule: ruleNPM, prefixes: []string{"npm_"}, body: isAlnum, min: 36},
	{rule: rulePyPI, prefixes: []string{"pypi-"}, body: isB64URL, min: 50},
	{rule: ruleHuggingFace, prefixes: []string{"hf_"}, body: isAlnum, min: 30},
	{rule: ruleAge, prefixes: []string{"AGE-SECRET-KEY-1"}, body: isUpperDigit, min: 50, anywhere: true},
}

func findPrefixed(sc *scanner) {
	s := sc.s
	for _, r := range prefixRules {
		for _, p := range r.prefixes {
			for off := 0; ; {
				k := strings.Index(s[off:], p)
				if k < 0 {
					break
				}
				i := off + k
				off = i + len(p)
				inWord := !boundaryBefore(s, i)
				if inWord && !r.anywhere {
					continue
				}
				j := i + len(p)
				e := spanWhile(s, j, r.body)
				for r.dots && e+1 < len(s) && s[e] == '.' && r.body(s[e+1]) {
					e = spanWhile(s, e+1, r.body)
				}
				// A prefix inside a run that failed has no longer run after it: go on
				// after the run, which keeps "sk-sk-sk-…" linear.
				off = e
				body := s[j:e]
				if len(body) < r.min || (r.valid != nil && !r.valid(body)) || (inWord && r.inWord != nil && !r.inWord(body)) {
					continue
				}
				sc.add(i, e, r.rule)
			}
		}
	}
}

// mixedCase reports whether body has upper- and lower-case letters, as every random
// base64url key of 20 characters or more has, and kebab-case words do not.
func mixedCase(body string) bool {
	u, l := false, false
	for i := 0; i < len(body); i++ {
		u = u || isUpper(body[i])
		l = l || isLower(body[i])
	}
	return u && l
}

// projectKey reports whether an sk- body is an OpenAI project key's, "proj-" and a
// random body: the one sk- key distinctive enough to be found inside a word.
func projectKey(body string) bool {
	rest, ok := strings.CutPrefix(body, "proj-")
	return ok && mixedCase(rest)
}

func hasDigit(body string) bool {
	for i := 0; i < len(body); i++ {
		if isDigit(body[i]) {
			return true
		}
	}
	return false
}

// notKebab rejects an sk- body made of lower-case words joined by hyphens
// ("sk-learn-compatible-wrapper"): real keys always have digits or capitals.
func notKebab(body string) bool {
	hyphen := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case c == '-':
			hyphen = true
		case 'a' <= c && c <= 'z':
		default:
			return true
		}
	}
	return !hyphen
}

// findJWT finds three base64url segments joined by dots, the first starting "eyJ" (a
// JSON object), the first two of 10 or more characters and the signature of 10 or more,
// or empty when the payload also starts "eyJ" (an unsigned token).
func findJWT(sc *scanner) {
	s := sc.s
	for off := 0; ; {
		k := strings.Index(s[off:], "eyJ")
		if k < 0 {
			return
		}
		i := off + k
		off = i + 3
		inWord := i > 0 && (isB64URL(s[i-1]) || s[i-1] == '.') && escapeBefore(s, i) == 0
		e1 := spanWhile(s, i, isB64URL)
		if e1-i < 10 || e1 >= len(s) || s[e1] != '.' {
			continue
		}
		e2 := spanWhile(s, e1+1, isB64URL)
		if e2-e1-1 < 10 || e2 >= len(s) || s[e2] != '.' {
			continue
		}
		e3 := spanWhile(s, e2+1, isB64URL)
		if e3-e2-1 < 10 && !strings.HasPrefix(s[e1+1:], "eyJ") {
			continue
		}
		if inWord && !jwtHeader(s[i:e1]) {
			continue
		}
		sc.add(i, e3, ruleJWT)
		off = e3
	}
}

// jwtHeader reports whether seg, the first segment of a token that does not start a
// word, decodes to a JOSE header: a JSON object with an "alg" member (RFC 7515 4.1.1),
// or "typ" or "enc" when "alg" comes after 190 bytes of other members.
// Inside a word "eyJ" may start a dotted name (org.monkeyJar.…); a header is a token.
func jwtHeader(seg string) bool {
	seg = seg[:min(len(seg), 256)]
	dec, err := base64.RawURLEncoding.DecodeString(seg[:len(seg)/4*4])
	if err != nil {
		return false
	}
	h := string(dec)
	return strings.Contains(h, `"alg"`) || strings.Contains(h, `"typ"`) || strings.Contains(h, `"enc"`)
}

const pemBegin = "-----BEGIN "

// findPEM finds a "-----BEGIN … PRIVATE KEY-----" header (or "PRIVATE KEY BLOCK", PGP)
// that ends its line, and removes it through the next END line of a private key, or to
// the end of the text when there is none but a key body follows (fail closed). A header
// followed by anything else on its line, as in a string literal in code that looks for
// it, is not a block.
func findPEM(sc *scanner) {
	s := sc.s
	// noEnd is where pemEnd found no END line: there is none after it either.
	noEnd := len(s) + 1
	for off := 0; ; {
		k := strings.Index(s[off:], pemBegin)
		if k < 0 {
			return
		}
		i := off + k
		off = i + len(pemBegin)
		he := pemLabelEnd(s, off)
		if he < 0 {
			continue
		}
		body := he + 5
		if body < len(s) && !atLineBreak(s, body) {
			continue
		}
		end := -1
		if body < noEnd {
			end = pemEnd(s, body)
		}
		if end < 0 {
			noEnd = min(noEnd, body)
			if !plausiblePEMBody(s, body) {
				continue
			}
			end = len(s)
		}
		sc.add(i, end, rulePEM)
		off = end
	}
}

// pemLabelEnd returns the index of the "-----" that closes a private-key label starting
// at i, or -1.
func pemLabelEnd(s string, i int) int {
	e := i
	for e < len(s) && e-i <= 48 && (isUpperDigit(s[e]) || s[e] == ' ') {
		e++
	}
	label := s[i:e]
	if !strings.HasSuffix(label, "PRIVATE KEY") && !strings.HasSuffix(label, "PRIVATE KEY BLOCK") {
		return -1
	}
	if !strings.HasPrefix(s[e:], "-----") {
		return -1
	}
	return e
}

// pemEnd returns the index just after the first private-key END line at or after i, or -1.
func pemEnd(s string, i int) int {
	for {
		k := strings.Index(s[i:], "-----END ")
		if k < 0 {
			return -1
		}
		i += k + len("-----END ")
		if e := pemLabelEnd(s, i); e >= 0 {
			return e + 5
		}
	}
}

// atLineBreak reports whether s[i:] starts with white space or an escaped line break
// ("\n" in a JSON or Go string).
func atLineBreak(s string, i int) bool {
	switch s[i] {
	case '\n', '\r', ' ', '\t':
		return true
	case '\\':
		return i+1 < len(s) && (s[i+1] == 'n' || s[i+1] == 'r')
	}
	return false
}

// plausiblePEMBody reports whether a key body (base64, or the headers of an encrypted
// key) follows the header whose line ends at i.
func plausiblePEMBody(s string, i int) bool {
	for i < len(s) {
		if s[i] == '\\' && i+1 < len(s) && (s[i+1] == 'n' || s[i+1] == 'r') {
			i += 2
		} else if isSpace(s[i]) {
			i++
		} else {
			break
		}
	}
	return strings.HasPrefix(s[i:], "Proc-Type:") || spanWhile(s, i, isB64)-i >= 16
}

// findBase64PEM finds a base64-encoded PEM private key, as in a kubeconfig's
// client-key-data or a Kubernetes secret: "LS0tLS1CRUdJTi" is "-----BEGIN" encoded.
func findBase64PEM(sc *scanner) {
	s := sc.s
	const anchor = "LS0tLS1CRUdJTi"
	for off := 0; ; {
		k := strings.Index(s[off:], anchor)
		if k < 0 {
			return
		}
		i := off + k
		off = i + len(anchor)
		if i > 0 && isB64(s[i-1]) && escapeBefore(s, i) == 0 {
			continue
		}
		e := spanWhile(s, i, isB64)
		head := s[i:min(e, i+64)]
		dec, err := base64.StdEncoding.DecodeString(head[:len(head)/4*4])
		if err != nil || !strings.Contains(string(dec), "PRIVATE KEY") {
			continue
		}
		sc.add(i, e, rulePEM)
		off = e
	}
}

// findURLPassword finds scheme://user:password@host and redacts the password only. The
// authority ends at white space, a slash, '?', '#', a quote or '<', and the password runs
// to its last '@', so a password with an '@' goes entirely. A URL in JSON kept as text may
// have its slashes escaped (scheme:\/\/user:password@host).
func findURLPassword(sc *scanner) {
	findURLPasswordAfter(sc, "://")
	findURLPasswordAfter(sc, `:\`)
}

// findURLPasswordAfter finds the URLs whose "://" starts with sep: "://" itself, or ":\"
// for the slashes escaped once or more (":\/\/", ":\\\/\\\/" in a JSON string inside a JSON
// string kept as text).
func findURLPasswordAfter(sc *scanner, sep string) {
	s := sc.s
	for off := 0; ; {
		k := strings.Index(s[off:], sep)
		if k < 0 {
			return
		}
		i := off + k
		off = i + len(sep)
		p := i + 1
		if sep != "://" {
			if p = escapedSlashes(s, p); p < 0 {
				continue
			}
		} else {
			p = i + 3
		}
		b := i
		for b > 0 && isSchemeChar(s[b-1]) {
			b--
		}
		for b < i && !isLetter(s[b]) {
			b++
		}
		if b == i {
			continue
		}
		e := p
		for e < len(s) && !isAuthorityStop(s[e]) {
			e++
		}
		at := strings.LastIndexByte(s[p:e], '@')
		if at < 0 {
			continue
		}
		at += p
		colon := colonOutsideMarkers(s, p, at)
		if colon < 0 {
			continue
		}
		vs := colon + 1
		if vs >= at || hasMarker(s[vs:at]) || isPlaceholder(s[vs:at]) {
			continue
		}
		sc.add(vs, at, ruleURLPassword)
		off = at
	}
}

// escapedSlashes returns the index after two escaped slashes ("\/\/", "\\\/\\\/") that
// start at i, or -1.
func escapedSlashes(s string, i int) int {
	for range 2 {
		j := i
		for j < len(s) && s[j] == '\\' {
			j++
		}
		if j == i || j >= len(s) || s[j] != '/' {
			return -1
		}
		i = j + 1
	}
	return i
}

func isAuthorityStop(c byte) bool {
	switch c {
	case '/', '?', '#', '"', '\'', '`', '<', '>', '\\', ' ', '\t', '\n', '\r', '\f', '\v':
		return true
	}
	return c < 0x20
}

// colonOutsideMarkers returns the index of the first ':' in s[i:end] that is not inside
// a [REDACTED:…] marker, or -1.
func colonOutsideMarkers(s string, i, end int) int {
	for i < end {
		if strings.HasPrefix(s[i:end], markerPrefix) {
			k := strings.IndexByte(s[i:end], ']')
			if k < 0 {
				return -1
			}
			i += k + 1
			continue
		}
		if s[i] == ':' {
			return i
		}
		i++
	}
	return -1
}

// hasMarker reports whether v holds a [REDACTED:…] marker. A value with a marker in it
// is never redacted: either an earlier pass redacted the whole value (and the marker is
// all of it), or it redacted a part and judged the rest, and a value judged once is not
// judged again. This is what makes every pass after the first find nothing.
func hasMarker(v string) bool { return strings.Contains(v, markerPrefix) }

var webhookKinds = []string{"services/", "workflows/", "triggers/"}

// findSlackWebhook redacts the secret path of a Slack incoming-webhook URL, keeping
// "https://hooks.slack.com/services/".
func findSlackWebhook(sc *scanner) {
	s := sc.s
	const host = "hooks.slack.com/"
	for off := 0; ; {
		k := strings.Index(s[off:], host)
		if k < 0 {
			return
		}
		j := off + k + len(host)
		off = j
		for _, kind := range webhookKinds {
			if strings.HasPrefix(s[j:], kind) {
				j += len(kind)
				e := spanWhile(s, j, isWebhookChar)
				if e-j >= 8 {
					sc.add(j, e, ruleSlackWebhook)
					off = e
				}
				break
			}
		}
	}
}

// findBearer finds "Bearer <token>" (any case) with a token of 16 or more characters and
// redacts the token, keeping the word.
func findBearer(sc *scanner) {
	s, low := sc.s, sc.low()
	for off := 0; ; {
		k := strings.Index(low[off:], "bearer")
		if k < 0 {
			return
		}
		i := off + k
		off = i + 6
		if !boundaryBefore(s, i) || off >= len(s) || (s[off] != ' ' && s[off] != '\t') {
			continue
		}
		j := skipBlanks(s, off)
		e := spanWhile(s, j, isTokenChar)
		if e-j < 16 {
			continue
		}
		sc.add(j, e, ruleBearer)
		off = e
	}
}

// authSchemes are the HTTP authentication schemes whose credentials are one word;
// authParamSchemes take a list of parameters, all redacted to the end of the header.
var (
	authSchemes = map[string]bool{
		"bearer": true, "basic": true, "token": true, "bot": true, "apikey": true, "api-key": true,
		"key": true, "sso-key": true, "negotiate": true, "ntlm": true, "dpop": true, "pat": true,
	}
	authParamSchemes = map[string]bool{
		"digest": true, "oauth": true, "aws4-hmac-sha256": true, "hmac": true, "signature": true,
		"mutual": true, "hoba": true, "vapid": true, "sharedkey": true,
	}
)

// findAuthorization finds an Authorization header (also Proxy-Authorization, and as a
// JSON member or an assignment) and redacts its credentials, keeping the scheme: any
// credentials after a known scheme, or a lone value that looks like a token.
func findAuthorization(sc *scanner) {
	s, low := sc.s, sc.low()
	const name = "authorization"
	for off := 0; ; {
		k := strings.Index(low[off:], name)
		if k < 0 {
			return
		}
		i := off + k
		off = i + len(name)
		var encl byte
		if i > 0 && isQuote(s[i-1]) {
			encl = s[i-1]
		}
		p := off
		if p < len(s) && s[p] == '\\' && p+1 < len(s) && isQuote(s[p+1]) {
			p += 2
			encl = 0
		} else if p < len(s) && isQuote(s[p]) {
			p++
			encl = 0
		}
		p = skipBlanks(s, p)
		if p >= len(s) || (s[p] != ':' && s[p] != '=') {
			continue
		}
		p = skipBlanks(s, p+1)
		if p < len(s) && s[p] == '\\' && p+1 < len(s) && isQuote(s[p+1]) {
			encl, p = s[p+1], p+2
		} else if p < len(s) && isQuote(s[p]) {
			encl, p = s[p], p+1
		}
		we := wordEnd(s, p)
		if we == p {
			continue
		}
		// A scheme is a known word followed by a blank; anything else is judged as a
		// bare credential, which must be made of token characters only.
		scheme := ""
		if we < len(s) && isBlank(s[we]) {
			scheme = low[p:we]
		}
		rule := ruleAuthorization
		var cs, ce int
		switch {
		case authSchemes[scheme]:
			if scheme == "bearer" {
				rule = ruleBearer
			}
			cs = skipBlanks(s, we)
			ce = wordEnd(s, cs)
		case authParamSchemes[scheme]:
			cs = skipBlanks(s, we)
			ce = restEnd(s, cs, encl)
		default:
			bare := s[p:we]
			if spanWhile(bare, 0, isTokenChar) < len(bare) || (!looksRandom(bare) && !(len(bare) >= 8 && hasDigitAndLetter(bare))) {
				continue
			}
			cs, ce = p, we
		}
		off = max(off, ce)
		if cs >= ce || hasMarker(s[cs:ce]) || isPlaceholder(s[cs:ce]) {
			continue
		}
		sc.add(cs, ce, rule)
	}
}

// curlUserFlags are curl's flags for user:password.
var curlUserFlags = []string{" -u ", " --user ", " --user="}

// findCurlUser finds curl's -u/--user user:password on a line that runs curl, and
// redacts the password. It looks at each line with "curl" once, from "curl" to the end of
// the line.
func findCurlUser(sc *scanner) {
	s := sc.s
	for off := 0; ; {
		k := strings.Index(s[off:], "curl")
		if k < 0 {
			return
		}
		c := off + k
		le := lineEnd(s, c)
		off = le
		for _, flag := range curlUserFlags {
			for from := c; ; {
				k := strings.Index(s[from:le], flag)
				if k < 0 {
					break
				}
				p := skipBlanks(s, from+k+len(flag))
				from = p
				var q byte
				if p < le && isQuote(s[p]) {
					q, p = s[p], p+1
				}
				e := p
				for e < le && !isSpace(s[e]) && !(q != 0 && s[e] == q) && !(q == 0 && isQuote(s[e])) {
					e++
				}
				colon := colonOutsideMarkers(s, p, e)
				if colon < 0 {
					continue
				}
				vs := colon + 1
				if vs >= e || hasMarker(s[vs:e]) || isPlaceholder(s[vs:e]) || (allDigits(s[p:colon]) && allDigits(s[vs:e])) {
					continue
				}
				sc.add(vs, e, ruleBasicAuth)
			}
		}
	}
}
