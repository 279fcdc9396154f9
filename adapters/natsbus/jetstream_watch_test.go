package natsbus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// eventually polls cond until it holds, failing after a generous deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestJetStreamWatchBringsJetStreamBack: when nats-server disables JetStream (as it does
// after a store write error: ShutdownJetStream), the watch reports it, keeps trying, and
// once it can, enables it again: publishes to the stream succeed and the error clears.
func TestJetStreamWatchBringsJetStreamBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "broker")
	ns, err := StartEmbedded("127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	nc, err := Connect(ConnectOptions{Embedded: ns, Name: "test"}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := StreamConfig{Stream: "OPENCODE_EVENTS", Consumer: "thatch", Prefix: "opencode"}
	if _, err := EnsureStream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	publish := func() error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(pctx, "opencode.h1.event.session.idle", []byte(`{}`))
		return err
	}
	if err := publish(); err != nil {
		t.Fatal(err)
	}

	w, err := NewJetStreamWatch(ns, log)
	if err != nil {
		t.Fatal(err)
	}
	if w.Config.StoreDir != filepath.Clean(dir) {
		t.Fatalf("the watch would enable JetStream in %s, not %s", w.Config.StoreDir, dir)
	}
	w.Every = 20 * time.Millisecond
	// Attempts fail while blocked, as they would while the disk is still full.
	var blocked atomic.Bool
	var attempts atomic.Int64
	blocked.Store(true)
	w.enable = func(c *server.JetStreamConfig) error {
		attempts.Add(1)
		if blocked.Load() {
			return errors.New("no space left on device")
		}
		return ns.EnableJetStream(c)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
	})
	if w.Err() != "" {
		t.Fatalf("error before any trouble: %s", w.Err())
	}

	// What nats-server does on a store write error (handleOutOfSpace, a permission error).
	if err := ns.ShutdownJetStream(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the watch to report JetStream disabled", func() bool { return w.Err() != "" })
	if e := w.Err(); !strings.Contains(e, "disabled") || !strings.Contains(e, "free disk space in "+filepath.Join(dir, "jetstream")) {
		t.Fatalf("error %q does not say what is wrong and what to do", e)
	}
	eventually(t, "attempts to bring JetStream back", func() bool { return attempts.Load() >= 2 })
	// The attempts found the disk full: the error says so first, naming the folder.
	if e := w.Err(); !strings.HasPrefix(e, "disk full: free space in "+filepath.Join(dir, "jetstream")+": ") {
		t.Fatalf("error %q does not begin with the full disk", e)
	}
	if err := publish(); err == nil {
		t.Fatal("a publish succeeded while JetStream was disabled")
	}
	if w.Err() == "" || ns.JetStreamEnabled() {
		t.Fatal("the error cleared while attempts fail")
	}

	blocked.Store(false)
	eventually(t, "the error to clear", func() bool { return w.Err() == "" })
	if !ns.JetStreamEnabled() {
		t.Fatal("the error cleared but JetStream is disabled")
	}
	eventually(t, "a publish to succeed again", func() bool { return publish() == nil })
	st, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n < 2 {
		t.Fatalf("the stream holds %d messages after recovery: the message published before the outage is lost", n)
	}
	if got := ns.JetStreamConfig().StoreDir; got != filepath.Join(dir, "jetstream") {
		t.Fatalf("JetStream came back in %s, not in %s", got, filepath.Join(dir, "jetstream"))
	}
}

// TestJetStreamWatchFullDisk fills a real disk under the embedded broker. It needs a
// small filesystem of its own: it mounts a 24 MiB tmpfs (as root, as CI runs), or uses the
// one THATCH_TEST_SMALL_FS names, and is skipped, saying why, when it can do neither.
func TestJetStreamWatchFullDisk(t *testing.T) {
	fs := os.Getenv("THATCH_TEST_SMALL_FS")
	if fs == "" {
		fs = t.TempDir()
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", fs).CombinedOutput(); err != nil {
			t.Skipf("cannot mount a 24 MiB tmpfs to fill (it needs root, as CI has; or name one in THATCH_TEST_SMALL_FS): %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", "-l", fs).Run() })
	}
	dir, err := os.MkdirTemp(fs, "broker-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ns, err := StartEmbedded("127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	nc, err := Connect(ConnectOptions{Embedded: ns, Name: "test"}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := EnsureStream(ctx, js, StreamConfig{Stream: "OPENCODE_EVENTS", Consumer: "thatch", Prefix: "opencode"}); err != nil {
		t.Fatal(err)
	}
	w, err := NewJetStreamWatch(ns, log)
	if err != nil {
		t.Fatal(err)
	}
	w.Every = 50 * time.Millisecond
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { cancel(); <-done })

	publish := func() error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(pctx, "opencode.h1.event.tool", make([]byte, 32<<10))
		return err
	}
	// Fill the disk, then publish until the store fails.
	filler := filepath.Join(fs, filepath.Base(dir)+".filler")
	t.Cleanup(func() { os.Remove(filler) })
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 64<<10)); err != nil {
			break
		}
	}
	f.Close()
	failed := false
	for i := 0; i < 1000 && !failed; i++ {
		failed = publish() != nil
	}
	if !failed {
		t.Fatal("publishes kept succeeding on a full disk")
	}
	eventually(t, "the watch to report the store error", func() bool { return w.Err() != "" })
	t.Logf("reported: %s", w.Err())
	if e := w.Err(); !strings.HasPrefix(e, "disk full: free space in "+filepath.Join(dir, "jetstream")+": ") {
		t.Errorf("error %q does not begin with the full disk", e)
	}
	if err := publish(); err == nil {
		t.Fatal("a publish succeeded while the store failed")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the error to clear", func() bool { return w.Err() == "" })
	eventually(t, "a publish to succeed again", func() bool { return publish() == nil })
}

// TestJetStreamWatchNamesAFullDisk: a store error or a probe write that says ENOSPC makes
// the watch's error begin with the full disk and the folder to free; another problem does
// not.
func TestJetStreamWatchNamesAFullDisk(t *testing.T) {
	w := &JetStreamWatch{Config: server.JetStreamConfig{StoreDir: "/data/nats"}}
	want := "disk full: free space in /data/nats/jetstream: the embedded broker cannot store events: "
	for _, tc := range []struct {
		problem string
		attempt error
		full    bool
	}{
		{problem: "JetStream stream '$G > S' write error: write /data/nats/jetstream/$G/streams/S/msgs/1.blk: no space left on device", full: true},
		{problem: "JetStream is disabled", attempt: fmt.Errorf("write to the store: %w", &os.PathError{Op: "write", Path: "/data/nats/.thatch-probe-1", Err: syscall.ENOSPC}), full: true},
		{problem: "JetStream is disabled", attempt: fmt.Errorf("write to the store: %w", &os.PathError{Op: "write", Path: "/data/nats/.thatch-probe-1", Err: syscall.EACCES})},
		{problem: "JetStream stream '$G > S' write error: permission denied"},
	} {
		got := w.describe(tc.problem, tc.attempt)
		if strings.HasPrefix(got, want) != tc.full || !strings.Contains(got, tc.problem) {
			t.Errorf("describe(%q, %v) = %q; full disk: %v", tc.problem, tc.attempt, got, tc.full)
		}
	}
}
