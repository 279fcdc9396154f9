package redact

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// planted are secrets FuzzText puts into the fuzzed text, on a line of their own; probe
// is the part that must not survive.
var planted = []struct{ text, probe string }{
	{ghToken, ghToken[4:]},
	{ghPAT, ghPAT[11:]},
	{awsKey, awsKey[4:]},
	{glToken, glToken[6:]},
	{openaiKey, openaiKey[8:]},
	{anthropicKey, anthropicKey[13:]},
	{slackToken, slackToken[5:]},
	{googleKey, googleKey[4:]},
	{stripeKey, stripeKey[8:]},
	{jwt, jwt[37:]},
	{pemKey, pemBody[:40]},
	{"password=hunter2XY", "hunter2XY"},
	{"  db_password: 'Tr0ub4dor'", "Tr0ub4dor"},
	{"postgres://bob:S3cr3tPw@db:5432/app", "S3cr3tPw"},
	{"Authorization: Bearer " + opaque, opaque},
	{"<private>my home address</private>", "home address"},
}

func FuzzText(f *testing.F) {
	for _, s := range []string{
		"", "plain text", "token: expired", "a <private>b</private> c", "<priv<private>x</private>ate>y",
		"password=" + red("assignment") + "]x", "https://u:[REDACTED:x]:p@h", "-----BEGIN RSA PRIVATE KEY-----\\n",
		"key: |\n  " + red("assignment") + "\n", "curl -u a:b", "Authorization: Digest a=\"b\"",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.", "x_token=" + ghToken + "_secret=1",
		"\"password\\\": \\\"x", "ghp_" + strings.Repeat("A", 40) + "\xff",
	} {
		f.Add(s, uint8(0), uint16(0))
	}
	for i, p := range planted {
		f.Add(p.text, uint8(i), uint16(3))
	}
	f.Fuzz(func(t *testing.T, s string, pick uint8, at uint16) {
		p := planted[int(pick)%len(planted)]
		pos := int(at) % (len(s) + 1)
		for pos > 0 && pos < len(s) && !utf8.RuneStart(s[pos]) {
			pos--
		}
		in := s[:pos] + "\n" + p.text + "\n" + s[pos:]
		out, counts := Text(in)
		if strings.Count(out, p.probe) > strings.Count(s, p.probe) {
			t.Errorf("planted %q survived in %q", p.probe, out)
		}
		if counts.Total() == 0 && out != in {
			t.Errorf("changed with no counts: %q", out)
		}
		if utf8.ValidString(in) && !utf8.ValidString(out) {
			t.Errorf("invalid UTF-8 out of valid input: %q", out)
		}
		for _, x := range []string{s, out} {
			checkOnePass(t, x)
		}
	})
}

func FuzzJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `"x"`, `{"password":"hunter2","a":[1,{"token":"` + opaque + `"}]}`,
		`{"out":"<private>x</private> ghp_` + strings.Repeat("a", 36) + `"}`, `{"pin": -1.5e3, "password": 0}`,
		`{"a":"\u003cprivate\u003e\ud83d\ude00"}`, `not json password=x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, _ := JSON(raw)
		valid := json.Valid(raw)
		if valid && !json.Valid(out) {
			t.Fatalf("JSON(%q) = %q, not valid JSON", raw, out)
		}
		again, c := JSON(out)
		if valid && (string(again) != string(out) || c != nil) {
			t.Errorf("not idempotent: %q -> %q -> %q %v", raw, out, again, c)
		}
	})
}
