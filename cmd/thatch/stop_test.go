package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/cmd/internal/daemon/daemontest"
	"github.com/thatch-dev/thatch/runtime"
)

// Rule 12 (stopping, waiting calls, a recreated stream, parts that cannot start), against
// the embedded broker: thatch's default, where hosts connect to the broker thatch runs.

// freeAddr is a free loopback host:port at the time of the call.
func freeAddr(t testing.TB) string { t.Helper(); return daemontest.FreeAddr(t) }

// newEmbeddedRig is a rig whose broker is the one thatch embeds (daemontest.NewEmbedded).
func newEmbeddedRig(t *testing.T, api string, methods ...string) *rig {
	t.Helper()
	return wrapRig(t, daemontest.NewEmbedded(t, api, methods...))
}

// reminders groups the session.prompt requests a host received by session: the keys
// they carried, and how many were repeats answered from the host's memory.
func reminders(reqs []fakehost.Call) (keys map[string][]string, repeats int) {
	keys = map[string][]string{}
	for _, c := range reqs {
		if c.Method != "session.prompt" {
			continue
		}
		sid, _ := c.Params["sessionID"].(string)
		keys[sid] = append(keys[sid], c.Key)
		if c.Repeat {
			repeats++
		}
	}
	return keys, repeats
}

// checkKeys checks that each of sessions got its call, that every request of a session
// carried one and the same idempotency key, and that no two sessions' calls share a key.
func checkKeys(t *testing.T, keys map[string][]string, sessions []string) {
	t.Helper()
	owner := map[string]string{}
	for _, sid := range sessions {
		ks := keys[sid]
		if len(ks) == 0 {
			t.Errorf("%s: its call never reached the host", sid)
			continue
		}
		for _, k := range ks {
			if k == "" {
				t.Errorf("%s: a request without an idempotency key", sid)
			}
			if k != ks[0] {
				t.Errorf("%s: a repeat carried key %s, the first %s", sid, k, ks[0])
			}
		}
		if o, ok := owner[ks[0]]; ok {
			t.Errorf("%s and %s share the key %s", o, sid, ks[0])
		}
		owner[ks[0]] = sid
	}
}

// stoppedTook reads how long thatch's last stop took, as its log says ("stopped").
func stoppedTook(t *testing.T, logPath string) string {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		return "?"
	}
	defer f.Close()
	took := "?"
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct{ Msg, Took string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "stopped" {
			took = l.Took
		}
	}
	return took
}

// TestStopWithCallsInFlight stops the real binary (SIGTERM) or kills it (SIGKILL) while a
// slow host has one reminder in flight (longer than the stop's grace) and others queued,
// with the host away across the stop and back before thatch restarts (its connection
// comes back and it says hello again) or only after (the calls wait, then its hello sends
// them). Every reminder reaches the host, each with its idempotency key; a repeat carries
// the same key and is answered from the host's memory.
func TestStopWithCallsInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test: skipped in -short mode")
	}
	bin := binary(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		for _, backBefore := range []bool{true, false} {
			when := "after"
			if backBefore {
				when = "before"
			}
			t.Run(fmt.Sprintf("%s/host back %s the restart", sigName(sig), when), func(t *testing.T) {
				stopWithCallsInFlight(t, bin, sig, backBefore)
			})
		}
	}
}

func sigName(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGTERM"
}

func stopWithCallsInFlight(t *testing.T, bin string, sig syscall.Signal, backBefore bool) {
	const n = 6
	r := newEmbeddedRig(t, "v1")
	h := r.host
	var prompts atomic.Int32
	exited := make(chan struct{})
	exit := sync.OnceFunc(func() { close(exited) })
	t.Cleanup(exit)
	h.Reply = func(method string, _ map[string]any) (any, *runtime.HostError, bool) {
		// A slow host: one call in flight, the rest queued behind it (the host answers
		// one request at a time). The first is answered only once thatch exited, so
		// past a stop's grace: a SIGTERM abandons it too.
		if method == "session.prompt" && prompts.Add(1) == 1 {
			<-exited
		}
		return nil, nil, false
	}
	cmd := r.process(bin)
	waitFor(t, "thatch to answer", func() bool { return r.tryAPI("status", nil, new(map[string]any)) == nil })
	ctx := r.ctx()
	must(t, h.Hello(ctx, "b1"))
	var sessions []string
	for i := range n {
		sid := fmt.Sprintf("ses_%d", i)
		sessions = append(sessions, sid)
		must(t, h.Created(ctx, sid, "", "t", h.Dir))
	}
	var st runtime.StatusView
	waitFor(t, "a reminder in flight and others queued", func() bool {
		return r.tryAPI("status", nil, &st) == nil && len(h.CallsTo("session.prompt")) >= 1 && st.OutstandingCalls >= 2
	})
	began := time.Now()
	must(t, cmd.Process.Signal(sig))
	err := cmd.Wait()
	took := time.Since(began)
	exit()
	if sig == syscall.SIGTERM && err != nil {
		t.Fatalf("thatch did not exit cleanly on SIGTERM: %v", err)
	}
	reached := len(h.CallsTo("session.prompt"))
	if sig == syscall.SIGTERM {
		t.Logf("SIGTERM with %d calls outstanding (one in flight): exited after %s (its log: stopped, took %s)",
			st.OutstandingCalls, took.Round(time.Millisecond), stoppedTook(t, r.logPath))
	} else {
		t.Logf("SIGKILL with %d calls outstanding (one in flight)", st.OutstandingCalls)
	}

	// The broker went with thatch: once the host's connection has seen it go, the host
	// goes away too (a flush racing the disconnect fails with "connection closed").
	waitFor(t, "the host's connection to see the broker go", func() bool { return !h.NC.IsConnected() })
	must(t, h.Away())
	if backBefore {
		must(t, h.Back()) // its connection comes back with the broker, and it says hello again
	}
	cmd = r.process(bin)
	waitFor(t, "thatch to answer again", func() bool { return r.tryAPI("status", nil, new(map[string]any)) == nil })
	if !backBefore {
		waitFor(t, "the calls left in the outbox to wait for the host", func() bool {
			return r.tryAPI("status", nil, &st) == nil && st.WaitingCalls > 0 && st.OutstandingCalls == 0
		})
		if got := len(h.CallsTo("session.prompt")); got != reached {
			t.Fatalf("the host got %d reminders while away, had %d before", got, reached)
		}
		t.Logf("while the host was away after the restart: %d calls waiting", st.WaitingCalls)
		must(t, h.Back())
		must(t, h.HelloAgain(ctx))
	}
	waitFor(t, "every reminder to reach the host", func() bool {
		keys, _ := reminders(h.Requests())
		return len(keys) == n && r.tryAPI("status", nil, &st) == nil && st.OutstandingCalls == 0 && st.WaitingCalls == 0
	})
	keys, repeats := reminders(h.Requests())
	checkKeys(t, keys, sessions)
	if log, err := os.ReadFile(r.logPath); err == nil && backBefore {
		t.Logf("calls resumed at the restart found no responder before the host reconnected: %v",
			strings.Contains(string(log), "its calls wait in the outbox for its next hello"))
	}
	t.Logf("%d reminders reached the host before the %s, %d after; %d repeats, each answered from the host's memory by its key",
		reached, sigName(sig), n-reached, repeats)

	must(t, cmd.Process.Signal(syscall.SIGTERM))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("thatch did not exit cleanly: %v", err)
	}
	if dump := r.journalDump(); strings.Contains(dump, "outbox ") {
		t.Fatalf("calls left in the outbox:\n%s", dump)
	}
}

// fakeOpencode answers the few routes of opencode serve the bridge uses: the event
// stream (frames the test sends), health, path, config, the session list (empty), a
// session, its messages (none), a prompt, and the creation of a session, which a held
// opencode answers only once released. It records the parent of each creation, in
// arrival order.
type fakeOpencode struct {
	srv    *httptest.Server
	frames chan string
	dir    string

	mu      sync.Mutex
	held    chan struct{} // creations wait until it is closed; nil: never held
	creates []string      // parentID of each POST /session
	active  int           // creations being answered
}

// newFakeOpencode serves a fake opencode; with hold, it answers no creation of a session
// until the release it returns is called (the test's cleanup calls it too).
func newFakeOpencode(t *testing.T, hold bool) (f *fakeOpencode, release func()) {
	f = &fakeOpencode{frames: make(chan string, 64), dir: t.TempDir()}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close) // waits for the creations being answered
	release = func() {}
	if hold {
		release = f.hold(t)
	}
	return f, release
}

// hold makes the creations that arrive from now on wait until release is called (the
// test's cleanup calls it too, before the server's close waits for them).
func (f *fakeOpencode) hold(t *testing.T) (release func()) {
	held := make(chan struct{})
	f.mu.Lock()
	f.held = held
	f.mu.Unlock()
	release = sync.OnceFunc(func() { close(held) })
	t.Cleanup(release)
	return release
}

func (f *fakeOpencode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	js := func(v string) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, v)
	}
	session := func(id, parent string) string {
		v, _ := json.Marshal(map[string]string{"id": id, "parentID": parent, "title": "t", "directory": f.dir})
		return string(v)
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
			case frame := <-f.frames:
				fmt.Fprintf(w, "data: %s\n\n", frame)
				w.(http.Flusher).Flush()
			}
		}
	case r.URL.Path == "/global/health":
		js(`{"healthy":true,"version":"1.18.33"}`)
	case r.URL.Path == "/path":
		js(`{"directory":"/w","worktree":"/w"}`)
	case r.URL.Path == "/config":
		js(`{"model":"p/m"}`)
	case r.URL.Path == "/experimental/session":
		js(`[]`)
	case r.Method == "POST" && r.URL.Path == "/session":
		var p struct{ ParentID string }
		_ = json.Unmarshal(body, &p)
		f.mu.Lock()
		f.creates = append(f.creates, p.ParentID)
		n := len(f.creates)
		f.active++
		held := f.held
		f.mu.Unlock()
		if held != nil { // a slow opencode; the bridge does not cut it at a stop
			select {
			case <-held:
			case <-r.Context().Done():
			}
		}
		f.mu.Lock()
		f.active--
		f.mu.Unlock()
		js(session(fmt.Sprintf("ses_child%d", n), p.ParentID))
	case r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/message"):
		js(`[]`)
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/session/"):
		js(session(strings.TrimPrefix(r.URL.Path, "/session/"), ""))
	case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/prompt_async"):
		w.WriteHeader(http.StatusNoContent)
	default: // an unknown route, as opencode answers it
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html></html>")
	}
}

func (f *fakeOpencode) seen() (creates []string, active int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.creates), f.active
}

// toolAndIdle sends the frames of a new session sid, a completed tool call of it, and its idle.
func (f *fakeOpencode) toolAndIdle(sid string) {
	info, _ := json.Marshal(map[string]string{"id": sid, "title": "t", "directory": f.dir})
	f.frames <- fmt.Sprintf(`{"directory":"/w","payload":{"id":"evt_c_%s","type":"session.created","properties":{"sessionID":%q,"info":%s}}}`, sid, sid, info)
	f.frames <- fmt.Sprintf(`{"directory":"/w","payload":{"id":"evt_p_%s","type":"message.part.updated","properties":{"part":{"id":"prt_%s","type":"tool","sessionID":%q,"messageID":"msg_1","callID":"call_1","tool":"bash","state":{"status":"completed","input":{"command":"make"},"output":"ok","title":"make","metadata":{},"time":{"start":1,"end":2}}}}}}`,
		sid, sid, sid)
	f.frames <- fmt.Sprintf(`{"directory":"/w","payload":{"id":"evt_i_%s","type":"session.idle","properties":{"sessionID":%q}}}`, sid, sid)
}

// TestBridgeStopWithCallsInFlight stops thatch serving opencode through its in-process
// bridge while opencode holds the creation of an extraction child until the stop returned
// (so past the loop's StopGrace and the bridge's StopWait) and other sessions' creations
// are queued. The stop does not wait for opencode; the abandoned calls go out at the next start with the keys
// they had, and every session's creation reaches opencode. opencode keeps no idempotency
// memory, so a call abandoned after opencode took it reaches it twice (counted, not
// asserted). The goroutines the bridge leaves to finish a call are checked by the
// package's goleak once opencode answered.
func TestBridgeStopWithCallsInFlight(t *testing.T) {
	const n = 3
	oc, release := newFakeOpencode(t, true)
	r := newEmbeddedRig(t, "v1")
	r.host.Close() // opencode, through the bridge, is the host here
	r.cfg.OpencodeURL, r.cfg.ShimListen, r.cfg.HostTimeoutMS = oc.srv.URL, freeAddr(t), 10000
	logs := r.captureLog()

	// Every creation thatch asks of a host, as the broker carries it to the bridge.
	var mu sync.Mutex
	keys := map[string][]string{}
	sub, err := r.nc.Subscribe("opencode.*.api.session.create", func(m *nats.Msg) {
		var p struct{ ParentID, IdempotencyKey string }
		_ = json.Unmarshal(m.Data, &p)
		mu.Lock()
		keys[p.ParentID] = append(keys[p.ParentID], p.IdempotencyKey)
		mu.Unlock()
	})
	must(t, err)
	defer sub.Unsubscribe()
	defer func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.Bytes())
		}
	}()

	r.start()
	waitFor(t, "the bridge's hello", func() bool { return r.status().Hosts == 1 })
	var sessions []string
	for i := range n {
		sid := fmt.Sprintf("ses_%d", i)
		sessions = append(sessions, sid)
		oc.toolAndIdle(sid)
	}
	waitFor(t, "a creation in flight at opencode and others queued", func() bool {
		c, active := oc.seen()
		return len(c) >= 1 && active == 1 && r.status().OutstandingCalls >= 2
	})
	began := time.Now()
	r.stop()
	took := time.Since(began)
	first, active := oc.seen()
	release() // opencode answers the creation the stop left behind, and every one after
	t.Logf("stop with a creation in flight at a slow opencode and %d queued: serve returned after %s; opencode was still answering %d",
		n-len(first), took.Round(time.Millisecond), active)
	if !strings.Contains(string(logs.Bytes()), "left in the outbox for the next start") {
		t.Error("the stop did not leave the call in flight in the outbox")
	}

	// The restart sends the creation the stop abandoned first; the others queue behind it,
	// held until the test's connection, which records them, is back with the broker.
	release = oc.hold(t)
	r.start()
	must(t, r.nc.Flush())
	release()
	waitFor(t, "every session's creation at opencode", func() bool {
		c, _ := oc.seen()
		slices.Sort(c)
		return len(slices.Compact(c)) == n && r.status().OutstandingCalls == 0
	})
	r.stop()
	mu.Lock()
	checkKeys(t, keys, sessions)
	mu.Unlock()
	c, _ := oc.seen()
	t.Logf("opencode got %d creations for %d sessions (a call abandoned after opencode took it comes again: opencode keeps no key)", len(c), n)
}

// TestListenProblemsStopTheStart: a taken THATCH_SHIM_LISTEN (with the bridge on),
// THATCH_NATS_LISTEN or THATCH_HTTP_LISTEN, and listen addresses that are not host:port, end thatch serve at
// once with exit status 1 and a message naming the variable.
func TestListenProblemsStopTheStart(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test: skipped in -short mode")
	}
	bin := binary(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer taken.Close()
	cases := []struct {
		name, variable string
		env            []string
	}{
		{"shim address taken", "THATCH_SHIM_LISTEN", []string{"THATCH_OPENCODE_URL=http://" + freeAddr(t), "THATCH_SHIM_LISTEN=" + taken.Addr().String()}},
		{"broker address taken", "THATCH_NATS_LISTEN", []string{"THATCH_NATS_LISTEN=" + taken.Addr().String()}},
		{"broker address without a port", "THATCH_NATS_LISTEN", []string{"THATCH_NATS_LISTEN=nohost"}},
		{"shim port not a number", "THATCH_SHIM_LISTEN", []string{"THATCH_SHIM_LISTEN=0.0.0.0:x"}},
		{"broker port out of range", "THATCH_NATS_LISTEN", []string{"THATCH_NATS_LISTEN=127.0.0.1:70000"}},
		{"shim host not an address", "THATCH_SHIM_LISTEN", []string{"THATCH_SHIM_LISTEN=example.com:4223"}},
		{"operator endpoint address taken", "THATCH_HTTP_LISTEN", []string{"THATCH_HTTP_LISTEN=" + taken.Addr().String()}},
		{"operator endpoint port not a number", "THATCH_HTTP_LISTEN", []string{"THATCH_HTTP_LISTEN=127.0.0.1:http"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dataDir := t.TempDir()
			env := append(os.Environ(), "THATCH_DATA_DIR="+dataDir, "THATCH_NATS_LISTEN="+freeAddr(t), "THATCH_INSTALL_COMMANDS=off", "THATCH_LOG_LEVEL=error")
			cmd := exec.Command(bin, "serve")
			cmd.Env = append(env, c.env...) // the case's values come last and win
			var stderr strings.Builder
			cmd.Stderr = &stderr
			began := time.Now()
			must(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("thatch serve still runs 30 s after starting with %v; stderr:\n%s", c.env, stderr.String())
			}
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 1 {
				t.Fatalf("thatch serve with %v ended with %v, want exit status 1; stderr:\n%s", c.env, err, stderr.String())
			}
			msg := strings.TrimSpace(stderr.String())
			if last := msg[strings.LastIndex(msg, "\n")+1:]; !strings.Contains(last, c.variable) {
				t.Fatalf("the error does not name %s:\n%s", c.variable, msg)
			}
			t.Logf("exit 1 after %s: %s", time.Since(began).Round(time.Millisecond), msg[strings.LastIndex(msg, "\n")+1:])
		})
	}
}
