package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/cmd/internal/daemon/daemontest"
	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime"
)

// rig is the daemon rig (daemontest.Rig) as the CLI's tests name it. Its fields are views
// of the shared rig's; cfg and log are the test's to set before start, which hands them
// to the shared rig, and dataDir and logPath serve the tests that run the built binary.
type rig struct {
	*daemontest.Rig
	t       *testing.T
	url     string
	dataDir string
	nc      *nats.Conn
	host    *fakehost.Host
	cfg     daemon.Config
	logPath string       // the thatch process's log, all runs appended
	log     *slog.Logger // serve's logger; the test's output when nil
}

// syncBuf is a log sink shared by the daemon's goroutines.
type syncBuf = daemontest.SyncBuf

// testLogger is for code that has no test at hand; a test uses testkit.Logger(t).
func testLogger() *slog.Logger {
	if os.Getenv("THATCH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newRig(t *testing.T, api string, methods ...string) *rig {
	t.Helper()
	return wrapRig(t, daemontest.New(t, api, methods...))
}

// wrapRig gives the shared rig d the names the CLI's tests use.
func wrapRig(t *testing.T, d *daemontest.Rig) *rig {
	return &rig{Rig: d, t: t, url: d.URL, dataDir: d.DataDir, nc: d.NC, host: d.Host, cfg: d.Cfg}
}

// captureLog makes serve log at debug level, as text, to the buffer it returns.
func (r *rig) captureLog() *syncBuf {
	logs := r.Rig.CaptureLog()
	r.log = r.Rig.Log
	return logs
}

// start runs thatch and waits until it answers status.
func (r *rig) start() { r.t.Helper(); r.startTuned(nil) }

// startTuned runs thatch as start does, with the loop's fields set by tune.
func (r *rig) startTuned(tune func(*runtime.Loop)) {
	r.t.Helper()
	r.Cfg, r.Log = r.cfg, r.log
	r.StartTuned(tune)
}

// stop stops thatch as SIGTERM does and checks it exited cleanly.
func (r *rig) stop() { r.Stop() }

func (r *rig) tryAPI(method string, params, out any) error { return r.TryAPI(method, params, out) }

// apiCall calls a method of thatch's API over nc, decoding its result into out, with the
// client the CLI and thatch-bench use.
func apiCall(nc *nats.Conn, method string, params, out any) error {
	return daemontest.APICall(nc, method, params, out)
}

func (r *rig) status() runtime.StatusView { r.t.Helper(); return r.Status() }

func (r *rig) sessions() map[string]runtime.SessionView { r.t.Helper(); return r.Sessions() }

func (r *rig) entries(session string) []runtime.EntryView { r.t.Helper(); return r.Entries(session) }

// waitApplied waits until thatch applied n events of known types.
func (r *rig) waitApplied(n int64) { r.t.Helper(); r.WaitApplied(n) }

func (r *rig) ctx() context.Context { return r.Ctx() }

// journalDump renders the journal of a stopped thatch, with the host's directory written
// $DIR so runs in different temporary folders compare.
func (r *rig) journalDump() string {
	r.t.Helper()
	r.Rig.DataDir = r.dataDir
	return r.JournalDump()
}

// journalDump renders the journal of a stopped thatch.
func journalDump(t *testing.T, dataDir string) string {
	t.Helper()
	return daemontest.JournalDump(t, dataDir)
}

// waitFor polls cond until it holds or the rig's usual timeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, daemontest.WaitTimeout, what, cond)
}

// waitWithin is waitFor with a timeout of its own.
func waitWithin(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, within, what, cond)
}

// fakehostNew adds a second, healthy host that plays extraction children.
func fakehostNew(r *rig, id string) (*fakehost.Host, error) { return r.AddHost(id) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// childOf waits for thatch to create an extraction child of parent on the host and
// returns its id.
func (r *rig) childOf(parent string, nth int) string { r.t.Helper(); return r.ChildOf(parent, nth) }

// prompted waits for the instruction prompt to session.
func (r *rig) prompted(session string) { r.t.Helper(); r.Prompted(session) }

// extractionOfOneEntry plays a host's hello and a session ses_a with one tool call (c1)
// going idle, and returns the extraction child thatch created and prompted for it.
func (r *rig) extractionOfOneEntry(ctx context.Context) string {
	r.t.Helper()
	return r.ExtractionOfOneEntry(ctx)
}

func (r *rig) tool(ctx context.Context, name, session string, args any) runtime.Answer {
	r.t.Helper()
	return r.Tool(ctx, name, session, args)
}

func entryIDs(a runtime.Answer) []string { return daemontest.EntryIDs(a) }
