package web_test

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/adapters/web"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// The texts a person's sessions and memories hold: the page shows them, the metrics never.
const (
	secretTitle  = "Quokka-Zanzibar migration plan 7731"
	secretMemory = "the Quokka-Zanzibar vault opens with the blue lever 8842"
	topID        = "ses_top_quokka_zanzibar_0001"
	taskID       = "ses_task_quokka_zanzibar_0002"
	otherTopID   = "ses_other_top_0003"
)

var (
	api = memory.Caller{Project: "github.com/acme/api", SessionID: topID, Directory: "/w/api"}
	www = memory.Caller{Project: "github.com/acme/www", SessionID: otherTopID, Directory: "/w/www"}
)

// populate applies a host, two top-level sessions (one with a task child and two
// entries) and a rejected event to the loop, and writes memories of two projects.
func (r *rig) populate() (mems map[string]memory.Memory) {
	r.t.Helper()
	r.hello()
	r.created(topID, "", secretTitle, "/w/api")
	r.created(taskID, topID, "run the linter", "/w/api")
	r.created(otherTopID, "", "www redesign", "/w/www")
	r.toolCall(topID, "call_1", "List the migrations")
	r.toolCall(topID, "call_2", "Read the vault config")
	r.deliverRaw("opencode.h1.event.session.created", `this is not json {`)
	r.applied()
	mems = map[string]memory.Memory{
		"secret":   r.remember(api, secretMemory),
		"decision": r.remember(api, "we deploy the api with blue green releases", memory.RememberArgs{Kind: "decision", Tags: []string{"deploy"}}),
		"www":      r.remember(www, "the www site builds with hugo extended"),
	}
	return mems
}

func TestHealthzAndReadyz(t *testing.T) {
	r := newRig(t)
	if res := r.do("GET", "/healthz", nil); res.code != 200 || strings.TrimSpace(res.body) != "ok" {
		t.Errorf("/healthz: %d %q, want 200 ok", res.code, res.body)
	}
	if res := r.do("GET", "/readyz", nil); res.code != 200 || strings.TrimSpace(res.body) != "ready" {
		t.Errorf("/readyz while ready: %d %q, want 200 ready", res.code, res.body)
	}

	cases := []struct {
		name string
		set  func()
		want string
	}{
		{"the consumer does not run", func() { r.consuming.Store(false) }, "broker unreachable"},
		{"the journal fails", func() { s := "disk I/O error: database or disk is full"; r.journalErr.Store(&s) }, "journal error: disk I/O error: database or disk is full"},
		{"status fails", func() { r.statusErr.Store(errPtr(runtime.ErrStopped)) }, runtime.ErrStopped.Error()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r.consuming.Store(true)
			r.journalErr.Store(nil)
			r.statusErr.Store(nil)
			c.set()
			res := r.do("GET", "/readyz", nil)
			if res.code != http.StatusServiceUnavailable || !strings.Contains(res.body, c.want) {
				t.Errorf("/readyz: %d %q, want 503 with %q", res.code, res.body, c.want)
			}
			// healthz answers while the process runs, ready or not.
			if res := r.do("GET", "/healthz", nil); res.code != 200 {
				t.Errorf("/healthz while not ready: %d", res.code)
			}
		})
	}
	r.consuming.Store(true)
	r.journalErr.Store(nil)
	r.statusErr.Store(nil)
	if res := r.do("GET", "/readyz", nil); res.code != 200 {
		t.Errorf("/readyz ready again: %d %q", res.code, res.body)
	}
}

// every page, GET and POST, of the endpoint.
var (
	getPages  = []string{"/", "/sessions", "/sessions/" + topID, "/sessions/ses_nope", "/memories", "/memories?q=vault", "/memories/mem_00000000000000000000", "/hygiene", "/deadletters", "/sweep", "/live", "/no/such/page"}
	postPages = []string{"/memories/mem_00000000000000000000", "/memories/mem_00000000000000000000/forget", "/memories/mem_00000000000000000000/restore", "/hygiene/merge", "/hygiene/dismiss", "/hygiene/projectwide", "/sweep"}
)

func TestEveryPageNeedsTheCookie(t *testing.T) {
	r := newRig(t)
	mems := r.populate()
	pages := append(slices.Clone(getPages), "/memories/"+mems["secret"].ID)
	name := r.srv.CookieName()
	wrong := &http.Cookie{Name: name, Value: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	theToken := &http.Cookie{Name: name, Value: testToken}
	// The cookie thatch set before sessions: a key derived from the broker token.
	derived := &http.Cookie{Name: "thatch_ui", Value: oldKey(testToken, "session")}
	derivedHere := &http.Cookie{Name: name, Value: derived.Value}
	for _, p := range pages {
		for _, c := range []*http.Cookie{nil, wrong, theToken, derived, derivedHere} {
			var opts []reqOpt
			if c != nil {
				opts = append(opts, cookie(c))
			}
			res := r.do("GET", p, nil, opts...)
			if res.code != http.StatusUnauthorized {
				t.Errorf("GET %s (cookie %v): %d, want 401", p, c != nil, res.code)
				continue
			}
			if !strings.Contains(res.body, "thatch ui") {
				t.Errorf("GET %s: the 401 page does not say to run thatch ui:\n%s", p, res.body)
			}
			if res.header.Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s: 401 without WWW-Authenticate", p)
			}
			for _, secret := range []string{secretTitle, secretMemory, topID, taskID, mems["secret"].ID, "List the migrations"} {
				if strings.Contains(res.body, secret) {
					t.Errorf("GET %s without the cookie shows %q", p, secret)
				}
			}
		}
	}
	// Even with the right CSRF field, a POST without the cookie changes nothing.
	csrf := r.csrf(r.login(), "/memories")
	id := mems["secret"].ID
	posts := append(slices.Clone(postPages), "/memories/"+id, "/memories/"+id+"/forget")
	for _, p := range posts {
		for _, c := range []*http.Cookie{nil, wrong, theToken, derivedHere} {
			form := url.Values{"csrf": {csrf}, "content": {"changed by an intruder"}, "keep": {mems["decision"].ID}, "drop": {id},
				"a": {id}, "b": {mems["decision"].ID}, "id": {id}, "host": {"h1"}}
			if res := r.post(c, p, form); res.code != http.StatusUnauthorized || !strings.Contains(res.body, "thatch ui") {
				t.Errorf("POST %s (cookie %v): %d, want 401 naming thatch ui", p, c != nil, res.code)
			}
		}
	}
	for _, k := range []string{"secret", "decision"} {
		got, audit, err := r.mem.Get(context.Background(), mems[k].ID)
		if err != nil || got.Content != mems[k].Content || got.ForgottenAt != nil || len(audit) != 1 {
			t.Errorf("a POST without the cookie changed a memory: %+v, audit %+v, %v", got, audit, err)
		}
	}
	if calls := r.sweepCalls(); len(calls) != 0 {
		t.Errorf("a request without the cookie ran the sweep: %v", calls)
	}
	// The machines' endpoints and the page's static files need no cookie.
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/static/style.css", "/static/live.js"} {
		if res := r.do("GET", p, nil); res.code != 200 {
			t.Errorf("GET %s without the cookie: %d, want 200", p, res.code)
		}
	}
}

// oldKey is what thatch derived from the broker token for the cookie and the CSRF field
// before sessions: neither may open anything now.
func oldKey(token, purpose string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("thatch web " + purpose))
	return hex.EncodeToString(m.Sum(nil))
}

// The one-time link starts a session and leaves the address; it opens the page once, within
// a minute; nothing of the session is the broker token or derived from it.
func TestLoginLink(t *testing.T) {
	r := newRig(t)
	r.populate()
	link := r.link()
	if strings.Contains(link, testToken) || !strings.HasPrefix(link, "/login?code=") {
		t.Errorf("the link %s", link)
	}
	res := r.do("GET", link, nil)
	if res.code != http.StatusSeeOther {
		t.Fatalf("GET %s: %d, want 303", link, res.code)
	}
	if loc := res.header.Get("Location"); loc != "/" {
		t.Errorf("redirected to %q, want / (the code leaves the address bar)", loc)
	}
	var c *http.Cookie
	for _, x := range res.resp.Cookies() {
		if x.Name == "thatch_ui_4224" {
			c = x
		}
	}
	if c == nil {
		t.Fatalf("no thatch_ui_4224 cookie set: %v", res.header.Values("Set-Cookie"))
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.MaxAge != 0 || !c.Expires.IsZero() {
		t.Errorf("cookie %+v, want HttpOnly, SameSite=Strict, Path=/, for the browser's session only", c)
	}
	if c.Secure {
		t.Error("cookie Secure without TLS: a browser would never send it back over http")
	}
	code := strings.TrimPrefix(link, "/login?code=")
	if len(c.Value) < 40 || c.Value == oldKey(testToken, "session") || strings.Contains(c.Value, code) {
		t.Errorf("the cookie %q is short, the old derived key or the code", c.Value)
	}
	for _, h := range []string{"Cache-Control", "X-Frame-Options", "Content-Security-Policy", "Referrer-Policy"} {
		if res.header.Get(h) == "" {
			t.Errorf("the login's answer has no %s header", h)
		}
	}
	if got := r.do("GET", "/sessions", nil, cookie(c)); got.code != 200 || !strings.Contains(got.body, secretTitle) {
		t.Errorf("GET /sessions with the cookie: %d", got.code)
	}

	// Used once: the same link again, with or without the cookie, starts nothing.
	usedOrOld := func(what, link string, opts ...reqOpt) {
		t.Helper()
		res := r.do("GET", link, nil, opts...)
		if res.code != http.StatusUnauthorized || !strings.Contains(res.body, "used already or has expired") || !strings.Contains(res.body, "thatch ui") {
			t.Errorf("%s: %d, want 401 saying to run thatch ui again\n%s", what, res.code, res.body)
		}
		if len(res.resp.Cookies()) != 0 {
			t.Errorf("%s set a cookie: %v", what, res.resp.Cookies())
		}
		if strings.Contains(res.body, secretTitle) {
			t.Errorf("%s shows the page", what)
		}
	}
	usedOrOld("the link used again", link)
	usedOrOld("the link used again in the browser it opened", link, cookie(c))
	usedOrOld("a code never minted", "/login?code=AAAA")
	usedOrOld("no code", "/login")
	usedOrOld("the broker token as the code", "/login?code="+url.QueryEscape(testToken))

	// Within a minute: a link a minute old opens nothing, one a little younger does.
	late, fresh := r.link(), r.link()
	r.advance(web.LoginTTL - time.Second)
	c2 := r.follow(fresh)
	r.advance(2 * time.Second)
	usedOrOld("a link over a minute old", late)

	// Each login is a session of its own: its own id and its own CSRF field.
	if c2.Value == c.Value {
		t.Error("two logins got the same session id")
	}
	if a, b := r.csrf(c, "/memories"), r.csrf(c2, "/memories"); a == b || a == oldKey(testToken, "csrf") {
		t.Errorf("the CSRF fields of two sessions: %s and %s", a, b)
	}

	// The broker token's link of old opens nothing and says what to do instead.
	res = r.do("GET", "/?token="+url.QueryEscape(testToken), nil)
	if res.code != http.StatusUnauthorized || !strings.Contains(res.body, "no longer open the page") || len(res.resp.Cookies()) != 0 {
		t.Errorf("GET /?token=: %d, want 401 saying links with the token no longer work\n%s", res.code, res.body)
	}
}

// A session ends after SessionIdle without a request, and SessionMax after its login
// however much it is used.
func TestSessionsExpire(t *testing.T) {
	r := newRig(t)
	idle, busy := r.login(), r.login()
	at := time.Duration(0) // since the logins
	check := func(c *http.Cookie, by time.Duration, want int, what string) {
		t.Helper()
		r.advance(by)
		at += by
		if res := r.do("GET", "/", nil, cookie(c)); res.code != want {
			t.Fatalf("%s, %s after the login: %d, want %d", what, at, res.code, want)
		}
	}
	check(busy, web.SessionIdle-time.Minute, 200, "a session used within its idle time")
	check(idle, 2*time.Minute, http.StatusUnauthorized, "a session left unused past its idle time")
	check(busy, 0, 200, "a session used all along")
	check(busy, web.SessionMax-web.SessionIdle-2*time.Minute, 200, "a session used all along, before its cap")
	check(busy, 2*time.Minute, http.StatusUnauthorized, "a session used all along, past its cap")
}

// Signing out ends the session (its cookie and its CSRF field), the page says how to come
// back, and the live stream of its open pages ends; the browser's other sessions stay.
func TestLogout(t *testing.T) {
	r := newRig(t)
	r.populate()
	c, other := r.login(), r.login()
	csrf := r.csrf(c, "/")
	req, _ := http.NewRequest("GET", r.ts.URL+"/live", nil)
	req.AddCookie(c)
	stream, err := r.client.Do(req) // its timeout bounds the read below
	if err != nil || stream.StatusCode != 200 {
		t.Fatalf("GET /live: %v", err)
	}
	defer stream.Body.Close()
	for _, bad := range []string{"", r.csrf(other, "/")} {
		if res := r.post(c, "/logout", url.Values{"csrf": {bad}}); res.code != http.StatusForbidden {
			t.Errorf("POST /logout with csrf %q: %d, want 403", bad, res.code)
		}
	}
	res := r.post(c, "/logout", url.Values{"csrf": {csrf}})
	if res.code != 200 || !strings.Contains(res.body, "Signed out") || !strings.Contains(res.body, "thatch ui") || strings.Contains(res.body, secretTitle) {
		t.Errorf("POST /logout: %d\n%s", res.code, res.body)
	}
	if cs := res.resp.Cookies(); len(cs) != 1 || cs[0].Name != r.srv.CookieName() || cs[0].MaxAge >= 0 {
		t.Errorf("the logout's cookies %v, want %s taken back", cs, r.srv.CookieName())
	}
	if res := r.do("GET", "/", nil, cookie(c)); res.code != http.StatusUnauthorized {
		t.Errorf("the cookie after the logout: %d, want 401", res.code)
	}
	if res := r.post(c, "/sweep", url.Values{"csrf": {csrf}}); res.code != http.StatusUnauthorized || len(r.sweepCalls()) != 0 {
		t.Errorf("a form of the ended session: %d, want 401", res.code)
	}
	if res := r.post(other, "/sweep", url.Values{"csrf": {csrf}}); res.code != http.StatusForbidden || len(r.sweepCalls()) != 0 {
		t.Errorf("the ended session's CSRF field with another session: %d, want 403", res.code)
	}
	if res := r.do("GET", "/", nil, cookie(other)); res.code != 200 {
		t.Errorf("the other session after the logout: %d", res.code)
	}
	// The open stream ends by itself: reading it to its end returns (within the client's
	// timeout, else it fails).
	if _, err := io.Copy(io.Discard, stream.Body); err != nil {
		t.Errorf("the live stream of the ended session: %v", err)
	}
	if n := strings.Count(r.page(other, "/"), `action="/logout"`); n != 1 {
		t.Errorf("the page has %d sign-out forms, want 1", n)
	}
}

// No session outlives the process: a new server (thatch restarted) takes no cookie of the
// old one.
func TestRestartEndsSessions(t *testing.T) {
	r := newRig(t)
	c := r.login()
	again := &web.Server{Listen: r.srv.Listen, Loop: r.srv.Loop, Status: r.srv.Status, Journal: r.srv.Journal,
		Memories: r.srv.Memories, Sweep: r.srv.Sweep, Metrics: r.srv.Metrics, Log: r.srv.Log}
	h, err := again.Handler()
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "http://127.0.0.1:4224/", nil)
	req.AddCookie(c)
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("the old session's cookie after a restart: %d, want 401", rec.Code)
	}
}

// Two thatches on one machine keep their cookies apart (a browser sends every cookie of
// 127.0.0.1 to each port); under TLS the cookie is Secure and __Host-.
func TestCookiePerPort(t *testing.T) {
	a, b := &web.Server{Listen: "127.0.0.1:4224"}, &web.Server{Listen: "127.0.0.1:4225"}
	if a.CookieName() == b.CookieName() {
		t.Errorf("two ports, one cookie name %s", a.CookieName())
	}
	s := &web.Server{Listen: "10.0.0.2:443", TLSCert: "cert.pem", TLSKey: "key.pem"}
	if got := s.CookieName(); got != "__Host-thatch_ui_443" {
		t.Errorf("the cookie's name under TLS: %s", got)
	}
}

func TestPages(t *testing.T) {
	r := newRig(t)
	mems := r.populate()
	c := r.login()

	t.Run("overview", func(t *testing.T) {
		body := r.page(c, "/")
		for _, want := range []string{"<html", "Overview", `id="hosts"`, `href="/sessions?host=h1"`, `<span class="n" id="stat-sessions">3</span>`, `<span class="n" id="stat-memories">3</span>`} {
			if !strings.Contains(body, want) {
				t.Errorf("the overview lacks %q", want)
			}
		}
		r.consuming.Store(false)
		defer r.consuming.Store(true)
		if body := r.page(c, "/"); !strings.Contains(body, "thatch is not consuming events") {
			t.Error("the overview does not say the consumer is not running")
		}
	})

	t.Run("sessions", func(t *testing.T) {
		body := r.page(c, "/sessions")
		top, task, other := strings.Index(body, `data-session="`+topID+`"`), strings.Index(body, `data-session="`+taskID+`"`), strings.Index(body, `data-session="`+otherTopID+`"`)
		if top < 0 || task < 0 || other < 0 {
			t.Fatalf("the sessions page lacks a session (top %d, task %d, other %d)", top, task, other)
		}
		if !(top < task) {
			t.Error("the task child is not under its parent")
		}
		if !regexp.MustCompile(`<tr class="depth-1 kind-task" data-session="` + taskID + `"`).MatchString(body) {
			t.Error("the task child is not at depth 1")
		}
		if !strings.Contains(body, secretTitle) {
			t.Error("the sessions page does not show the session's title")
		}
		if body := r.page(c, "/sessions?host=h2"); strings.Contains(body, `data-session="`) {
			t.Error("host h2 has no session, yet the page lists some")
		}
		body = r.page(c, "/sessions?q=redesign")
		if !strings.Contains(body, `data-session="`+otherTopID+`"`) || strings.Contains(body, `data-session="`+topID+`"`) {
			t.Error("q=redesign does not select the www session alone")
		}
		if body := r.page(c, "/sessions?q=nothing-has-this"); !strings.Contains(body, "No session matches") {
			t.Error("an empty search does not say so")
		}
	})

	t.Run("session", func(t *testing.T) {
		body := r.page(c, "/sessions/"+topID)
		for _, want := range []string{secretTitle, "List the migrations", "Read the vault config", `id="entries"`, `href="/sessions/` + taskID + `"`, "2 pending, 0 accepted"} {
			if !strings.Contains(body, want) {
				t.Errorf("the session page lacks %q", want)
			}
		}
		res := r.do("GET", "/sessions/ses_nobody_knows", nil, cookie(c))
		if res.code != http.StatusNotFound {
			t.Errorf("an unknown session: %d, want 404", res.code)
		}
	})

	t.Run("memories", func(t *testing.T) {
		body := r.page(c, "/memories")
		for _, m := range mems {
			if !strings.Contains(body, m.Content) {
				t.Errorf("/memories lacks %q", m.Content)
			}
		}
		filters := []struct {
			query     string
			want, not []string
		}{
			{"q=vault+lever", []string{"secret"}, []string{"www", "decision"}},
			{"project=github.com/acme/www", []string{"www"}, []string{"secret", "decision"}},
			{"project=/w/api", []string{"secret", "decision"}, []string{"www"}}, // a project's folder names it
			{"kind=decision", []string{"decision"}, []string{"secret", "www"}},
			{"project=github.com/acme/api&kind=fact", []string{"secret"}, []string{"decision", "www"}},
			{"project=github.com/nobody", nil, []string{"secret", "decision", "www"}},
		}
		for _, f := range filters {
			body := r.page(c, "/memories?"+f.query)
			for _, k := range f.want {
				if !strings.Contains(body, mems[k].Content) {
					t.Errorf("/memories?%s lacks the %s memory", f.query, k)
				}
			}
			for _, k := range f.not {
				if strings.Contains(body, mems[k].Content) {
					t.Errorf("/memories?%s shows the %s memory", f.query, k)
				}
			}
		}
		if res := r.do("GET", "/memories?kind=bogus", nil, cookie(c)); res.code != http.StatusBadRequest {
			t.Errorf("/memories?kind=bogus: %d, want 400", res.code)
		}
		// A search without words: TestSearchWithoutWords.
	})

	t.Run("memory", func(t *testing.T) {
		m := mems["decision"]
		body := r.page(c, "/memories/"+m.ID)
		for _, want := range []string{m.Content, `id="edit"`, `id="audit"`, "create", `value="deploy"`, "<option selected>decision</option>"} {
			if !strings.Contains(body, want) {
				t.Errorf("the memory page lacks %q", want)
			}
		}
		if res := r.do("GET", "/memories/mem_ffffffffffffffffffff", nil, cookie(c)); res.code != http.StatusNotFound {
			t.Errorf("an unknown memory: %d, want 404", res.code)
		}
	})

	t.Run("deadletters", func(t *testing.T) {
		body := r.page(c, "/deadletters")
		if !strings.Contains(body, `id="deadletters"`) || !strings.Contains(body, "opencode.h1.event.session.created") || !strings.Contains(body, "this is not json {") {
			t.Errorf("the dead letters page does not show the rejected event:\n%s", body)
		}
		for _, bad := range []string{"before=x", "before=0", "before=-3"} {
			if res := r.do("GET", "/deadletters?"+bad, nil, cookie(c)); res.code != http.StatusBadRequest {
				t.Errorf("/deadletters?%s: %d, want 400", bad, res.code)
			}
		}
		if body := r.page(c, "/deadletters?before=1"); !strings.Contains(body, "No older dead letter") {
			t.Error("an empty older page does not say so")
		}
	})

	t.Run("sweep", func(t *testing.T) {
		before := len(r.sweepCalls())
		body := r.page(c, "/sweep?host=h1")
		if calls := r.sweepCalls()[before:]; len(calls) != 1 || calls[0] != (sweepCall{"h1", true}) {
			t.Errorf("GET /sweep called the sweep %v, want one dry run of h1", calls)
		}
		if !strings.Contains(body, "ses_stra") || !strings.Contains(body, "A dry run: nothing was done yet") || !strings.Contains(body, `id="plan"`) {
			t.Errorf("GET /sweep does not show the plan:\n%s", body)
		}
		csrf := csrfField.FindStringSubmatch(body)[1]

		// Without the CSRF field, or with a wrong one: refused, and the sweep does not run.
		for _, bad := range []url.Values{{"host": {"h1"}}, {"host": {"h1"}, "csrf": {"00" + csrf[2:]}}} {
			before = len(r.sweepCalls())
			if res := r.post(c, "/sweep", bad); res.code != http.StatusForbidden {
				t.Errorf("POST /sweep with csrf %q: %d, want 403", bad.Get("csrf"), res.code)
			}
			if calls := r.sweepCalls()[before:]; len(calls) != 0 {
				t.Errorf("a refused POST ran the sweep: %v", calls)
			}
		}
		before = len(r.sweepCalls())
		res := r.post(c, "/sweep", url.Values{"host": {"h1"}, "csrf": {csrf}})
		if res.code != http.StatusSeeOther {
			t.Errorf("POST /sweep: %d, want 303 back to the plan\n%s", res.code, res.body)
		}
		if calls := r.sweepCalls()[before:]; len(calls) != 1 || calls[0] != (sweepCall{"h1", false}) {
			t.Errorf("POST /sweep called the sweep %v, want one run of h1", calls)
		}
		// The plan shows what the run did, whatever the live updates fetch again.
		if body := r.page(c, "/sweep?host=h1"); !strings.Contains(body, `id="swept"`) || !strings.Contains(body, "on host h1: 1 action.") {
			t.Errorf("GET /sweep after the run does not say what it did:\n%s", body)
		}
	})

	t.Run("partial", func(t *testing.T) {
		for _, p := range []string{"/", "/sessions", "/sessions/" + topID, "/memories", "/memories/" + mems["www"].ID, "/hygiene", "/deadletters", "/sweep"} {
			whole := r.page(c, p)
			part := r.page(c, p, header("X-Partial", "1"))
			if !strings.Contains(whole, "<html") || !strings.Contains(whole, `<main id="main">`) {
				t.Errorf("GET %s is not a whole page", p)
			}
			if strings.Contains(part, "<html") || strings.Contains(part, "<head") || strings.Contains(part, `<main id="main">`) || strings.Contains(part, "<nav>") {
				t.Errorf("GET %s with X-Partial: 1 is more than the main part:\n%s", p, part)
			}
			if !strings.Contains(part, "<h1") {
				t.Errorf("GET %s with X-Partial: 1 lacks the page's heading:\n%s", p, part)
			}
		}
	})

	t.Run("headers", func(t *testing.T) {
		res := r.do("GET", "/sessions/"+topID, nil, cookie(c))
		if res.header.Get("Cache-Control") != "no-store" {
			t.Errorf("a page with session content may be cached: Cache-Control %q", res.header.Get("Cache-Control"))
		}
		if res.header.Get("X-Frame-Options") != "DENY" || !strings.Contains(res.header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Error("a page may be framed")
		}
	})

	t.Run("unknown page", func(t *testing.T) {
		res := r.do("GET", "/no/such/page", nil, cookie(c))
		if res.code != http.StatusNotFound || !strings.Contains(res.body, "There is no page /no/such/page here") {
			t.Errorf("GET /no/such/page: %d\n%s", res.code, res.body)
		}
	})
}

func TestLive(t *testing.T) {
	r := newRig(t)
	r.populate()
	c := r.login()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", r.ts.URL+"/live", nil)
	req.AddCookie(c)
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /live: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the stream ended before %s", what)
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s within 10 s", what)
		}
		return ""
	}
	if l := next("the retry line"); l != "retry: 2000" {
		t.Errorf("first line %q, want retry: 2000", l)
	}
	if l := next("the hello"); l != "event: hello" {
		t.Errorf("second line %q, want event: hello", l)
	}
	// A memory written is a change the page hears of.
	r.remember(api, "the nightly job rotates the logs at three")
	for {
		if l := next("a change event"); l == "event: change" {
			break
		}
	}
	// An event applied is one too.
	r.toolCall(topID, "call_3", "another step")
	r.applied()
	for {
		if l := next("a second change event"); l == "event: change" {
			break
		}
	}
	cancel()
	for range lines { // the stream ends once the client goes
	}
}

func TestFormsNeedTheCSRFField(t *testing.T) {
	r := newRig(t)
	mems := r.populate()
	c := r.login()
	m := mems["secret"]
	csrf := r.csrf(c, "/memories/"+m.ID)
	if other := r.csrf(c, "/memories"); other != csrf {
		t.Errorf("two pages carry different CSRF fields: %s and %s", csrf, other)
	}
	if csrf == testToken || strings.Contains(csrf, testToken) || csrf == c.Value || csrf == oldKey(testToken, "csrf") {
		t.Error("the CSRF field is the token, the cookie, or the key once derived from the token")
	}
	posts := []struct {
		path string
		form url.Values
	}{
		{"/memories/" + m.ID, url.Values{"content": {"rewritten by a forged form"}, "kind": {"fact"}}},
		{"/memories/" + m.ID + "/forget", url.Values{"reason": {"forged"}}},
		{"/hygiene/merge", url.Values{"keep": {m.ID}, "drop": {mems["decision"].ID}, "content": {"forged merge"}}},
		{"/hygiene/dismiss", url.Values{"a": {m.ID}, "b": {mems["decision"].ID}}},
		{"/hygiene/projectwide", url.Values{"id": {m.ID}}},
		{"/sweep", url.Values{"host": {"h1"}}},
	}
	for _, p := range posts {
		for _, bad := range []string{"", "nonsense", strings.Repeat("0", len(csrf)), testToken, c.Value, oldKey(testToken, "csrf")} {
			form := url.Values{}
			for k, v := range p.form {
				form[k] = v
			}
			if bad != "" {
				form.Set("csrf", bad)
			}
			res := r.post(c, p.path, form)
			if res.code != http.StatusForbidden || !strings.Contains(res.body, "CSRF") {
				t.Errorf("POST %s with csrf %q: %d, want 403", p.path, bad, res.code)
			}
		}
		// The field in the address, not the form, is not the form's field either.
		if res := r.post(c, p.path+"?csrf="+csrf, p.form); res.code != http.StatusForbidden {
			t.Errorf("POST %s?csrf=: %d, want 403", p.path, res.code)
		}
	}
	got, audit, err := r.mem.Get(context.Background(), m.ID)
	if err != nil || got.Content != secretMemory || got.ForgottenAt != nil || len(audit) != 1 {
		t.Errorf("refused forms changed the memory: %+v, %d audit rows, %v", got, len(audit), err)
	}
	if d := r.get(mems["decision"].ID); d.ForgottenAt != nil {
		t.Error("a refused merge forgot a memory")
	}
	if len(r.sweepCalls()) != 0 {
		t.Errorf("a refused form ran the sweep: %v", r.sweepCalls())
	}
}

func TestCrossOriginPostsAreRefused(t *testing.T) {
	r := newRig(t)
	mems := r.populate()
	c := r.login()
	m := mems["secret"]
	csrf := r.csrf(c, "/memories/"+m.ID)
	form := url.Values{"csrf": {csrf}, "reason": {"cross-site"}}
	for _, h := range [][2]string{{"Sec-Fetch-Site", "cross-site"}, {"Sec-Fetch-Site", "same-site"}, {"Origin", "https://evil.example"}} {
		res := r.post(c, "/memories/"+m.ID+"/forget", form, header(h[0], h[1]))
		if res.code != http.StatusForbidden {
			t.Errorf("POST with %s: %s: %d, want 403", h[0], h[1], res.code)
		}
	}
	res := r.post(c, "/memories/"+m.ID+"/forget", form, header("Origin", "https://evil.example"), header("Sec-Fetch-Site", "cross-site"))
	if res.code != http.StatusForbidden {
		t.Errorf("POST from another site: %d, want 403", res.code)
	}
	if got := r.get(m.ID); got.ForgottenAt != nil {
		t.Fatal("a cross-site POST forgot the memory")
	}
	// The page's own form, as the browser sends it, passes.
	res = r.post(c, "/memories/"+m.ID+"/forget", form, header("Origin", r.ts.URL), header("Sec-Fetch-Site", "same-origin"))
	if res.code != http.StatusSeeOther {
		t.Errorf("a same-origin POST: %d, want 303\n%s", res.code, res.body)
	}
	if got := r.get(m.ID); got.ForgottenAt == nil {
		t.Error("the same-origin forget did not forget")
	}
}

func TestOtherHostNamesAreRefused(t *testing.T) {
	r := newRig(t)
	r.populate()
	c := r.login()
	_, port, _ := strings.Cut(strings.TrimPrefix(r.ts.URL, "http://"), ":")
	for _, h := range []string{"evil.example", "evil.example:" + port, "127.0.0.1.evil.example", "localhost.evil.example:" + port, "10.1.2.3:" + port} {
		for _, p := range []string{"/", "/sessions/" + topID, "/healthz", "/metrics", r.link()} {
			res := r.do("GET", p, nil, cookie(c), hostHeader(h))
			if res.code != http.StatusMisdirectedRequest {
				t.Errorf("GET %s with Host %s: %d, want 421", p, h, res.code)
			}
			if strings.Contains(res.body, secretTitle) || len(res.resp.Cookies()) > 0 {
				t.Errorf("GET %s with Host %s answered content or a cookie", p, h)
			}
		}
	}
	for _, h := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port, "127.0.0.1"} {
		if res := r.do("GET", "/", nil, cookie(c), hostHeader(h)); res.code != 200 {
			t.Errorf("GET / with Host %s: %d, want 200", h, res.code)
		}
	}
}

func TestEditForgetRestore(t *testing.T) {
	r := newRig(t)
	mems := r.populate()
	c := r.login()
	m := mems["decision"]
	csrf := r.csrf(c, "/memories/"+m.ID)

	res := r.post(c, "/memories/"+m.ID, url.Values{"csrf": {csrf}, "content": {"we deploy the api with canary releases"}, "kind": {"decision"}, "tags": {"deploy, canary, deploy"}})
	if res.code != http.StatusSeeOther || res.header.Get("Location") != "/memories/"+m.ID+"?saved=1" {
		t.Fatalf("POST /memories/%s: %d to %q", m.ID, res.code, res.header.Get("Location"))
	}
	got, audit, _ := r.mem.Get(context.Background(), m.ID)
	if got.Content != "we deploy the api with canary releases" || got.Kind != "decision" || strings.Join(got.Tags, ",") != "deploy,canary" {
		t.Errorf("after the edit: %q %q %v", got.Content, got.Kind, got.Tags)
	}
	if len(audit) != 2 || audit[1].Op != "update" || audit[1].Before != m.Content {
		t.Errorf("the edit's audit: %+v", audit)
	}
	if body := r.page(c, "/memories/"+m.ID+"?saved=1"); !strings.Contains(body, `id="saved"`) {
		t.Error("the page does not say Saved")
	}

	// Only the kind: the text and the tags stay.
	res = r.post(c, "/memories/"+m.ID, url.Values{"csrf": {csrf}, "content": {got.Content}, "kind": {"pitfall"}, "tags": {"deploy, canary"}})
	if res.code != http.StatusSeeOther {
		t.Fatalf("kind edit: %d", res.code)
	}
	if got2 := r.get(m.ID); got2.Kind != "pitfall" || got2.Content != got.Content || strings.Join(got2.Tags, ",") != "deploy,canary" {
		t.Errorf("after the kind edit: %+v", got2)
	}
	// A form that changes nothing writes nothing.
	_, before, _ := r.mem.Get(context.Background(), m.ID)
	r.post(c, "/memories/"+m.ID, url.Values{"csrf": {csrf}, "content": {got.Content}, "kind": {"pitfall"}, "tags": {"deploy,canary"}})
	if _, after, _ := r.mem.Get(context.Background(), m.ID); len(after) != len(before) {
		t.Errorf("an unchanged form wrote %d audit rows", len(after)-len(before))
	}
	// A bad kind, a text another memory has: 400, nothing changed.
	for _, bad := range []url.Values{
		{"csrf": {csrf}, "content": {got.Content}, "kind": {"gossip"}},
		{"csrf": {csrf}, "content": {mems["secret"].Content}, "kind": {"pitfall"}},
	} {
		if res := r.post(c, "/memories/"+m.ID, bad); res.code != http.StatusBadRequest {
			t.Errorf("POST %v: %d, want 400", bad, res.code)
		}
	}
	if res := r.post(c, "/memories/mem_ffffffffffffffffffff", url.Values{"csrf": {csrf}, "content": {"x"}}); res.code != http.StatusNotFound {
		t.Errorf("editing an unknown memory: %d, want 404", res.code)
	}

	// Forget, from the list filtered by project: back to the same list, with the undo bar.
	back := "/memories?project=github.com%2Facme%2Fapi"
	res = r.post(c, "/memories/"+m.ID+"/forget", url.Values{"csrf": {csrf}, "reason": {"wrong"}, "back": {back}})
	if res.code != http.StatusSeeOther {
		t.Fatalf("forget: %d\n%s", res.code, res.body)
	}
	loc, _ := url.Parse(res.header.Get("Location"))
	if loc.Path != "/memories" || loc.Query().Get("project") != "github.com/acme/api" || loc.Query().Get("forgot") != m.ID {
		t.Errorf("forget redirected to %q", res.header.Get("Location"))
	}
	f := r.get(m.ID)
	if f.ForgottenAt == nil {
		t.Fatal("the memory is not forgotten")
	}
	body := r.page(c, res.header.Get("Location"))
	if !strings.Contains(body, `id="undo"`) || strings.Contains(body, `data-memory="`+m.ID+`"`) {
		t.Error("the list after a forget lacks the undo bar or still lists the memory")
	}
	if body := r.page(c, "/memories/"+m.ID); !strings.Contains(body, `id="restore"`) || strings.Contains(body, `id="edit"`) {
		t.Error("a forgotten memory's page does not offer restore only")
	}
	// Forgetting it again: 404 (no live memory).
	if res := r.post(c, "/memories/"+m.ID+"/forget", url.Values{"csrf": {csrf}}); res.code != http.StatusNotFound {
		t.Errorf("forgetting a forgotten memory: %d, want 404", res.code)
	}
	// A back outside the endpoint is not followed.
	for _, evil := range []string{"//evil.example/x", "https://evil.example/", `/\evil.example`} {
		m2 := r.remember(api, "a memory to forget with a bad back "+strings.NewReplacer("/", " ", ":", " ", `\`, " ", ".", " ").Replace(evil))
		res := r.post(c, "/memories/"+m2.ID+"/forget", url.Values{"csrf": {csrf}, "back": {evil}})
		if loc := res.header.Get("Location"); !strings.HasPrefix(loc, "/memories?") {
			t.Errorf("forget with back %q redirected to %q", evil, loc)
		}
	}

	// Restore (the undo bar's form).
	res = r.post(c, "/memories/"+m.ID+"/restore", url.Values{"csrf": {csrf}, "back": {back}})
	if res.code != http.StatusSeeOther {
		t.Fatalf("restore: %d\n%s", res.code, res.body)
	}
	if loc, _ := url.Parse(res.header.Get("Location")); loc.Query().Get("forgot") != "" || loc.Path != "/memories" {
		t.Errorf("restore redirected to %q", res.header.Get("Location"))
	}
	if got := r.get(m.ID); got.ForgottenAt != nil {
		t.Error("the memory is still forgotten after restore")
	}
	if res := r.post(c, "/memories/"+m.ID+"/restore", url.Values{"csrf": {csrf}}); res.code != http.StatusBadRequest {
		t.Errorf("restoring a live memory: %d, want 400", res.code)
	}
}

// A textarea's text comes back from the browser with CRLF line ends (HTML's form
// submission normalizes them). Saving only the tags of a memory of several lines must not
// rewrite its text.
func TestEditKeepsTheTextOfSeveralLines(t *testing.T) {
	r := newRig(t)
	c := r.login()
	m := r.remember(api, "deploys:\n1. build the image\n2. push it to the registry")
	csrf := r.csrf(c, "/memories/"+m.ID)
	asBrowser := strings.ReplaceAll(m.Content, "\n", "\r\n")
	res := r.post(c, "/memories/"+m.ID, url.Values{"csrf": {csrf}, "content": {asBrowser}, "kind": {m.Kind}, "tags": {"deploy"}})
	if res.code != http.StatusSeeOther {
		t.Fatalf("edit: %d\n%s", res.code, res.body)
	}
	got, audit, _ := r.mem.Get(context.Background(), m.ID)
	if got.Content != m.Content {
		t.Errorf("saving the tags rewrote the text: %q, want %q", got.Content, m.Content)
	}
	if strings.Join(got.Tags, ",") != "deploy" {
		t.Errorf("tags %v, want deploy", got.Tags)
	}
	if len(audit) != 2 { // create, and the tags' update
		t.Errorf("audit %+v", audit)
	}

	// A merge that keeps a text of several lines as it is: the text stays, unchanged.
	other := r.remember(api, "deploys:\n1. build the image\n2. push it to the registry\n3. tag the release")
	res = r.post(c, "/hygiene/merge", url.Values{"csrf": {csrf}, "keep": {m.ID}, "drop": {other.ID}, "content": {asBrowser + "\r\n"}})
	if res.code != http.StatusSeeOther {
		t.Fatalf("merge: %d\n%s", res.code, res.body)
	}
	got, audit, _ = r.mem.Get(context.Background(), m.ID)
	if got.Content != m.Content || len(audit) != 2 {
		t.Errorf("a merge keeping the text rewrote it: %q, audit %+v", got.Content, audit)
	}
}

// A duplicate pair: two memories of one project that differ by a word.
const (
	ten    = "alpha bravo charlie delta echo foxtrot golf hotel india juliet"
	oneOff = "alpha bravo charlie delta echo foxtrot golf hotel india kilo"
)

func TestHygieneMergeAndDismiss(t *testing.T) {
	r := newRig(t)
	c := r.login()
	a := r.remember(api, ten)
	b := r.remember(api, oneOff)
	r.remember(www, ten) // a look-alike in another project is never a pair
	stale := r.rememberAt(api, time.Now().Add(-200*24*time.Hour), "the old build server was called jenkins-two")

	body := r.page(c, "/hygiene")
	pair := regexp.MustCompile(`data-pair="(mem_[0-9a-f]+) (mem_[0-9a-f]+)"`).FindAllStringSubmatch(body, -1)
	if len(pair) != 1 || !(pair[0][1] == a.ID && pair[0][2] == b.ID || pair[0][1] == b.ID && pair[0][2] == a.ID) {
		t.Fatalf("pairs on /hygiene %v, want %s and %s", pair, a.ID, b.ID)
	}
	if !strings.Contains(body, `data-memory="`+stale.ID+`"`) || !strings.Contains(body, ">stale<") {
		t.Error("/hygiene does not show the stale memory")
	}
	csrf := csrfField.FindStringSubmatch(body)[1]

	// Refused merges change nothing.
	for _, bad := range []struct {
		form url.Values
		code int
	}{
		{url.Values{"csrf": {csrf}, "keep": {a.ID}, "drop": {a.ID}}, 400},
		{url.Values{"csrf": {csrf}, "keep": {a.ID}}, 400},
		{url.Values{"csrf": {csrf}, "keep": {a.ID}, "drop": {"mem_ffffffffffffffffffff"}, "content": {"x y z"}}, 404},
		{url.Values{"csrf": {csrf}, "keep": {"mem_ffffffffffffffffffff"}, "drop": {b.ID}}, 404},
	} {
		if res := r.post(c, "/hygiene/merge", bad.form); res.code != bad.code {
			t.Errorf("merge %v: %d, want %d", bad.form, res.code, bad.code)
		}
	}
	if r.get(a.ID).Content != ten || r.get(b.ID).ForgottenAt != nil {
		t.Fatal("a refused merge changed a memory")
	}

	// Merge: keep a with the text the person settled on, forget b.
	merged := "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo"
	res := r.post(c, "/hygiene/merge", url.Values{"csrf": {csrf}, "keep": {a.ID}, "drop": {b.ID}, "content": {merged}})
	undo := "/hygiene?merged=" + b.ID + "&into=" + a.ID + "&edited=1"
	if res.code != http.StatusSeeOther || res.header.Get("Location") != undo {
		t.Fatalf("merge: %d to %q, want %q\n%s", res.code, res.header.Get("Location"), undo, res.body)
	}
	// The page it comes back to says what happened and offers to undo it.
	if body := r.page(c, undo); !strings.Contains(body, `id="undo-merge"`) || !strings.Contains(body, `action="/hygiene/unmerge"`) ||
		!strings.Contains(body, `name="edited" value="1"`) {
		t.Errorf("the hygiene page after a merge has no undo:\n%s", body)
	}
	if got := r.get(a.ID); got.Content != merged || got.ForgottenAt != nil {
		t.Errorf("the kept memory: %+v", got)
	}
	gotB, auditB, _ := r.mem.Get(context.Background(), b.ID)
	if gotB.ForgottenAt == nil || auditB[len(auditB)-1].Reason != "merged into "+a.ID+" on thatch's page" {
		t.Errorf("the dropped memory: forgotten %v, audit %+v", gotB.ForgottenAt, auditB)
	}
	if body := r.page(c, "/hygiene"); strings.Contains(body, "data-pair=") {
		t.Error("the merged pair is still open")
	}
	// Undo: both memories as they were before the merge, and the pair open again.
	if res := r.post(c, "/hygiene/unmerge", url.Values{"csrf": {csrf}, "keep": {a.ID}, "drop": {b.ID}, "edited": {"1"}}); res.code != http.StatusSeeOther {
		t.Fatalf("unmerge: %d\n%s", res.code, res.body)
	}
	if got := r.get(a.ID); got.Content != ten || got.ForgottenAt != nil {
		t.Errorf("after the undo the kept memory says %q, want %q", got.Content, ten)
	}
	if r.get(b.ID).ForgottenAt != nil {
		t.Error("after the undo the dropped memory is still forgotten")
	}
	if res := r.post(c, "/hygiene/merge", url.Values{"csrf": {csrf}, "keep": {a.ID}, "drop": {b.ID}, "content": {merged}}); res.code != http.StatusSeeOther {
		t.Fatalf("merge again: %d", res.code)
	}

	// Merge keeping the dropped one's text: allowed, since the other is forgotten first.
	x := r.remember(api, "kilo lima mike november oscar papa quebec romeo sierra tango")
	y := r.remember(api, "kilo lima mike november oscar papa quebec romeo sierra uniform")
	res = r.post(c, "/hygiene/merge", url.Values{"csrf": {csrf}, "keep": {x.ID}, "drop": {y.ID}, "content": {y.Content}})
	if res.code != http.StatusSeeOther || r.get(x.ID).Content != y.Content || r.get(y.ID).ForgottenAt == nil {
		t.Errorf("merge keeping the other's text: %d, kept %q", res.code, r.get(x.ID).Content)
	}

	// Dismiss: a new pair, said not to be duplicates.
	p := r.remember(api, "victor whiskey xray yankee zulu amber bronze copper diamond emerald")
	q := r.remember(api, "victor whiskey xray yankee zulu amber bronze copper diamond ruby")
	h, _ := r.mem.Hygiene(context.Background(), nil, time.Now())
	if len(h.DuplicatePairs) != 1 {
		t.Fatalf("pairs before the dismiss: %v", h.DuplicatePairs)
	}
	res = r.post(c, "/hygiene/dismiss", url.Values{"csrf": {csrf}, "a": {p.ID}, "b": {q.ID}})
	if res.code != http.StatusSeeOther || res.header.Get("Location") != "/hygiene" {
		t.Fatalf("dismiss: %d to %q\n%s", res.code, res.header.Get("Location"), res.body)
	}
	h, _ = r.mem.Hygiene(context.Background(), nil, time.Now())
	if len(h.DuplicatePairs) != 0 {
		t.Errorf("pairs after the dismiss: %v", h.DuplicatePairs)
	}
	if r.get(p.ID).ForgottenAt != nil || r.get(q.ID).ForgottenAt != nil {
		t.Error("a dismiss forgot a memory")
	}
	if _, audit, _ := r.mem.Get(context.Background(), p.ID); audit[len(audit)-1].Op != "dismiss" {
		t.Errorf("the dismiss is not audited: %+v", audit)
	}
	if res := r.post(c, "/hygiene/dismiss", url.Values{"csrf": {csrf}, "a": {p.ID}, "b": {p.ID}}); res.code != http.StatusBadRequest {
		t.Errorf("dismissing a memory with itself: %d, want 400", res.code)
	}

	// The stale memory's forget goes back to /hygiene.
	res = r.post(c, "/memories/"+stale.ID+"/forget", url.Values{"csrf": {csrf}, "back": {"/hygiene"}, "reason": {"stale"}})
	if loc, _ := url.Parse(res.header.Get("Location")); res.code != http.StatusSeeOther || loc.Path != "/hygiene" {
		t.Errorf("forget from /hygiene: %d to %q", res.code, res.header.Get("Location"))
	}
	if r.get(stale.ID).ForgottenAt == nil {
		t.Error("the stale memory is not forgotten")
	}
}

// A memory of a deleted branch can be kept for the whole project from /hygiene.
func TestHygieneProjectWide(t *testing.T) {
	r := newRig(t)
	c := r.login()
	repo := filepath.Join(t.TempDir(), "repo")
	for name, text := range map[string]string{"HEAD": "ref: refs/heads/main\n", "refs/heads/main": "0123456789abcdef0123456789abcdef01234567\n"} {
		path := filepath.Join(repo, ".git", filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := r.remember(api, "the feature branch caches sessions in redis", memory.RememberArgs{Branch: "feat-gone", Directory: repo})
	dirExists := func(dir string) bool { fi, err := os.Stat(dir); return err == nil && fi.IsDir() }
	orphaned, _, err := r.mem.CheckBranches(context.Background(), dirExists, time.Now())
	if err != nil || orphaned != 1 {
		t.Fatalf("CheckBranches: %d orphaned, %v", orphaned, err)
	}
	body := r.page(c, "/hygiene")
	if !strings.Contains(body, `data-memory="`+m.ID+`"`) || !strings.Contains(body, "Keep for the whole project") {
		t.Fatalf("/hygiene does not offer to keep the orphan:\n%s", body)
	}
	csrf := csrfField.FindStringSubmatch(body)[1]
	res := r.post(c, "/hygiene/projectwide", url.Values{"csrf": {csrf}, "id": {m.ID}})
	if res.code != http.StatusSeeOther {
		t.Fatalf("projectwide: %d\n%s", res.code, res.body)
	}
	if got := r.get(m.ID); got.Branch != "" || got.Content != m.Content {
		t.Errorf("after projectwide: branch %q", got.Branch)
	}
	if body := r.page(c, "/hygiene"); strings.Contains(body, `data-memory="`+m.ID+`"`) {
		t.Error("the orphan is still listed")
	}
	if res := r.post(c, "/hygiene/projectwide", url.Values{"csrf": {csrf}, "id": {"mem_ffffffffffffffffffff"}}); res.code != http.StatusNotFound {
		t.Errorf("projectwide of an unknown memory: %d, want 404", res.code)
	}
}

// /metrics counts: no session id, title, folder or memory text is in it.
func TestMetricsHoldNoContent(t *testing.T) {
	r := newRig(t)
	mems := r.populate()
	r.metrics.ToolTook(runtime.ToolRemember, time.Millisecond, "")
	r.metrics.ToolTook("memory_"+secretTitle, time.Millisecond, "")
	body := r.scrape()
	for _, secret := range []string{secretTitle, "Quokka", "quokka", topID, taskID, otherTopID, mems["secret"].ID, mems["secret"].Content, "vault", "/w/api", "github.com/acme", "List the migrations"} {
		if strings.Contains(body, secret) {
			t.Errorf("/metrics holds %q", secret)
		}
	}
}

// Without memories the memory pages say so and the others work.
func TestWithoutMemoryStore(t *testing.T) {
	r := newRig(t)
	r.srv.Memories = nil
	h, err := r.srv.Handler()
	if err != nil {
		t.Fatal(err)
	}
	r.ts.Close()
	r.ts = httptest.NewServer(h)
	t.Cleanup(r.ts.Close)
	c := r.login()
	for _, p := range []string{"/memories", "/memories/mem_00000000000000000000", "/hygiene"} {
		if res := r.do("GET", p, nil, cookie(c)); res.code != http.StatusNotFound {
			t.Errorf("GET %s without a memory store: %d, want 404", p, res.code)
		}
	}
	if body := r.page(c, "/"); strings.Contains(body, `href="/memories"`) {
		t.Error("the navigation links to /memories without a memory store")
	}
}

// A failing status shows as an error page, not as a crash.
func TestOverviewWhileStatusFails(t *testing.T) {
	r := newRig(t)
	c := r.login()
	r.statusErr.Store(errPtr(errors.New("thatch is stopping")))
	res := r.do("GET", "/", nil, cookie(c))
	if res.code != http.StatusServiceUnavailable || !strings.Contains(res.body, "thatch is stopping") {
		t.Errorf("GET / while status fails: %d\n%s", res.code, res.body)
	}
}

// A merge the store refuses after the dropped memory was forgotten (the kept text is
// another live memory's, or too long) changes nothing: both memories stay live.
func TestRefusedMergeChangesNothing(t *testing.T) {
	r := newRig(t)
	c := r.login()
	a := r.remember(api, ten)
	b := r.remember(api, oneOff)
	third := r.remember(api, "the release train leaves on thursdays")
	csrf := r.csrf(c, "/hygiene")
	for _, content := range []string{third.Content, strings.Repeat("word ", memory.MaxContent)} {
		res := r.post(c, "/hygiene/merge", url.Values{"csrf": {csrf}, "keep": {a.ID}, "drop": {b.ID}, "content": {content}})
		if res.code != http.StatusBadRequest {
			t.Errorf("merge into a refused text: %d, want 400", res.code)
		}
		if got := r.get(b.ID); got.ForgottenAt != nil {
			t.Errorf("a refused merge (%d) forgot the memory to drop", res.code)
			if _, err := r.mem.Restore(context.Background(), memory.Caller{}, b.ID, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if got := r.get(a.ID); got.Content != ten {
			t.Errorf("a refused merge changed the kept memory: %q", got.Content)
		}
	}
	if h, _ := r.mem.Hygiene(context.Background(), nil, time.Now()); len(h.DuplicatePairs) != 1 {
		t.Errorf("after refused merges the pair is %v, want still open", h.DuplicatePairs)
	}
}

func TestPagers(t *testing.T) {
	r := newRig(t)
	c := r.login()

	// Memories: 50 a page, newest first, "older" after the last.
	var mems []memory.Memory
	for i := range 55 {
		mems = append(mems, r.rememberAt(api, time.Now().Add(time.Duration(i-60)*time.Second), "numbered memory "+strings.Repeat("x", i+1)))
	}
	body := r.page(c, "/memories")
	if n := strings.Count(body, `data-memory="`); n != 50 {
		t.Errorf("/memories lists %d memories, want 50", n)
	}
	more := regexp.MustCompile(`href="(/memories\?after=mem_[0-9a-f]+)"`).FindStringSubmatch(body)
	if more == nil {
		t.Fatal("/memories has no link to the older ones")
	}
	older := r.page(c, strings.ReplaceAll(more[1], "&amp;", "&"))
	if n := strings.Count(older, `data-memory="`); n != 5 || !strings.Contains(older, `data-memory="`+mems[0].ID+`"`) {
		t.Errorf("the older page lists %d memories, want the 5 oldest", n)
	}

	// Dead letters: 50 a page, newest first.
	for i := range 53 {
		r.deliverRaw("opencode.h1.event.session.created", "not json "+strings.Repeat("y", i))
	}
	r.applied()
	body = r.page(c, "/deadletters")
	if n := strings.Count(body, "<tr><td>"); n != 50 {
		t.Errorf("/deadletters shows %d rows, want 50", n)
	}
	more = regexp.MustCompile(`href="(/deadletters\?before=[0-9]+)"`).FindStringSubmatch(body)
	if more == nil {
		t.Fatal("/deadletters has no link to the older ones")
	}
	if n := strings.Count(r.page(c, more[1]), "<tr><td>"); n != 3 {
		t.Errorf("the older dead letters page shows %d rows, want 3", n)
	}

	// Sessions: 100 top-level sessions a page.
	for i := range 130 {
		r.created(fmt.Sprintf("ses_many_%03d", i), "", "many", "/w/many")
	}
	r.applied()
	body = r.page(c, "/sessions")
	if n := strings.Count(body, `<tr class="depth-0`); n != 100 || !strings.Contains(body, "page 1 of 2") {
		t.Errorf("/sessions shows %d top-level sessions (page 1 of 2: %v), want 100", n, strings.Contains(body, "page 1 of 2"))
	}
	if !strings.Contains(body, `href="/sessions?page=2"`) {
		t.Error("/sessions has no link to page 2")
	}
	if n := strings.Count(r.page(c, "/sessions?page=2"), `<tr class="depth-0`); n != 30 {
		t.Errorf("page 2 shows %d top-level sessions, want 30", n)
	}
}

// A sweep that is off answers the plan, and says why it cannot run.
func TestSweepErrors(t *testing.T) {
	r := newRig(t)
	r.srv.Sweep = func(_ context.Context, host string, dryRun bool) (runtime.SweepResult, error) {
		if !dryRun {
			return runtime.SweepResult{}, runtime.ErrSweepDisabled
		}
		return runtime.SweepResult{}, nil
	}
	c := r.login()
	body := r.page(c, "/sweep")
	if !strings.Contains(body, `id="plan-empty"`) {
		t.Error("an empty plan does not say so")
	}
	res := r.post(c, "/sweep", url.Values{"csrf": {csrfField.FindStringSubmatch(body)[1]}})
	if res.code != http.StatusSeeOther {
		t.Errorf("POST /sweep while the sweep is off: %d, want 303", res.code)
	}
	if body := r.page(c, "/sweep"); !strings.Contains(body, "THATCH_STRAND_SWEEP=off") {
		t.Errorf("the sweep page does not say the sweep is off:\n%s", body)
	}
}

// Run serves until its context ends; the stop ends the live pages' streams at once.
func TestRunStopsWithOpenLivePages(t *testing.T) {
	r := newRig(t)
	ln, err := web.Listen("127.0.0.1:0", "", "")
	if err != nil {
		t.Fatal(err)
	}
	srv := &web.Server{Listen: ln.Addr().String(), Loop: r.srv.Loop, Status: r.srv.Status, Journal: r.srv.Journal,
		Memories: r.srv.Memories, Sweep: r.srv.Sweep, Metrics: r.srv.Metrics, Log: r.srv.Log}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	code, _ := srv.NewLogin()
	login, err := r.client.Get(web.LoginURL(base+"/", code))
	if err != nil || login.StatusCode != http.StatusSeeOther || len(login.Cookies()) != 1 {
		t.Fatalf("the login through Run: %v", err)
	}
	login.Body.Close()
	c := login.Cookies()[0]
	for range 3 {
		req, _ := http.NewRequest("GET", base+"/live", nil)
		req.AddCookie(c)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		if resp.StatusCode != 200 || line != "retry: 2000\n" {
			t.Fatalf("GET /live: %d %q", resp.StatusCode, line)
		}
	}
	res, err := http.Get(base + "/healthz")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("/healthz through Run: %v", err)
	}
	res.Body.Close()
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5 s of its stop while live pages were open")
	}
	if took := time.Since(began); took > 1500*time.Millisecond {
		t.Errorf("the stop took %v with live pages open", took)
	}
	if res, err := http.Get(base + "/healthz"); err == nil {
		res.Body.Close()
		t.Error("the endpoint still answers after its stop")
	}
}

func TestPageURL(t *testing.T) {
	for _, c := range []struct {
		listen string
		tls    bool
		want   string
	}{
		{"127.0.0.1:4224", false, "http://127.0.0.1:4224/"},
		{"0.0.0.0:4224", true, "https://127.0.0.1:4224/"},
		{":4224", false, "http://127.0.0.1:4224/"},
		{"[::]:4224", false, "http://127.0.0.1:4224/"},
		{"[::1]:4224", false, "http://[::1]:4224/"},
		{"localhost:9", false, "http://localhost:9/"},
	} {
		if got := web.PageURL(c.listen, c.tls); got != c.want {
			t.Errorf("PageURL(%q, %v) = %q, want %q", c.listen, c.tls, got, c.want)
		}
	}
	if got := web.LoginURL("http://127.0.0.1:4224/", "a+b/c="); got != "http://127.0.0.1:4224/login?code=a%2Bb%2Fc%3D" {
		t.Errorf("LoginURL: %s", got)
	}
}

// An extraction's claim shows on its session's page: which child claimed how many
// entries, and that it runs.
func TestSessionPageShowsClaims(t *testing.T) {
	r := newRig(t)
	r.populate()
	c := r.login()
	r.deliver("session.status", `{"sessionID":"`+topID+`","status":{"type":"idle"}}`)
	r.applied()
	child := "ses_child_of_" + topID
	r.waitSession(topID, "an extraction child", func(s runtime.SessionRow) bool { return s.Child == child })
	a := r.loop.Tool(context.Background(), runtime.ToolCall{Name: runtime.ToolPayload, SessionID: child, CallID: "pc1", Args: []byte(`{}`)}, 0)
	if a.Err != nil || a.Payload == nil || len(a.Payload.Entries) != 2 {
		t.Fatalf("payload: %+v %+v", a.Err, a.Payload)
	}
	body := r.page(c, "/sessions/"+topID)
	claims := regexp.MustCompile(`(?s)<table class="grid" id="claims">.*?</table>`).FindString(body)
	if !strings.Contains(claims, `href="/sessions/`+child+`"`) || !strings.Contains(claims, "<td>2</td>") || !strings.Contains(claims, "running") {
		t.Errorf("the session page's claims:\n%s", claims)
	}
	if !strings.Contains(body, "extracting") {
		t.Error("the session page does not say it is extracting")
	}
	if body := r.page(c, "/sessions"); !regexp.MustCompile(`data-session="`+child+`"`).MatchString(body) || !strings.Contains(body, "kind-extraction") {
		t.Error("the extraction child is not under its parent on /sessions")
	}
}

// The overview says at once when the bridge cannot reach opencode: a banner, and the
// bridge's host marked unreachable rather than online.
func TestOverviewShowsTheBridgeDown(t *testing.T) {
	r := newRig(t)
	c := r.login()
	r.deliver("host.hello", `{"hostID":"h1","api":"v1","version":"x","bootID":"b1","directory":"/w","worktree":"/w","capabilities":{},"resumed":[]}`)
	r.applied()
	since := time.Now().UTC().Format(time.RFC3339Nano)
	up := `{"url":"http://127.0.0.1:4096","hostID":"h1","connected":true,"since":"` + since + `"}`
	r.bridge.Store(&up)
	if body := r.page(c, "/"); strings.Contains(body, `id="bridge-down"`) || !strings.Contains(body, `badge ok">online`) {
		t.Fatalf("with opencode reachable:\n%s", body)
	}
	if v := r.metricsNow().value("thatch_bridge_connected"); v != 1 {
		t.Fatalf("thatch_bridge_connected = %v with opencode reachable, want 1", v)
	}
	down := `{"url":"http://127.0.0.1:4096","hostID":"h1","connected":false,"since":"` + since + `","error":"connection refused"}`
	r.bridge.Store(&down)
	body := r.page(c, "/")
	if !strings.Contains(body, `id="bridge-down"`) || !strings.Contains(body, "connection refused") || !strings.Contains(body, ">unreachable<") {
		t.Fatalf("with opencode gone:\n%s", body)
	}
	if v := r.metricsNow().value("thatch_bridge_connected"); v != 0 {
		t.Fatalf("thatch_bridge_connected = %v with opencode gone, want 0", v)
	}
}

// Forgotten memories can be listed and restored from the page; an empty filtered list
// says it is the filter, not an empty store.
func TestForgottenMemoriesListed(t *testing.T) {
	r := newRig(t)
	c := r.login()
	m := r.remember(api, "the release branch is cut on thursdays")
	if _, err := r.mem.Forget(context.Background(), memory.Caller{}, m.ID, "test", time.Now()); err != nil {
		t.Fatal(err)
	}
	if body := r.page(c, "/memories"); strings.Contains(body, m.ID) || !strings.Contains(body, "No live memory:") {
		t.Errorf("the live list shows a forgotten memory, or the wrong empty text:\n%s", body)
	}
	body := r.page(c, "/memories?state=forgotten")
	if !strings.Contains(body, `data-memory="`+m.ID+`"`) || !strings.Contains(body, `action="/memories/`+m.ID+`/restore"`) {
		t.Fatalf("the forgotten list:\n%s", body)
	}
	if body := r.page(c, "/memories?kind=todo"); !strings.Contains(body, "No live memory with these filters") {
		t.Errorf("an empty filtered list:\n%s", body)
	}
}

// A memory an extraction wrote names the session it extracted (from the ledger), since
// the extraction child it names is deleted once done.
func TestMemoryNamesTheExtractedSession(t *testing.T) {
	r := newRig(t)
	c := r.login()
	child := "ses_child_gone"
	m := r.remember(memory.Caller{Project: api.Project, SessionID: child, CallID: "w1", Directory: "/w/api"}, "deploys need the office VPN")
	fx := runtime.NewEffects()
	now := time.Now()
	fx.Ledger = []runtime.LedgerRow{{Child: child, Root: "ses_root_extracted", Project: api.Project, Day: runtime.Day(now), At: now, Entries: 2}}
	if err := r.store.Commit(&runtime.Batch{Now: now, State: runtime.NewState(), Effects: fx}); err != nil {
		t.Fatal(err)
	}
	body := r.page(c, "/memories/"+m.ID)
	if !strings.Contains(body, "the extraction of session <code") || !strings.Contains(body, "ses_root_extracted") {
		t.Fatalf("the memory page does not name the extracted session:\n%s", body)
	}
	if strings.Contains(body, `href="/sessions/`+child+`"`) {
		t.Error("the memory page links to a session thatch does not track")
	}
}

// /static/ serves its files and lists nothing.
func TestStaticListsNothing(t *testing.T) {
	r := newRig(t)
	c := r.login()
	for _, p := range []string{"/static/", "/static", "/static/./", "/static//"} {
		for _, opts := range [][]reqOpt{nil, {cookie(c)}} {
			res := r.do("GET", p, nil, opts...)
			if res.code == 200 || strings.Contains(res.body, "live.js") || strings.Contains(res.body, "style.css") {
				t.Errorf("GET %s: %d, a listing of the folder:\n%s", p, res.code, res.body)
			}
		}
	}
	if res := r.do("GET", "/static/", nil); res.code != http.StatusNotFound {
		t.Errorf("GET /static/: %d, want 404", res.code)
	}
	if res := r.do("GET", "/static/live.js", nil); res.code != 200 || !strings.Contains(res.body, "EventSource") {
		t.Errorf("GET /static/live.js: %d", res.code)
	}
}

// A form over the size limit answers 413 saying so, not a CSRF refusal, and changes
// nothing.
func TestFormOverTheLimit(t *testing.T) {
	r := newRig(t)
	mems := r.populate()
	c := r.login()
	m := mems["secret"]
	csrf := r.csrf(c, "/memories/"+m.ID)
	res := r.post(c, "/memories/"+m.ID, url.Values{"csrf": {csrf}, "kind": {"fact"}, "content": {strings.Repeat("long text ", 120_000)}})
	if res.code != http.StatusRequestEntityTooLarge || !strings.Contains(res.body, "over the 1024 KiB") || strings.Contains(res.body, "CSRF") {
		t.Errorf("a form of 1.2 MB: %d, want 413 saying it is too long\n%s", res.code, res.body)
	}
	if got := r.get(m.ID); got.Content != secretMemory || got.Kind != m.Kind {
		t.Errorf("the refused form changed the memory: %+v", got)
	}
	// Without the session it is still a 401: the size says nothing to a stranger.
	if res := r.post(nil, "/memories/"+m.ID, url.Values{"content": {strings.Repeat("x", 2<<20)}}); res.code != http.StatusUnauthorized {
		t.Errorf("a big form without the cookie: %d, want 401", res.code)
	}
}

// A search with no words shows the memories form with a message and the newest memories,
// not a dead end.
func TestSearchWithoutWords(t *testing.T) {
	r := newRig(t)
	mems := r.populate()
	c := r.login()
	for _, q := range []string{"*", "?!", `"`} {
		body := r.page(c, "/memories?q="+url.QueryEscape(q))
		if !strings.Contains(body, `id="memory-filters"`) || !strings.Contains(body, `id="no-words"`) || !strings.Contains(body, "has no word to search for") {
			t.Errorf("/memories?q=%s: no form or no message:\n%s", q, body)
		}
		if !strings.Contains(body, `name="q" value="`+template.HTMLEscapeString(q)+`"`) {
			t.Errorf("/memories?q=%s: the form lost what was typed", q)
		}
		if !strings.Contains(body, `data-memory="`+mems["secret"].ID+`"`) {
			t.Errorf("/memories?q=%s lists no memory", q)
		}
	}
	if body := r.page(c, "/memories?q=vault"); strings.Contains(body, `id="no-words"`) {
		t.Error("a search with words says it has none")
	}
}

// The hygiene page says how many signals there are of each kind and pages through them.
func TestHygienePages(t *testing.T) {
	r := newRig(t)
	c := r.login()
	old := time.Now().Add(-200 * 24 * time.Hour) // stale
	for i := range 60 {
		r.rememberAt(api, old.Add(time.Duration(i)*time.Second), fmt.Sprintf("zq%da yk%db wx%dc vu%dd", i, i, i, i))
	}
	a := r.remember(api, "the release checklist lives in docs/release.md and needs two approvals")
	b := r.remember(api, "the release checklist lives in docs/release.md and it needs two approvals")
	body := r.page(c, "/hygiene")
	total := regexp.MustCompile(`id="hygiene-total">([^<]*)<`).FindStringSubmatch(body)
	if total == nil || total[1] != "61 findings: 1 duplicate pair, 60 stale memories; this page shows 1 to 50." {
		t.Fatalf("the hygiene page's total: %q", total)
	}
	// A pair's ids are in id order; two memories of one millisecond sort either way.
	pair := regexp.MustCompile(`data-pair="(mem_[0-9a-f]+) (mem_[0-9a-f]+)"`).FindAllStringSubmatch(body, -1)
	if len(pair) != 1 || !slices.Equal(slices.Sorted(slices.Values(pair[0][1:])), slices.Sorted(slices.Values([]string{a.ID, b.ID}))) ||
		strings.Count(body, "<li data-memory=") != 49 || !strings.Contains(body, "page 1 of 2") {
		t.Errorf("page 1: %v and %d stale memories, want the pair and 49", pair, strings.Count(body, "<li data-memory="))
	}
	next := regexp.MustCompile(`href="(/hygiene\?page=2)">next`).FindStringSubmatch(body)
	if next == nil {
		t.Fatal("the hygiene page has no link to page 2")
	}
	body = r.page(c, next[1])
	if n := strings.Count(body, "<li data-memory="); n != 11 || strings.Contains(body, "data-pair=") || !strings.Contains(body, "this page shows 51 to 61.") ||
		!strings.Contains(body, "The duplicate pairs are on the pages before this one.") || !strings.Contains(body, `href="/hygiene?page=1">← previous`) {
		t.Errorf("page 2 shows %d stale memories:\n%s", n, body)
	}
	if body := r.page(c, "/hygiene?page=9"); !strings.Contains(body, "page 2 of 2") {
		t.Error("a page past the end is not the last page")
	}
	if res := r.do("GET", "/hygiene?page=x", nil, cookie(c)); res.code != http.StatusBadRequest {
		t.Errorf("/hygiene?page=x: %d, want 400", res.code)
	}
}

// A memory written from outside a session (thatch mcp) names the host and client it came
// through.
func TestMemoryNamesItsHost(t *testing.T) {
	r := newRig(t)
	c := r.login()
	m := r.remember(memory.Caller{Project: api.Project, Host: "mcp", Client: "claude-code"}, "the CI runs make check first")
	if body := r.page(c, "/memories/"+m.ID); !strings.Contains(body, "through mcp (claude-code)") || strings.Contains(body, "by session") {
		t.Fatalf("the memory page does not name the host and client it came through:\n%s", body)
	}
}
