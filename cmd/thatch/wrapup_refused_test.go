package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/runtime"
)

// TestWrapUpRefusalShown: a /thatch/compact whose reply lacks the token (rule 6) is not
// only a toast (issue 29, point 10): thatch logs it at warn with the session, the command
// and the reason, and thatch sessions shows it, in its table and in --json, also after a
// restart.
func TestWrapUpRefusalShown(t *testing.T) {
	r := newRig(t, "v1")
	logs := r.captureLog()
	r.start()
	ctx := r.ctx()
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
	must(t, r.host.Status(ctx, "ses_a", "busy"))
	_, err := r.host.Publish(ctx, "command.execute.before", map[string]any{"command": "thatch/compact", "sessionID": "ses_a", "arguments": ""})
	must(t, err)
	r.host.SetReply("ses_a", "Not yet: the migration is half done.")
	must(t, r.host.Status(ctx, "ses_a", "idle"))
	waitFor(t, "the warning toast", func() bool { return len(r.host.CallsTo("tui.showToast")) == 1 })

	const reason = "the last assistant message does not end with THATCH_COMPACT_READY"
	line := ""
	for _, l := range strings.Split(string(logs.Bytes()), "\n") {
		if strings.Contains(l, "wrap-up did not proceed") {
			line = l
		}
	}
	for _, want := range []string{"level=WARN", "session=ses_a", "command=thatch/compact", `reason="` + reason + `"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %s", line, want)
		}
	}

	check := func(when string) {
		t.Helper()
		var out bytes.Buffer
		must(t, client(ctx, r.cfg, "sessions", nil, &out))
		if !strings.Contains(out.String(), "WRAP-UP") || !strings.Contains(out.String(), "/thatch/compact refused at ") || !strings.Contains(out.String(), reason) {
			t.Errorf("%s: thatch sessions does not show the refusal:\n%s", when, out.String())
		}
		out.Reset()
		must(t, client(ctx, r.cfg, "sessions", []string{"--json"}, &out))
		var rows []runtime.SessionView
		must(t, json.Unmarshal(out.Bytes(), &rows))
		if len(rows) != 1 || rows[0].Refused == nil || rows[0].Refused.Command != runtime.WrapCompact || rows[0].Refused.Reason != reason || rows[0].Refused.At.IsZero() {
			t.Errorf("%s: thatch sessions --json: %s", when, out.String())
		}
	}
	check("after the refusal")
	r.stop()
	r.start()
	check("after a restart")
}
