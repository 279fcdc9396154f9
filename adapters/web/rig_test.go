package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/adapters/web"
	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// testToken stands for a broker token (§7: random, at least 32 characters): the page
// knows none, and a link or cookie holding one opens nothing.
const testToken = "tOk3n-for-thatch-web-tests-0123456789abcdefXYZ"

// stubCaller answers every host call: a create makes the child session thatch asked for.
type stubCaller struct {
	mu    sync.Mutex
	calls []runtime.Call
}

func (c *stubCaller) Do(_ context.Context, _ string, call runtime.Call) runtime.Result {
	c.mu.Lock()
	c.calls = append(c.calls, call)
	c.mu.Unlock()
	r := runtime.Result{Call: call}
	if call.Op == runtime.OpCreate {
		r.Session = &runtime.SessionInfo{ID: "ses_child_of_" + call.SessionID, ParentID: call.SessionID, Title: call.Title, Directory: call.Directory}
	}
	return r
}

func (c *stubCaller) ops() []runtime.Op {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []runtime.Op
	for _, x := range c.calls {
		out = append(out, x.Op)
	}
	return out
}

// sweepCall is one call of the rig's Sweep.
type sweepCall struct {
	host   string
	dryRun bool
}

// rig is a real loop over a real journal on disk, a real memory store, and the web
// endpoint over them, served by an httptest server.
type rig struct {
	t       *testing.T
	store   *journal.Store
	mem     *memory.Store
	loop    *runtime.Loop
	caller  *stubCaller
	metrics *web.Metrics
	srv     *web.Server
	ts      *httptest.Server
	client  *http.Client
	seq     uint64

	// What Status answers: Consuming, an error, a journal error.
	consuming  atomic.Bool
	statusErr  atomic.Pointer[error]
	journalErr atomic.Pointer[string]
	bridge     atomic.Pointer[string] // the bridge's row of status, as opencode's bridge writes it
	lastSeq    atomic.Uint64          // the stream's last sequence, for thatch_stream_lag

	sweepMu sync.Mutex
	sweeps  []sweepCall

	skew atomic.Int64 // how far the server's clock is ahead of time.Now, in ns (advance)
}

func newRig(t *testing.T) *rig {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := journal.Open(filepath.Join(dir, "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := memory.Open(filepath.Join(dir, "memories.db"), memory.Options{})
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	r := &rig{t: t, store: store, mem: mem, caller: &stubCaller{}}
	r.consuming.Store(true)
	r.metrics = web.NewMetrics(web.Source{
		Status:        r.status,
		Snapshot:      func() *runtime.Snapshot { return r.loop.Snapshot() },
		StreamLastSeq: func(context.Context) (uint64, error) { return r.lastSeq.Load(), nil },
		Memories:      mem,
		Log:           log,
	})
	r.loop = runtime.NewLoop(store, r.metrics.Caller(r.caller), log)
	r.loop.CommitTook = r.metrics.CommitTook
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.loop.Run(ctx) }()
	select {
	case <-r.loop.Ready():
	case err := <-done:
		t.Fatalf("the loop ended before it was ready: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(20 * time.Second):
			t.Error("the loop did not stop")
		}
		mem.Close()
		store.Close()
	})

	r.srv = &web.Server{Listen: "127.0.0.1:4224", Loop: r.loop, Status: r.status, Journal: store,
		Memories: mem, Sweep: r.sweep, Metrics: r.metrics, Log: log,
		Now: func() time.Time { return time.Now().Add(time.Duration(r.skew.Load())) }}
	h, err := r.srv.Handler()
	if err != nil {
		t.Fatal(err)
	}
	r.ts = httptest.NewServer(h)
	t.Cleanup(r.ts.Close)
	r.client = &http.Client{Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return r
}

// status is what natsbus.Server.Status answers, made of the loop's snapshot: Consuming as
// the test sets it, the memories counted.
func (r *rig) status(ctx context.Context) (runtime.StatusView, error) {
	if e := r.statusErr.Load(); e != nil {
		return runtime.StatusView{}, *e
	}
	snap := r.loop.Snapshot()
	if snap == nil {
		return runtime.StatusView{}, runtime.ErrStopped
	}
	st := snap.Status
	st.Consuming = r.consuming.Load()
	if je := r.journalErr.Load(); je != nil {
		st.JournalError = *je
	}
	if b := r.bridge.Load(); b != nil {
		st.Bridge = []byte(*b)
	}
	n, err := r.mem.Count(ctx)
	if err != nil {
		st.MemoryError = err.Error()
	}
	st.Memories = n
	return st, nil
}

func (r *rig) sweep(_ context.Context, host string, dryRun bool) (runtime.SweepResult, error) {
	r.sweepMu.Lock()
	defer r.sweepMu.Unlock()
	r.sweeps = append(r.sweeps, sweepCall{host, dryRun})
	return runtime.SweepResult{Actions: []runtime.StrandAction{{Kind: "move", SessionID: "ses_stranded_in_plan",
		Directory: "/w/still-there", Reason: "its folder /w/gone is gone"}}}, nil
}

func (r *rig) sweepCalls() []sweepCall {
	r.sweepMu.Lock()
	defer r.sweepMu.Unlock()
	return append([]sweepCall(nil), r.sweeps...)
}

// deliver hands the loop one event of host h1 at the next stream sequence.
func (r *rig) deliver(typ, props string) {
	r.seq++
	body := fmt.Sprintf(`{"id":"ev_%d","type":%q,"properties":%s}`, r.seq, typ, props)
	r.send("opencode.h1.event."+typ, body)
}

// deliverRaw hands the loop one message as the stream holds it, at the next sequence.
func (r *rig) deliverRaw(subject, body string) {
	r.seq++
	r.send(subject, body)
}

func (r *rig) send(subject, body string) {
	r.lastSeq.Store(r.seq)
	r.loop.Deliveries() <- runtime.Delivery{Subject: subject, Data: []byte(body), StreamSeq: r.seq, Stream: "s1",
		Published: time.Now(), Ack: func() error { return nil }, Nak: func() error { return nil }}
}

// applied waits until the loop has applied every delivery handed over.
func (r *rig) applied() {
	r.t.Helper()
	testkit.WaitFor(r.t, 10*time.Second, fmt.Sprintf("the loop to apply stream sequence %d", r.seq), func() bool {
		snap := r.loop.Snapshot()
		return snap != nil && snap.Status.LastStreamSeq >= r.seq
	})
}

// waitSession waits until the loop's table holds session id and cond holds for its row.
func (r *rig) waitSession(id, what string, cond func(runtime.SessionRow) bool) {
	r.t.Helper()
	testkit.WaitFor(r.t, 10*time.Second, what, func() error {
		tb, err := r.loop.Table(context.Background())
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(tb.Sessions, func(s runtime.SessionRow) bool { return s.SessionID == id }); i >= 0 && cond(tb.Sessions[i]) {
			return nil
		}
		return fmt.Errorf("calls %v", r.caller.ops())
	})
}

func (r *rig) hello() {
	r.deliver("host.hello", `{"hostID":"h1","api":"v1","version":"1.0","bootID":"b1","directory":"/w","worktree":"/w","capabilities":{"tui":true,"list":true},"resumed":[]}`)
}

func (r *rig) created(sid, parent, title, dir string) {
	p := ""
	if parent != "" {
		p = fmt.Sprintf(`,"parentID":%q`, parent)
	}
	r.deliver("session.created", fmt.Sprintf(`{"sessionID":%q,"info":{"id":%q,"title":%q,"directory":%q%s}}`, sid, sid, title, dir, p))
}

func (r *rig) toolCall(sid, call, title string) {
	r.deliver("tool.execute.after", fmt.Sprintf(`{"sessionID":%q,"callID":%q,"tool":"bash","title":%q,"args":{"command":"ls"},"output":"file.txt","metadata":{}}`, sid, call, title))
}

// remember writes a memory that must be written.
func (r *rig) remember(c memory.Caller, content string, a ...memory.RememberArgs) memory.Memory {
	r.t.Helper()
	return r.rememberAt(c, time.Now(), content, a...)
}

func (r *rig) rememberAt(c memory.Caller, at time.Time, content string, a ...memory.RememberArgs) memory.Memory {
	r.t.Helper()
	var args memory.RememberArgs
	if len(a) > 0 {
		args = a[0]
	}
	args.Content = content
	m, err := r.mem.Remember(context.Background(), c, args, at)
	if err != nil {
		r.t.Fatalf("remember %q: %v", content, err)
	}
	if !m.Created {
		r.t.Fatalf("remember %q: not created (same as %s)", content, m.Memory.ID)
	}
	return m.Memory
}

// get reads memory id from the store.
func (r *rig) get(id string) memory.Memory {
	r.t.Helper()
	m, _, err := r.mem.Get(context.Background(), id)
	if err != nil {
		r.t.Fatalf("get %s: %v", id, err)
	}
	return m
}

// reqOpt adjusts a request.
type reqOpt func(*http.Request)

func cookie(c *http.Cookie) reqOpt { return func(q *http.Request) { q.AddCookie(c) } }
func header(k, v string) reqOpt    { return func(q *http.Request) { q.Header.Set(k, v) } }
func hostHeader(h string) reqOpt   { return func(q *http.Request) { q.Host = h } }

// response is an answer read whole.
type response struct {
	code   int
	header http.Header
	body   string
	resp   *http.Response
}

// do sends method path (with form as the body of a POST, when not nil) and reads the
// answer.
func (r *rig) do(method, path string, form url.Values, opts ...reqOpt) response {
	r.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, r.ts.URL+path, body)
	if err != nil {
		r.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, o := range opts {
		o(req)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("%s %s: read the body: %v", method, path, err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: string(data), resp: resp}
}

// advance moves the server's clock d ahead.
func (r *rig) advance(d time.Duration) { r.skew.Add(int64(d)) }

// link mints a one-time code as the daemon does for thatch ui and returns the link's path
// and query.
func (r *rig) link() string {
	code, _ := r.srv.NewLogin()
	u, err := url.Parse(web.LoginURL(web.PageURL(r.srv.Listen, false), code))
	if err != nil {
		r.t.Fatal(err)
	}
	return u.RequestURI()
}

// login follows a new one-time link and returns the session cookie it sets.
func (r *rig) login() *http.Cookie {
	r.t.Helper()
	return r.follow(r.link())
}

// follow GETs a one-time link and returns the session cookie it sets.
func (r *rig) follow(link string, opts ...reqOpt) *http.Cookie {
	r.t.Helper()
	res := r.do("GET", link, nil, opts...)
	if res.code != http.StatusSeeOther {
		r.t.Fatalf("GET %s: %d, want 303\n%s", link, res.code, res.body)
	}
	for _, c := range res.resp.Cookies() {
		if c.Name == r.srv.CookieName() {
			return c
		}
	}
	r.t.Fatalf("GET %s set no %s cookie: %v", link, r.srv.CookieName(), res.header.Values("Set-Cookie"))
	return nil
}

// page GETs path with the cookie and wants 200.
func (r *rig) page(c *http.Cookie, path string, opts ...reqOpt) string {
	r.t.Helper()
	res := r.do("GET", path, nil, append([]reqOpt{cookie(c)}, opts...)...)
	if res.code != http.StatusOK {
		r.t.Fatalf("GET %s: %d, want 200\n%s", path, res.code, res.body)
	}
	if ct := res.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		r.t.Errorf("GET %s: Content-Type %q, want text/html", path, ct)
	}
	return res.body
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf reads the CSRF field of a form of the page at path.
func (r *rig) csrf(c *http.Cookie, path string) string {
	r.t.Helper()
	m := csrfField.FindStringSubmatch(r.page(c, path))
	if m == nil {
		r.t.Fatalf("no csrf field in the forms of %s", path)
	}
	return m[1]
}

// post POSTs form (with the cookie) and returns the answer.
func (r *rig) post(c *http.Cookie, path string, form url.Values, opts ...reqOpt) response {
	r.t.Helper()
	if c != nil {
		opts = append([]reqOpt{cookie(c)}, opts...)
	}
	return r.do("POST", path, form, opts...)
}

// scrape reads /metrics.
func (r *rig) scrape() string {
	r.t.Helper()
	res := r.do("GET", "/metrics", nil)
	if res.code != http.StatusOK {
		r.t.Fatalf("GET /metrics: %d\n%s", res.code, res.body)
	}
	return res.body
}

func errPtr(err error) *error { return &err }
