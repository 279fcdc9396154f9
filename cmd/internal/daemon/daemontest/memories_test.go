package daemontest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime"
)

// TestSessionContextIsFrozen: a host that takes the session-start text itself gets the
// same text on every ask, even after the project's memories changed, and no reminder
// prompt; a session thatch has not seen yet gets its text from the host's word for the
// project.
func TestSessionContextIsFrozen(t *testing.T) {
	r := New(t, "v1")
	r.Start()
	ctx := r.Ctx()
	must(t, r.Host.PublishHello(ctx, "b1", runtime.Capabilities{Context: true}))
	must(t, r.Host.Created(ctx, "ses_a", "", "t", r.Host.Dir))
	if _, herr, err := r.Host.Tool(ctx, "thatch", runtime.ToolRemember, "ses_a", map[string]any{"content": "The build needs Go 1.26."}); err != nil || herr != nil {
		t.Fatal(err, herr)
	}
	ask := func(session string, extra map[string]any) string {
		t.Helper()
		p := map[string]any{"sessionID": session}
		for k, v := range extra {
			p[k] = v
		}
		var res struct {
			Text string `json:"text"`
		}
		must(t, r.TryAPI("session.context", p, &res))
		return res.Text
	}
	must(t, r.Host.Created(ctx, "ses_b", "", "t", r.Host.Dir))
	first := ask("ses_b", nil)
	if !strings.HasPrefix(first, "[thatch]") || !strings.Contains(first, "The build needs Go 1.26.") {
		t.Fatalf("session.context = %q", first)
	}
	if _, herr, err := r.Host.Tool(ctx, "thatch", runtime.ToolRemember, "ses_a", map[string]any{"content": "Never commit the vendor folder."}); err != nil || herr != nil {
		t.Fatal(err, herr)
	}
	if again := ask("ses_b", nil); again != first {
		t.Errorf("the text changed within a session:\n%s\n---\n%s", first, again)
	}
	for _, c := range r.Host.CallsTo("session.prompt") {
		if c.Params["noReply"] == true {
			t.Errorf("a context host got a reminder prompt: %v", c.Params)
		}
	}
	// Not seen yet: the host's directory names the project.
	if text := ask("ses_unseen", map[string]any{"directory": r.Host.Dir}); !strings.Contains(text, "Never commit the vendor folder.") {
		t.Errorf("an unseen session's text lacks its project's memories: %q", text)
	}
	if _, err := requestErr(r, "session.context", map[string]any{"sessionID": "ses_nobody"}); err == nil || !strings.Contains(err.Error(), "UnknownSessionError") {
		t.Errorf("an unknown session without a project: %v", err)
	}
}

// TestSecondServeRefused: one data folder serves one thatch serve at a time (rule 12).
func TestSecondServeRefused(t *testing.T) {
	r := New(t, "v1")
	r.Start()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := daemon.Serve(ctx, r.Cfg, testkit.Logger(t))
	if err == nil || !strings.Contains(err.Error(), r.DataDir) || !strings.Contains(err.Error(), "another thatch serve") {
		t.Fatalf("a second serve on %s: %v", r.DataDir, err)
	}
	r.Stop()
	r.Start() // the lock went with the first one
}

func requestErr(r *Rig, method string, params any) (json.RawMessage, error) {
	var raw json.RawMessage
	err := r.TryAPI(method, params, &raw)
	return raw, err
}
