//go:build e2e

package commands

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The plugin shim, run by Node.js with the real @opencode-ai/plugin (make e2e), when thatch
// is not there: a tool call fails with a message that says what to do, a hook neither
// fails nor hangs the host's turn, and the context hooks add nothing within their two
// seconds.
func TestShimWithoutThatch(t *testing.T) {
	refused, _ := net.Listen("tcp", "127.0.0.1:0")
	refusedAddr := refused.Addr().String()
	refused.Close() // nothing listens here
	silent, _ := net.Listen("tcp", "127.0.0.1:0")
	defer silent.Close() // accepts and never answers
	wrongToken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer wrongToken.Close()
	// The bridge runs, thatch does not: the bridge answers every call with an error.
	bridgeOnly := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"error":{"name":"UnavailableError","message":"thatch did not answer: nats: no responders available for request"}}`)
	}))
	defer bridgeOnly.Close()

	script := `import { Thatch } from "./plugin/thatch.js"
const hooks = await Thatch({ project: { id: "prj_x" }, directory: "/w", worktree: "/w" })
if (process.argv[2] === "tool") try {
  await hooks.tool.thatch_get_extraction_payload.execute({}, { sessionID: "ses_x" })
  console.log("tool: no error")
} catch (e) {
  console.log("tool: " + e.message)
}
await hooks["tool.execute.after"]({ sessionID: "ses_x", callID: "c1", tool: "bash", args: {} }, { title: "", output: "x", metadata: {} })
console.log("hook: returned")
for (let i = 1; i <= 2; i++) {
  let start = Date.now()
  const system = ["base"]
  await hooks["experimental.chat.system.transform"]({ sessionID: "ses_x", model: {} }, { system })
  console.log("system hook: " + JSON.stringify(system) + " in " + (Date.now() - start) + " ms")
}
let start = Date.now()
const context = []
await hooks["experimental.session.compacting"]({ sessionID: "ses_x" }, { context })
console.log("compacting hook: " + JSON.stringify(context) + " in " + (Date.now() - start) + " ms")
`
	hookLine := regexp.MustCompile(`(?m)^(system|compacting) hook: (.*) in (\d+) ms$`)
	for _, c := range []struct{ name, endpoint, want string }{
		{"refused", "http://" + refusedAddr, "thatch is not reachable at http://" + refusedAddr + " (ECONNREFUSED): is thatch serve running"},
		{"silent", "http://" + silent.Addr().String(), ""}, // the hooks only: a tool waits a minute
		{"wrong token", wrongToken.URL, "thatch at " + wrongToken.URL + " refused the token in /nonexistent/shim.token: run thatch install"},
		{"bridge without thatch", bridgeOnly.URL, "UnavailableError: thatch did not answer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := runShim(t, c.endpoint, "/nonexistent/shim.token", script, map[bool]string{true: "tool", false: "hook"}[c.want != ""])
			if c.want != "" && !strings.Contains(out, "tool: "+c.want) || !strings.Contains(out, "hook: returned") {
				t.Fatalf("got:\n%s\nwant the tool to fail with %q and the hook to return", out, c.want)
			}
			hooks := hookLine.FindAllStringSubmatch(out, -1)
			if len(hooks) != 3 {
				t.Fatalf("got:\n%s\nwant two system hooks and a compacting hook to return", out)
			}
			for _, h := range hooks {
				ms, _ := strconv.Atoi(h[3])
				if want := map[string]string{"system": `["base"]`, "compacting": `[]`}[h[1]]; h[2] != want || ms > 3000 {
					t.Errorf("the %s hook gave %s in %d ms, want %s within the hook's 2 s", h[1], h[2], ms, want)
				}
			}
		})
	}
}

// The context hooks with a bridge that answers: the system hook asks for a session's
// text once and gives the same text to every request of the session, keeps "" but not a
// failure, and keeps a bounded number of sessions; the compacting hook adds the memories
// and still reports the compaction.
func TestShimContext(t *testing.T) {
	const text = "[thatch] This session's tool calls are recorded.\n\nMemories of this project:\n- [mem_1] (command) make test"
	const memories = "Memories of this project:\n- [mem_1] (command) make test"
	var mu sync.Mutex
	var calls []string // path and body of each request
	failed := false
	bridge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer tok-1" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var req struct{ SessionID string }
		_ = json.Unmarshal(body, &req)
		mu.Lock()
		calls = append(calls, r.URL.Path+" "+string(body))
		fail := req.SessionID == "ses_fail" && !failed
		failed = failed || fail
		mu.Unlock()
		switch {
		case r.URL.Path == "/api/session.context" && fail:
			io.WriteString(w, `{"error":{"name":"UnavailableError","message":"thatch did not answer"}}`)
		case r.URL.Path == "/api/session.context" && req.SessionID == "ses_child":
			io.WriteString(w, `{"result":{"text":""}}`)
		case r.URL.Path == "/api/session.context":
			data, _ := json.Marshal(text)
			io.WriteString(w, `{"result":{"text":`+string(data)+`}}`)
		case r.URL.Path == "/api/memory.context":
			data, _ := json.Marshal(memories)
			io.WriteString(w, `{"result":{"text":`+string(data)+`}}`)
		case r.URL.Path == "/event":
			io.WriteString(w, `{"result":true}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer bridge.Close()
	token := filepath.Join(t.TempDir(), "shim.token")
	must(t, os.WriteFile(token, []byte("tok-1\n"), 0o600))

	script := `import { Thatch } from "./plugin/thatch.js"
const hooks = await Thatch({ project: { id: "prj_1" }, directory: "/w/proj", worktree: "/w/proj" })
const system = async (sessionID) => {
  const output = { system: ["base"] }
  await hooks["experimental.chat.system.transform"]({ sessionID, model: {} }, output)
  return output.system
}
const r = {}
r.first = await system("ses_a")
r.second = await system("ses_a")
r.together = await Promise.all([system("ses_b"), system("ses_b")])
r.child = [await system("ses_child"), await system("ses_child")]
r.failing = [await system("ses_fail"), await system("ses_fail"), await system("ses_fail")]
r.noSession = await system(undefined)
const titling = { system: ["You are a title generator. You output ONLY a thread title."] }
await hooks["experimental.chat.system.transform"]({ sessionID: "ses_a", model: {} }, titling)
r.title = titling.system
const compacting = { context: [] }
await hooks["experimental.session.compacting"]({ sessionID: "ses_a" }, compacting)
r.compacting = compacting.context
for (let i = 0; i < 1000; i++) await system("ses_many_" + i) // ses_a is the least recently used: it goes
r.again = await system("ses_a")
console.log(JSON.stringify(r))
`
	out := runShim(t, bridge.URL, token, script)
	var r struct {
		First, Second, NoSession, Again, Compacting, Title []string
		Together, Child, Failing                           [][]string
	}
	if err := json.Unmarshal([]byte(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), &r); err != nil {
		t.Fatalf("node printed:\n%s\n%v", out, err)
	}
	with := []string{"base", text}
	base := []string{"base"}
	for name, got := range map[string][]string{"first": r.First, "second": r.Second, "together[0]": r.Together[0], "together[1]": r.Together[1],
		"failing[1]": r.Failing[1], "failing[2]": r.Failing[2], "again": r.Again} {
		if !slices.Equal(got, with) {
			t.Errorf("%s: system %q, want %q", name, got, with)
		}
	}
	for name, got := range map[string][]string{"child[0]": r.Child[0], "child[1]": r.Child[1], "failing[0]": r.Failing[0], "noSession": r.NoSession} {
		if !slices.Equal(got, base) {
			t.Errorf("%s: system %q, want nothing added", name, got)
		}
	}
	if len(r.Title) != 1 {
		t.Errorf("the title request got thatch's text: %q", r.Title)
	}
	if !slices.Equal(r.Compacting, []string{memories}) {
		t.Errorf("compacting: context %q, want the memories", r.Compacting)
	}
	count := map[string]int{}
	mu.Lock()
	for _, c := range calls {
		if !strings.Contains(c, "ses_many_") {
			count[c]++
		}
	}
	mu.Unlock()
	want := map[string]int{
		`/api/session.context {"sessionID":"ses_a","projectID":"prj_1","directory":"/w/proj"}`:     2, // asked again once dropped
		`/api/session.context {"sessionID":"ses_b","projectID":"prj_1","directory":"/w/proj"}`:     1,
		`/api/session.context {"sessionID":"ses_child","projectID":"prj_1","directory":"/w/proj"}`: 1,
		`/api/session.context {"sessionID":"ses_fail","projectID":"prj_1","directory":"/w/proj"}`:  2,
		`/api/memory.context {"sessionID":"ses_a"}`:                                                1,
		`/event {"type":"session.compacting","properties":{"sessionID":"ses_a"}}`:                  1,
	}
	if len(count) != len(want) {
		t.Errorf("requests %v, want %v", count, want)
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%d × %s, want %d", count[k], k, n)
		}
	}
}

// runShim runs script beside the plugin shim pointed at endpoint, with Node.js and the
// real @opencode-ai/plugin, and returns what it printed.
func runShim(t *testing.T, endpoint, tokenFile, script string, args ...string) string {
	t.Helper()
	modules := os.Getenv("THATCH_E2E_MODULES")
	if modules == "" {
		t.Fatal("THATCH_E2E_MODULES is unset: run make e2e")
	}
	dir := t.TempDir()
	f := Plugin(endpoint, tokenFile)
	must(t, os.MkdirAll(filepath.Join(dir, "plugin"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, f.Path), f.Content, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "run.mjs"), []byte(script), 0o644))
	must(t, os.Symlink(modules, filepath.Join(dir, "node_modules")))
	cmd := exec.Command("node", append([]string{"run.mjs"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	return string(out)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
