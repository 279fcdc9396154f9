package redacttest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"pgregory.net/rapid"
)

// A Secret is one secret in a shape a rule of runtime/redact removes.
type Secret struct {
	Rule string // the rule's name, as in its marker
	Text string // the text that holds the secret (a token, "password=…", "Bearer …")
	Core string // the part that must not survive redaction, not even in a container
	// Anywhere: the secret has a distinctive prefix and is a secret after any character;
	// the others are promised only at the start of a word (after nothing, a character that
	// is not a letter, digit or '_', or a JSON escape).
	Anywhere bool
	// NoSlash: the secret is an assignment, whose name after a '/' is a path
	// (/etc/passwd), not a key.
	NoSlash bool
	// Prose: the value follows "key: " or "key = " with a space, as in YAML and prose,
	// and is a secret only when it ends its line ("password: hunter2 at noon" is prose).
	Prose bool
}

const (
	upperDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	alnum       = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b64url      = alnum + "-_"
)

// str draws n characters of set, with one of each of must at random places, so that a
// drawn key has the traits every real one of its kind has (digits, both cases).
func str(t *rapid.T, label, set string, lo, hi int, must ...string) string {
	n := rapid.IntRange(lo, hi).Draw(t, label+"-len")
	b := []byte(rapid.StringOfN(rapid.SampledFrom([]rune(set)), n, n, -1).Draw(t, label))
	for i, m := range must {
		c := rapid.SampledFrom([]byte(m)).Draw(t, fmt.Sprintf("%s-must%d", label, i))
		b[rapid.IntRange(0, len(b)-1).Draw(t, fmt.Sprintf("%s-at%d", label, i))] = c
	}
	return string(b)
}

const (
	upper  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	lower  = "abcdefghijklmnopqrstuvwxyz"
	digits = "0123456789"
)

// Kinds are the secret shapes DrawSecret draws from, one per rule (and per prefix family).
var Kinds = []string{
	"aws-access-key", "github-token", "github-pat", "gitlab-token", "anthropic-key", "openai-project-key",
	"openai-key", "slack-token", "google-api-key", "stripe-key", "npm-token", "pypi-token",
	"huggingface-token", "age-secret-key", "jwt", "password-assignment", "token-assignment",
	"bearer", "url-password",
}

// DrawSecret draws one secret of a kind of Kinds.
func DrawSecret(t *rapid.T) Secret {
	kind := rapid.SampledFrom(Kinds).Draw(t, "kind")
	return secretOf(t, kind)
}

// SecretOf draws a secret of kind, one of Kinds.
func SecretOf(t *rapid.T, kind string) Secret { return secretOf(t, kind) }

func secretOf(t *rapid.T, kind string) Secret {
	pick := func(xs ...string) string { return rapid.SampledFrom(xs).Draw(t, kind+"-prefix") }
	tok := func(rule, prefix, body string, anywhere bool) Secret {
		return Secret{Rule: rule, Text: prefix + body, Core: body, Anywhere: anywhere}
	}
	switch kind {
	case "aws-access-key":
		return tok("aws-access-key", pick("AKIA", "ASIA"), str(t, kind, upperDigits, 16, 16, digits), false)
	case "github-token":
		return tok("github-token", pick("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), str(t, kind, alnum, 36, 40), true)
	case "github-pat":
		return tok("github-token", "github_pat_", str(t, kind, alnum+"_", 22, 82), true)
	case "gitlab-token":
		return tok("gitlab-token", pick("glpat-", "glptt-", "gldt-", "glrt-", "glcbt-", "gloas-"), str(t, kind, b64url, 20, 30, alnum), true)
	case "anthropic-key":
		return tok("anthropic-key", "sk-ant-", "api03-"+str(t, kind, b64url, 40, 95, upper, lower), true)
	case "openai-project-key":
		return tok("openai-key", "sk-proj-", str(t, kind, b64url, 40, 156, upper, lower, digits), true)
	case "openai-key":
		return tok("openai-key", "sk-", str(t, kind, alnum, 20, 48, upper, digits), false)
	case "slack-token":
		body := str(t, kind+"-team", digits, 10, 13) + "-" + str(t, kind+"-id", digits, 10, 13) + "-" + str(t, kind, alnum, 24, 24)
		return tok("slack-token", pick("xoxa-", "xoxb-", "xoxe-", "xoxp-", "xoxr-", "xoxs-", "xapp-"), body, true)
	case "google-api-key":
		return tok("google-api-key", "AIza", str(t, kind, b64url, 35, 35, alnum), false)
	case "stripe-key":
		return tok("stripe-key", pick("sk_live_", "sk_test_", "rk_live_", "rk_test_"), str(t, kind, alnum, 24, 99, digits), true)
	case "npm-token":
		return tok("npm-token", "npm_", str(t, kind, alnum, 36, 36), false)
	case "pypi-token":
		return tok("pypi-token", "pypi-", "AgEIcHlwaS5vcmc"+str(t, kind, b64url, 50, 120), false)
	case "huggingface-token":
		return tok("huggingface-token", "hf_", str(t, kind, alnum, 34, 34), false)
	case "age-secret-key":
		return tok("age-secret-key", "AGE-SECRET-KEY-1", str(t, kind, upperDigits, 58, 58), true)
	case "jwt":
		enc := base64.RawURLEncoding.EncodeToString
		head := enc([]byte(`{"alg":"` + pick("HS256", "RS256", "ES256", "EdDSA") + `","typ":"JWT"}`))
		payload := enc([]byte(`{"sub":"` + str(t, kind+"-sub", alnum, 8, 20) + `","iat":1516239022}`))
		sig := str(t, kind+"-sig", b64url, 43, 86, alnum)
		return Secret{Rule: "jwt", Text: head + "." + payload + "." + sig, Core: payload + "." + sig, Anywhere: true}
	case "password-assignment":
		name := pick("password", "DB_PASSWORD", "passwd", "client_secret", "PASSPHRASE", "db_pwd")
		sep := rapid.SampledFrom([]string{"=", ": ", ":=", " = "}).Draw(t, "sep")
		v := str(t, kind, alnum+"!#%+", 10, 24, digits, lower)
		return Secret{Rule: "assignment", Text: name + sep + v, Core: v, NoSlash: true, Prose: strings.Contains(sep, " ")}
	case "token-assignment":
		name := pick("api_key", "API_TOKEN", "access_token", "x-api-key", "ENCRYPTION_KEY", "credentials")
		sep := rapid.SampledFrom([]string{"=", ": ", ":="}).Draw(t, "sep")
		v := str(t, kind, alnum, 24, 40, digits, upper, lower)
		return Secret{Rule: "assignment", Text: name + sep + v, Core: v, NoSlash: true, Prose: strings.Contains(sep, " ")}
	case "bearer":
		v := str(t, kind, alnum+"-._~", 20, 60, alnum)
		return Secret{Rule: "bearer", Text: pick("Bearer ", "bearer ") + v, Core: v}
	case "url-password":
		v := str(t, kind, alnum, 12, 24, digits)
		return Secret{Rule: "url-password", Text: pick("postgres", "https", "redis") + "://bob:" + v + "@db.internal:5432", Core: v}
	}
	panic("redacttest: unknown kind " + kind)
}

// A Before is what stands right before a secret. In plain text it is Raw; in a JSON
// string, the logical character Char, which the encoder may write as an escape.
type Before struct {
	Name string
	Raw  string // as it stands in the text the redactor reads
	// Word: a letter, digit or '_' (Raw is one ASCII byte of those): only a secret with a
	// distinctive prefix is promised after it.
	Word bool
	// Slash: Raw ends in a '/' (also "\/"): an assignment's name after it is a path.
	Slash bool
}

// befores are the characters drawn before a secret: letters, digits, '_', '-',
// punctuation, every JSON escape (written as text, as JSON kept as text has them) and
// unicode.
var befores = func() []Before {
	var bs []Before
	for _, c := range "aZn tu0_" {
		if c != ' ' {
			bs = append(bs, Before{Name: "word " + string(c), Raw: string(c), Word: true})
		}
	}
	for _, c := range "-.,;:!?()[]{}<>|@#$%^&*+=~'\"` \t\n/" {
		bs = append(bs, Before{Name: fmt.Sprintf("punct %q", c), Raw: string(c), Slash: c == '/'})
	}
	for _, e := range []string{`\n`, `\t`, `\r`, `\b`, `\f`, `\"`, `\\`, `\/`, `\u00e9`, `\u003c`, `\u2028`, `\\n`} {
		bs = append(bs, Before{Name: "escape " + e, Raw: e, Slash: e == `\/`})
	}
	for _, u := range []string{"é", "日本", "🙂", "\u00a0", "Ω"} {
		bs = append(bs, Before{Name: "unicode " + u, Raw: u})
	}
	return bs
}()

// Befores returns every character DrawBefore draws from.
func Befores() []Before { return slices.Clone(befores) }

// DrawBefore draws what stands before a secret.
func DrawBefore(t *rapid.T) Before {
	return rapid.SampledFrom(befores).Draw(t, "before")
}

// Promised reports whether runtime/redact promises to remove s after b.
func Promised(s Secret, b Before) bool {
	switch {
	case b.Word:
		return s.Anywhere
	case b.Slash:
		return !s.NoSlash
	}
	return true
}

// afters are what may follow a secret: nothing, white space, punctuation that ends a
// word, a JSON escape.
var afters = []string{"", " done", "\n", `\n`, `\t`, `"`, ".", ", next", ";", ")", "'"}

// lineEnds are what may follow a Prose secret: its line ends.
var lineEnds = []string{"", "\n", `\n`, "\r\n", " # a comment"}

// DrawAfter draws what follows s.
func DrawAfter(t *rapid.T, s Secret) string {
	if s.Prose {
		return rapid.SampledFrom(lineEnds).Draw(t, "after")
	}
	return rapid.SampledFrom(afters).Draw(t, "after")
}

// Quote writes s as a JSON string literal. asciiOnly escapes every non-ASCII character
// (as Python's json.dumps does), slash escapes '/' (as PHP's json_encode does); '<', '>'
// and '&' are escaped as \u003c… (as Go's encoding/json does).
func Quote(s string, asciiOnly, slash bool) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '/' && slash:
			b.WriteString(`\/`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == 0x2028 || r == 0x2029 || (asciiOnly && r >= 0x80 && r < 0x10000):
			fmt.Fprintf(&b, `\u%04x`, r)
		case asciiOnly && r >= 0x10000:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// DrawQuote draws how a JSON encoder writes strings and returns it as a function.
func DrawQuote(t *rapid.T) func(string) string {
	ascii := rapid.Bool().Draw(t, "ascii-only")
	slash := rapid.Bool().Draw(t, "escape-slash")
	return func(s string) string { return Quote(s, ascii, slash) }
}

// Unquote decodes a Before's Raw as the logical characters a JSON string holds: "\n" is
// a line break, "é" stays é. It is what a host's JSON encoder turns back into Raw.
func Unquote(raw string) string {
	if !strings.Contains(raw, `\`) {
		return raw
	}
	var s string
	if err := json.Unmarshal([]byte(`"`+raw+`"`), &s); err != nil {
		panic("redacttest: " + raw + " is no JSON string body: " + err.Error())
	}
	return s
}

// FalsePositives are texts the README and runtime/redact's documentation promise to
// leave alone: ordinary words and prose about secrets, hashes, UUIDs, digests, base64
// data, "sk-" in prose, a token word with no assignment, placeholders, code.
var FalsePositives = []string{
	"the password field is required",
	"Error: token: expired",
	"the token: expired",
	"secret: see vault",
	"api_key: see the docs",
	"Password: ********",
	`key := os.Getenv("API_KEY")`,
	`password := os.Getenv("DB_PASSWORD")`,
	"request id 123e4567-e89b-12d3-a456-426614174000",
	"commit 3f786850e387550fdab836ed7e6dc881de23001b",
	"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
	"pip install sk-learn && echo sk-learn-compatible-estimator",
	"ask-questions-first and risk-averse-defaults",
	"framework_test_integrationSuite and desk_live_reloadingEnabledFlag",
	"task-proj-migration-plan-final and mask-ant-colony-simulation-steps",
	"org.monkeyJungle.internalScheduler.anotherComponent",
	"PASSWORD=${DB_PASSWORD} TOKEN=$GITHUB_TOKEN API_KEY=<your-api-key>",
	"max_tokens: 4096 prompt_tokens: 1200",
	"Bearer tokens expire after an hour",
	"https://user@host.example.com/path and postgres://localhost:5432/app",
	"public_key: AAAAC3NzaC1lZDI1NTE5AAAAIGhdHWpDPV7S9X1x",
	"eyJhbGciOiJIUzI1NiJ9 alone is just a header",
	"highs_and_lows thighs_ ghost_ glpat glpat- xoxb- sk_live_ too short",
}
