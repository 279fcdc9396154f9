package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/scenario"
)

// rig is a real broker (an in-process nats-server with JetStream on disk), a fake host on
// it, and thatch's own serve wiring started and stopped at will on one data folder.
type rig struct {
	t       *testing.T
	ns      *server.Server
	url     string
	dataDir string
	nc      *nats.Conn
	host    *fakehost.Host
	cfg     daemon.Config
	cancel  context.CancelFunc
	done    chan error
	logPath string       // the thatch process's log, all runs appended
	log     *slog.Logger // serve's logger; testLogger() when nil
}

func testLogger() *slog.Logger {
	if os.Getenv("THATCH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newRig(t *testing.T, api string, methods ...string) *rig {
	t.Helper()
	ns := testkit.StartBroker(t, testkit.BrokerOptions{})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	h, err := fakehost.New(nc, "h1", api, methods...)
	if err != nil {
		t.Fatal(err)
	}
	h.Dir = t.TempDir()
	t.Cleanup(h.Close)
	r := &rig{t: t, ns: ns, url: ns.ClientURL(), dataDir: filepath.Join(t.TempDir(), "data"), nc: nc, host: h}
	cfg, err := daemon.LoadConfig() // the defaults, as a user gets them
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.NATSURL, cfg.HostTimeoutMS, cfg.InstallCommands = r.dataDir, r.url, 2000, false
	r.cfg = cfg
	return r
}

// captureLog makes serve log at debug level, as text, to the buffer it returns.
func (r *rig) captureLog() *syncBuf {
	logs := &syncBuf{}
	r.log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return logs
}

// start runs thatch and waits until it answers status.
func (r *rig) start() {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	log := r.log
	if log == nil {
		log = testLogger()
	}
	go func() { r.done <- daemon.Serve(ctx, r.cfg, log) }()
	r.t.Cleanup(r.stop)
	// A start loads the whole journal: 100,000 sessions under -race, beside the other
	// packages' tests on two cores, took over 20 s.
	waitWithin(r.t, 90*time.Second, "thatch to answer status", func() bool {
		var s runtime.StatusView
		return r.tryAPI("status", nil, &s) == nil
	})
}

// stop stops thatch as SIGTERM does and checks it exited cleanly.
func (r *rig) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("serve returned %v", err)
		}
	case <-time.After(15 * time.Second):
		r.t.Fatal("thatch did not stop within 15s")
	}
	r.cancel = nil
}

func (r *rig) tryAPI(method string, params, out any) error { return apiCall(r.nc, method, params, out) }

// apiCall calls a method of thatch's API over nc, decoding its result into out, with the
// client the CLI and thatch-bench use.
func apiCall(nc *nats.Conn, method string, params, out any) error {
	return daemon.API{NC: nc, Prefix: "thatch", Timeout: 5 * time.Second}.Call(context.Background(), method, params, out)
}

func (r *rig) status() runtime.StatusView {
	r.t.Helper()
	var s runtime.StatusView
	must(r.t, r.tryAPI("status", nil, &s))
	return s
}

func (r *rig) sessions() map[string]runtime.SessionView {
	r.t.Helper()
	var rows []runtime.SessionView
	must(r.t, r.tryAPI("sessions", map[string]any{}, &rows))
	out := map[string]runtime.SessionView{}
	for _, s := range rows {
		out[s.SessionID] = s
	}
	return out
}

func (r *rig) entries(session string) []runtime.EntryView {
	r.t.Helper()
	var rows []runtime.EntryView
	must(r.t, r.tryAPI("entries", map[string]any{"sessionID": session}, &rows))
	return rows
}

// waitApplied waits until thatch applied n events of known types.
func (r *rig) waitApplied(n int64) {
	r.t.Helper()
	waitFor(r.t, "events to be applied", func() bool { return r.status().Applied >= n })
	if got := r.status().Applied; got != n {
		r.t.Fatalf("applied %d events, want exactly %d", got, n)
	}
}

func (r *rig) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	r.t.Cleanup(cancel)
	return ctx
}

// journalDump renders the journal of a stopped thatch, with the host's directory written
// $DIR so runs in different temporary folders compare.
func (r *rig) journalDump() string {
	return strings.ReplaceAll(journalDump(r.t, r.dataDir), r.host.Dir, "$DIR")
}

// journalDump renders the journal of a stopped thatch.
func journalDump(t *testing.T, dataDir string) string {
	t.Helper()
	s, err := journal.Open(filepath.Join(dataDir, "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, calls, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	out := scenario.Dump(st, scenario.Epoch)
	for _, c := range calls {
		out += "\noutbox " + scenario.FormatCall(c)
	}
	return out
}

// waitFor polls cond until it holds or 20 seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 20*time.Second, what, cond)
}

// waitWithin is waitFor with a deadline of its own.
func waitWithin(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fakehostNew adds a second, healthy host that plays extraction children.
func fakehostNew(r *rig, id string) (*fakehost.Host, error) {
	h, err := fakehost.New(r.nc, id, "v1")
	if err != nil {
		return nil, err
	}
	h.Dir, h.Model = r.t.TempDir(), true
	r.t.Cleanup(h.Close)
	return h, nil
}
