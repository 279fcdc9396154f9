package daemontest

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
)

// statusPoller asks thatch's status, over a connection of its own as the CLI does, every
// 10 ms until stopped, and keeps what it saw. Beside each status request it makes one to
// an echo responder on the same broker: the floor the broker and the machine allow.
type statusPoller struct {
	asked, failed int
	worst, echo   time.Duration
	firstErr      error
	stop, done    chan struct{}
	halt          func() // stops the poller and waits for it; once
}

func pollStatus(t *testing.T, url string) *statusPoller {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	echoNC, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := echoNC.Subscribe("loadtest.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	must(t, echoNC.Flush())
	p := &statusPoller{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer nc.Close()
		defer echoNC.Close()
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			began := time.Now()
			var st runtime.StatusView
			err := APICall(nc, "status", nil, &st)
			p.worst = max(p.worst, time.Since(began))
			p.asked++
			if err != nil {
				p.failed++
				if p.firstErr == nil {
					p.firstErr = err
				}
			}
			began = time.Now()
			if _, err := nc.Request("loadtest.echo", []byte("ping"), 5*time.Second); err == nil {
				p.echo = max(p.echo, time.Since(began))
			}
		}
	}()
	p.halt = sync.OnceFunc(func() { close(p.stop); <-p.done })
	t.Cleanup(p.halt)
	return p
}

// end stops the poller and checks that every status request was answered.
func (p *statusPoller) end(t *testing.T, during string) {
	t.Helper()
	p.halt()
	if p.failed > 0 || p.asked == 0 {
		t.Fatalf("status during %s: %d of %d requests unanswered (first: %v)", during, p.failed, p.asked, p.firstErr)
	}
	t.Logf("status during %s: %d requests, all answered, the slowest in %s (a bare echo over the same broker meanwhile: the slowest in %s)",
		during, p.asked, p.worst.Round(100*time.Microsecond), p.echo.Round(100*time.Microsecond))
}

// seedPayloadJournal writes, before thatch starts, sessions of host h1 in dir each with
// entries shaped like the largest the journal keeps by default: a 2,000-character output,
// metadata of 8,000 bytes, and a nested argument of 20,000 characters (not cut when
// journaled).
func seedPayloadJournal(t *testing.T, dataDir, dir string, sessions, perSession int) {
	t.Helper()
	store, err := journal.Open(filepath.Join(dataDir, "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	meta := map[string]string{}
	for i := range 4 {
		meta[fmt.Sprintf("field_%d", i)] = strings.Repeat("m", 1960)
	}
	metadata, _ := json.Marshal(meta)
	args, _ := json.Marshal(map[string]any{"filePath": dir + "/a.go", "edits": []any{map[string]string{"oldString": strings.Repeat("x", 20_000)}}})
	st := runtime.NewState()
	now := time.Now()
	fx := runtime.NewEffects()
	for s := range sessions {
		sid := fmt.Sprintf("ses_%04d", s)
		st.Sessions[sid] = &runtime.Session{ID: sid, HostID: "h1", Kind: runtime.KindTop, Status: runtime.StatusIdle, Directory: dir, Title: "t", Touched: now}
		fx.Sessions[sid] = true
		for e := range perSession {
			id := fmt.Sprintf("call_%d", e)
			body := &runtime.Body{Tool: "multiedit", Args: args, Title: "edit", Output: strings.Repeat("o", 1999) + "\n", Metadata: metadata}
			fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryInsert, Root: sid, ID: id, At: now, Body: body, Size: runtime.EntrySize(id, body)})
		}
	}
	if err := store.Commit(&runtime.Batch{Now: now, State: st, Effects: fx}); err != nil {
		t.Fatal(err)
	}
}

// 1,000 concurrent thatch_get_extraction_payload calls, each from its own session, on
// entries of the largest size the journal keeps by default, all complete, and status
// answers every request made meanwhile: it reads the loop's snapshot instead of waiting
// for the loop, and payloads are read off the loop on the journal's read connections.
func TestLoadPayloadsWhileStatusAnswers(t *testing.T) {
	const sessions, perSession = 1000, 2
	r := New(t, "v1")
	r.Log = quietLog() // a load test measures thatch, not its debug log
	// A thousand claims at once on two cores that make test also keeps busy: the rig's 2 s
	// host timeout (4 s for a commit) is this test's flake, not its subject.
	r.Cfg.HostTimeoutMS = 10_000
	seedPayloadJournal(t, r.DataDir, r.Host.Dir, sessions, perSession)
	r.Start()
	ctx := r.Ctx()
	if st := r.Status(); st.Pending != sessions*perSession {
		t.Fatalf("status before the load: %+v, want %d pending entries", st, sessions*perSession)
	}
	poll := pollStatus(t, r.URL)
	began := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for s := range sessions {
		wg.Go(func() {
			sid := fmt.Sprintf("ses_%04d", s)
			a, herr, err := r.Host.Tool(ctx, "thatch", runtime.ToolPayload, sid, map[string]any{})
			bad := ""
			switch {
			case err != nil:
				bad = err.Error()
			case herr != nil:
				bad = herr.Message
			case !strings.Contains(a.Output, "(call_0)") || !strings.Contains(a.Output, "(call_1)") || strings.Contains(a.Output, strings.Repeat("x", 200)):
				bad = "output " + a.Output[:min(300, len(a.Output))]
			}
			if bad != "" {
				mu.Lock()
				failures = append(failures, sid+": "+bad)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(began)
	poll.end(t, fmt.Sprintf("%d concurrent payload calls", sessions))
	if len(failures) > 0 {
		t.Fatalf("%d of %d payload calls failed, the first: %s", len(failures), sessions, failures[0])
	}
	t.Logf("%d concurrent payload calls of %d entries each answered in %s", sessions, perSession, took.Round(time.Millisecond))
	if st := r.Status(); st.Accepted != sessions*perSession || st.Pending != 0 {
		t.Fatalf("status after the load: %d accepted, %d pending; want every entry claimed", st.Accepted, st.Pending)
	}
}

// 10,000 hosts each say hello and open a session: each gets its reminder from a call
// worker of its own, and once they are idle the workers exit, so the goroutines come back
// to what they were; status answers throughout.
func TestLoadHellosLeaveNoWorkers(t *testing.T) {
	hosts := 10_000
	if underRace {
		hosts = 2_000
	}
	r := New(t, "v1")
	r.Log = quietLog()        // a load test measures thatch, not its debug log
	r.Cfg.StrandSweep = false // the sweep's visits of new hosts are not what this counts
	// One responder plays every host's API.
	hostNC, err := nats.Connect(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer hostNC.Close()
	var mu sync.Mutex
	prompts := 0
	if _, err := hostNC.Subscribe("opencode.*.api.>", func(m *nats.Msg) {
		switch {
		case strings.HasSuffix(m.Subject, ".list"):
			_ = m.Respond([]byte(`{"result":[]}`))
		default:
			if strings.HasSuffix(m.Subject, ".session.prompt") {
				mu.Lock()
				prompts++
				mu.Unlock()
			}
			_ = m.Respond([]byte(`{"result":true}`))
		}
	}); err != nil {
		t.Fatal(err)
	}
	must(t, hostNC.Flush())
	r.StartTuned(func(l *runtime.Loop) { l.WorkerIdle = 200 * time.Millisecond })
	baseline := goruntime.NumGoroutine()
	poll := pollStatus(t, r.URL)

	pubNC, err := nats.Connect(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pubNC.Close()
	js, err := jetstream.New(pubNC)
	if err != nil {
		t.Fatal(err)
	}
	ctx := r.Ctx()
	began := time.Now()
	publish := func(host, id, typ string, props any) {
		body, _ := json.Marshal(map[string]any{"id": id, "type": typ, "properties": props})
		msg := nats.NewMsg("opencode." + host + ".event." + typ)
		msg.Data = body
		msg.Header.Set(jetstream.MsgIDHeader, id)
		if _, err := js.PublishMsgAsync(msg); err != nil {
			t.Fatal(err)
		}
	}
	for i := range hosts {
		h, sid := fmt.Sprintf("lh%05d", i), fmt.Sprintf("ses_%05d", i)
		publish(h, "hello_"+h, "host.hello", map[string]any{"hostID": h, "api": "v1", "version": "x", "bootID": "b1",
			"directory": r.Host.Dir, "worktree": r.Host.Dir, "capabilities": map[string]any{}, "resumed": []string{}})
		publish(h, "created_"+sid, "session.created", map[string]any{"sessionID": sid,
			"info": map[string]any{"id": sid, "title": "t", "directory": r.Host.Dir}})
		if i%500 == 499 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("publishing timed out")
			}
		}
	}
	<-js.PublishAsyncComplete()
	peak := 0
	waitFor(t, "every reminder to be answered", func() bool {
		peak = max(peak, goruntime.NumGoroutine())
		var st runtime.StatusView
		return r.TryAPI("status", nil, &st) == nil && st.Applied >= int64(2*hosts) && st.OutstandingCalls == 0
	})
	answered := time.Since(began)
	mu.Lock()
	n := prompts
	mu.Unlock()
	if n < hosts {
		t.Fatalf("%d reminders reached the hosts, want %d", n, hosts)
	}
	poll.end(t, fmt.Sprintf("%d hosts' hellos and reminders", hosts))
	// The poller is gone; a few goroutines of the publishing connection may linger.
	const slack = 10
	waitFor(t, "the idle workers to exit", func() bool { return goruntime.NumGoroutine() <= baseline+slack })
	t.Logf("%d hellos and sessions applied and their %d reminders answered in %s; goroutines: %d before, at least %d during, %d after",
		hosts, n, answered.Round(time.Millisecond), baseline, peak, goruntime.NumGoroutine())
	var st runtime.StatusView
	must(t, r.TryAPI("status", nil, &st))
	if st.Hosts < hosts || st.Goroutines > baseline+slack+5 {
		t.Fatalf("status after the load: %d hosts online, %d goroutines", st.Hosts, st.Goroutines)
	}
}

// quietLog drops what thatch logs below warnings: the load tests' thousands of hosts and
// calls would otherwise spend the machine on debug lines in the test's output.
func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
