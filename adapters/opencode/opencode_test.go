package opencode

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime"
)

// The real opencode 1.18.33 samples: the known types pass through unchanged, the rest
// (sync frames, deltas, heartbeats, diffs) is dropped.
func TestTranslateRealSamples(t *testing.T) {
	f, err := os.Open("../../testdata/opencode-events-1.18.33.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	kept := map[string]int{}
	for sc.Scan() {
		events, err := Translate(sc.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", sc.Text()[:60], err)
		}
		for _, ev := range events {
			if !runtime.Known(ev.Type) {
				t.Errorf("forwarded a type thatch ignores: %s", ev.Type)
			}
			if _, err := runtime.DecodeEvent("opencode", "opencode.h.event."+ev.Type, ev.Body()); err != nil {
				t.Errorf("%s does not decode: %v", ev.Type, err)
			}
			kept[ev.Type]++
		}
	}
	for _, typ := range []string{"session.created", "session.status", "session.idle", "session.error", "session.deleted", "session.compacted", "command.executed"} {
		if kept[typ] == 0 {
			t.Errorf("no %s forwarded", typ)
		}
	}
	if kept["message.part.delta"] != 0 || kept["sync"] != 0 {
		t.Errorf("forwarded noise: %v", kept)
	}
}

func TestTranslateToolPart(t *testing.T) {
	frame := func(status, partType string) []byte {
		return []byte(fmt.Sprintf(`{"directory":"/w","project":"p","payload":{"id":"evt_9","type":"message.part.updated","properties":{"sessionID":"ses_a","part":{"id":"prt_1","sessionID":"ses_a","messageID":"msg_1","type":%q,"callID":"call_7","tool":"bash","state":{"status":%q,"input":{"command":"echo hi"},"output":"hi\n","title":"echo hi","metadata":{"exit":0},"time":{"start":1,"end":2}}}}}}`, partType, status))
	}
	events, err := Translate(frame("completed", "tool"))
	if err != nil || len(events) != 1 {
		t.Fatalf("completed tool part: %v, %v", events, err)
	}
	ev, err := runtime.DecodeEvent("opencode", "opencode.h.event.tool.execute.after", events[0].Body())
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != "tool_ses_a_call_7" || ev.SessionID != "ses_a" || ev.Tool.CallID != "call_7" || ev.Tool.Tool != "bash" ||
		ev.Tool.Output != "hi\n" || ev.Tool.Title != "echo hi" || string(ev.Tool.Args) != `{"command":"echo hi"}` {
		t.Fatalf("translated to %+v %+v", ev, ev.Tool)
	}
	for _, f := range [][]byte{frame("running", "tool"), frame("pending", "tool"), frame("completed", "text")} {
		if events, err := Translate(f); err != nil || len(events) != 0 {
			t.Errorf("%s: forwarded %v (%v)", f[:90], events, err)
		}
	}
	if _, err := Translate([]byte(`{not json`)); err == nil {
		t.Error("a broken frame translated")
	}
}

// fakeOpencode answers a few of opencode's routes as 1.18.33 does, and records requests.
type fakeOpencode struct {
	mu        sync.Mutex
	requests  []string
	events    chan string   // frames for /global/event
	compacted chan struct{} // ends ses_slow's compaction
	password  string
	hold      chan struct{} // ends the deletion of ses_hold

	sessions string            // the session list, when not the default
	info     map[string]string // sessions by id, beyond ses_a
	messages map[string]string // the messages of a session of info, [] when absent
	tools    []string          // GET /experimental/tool/ids, when not nil
	// status answers GET /session/status?directory=D with status[D] (the sessions of D that
	// are not idle, {} when absent); nil: an opencode without the route.
	status map[string]string
}

// setTools changes what GET /experimental/tool/ids lists.
func (f *fakeOpencode) setTools(ids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tools = ids
}

func (f *fakeOpencode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.password != "" {
		if u, p, ok := r.BasicAuth(); !ok || u != "opencode" || p != f.password {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
	}
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI()+" "+string(body))
	f.mu.Unlock()
	js := func(code int, v string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, v)
	}
	switch {
	case r.URL.Path == "/global/event":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case frame := <-f.events:
				if frame == "" {
					return // ends this stream; the next connection goes on
				}
				fmt.Fprintf(w, "data: %s\n\n", frame)
				w.(http.Flusher).Flush()
			}
		}
	case r.URL.Path == "/session/status" && f.status != nil:
		js(200, cmp.Or(f.status[r.URL.Query().Get("directory")], `{}`))
	case r.URL.Path == "/experimental/tool/ids" && f.toolIDs() != nil:
		data, _ := json.Marshal(f.toolIDs())
		js(200, string(data))
	case r.Method == "DELETE" && r.URL.Path == "/session/ses_reset":
		// The connection breaks before an answer, as when opencode dies mid-call.
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	case r.Method == "DELETE" && r.URL.Path == "/session/ses_hold":
		outcome := "deleted ses_hold"
		select {
		case <-f.hold:
		case <-r.Context().Done():
			outcome = "abandoned ses_hold"
		}
		f.mu.Lock()
		f.requests = append(f.requests, outcome)
		f.mu.Unlock()
		js(200, `true`)
	case r.Method == "GET" && f.info[strings.TrimPrefix(r.URL.Path, "/session/")] != "":
		js(200, f.info[strings.TrimPrefix(r.URL.Path, "/session/")])
	case r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/message") &&
		f.info[strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/session/"), "/message")] != "":
		js(200, cmp.Or(f.messages[strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/session/"), "/message")], `[]`))
	case r.URL.Path == "/experimental/session" && f.sessions != "":
		js(200, f.sessions)
	case r.URL.Path == "/global/health":
		js(200, `{"healthy":true,"version":"1.18.33"}`)
	case r.URL.Path == "/path":
		js(200, `{"directory":"/w","worktree":"/w"}`)
	case r.Method == "POST" && r.URL.Path == "/session":
		js(200, `{"id":"ses_new","title":"thatch-extraction","directory":"/w","parentID":"ses_a"}`)
	case r.Method == "GET" && r.URL.Path == "/session/ses_a":
		js(200, `{"id":"ses_a","title":"t","directory":"/w/sub dir"}`)
	case r.Method == "GET" && r.URL.Path == "/session/ses_a/message":
		js(200, `[{"info":{"role":"user","model":{"providerID":"p1","modelID":"m1"}},"parts":[]},{"info":{"role":"assistant","providerID":"p1","modelID":"m1"},"parts":[`+toolPartJSON+`]}]`)
	case r.Method == "GET" && (r.URL.Path == "/session/ses_empty/message" || r.URL.Path == "/session/ses_slow/message" || r.URL.Path == "/session/ses_bad/message"):
		js(200, `[]`)
	case r.URL.Path == "/config":
		js(200, `{"model":"p2/m2"}`)
	case r.Method == "POST" && r.URL.Path == "/session/ses_slow/summarize":
		outcome := "compacted ses_slow" // a real model's compaction: it answers when it is over
		select {
		case <-f.compacted:
		case <-r.Context().Done():
			outcome = "abandoned ses_slow"
		}
		f.mu.Lock()
		f.requests = append(f.requests, outcome)
		f.mu.Unlock()
		js(200, `true`)
	case r.Method == "POST" && r.URL.Path == "/session/ses_bad/summarize":
		js(400, `{"name":"ProviderModelNotFoundError","data":{"message":"model not found"}}`)
	case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/summarize"):
		js(200, `true`)
	case r.Method == "DELETE" && r.URL.Path == "/session/ses_gone":
		js(404, `{"name":"NotFoundError","data":{"message":"Session not found: ses_gone"}}`)
	case r.Method == "DELETE":
		js(200, `true`)
	case r.URL.Path == "/experimental/session":
		js(200, `[{"id":"ses_a","directory":"/w","title":"t"}]`)
	case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/prompt_async"):
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html></html>")
	}
}

// toolPartJSON is a completed bash call of ses_a, as opencode stores and streams it.
const toolPartJSON = `{"id":"prt_1","type":"tool","sessionID":"ses_a","messageID":"msg_2","callID":"call_1","tool":"bash","state":{"status":"completed","input":{"command":"echo hi"},"output":"hi\n","title":"echo hi","metadata":{},"time":{"start":1,"end":2}}}`

func (f *fakeOpencode) toolIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tools
}

func (f *fakeOpencode) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

func raw(m map[string]any) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for k, v := range m {
		out[k], _ = json.Marshal(v)
	}
	return out
}

func TestClient(t *testing.T) {
	fake := &fakeOpencode{password: "s3cret"}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := &Client{BaseURL: srv.URL, Password: "s3cret"}
	ctx := context.Background()

	res, err := c.Call(ctx, "session.create", raw(map[string]any{"parentID": "ses_a", "title": "thatch-extraction"}))
	if err != nil || !strings.Contains(string(res.(json.RawMessage)), `"id":"ses_new"`) {
		t.Fatalf("create: %v, %v", res, err)
	}
	if _, err := c.Call(ctx, "session.prompt", raw(map[string]any{"sessionID": "ses_a", "parts": []any{map[string]any{"type": "text", "text": "x"}}, "noReply": true})); err != nil {
		t.Fatalf("prompt: %v", err)
	}
	if _, err := c.Call(ctx, "session.delete", raw(map[string]any{"sessionID": "ses_gone"})); err == nil || err.(*runtime.HostError).Name != "NotFoundError" {
		t.Fatalf("deleting an absent session: %v, want NotFoundError", err)
	}
	if _, err := c.Call(ctx, "project.list", nil); err == nil || err.(*runtime.HostError).Name != "NotFoundError" {
		t.Fatalf("an HTML answer: %v, want NotFoundError", err)
	}
	for _, sid := range []string{"ses_a", "ses_empty"} {
		if _, err := c.Call(ctx, "tui.executeCommand", raw(map[string]any{"command": "session_compact", "sessionID": sid})); err != nil {
			t.Fatalf("compact %s: %v", sid, err)
		}
	}
	want := []string{
		`GET /session/ses_a `,
		`POST /session?directory=%2Fw%2Fsub+dir {"parentID":"ses_a","title":"thatch-extraction"}`,
		`POST /session/ses_a/prompt_async {"noReply":true,"parts":[{"text":"x","type":"text"}]}`,
		`DELETE /session/ses_gone `,
		`GET /project `,
		`GET /session/ses_a/message `,
		`POST /session/ses_a/summarize {"modelID":"m1","providerID":"p1"}`,
		`GET /session/ses_empty/message `,
		`GET /config `,
		`POST /session/ses_empty/summarize {"modelID":"m2","providerID":"p2"}`,
	}
	if got := fake.seen(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	bad := &Client{BaseURL: srv.URL, Password: "wrong"}
	if _, err := bad.Call(ctx, "session.list", nil); err == nil || err.(*runtime.HostError).Name != "UnauthorizedError" {
		t.Fatalf("wrong password: %v", err)
	}
}

// A compaction that takes longer than thatch waits is accepted and goes on; one that fails
// at once is an error.
func TestCompactSlowAndFailing(t *testing.T) {
	fake := &fakeOpencode{compacted: make(chan struct{})}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := &Client{BaseURL: srv.URL, CompactAccept: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	res, err := c.Call(ctx, "tui.executeCommand", raw(map[string]any{"command": "session_compact", "sessionID": "ses_slow"}))
	cancel() // the host call is over; the compaction is not
	if err != nil || res != true {
		t.Fatalf("slow compaction: %v %v, want accepted", res, err)
	}
	close(fake.compacted)
	_, err = c.Call(context.Background(), "tui.executeCommand", raw(map[string]any{"command": "session_compact", "sessionID": "ses_bad"}))
	if he, ok := err.(*runtime.HostError); !ok || he.Name != "ProviderModelNotFoundError" {
		t.Fatalf("failing compaction: %v", err)
	}
	srv.Close() // waits for the slow request
	if got := fake.seen(); !slices.Contains(got, "compacted ses_slow") {
		t.Fatalf("the slow compaction did not go on after its caller's context ended: %q", got)
	}
}

// The bridge over a real broker: events are published with their ids and Host-Seq, a
// server that went away comes back as a new boot, and a repeated idempotency key is
// answered from memory.
func TestBridge(t *testing.T) {
	nc, js, stream := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	fake := &fakeOpencode{events: make(chan string, 16)}
	srv := httptest.NewServer(fake)
	addr := srv.Listener.Addr().String()
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: HostIDFor(srv.URL),
		Log: testkit.Logger(t)}
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()

	fake.events <- `{"directory":"/w","payload":{"id":"evt_1","type":"session.created","properties":{"sessionID":"ses_a","info":{"id":"ses_a","title":"t","directory":"/w"}}}}`
	fake.events <- `{"directory":"/w","payload":{"id":"evt_2","type":"message.part.delta","properties":{}}}`
	fake.events <- `{"directory":"/w","payload":{"id":"evt_3","type":"session.idle","properties":{"sessionID":"ses_a"}}}`
	type got struct{ typ, id, seq string }
	read := func(n int) []got {
		t.Helper()
		var out []got
		for seq := uint64(1); len(out) < n; seq++ {
			var m *jetstream.RawStreamMsg
			testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("event %d of %d (have %+v)", seq, n, out), func() error {
				m, err = stream.GetMsg(ctx, seq)
				return err
			})
			var ev Event
			_ = json.Unmarshal(m.Data, &ev)
			out = append(out, got{ev.Type, m.Header.Get(jetstream.MsgIDHeader), m.Header.Get("Host-Seq")})
		}
		return out
	}
	// The first connection catches up on the session and the tool call opencode completed
	// before the bridge ran; the stream showing that part again is the same event, not
	// stored twice and costing no Host-Seq number.
	fake.events <- `{"directory":"/w","payload":{"id":"evt_p","type":"message.part.updated","properties":{"part":` + toolPartJSON + `}}}`
	fake.events <- `{"directory":"/w","payload":{"id":"evt_3b","type":"session.idle","properties":{"sessionID":"ses_a"}}}`
	first := read(6)
	if first[0].typ != "host.hello" || first[0].seq != "1" || first[1] != (got{"session.updated", "sync_ses_a_0", "2"}) ||
		first[2] != (got{"tool.execute.after", "tool_ses_a_call_1", "3"}) || first[3] != (got{"session.created", "evt_1", "4"}) ||
		first[4] != (got{"session.idle", "evt_3", "5"}) || first[5] != (got{"session.idle", "evt_3b", "6"}) {
		t.Fatalf("published %+v", first)
	}
	// The plugin asks for the session-start text itself: thatch must send no reminder
	// prompt, which would land after the user's first message.
	helloMsg, err := stream.GetMsg(ctx, 1)
	must(t, err)
	var hello struct{ Properties runtime.Hello }
	must(t, json.Unmarshal(helloMsg.Data, &hello))
	if want := (runtime.Capabilities{TUI: true, Compact: true, Move: true, List: true, Context: true}); hello.Properties.Caps != want {
		t.Fatalf("hello declares %+v, want %+v", hello.Properties.Caps, want)
	}
	if hello.Properties.MissingTools != nil {
		t.Fatalf("an opencode that cannot list its tools: hello says %v missing, want nothing", hello.Properties.MissingTools)
	}

	// A repeated idempotency key: one DELETE reaches opencode.
	for range 2 {
		msg, err := nc.Request("opencode."+b.HostID+".api.session.delete", []byte(`{"sessionID":"ses_x","idempotencyKey":"k1"}`), 5*time.Second)
		if err != nil || !strings.Contains(string(msg.Data), `"result":true`) {
			t.Fatalf("delete: %v %s", err, msg.Data)
		}
	}
	deletes := 0
	for _, r := range fake.seen() {
		if strings.HasPrefix(r, "DELETE") {
			deletes++
		}
	}
	if deletes != 1 {
		t.Fatalf("%d DELETEs reached opencode for one idempotency key", deletes)
	}

	// The stream ends while the server stays up: the same boot, and one Host-Seq number is
	// skipped so that thatch resyncs (events may have passed unseen).
	fake.events <- "" // ends this stream
	fake.events <- `{"payload":{"id":"evt_4","type":"session.idle","properties":{"sessionID":"ses_a"}}}`
	if g := read(7)[6]; g != (got{"session.idle", "evt_4", "8"}) {
		t.Fatalf("after the stream ended: %+v, want evt_4 at Host-Seq 8 (7 skipped)", g)
	}

	// The server goes away and comes back: a new boot, Host-Seq from 1 again.
	srv.CloseClientConnections() // as a dying server does; Close alone waits for the stream
	srv.Close()
	// Down until the bridge has seen the outage, as with an opencode that restarts.
	testkit.WaitFor(t, 30*time.Second, "the bridge to see opencode down", func() bool { return !b.BridgeStatus().Connected })
	fake2 := &fakeOpencode{events: make(chan string, 16)}
	srv2 := listenAt(t, addr, fake2)
	defer srv2.Close()
	fake2.events <- `{"payload":{"id":"evt_5","type":"session.idle","properties":{"sessionID":"ses_a"}}}`
	again := read(9)[7:]
	if again[0].typ != "host.hello" || again[0].id == first[0].id || again[0].seq != "1" || again[1] != (got{"session.idle", "evt_5", "2"}) {
		t.Fatalf("after the server came back: %+v", again)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// listenAt serves fake at addr, as a restarted server on the same port.
func listenAt(t *testing.T, addr string, fake http.Handler) *httptest.Server {
	t.Helper()
	var l net.Listener
	testkit.WaitFor(t, 30*time.Second, "the address "+addr+" to be free again", func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	srv := httptest.NewUnstartedServer(fake)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	return srv
}

// The plugin shim's endpoint: only the token's holder gets in; a call of one of thatch's
// tools or context methods is forwarded to its subject and the reply returned as is, and
// anything else is refused; a hook's event is published.
func TestShimEndpoint(t *testing.T) {
	nc, js, stream := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	echo := func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"result":{"output":"got ` + strings.ReplaceAll(string(m.Data), `"`, `'`) + `"}}`))
	}
	for _, subject := range []string{"thatch.tool.thatch_extraction_done", "thatch.tool.memory_search"} {
		sub, err := nc.Subscribe(subject, echo)
		must(t, err)
		defer sub.Unsubscribe()
	}
	sub, err := nc.Subscribe("thatch.api.session.context", func(m *nats.Msg) {
		var req struct{ SessionID, ProjectID, Directory string }
		_ = json.Unmarshal(m.Data, &req)
		text, _ := json.Marshal(req.SessionID + " in " + req.ProjectID + " at " + req.Directory)
		_ = m.Respond([]byte(`{"result":{"text":` + string(text) + `}}`))
	})
	must(t, err)
	defer sub.Unsubscribe()
	// Whatever else listens on the bus is out of the shim's reach.
	for _, subject := range []string{"thatch.api.status", "thatch.tool.other"} {
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte(`{"result":"reached"}`)) })
		must(t, err)
		defer sub.Unsubscribe()
	}
	token := filepath.Join(t.TempDir(), "shim.token")
	if err := os.WriteFile(token, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	b := &Bridge{NC: nc, JS: js, Prefix: "opencode", APIPrefix: "thatch", HostID: "oc-test", ShimListen: addr, TokenFile: token,
		Log: testkit.Logger(t)}
	srv, err := b.serveShim()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	post := func(path, tok, body string) (int, string) {
		req, _ := http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	for _, tok := range []string{"", "wrong"} {
		if code, _ := post("/tool/thatch_extraction_done", tok, `{}`); code != http.StatusUnauthorized {
			t.Fatalf("token %q: HTTP %d, want 401", tok, code)
		}
	}
	code, body := post("/tool/thatch_extraction_done", testToken, `{"sessionID":"ses_c","args":{"new":1}}`)
	if code != 200 || body != `{"result":{"output":"got {'sessionID':'ses_c','args':{'new':1}}"}}` {
		t.Fatalf("tool call: %d %s", code, body)
	}
	code, body = post("/tool/memory_search", testToken, `{"sessionID":"ses_c","callID":"c9","args":{"query":"make"}}`)
	if code != 200 || body != `{"result":{"output":"got {'sessionID':'ses_c','callID':'c9','args':{'query':'make'}}"}}` {
		t.Fatalf("memory tool call: %d %s", code, body)
	}
	code, body = post("/api/session.context", testToken, `{"sessionID":"ses_c","projectID":"prj_1","directory":"/w"}`)
	if code != 200 || body != `{"result":{"text":"ses_c in prj_1 at /w"}}` {
		t.Fatalf("session.context: %d %s", code, body)
	}
	// thatch down (here: nothing serves memory.context) is an answer the plugin can read.
	code, body = post("/api/memory.context", testToken, `{"sessionID":"ses_c"}`)
	if code != 200 || !strings.HasPrefix(body, `{"error":{"name":"UnavailableError","message":"thatch did not answer: `) {
		t.Fatalf("memory.context with no responder: %d %s", code, body)
	}
	for _, path := range []string{"/api/status", "/api/memory.forget", "/tool/other", "/tool/memory_remember.x"} {
		code, body := post(path, testToken, `{}`)
		var reply struct{ Error runtime.HostError }
		if code != http.StatusNotFound || json.Unmarshal([]byte(body), &reply) != nil || reply.Error.Name != "NotFoundError" || strings.Contains(body, "reached") {
			t.Fatalf("%s: %d %s, want 404 with a NotFoundError", path, code, body)
		}
	}
	if code, _ := post("/api/session.context", "wrong", `{}`); code != http.StatusUnauthorized {
		t.Fatalf("api with a wrong token: HTTP %d, want 401", code)
	}
	if code, _ := post("/event", testToken, `{"type":"command.execute.before","properties":{"command":"thatch/compact","sessionID":"ses_a","arguments":""}}`); code != 200 {
		t.Fatalf("event: HTTP %d", code)
	}
	m, err := stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := runtime.DecodeEvent("opencode", m.Subject, m.Data)
	if err != nil || ev.Type != "command.execute.before" || ev.Command != "thatch/compact" || ev.HostID != "oc-test" || m.Header.Get("Host-Seq") != "1" {
		t.Fatalf("published %+v (%v), Host-Seq %q", ev, err, m.Header.Get("Host-Seq"))
	}

	// The tool.execute.after hook and the event stream report the same call under one id:
	// the second to arrive is not stored, and takes no Host-Seq number.
	hook := `{"type":"tool.execute.after","properties":{"sessionID":"ses_a","callID":"call_1","tool":"bash","args":{"command":"echo hi"},"title":"echo hi","output":"hi\n","metadata":{}}}`
	if code, _ := post("/event", testToken, hook); code != 200 {
		t.Fatalf("hook event: HTTP %d", code)
	}
	streamed, _ := Translate([]byte(`{"payload":{"id":"evt_p","type":"message.part.updated","properties":{"part":` + toolPartJSON + `}}}`))
	must(t, b.publish(ctx, streamed[0]))
	if code, _ := post("/event", testToken, `{"type":"session.compacting","properties":{"sessionID":"ses_a"}}`); code != 200 {
		t.Fatalf("compacting event: HTTP %d", code)
	}
	var got []string
	for seq := uint64(2); seq <= 3; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		must(t, err)
		got = append(got, m.Header.Get(jetstream.MsgIDHeader)+"@"+m.Header.Get("Host-Seq"))
	}
	if !strings.HasPrefix(got[0], "tool_ses_a_call_1@2") || !strings.HasSuffix(got[1], "@3") || !strings.HasPrefix(got[1], "shim_") {
		t.Fatalf("published %v, want tool_ses_a_call_1 at Host-Seq 2, then the compacting event at 3", got)
	}
	if info, _ := stream.Info(ctx); info.State.Msgs != 3 {
		t.Fatalf("%d events in the stream, want 3", info.State.Msgs)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// broker starts an in-process nats-server with the event stream for one test.
func broker(t *testing.T) (*nats.Conn, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	nc, js := brokerWithoutStream(t)
	stream, err := natsbus.EnsureStream(context.Background(), js, natsbus.StreamConfig{Stream: "OPENCODE_EVENTS", Prefix: "opencode"})
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, stream
}

// brokerWithoutStream starts an in-process nats-server with a token for one test; nothing
// creates the event stream.
func brokerWithoutStream(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	_, url, token := testkit.Broker(t)
	return testkit.Connect(t, url, token)
}

// A hello that could not be published (the stream did not exist yet) is published on the
// next connection: a boot always starts with its hello.
func TestBridgeHelloAfterFailedPublish(t *testing.T) {
	nc, js := brokerWithoutStream(t)

	fake := &fakeOpencode{events: make(chan string)}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: HostIDFor(srv.URL),
		Log:        testkit.Logger(t),
		StreamIdle: 300 * time.Millisecond} // the fake sends no heartbeat: each stream ends soon
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	// The bridge connects and fails to publish its hello: no stream yet.
	testkit.WaitFor(t, 30*time.Second, "two connections", func() bool { return strings.Count(strings.Join(fake.seen(), "\n"), "GET /global/event") >= 2 })
	stream, err := natsbus.EnsureStream(ctx, js, natsbus.StreamConfig{Stream: "OPENCODE_EVENTS", Prefix: "opencode"})
	if err != nil {
		t.Fatal(err)
	}
	var first *jetstream.RawStreamMsg
	testkit.WaitFor(t, 30*time.Second, "the first event after the stream exists", func() bool { first, err = stream.GetMsg(ctx, 1); return err == nil })
	var ev Event
	_ = json.Unmarshal(first.Data, &ev)
	if ev.Type != "host.hello" || first.Header.Get("Host-Seq") != "1" {
		t.Fatalf("first event %s at Host-Seq %s, want host.hello at 1", ev.Type, first.Header.Get("Host-Seq"))
	}
	cancel()
	<-done
}

// syncBuffer is a log sink the test reads while the bridge writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A wrong or missing password is reported as such, not as an unreachable server.
func TestBridgeWrongPassword(t *testing.T) {
	nc, js, _ := broker(t)
	fake := &fakeOpencode{password: "right"}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	var logs syncBuffer
	b := &Bridge{Client: &Client{BaseURL: srv.URL, Password: "wrong"}, NC: nc, JS: js, Prefix: "opencode", HostID: HostIDFor(srv.URL),
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	testkit.WaitFor(t, 20*time.Second, "a hint about the password in the log", func() error {
		if !strings.Contains(logs.String(), "set OPENCODE_SERVER_PASSWORD") {
			return fmt.Errorf("the log:\n%s", logs.String())
		}
		return nil
	})
	cancel()
	<-done
}

// A URL that is not an opencode server is reported as such, and no boot is announced.
func TestBridgeNotOpencode(t *testing.T) {
	nc, js, stream := broker(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html>some other server</html>")
	}))
	defer srv.Close()
	var logs syncBuffer
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: HostIDFor(srv.URL),
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	testkit.WaitFor(t, 20*time.Second, "a clear error in the log", func() error {
		if !strings.Contains(logs.String(), "not an event stream: is "+srv.URL+" an opencode server") {
			return fmt.Errorf("the log:\n%s", logs.String())
		}
		return nil
	})
	cancel()
	<-done
	if info, _ := stream.Info(context.Background()); info.State.Msgs != 0 {
		t.Fatalf("%d events published for a server that is not opencode", info.State.Msgs)
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().String()
}

// storedEvent waits for the event at seq of stream.
func storedEvent(t *testing.T, ctx context.Context, stream jetstream.Stream, seq uint64) *jetstream.RawStreamMsg {
	t.Helper()
	var m *jetstream.RawStreamMsg
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("the event at %d", seq), func() (err error) {
		m, err = stream.GetMsg(ctx, seq)
		return err
	})
	return m
}

// Start tells its owner at once that the shim's address is taken, naming the variable.
func TestStartShimAddressInUse(t *testing.T) {
	nc, js, _ := broker(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer taken.Close()
	addr := taken.Addr().String()
	token := filepath.Join(t.TempDir(), "shim.token")
	must(t, os.WriteFile(token, []byte(testToken), 0o600))
	b := &Bridge{Client: &Client{BaseURL: "http://127.0.0.1:1"}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test",
		ShimListen: addr, TokenFile: token, Log: testkit.Logger(t)}
	err = b.Start()
	want := "the plugin shim cannot listen on " + addr + " (THATCH_SHIM_LISTEN): address already in use; set THATCH_SHIM_LISTEN to a free loopback address"
	if err == nil || err.Error() != want {
		t.Fatalf("Start: %v, want %q", err, want)
	}
	if _, err := nc.Request("opencode.oc-test.api.session.list", []byte(`{}`), time.Second); err == nil {
		t.Fatal("a bridge that could not start serves the host API")
	}
}

// Start serves the host API before Run; a stop does not cut a call to opencode in flight
// (rule 12): Run returns after StopWait, and the call finishes and is answered.
func TestStartThenStopLetsCallsFinish(t *testing.T) {
	nc, js, _ := broker(t)
	fake := &fakeOpencode{events: make(chan string), hold: make(chan struct{})}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test",
		StopWait: 200 * time.Millisecond, Log: testkit.Logger(t)}
	must(t, b.Start())
	msg, err := nc.Request("opencode.oc-test.api.session.delete", []byte(`{"sessionID":"ses_a"}`), 5*time.Second)
	if err != nil || string(msg.Data) != `{"result":true}` {
		t.Fatalf("a call before Run: %v %s", err, msg.Data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	reply := make(chan string, 1)
	go func() {
		msg, err := nc.Request("opencode.oc-test.api.session.delete", []byte(`{"sessionID":"ses_hold","idempotencyKey":"k"}`), 15*time.Second)
		if err != nil {
			reply <- err.Error()
			return
		}
		reply <- string(msg.Data)
	}()
	testkit.WaitFor(t, 20*time.Second, "the call to reach opencode", func() bool {
		return slices.Contains(fake.seen(), "DELETE /session/ses_hold ")
	})
	stopped := time.Now()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(stopped); d > 2*time.Second {
		t.Fatalf("Run took %v to return with a call in flight, want about StopWait", d)
	}
	if _, err := nc.Request("opencode.oc-test.api.session.list", []byte(`{}`), 500*time.Millisecond); err == nil {
		t.Fatal("a stopped bridge still serves the host API")
	}
	close(fake.hold)
	if got := <-reply; got != `{"result":true}` {
		t.Fatalf("the call in flight at the stop was answered %q", got)
	}
	if got := fake.seen(); !slices.Contains(got, "deleted ses_hold") {
		t.Fatalf("the call in flight was cut by the stop: %q", got)
	}
}

// One call id in two sessions is two calls; one call is one id however the bridge sees it.
func TestToolEventIDPerSession(t *testing.T) {
	streamed := func(sid string) string {
		part := strings.ReplaceAll(toolPartJSON, `"sessionID":"ses_a"`, `"sessionID":"`+sid+`"`)
		events, err := Translate([]byte(`{"payload":{"id":"evt_p","type":"message.part.updated","properties":{"part":` + part + `}}}`))
		if err != nil || len(events) != 1 {
			t.Fatalf("%s: %v %v", sid, events, err)
		}
		return events[0].ID
	}
	a, b := streamed("ses_a"), streamed("ses_b")
	if a == b || a != ToolEventID("ses_a", "call_1") || b != ToolEventID("ses_b", "call_1") {
		t.Fatalf("call_1 of ses_a is %s, of ses_b %s", a, b)
	}
	hook := Event{Type: "tool.execute.after", Properties: json.RawMessage(`{"sessionID":"ses_b","callID":"call_1","tool":"bash","args":{},"output":"hi\n"}`)}
	if id := shimEventID(hook); id != b {
		t.Fatalf("the shim's hook names call_1 of ses_b %s, the stream %s", id, b)
	}
}

// bigWrite is a completed write of a 1.2 MB file, whose output and metadata are large too.
func bigWrite(t *testing.T) Event {
	t.Helper()
	chunk := strings.Repeat("line <é> & 0123456789 abcdefghij\n", 36000) // about 1.2 MB
	input, _ := json.Marshal(map[string]any{"filePath": "/w/big.txt", "content": "BEGIN\n" + chunk + "END"})
	meta, _ := json.Marshal(map[string]any{"exists": false, "exit": 0, "diff": "@@ head\n" + chunk + "tail @@"})
	part, _ := json.Marshal(map[string]any{"type": "tool", "sessionID": "ses_a", "callID": "call_w", "tool": "write",
		"state": map[string]any{"status": "completed", "input": json.RawMessage(input), "output": "wrote\n" + chunk + "done",
			"title": "big.txt", "metadata": json.RawMessage(meta)}})
	events, err := Translate([]byte(`{"payload":{"id":"evt_w","type":"message.part.updated","properties":{"part":` + string(part) + `}}}`))
	if err != nil || len(events) != 1 {
		t.Fatalf("%v %v", events, err)
	}
	if len(events[0].Body()) < 3<<20 {
		t.Fatalf("the write is only %d bytes", len(events[0].Body()))
	}
	return events[0]
}

// checkCut checks that body is a cut bigWrite within limit that thatch decodes.
func checkCut(t *testing.T, subject string, body []byte, limit int) {
	t.Helper()
	if len(body) > limit {
		t.Fatalf("%d bytes, over the limit %d", len(body), limit)
	}
	ev, err := runtime.DecodeEvent("opencode", subject, body)
	if err != nil {
		t.Fatal(err)
	}
	var args struct{ FilePath, Content string }
	must(t, json.Unmarshal(ev.Tool.Args, &args))
	var meta struct {
		Exists bool
		Exit   json.Number
		Diff   string
	}
	must(t, json.Unmarshal(ev.Tool.Metadata, &meta))
	if ev.SessionID != "ses_a" || ev.Tool.CallID != "call_w" || ev.Tool.Tool != "write" || ev.Tool.Title != "big.txt" ||
		args.FilePath != "/w/big.txt" || meta.Exit != "0" {
		t.Fatalf("cut what it should not: %+v %+v %s", ev.Tool, args.FilePath, meta.Exit)
	}
	for _, s := range []struct{ got, head, tail string }{
		{args.Content, "BEGIN\nline <é>", "\nEND"}, {ev.Tool.Output, "wrote\n", "done"}, {meta.Diff, "@@ head\n", "tail @@"},
	} {
		if !strings.HasPrefix(s.got, s.head) || !strings.HasSuffix(s.got, s.tail) || !strings.Contains(s.got, " characters to fit the broker]…") ||
			!utf8.ValidString(s.got) {
			t.Fatalf("cut to %d bytes, not head, marker and tail: %.80q … %.80q", len(s.got), s.got, s.got[max(0, len(s.got)-80):])
		}
	}
}

func TestFit(t *testing.T) {
	for _, tc := range []struct {
		maxPayload int64
		want       int
	}{{0, 1<<20 - 8<<10}, {8 << 20, 1<<20 - 8<<10}, {512 << 10, 504 << 10}} {
		if got := EventLimit(tc.maxPayload); got != tc.want {
			t.Errorf("EventLimit(%d) = %d, want %d", tc.maxPayload, got, tc.want)
		}
	}
	ev := bigWrite(t)
	for _, limit := range []int{1<<20 - 8<<10, 200 << 10} {
		checkCut(t, "opencode.h.event.tool.execute.after", Fit(ev, limit).Body(), limit)
	}
	small := Event{ID: "e", Type: "session.idle", Properties: json.RawMessage(`{"sessionID":"ses_a","n":1.50}`)}
	if got := Fit(small, 1<<20); string(got.Body()) != string(small.Body()) {
		t.Fatalf("an event that fits changed: %s", got.Body())
	}
}

// A large write's tool call reaches the stream cut to fit, from the event stream and from
// the plugin shim, whose endpoint takes a body of several MiB.
func TestBridgeCutsLargeEvents(t *testing.T) {
	nc, js, stream := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	token := filepath.Join(t.TempDir(), "shim.token")
	must(t, os.WriteFile(token, []byte(testToken), 0o600))
	addr := freeAddr(t)
	b := &Bridge{NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test", ShimListen: addr, TokenFile: token, Log: testkit.Logger(t)}
	must(t, b.Start())
	defer b.Close()
	ev := bigWrite(t)
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	must(t, b.publish(pctx, ev))
	limit := EventLimit(nc.MaxPayload())
	m := storedEvent(t, ctx, stream, 1)
	checkCut(t, m.Subject, m.Data, limit)
	if id := m.Header.Get(jetstream.MsgIDHeader); id != ToolEventID("ses_a", "call_w") {
		t.Fatalf("published as %s", id)
	}

	hook := strings.Replace(string(ev.Body()), `"call_w"`, `"call_w2"`, 1)
	req, _ := http.NewRequest("POST", "http://"+addr+"/event", strings.NewReader(hook))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a %d-byte hook event: HTTP %d %s", len(hook), resp.StatusCode, body)
	}
	m = storedEvent(t, ctx, stream, 2)
	if len(m.Data) > limit {
		t.Fatalf("the hook's event is %d bytes, over %d", len(m.Data), limit)
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id != ToolEventID("ses_a", "call_w2") {
		t.Fatalf("the hook's event published as %s", id)
	}
}

// The catch-up tells thatch of each session updated meanwhile, parents first, fetching
// the ancestors the list lacks, before the sessions' tool calls: a sub-agent's child
// created while thatch was down is known as a child.
func TestCatchUpParentsFirst(t *testing.T) {
	nc, js, stream := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fake := &fakeOpencode{
		sessions: `[{"id":"ses_child","parentID":"ses_mid","projectID":"prj_1","directory":"/w","title":"sub-agent","time":{"created":1,"updated":30}},` +
			`{"id":"ses_orphan","parentID":"ses_deleted","directory":"/w","title":"o","time":{"updated":25}},` +
			`{"id":"ses_top","directory":"/w","title":"top","time":{"updated":20}}]`,
		info: map[string]string{
			"ses_mid":    `{"id":"ses_mid","parentID":"ses_root","projectID":"prj_1","directory":"/w","title":"mid","time":{"updated":10}}`,
			"ses_root":   `{"id":"ses_root","projectID":"prj_1","directory":"/w","title":"root","time":{"updated":5}}`,
			"ses_child":  `{"id":"ses_child"}`,
			"ses_orphan": `{"id":"ses_orphan"}`,
			"ses_top":    `{"id":"ses_top"}`,
		},
		messages: map[string]string{"ses_child": `[{"info":{"role":"assistant"},"parts":[` +
			strings.ReplaceAll(toolPartJSON, `"sessionID":"ses_a"`, `"sessionID":"ses_child"`) + `]}]`},
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test", Log: testkit.Logger(t)}
	must(t, b.catchUp(ctx, time.Now().Add(-time.Minute)))
	var got []string
	var child *runtime.Event
	for seq := uint64(1); seq <= 6; seq++ {
		m := storedEvent(t, ctx, stream, seq)
		ev, err := runtime.DecodeEvent("opencode", m.Subject, m.Data)
		if err != nil {
			t.Fatalf("event %d: %v", seq, err)
		}
		got = append(got, ev.Type+" "+ev.ID)
		if ev.ID == "sync_ses_child_30" {
			child = &ev
		}
	}
	want := []string{"session.updated sync_ses_root_5", "session.updated sync_ses_mid_10", "session.updated sync_ses_child_30",
		"session.updated sync_ses_orphan_25", "session.updated sync_ses_top_20", "tool.execute.after " + ToolEventID("ses_child", "call_1")}
	if !slices.Equal(got, want) {
		t.Fatalf("published\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if i := child.Info; i.ParentID != "ses_mid" || i.ProjectID != "prj_1" || i.Title != "sub-agent" || i.Directory != "/w" {
		t.Fatalf("the child's info: %+v", i)
	}
	if info, _ := stream.Info(ctx); info.State.Msgs != 6 {
		t.Fatalf("%d events, want 6", info.State.Msgs)
	}
}

// The hello says which of thatch's tools opencode lacks, and an extraction child is not
// created while they are missing.
func TestMissingTools(t *testing.T) {
	nc, js, stream := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fake := &fakeOpencode{events: make(chan string), tools: []string{"bash", "read", "thatch_get_extraction_payload", "memory_search"}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	// Every create looks at the tools again (a look holds a nanosecond).
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test",
		PluginPath: "/cfg/opencode/plugin/thatch.js", Log: testkit.Logger(t), ToolsTTL: time.Nanosecond}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	defer func() { stop(); <-done }()
	var hello struct{ Properties runtime.Hello }
	must(t, json.Unmarshal(storedEvent(t, ctx, stream, 1).Data, &hello))
	missing := []string{"thatch_extraction_done", "memory_remember", "memory_update", "memory_forget"}
	if !slices.Equal(hello.Properties.MissingTools, missing) {
		t.Fatalf("hello: missingTools %v, want %v", hello.Properties.MissingTools, missing)
	}
	create := func(title string) string {
		t.Helper()
		msg, err := nc.Request("opencode.oc-test.api.session.create", []byte(`{"parentID":"ses_a","title":"`+title+`","idempotencyKey":"k-`+title+`"}`), 5*time.Second)
		must(t, err)
		return string(msg.Data)
	}
	posts := func() int {
		n := 0
		for _, r := range fake.seen() {
			if strings.HasPrefix(r, "POST /session?") {
				n++
			}
		}
		return n
	}
	var reply struct{ Error runtime.HostError }
	must(t, json.Unmarshal([]byte(create("thatch-extraction")), &reply))
	wantMsg := "opencode has not loaded thatch's plugin (missing tools: thatch_extraction_done, memory_remember, memory_update, memory_forget): " +
		"run thatch install if you have not, then restart opencode (or POST /instance/dispose) so it loads the plugin from /cfg/opencode/plugin/thatch.js"
	if reply.Error.Name != "ToolsMissingError" || reply.Error.Message != wantMsg || posts() != 0 {
		t.Fatalf("creating an extraction child without the tools: %+v, %d created", reply.Error, posts())
	}
	if got := create("other"); !strings.Contains(got, `"result"`) || posts() != 1 {
		t.Fatalf("any other session is created: %s", got)
	}
	// opencode restarted with the plugin: the repeat (same key) looks again and creates.
	fake.setTools(append([]string{"bash"}, thatchTools...))
	if got := create("thatch-extraction"); !strings.Contains(got, `"result"`) || posts() != 2 {
		t.Fatalf("with the tools loaded: %s, %d created", got, posts())
	}
}

// TestExtractionPromptTools: the prompt of an extraction child (a session titled
// thatch-extraction) turns off every tool opencode lists except thatch's own, so the
// child's requests carry only those definitions; any other prompt leaves the tools alone,
// and an opencode that cannot list its tools gets the prompt without the map.
func TestExtractionPromptTools(t *testing.T) {
	fake := &fakeOpencode{
		info:  map[string]string{"ses_x": `{"id":"ses_x","title":"thatch-extraction","parentID":"ses_a","directory":"/w"}`},
		tools: append([]string{"bash", "read", "edit", "task"}, thatchTools...),
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := &Client{BaseURL: srv.URL, Log: testkit.Logger(t)}
	ctx := context.Background()
	prompt := func(sid string, extra map[string]any) map[string]json.RawMessage {
		t.Helper()
		p := map[string]any{"sessionID": sid, "parts": []any{map[string]any{"type": "text", "text": "x"}}}
		maps.Copy(p, extra)
		n := len(fake.seen())
		if _, err := c.Call(ctx, "session.prompt", raw(p)); err != nil {
			t.Fatalf("prompt %s: %v", sid, err)
		}
		for _, r := range fake.seen()[n:] {
			if rest, ok := strings.CutPrefix(r, "POST /session/"+sid+"/prompt_async "); ok {
				var body map[string]json.RawMessage
				must(t, json.Unmarshal([]byte(rest), &body))
				return body
			}
		}
		t.Fatalf("no prompt of %s reached opencode: %q", sid, fake.seen()[n:])
		return nil
	}
	wantOff := `{"bash":false,"edit":false,"read":false,"task":false}`

	body := prompt("ses_x", map[string]any{"model": map[string]string{"providerID": "small", "modelID": "s1"}})
	if string(body["tools"]) != wantOff || string(body["model"]) != `{"modelID":"s1","providerID":"small"}` {
		t.Errorf("extraction child with a model: tools %s, model %s; want tools %s", body["tools"], body["model"], wantOff)
	}
	body = prompt("ses_x", nil) // no model named: the parent's
	if string(body["tools"]) != wantOff || string(body["model"]) != `{"providerID":"p1","modelID":"m1"}` {
		t.Errorf("extraction child on its parent's model: tools %s, model %s", body["tools"], body["model"])
	}
	if body := prompt("ses_a", nil); body["tools"] != nil {
		t.Errorf("a prompt of a session that is no extraction child turns tools off: %s", body["tools"])
	}
	if body := prompt("ses_x", map[string]any{"noReply": true}); body["tools"] != nil {
		t.Errorf("a noReply prompt (no model turn) carries tools %s", body["tools"])
	}
	fake.setTools(nil) // an opencode without GET /experimental/tool/ids
	if body := prompt("ses_x", nil); body["tools"] != nil {
		t.Errorf("without the tool list: tools %s, want none (every tool offered)", body["tools"])
	}
}

// storedHello is a stored event as TestToolsLoadedWithoutRestart reads it.
type storedHello struct {
	typ, id, seq string
	hello        runtime.Hello
}

// nextHello returns the next host.hello of stream from *seq on, and the event before it.
func nextHello(t *testing.T, ctx context.Context, stream jetstream.Stream, seq *uint64) (hello, before storedHello) {
	t.Helper()
	for ; ; *seq++ {
		m := storedEvent(t, ctx, stream, *seq)
		var ev struct {
			Type       string
			Properties json.RawMessage
		}
		must(t, json.Unmarshal(m.Data, &ev))
		got := storedHello{typ: ev.Type, id: m.Header.Get(jetstream.MsgIDHeader), seq: m.Header.Get("Host-Seq")}
		if ev.Type == "host.hello" {
			must(t, json.Unmarshal(ev.Properties, &got.hello))
			*seq++
			return got, before
		}
		before = got
	}
}

// TestToolsLoadedWithoutRestart: opencode can load thatch's plugin without a restart (POST
// /instance/dispose after thatch install). While the last hello named missing tools, the
// bridge looks at opencode's tools every ToolsRecheck and, when they change, says hello
// again for the same boot (same bootID, the next Host-Seq, an event id of its own); with
// the tools there it looks no more. A create refused for missing tools starts the looks
// again.
func TestToolsLoadedWithoutRestart(t *testing.T) {
	nc, js, stream := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fake := &fakeOpencode{events: make(chan string), tools: []string{"bash", "read"}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test", Log: testkit.Logger(t),
		ToolsTTL: time.Nanosecond, ToolsRecheck: 50 * time.Millisecond}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	defer func() { stop(); <-done }()

	seq := uint64(1)
	first, _ := nextHello(t, ctx, stream, &seq)
	if !slices.Equal(first.hello.MissingTools, thatchTools) || first.seq != "1" {
		t.Fatalf("first hello at Host-Seq %s: missingTools %v, want %v", first.seq, first.hello.MissingTools, thatchTools)
	}
	all := append([]string{"bash", "read"}, thatchTools...)
	fake.setTools(all)
	again, before := nextHello(t, ctx, stream, &seq)
	if again.hello.BootID != first.hello.BootID || again.hello.MissingTools != nil || again.id != "hello_"+first.hello.BootID+"_1" {
		t.Fatalf("hello once the tools are loaded: id %s, boot %s, missingTools %v; want id hello_%s_1, the same boot, none missing",
			again.id, again.hello.BootID, again.hello.MissingTools, first.hello.BootID)
	}
	if prev, _ := strconv.Atoi(before.seq); again.seq != strconv.Itoa(prev+1) {
		t.Fatalf("the second hello at Host-Seq %s after %s: thatch would count a gap", again.seq, before.seq)
	}
	if again.hello.API != first.hello.API || again.hello.Caps != first.hello.Caps || again.hello.Directory != first.hello.Directory {
		t.Fatalf("the second hello changed the boot's record: %+v, was %+v", again.hello, first.hello)
	}

	// With the tools there, the bridge looks no more.
	looks := func() int {
		n := 0
		for _, r := range fake.seen() {
			if strings.HasPrefix(r, "GET /experimental/tool/ids") {
				n++
			}
		}
		return n
	}
	n := looks()
	time.Sleep(10 * b.ToolsRecheck) // the absence of a look cannot be waited for
	if looks() != n {
		t.Fatalf("%d looks at the tools while none is missing", looks()-n)
	}

	// The tools go missing again: the refused create starts the looks, and the tools back
	// make a third hello of the boot.
	fake.setTools([]string{"bash"})
	msg, err := nc.Request("opencode.oc-test.api.session.create", []byte(`{"parentID":"ses_a","title":"thatch-extraction"}`), 5*time.Second)
	must(t, err)
	if !strings.Contains(string(msg.Data), "ToolsMissingError") {
		t.Fatalf("create without the tools: %s", msg.Data)
	}
	fake.setTools(all)
	third, _ := nextHello(t, ctx, stream, &seq)
	if third.hello.BootID != first.hello.BootID || third.hello.MissingTools != nil || third.id != "hello_"+first.hello.BootID+"_2" {
		t.Fatalf("hello once the tools are back: id %s, boot %s, missingTools %v", third.id, third.hello.BootID, third.hello.MissingTools)
	}
}

// TestToolsLoadedBeforeAnIdle: a session going idle is when thatch would extract, so the
// bridge looks at the tools before it publishes the idle, and a new hello precedes it.
func TestToolsLoadedBeforeAnIdle(t *testing.T) {
	nc, js, stream := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fake := &fakeOpencode{events: make(chan string, 4), tools: []string{"bash"}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test", Log: testkit.Logger(t),
		ToolsTTL: time.Nanosecond, ToolsRecheck: time.Hour} // only the idle looks
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	defer func() { stop(); <-done }()

	seq := uint64(1)
	first, _ := nextHello(t, ctx, stream, &seq)
	if len(first.hello.MissingTools) == 0 {
		t.Fatal("the first hello names no missing tools")
	}
	fake.setTools(append([]string{"bash"}, thatchTools...))
	fake.events <- `{"payload":{"id":"evt_busy","type":"session.status","properties":{"sessionID":"ses_a","status":{"type":"busy"}}}}`
	fake.events <- `{"payload":{"id":"evt_idle","type":"session.status","properties":{"sessionID":"ses_a","status":{"type":"idle"}}}}`
	again, before := nextHello(t, ctx, stream, &seq)
	if again.hello.BootID != first.hello.BootID || again.hello.MissingTools != nil || before.id != "evt_busy" {
		t.Fatalf("hello after %s (want evt_busy): boot %s, missingTools %v", before.id, again.hello.BootID, again.hello.MissingTools)
	}
	if m := storedEvent(t, ctx, stream, seq); m.Header.Get(jetstream.MsgIDHeader) != "evt_idle" {
		t.Fatalf("after the hello: %s, want evt_idle", m.Header.Get(jetstream.MsgIDHeader))
	}
}
