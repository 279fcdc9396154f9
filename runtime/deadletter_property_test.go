package runtime_test

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/redact/redacttest"
)

// TestPropertyDeadLetterRedacted: a rejected event's body, however the secret stands in
// it (after any character, as a JSON string's content, in a JSON string inside one, in a
// body that is no JSON at all), reaches its dead letter without the secret whenever the
// redactor promises it, as an entry's would; and so do the subject and the reason.
func TestPropertyDeadLetterRedacted(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := redacttest.DrawSecret(t)
		b := redacttest.DrawBefore(t)
		after := redacttest.DrawAfter(t, s)
		if !redacttest.Promised(s, b) {
			t.Skip("not promised")
		}
		quote := redacttest.DrawQuote(t)
		logical := "created" + redacttest.Unquote(b.Raw) + s.Text + redacttest.Unquote(after)
		inner := `{"log":` + quote(logical) + `}`
		var body string
		switch shape := rapid.IntRange(0, 3).Draw(t, "shape"); shape {
		case 0: // properties of the wrong shape, the secret in a string
			body = `{"id":"e1","type":"tool.execute.after","properties":7,"log":` + quote(logical) + `}`
		case 1: // a tool's output that is JSON, as a string
			body = `{"id":"e1","type":"session.status","properties":{"status":` + quote(inner) + `}}`
		case 2: // truncated: no JSON document, read as text
			body = `{"id":"e1","type":"tool.execute.after","properties":{"output":` + quote(logical)
		default: // no JSON at all
			body = "garbage " + b.Raw + s.Text + after
		}
		subject := "opencode.h1.event.tool.execute.after"
		_, err := runtime.DecodeEvent("opencode", subject, []byte(body))
		if err == nil {
			t.Fatalf("body decoded, want a rejection: %s", body)
		}
		rj := runtime.Reject(9, subject, []byte(body), err)
		dl := rj.DeadLetter()
		for what, v := range map[string]string{"body": string(dl.Body), "reason": dl.Reason, "subject": dl.Subject} {
			if strings.Contains(v, s.Core) {
				t.Fatalf("the %s secret survived in the dead letter's %s\n in: %s\nout: %s", s.Rule, what, body, v)
			}
		}
		if rj.Redacted == 0 {
			t.Fatalf("Redacted = 0 for a body with a %s secret", s.Rule)
		}
	})
}

// TestDeadLetterSubjectAndHeaderRedacted: a secret in a bad subject or Host-Seq header is
// quoted by the reason; the dead letter and the log keep neither.
func TestDeadLetterSubjectAndHeaderRedacted(t *testing.T) {
	const tok = "ghp_R8x2Kq9LmZ4vT7wN1pB6yC3dF5gH0jS2aE4u"
	subject := "opencode." + tok + ".evt.x" // no ".event.": rejected, quoted by the reason
	_, err := runtime.DecodeEvent("opencode", subject, []byte(`{"id":"e","type":"x"}`))
	if err == nil {
		t.Fatal("a subject without .event. decoded")
	}
	dl := runtime.Reject(1, subject, []byte(`{}`), err).DeadLetter()
	if strings.Contains(dl.Subject+dl.Reason, "R8x2Kq9") {
		t.Errorf("dead letter keeps the token: subject %q reason %q", dl.Subject, dl.Reason)
	}
}
