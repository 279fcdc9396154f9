package daemontest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime"
)

// secretOutput is a tool output full of Secrets, as a careless session produces.
const secretOutput = `$ git remote -v
origin	https://ghp_R8x2Kq9LmZ4vT7wN1pB6yC3dF5gH0jS2aE4u@github.com/acme/api.git (fetch)
$ cat .env
AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE
OPENAI_API_KEY=sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90
SLACK_TOKEN=xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx
DB_PASSWORD=hunter2-correct-horse
-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB
-----END RSA PRIVATE KEY-----
curl -H "Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c" https://api.acme.dev
ship to <private>my-private-home-address</private> please
the build passed`

// TestNoSecretReachesTheDisk writes tool calls, a title, a bad event and memories full of
// secrets through the daemon, lets an extraction read them, then reads every byte of every
// file in the data folder, and the debug log: no secret anywhere, and the extraction's
// payload held none either (rule 13).
func TestNoSecretReachesTheDisk(t *testing.T) {
	r := New(t, "v1")
	logs := &SyncBuf{}
	r.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r.Host.Model = true
	var payload string
	r.Host.Write = func(ctx context.Context, child string, a runtime.Answer, call func(string, any) (runtime.Answer, *runtime.HostError)) runtime.Metrics {
		payload = a.Output
		if _, herr := call(runtime.ToolRemember, map[string]any{"content": "The deploy token is ghp_R8x2Kq9LmZ4vT7wN1pB6yC3dF5gH0jS2aE4u; DB_PASSWORD=hunter2-correct-horse", "tags": []string{"deploy"}}); herr != nil {
			t.Errorf("memory_remember: %v", herr)
		}
		return runtime.Metrics{New: 1}
	}
	r.Start()
	ctx := r.Ctx()
	must(t, r.Host.Hello(ctx, "b1"))
	must(t, r.Host.Created(ctx, "ses_a", "", "fix AKIAIOSFODNN7EXAMPLE leak", r.Host.Dir))
	_, err := r.Host.Publish(ctx, "tool.execute.after", map[string]any{"sessionID": "ses_a", "callID": "c1", "tool": "bash",
		"args":  map[string]any{"command": "export GITHUB_TOKEN=ghp_R8x2Kq9LmZ4vT7wN1pB6yC3dF5gH0jS2aE4u && ./deploy.sh --verbose", "description": "DB_PASSWORD=hunter2-correct-horse"},
		"title": "./deploy.sh --verbose", "output": secretOutput, "metadata": map[string]any{"output": secretOutput, "exit": 0}})
	must(t, err)
	// A body thatch rejects is kept for a person to read: redacted too.
	must(t, r.Host.PublishRaw(ctx, "tool.execute.after", []byte(`{"id":"evt_bad","type":"tool.execute.after","properties":{"sessionID":7,"output":"`+Secrets[0]+`"}}`), "evt_bad", 0))
	must(t, r.Host.Status(ctx, "ses_a", "idle"))
	waitFor(t, "the extraction toast", func() bool { return len(r.Host.CallsTo("tui.showToast")) > 0 })
	if _, herr, err := r.Host.Tool(ctx, "thatch", runtime.ToolRemember, "ses_a", map[string]any{"content": "Use sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90 for the staging API."}); err != nil || herr != nil {
		t.Fatal(err, herr)
	}
	// A forget's reason and a branch name are text a model (or a person) wrote too.
	a, herr, err := r.Host.Tool(ctx, "thatch", runtime.ToolRemember, "ses_a", map[string]any{"content": "The cache is off on this branch.", "branch": Secrets[0]})
	if err != nil || herr != nil {
		t.Fatal(err, herr)
	}
	if _, herr, err := r.Host.Tool(ctx, "thatch", runtime.ToolForget, "ses_a", map[string]any{"id": a.Metadata.(map[string]any)["id"], "reason": "leaked AKIAIOSFODNN7EXAMPLE and DB_PASSWORD=hunter2-correct-horse"}); err != nil || herr != nil {
		t.Fatal(err, herr)
	}
	if s := r.Status(); s.Redacted < 10 || s.Rejected != 1 {
		t.Errorf("status counts %d redactions and %d rejected events", s.Redacted, s.Rejected)
	}
	if !strings.Contains(payload, "[REDACTED") || !strings.Contains(payload, "the build passed") {
		t.Errorf("the payload is not the redacted call:\n%s", payload)
	}
	mems := r.Memories(r.Host.Dir)
	if len(mems) != 2 || !strings.Contains(mems[0].Content+mems[1].Content, "[REDACTED") {
		t.Errorf("memories: %+v", mems)
	}
	// While thatch runs (the write-ahead logs hold the latest writes), then once it stopped.
	waitFor(t, "the status file", func() bool { _, err := os.Stat(filepath.Join(r.DataDir, daemon.StatusFile)); return err == nil })
	read := NoSecretIn(t, r.DataDir)
	for _, f := range []string{"thatch.db", "thatch.db-wal", "memories.db", "memories.db-wal", daemon.StatusFile} {
		if !read[f] {
			t.Errorf("%s was not there to read: %v", f, read)
		}
	}
	r.Stop()
	NoSecretIn(t, r.DataDir)
	for _, where := range []struct {
		name string
		data string
	}{{"the payload", payload}, {"the debug log", string(logs.Bytes())}} {
		for _, s := range Secrets {
			if strings.Contains(where.data, s) {
				t.Errorf("%s holds the secret %q", where.name, s)
			}
		}
	}
}
