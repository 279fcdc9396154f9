//go:build browser

package main

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// make ui-test: thatch's web page in a real browser (headless Chromium, driven over the
// DevTools protocol), against the real binary with its embedded broker and a fake host
// that plays opencode and the extraction child's model.

// The test's switches, read before TestMain clears every THATCH_ variable that is not
// a test's: the browser (testdata/ui/setup.sh prints it) and the folder the screenshots
// go to (make ui-shots: docs/ui).
var (
	uiChromium = os.Getenv("THATCH_UI_CHROMIUM")
	uiShots    = os.Getenv("THATCH_UI_SHOTS")
)

// uiWait bounds each step in the browser: a page load, a wait for something to show.
const uiWait = 20 * time.Second

// The memories the extraction child's model writes: one of each common kind, and a pair
// that says nearly the same (hygiene shows it).
var uiMemories = []map[string]any{
	{"content": "Deploy with scripts/deploy.sh --dry-run first; the real run needs the office VPN.", "kind": "command", "tags": []string{"deploy"}},
	{"content": "The api-gw-02 gateway times out after 30 s under load; retry with exponential backoff.", "kind": "pitfall", "tags": []string{"gateway", "network"}},
	{"content": "The team prefers table-driven tests, with t.Run subtests named after each case.", "kind": "preference"},
	{"content": "The staging database listens on port 5432 and needs the office VPN for access.", "kind": "fact"},
	{"content": "The staging database listens on port 5432 and needs the office VPN to access.", "kind": "fact"},
}

// tab is one browser tab on thatch's page.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string // http://host:port, no slash
}

// fail ends the test with what the tab shows.
func (b *tab) fail(what string, err error) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : "(no body)"`))
	b.t.Fatalf("%s: %v\nthe page at %s shows:\n%s", what, err, loc, text)
}

// do runs steps that load nothing.
func (b *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fail(what, err)
	}
}

// load runs steps that load a page (a navigation, a click on a link or a form's button,
// Enter in a form), waits until it loaded, and checks that it is path (with its query)
// and answered want.
func (b *tab) load(what string, want int64, path string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiWait)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		b.fail(what, err)
	}
	if resp.Status != want {
		b.fail(what, fmt.Errorf("HTTP %d %s, want %d", resp.Status, resp.StatusText, want))
	}
	if loc := b.location(); path != "" && loc != b.base+path {
		b.fail(what, fmt.Errorf("landed on %s, want %s", loc, b.base+path))
	}
}

func (b *tab) location() string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiWait)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		b.fail("read the location", err)
	}
	return loc
}

// until waits for a JavaScript condition on the page as it is (it fails when the tab
// loads another page meanwhile: the page must change by itself).
func (b *tab) until(what, cond string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiWait+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](cond,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(uiWait))); err != nil {
		b.fail("waiting for "+what, err)
	}
}

// eval evaluates a JavaScript expression in the tab's page.
func eval[T any](b *tab, what, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.fail(what, err)
	}
	return v
}

// text is the visible text of the first element sel matches, "" when none does.
func (b *tab) text(sel string) string {
	b.t.Helper()
	return eval[string](b, "read "+sel, fmt.Sprintf(`(function(){ var e = document.querySelector(%q); return e ? e.innerText.trim() : ""; })()`, sel))
}

// count is how many elements sel matches.
func (b *tab) count(sel string) int {
	b.t.Helper()
	return eval[int](b, "count "+sel, fmt.Sprintf(`document.querySelectorAll(%q).length`, sel))
}

// mark leaves a value in the page's window: it is gone once the tab loads another page.
func (b *tab) mark() {
	b.t.Helper()
	b.do("mark the page", chromedp.Evaluate[chromedp.Void](`window.thatchTestMark = true`))
}

// stayed checks that the tab still shows the page it marked, at path: what changed on
// it came through the live updates, not a reload.
func (b *tab) stayed(path string) {
	b.t.Helper()
	if !eval[bool](b, "read the mark", `window.thatchTestMark === true`) {
		b.fail("the live update", fmt.Errorf("the page was loaded again"))
	}
	if loc := b.location(); loc != b.base+path {
		b.fail("the live update", fmt.Errorf("the tab went to %s", loc))
	}
}

// live waits until the page's live updates are connected (the header says live).
func (b *tab) live() {
	b.t.Helper()
	b.until("the header to say live", `document.getElementById("live") && document.getElementById("live").textContent === "live"`)
}

// shot saves a screenshot of the whole page as name.png in THATCH_UI_SHOTS, when set.
func (b *tab) shot(name string) {
	b.t.Helper()
	if uiShots == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, uiWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.fail("screenshot "+name, err)
	}
	must(b.t, os.MkdirAll(uiShots, 0o755))
	must(b.t, os.WriteFile(filepath.Join(uiShots, name+".png"), png, 0o644))
}

// TestBrowserUI drives thatch's web page in Chromium, as a person would, while a host
// works: the link thatch ui prints, the overview, a session that appears in the open
// sessions page by itself, its entries and their extraction, the memories the extraction
// wrote (search, edit, forget and undo, forget and restore), hygiene's duplicate pair,
// the dead letters, the strand sweep's plan and run, and the 401 page of a browser
// without the cookie. THATCH_UI_SHOTS=DIR saves a screenshot of each page there.
func TestBrowserUI(t *testing.T) {
	chromium := cmp.Or(uiChromium, "chromium")
	if _, err := exec.LookPath(chromium); err != nil {
		t.Fatalf("no browser %q (%v): run make ui-test, which installs Chromium (testdata/ui/setup.sh) and sets THATCH_UI_CHROMIUM", chromium, err)
	}
	began := time.Now()
	bin := binary(t)

	r := newEmbeddedRig(t, "v1")
	h := r.host
	h.Dir = filepath.Join(t.TempDir(), "acme-api") // a project folder with a name, for the screenshots
	must(t, os.Mkdir(h.Dir, 0o755))
	h.Model, h.Tokens, h.Cost = true, runtime.Tokens{Input: 5200, Output: 640}, 0.0042
	h.Write = func(ctx context.Context, child string, _ runtime.Answer, call func(string, any) (runtime.Answer, *runtime.HostError)) runtime.Metrics {
		n := int64(0)
		for _, m := range uiMemories {
			if _, herr := call(runtime.ToolRemember, m); herr != nil {
				t.Errorf("memory_remember %v: %v", m["content"], herr)
				continue
			}
			n++
		}
		return runtime.Metrics{New: n}
	}
	httpAddr := freeAddr(t)
	t.Setenv("THATCH_HTTP_LISTEN", httpAddr)
	t.Setenv("THATCH_SHIM_LISTEN", freeAddr(t))
	r.process(bin)
	waitFor(t, "thatch to answer", func() bool { return r.tryAPI("status", nil, new(map[string]any)) == nil })
	// The host's context lasts the whole test (r.ctx's 30 s do not: Chromium alone may take
	// longer to start on a busy machine).
	ctx, cancelHost := context.WithTimeout(context.Background(), 9*time.Minute)
	t.Cleanup(cancelHost)
	must(t, h.Hello(ctx, "b1"))

	// The link, as thatch ui prints it: a one-time link that carries no token.
	ui := exec.Command(bin, "ui", "--no-open")
	// thatch ui asks the daemon, on the broker address it serves on (its status file
	// would say so too, once it wrote it).
	ui.Env = append(os.Environ(), "THATCH_DATA_DIR="+r.dataDir, "THATCH_NATS_LISTEN="+r.cfg.NATSListen)
	out, err := ui.CombinedOutput()
	if err != nil {
		t.Fatalf("thatch ui --no-open: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	token, err := os.ReadFile(filepath.Join(r.dataDir, natsbus.TokenFile))
	must(t, err)
	tok := strings.TrimSpace(string(token))
	base := "http://" + httpAddr
	link := lines[0]
	if !strings.HasPrefix(link, base+"/login?code=") || strings.Contains(link, tok) || len(lines) != 2 || !strings.Contains(lines[1], "once, within a minute") {
		t.Fatalf("thatch ui --no-open printed:\n%s\nwant a one-time link to %s/login and a line saying how long it works", out, base)
	}

	// The browser: headless Chromium with a profile of its own.
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	b := &tab{t: t, ctx: bctx, base: base}
	t.Logf("thatch and Chromium up after %s", time.Since(began).Round(time.Millisecond))

	// The link starts a session and leaves the address: the browser lands on /.
	b.load("open thatch ui's link", http.StatusOK, "/", chromedp.Navigate(link))
	if c := eval[string](b, "read document.cookie", `document.cookie`); c != "" {
		t.Errorf("the page's script sees the cookie %q: it must be HttpOnly", c)
	}
	_, port, _ := strings.Cut(httpAddr, ":")
	cookieName := "thatch_ui_" + port
	cookies, err := chromedp.Call(bctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/"}})
	must(t, err)
	if len(cookies.Cookies) != 1 || cookies.Cookies[0].Name != cookieName || !cookies.Cookies[0].HTTPOnly || !cookies.Cookies[0].Session ||
		cookies.Cookies[0].SameSite != network.CookieSameSiteStrict || strings.Contains(cookies.Cookies[0].Value, tok) || strings.Contains(link, cookies.Cookies[0].Value) {
		t.Errorf("cookies after the link: %+v, want one HttpOnly SameSite=Strict session cookie %s, neither the token nor the code", cookies.Cookies, cookieName)
	}
	session := cookies.Cookies[0].Value
	// Used once: the same link again says to run thatch ui again (the session stays).
	b.load("open thatch ui's link again", http.StatusUnauthorized, strings.TrimPrefix(link, base), chromedp.Navigate(link))
	if got := b.text("main p.warn"); !strings.Contains(got, "used already or has expired") || !strings.Contains(got, "Run thatch ui again") {
		t.Errorf("the link used again says %q", got)
	}
	b.load("go back to the overview", http.StatusOK, "/", chromedp.Navigate(base+"/"))

	// The overview: the host that said hello, online.
	if got := eval[string](b, "read the title", `document.title`); got != "Overview · thatch" {
		t.Errorf("the overview's title is %q", got)
	}
	b.live()
	b.until("the host in the overview", `document.querySelector("#stat-hosts") && document.querySelector("#stat-hosts").textContent === "1"`)
	if row := b.text(`#hosts tbody tr`); !strings.Contains(row, "h1") || !strings.Contains(row, "online") || !strings.Contains(row, h.Dir) {
		t.Errorf("the hosts table's row: %q, want h1 online in %s", row, h.Dir)
	}

	// The sessions page, open while the host starts a session: the session appears in it,
	// with its sub-agent below it, without a reload.
	b.load("click Sessions", http.StatusOK, "/sessions", chromedp.Click(chromedp.CSS(`nav a[href="/sessions"]`)))
	if got := b.text(`main p.empty`); !strings.Contains(got, "No live session yet") {
		t.Errorf("the sessions page before any session says %q", got)
	}
	b.live()
	b.mark()
	const sid, task = "ses_ui", "ses_ui_task"
	must(t, h.Created(ctx, sid, "", "Fix the flaky deploy script", h.Dir))
	must(t, h.Status(ctx, sid, "busy"))
	for i, tool := range []string{"bash", "read", "edit"} {
		must(t, h.ToolExecuted(ctx, sid, fmt.Sprintf("call_%d", i), tool, "done"))
	}
	must(t, h.Created(ctx, task, sid, "Explore the gateway client", h.Dir))
	must(t, h.ToolExecuted(ctx, task, "call_task", "grep", "internal/gateway/client.go:42"))
	// The task's tool call is its top-level session's entry.
	const pending = 4
	waitFor(t, "the tool calls to be journaled", func() bool {
		return len(r.entries(sid)) == pending && r.sessions()[sid].Pending == pending
	})
	b.until("the session and its sub-agent in the open sessions page", fmt.Sprintf(`(function(){
		var row = document.querySelector('#sessions tr.depth-0[data-session="%s"]');
		var kid = document.querySelector('#sessions tr.depth-1[data-session="%s"]');
		return row && kid && row.cells[3].textContent === "%d" && row.cells[2].textContent.trim() === "busy";
	})()`, sid, task, pending))
	b.stayed("/sessions")
	if got := b.text(fmt.Sprintf(`#sessions tr[data-session="%s"] td.id`, sid)); got != "Fix the flaky deploy script" {
		t.Errorf("the session's row names it %q", got)
	}
	if got := b.text(`main p.meta`); !strings.Contains(got, "2 live sessions, 1 busy") {
		t.Errorf("the sessions page's summary: %q", got)
	}
	b.shot("sessions")

	// The session's page: its entries, pending; then, while it is open, the session goes
	// idle and the extraction claims them, writes memories and is done.
	b.load("open the session", http.StatusOK, "/sessions/"+sid, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#sessions tr[data-session="%s"] td.id a`, sid))))
	if got := b.text("main h1"); got != "Fix the flaky deploy script" {
		t.Errorf("the session page's heading: %q", got)
	}
	if got := b.text("#session"); !strings.Contains(got, sid) || !strings.Contains(got, "h1") || !strings.Contains(got, "busy") || !strings.Contains(got, fmt.Sprintf("%d pending", pending)) {
		t.Errorf("the session's table:\n%s", got)
	}
	if n := b.count("#entries tbody tr"); n != 4 {
		t.Errorf("the entries table has %d rows, want 4", n)
	}
	entries := b.text("#entries tbody")
	for _, tool := range []string{"bash", "read", "edit", "grep"} {
		if !strings.Contains(entries, tool) {
			t.Errorf("no %s entry in:\n%s", tool, entries)
		}
	}
	if n := b.count(`#entries tbody tr .badge`); n != 4 || strings.Count(entries, "pending") != 4 {
		t.Errorf("the entries are not all pending:\n%s", entries)
	}
	if got := b.text("main table.grid:not(#entries)"); !strings.Contains(got, "Explore the gateway client") {
		t.Errorf("the children table: %q", got)
	}
	b.shot("session")
	b.live()
	b.mark()
	must(t, h.Status(ctx, sid, "idle"))
	b.until("the extraction in the open session page", `(function(){
		var row = document.querySelector("#extractions tbody tr");
		return row && !document.querySelector("#entries") && !document.querySelector("#claims");
	})()`)
	b.stayed("/sessions/" + sid)
	if row := b.text("#extractions tbody tr"); !strings.Contains(row, "fake/session-model") || !strings.Contains(row, "$0.0042") ||
		!strings.Contains(row, "5200") || !strings.Contains(row, "640") {
		t.Errorf("the extraction's row: %q, want its model, tokens and cost", row)
	}
	if got := b.text("#extractions tbody tr td:nth-child(3)"); got != "4" {
		t.Errorf("the extraction's row says %s entries, want 4", got)
	}
	if n := len(r.entries(sid)); n != 0 {
		t.Errorf("%d entries left in the journal after the extraction", n)
	}
	// Provenance (issue 29): the calls the extraction completed and the memories it wrote.
	prov := b.text("#provenance tbody")
	for _, call := range []string{"call_0", "call_1", "call_2", task + "/call_task"} {
		if !strings.Contains(prov, call) {
			t.Errorf("the session page's provenance lacks the call %s:\n%s", call, prov)
		}
	}
	if n := b.count(`#provenance tbody a[href^="/memories/mem_"]`); n != len(uiMemories) {
		t.Errorf("the session page's provenance links %d memories, want the %d the extraction wrote:\n%s", n, len(uiMemories), prov)
	}

	// The memories the extraction wrote: search, open, edit.
	b.load("click Memories", http.StatusOK, "/memories", chromedp.Click(chromedp.CSS(`nav a[href="/memories"]`)))
	if n := b.count("#memories li[data-memory]"); n != len(uiMemories) {
		t.Fatalf("the memories page lists %d memories, want %d:\n%s", n, len(uiMemories), b.text("main"))
	}
	b.shot("memories")
	b.load("search for gateway", http.StatusOK, "/memories?q=gateway&project=&kind=&state=",
		chromedp.SendKeys(chromedp.CSS(`#memory-filters input[name=q]`), "gateway\n"))
	if n := b.count("#memories li[data-memory]"); n != 1 || !strings.Contains(b.text("#memories li"), "api-gw-02") {
		t.Fatalf("searching gateway found %d memories:\n%s", n, b.text("main"))
	}
	if got := b.text("main p.meta"); got != "The best matches for “gateway”." {
		t.Errorf("the search says %q", got)
	}
	id := eval[string](b, "read the memory's id", `document.querySelector("#memories li").dataset.memory`)
	b.load("click Edit", http.StatusOK, "/memories/"+id, chromedp.Click(chromedp.CSS(`#memories li a.button`)))
	// The memory's page says which calls fed it (issue 29).
	if got := b.text("#provenance"); !strings.Contains(got, "Extracted from session "+sid+" by extraction ") ||
		!strings.Contains(got, "bash bash call_0") || !strings.Contains(got, "grep grep "+task+"/call_task") {
		t.Errorf("the memory page's provenance:\n%s", got)
	}
	old := uiMemories[1]["content"].(string)
	if got := eval[string](b, "read the text", `document.querySelector("#edit textarea[name=content]").value`); got != old {
		t.Errorf("the edit form holds %q, want %q", got, old)
	}
	if got := eval[string](b, "read the kind", `document.querySelector("#edit select[name=kind]").value`); got != "pitfall" {
		t.Errorf("the edit form's kind is %q, want pitfall", got)
	}
	if got := eval[string](b, "read the tags", `document.querySelector("#edit input[name=tags]").value`); got != "gateway, network" {
		t.Errorf("the edit form's tags are %q", got)
	}
	edited := "The api-gw-02 gateway times out after 30 s under load; retry with exponential backoff and jitter."
	b.do("edit the text and the tags",
		chromedp.Clear(chromedp.CSS(`#edit textarea[name=content]`)),
		chromedp.SendKeys(chromedp.CSS(`#edit textarea[name=content]`), edited),
		chromedp.Clear(chromedp.CSS(`#edit input[name=tags]`)),
		chromedp.SendKeys(chromedp.CSS(`#edit input[name=tags]`), "gateway, network, retry"))
	b.load("click Save", http.StatusOK, "/memories/"+id+"?saved=1", chromedp.Click(chromedp.CSS(`#edit button[type=submit]`)))
	if got := b.text("#saved"); got != "Saved." {
		t.Errorf("after Save the page says %q", got)
	}
	if got := eval[string](b, "read the text", `document.querySelector("#edit textarea[name=content]").value`); got != edited {
		t.Errorf("after Save the form holds %q, want %q", got, edited)
	}
	if got := eval[string](b, "read the tags", `document.querySelector("#edit input[name=tags]").value`); got != "gateway, network, retry" {
		t.Errorf("after Save the tags are %q", got)
	}
	if audit := b.text("#audit tbody"); !strings.Contains(audit, "update") || !strings.Contains(audit, "a person") || !strings.Contains(audit, old) {
		t.Errorf("the history after the edit:\n%s", audit)
	}
	var shown struct {
		Memory memory.Memory `json:"memory"`
	}
	must(t, r.tryAPI("memory.get", map[string]any{"id": id}, &shown))
	if shown.Memory.Content != edited || strings.Join(shown.Memory.Tags, ",") != "gateway,network,retry" {
		t.Errorf("thatch keeps %q %v after the edit, want %q with the tag retry", shown.Memory.Content, shown.Memory.Tags, edited)
	}
	b.shot("memory")

	// Forget it from the list, then Undo.
	b.load("click the crumb Memories", http.StatusOK, "/memories", chromedp.Click(chromedp.CSS(`p.crumbs a[href="/memories"]`)))
	b.load("search for jitter", http.StatusOK, "/memories?q=jitter&project=&kind=&state=",
		chromedp.SendKeys(chromedp.CSS(`#memory-filters input[name=q]`), "jitter\n"))
	if got := b.text(fmt.Sprintf(`#memories li[data-memory=%q] p.content`, id)); got != edited {
		t.Fatalf("searching a word of the new text finds %q:\n%s", got, b.text("main"))
	}
	b.load("click Forget", http.StatusOK, "/memories?forgot="+id+"&q=jitter",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#memories li[data-memory=%q] button.danger`, id))))
	if got := b.text("#undo"); !strings.Contains(got, "Forgot “"+edited+"”") {
		t.Errorf("after Forget the page says %q", got)
	}
	if n := b.count(fmt.Sprintf(`#memories li[data-memory=%q]`, id)); n != 0 {
		t.Errorf("the forgotten memory is still listed")
	}
	must(t, r.tryAPI("memory.get", map[string]any{"id": id}, &shown))
	if shown.Memory.ForgottenAt == nil {
		t.Errorf("thatch did not forget %s", id)
	}
	b.load("click Undo", http.StatusOK, "/memories?q=jitter&restored="+id, chromedp.Click(chromedp.CSS(`#undo button`)))
	if b.count("#undo") != 0 || b.count(fmt.Sprintf(`#memories li[data-memory=%q]`, id)) != 1 || !strings.Contains(b.text("#restored"), "Restored") {
		t.Errorf("after Undo the page shows:\n%s", b.text("main"))
	}
	shown.Memory = memory.Memory{}
	must(t, r.tryAPI("memory.get", map[string]any{"id": id}, &shown))
	if shown.Memory.ForgottenAt != nil || shown.Memory.Content != edited {
		t.Errorf("after Undo thatch keeps %+v", shown.Memory)
	}

	// Forget one from its own page, with a reason; its page then offers Restore.
	b.load("show every memory", http.StatusOK, "/memories", chromedp.Navigate(base+"/memories"))
	pref := eval[string](b, "find the preference", `[...document.querySelectorAll("#memories li")].find(li => li.textContent.includes("table-driven")).dataset.memory`)
	b.load("open the preference", http.StatusOK, "/memories/"+pref, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#memories li[data-memory=%q] a.button`, pref))))
	b.do("give a reason", chromedp.SendKeys(chromedp.CSS(`#forget input[name=reason]`), "we dropped that rule"))
	b.load("click Forget on its page", http.StatusOK, "/memories?forgot="+pref, chromedp.Click(chromedp.CSS(`#forget button`)))
	if b.count("#undo") != 1 || b.count(fmt.Sprintf(`#memories li[data-memory=%q]`, pref)) != 0 {
		t.Errorf("after Forget on its page, the list shows:\n%s", b.text("main"))
	}
	b.load("open the forgotten memory", http.StatusOK, "/memories/"+pref, chromedp.Navigate(base+"/memories/"+pref))
	if got := b.text("#restore"); !strings.Contains(got, "Forgotten") || b.count("#edit") != 0 {
		t.Errorf("a forgotten memory's page shows %q and %d edit forms", got, b.count("#edit"))
	}
	if audit := b.text("#audit tbody"); !strings.Contains(audit, "forget") || !strings.Contains(audit, "we dropped that rule") {
		t.Errorf("the history after the forget:\n%s", audit)
	}
	b.load("click Restore", http.StatusOK, "/memories/"+pref, chromedp.Click(chromedp.CSS(`#restore button`)))
	if b.count("#restore") != 0 || b.count("#edit") != 1 {
		t.Errorf("after Restore the page shows:\n%s", b.text("main"))
	}

	// A search with no words: the form again, saying so, over the newest memories.
	b.load("show every memory again", http.StatusOK, "/memories", chromedp.Navigate(base+"/memories"))
	b.load("search for *", http.StatusOK, "/memories?q=*&project=&kind=&state=",
		chromedp.SendKeys(chromedp.CSS(`#memory-filters input[name=q]`), "*\n"))
	if got := b.text("#no-words"); !strings.Contains(got, "“*” has no word to search for") || b.count("#memory-filters") != 1 ||
		b.count("#memories li[data-memory]") != len(uiMemories) {
		t.Errorf("searching * shows:\n%s", b.text("main"))
	}

	// Hygiene: the total by kind, 50 signals a page. Memories untouched for 200 days
	// (imported) are stale: 55 of them and the pair make two pages.
	const staleN = 55
	longAgo := time.Now().Add(-200 * 24 * time.Hour).UTC()
	var stale []memory.Memory
	for i := range staleN {
		at := longAgo.Add(time.Duration(i) * time.Minute)
		stale = append(stale, memory.Memory{ID: fmt.Sprintf("mem_%012x%08x", at.UnixMilli(), i), Project: h.Dir, Kind: "fact",
			Content: fmt.Sprintf("legacy note zq%da yk%db wx%dc", i, i, i), CreatedAt: at, UpdatedAt: at, Source: memory.Source{SessionID: "ses_import"}})
	}
	var imported struct {
		Added int `json:"added"`
	}
	must(t, r.tryAPI("memory.import", map[string]any{"memories": stale}, &imported))
	if imported.Added != staleN {
		t.Fatalf("imported %d stale memories, want %d", imported.Added, staleN)
	}
	b.load("click Hygiene", http.StatusOK, "/hygiene", chromedp.Click(chromedp.CSS(`nav a[href="/hygiene"]`)))
	if got, want := b.text("#hygiene-total"), fmt.Sprintf("%d findings: 1 duplicate pair, %d stale memories; this page shows 1 to 50.", staleN+1, staleN); got != want {
		t.Errorf("hygiene's total says %q, want %q", got, want)
	}
	if n := b.count("#signals li[data-memory]"); n != 49 || !strings.Contains(b.text("#hygiene-pager"), "page 1 of 2") {
		t.Errorf("hygiene's first page: %d stale memories, pager %q", n, b.text("#hygiene-pager"))
	}
	b.load("click next", http.StatusOK, "/hygiene?page=2", chromedp.Click(chromedp.CSS(`#hygiene-pager a`)))
	if n := b.count("#signals li[data-memory]"); n != staleN-49 || b.count("section.pair") != 0 ||
		!strings.Contains(b.text("#hygiene-total"), fmt.Sprintf("this page shows 51 to %d", staleN+1)) {
		t.Errorf("hygiene's second page:\n%s", b.text("main"))
	}
	b.load("click previous", http.StatusOK, "/hygiene?page=1", chromedp.Click(chromedp.CSS(`#hygiene-pager a`)))

	// The near-duplicate pair, side by side; "Not duplicates" closes it.
	if n := b.count("section.pair"); n != 1 {
		t.Fatalf("hygiene shows %d duplicate pairs, want 1:\n%s", n, b.text("main"))
	}
	if n := eval[int](b, "read the pair", `[...document.querySelectorAll("section.pair textarea")].filter(t => t.value.includes("staging database")).length`); n != 2 {
		t.Errorf("the pair's sides:\n%s", b.text("section.pair"))
	}
	b.shot("hygiene")
	b.load("click Not duplicates", http.StatusOK, "/hygiene", chromedp.Click(chromedp.CSS(`section.pair .dismiss button`)))
	if b.count("section.pair") != 0 || !strings.Contains(b.text("main"), "No duplicate pair is open.") {
		t.Errorf("after Not duplicates hygiene shows:\n%s", b.text("main"))
	}

	// Dead letters: two events thatch could not apply, with why.
	must(t, h.PublishRaw(ctx, "session.status", []byte(`{not json`), "bad-1", 0))
	must(t, h.PublishRaw(ctx, "session.status", []byte(`{"id":"e3","type":"session.status","properties":{"sessionID":"s","status":"idle"}}`), "bad-2", 0))
	waitFor(t, "the bad events to be rejected", func() bool { return r.status().Rejected == 2 })
	b.load("click Dead letters", http.StatusOK, "/deadletters", chromedp.Click(chromedp.CSS(`nav a[href="/deadletters"]`)))
	if n := b.count("#deadletters tbody tr"); n != 2 {
		t.Errorf("the dead letters page lists %d, want 2:\n%s", n, b.text("main"))
	}
	if dl := b.text("#deadletters tbody"); !strings.Contains(dl, "not a JSON object") || !strings.Contains(dl, "session.status properties") ||
		!strings.Contains(dl, "opencode.h1.event.session.status") {
		t.Errorf("the dead letters:\n%s", dl)
	}
	b.shot("deadletters")

	// The strand sweep: a session of the host whose folder is gone is in the plan (a dry
	// run); running it moves the session to a folder that exists, and the plan is empty.
	waitFor(t, "the hello's sweep to list the host's sessions", func() bool { return len(h.CallsTo("session.list")) > 0 })
	gone := filepath.Join(t.TempDir(), "old-worktree")
	must(t, os.Mkdir(gone, 0o755))
	h.AddSession(runtime.SessionInfo{ID: "ses_stranded", Title: "spike in a removed worktree", Directory: gone, ProjectID: "p1"})
	must(t, os.RemoveAll(gone))
	b.load("click Sweep", http.StatusOK, "/sweep", chromedp.Click(chromedp.CSS(`nav a[href="/sweep"]`)))
	if b.count("#plan-empty")+b.count("table#plan") != 1 || b.count("#run-sweep") != 1 {
		t.Fatalf("the sweep page shows no plan:\n%s", b.text("main"))
	}
	if plan := b.text("table#plan tbody"); b.count("table#plan tbody tr") != 1 || !strings.Contains(plan, gone) ||
		b.count(`table#plan code`) != 1 || b.count(`table#plan a`) != 0 { // thatch never tracked it: no page to link to
		t.Errorf("the sweep's plan, want ses_stranded in %s:\n%s", gone, b.text("main"))
	}
	b.shot("sweep")
	b.load("click Run the sweep now", http.StatusOK, "/sweep", chromedp.Click(chromedp.CSS(`#run-sweep button`)))
	if got := b.text("#swept"); !strings.Contains(got, "The sweep run from this page") || !strings.Contains(got, "1 action.") {
		t.Errorf("after running the sweep the page says %q:\n%s", got, b.text("main"))
	}
	waitFor(t, "the stranded session to be moved", func() bool { s, _ := h.Session("ses_stranded"); return s.Directory == h.Dir })
	b.load("click Plan again", http.StatusOK, "/sweep", chromedp.Click(chromedp.CSS(`#run-sweep a.button`)))
	if b.count("#plan-empty") != 1 {
		t.Errorf("the plan after the sweep:\n%s", b.text("main"))
	}

	// The overview again, with what happened.
	b.load("click Overview", http.StatusOK, "/", chromedp.Click(chromedp.CSS(`nav a[href="/"]`)))
	b.live()
	for sel, want := range map[string]string{"#stat-hosts": "1", "#stat-memories": fmt.Sprint(len(uiMemories) + staleN), "#stat-pending": "0"} {
		if got := b.text(sel); got != want {
			t.Errorf("the overview's %s says %s, want %s", sel, got, want)
		}
	}
	if got := b.text(`.card.bad a[href="/deadletters"]`); got != "2" {
		t.Errorf("the overview's rejected card says %q, want 2 (marked bad)", got)
	}
	if got := b.text("table.kv"); !strings.Contains(got, "1 extraction,") || !strings.Contains(got, "$0.0042") {
		t.Errorf("the overview's extraction cost:\n%s", got)
	}
	b.shot("overview")

	// A form posted without its CSRF field is refused.
	if code := eval[int](b, "post without csrf", `fetch("/sweep", {method: "POST", body: new URLSearchParams({host: ""})}).then(r => r.status)`); code != http.StatusForbidden {
		t.Errorf("a POST without the CSRF field answered %d, want 403", code)
	}

	// Sign out: the page says how to come back, and the session is gone (its cookie,
	// replayed, opens nothing).
	b.load("click Sign out", http.StatusOK, "/logout", chromedp.Click(chromedp.CSS(`#logout button`)))
	if got := b.text("main"); !strings.Contains(got, "Signed out") || !strings.Contains(got, "thatch ui") {
		t.Errorf("after Sign out the page says:\n%s", got)
	}
	cookies, err = chromedp.Call(bctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/"}})
	must(t, err)
	if len(cookies.Cookies) != 0 {
		t.Errorf("cookies after Sign out: %+v", cookies.Cookies)
	}
	b.load("open the overview after Sign out", http.StatusUnauthorized, "/", chromedp.Navigate(base+"/"))
	replay, err := http.NewRequest("GET", base+"/", nil)
	must(t, err)
	replay.AddCookie(&http.Cookie{Name: cookieName, Value: session})
	resp, err := http.DefaultClient.Do(replay)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the signed-out session's cookie replayed: %s, want 401", resp.Status)
	}

	// A browser without the cookie gets the 401 page, which says to run thatch ui; so does
	// a link with the broker token, as links were before.
	fresh, cancelFresh := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	defer cancelFresh()
	if err := chromedp.Do(fresh); err != nil { // its tab lives as long as fresh, not one step's timeout
		t.Fatalf("open a tab in a new browser context: %v", err)
	}
	nb := &tab{t: t, ctx: fresh, base: base}
	for _, u := range []string{base + "/", base + "/memories", base + "/?token=" + tok} {
		nb.load("open "+u+" without the cookie", http.StatusUnauthorized, "", chromedp.Navigate(u))
		if got := nb.text("main"); !strings.Contains(got, "401 Unauthorized") || !strings.Contains(got, "Run thatch ui") {
			t.Errorf("%s without the cookie shows:\n%s", u, got)
		}
		if nb.count("header nav") != 0 || nb.count("#live") != 0 {
			t.Errorf("%s: the 401 page shows the navigation", u)
		}
	}
	if got := nb.text("main p.warn"); !strings.Contains(got, "no longer open the page") {
		t.Errorf("a link with the broker token says %q", got)
	}
	t.Logf("the browser test took %s", time.Since(began).Round(time.Millisecond))
}
