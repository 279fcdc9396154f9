//go:build e2e

package commands

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The plugin shim, run by Node.js with the real @opencode-ai/plugin (make e2e), when thatch
// is not there: a tool call fails with a message that says what to do, a hook neither
// fails nor hangs the host's turn.
func TestShimWithoutThatch(t *testing.T) {
	modules := os.Getenv("THATCH_E2E_MODULES")
	if modules == "" {
		t.Fatal("THATCH_E2E_MODULES is unset: run make e2e")
	}
	refused, _ := net.Listen("tcp", "127.0.0.1:0")
	refusedAddr := refused.Addr().String()
	refused.Close() // nothing listens here
	silent, _ := net.Listen("tcp", "127.0.0.1:0")
	defer silent.Close() // accepts and never answers
	wrongToken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer wrongToken.Close()

	script := `import { Thatch } from "./plugin/thatch.js"
const hooks = await Thatch({})
if (process.argv[2] === "tool") try {
  await hooks.tool.thatch_get_extraction_payload.execute({}, { sessionID: "ses_x" })
  console.log("tool: no error")
} catch (e) {
  console.log("tool: " + e.message)
}
await hooks["tool.execute.after"]({ sessionID: "ses_x", callID: "c1", tool: "bash", args: {} }, { title: "", output: "x", metadata: {} })
console.log("hook: returned")
`
	for _, c := range []struct{ name, endpoint, want string }{
		{"refused", "http://" + refusedAddr, "thatch is not reachable at http://" + refusedAddr + " (ECONNREFUSED): is thatch serve running"},
		{"silent", "http://" + silent.Addr().String(), ""}, // the hook only: a tool waits a minute
		{"wrong token", wrongToken.URL, "thatch at " + wrongToken.URL + " refused the token in /nonexistent/shim.token: run thatch install"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			f := Plugin(c.endpoint, "/nonexistent/shim.token")
			must(t, os.MkdirAll(filepath.Join(dir, "plugin"), 0o755))
			must(t, os.WriteFile(filepath.Join(dir, f.Path), f.Content, 0o644))
			must(t, os.WriteFile(filepath.Join(dir, "run.mjs"), []byte(script), 0o644))
			must(t, os.Symlink(modules, filepath.Join(dir, "node_modules")))
			cmd := exec.Command("node", "run.mjs", map[bool]string{true: "tool", false: "hook"}[c.want != ""])
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("node: %v\n%s", err, out)
			}
			t.Logf("%s", out)
			if c.want != "" && !strings.Contains(string(out), "tool: "+c.want) || !strings.Contains(string(out), "hook: returned") {
				t.Fatalf("got:\n%s\nwant the tool to fail with %q and the hook to return", out, c.want)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
