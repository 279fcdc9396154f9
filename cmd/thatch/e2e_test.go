//go:build e2e

package main

// The end-to-end test against the real opencode (make e2e): opencode serve, a scripted
// fake model, and the thatch binary with its bridge and plugin shim, all on 127.0.0.1 with
// a private HOME. THATCH_E2E_OPENCODE names the opencode binary and THATCH_E2E_MODULES the
// node_modules folder holding @opencode-ai/plugin (testdata/e2e/setup.sh installs both).

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	_ "modernc.org/sqlite"

	"github.com/thatch-dev/thatch/adapters/fakellm"
	"github.com/thatch-dev/thatch/adapters/opencode"
	"github.com/thatch-dev/thatch/cmd/internal/daemon/daemontest"
	"github.com/thatch-dev/thatch/runtime"
)

// ocEvent is one opencode bus event, as GET /global/event shows it.
type ocEvent struct {
	Directory string `json:"directory"`
	Payload   struct {
		Type       string          `json:"type"`
		Properties json.RawMessage `json:"properties"`
	} `json:"payload"`
}

// ocInfo is the session info that session.created and session.deleted carry.
type ocInfo struct {
	ID        string `json:"id"`
	ParentID  string `json:"parentID"`
	Title     string `json:"title"`
	Directory string `json:"directory"`
}

// ocTool is a tool part of message.part.updated.
type ocTool struct {
	SessionID string `json:"sessionID"`
	CallID    string `json:"callID"`
	Tool      string `json:"tool"`
	State     struct {
		Status   string          `json:"status"`
		Input    json.RawMessage `json:"input"`
		Output   string          `json:"output"`
		Metadata json.RawMessage `json:"metadata"`
	} `json:"state"`
}

// smallIn and smallOut are the small model's prices, in dollars per million input and
// output tokens.
const smallIn, smallOut = 1, 2

// ocPassword protects the opencode server, as OPENCODE_SERVER_PASSWORD: thatch reads the
// same variable.
const ocPassword = "e2e-not-a-secret"

type e2e struct {
	t          *testing.T // the running test or step
	main       *testing.T // the whole test: the processes belong to it
	root, proj string
	ocURL      string
	ocBin      string
	ocEnv      []string
	oc         *exec.Cmd
	hc         *http.Client
	llm        *fakellm.Server
	bin        string
	env        []string // thatch's environment
	thatchLog  string
	thatch     *exec.Cmd

	mu     sync.Mutex
	events []ocEvent
}

func TestOpencodeEndToEnd(t *testing.T) {
	ocBin, modules := os.Getenv("THATCH_E2E_OPENCODE"), os.Getenv("THATCH_E2E_MODULES")
	if ocBin == "" || modules == "" {
		t.Fatal("THATCH_E2E_OPENCODE and THATCH_E2E_MODULES are unset: run make e2e")
	}
	x := &e2e{t: t, main: t, root: t.TempDir(), hc: &http.Client{Timeout: 60 * time.Second}, llm: &fakellm.Server{}}
	t.Cleanup(x.keepLogs) // after the processes are stopped, before the folder goes
	defer x.hc.CloseIdleConnections()
	llm := httptest.NewServer(x.llm)
	defer llm.Close()
	home := filepath.Join(x.root, "home")
	x.ocURL = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	x.bin = binary(t)
	x.env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"THATCH_DATA_DIR="+filepath.Join(x.root, "thatch"), "THATCH_NATS_LISTEN="+fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"THATCH_SHIM_LISTEN="+fmt.Sprintf("127.0.0.1:%d", freePort(t)), "THATCH_OPENCODE_URL="+x.ocURL,
		"THATCH_HTTP_LISTEN="+fmt.Sprintf("127.0.0.1:%d", freePort(t)), // the page (the suite turns it off)
		"OPENCODE_SERVER_PASSWORD="+ocPassword, "THATCH_LOG_FORMAT=json", "THATCH_LOG_LEVEL=debug")

	// As the README says: thatch install, then opencode, then thatch serve.
	if out, err := x.cli("install"); err != nil {
		t.Fatalf("thatch install: %v\n%s", err, out)
	}
	x.startOpencode(ocBin, modules, llm.URL, home)
	ctx, cancel := context.WithCancel(context.Background())
	watching := x.watch(ctx)
	defer func() { cancel(); <-watching }()
	x.startThatch()
	var commands []struct{ Name string }
	x.get("/command", &commands)
	var tools []string
	x.get("/experimental/tool/ids", &tools)
	t.Logf("opencode lists the commands %v and the thatch tools %v", names(commands, "thatch/"), filter(tools, "thatch_"))
	if !slices.Contains(names(commands, "thatch/"), "thatch/compact") || !slices.Contains(tools, "thatch_get_extraction_payload") ||
		!slices.Contains(tools, "memory_remember") || !slices.Contains(tools, "memory_search") {
		t.Fatal("opencode did not load thatch's commands and plugin shim")
	}

	// 1. A tool call becomes an entry, and the extraction child claims and completes it.
	held, release := x.llm.HoldExtractions()
	s1 := x.session(x.proj, "e2e parent")
	call1 := x.runTool(s1, "echo thatch-e2e-one")
	x.waitEntries(s1, []string{call1}, "pending")
	t.Logf("step 1: bash call %s of %s is entry %s, pending", call1, s1, call1)
	c1 := x.extractionChild(s1, held, 0)
	// The reminder rides in the first model request's system prompt, never as a message
	// (a no-reply message lands after the user's first one, and the model answers it).
	if x.reminded(s1) {
		t.Errorf("thatch sent %s a reminder message; the plugin's system hook must carry it", s1)
	}
	first, ok := x.firstRequest("RUN echo thatch-e2e-one")
	if !ok || !strings.Contains(first.System, "[thatch] This session's tool calls are recorded") {
		t.Fatalf("the first model request of %s has no thatch text in its system prompt:\n%s", s1, first.System)
	}
	t.Logf("step 1: the first model request of %s carries thatch's reminder in its system prompt; no reminder message", s1)
	release()
	x.extracted(c1, s1, []string{call1})
	x.extractionCost(c1)

	// 1b. The child wrote a memory through the tools; a new session's first request carries
	// it, and the model answers the user's prompt.
	out, err := x.cli("memories", "--json")
	if err != nil {
		t.Fatalf("thatch memories: %v\n%s", err, out)
	}
	var mems []struct{ ID, Kind, Content, Project string }
	must(t, json.Unmarshal(out, &mems))
	if len(mems) != 1 || mems[0].Content != "The project ran: echo thatch-e2e-one" || mems[0].Project != x.proj {
		t.Fatalf("thatch memories lists %+v, want the extraction's one memory of project %s", mems, x.proj)
	}
	t.Logf("step 1b: thatch memories lists %s (%s) %q in project %s", mems[0].ID, mems[0].Kind, mems[0].Content, mems[0].Project)
	// Provenance (issue 29): the memory names the session it was extracted from, the
	// extraction child, and the call the child completed, with its tool and title.
	out, err = x.cli("memories", "show", "--json", mems[0].ID)
	if err != nil {
		t.Fatalf("thatch memories show --json: %v\n%s", err, out)
	}
	var shown struct{ Provenance []runtime.Provenance }
	must(t, json.Unmarshal(out, &shown))
	if len(shown.Provenance) != 1 || shown.Provenance[0].Extraction != c1 || shown.Provenance[0].Session != s1 ||
		len(shown.Provenance[0].Calls) != 1 || shown.Provenance[0].Calls[0].ID != call1 || shown.Provenance[0].Calls[0].Tool != "bash" {
		t.Fatalf("thatch memories show --json gives the provenance %+v, want extraction %s of %s from bash call %s", shown.Provenance, c1, s1, call1)
	}
	out, err = x.cli("memories", "show", mems[0].ID)
	if err != nil {
		t.Fatalf("thatch memories show: %v\n%s", err, out)
	}
	call := shown.Provenance[0].Calls[0]
	line := "bash"
	if title := oneLine(call.Title, 120); title != "" {
		line += " " + title
	}
	if want := "extracted from session " + s1 + " by extraction " + c1 + ", from calls:\n  " + line + " (" + call1 + ")\n"; !strings.Contains(string(out), want) {
		t.Fatalf("thatch memories show:\n%s\nwant it to contain:\n%s", out, want)
	}
	t.Logf("step 1b: thatch memories show says %s was extracted from %s by %s, from %s %q (%s)", mems[0].ID, s1, c1, call.Tool, call.Title, call.ID)
	var untitled ocInfo // no title: opencode asks the model for one, a request without memories
	x.post("/session?directory="+url.QueryEscape(x.proj), map[string]string{}, &untitled)
	s2 := untitled.ID
	var reply struct {
		Parts []struct{ Type, Text string }
	}
	x.post("/session/"+s2+"/message", map[string]any{"parts": []any{map[string]string{"type": "text", "text": "hello, memories"}}}, &reply)
	r2, ok := x.firstRequest("hello, memories")
	if !ok || !strings.Contains(r2.System, "Memories of this project:\n- ["+mems[0].ID+"] (command) The project ran: echo thatch-e2e-one") {
		t.Fatalf("the first model request of %s lacks the memory:\n%s", s2, r2.System)
	}
	if len(reply.Parts) == 0 || !slices.ContainsFunc(reply.Parts, func(p struct{ Type, Text string }) bool { return p.Text == "FAKE REPLY" }) || x.reminded(s2) {
		t.Fatalf("the model did not answer the user's first prompt in %s: %+v", s2, reply.Parts)
	}
	t.Logf("step 1b: %s's first model request carries the memory in its system prompt, and the model answered the user", s2)
	titled := false
	for _, r := range x.llm.Log() {
		if strings.Contains(r.System, "title generator") {
			titled = true
			if strings.Contains(r.System, "[thatch]") || strings.Contains(r.System, "Memories of this project") {
				t.Errorf("opencode's title request carries thatch's text:\n%s", r.System)
			}
		}
	}
	t.Logf("step 1b: opencode asked for a title (%v) without thatch's text in it", titled)

	// 2. thatch is killed while an extraction waits on the model; a tool call completes
	// while it is down. Back up, it loses neither: it extracts both at once (the session
	// went idle while thatch was down).
	held, release = x.llm.HoldExtractions()
	from := x.count()
	call2 := x.runTool(s1, "echo thatch-e2e-two")
	c2 := x.extractionChild(s1, held, from)
	x.killThatch()
	from = x.count()
	call3 := x.runTool(s1, "echo thatch-e2e-three")
	x.waitEvent("session.idle of "+s1+" while thatch is down", idle(s1), from)
	t.Logf("step 2: thatch killed during extraction %s; bash call %s completed while it was down", c2, call3)
	interrupted := release
	held, release = x.llm.HoldExtractions()
	from = x.count()
	x.startThatch()
	x.waitEvent("session.deleted of the interrupted child "+c2, deleted(c2), 0)
	interrupted()
	// The bridge's catch-up says s1 went idle while thatch was down: thatch extracts both
	// calls at once instead of at the session's next turn.
	c3 := x.extractionChild(s1, held, from)
	release()
	x.extracted(c3, s1, []string{call2, call3})
	t.Logf("step 2: restarted, thatch deleted the interrupted child %s and, %s having gone idle while it was down, extracted %s and %s at once", c2, s1, call2, call3)
	held, release = x.llm.HoldExtractions()
	from = x.count()
	call4 := x.runTool(s1, "echo thatch-e2e-four")
	c4 := x.extractionChild(s1, held, from)
	release()
	x.extracted(c4, s1, []string{call4})

	// 3. /thatch/compact: the turn flushes and ends with the token; at idle thatch compacts.
	from = x.count()
	command := make(chan error, 1)
	go func() { // opencode answers when the command's turn is over
		var out json.RawMessage
		command <- x.do("POST", "/session/"+s1+"/command", map[string]string{"command": "thatch/compact", "arguments": "END WITH THATCH_COMPACT_READY"}, &out)
	}()
	flush := x.toolDone(s1, "thatch_extraction_done", from)
	t.Logf("step 3: the /thatch/compact turn flushed: %s", flush.State.Output)
	x.waitEvent("session.compacted of "+s1, func(e ocEvent) bool {
		return e.Payload.Type == "session.compacted" && strings.Contains(string(e.Payload.Properties), s1)
	}, from)
	must(t, <-command)
	t.Logf("step 3: the turn ended with the token and opencode compacted %s (session.compacted)", s1)
	if !slices.ContainsFunc(x.llm.Log(), func(r fakellm.Request) bool {
		return len(r.Tools) == 0 && strings.Contains(r.LastUser, "Memories of this project:") && strings.Contains(r.LastUser, mems[0].ID)
	}) {
		t.Errorf("no compaction request carried the project's memories")
	} else {
		t.Logf("step 3: the compaction request carried the project's memories")
	}
	x.eventually("thatch to see the compaction end", func() bool {
		v, ok := x.sessions()[s1]
		return ok && !v.Compacting && v.WrapUp == ""
	})

	// 4. A worktree removed from disk: the sweep deletes the machinery session in it, and its
	// entry goes back to pending.
	dirB := filepath.Join(x.root, "worktree-b")
	must(t, os.MkdirAll(dirB, 0o755))
	held, release = x.llm.HoldExtractions()
	defer release()
	s5 := x.session(dirB, "e2e in b")
	call5 := x.runTool(s5, "echo thatch-e2e-five")
	c5 := x.extractionChild(s5, held, 0)
	must(t, os.RemoveAll(dirB))
	out, err = x.cli("sweep", "--json")
	if err != nil {
		t.Fatalf("thatch sweep: %v\n%s", err, out)
	}
	var plan runtime.SweepResult
	must(t, json.Unmarshal(out, &plan))
	t.Logf("step 4: removed %s; thatch sweep planned %s", dirB, daemontest.PlanOf(plan))
	if !slices.ContainsFunc(plan.Actions, func(a runtime.StrandAction) bool { return a.Kind == runtime.StrandDelete && a.SessionID == c5 }) {
		t.Fatalf("the sweep did not delete the machinery session %s: %s", c5, daemontest.PlanOf(plan))
	}
	x.waitEvent("session.deleted of "+c5, deleted(c5), 0)
	x.waitEntries(s5, []string{call5}, "pending")
	t.Logf("step 4: opencode deleted %s; entry %s of %s is pending again", c5, call5, s5)
	release()

	// 5. opencode is killed and started again: thatch sees a new boot and works on.
	x.restartOpencode()
	held, release = x.llm.HoldExtractions()
	from = x.count()
	call6 := x.runTool(s1, "echo thatch-e2e-six")
	c6 := x.extractionChild(s1, held, from)
	release()
	x.extracted(c6, s1, []string{call6})
	t.Logf("step 5: opencode restarted (boots seen: %v); the next tool call was extracted as before", x.boots())

	// 6. /thatch/exit: the turn flushes and ends with the token; at idle thatch closes the
	// session, which leaves its live directory (opencode, with no TUI, keeps the session).
	from = x.count()
	go func() {
		var out json.RawMessage
		command <- x.do("POST", "/session/"+s1+"/command", map[string]string{"command": "thatch/exit", "arguments": "END WITH THATCH_EXIT_READY"}, &out)
	}()
	flush = x.toolDone(s1, "thatch_extraction_done", from)
	must(t, <-command)
	x.eventually(s1+" to leave thatch's live directory", func() bool { _, live := x.sessions()[s1]; return !live })
	var info ocInfo
	x.get("/session/"+s1, &info)
	t.Logf("step 6: the /thatch/exit turn flushed (%s) and ended with the token; %s left thatch's live directory, opencode keeps it", flush.State.Output, info.ID)

	// 7. A tool call full of secrets: the bridge redacts it before publishing, so neither the
	// embedded broker's files, nor the journal, nor the memories, nor the log hold one.
	held, release = x.llm.HoldExtractions()
	from = x.count()
	call7 := x.runTool(s2, "echo export GITHUB_TOKEN="+daemontest.Secrets[0]+" AWS_ACCESS_KEY_ID="+daemontest.Secrets[1])
	c7 := x.extractionChild(s2, held, from)
	release()
	x.extracted(c7, s2, []string{call7})
	if n := x.status().Redacted; n == 0 {
		t.Errorf("status counts no redaction after the bridge redacted a call")
	}
	t.Logf("step 7: a bash call printing a GitHub token and an AWS key id was journaled and extracted; status counts %d redactions", x.status().Redacted)

	// 8-11, the cases of issue 15, each a step of its own: one that fails does not keep
	// the next from running.
	x.step("8 big write", x.bigWrite)
	x.step("9 sub-agent while thatch is down", x.subAgentWhileDown)
	x.step("10 colliding call ids", x.collidingCallIDs)
	x.step("11 opencode without the plugin", x.withoutPlugin)
	x.step("12 the web page through a one-time link", func(t *testing.T) { x.webPage(t, mems[0].ID, s1, call1) })

	// The system prompt of s1 stayed the same bytes across thatch's kill and opencode's
	// restart, so the provider's prompt cache holds.
	for _, prompt := range []string{"RUN echo thatch-e2e-two", "RUN echo thatch-e2e-three", "RUN echo thatch-e2e-four", "RUN echo thatch-e2e-six"} {
		if r, ok := x.firstRequest(prompt); !ok || r.System != first.System {
			t.Errorf("the system prompt of %s changed by %q", s1, prompt)
		}
	}

	// Every extraction child ran on the small model, across thatch's kill and opencode's
	// restart, every sub-agent on its own model, and every turn of the user's sessions (the
	// wrap-ups and the compaction included) on the session's model; the ledger counts the
	// 4 completed extractions (at least: the interrupted child of step 2 and the swept one
	// of step 4 may count too).
	kinds := map[string][]string{}
	for _, r := range x.llm.Log() {
		kind, want := "turn", "fake-model"
		if r.LastUser == runtime.ExtractionPrompt {
			kind, want = "extraction", "fake-small"
		} else if strings.Contains(r.LastUser, fakellm.SubAgentNote) {
			kind, want = "sub-agent", "fake-sub"
		} else if strings.Contains(r.System, "title generator") {
			kind, want = "title", r.Model // opencode's choice: logged, not checked
		}
		kinds[kind] = append(kinds[kind], r.Model)
		if r.Model != want {
			t.Errorf("a model request (%s) of %q was for %q, want %s", kind, r.LastUser[:min(60, len(r.LastUser))], r.Model, want)
		}
	}
	st := x.status().Extraction
	if st == nil || st.Today.Extractions < 4 || st.Today.Tokens <= 0 || st.Today.USD <= 0 {
		t.Fatalf("thatch status shows the extraction cost %+v, want at least the 4 completed extractions", st)
	}
	t.Logf("the model requests' models by kind: %v; thatch status counts %d extractions today, %d tokens, $%.6f", kinds, st.Today.Extractions, st.Today.Tokens, st.Today.USD)

	// thatch stops cleanly.
	must(t, x.thatch.Process.Signal(syscall.SIGTERM))
	if err := x.thatch.Wait(); err != nil {
		t.Fatalf("thatch serve did not stop cleanly: %v", err)
	}
	x.logProblems()
	journalFiles, _ := filepath.Glob(filepath.Join(x.root, "thatch", "thatch.db*"))
	for _, f := range append([]string{x.thatchLog}, journalFiles...) {
		data, err := os.ReadFile(f)
		must(t, err)
		if bytes.Contains(data, []byte(ocPassword)) {
			t.Errorf("opencode's password is in %s", f)
		}
	}
	read := daemontest.NoSecretIn(t, filepath.Join(x.root, "thatch")) // the broker's store is in there
	if !slices.ContainsFunc(slices.Collect(maps.Keys(read)), func(f string) bool { return strings.HasPrefix(f, "nats/") }) {
		t.Errorf("the embedded broker's store was not among the files read: %v", read)
	}
	logData, err := os.ReadFile(x.thatchLog)
	must(t, err)
	if !bytes.Contains(logData, []byte("redacted before publishing")) {
		t.Errorf("the bridge logged no redaction")
	}
	for _, s := range daemontest.Secrets {
		if bytes.Contains(logData, []byte(s)) {
			t.Errorf("thatch's log holds the secret %q", s)
		}
	}
	t.Logf("step 7: no secret in the %d files of thatch's data folder (the embedded broker's store included) nor in its debug log", len(read))
}

// webPage opens thatch's page as a person does (issue 29, points 4, 9 and 11): thatch ui
// prints a one-time link that holds no broker token; it logs in once (the cookie is
// neither the token nor the code) and is refused the second time; the memory's page and
// the session's page show the provenance of the extraction; a search with no words shows
// the form; /static/ lists nothing; Sign out ends the session.
func (x *e2e) webPage(t *testing.T, memoryID, session, call string) {
	out, err := x.cli("ui", "--no-open")
	if err != nil {
		t.Fatalf("thatch ui: %v\n%s", err, out)
	}
	link := regexp.MustCompile(`http://127\.0\.0\.1:\d+/login\?code=[A-Za-z0-9_-]+`).FindString(string(out))
	token, err := os.ReadFile(filepath.Join(x.root, "thatch", "broker.token"))
	must(t, err)
	tok := strings.TrimSpace(string(token))
	if link == "" || strings.Contains(string(out), tok) {
		t.Fatalf("thatch ui printed no one-time link, or the broker token:\n%s", out)
	}
	base, code := link[:strings.Index(link, "/login")], link[strings.Index(link, "code=")+len("code="):]
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	get := func(c *http.Client, path string) (int, string) {
		t.Helper()
		res, err := c.Get(path)
		must(t, err)
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	if code, body := get(browser, link); code != http.StatusOK || !strings.Contains(body, "Sign out") {
		t.Fatalf("the one-time link: %d, want the overview\n%.400s", code, body)
	}
	u, _ := url.Parse(base)
	cookies := jar.Cookies(u)
	if len(cookies) != 1 || cookies[0].Value == tok || cookies[0].Value == code || strings.Contains(cookies[0].Value, tok) {
		t.Fatalf("the page's cookies after the login: %v; want one session id, neither the token nor the code", cookies)
	}
	if code, body := get(&http.Client{Timeout: 30 * time.Second}, link); code != http.StatusUnauthorized || !strings.Contains(body, "thatch ui") {
		t.Fatalf("the link used a second time: %d, want 401 saying to run thatch ui\n%.400s", code, body)
	}
	if code, body := get(browser, base+"/memories/"+memoryID); code != http.StatusOK || !strings.Contains(body, "Provenance") || !strings.Contains(body, call) {
		t.Errorf("the memory's page: %d, want its provenance naming call %s\n%.600s", code, call, body)
	}
	if code, body := get(browser, base+"/sessions/"+session); code != http.StatusOK || !strings.Contains(body, "Provenance") || !strings.Contains(body, call) {
		t.Errorf("the session's page: %d, want the provenance of its extractions naming call %s", code, call)
	}
	if code, body := get(browser, base+"/memories?q=*"); code != http.StatusOK || !strings.Contains(body, "<form") {
		t.Errorf("a search with no words: %d, want the form again with a message\n%.400s", code, body)
	}
	if code, _ := get(browser, base+"/static/"); code != http.StatusNotFound {
		t.Errorf("GET /static/: %d, want 404 (no listing)", code)
	}
	_, page := get(browser, base+"/")
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if csrf == nil {
		t.Fatalf("the overview has no sign-out form with a CSRF field")
	}
	res, err := browser.PostForm(base+"/logout", url.Values{"csrf": {csrf[1]}})
	must(t, err)
	res.Body.Close()
	replay := &http.Client{Timeout: 30 * time.Second}
	req, _ := http.NewRequest("GET", base+"/sessions", nil)
	req.AddCookie(cookies[0])
	res, err = replay.Do(req)
	must(t, err)
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("the session's cookie after Sign out: %d, want 401", res.StatusCode)
	}
	t.Logf("step 12: thatch ui's one-time link logged in once (cookie %s, neither token nor code), was refused again; the memory's and the session's pages show call %s; q=* shows the form; /static/ lists nothing; Sign out ended the session", cookies[0].Name, call)
}

// step runs one case as a subtest: its failure fails the test, and the next case still
// runs. The processes it starts belong to the whole test.
func (x *e2e) step(name string, fn func(t *testing.T)) {
	parent := x.t
	parent.Run(name, func(t *testing.T) {
		x.t = t
		defer func() { x.t = parent }()
		start := time.Now()
		fn(t)
		t.Logf("%s took %s", name, time.Since(start).Round(100*time.Millisecond))
	})
}

// bigWrite: the model writes a 1.2 MB file. opencode's event for that tool call is over
// the broker's 1 MiB; thatch neither dead-letters it nor logs a gap, and journals the
// entry with its arguments cut to THATCH_INTERACTION_OUTPUT_MAX, then extracts it.
func (x *e2e) bigWrite(t *testing.T) {
	const size = 1_200_000
	before, logAt := x.status(), x.logSize()
	held, release := x.llm.HoldExtractions()
	defer release()
	s := x.session(x.proj, "e2e big write")
	path := filepath.Join(x.proj, "big.txt")
	from := x.count()
	x.prompt(s, fmt.Sprintf("WRITE %s %d", path, size))
	w := x.toolDone(s, "write", from)
	var input struct{ Content string }
	_ = json.Unmarshal(w.State.Input, &input)
	if fi, err := os.Stat(path); err != nil || fi.Size() != size || len(input.Content) != size || len(w.State.Input) <= 1<<20 {
		t.Fatalf("the write of %s: %v; opencode's event carries %d bytes of input, want the %d bytes written (over 1 MiB)", path, err, len(w.State.Input), size)
	}
	c := x.extractionChild(s, held, from)
	// thatch took the idle after the write: the entry, and any gap or dead letter, are in.
	x.waitEntries(s, []string{w.CallID}, "pending")
	var body struct {
		Args   struct{ Content, FilePath string }
		Output string
	}
	kept := x.journalEntry(s, "write")
	must(t, json.Unmarshal(kept, &body))
	const outputMax = 2000 // THATCH_INTERACTION_OUTPUT_MAX's default, and the cut's "…"
	if n := utf8.RuneCountInString(body.Args.Content); n > outputMax+1 || !strings.HasPrefix(body.Args.Content, fakellm.Content(outputMax/2)) ||
		body.Args.FilePath != path || len(kept) > 16<<10 {
		t.Errorf("the journal keeps %d bytes of the write %s: %d characters of its content (want its head, at most %d and the cut mark), file %q",
			len(kept), w.CallID, n, outputMax, body.Args.FilePath)
	}
	t.Logf("step 8: write %s of %d bytes (opencode's event: %d bytes of input) is entry %s, pending; the journal keeps %d bytes of it, %d characters of its content, output %q",
		path, size, len(w.State.Input), w.CallID, len(kept), utf8.RuneCountInString(body.Args.Content), body.Output)
	after := x.status()
	if after.Rejected != before.Rejected || after.Gaps != before.Gaps {
		t.Errorf("thatch status counts %d dead-lettered events and %d gaps, %d and %d before the write", after.Rejected, after.Gaps, before.Rejected, before.Gaps)
	}
	for _, l := range x.logSince(logAt) {
		switch {
		case strings.Contains(l, "events lost upstream") || strings.Contains(l, "dead-lettered"):
			t.Errorf("thatch logged: %s", l)
		case strings.Contains(l, "fit the broker"):
			t.Logf("thatch log: %.300s", l)
		}
	}
	release()
	x.extracted(c, s, []string{w.CallID})
}

// subAgentWhileDown: thatch is stopped (SIGTERM) when a session's model hands a command
// to a sub-agent: opencode creates the task's child session, which runs the command,
// while nothing listens. Started again, thatch tracks the child as its parent's, in the
// parent's directory, and holds the child's call under the parent's root with the task
// call; the bridge's catch-up says the parent is idle, so thatch extracts them at once.
func (x *e2e) subAgentWhileDown(t *testing.T) {
	must(t, x.thatch.Process.Signal(syscall.SIGTERM))
	if err := x.thatch.Wait(); err != nil {
		t.Fatalf("thatch serve did not stop cleanly on SIGTERM: %v", err)
	}
	from := x.count()
	p := x.session(x.proj, "e2e task parent")
	task, child, sub := x.subAgent(p, "echo thatch-e2e-sub-down", from)
	x.waitEvent("session.idle of "+p+" while thatch is down", idle(p), from)
	t.Logf("step 9: thatch stopped; %s's task call %s ran sub-agent %s (%q), whose bash call %s completed", p, task.CallID, child.ID, child.Title, sub.CallID)
	held, release := x.llm.HoldExtractions()
	defer release()
	from = x.count()
	x.startThatch()
	c := x.extractionChild(p, held, from)
	// The bridge publishes the sessions and tool calls it caught up on before the idles it
	// then says: thatch took it all in before the idle it extracts at.
	if v, ok := x.sessions()[child.ID]; !ok || v.ParentID != p || v.Kind != runtime.KindTask || v.Directory != child.Directory {
		t.Errorf("thatch tracks the sub-agent %s as %+v (tracked: %v), want a task child of %s in %s; its own entries: %v",
			child.ID, v, ok, p, child.Directory, x.openEntries(child.ID, "pending", func(e runtime.EntryView) string { return e.ID }))
	}
	// The sub-agent's call is an entry of its root, named by its session and call id.
	want := slices.Sorted(slices.Values([]string{task.CallID, runtime.EntryID(p, child.ID, sub.CallID)}))
	if got := x.openEntries(p, "pending", func(e runtime.EntryView) string { return e.ID }); !slices.Equal(got, want) {
		t.Fatalf("entries of %s: %v, want %v pending (the task call and the sub-agent's)", p, got, want)
	}
	t.Logf("step 9: restarted, thatch tracks %s as a task child of %s and holds %v pending under %s", child.ID, p, want, p)
	release()
	x.extracted(c, p, want)
}

// collidingCallIDs: the model restarts before each of two sessions' turns, so both number
// their calls from call_1, and the second session's sub-agent runs on a model of its own,
// which numbers from call_1 too: three calls named call_1, in three sessions under two
// roots. Each is its own entry of its own root, and each root's extraction claims its own.
func (x *e2e) collidingCallIDs(t *testing.T) {
	held, release := x.llm.HoldExtractions()
	defer release()
	x.llm.Restart()
	from := x.count()
	a := x.session(x.proj, "e2e call ids a")
	callA := x.runTool(a, "echo thatch-e2e-ids-a")
	cA := x.extractionChild(a, held, from)
	x.llm.Restart()
	from = x.count()
	b := x.session(x.proj, "e2e call ids b")
	task, child, sub := x.subAgent(b, "echo thatch-e2e-ids-b", from)
	cB := x.extractionChild(b, held, from)
	if callA != "call_1" || task.CallID != "call_1" || sub.CallID != "call_1" {
		t.Fatalf("the call ids did not collide: bash %s in %s, task %s in %s, bash %s in its sub-agent %s", callA, a, task.CallID, b, sub.CallID, child.ID)
	}
	t.Logf("step 10: bash %s in %s, task %s in %s and bash %s in its sub-agent %s", callA, a, task.CallID, b, sub.CallID, child.ID)
	// Each root's idle came after its calls: thatch's entries are settled.
	byTool := func(e runtime.EntryView) string { return e.Tool }
	if got := x.openEntries(a, "pending", byTool); !slices.Equal(got, []string{"bash"}) {
		t.Errorf("entries of %s by tool: %v, want [bash] pending", a, got)
	}
	if got := x.openEntries(b, "pending", byTool); !slices.Equal(got, []string{"bash", "task"}) {
		t.Errorf("entries of %s by tool: %v, want [bash task] pending (its task call and its sub-agent's bash call)", b, got)
	}
	release()
	idsA, payloadA := x.extraction(cA, a)
	if len(idsA) != 1 || !strings.Contains(payloadA, "thatch-e2e-ids-a") || strings.Contains(payloadA, "thatch-e2e-ids-b") {
		t.Errorf("%s claimed %v of %s, want its one call:\n%s", cA, idsA, a, payloadA)
	}
	idsB, payloadB := x.extraction(cB, b)
	if len(idsB) != 2 || idsB[0] == idsB[1] || !regexp.MustCompile(`(?m)^## \d+\. bash \(`).MatchString(payloadB) ||
		!regexp.MustCompile(`(?m)^## \d+\. task \(`).MatchString(payloadB) || strings.Contains(payloadB, "thatch-e2e-ids-a") {
		t.Errorf("%s claimed %v of %s, want its task call and its sub-agent's bash call:\n%s", cB, idsB, b, payloadB)
	}
	t.Logf("step 10: %s's extraction claimed %v, %s's claimed %v", a, idsA, b, idsB)
}

// withoutPlugin: opencode runs without thatch's plugin (removed from its config folder,
// as before thatch install). Tool calls and idles start no extraction child; thatch logs
// one error naming the missing tools and what to do, and thatch status names the host.
// With the plugin installed again and opencode restarted, thatch extracts them at once
// (the new boot's catch-up says the session is idle).
func (x *e2e) withoutPlugin(t *testing.T) {
	plugin := filepath.Join(x.root, "home", ".config", "opencode", "plugin", "thatch.js")
	must(t, os.Remove(plugin))
	logAt := x.logSize()
	x.restartOpencode()
	var tools []string
	x.get("/experimental/tool/ids", &tools)
	if slices.Contains(tools, runtime.ToolPayload) {
		t.Fatalf("opencode serves %s without thatch's plugin: %v", runtime.ToolPayload, tools)
	}
	host := opencode.HostIDFor(x.ocURL)
	if st := x.status(); !slices.Contains(st.HostsMissingTools, host) {
		t.Errorf("thatch status --json names %v as missing thatch's tools, want %s", st.HostsMissingTools, host)
	}
	text, err := x.cli("status")
	if err != nil || !strings.Contains(strings.ToLower(string(text)), "missing") || !strings.Contains(string(text), host) {
		t.Errorf("thatch status does not say that %s misses thatch's tools (%v):\n%s", host, err, text)
	}
	held, release := x.llm.HoldExtractions()
	defer release()
	from := x.count()
	s := x.session(x.proj, "e2e without the plugin")
	call1 := x.runTool(s, "echo thatch-e2e-noplugin-one")
	x.waitEvent("session.idle of "+s, idle(s), from)
	next := x.count()
	call2 := x.runTool(s, "echo thatch-e2e-noplugin-two")
	x.waitEvent("session.idle of "+s, idle(s), next)
	x.waitEntries(s, []string{call1, call2}, "pending")
	t.Logf("step 11: without the plugin, bash calls %s and %s of %s went idle twice; both pending", call1, call2, s)

	if out, err := x.cli("install"); err != nil {
		t.Fatalf("thatch install: %v\n%s", err, out)
	}
	x.restartOpencode()
	x.get("/experimental/tool/ids", &tools)
	if !slices.Contains(tools, runtime.ToolPayload) {
		t.Fatalf("opencode lacks %s after thatch install and a restart: %v", runtime.ToolPayload, tools)
	}
	if st := x.status(); len(st.HostsMissingTools) != 0 {
		t.Errorf("with the plugin loaded, thatch status --json names %v as missing thatch's tools", st.HostsMissingTools)
	}
	// The new boot's catch-up says s is idle: with the plugin loaded, thatch extracts the two
	// calls it held; it created no child at either idle without the plugin. thatch may
	// create the child before the test's own event stream is back: ask opencode.
	c := x.extractionChildListed(s, held)
	var children []ocInfo
	x.get("/session/"+s+"/children", &children)
	var created []string // children created, as far as the test's event stream saw
	x.mu.Lock()
	for _, e := range x.events[from:] {
		var p struct{ Info ocInfo }
		if e.Payload.Type == "session.created" && json.Unmarshal(e.Payload.Properties, &p) == nil && p.Info.ParentID == s {
			created = append(created, p.Info.ID)
		}
	}
	x.mu.Unlock()
	if len(children) != 1 || children[0].ID != c || len(created) > 1 || len(created) == 1 && created[0] != c {
		t.Errorf("%s had children %v created and has %v, want only the extraction child %s of its first idle with the plugin", s, created, children, c)
	}
	var errs []string
	for _, l := range x.logSince(logAt) {
		if strings.Contains(l, `"level":"ERROR"`) && strings.Contains(l, runtime.ToolPayload) {
			errs = append(errs, l)
		}
	}
	if len(errs) != 1 || !strings.Contains(errs[0], "restart opencode") {
		t.Errorf("thatch logged %d errors naming the missing tools over a boot without them and two idles, want one that says to restart opencode:\n%s",
			len(errs), strings.Join(errs, "\n"))
	} else {
		t.Logf("step 11: thatch logged once: %.400s", errs[0])
	}
	release()
	x.extracted(c, s, []string{call1, call2})
	t.Logf("step 11: after thatch install and a restart of opencode, thatch extracted both at once")
}

// subAgent makes the session's model hand command to a sub-agent with the task tool. It
// returns the parent's task call, the child session opencode created for the sub-agent,
// and the child's bash call, once the task has completed.
func (x *e2e) subAgent(parent, command string, from int) (task ocTool, child ocInfo, sub ocTool) {
	x.t.Helper()
	x.prompt(parent, "TASK "+command)
	x.waitEvent("the sub-agent session of "+parent, func(e ocEvent) bool {
		var p struct{ Info ocInfo }
		if e.Payload.Type != "session.created" || json.Unmarshal(e.Payload.Properties, &p) != nil {
			return false
		}
		child = p.Info
		return child.ParentID == parent && child.Title != runtime.ExtractionTitle
	}, from)
	sub = x.toolDone(child.ID, "bash", from)
	task = x.toolDone(parent, "task", from)
	if !strings.Contains(sub.State.Output, strings.TrimPrefix(command, "echo ")) {
		x.t.Fatalf("the sub-agent's bash %q printed %q", command, sub.State.Output)
	}
	return task, child, sub
}

// restartOpencode kills opencode, starts it again, and waits until the test's event
// stream and thatch both see it.
func (x *e2e) restartOpencode() {
	x.t.Helper()
	boots, from := len(x.boots()), x.count()
	x.killOpencode()
	x.launchOpencode()
	x.waitEvent("the test's own event stream to reconnect", func(e ocEvent) bool { return e.Payload.Type == "server.connected" }, from)
	x.eventually("thatch to see opencode's new boot", func() bool { return len(x.boots()) > boots })
}

// prompt sends the session a user message; the turn goes on after it returns.
func (x *e2e) prompt(session, text string) {
	x.t.Helper()
	x.post("/session/"+session+"/prompt_async", map[string]any{"parts": []any{map[string]string{"type": "text", "text": text}}}, nil)
}

// journalEntry reads the body that thatch's journal keeps of the entry of root made by a
// call of tool, from the running thatch's database, read-only.
func (x *e2e) journalEntry(root, tool string) []byte {
	x.t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(x.root, "thatch", "thatch.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	must(x.t, err)
	defer db.Close()
	var body []byte
	if err := db.QueryRow(`SELECT body FROM entries WHERE root_id = ? AND tool = ?`, root, tool).Scan(&body); err != nil {
		x.t.Fatalf("the journal's entry of the %s call of %s: %v", tool, root, err)
	}
	return body
}

// logSize is the length of thatch's log so far.
func (x *e2e) logSize() int64 {
	fi, err := os.Stat(x.thatchLog)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns the lines thatch logged after the log was at bytes.
func (x *e2e) logSince(at int64) []string {
	data, _ := os.ReadFile(x.thatchLog)
	if at > int64(len(data)) {
		return nil
	}
	return strings.FieldsFunc(string(data[at:]), func(r rune) bool { return r == '\n' })
}

// startOpencode runs opencode serve in a private world: HOME and every XDG folder under
// the test's folder, the fake model as the only provider, its plugin package pre-installed.
func (x *e2e) startOpencode(bin, modules, llmURL, home string) {
	t := x.t
	cfg := filepath.Join(home, ".config", "opencode")
	x.proj = filepath.Join(x.root, "proj")
	for _, d := range []string{cfg, x.proj} {
		must(t, os.MkdirAll(d, 0o755))
	}
	config := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{"fake": map[string]any{"npm": "@ai-sdk/openai-compatible",
			"options": map[string]any{"baseURL": llmURL + "/v1", "apiKey": "x"},
			// Prices per million tokens: opencode computes each message's cost from them.
			"models": map[string]any{
				"fake-model": map[string]any{"limit": map[string]int{"context": 32000, "output": 4000}, "cost": map[string]float64{"input": 3, "output": 15}},
				"fake-small": map[string]any{"limit": map[string]int{"context": 32000, "output": 4000}, "cost": map[string]float64{"input": smallIn, "output": smallOut}},
				"fake-sub":   map[string]any{"limit": map[string]int{"context": 32000, "output": 4000}, "cost": map[string]float64{"input": 2, "output": 8}}}}},
		"model": "fake/fake-model", "small_model": "fake/fake-small", "enabled_providers": []string{"fake"},
		"permission": map[string]string{"bash": "allow", "edit": "allow"},
		// The task tool's sub-agent runs on a model of its own: a second model process,
		// whose call ids count from call_1 like the first's.
		"agent": map[string]any{"general": map[string]string{"model": "fake/fake-sub"}},
		// The fake model counts a 1.2 MB write as 300k tokens: no automatic compaction.
		"compaction": map[string]bool{"auto": false},
	}
	data, _ := json.Marshal(config)
	must(t, os.WriteFile(filepath.Join(cfg, "opencode.json"), data, 0o644))
	must(t, os.WriteFile(filepath.Join(cfg, "package.json"), []byte(`{"dependencies":{"@opencode-ai/plugin":"1.18.33"}}`), 0o644))
	must(t, os.Symlink(modules, filepath.Join(cfg, "node_modules")))

	x.ocBin = bin
	x.ocEnv = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"), "XDG_STATE_HOME="+filepath.Join(home, ".local", "state"),
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"), "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_SHARE=1", "OPENCODE_SERVER_PASSWORD="+ocPassword)
	x.launchOpencode()
}

// launchOpencode starts opencode serve and waits until it answers.
func (x *e2e) launchOpencode() {
	t := x.t
	u, _ := url.Parse(x.ocURL)
	cmd := exec.Command(x.ocBin, "serve", "--port", u.Port(), "--hostname", "127.0.0.1")
	cmd.Dir, cmd.Env = x.proj, x.ocEnv
	logf, err := os.OpenFile(filepath.Join(x.root, "opencode.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	must(t, err)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its tool processes go with it
	must(t, cmd.Start())
	x.oc = cmd
	x.main.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		logf.Close()
	})
	// A request that goes in while opencode is starting can hang: ask briefly, again.
	var health struct{ Version string }
	if !poll(60*time.Second, func() bool {
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(x.request(context.Background(), "GET", "/global/health", nil))
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&health)
			resp.Body.Close()
		}
		return err == nil && health.Version != ""
	}) {
		out, _ := os.ReadFile(filepath.Join(x.root, "opencode.out"))
		t.Fatalf("opencode did not come up in 60 s:\n%s", out)
	}
	t.Logf("opencode %s is up at %s (worktree %s)", health.Version, x.ocURL, x.proj)
}

// killOpencode kills opencode and its tool processes.
func (x *e2e) killOpencode() {
	must(x.t, syscall.Kill(-x.oc.Process.Pid, syscall.SIGKILL))
	_ = x.oc.Wait()
}

// boots lists the boot ids thatch saw its opencode host start with, from its log.
func (x *e2e) boots() []string {
	data, _ := os.ReadFile(x.thatchLog)
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		var l struct {
			Msg    string `json:"msg"`
			BootID string `json:"boot_id"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "host started" && !slices.Contains(out, l.BootID) {
			out = append(out, l.BootID)
		}
	}
	return out
}

// watch records every event of GET /global/event until ctx ends, reconnecting when
// opencode restarts.
func (x *e2e) watch(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	// A request that goes in while opencode is starting can hang before its headers.
	transport := &http.Transport{ResponseHeaderTimeout: 5 * time.Second}
	sse := &http.Client{Transport: transport}
	resp, err := sse.Do(x.request(ctx, "GET", "/global/event", nil))
	if err != nil {
		x.t.Fatalf("GET /global/event: %v", err)
	}
	go func() {
		defer close(done)
		defer transport.CloseIdleConnections()
		for {
			if resp != nil {
				sc := bufio.NewScanner(resp.Body)
				sc.Buffer(make([]byte, 64<<10), 16<<20)
				for sc.Scan() {
					data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
					var ev ocEvent
					if ok && json.Unmarshal(data, &ev) == nil {
						x.mu.Lock()
						x.events = append(x.events, ev)
						x.mu.Unlock()
					}
				}
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			resp, _ = sse.Do(x.request(ctx, "GET", "/global/event", nil))
		}
	}()
	return done
}

func (x *e2e) count() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.events)
}

// waitEvent waits for an event at index from or later that match accepts.
func (x *e2e) waitEvent(what string, match func(ocEvent) bool, from int) ocEvent {
	x.t.Helper()
	var found ocEvent
	x.eventually(what, func() bool {
		x.mu.Lock()
		evs := x.events[from:]
		x.mu.Unlock()
		for _, e := range evs {
			if match(e) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// poll calls cond until it holds or the time is up, and reports whether it held.
func poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// eventually polls cond for up to 90 s: opencode's first request in a directory can take
// more than 10 s on these machines.
func (x *e2e) eventually(what string, cond func() bool) {
	x.t.Helper()
	if !poll(90*time.Second, cond) {
		x.t.Fatalf("timed out waiting for %s", what)
	}
}

func idle(id string) func(ocEvent) bool {
	return func(e ocEvent) bool {
		return e.Payload.Type == "session.idle" && strings.Contains(string(e.Payload.Properties), id)
	}
}

func deleted(id string) func(ocEvent) bool {
	return func(e ocEvent) bool {
		var p struct{ Info ocInfo }
		return e.Payload.Type == "session.deleted" && json.Unmarshal(e.Payload.Properties, &p) == nil && p.Info.ID == id
	}
}

// toolDone waits for a completed call of tool in session, from index from on.
func (x *e2e) toolDone(session, tool string, from int) ocTool {
	x.t.Helper()
	var part ocTool
	x.waitEvent(tool+" completing in "+session, func(e ocEvent) bool {
		var p struct{ Part ocTool }
		if e.Payload.Type != "message.part.updated" || json.Unmarshal(e.Payload.Properties, &p) != nil {
			return false
		}
		part = p.Part
		return part.SessionID == session && part.Tool == tool && part.State.Status == "completed"
	}, from)
	return part
}

// session creates a top-level session in dir.
func (x *e2e) session(dir, title string) string {
	var info ocInfo
	x.post("/session?directory="+url.QueryEscape(dir), map[string]string{"title": title}, &info)
	return info.ID
}

// runTool makes the session's model run a bash command and returns the call id.
func (x *e2e) runTool(session, command string) string {
	x.t.Helper()
	from := x.count()
	x.prompt(session, "RUN "+command)
	part := x.toolDone(session, "bash", from)
	if !strings.Contains(part.State.Output, strings.TrimPrefix(command, "echo ")) {
		x.t.Fatalf("bash %q printed %q", command, part.State.Output)
	}
	return part.CallID
}

// extractionChild waits for thatch to create the extraction child of parent and for its
// model turn to be held, and checks that the child lives in its parent's directory.
func (x *e2e) extractionChild(parent string, held <-chan struct{}, from int) string {
	x.t.Helper()
	var child, parentDir ocInfo
	x.get("/session/"+parent, &parentDir)
	x.waitEvent("the extraction child of "+parent, func(e ocEvent) bool {
		var p struct{ Info ocInfo }
		if e.Payload.Type != "session.created" || json.Unmarshal(e.Payload.Properties, &p) != nil {
			return false
		}
		child = p.Info
		return child.ParentID == parent && child.Title == runtime.ExtractionTitle
	}, from)
	if child.Directory != parentDir.Directory {
		x.t.Fatalf("extraction child %s is in %s, its parent in %s", child.ID, child.Directory, parentDir.Directory)
	}
	select {
	case <-held:
	case <-time.After(90 * time.Second):
		x.t.Fatalf("the extraction child %s never asked the model", child.ID)
	}
	x.t.Logf("thatch created extraction child %s of %s in %s; its model turn is held", child.ID, parent, child.Directory)
	return child.ID
}

// extractionChildListed waits for opencode to list an extraction child of parent, and for
// its model turn to be held, like extractionChild, for when the session.created event may
// have passed while the test's event stream was reconnecting.
func (x *e2e) extractionChildListed(parent string, held <-chan struct{}) string {
	x.t.Helper()
	var child string
	x.eventually("opencode to list the extraction child of "+parent, func() bool {
		var children []ocInfo
		x.get("/session/"+parent+"/children", &children)
		for _, c := range children {
			if c.Title == runtime.ExtractionTitle {
				child = c.ID
				return true
			}
		}
		return false
	})
	select {
	case <-held:
	case <-time.After(90 * time.Second):
		x.t.Fatalf("the extraction child %s never asked the model", child)
	}
	x.t.Logf("thatch created extraction child %s of %s; its model turn is held", child, parent)
	return child
}

// extracted waits for the child to claim exactly want through the shim, complete them and
// be deleted, leaving the parent with no open entry.
func (x *e2e) extracted(child, parent string, want []string) {
	x.t.Helper()
	want = slices.Sorted(slices.Values(want))
	if got, _ := x.extraction(child, parent); !slices.Equal(got, want) {
		x.t.Fatalf("%s claimed %v of %s, want %v", child, got, parent, want)
	}
}

// extraction waits for the child to claim entries of parent through the shim, complete
// all it claimed and be deleted, leaving the parent with no open entry. It returns the
// entry ids claimed, sorted, and the payload the child read.
func (x *e2e) extraction(child, parent string) ([]string, string) {
	x.t.Helper()
	payload := x.toolDone(child, "thatch_get_extraction_payload", 0)
	var meta struct {
		ParentID string   `json:"parentID"`
		EntryIDs []string `json:"entryIDs"`
	}
	_ = json.Unmarshal(payload.State.Metadata, &meta)
	slices.Sort(meta.EntryIDs)
	if meta.ParentID != parent {
		x.t.Fatalf("%s claimed %v of %q, want entries of %s", child, meta.EntryIDs, meta.ParentID, parent)
	}
	done := x.toolDone(child, "thatch_extraction_done", 0)
	var dm struct{ Completed int }
	_ = json.Unmarshal(done.State.Metadata, &dm)
	if dm.Completed != len(meta.EntryIDs) {
		x.t.Fatalf("%s claimed %v and completed %d entries (%s)", child, meta.EntryIDs, dm.Completed, done.State.Output)
	}
	x.waitEvent("session.deleted of "+child, deleted(child), 0)
	x.waitEntries(parent, nil, "")
	x.t.Logf("%s claimed %v through the shim, completed %d, and thatch deleted it; %s has no open entry", child, meta.EntryIDs, dm.Completed, parent)
	return meta.EntryIDs, payload.State.Output
}

// extractionCost checks the first extraction, by child: it ran on the host's small model
// while the user's turns ran on the session's, and the ledger holds what it cost, the
// tokens the model reported for its requests priced at the small model's rates. It is the
// only extraction so far, so the ledger's one row and today's spending are its cost alone.
func (x *e2e) extractionCost(child string) {
	t := x.t
	t.Helper()
	var in, out int64
	var reqs []fakellm.Request
	for _, r := range x.llm.Log() {
		switch {
		case r.LastUser == runtime.ExtractionPrompt:
			reqs = append(reqs, r)
			in, out = in+int64(r.PromptTokens), out+int64(r.CompletionTokens)
			// OpenAI sends the usage chunk only when asked: opencode must ask.
			if r.Model != "fake-small" || !r.IncludeUsage {
				t.Errorf("a model request of the extraction child %s was for %q (usage asked: %v), want fake-small", child, r.Model, r.IncludeUsage)
			}
		case strings.HasPrefix(r.LastUser, "RUN echo ") && !strings.Contains(r.System, "title generator"):
			if r.Model != "fake-model" {
				t.Errorf("a model request of the user's turn %q was for %q, want fake-model", r.LastUser, r.Model)
			}
		}
	}
	// The script's four turns: the payload, memory_remember, thatch_extraction_done, a reply.
	if len(reqs) != 4 {
		t.Fatalf("the extraction child %s made %d model requests, want 4", child, len(reqs))
	}
	var rows []runtime.CostRow
	x.eventually("the ledger to hold the extraction "+child, func() bool {
		data, err := x.cli("costs", "--json")
		return err == nil && json.Unmarshal(data, &rows) == nil && len(rows) > 0
	})
	// opencode keeps a message's tokens as the provider reported them: input is the
	// prompt's tokens less the cached ones (the fake reports none), output the
	// completion's less the reasoning ones (none); its cost is input and output priced
	// per million tokens. thatch sums input and cache for tokensIn, output and reasoning
	// for tokensOut.
	usd := float64(in*smallIn+out*smallOut) / 1e6
	today := runtime.Day(time.Now())
	if len(rows) != 1 {
		t.Fatalf("thatch costs lists %+v, want one row", rows)
	}
	r := rows[0]
	if r.Day != today || r.Project != x.proj || r.Extractions != 1 || r.Entries != 1 || r.TokensIn != in || r.TokensOut != out ||
		r.Tokens != in+out || math.Abs(r.USD-usd) > 1e-9 || !slices.Equal(r.Models, []string{"fake/fake-small"}) {
		t.Fatalf("thatch costs lists %+v, want 1 extraction of 1 entry on %s in %s: %d tokens in and %d out, as the model reported, $%.6f, on fake/fake-small",
			r, today, x.proj, in, out, usd)
	}
	st := x.status().Extraction
	if st == nil || st.Today.Extractions != 1 || st.Today.Tokens != in+out || st.Today.TokensIn != in || st.Today.TokensOut != out ||
		math.Abs(st.Today.USD-usd) > 1e-9 || st.Week != st.Today || st.BudgetReached {
		t.Fatalf("thatch status shows the extraction cost %+v, want today's and the week's: 1 extraction, %d + %d tokens, $%.6f", st, in, out, usd)
	}
	t.Logf("step 1: %s made %d requests of fake-small, the model reported %d prompt and %d completion tokens; thatch costs and status show %d extraction, %d tokens in, %d out, $%.6f, models %v",
		child, len(reqs), in, out, r.Extractions, r.TokensIn, r.TokensOut, r.USD, r.Models)
}

// waitEntries waits until the session's open entries are exactly ids, all in state.
func (x *e2e) waitEntries(session string, ids []string, state string) {
	x.t.Helper()
	want := slices.Sorted(slices.Values(ids))
	var got []string
	if !poll(90*time.Second, func() bool {
		got = x.openEntries(session, state, func(e runtime.EntryView) string { return e.ID })
		return slices.Equal(got, want)
	}) {
		x.t.Fatalf("entries of %s: %v, want %v %s", session, got, want, state)
	}
}

// openEntries names the session's open entries by name, sorted, each not in state
// followed by its state in parentheses.
func (x *e2e) openEntries(session, state string, name func(runtime.EntryView) string) []string {
	x.t.Helper()
	var out []string
	for _, e := range x.entries(session) {
		if e.State == state {
			out = append(out, name(e))
		} else {
			out = append(out, name(e)+"("+e.State+")")
		}
	}
	slices.Sort(out)
	return out
}

// status is thatch status --json.
func (x *e2e) status() runtime.StatusView {
	x.t.Helper()
	out, err := x.cli("status", "--json")
	if err != nil {
		x.t.Fatalf("thatch status: %v\n%s", err, out)
	}
	var s runtime.StatusView
	must(x.t, json.Unmarshal(out, &s))
	return s
}

// firstRequest is the first model request of a turn whose last user text is user (not
// opencode's title request, which carries the same text).
func (x *e2e) firstRequest(user string) (fakellm.Request, bool) {
	for _, r := range x.llm.Log() {
		if r.LastUser == user && !strings.Contains(r.System, "title generator") {
			return r, true
		}
	}
	return fakellm.Request{}, false
}

// reminded reports whether a synthetic text part (thatch's reminder) is in the session.
func (x *e2e) reminded(session string) bool {
	var msgs []struct {
		Parts []struct {
			Type      string
			Text      string
			Synthetic bool
		}
	}
	x.get("/session/"+session+"/message", &msgs)
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == "text" && p.Synthetic && strings.Contains(p.Text, "thatch") {
				return true
			}
		}
	}
	return false
}

func (x *e2e) startThatch() {
	x.t.Helper()
	x.thatchLog = filepath.Join(x.root, "thatch.log")
	x.thatch = serveProcess(x.t, x.main, x.bin, x.env, x.thatchLog)
	x.eventually("thatch to answer", func() bool {
		_, err := x.cli("status", "--json")
		return err == nil
	})
}

// serveProcess starts bin's thatch serve with env, its output appended to logPath; it is
// killed when owner (the whole test, for a process its steps share) ends.
func serveProcess(t, owner *testing.T, bin string, env []string, logPath string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = env
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	must(t, err)
	cmd.Stdout, cmd.Stderr = logf, logf
	must(t, cmd.Start())
	owner.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	return cmd
}

func (x *e2e) killThatch() {
	must(x.t, x.thatch.Process.Signal(syscall.SIGKILL))
	_ = x.thatch.Wait()
}

// cli runs a thatch command against the running thatch.
func (x *e2e) cli(args ...string) ([]byte, error) { return runThatch(x.bin, x.env, args...) }

// runThatch runs a thatch command of bin with env: its standard output, or both outputs
// with the error.
func runThatch(bin string, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return append(out.Bytes(), errb.Bytes()...), err
	}
	return out.Bytes(), nil
}

func (x *e2e) entries(session string) []runtime.EntryView {
	x.t.Helper()
	out, err := x.cli("entries", session, "--json")
	if err != nil {
		x.t.Fatalf("thatch entries: %v\n%s", err, out)
	}
	var rows []runtime.EntryView
	must(x.t, json.Unmarshal(out, &rows))
	return rows
}

func (x *e2e) sessions() map[string]runtime.SessionView {
	x.t.Helper()
	out, err := x.cli("sessions", "--json")
	if err != nil {
		x.t.Fatalf("thatch sessions: %v\n%s", err, out)
	}
	var rows []runtime.SessionView
	must(x.t, json.Unmarshal(out, &rows))
	m := map[string]runtime.SessionView{}
	for _, r := range rows {
		m[r.SessionID] = r
	}
	return m
}

// keepLogs, when the test ends: with THATCH_E2E_LOGS set, thatch's and opencode's logs are
// copied into that folder; after a failure, their last lines are in the test's output.
func (x *e2e) keepLogs() {
	logs := map[string]string{"thatch.log": filepath.Join(x.root, "thatch.log"),
		"opencode.log": filepath.Join(x.root, "home", ".local", "share", "opencode", "log", "opencode.log"),
		"opencode.out": filepath.Join(x.root, "opencode.out")}
	dir := os.Getenv("THATCH_E2E_LOGS")
	for name, path := range logs {
		data, _ := os.ReadFile(path)
		if dir != "" && os.MkdirAll(dir, 0o755) == nil {
			_ = os.WriteFile(filepath.Join(dir, name), data, 0o644)
		}
		if x.t.Failed() {
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			x.t.Logf("the last lines of %s:\n%s", name, strings.Join(lines[max(0, len(lines)-30):], "\n"))
		}
	}
}

// logProblems logs thatch's warnings and errors, for the reader of the test log.
func (x *e2e) logProblems() {
	data, _ := os.ReadFile(x.thatchLog)
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
			x.t.Logf("thatch log: %s", line)
		}
	}
}

func (x *e2e) do(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	resp, err := x.hc.Do(x.request(context.Background(), method, path, rd))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && len(data) > 0 && out != nil {
		return fmt.Errorf("%s %s: HTTP %d %s", method, path, resp.StatusCode, data)
	}
	if out != nil && len(data) > 0 {
		return json.Unmarshal(data, out)
	}
	return nil
}

// request is a request to opencode, with its password.
func (x *e2e) request(ctx context.Context, method, path string, body io.Reader) *http.Request {
	req, err := http.NewRequestWithContext(ctx, method, x.ocURL+path, body)
	if err != nil {
		x.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth("opencode", ocPassword)
	return req
}

func (x *e2e) get(path string, out any) {
	x.t.Helper()
	must(x.t, x.do("GET", path, nil, out))
}

func (x *e2e) post(path string, body, out any) {
	x.t.Helper()
	must(x.t, x.do("POST", path, body, out))
}

func names(cmds []struct{ Name string }, prefix string) []string {
	var out []string
	for _, c := range cmds {
		if strings.HasPrefix(c.Name, prefix) {
			out = append(out, c.Name)
		}
	}
	return out
}

func filter(ids []string, prefix string) []string {
	var out []string
	for _, id := range ids {
		if strings.HasPrefix(id, prefix) {
			out = append(out, id)
		}
	}
	return out
}
