package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/cmd/internal/daemon/daemontest"
	"github.com/thatch-dev/thatch/internal/freeport"
)

// natsServerBinary builds nats-server from the module thatch already depends on.
func natsServerBinary(t *testing.T) string {
	return goBuild(t, "nats-server", "github.com/nats-io/nats-server/v2")
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBrokerRestarts: thatch uses a separate nats-server process (file store) by URL; the
// broker is stopped and started twice while a host publishes. thatch reconnects by itself
// and nothing is lost.
func TestBrokerRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a nats-server process: skipped in -short mode")
	}
	bin := natsServerBinary(t)
	port, store := freePort(t), t.TempDir()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var broker *exec.Cmd
	startBroker := func() {
		broker = exec.Command(bin, "-js", "-sd", store, "-a", "127.0.0.1", "-p", fmt.Sprint(port))
		must(t, broker.Start())
		waitFor(t, "the broker to listen", func() bool {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
	stopBroker := func() {
		must(t, broker.Process.Signal(syscall.SIGTERM))
		_ = broker.Wait()
	}
	startBroker()
	t.Cleanup(func() { _ = broker.Process.Kill(); _ = broker.Wait() })

	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	must(t, err)
	t.Cleanup(nc.Close)
	host, err := fakehost.New(nc, "h1", "v1", "session.prompt")
	must(t, err)
	host.Dir = t.TempDir()
	t.Cleanup(host.Close)
	r := wrapRig(t, &daemontest.Rig{T: t, URL: url, DataDir: filepath.Join(t.TempDir(), "data"), NC: nc, Host: host})
	r.cfg, err = daemon.LoadConfig()
	must(t, err)
	r.cfg.DataDir, r.cfg.NATSURL, r.cfg.InstallCommands, r.cfg.StrandSweep, r.cfg.HostTimeoutMS = r.dataDir, url, false, false, 2000
	r.cfg.HTTPListen = freeAddr(t) // the operator's /readyz follows the broker
	r.start()
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + r.cfg.HTTPListen + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const sessions, calls = 10, 30
	published := make(chan error, 1)
	go func() {
		if err := host.Hello(ctx, "b1"); err != nil {
			published <- err
			return
		}
		for s := range sessions {
			sid := fmt.Sprintf("ses_%02d", s)
			if err := host.Created(ctx, sid, "", "t", host.Dir); err != nil {
				published <- err
				return
			}
			for c := range calls {
				// PublishRaw retries until the stream acknowledges: a host's duty.
				if err := host.ToolExecuted(ctx, sid, fmt.Sprintf("%s_c%02d", sid, c), "bash", strings.Repeat("x", 100)); err != nil {
					published <- err
					return
				}
			}
		}
		published <- nil
	}()
	for range 2 {
		waitFor(t, "some events to be applied", func() bool {
			var s struct{ Applied int64 }
			return r.tryAPI("status", nil, &s) == nil && s.Applied > 0
		})
		stopBroker()
		// While the broker is down, status cannot travel over it: the status file reports the outage.
		waitFor(t, "the status file to report the outage", func() bool {
			data, err := os.ReadFile(filepath.Join(r.dataDir, daemon.StatusFile))
			var f daemon.SavedStatus
			return err == nil && json.Unmarshal(data, &f) == nil && !f.Status.Consuming && time.Since(f.At) < 3*time.Second
		})
		if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "broker unreachable") {
			t.Fatalf("/readyz with the broker down: %d %q", code, body)
		}
		startBroker()
		waitFor(t, "/readyz to say ready again", func() bool { code, _ := readyz(); return code == http.StatusOK })
	}
	must(t, <-published)
	total := int64(1 + sessions*(1+calls))
	waitFor(t, "every event to be applied after two broker restarts", func() bool {
		var s struct {
			Applied   int64
			Consuming bool
		}
		return r.tryAPI("status", nil, &s) == nil && s.Applied == total && s.Consuming
	})
	for s := range sessions {
		if got := len(r.entries(fmt.Sprintf("ses_%02d", s))); got != calls {
			t.Fatalf("ses_%02d has %d entries, want %d", s, got, calls)
		}
	}
}
