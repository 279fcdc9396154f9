package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/thatch-dev/thatch/internal/backoff"
)

// JetStreamWatch keeps the embedded broker's JetStream alive. nats-server does not heal
// its store by itself: a store write error (a full disk, a permission error) either
// disables JetStream (ShutdownJetStream: "JetStream out of resources, will be DISABLED")
// or leaves the stream with a sticky write error that fails every later publish, and only
// a restart cleared either. The watch notices both, says so once (Err, and the log, with
// what to do), and once the store accepts writes again restarts JetStream in the process
// with the configuration it started with, which recovers the streams from disk.
type JetStreamWatch struct {
	Server *server.Server
	// Config is what EnableJetStream gets: the store's parent folder and the limits the
	// server started with. NewJetStreamWatch fills it.
	Config server.JetStreamConfig
	Every  time.Duration // how often to look; 1 s by default
	Log    *slog.Logger

	mu  sync.Mutex
	err string

	// enable re-enables JetStream; tests replace it.
	enable func(*server.JetStreamConfig) error
}

// MaxJetStreamBackoff bounds the wait between two attempts to bring JetStream back.
const MaxJetStreamBackoff = 5 * time.Second

// NewJetStreamWatch returns a watch of ns, an embedded server whose JetStream runs (call
// it after StartBroker): it records ns's JetStream configuration to restart with.
func NewJetStreamWatch(ns *server.Server, log *slog.Logger) (*JetStreamWatch, error) {
	cfg := ns.JetStreamConfig()
	if cfg == nil {
		return nil, errors.New("watch JetStream: the embedded broker runs no JetStream")
	}
	c := *cfg
	// EnableJetStream puts its "jetstream" folder under the folder it is given.
	if filepath.Base(c.StoreDir) == server.JetStreamStoreDir {
		c.StoreDir = filepath.Dir(c.StoreDir)
	}
	return &JetStreamWatch{Server: ns, Config: c, Every: time.Second, Log: log}, nil
}

// Err is the embedded JetStream's current problem, "" while it works. It is safe to call
// from any goroutine, also on a nil watch (no embedded broker).
func (w *JetStreamWatch) Err() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *JetStreamWatch) setErr(s string) {
	w.mu.Lock()
	w.err = s
	w.mu.Unlock()
}

// storeDir is JetStream's own folder, where it writes.
func (w *JetStreamWatch) storeDir() string {
	return filepath.Join(w.Config.StoreDir, server.JetStreamStoreDir)
}

func (w *JetStreamWatch) advice() string {
	return "free disk space in " + w.storeDir() + " (and check that thatch may write there): thatch brings JetStream back by itself once it can"
}

// describe is what Err says of problem p: a full disk first, as "disk full: free space
// in <store>", when the store's error or the last attempt to write to it says so (a
// stream's write error names ENOSPC; a JetStream that nats-server disabled says nothing,
// and the watch's own probe write finds out).
func (w *JetStreamWatch) describe(p string, attempt error) string {
	full := diskFull(p) || diskFull(attempt)
	s := p + "; " + w.advice()
	if attempt != nil {
		s += " (last attempt: " + attempt.Error() + ")"
	}
	if full {
		return "disk full: free space in " + w.storeDir() + ": the embedded broker cannot store events: " + s
	}
	return s
}

// diskFull says whether v, an error or a message, is a write that found the disk full.
func diskFull(v any) bool {
	switch v := v.(type) {
	case error:
		return v != nil && (errors.Is(v, syscall.ENOSPC) || errors.Is(v, syscall.EDQUOT) || diskFull(v.Error()))
	case string:
		return strings.Contains(v, syscall.ENOSPC.Error()) || strings.Contains(v, syscall.EDQUOT.Error())
	}
	return false
}

// Run watches until ctx ends.
func (w *JetStreamWatch) Run(ctx context.Context) error {
	every := w.Every
	if every <= 0 {
		every = time.Second
	}
	if w.Log == nil {
		w.Log = slog.Default()
	}
	enable := w.enable
	if enable == nil {
		enable = w.Server.EnableJetStream
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var (
		problem  string // what is wrong, "" while JetStream works
		retry    = backoff.Backoff{First: every, Max: MaxJetStreamBackoff}
		next     time.Time // when to try again
		attempts int
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !w.Server.Running() {
			continue // shutting down: nothing to heal
		}
		now := time.Now()
		p, writeErr := w.check()
		if p == "" {
			if problem != "" {
				w.Log.Info("embedded JetStream works again", "store", w.storeDir(), "attempts", attempts)
				w.setErr("")
			}
			problem, next, attempts = "", time.Time{}, 0
			retry.Reset()
			continue
		}
		if problem == "" {
			problem, next = p, now.Add(every) // the first attempt a tick later: the server may still be shutting JetStream down
			w.setErr(w.describe(p, nil))
			w.Log.Error("embedded JetStream is down: events cannot be published or consumed",
				"problem", w.describe(p, nil), "what_to_do", w.advice())
		}
		if now.Before(next) {
			continue
		}
		attempts++
		err := w.restart(writeErr, enable)
		if err != nil {
			w.setErr(w.describe(p, err))
			next = now.Add(retry.Next())
			w.Log.Debug("embedded JetStream still down", "err", err, "attempt", attempts, "next_in", next.Sub(now))
			continue
		}
		// Whether it works is the next tick's check.
		next = now.Add(retry.Next())
	}
}

// check returns what is wrong with JetStream, "" when nothing is; writeErr says a stream
// holds a write error while JetStream still runs.
func (w *JetStreamWatch) check() (problem string, writeErr bool) {
	if !w.Server.JetStreamEnabled() {
		return "JetStream is disabled (nats-server turns it off after a store error such as a full disk)", false
	}
	h := w.Server.Healthz(&server.HealthzOptions{Details: true})
	var errs []string
	for _, e := range h.Errors {
		if e.Type == server.HealthzErrorStream && strings.Contains(e.Error, "write error") {
			errs = append(errs, e.Error)
		}
	}
	if len(errs) > 0 {
		return strings.Join(errs, "; "), true
	}
	return "", false
}

// restart brings JetStream back once the store accepts a write: a store holding a write
// error is closed first (nats-server keeps that error until its store is reopened).
func (w *JetStreamWatch) restart(writeErr bool, enable func(*server.JetStreamConfig) error) error {
	if err := w.probe(); err != nil {
		return err
	}
	if writeErr {
		if err := w.Server.ShutdownJetStream(); err != nil {
			return fmt.Errorf("stop JetStream: %w", err)
		}
	} else if w.Server.JetStreamConfig() != nil {
		return errors.New("JetStream is still shutting down")
	}
	cfg := w.Config // EnableJetStream changes what it is given
	if err := enable(&cfg); err != nil {
		return fmt.Errorf("enable JetStream: %w", err)
	}
	return nil
}

// probeSize is what the store must accept before JetStream is restarted: room for a few
// messages and their index, so a restart on a disk still full does not fail at once.
const probeSize = 1 << 20

// probe writes and syncs probeSize bytes next to JetStream's folder (not in it: nats-server
// takes each entry there for an account), then removes them.
func (w *JetStreamWatch) probe() error {
	dir := w.Config.StoreDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("the store folder: %w", err)
	}
	f, err := os.CreateTemp(dir, ".thatch-probe-*")
	if err != nil {
		return fmt.Errorf("write to the store: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(make([]byte, probeSize))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write to the store: %w", err)
	}
	return nil
}
