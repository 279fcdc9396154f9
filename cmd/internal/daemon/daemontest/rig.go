package daemontest

import (
	"context"
	"log/slog"
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
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/scenario"
)

// StartTimeout bounds how long Start waits for the daemon to answer status: a start loads
// the whole journal, and the load tests give it 100,000 sessions on a shared machine.
const StartTimeout = 90 * time.Second

// WaitTimeout is the rig's usual bound on a condition a test waits for.
const WaitTimeout = 20 * time.Second

// Rig is a real broker (an in-process nats-server with JetStream on disk), a fake host
// on it, and thatch's own serve wiring started and stopped at will on one data folder.
// Set Cfg and Log before Start; Start again after Stop restarts on the same files.
type Rig struct {
	T       *testing.T
	NS      *server.Server
	URL     string
	DataDir string
	NC      *nats.Conn
	Host    *fakehost.Host
	Cfg     daemon.Config
	// Log is serve's logger; nil is testkit.Logger (the test's output, shown on failure).
	Log *slog.Logger

	stop func() // stops the serve Start began; nil when thatch is not running
}

// New starts a broker, connects, and puts a fake host "h1" on it that speaks api and
// serves methods (every method when none are given). Cfg is the defaults a user gets,
// pointed at the broker and the data folder, with a host timeout of 2 s and no install
// of opencode's commands.
func New(t *testing.T, api string, methods ...string) *Rig {
	t.Helper()
	ns := testkit.StartBroker(t, testkit.BrokerOptions{})
	nc, _ := testkit.Connect(t, ns.ClientURL(), "")
	h, err := fakehost.New(nc, "h1", api, methods...)
	if err != nil {
		t.Fatal(err)
	}
	h.Dir = t.TempDir()
	t.Cleanup(h.Close)
	r := &Rig{T: t, NS: ns, URL: ns.ClientURL(), DataDir: filepath.Join(t.TempDir(), "data"), NC: nc, Host: h}
	cfg, err := daemon.LoadConfig() // the defaults, as a user gets them
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.NATSURL, cfg.HostTimeoutMS, cfg.InstallCommands = r.DataDir, r.URL, 2000, false
	r.Cfg = cfg
	return r
}

// CaptureLog makes serve log at debug level, as text, to the buffer it returns.
func (r *Rig) CaptureLog() *SyncBuf {
	logs := &SyncBuf{}
	r.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return logs
}

// Start runs thatch and waits until it answers status.
func (r *Rig) Start() { r.T.Helper(); r.StartTuned(nil) }

// StartTuned is Start with the loop tuned before it runs (daemon.ServeWith).
func (r *Rig) StartTuned(tune func(*runtime.Loop)) {
	r.T.Helper()
	log := r.Log
	if log == nil {
		log = testkit.Logger(r.T) // before the stop's cleanup, so that what serve says stopping is kept
	}
	r.stop = Serve(r.T, r.Cfg, log, tune, "thatch to answer status", func() error {
		var s runtime.StatusView
		return r.TryAPI("status", nil, &s)
	})
}

// Stop stops thatch as SIGTERM does and checks it exited cleanly; it does nothing when
// thatch is not running.
func (r *Rig) Stop() {
	if stop := r.stop; stop != nil {
		r.stop = nil
		stop()
	}
}

// Serve runs thatch serve in process with c (daemon.ServeWith, the loop tuned by tune
// when it is not nil) until the test ends or the stop it returns is called, and waits up
// to StartTimeout until ready returns nil; serve ending first fails the test. stop
// cancels serve as SIGTERM does, checks it returned no error, and may be called again.
func Serve(t *testing.T, c daemon.Config, log *slog.Logger, tune func(*runtime.Loop), what string, ready func() error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.ServeWith(ctx, c, log, tune) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("thatch did not stop within 15s")
		}
	}
	t.Cleanup(stop)
	testkit.WaitFor(t, StartTimeout, what, func() error {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("serve ended at start: %v", err)
		default:
		}
		return ready()
	})
	return stop
}

// Restart stops thatch and starts it again on the same files.
func (r *Rig) Restart() { r.T.Helper(); r.Stop(); r.Start() }

// TryAPI calls a method of thatch's API.
func (r *Rig) TryAPI(method string, params, out any) error { return APICall(r.NC, method, params, out) }

// APICall calls a method of thatch's API over nc, decoding its result into out, with the
// client the CLI and thatch-bench use.
func APICall(nc *nats.Conn, method string, params, out any) error {
	return daemon.API{NC: nc, Prefix: "thatch", Timeout: 5 * time.Second}.Call(context.Background(), method, params, out)
}

// Status is thatch's status; the test fails when thatch does not answer.
func (r *Rig) Status() runtime.StatusView {
	r.T.Helper()
	var s runtime.StatusView
	if err := r.TryAPI("status", nil, &s); err != nil {
		r.T.Fatal(err)
	}
	return s
}

// Sessions lists thatch's sessions by ID.
func (r *Rig) Sessions() map[string]runtime.SessionView {
	r.T.Helper()
	var rows []runtime.SessionView
	if err := r.TryAPI("sessions", map[string]any{}, &rows); err != nil {
		r.T.Fatal(err)
	}
	out := map[string]runtime.SessionView{}
	for _, s := range rows {
		out[s.SessionID] = s
	}
	return out
}

// Entries lists a session's journal entries.
func (r *Rig) Entries(session string) []runtime.EntryView {
	r.T.Helper()
	var rows []runtime.EntryView
	if err := r.TryAPI("entries", map[string]any{"sessionID": session}, &rows); err != nil {
		r.T.Fatal(err)
	}
	return rows
}

// WaitApplied waits until thatch applied n events of known types, and fails when it
// applied more.
func (r *Rig) WaitApplied(n int64) {
	r.T.Helper()
	testkit.WaitFor(r.T, WaitTimeout, "events to be applied", func() bool { return r.Status().Applied >= n })
	if got := r.Status().Applied; got != n {
		r.T.Fatalf("applied %d events, want exactly %d", got, n)
	}
}

// Ctx is a context of 30 s that the test's cleanup cancels.
func (r *Rig) Ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	r.T.Cleanup(cancel)
	return ctx
}

// JournalDump renders the journal of a stopped thatch, with the host's directory written
// $DIR so runs in different temporary folders compare.
func (r *Rig) JournalDump() string {
	return strings.ReplaceAll(JournalDump(r.T, r.DataDir), r.Host.Dir, "$DIR")
}

// JournalDump renders the journal of a stopped thatch.
func JournalDump(t *testing.T, dataDir string) string {
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

// AddHost adds a second, healthy host that plays extraction children.
func (r *Rig) AddHost(id string) (*fakehost.Host, error) {
	h, err := fakehost.New(r.NC, id, "v1")
	if err != nil {
		return nil, err
	}
	h.Dir, h.Model = r.T.TempDir(), true
	r.T.Cleanup(h.Close)
	return h, nil
}

// ReminderTo waits for the session-start reminder prompt thatch sent a session, and
// returns its text.
func (r *Rig) ReminderTo(session string) string {
	r.T.Helper()
	var text string
	testkit.WaitFor(r.T, WaitTimeout, "the reminder to "+session, func() bool {
		for _, c := range r.Host.CallsTo("session.prompt") {
			if c.Params["sessionID"] == session && c.Params["noReply"] == true {
				text, _ = c.Params["parts"].([]any)[0].(map[string]any)["text"].(string)
				return true
			}
		}
		return false
	})
	return text
}

// Memories lists the memories of a project, as the API gives them.
func (r *Rig) Memories(project string) []memory.Memory {
	r.T.Helper()
	var ms []memory.Memory
	if err := r.TryAPI("memories", map[string]any{"project": project}, &ms); err != nil {
		r.T.Fatal(err)
	}
	return ms
}

// Hygiene is the memory hygiene of a project, as the API gives it.
func (r *Rig) Hygiene(project string) memory.Hygiene {
	r.T.Helper()
	var h memory.Hygiene
	if err := r.TryAPI("memory.hygiene", map[string]any{"project": project}, &h); err != nil {
		r.T.Fatal(err)
	}
	return h
}
