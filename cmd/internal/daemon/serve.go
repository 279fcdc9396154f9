package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	oklog "github.com/oklog/run"

	"github.com/thatch-dev/thatch/adapters/host"
	"github.com/thatch-dev/thatch/adapters/memories"
	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/adapters/opencode"
	"github.com/thatch-dev/thatch/adapters/team"
	"github.com/thatch-dev/thatch/adapters/web"
	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Serve runs the daemon until ctx ends. Stopping it never deletes or interrupts a host
// session: it stops pulling, commits and acknowledges the batch in progress, drains the
// connection and closes the journal.
func Serve(ctx context.Context, c Config, log *slog.Logger) error {
	return ServeWith(ctx, c, log, nil)
}

// ServeWith is Serve with a hook that adjusts the loop before it runs (benchmarks observe
// commits through it).
func ServeWith(ctx context.Context, c Config, log *slog.Logger, tune func(*runtime.Loop)) error {
	start := time.Now()
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data folder: %w", err)
	}
	if err := os.Chmod(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("make data folder private: %w", err)
	}
	unlock, err := lockDataDir(c.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	claudeHooks := false
	if home, err := os.UserHomeDir(); err == nil {
		if warn := claudeMissing(home, c); warn != "" {
			log.Warn(warn)
		}
		claudeHooks = claudeSetUp(home, c)
	}
	// A clean stop ends here, after every part and store is closed (defers run last to
	// first): the status file says so, and the log says how long the stop took.
	var stopBegan time.Time
	defer func() {
		if !stopBegan.IsZero() {
			markStopped(c.DataDir, log)
			log.Info("stopped", "took", time.Since(stopBegan).Round(time.Millisecond).String())
		}
	}()
	// The broker token exists from the first start, embedded broker or not, as §7 asks
	// (the web page no longer takes it: thatch ui gets a one-time link over the API).
	fileToken, fixed, err := natsbus.EnsureToken(c.TokenPath())
	if err != nil {
		return err
	}
	if fixed != "" {
		log.Warn(fixed)
	}
	if c.InstallCommands {
		if _, err := Install(c, log); err != nil {
			log.Warn("could not install the slash commands and the plugin; run thatch install to retry", "err", err)
		}
	}
	store, err := journal.Open(filepath.Join(c.DataDir, "thatch.db"))
	if err != nil {
		return err
	}
	defer store.Close()
	store.BeforeLoad = BoundLoadHeap
	memSvc := &memories.Service{InjectChars: c.MemoryInjectChars, Log: log.With("component", "memory"),
		ExtractedFrom: store.ExtractedFrom, Provenance: store.Provenance}
	memStore, err := memory.Open(filepath.Join(c.DataDir, "memories.db"), memory.Options{Redact: memSvc.Redact,
		StaleAfter: time.Duration(c.MemoryStaleDays) * 24 * time.Hour, Author: c.TeamAuthor})
	if err != nil {
		return err
	}
	defer memStore.Close()
	memSvc.Store = memStore

	var ns *server.Server
	var watch *natsbus.JetStreamWatch // the embedded broker's JetStream health
	// The token thatch presents: an external broker's, else the embedded broker's (§7).
	token := c.NATSToken
	var purgeApplied time.Duration
	if c.NATSURL == "" {
		token = cmp.Or(c.NATSToken, fileToken)
		// The store is encrypted at rest with a key of the data folder: nothing a host
		// published is readable in its files (an earlier, plain store is encrypted as the
		// broker recovers it), and events thatch applied are purged from the stream.
		storeDir := filepath.Join(c.DataDir, "nats")
		storeKey, fixed, err := natsbus.EnsureStoreKey(filepath.Join(c.DataDir, natsbus.StoreKeyFile), storeDir)
		if err != nil {
			return err
		}
		if fixed != "" {
			log.Warn(fixed)
		}
		purgeApplied = time.Duration(c.StreamPurgeMS) * time.Millisecond
		ns, err = natsbus.StartBroker(natsbus.BrokerConfig{Listen: c.NATSListen, Dir: storeDir,
			Token: token, TLS: c.tlsFiles(), StoreKey: storeKey})
		if err != nil {
			return err
		}
		defer func() {
			ns.Shutdown()
			ns.WaitForShutdown()
		}()
		log.Info("embedded broker listening", "url", ns.ClientURL(), "token", c.TokenSource(), "tls", c.NATSTLSCert != "")
		if watch, err = natsbus.NewJetStreamWatch(ns, log.With("component", "broker")); err != nil {
			return err
		}
	}
	clientTLS, err := c.ClientTLS()
	if err != nil {
		return err
	}
	nc, err := natsbus.Connect(natsbus.ConnectOptions{URL: c.NATSURL, Embedded: ns, CredsFile: c.NATSCreds,
		Token: token, TLS: clientTLS, Name: "thatch"}, log.With("component", "nats"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}

	// The operator's metrics (§8) count every host call and time every commit and tool
	// call, whether or not the endpoint serves them: counting costs next to nothing.
	var srv *natsbus.Server // set below; the metrics read status through it
	metrics := web.NewMetrics(web.Source{
		Status:        func(ctx context.Context) (runtime.StatusView, error) { return srv.Status(ctx) },
		Snapshot:      func() *runtime.Snapshot { return srv.Loop.Snapshot() },
		StreamLastSeq: func(ctx context.Context) (uint64, error) { return srv.StreamLastSeq(ctx) },
		Memories:      memStore, Log: log.With("component", "metrics"),
	})
	caller := metrics.Caller(&host.Client{NC: nc, Prefix: c.SubjectPrefix, Timeout: c.HostTimeout(), Log: log.With("component", "host")})
	loop := runtime.NewLoop(store, memories.Injecting{Caller: caller, Memories: memSvc}, log.With("component", "runtime"))
	loop.Rules, loop.Prefix, loop.MaxBatch, loop.WaitApplied, loop.CommitWait = c.Rules(), c.SubjectPrefix, c.BatchMax, c.HostTimeout(), c.HostTimeout()
	loop.CommitTook = metrics.CommitTook
	if tune != nil {
		tune(loop)
	}
	consumer := natsbus.NewConsumer(js, natsbus.StreamConfig{Stream: c.Stream, Consumer: c.Consumer, Prefix: c.SubjectPrefix,
		MaxBytes: c.StreamMaxBytes, MaxMsgBytes: int32(c.StreamMaxMsgBytes), Log: log.With("component", "consumer"),
		PurgeApplied: purgeApplied,
		Committed: func(ctx context.Context) (string, uint64, bool) {
			select { // the journal is loaded: its position is known
			case <-loop.Ready():
			case <-ctx.Done():
				return "", 0, false
			}
			stream, seq := loop.Snapshot().Position()
			return stream, seq, true
		}},
		loop.Deliveries(), log.With("component", "consumer"))
	sweeper := &runtime.Sweeper{Loop: loop, Caller: caller, Every: time.Duration(c.StrandSweepMS) * time.Millisecond,
		Strand: bool(c.StrandSweep), Exists: dirExists, Log: log.With("component", "sweep"),
		Also: memorySweep(memSvc, c, log.With("component", "memory"))}
	var ocBridge *opencode.Bridge
	redactions := []*atomic.Int64{&memSvc.Redacted} // other parts' redactions, for status
	log.Info("hosts served", hostsLine(c, claudeHooks)...)
	if c.OpencodeURL != "" {
		ocBridge = newBridge(c, nc, js, log)
		if watch != nil {
			ocBridge.Broker = watch.Err
		}
		redactions = append(redactions, &ocBridge.Redacted)
	}
	srv = &natsbus.Server{ToolTook: metrics.ToolTook, Redactions: redactions, NC: nc, JS: js, Stream: c.Stream, Prefix: c.APIPrefix, Loop: loop, Consumer: consumer,
		Log: log.With("component", "api"), Sweep: sweepAPI(sweeper), Memories: memSvc, Costs: store.Costs, Extract: c.Rules(),
		DeadLetters: store.DeadLetterPage}
	if watch != nil {
		srv.Broker = watch
	}
	if ocBridge != nil {
		srv.Bridge = func() any { return ocBridge.BridgeStatus() }
	}
	// Team memory (§9): a connection of its own to the team's NATS (docs/team.md says why
	// not a leaf node of the local broker). Unset, nothing leaves the machine.
	var mates *team.Team
	if c.TeamURL != "" {
		teamTLS, err := c.TeamTLS()
		if err != nil {
			return err
		}
		mates = team.New(team.Config{URL: c.TeamURL, CredsFile: c.TeamCreds, Token: c.TeamToken, TLS: teamTLS, Author: c.TeamAuthor,
			Store: memStore, Log: log.With("component", "team"), Registerer: metrics.Registry})
		srv.Team, memSvc.Team = mates, mates
		log.Info("team memory on", "url", team.RedactURL(c.TeamURL), "author", c.TeamAuthor)
	}

	// The in-process bridge answers host calls before the outbox resumes (rule 12): the
	// calls a previous run left go out at once instead of finding no responder. A shim
	// address that cannot be bound fails the start here, naming its variable.
	if ocBridge != nil {
		if err := ocBridge.Start(); err != nil {
			return err
		}
		defer ocBridge.Close() // Run closes it too; Close is idempotent
	}

	// The operator's endpoint: a taken address fails the start here, naming its variable.
	var page *web.Server
	var pageLn net.Listener
	if c.HTTPOn() {
		if pageLn, err = web.Listen(c.HTTPListen, c.HTTPTLSCert, c.HTTPTLSKey); err != nil {
			return err
		}
		defer pageLn.Close()
		page = &web.Server{Listen: pageLn.Addr().String(), TLSCert: c.HTTPTLSCert, TLSKey: c.HTTPTLSKey,
			Loop: loop, Status: srv.Status, Journal: store, Memories: memStore, Sweep: sweeper.Sweep, Metrics: metrics,
			Log: log.With("component", "web"), Author: c.TeamAuthor}
		// thatch ui asks for the page's one-time link over the API, which the broker's
		// token guards: the token itself never goes into a link.
		pageURL := PageURL(pageLn.Addr().String(), c.HTTPTLSCert != "")
		srv.Login = func() (string, time.Time) {
			code, expires := page.NewLogin()
			return web.LoginURL(pageURL, code), expires
		}
		if mates != nil {
			page.Share = func(ctx context.Context, project string, shared bool) error {
				if err := memStore.Share(ctx, project, shared, time.Now()); err != nil {
					return err
				}
				mates.Wake()
				return nil
			}
		}
		// The open pages render again when opencode comes or goes, or the broker's store
		// fails or recovers: neither is in the loop's snapshot.
		page.Watch = func() string {
			var w strings.Builder
			if ocBridge != nil {
				b := ocBridge.BridgeStatus()
				fmt.Fprint(&w, b.Connected, b.Error)
			}
			if watch != nil {
				w.WriteString(watch.Err())
			}
			return w.String()
		}
	}

	// One owner of the parts (rule 12): the first part to end stops the others, in the
	// order they are added here, each waiting for the one before it: the signal watch, the
	// operator endpoint (unless THATCH_HTTP_LISTEN=off; live pages end at once, other
	// requests get 1 s), the sweeper, the broker watch (embedded broker only), the status
	// file, the API, the consumer (unapplied messages go back), the loop (the batch in
	// progress commits, calls in flight get StopGrace, then stay in the outbox), and the
	// opencode bridge last (when THATCH_OPENCODE_URL is set), so the loop's last calls still
	// reach opencode. A part that ends on its own ends thatch with its error.
	var g oklog.Group
	stopping := errors.New("stopping")
	signal := make(chan struct{})
	g.Add(func() error {
		select {
		case <-ctx.Done():
		case <-signal:
			return nil
		}
		stopBegan = time.Now()
		log.Info("stopping")
		return stopping
	}, func(error) { close(signal) })
	add := func(name string, fn func(context.Context) error) {
		pctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		g.Add(func() error {
			defer close(done)
			err := fn(pctx)
			switch {
			case pctx.Err() != nil && err == nil:
				return nil
			case err == nil:
				err = errors.New("ended unexpectedly")
			}
			return fmt.Errorf("%s: %w", name, err)
		}, func(error) {
			cancel()
			<-done
		})
	}
	if page != nil {
		add("operator endpoint (THATCH_HTTP_LISTEN)", func(ctx context.Context) error { return page.Run(ctx, pageLn) })
		log.Info("operator endpoint listening: /healthz, /readyz, /metrics; thatch ui prints the web page's link",
			"url", PageURL(pageLn.Addr().String(), c.HTTPTLSCert != ""))
	}
	add("sweeper", sweeper.Run)
	if watch != nil {
		add("broker watch", watch.Run)
	}
	var broker SavedStatus // where the CLI finds the embedded broker; never its token
	if ns != nil {
		broker.BrokerURL, broker.BrokerCert = ns.ClientURL(), c.NATSTLSCert
	}
	if page != nil {
		broker.PageURL = PageURL(pageLn.Addr().String(), c.HTTPTLSCert != "")
	}
	add("status file", func(ctx context.Context) error { return writeStatusFile(ctx, srv, c.DataDir, broker, log) })
	add("thatch API", func(ctx context.Context) error {
		select { // ready once the stream exists and the journal is loaded
		case <-consumer.Started():
		case <-ctx.Done():
			return nil
		}
		select {
		case <-loop.Ready():
		case <-ctx.Done():
			return nil
		}
		keepHeapFloor(HeapFloor) // after the load: the journal loads as it would without it
		if err := srv.Start(ctx); err != nil {
			return err
		}
		defer srv.Stop()
		log.Info("thatch ready", "version", runtime.Version, "data_dir", c.DataDir, "startup", time.Since(start).Round(time.Millisecond).String(),
			"heap_floor", heapFloorState())
		<-ctx.Done()
		return nil
	})
	if mates != nil {
		// The team unreachable is not an error (it reconnects forever); the store failing is.
		add("team memory (THATCH_TEAM_URL)", mates.Run)
	}
	add("consumer", consumer.Run)
	add("runtime loop", loop.Run)
	cc := newClaudeCodeHost(c, nc, js, log)
	add("claude code host", func(ctx context.Context) error {
		select { // the stream exists before the host publishes to it
		case <-consumer.Started():
		case <-ctx.Done():
			return nil
		}
		return cc.Run(ctx)
	})
	add("claude code hook spool", func(ctx context.Context) error {
		select { // the stream exists before the spool is published to it
		case <-consumer.Started():
		case <-ctx.Done():
			return nil
		}
		drainHookSpool(ctx, c, js, log)
		<-ctx.Done()
		return nil
	})
	if ocBridge != nil {
		add("opencode bridge", func(ctx context.Context) error {
			select { // the stream exists before the bridge publishes to it
			case <-consumer.Started():
			case <-ctx.Done():
				return nil
			}
			return ocBridge.Run(ctx)
		})
	}
	err = g.Run()
	if derr := nc.Drain(); derr != nil {
		log.Debug("drain", "err", derr)
	}
	if errors.Is(err, stopping) {
		return nil
	}
	log.Error("a part of thatch failed: stopping", "err", err)
	return err
}

// dirExists reports whether dir is a directory on thatch's filesystem: the sweeps' check
// of the directories sessions and branches live in.
func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

// memorySweep is the memory store's part of each journal sweep: the tool-call memo and the
// frozen texts live as long as session rows; branches are checked every time; the
// all-pairs duplicate pass, and the full-text index's merge after it, run when the store
// says it is due: a day after the last one (whichever process ran it), after an import, or
// never run yet.
func memorySweep(m *memories.Service, c Config, log *slog.Logger) func(context.Context) error {
	st := m.Store
	return func(ctx context.Context) error {
		now := time.Now()
		errPrune := st.Prune(ctx, now.Add(-time.Duration(c.RuntimeStateTTLMS)*time.Millisecond))
		orphaned, merged, errBranches := st.CheckBranches(ctx, dirExists, now)
		if orphaned+merged > 0 {
			log.Info("memories of deleted branches", "orphaned", orphaned, "merged", merged)
		}
		due, errPairs := st.DuplicatePassDue(ctx, now, 24*time.Hour)
		if due {
			var found int
			found, errPairs = st.FindDuplicates(ctx, now)
			if errPairs == nil {
				log.Info("duplicate pass over the memories", "new_pairs", found, "took", time.Since(now).Round(time.Millisecond).String())
				errPairs = st.MergeIndex(ctx)
			}
		}
		return errors.Join(errPrune, errBranches, errPairs)
	}
}

// lockFile is the file of the data folder whose lock thatch serve holds while it runs.
const lockFile = "thatch.lock"

// lockWait is how long a start waits for the data folder's lock before it says another
// thatch serve holds it: Running takes it shared for an instant, and a start must not
// fail for that.
const lockWait = time.Second

// lockDataDir takes the data folder for this process alone (rule 12): two daemons on one
// folder would share one journal, one broker store and one plugin shim. The kernel releases
// the lock when the process dies, however it dies.
func lockDataDir(dir string) (func(), error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the data folder: %w", err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // a CLI's Running holds it for an instant
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another thatch serve is running on the data folder %s: stop it, or give this one its own THATCH_DATA_DIR", dir)
		}
		return nil, fmt.Errorf("lock the data folder %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// Served tells whether a thatch serve ever ran on the data folder dir: its lock file is
// there.
func Served(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, lockFile))
	return err == nil
}

// Running tells whether a thatch serve runs on the data folder dir: whether it holds the
// folder's lock. It is known at once, where a broker that does not answer is known only
// after a timeout. The lock is tried shared and let go at once, and nothing is created:
// a folder without its lock file has never been served.
func Running(dir string) (bool, error) {
	f, err := os.Open(filepath.Join(dir, lockFile))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the lock of the data folder %s: %w", dir, err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the lock of the data folder %s: %w", dir, err)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false, nil
}

// sweepAPI answers the sweep method with one strand sweep.
func sweepAPI(w *runtime.Sweeper) func(context.Context, string, bool) (any, *runtime.HostError) {
	return func(ctx context.Context, hostID string, dryRun bool) (any, *runtime.HostError) {
		res, err := w.Sweep(ctx, hostID, dryRun)
		switch {
		case errors.Is(err, runtime.ErrSweepDisabled):
			return nil, &runtime.HostError{Name: protocol.SweepDisabled, Message: err.Error()}
		case err != nil && len(res.Actions) == 0:
			return nil, &runtime.HostError{Name: protocol.SweepFailed, Message: err.Error()}
		}
		return res, nil
	}
}
