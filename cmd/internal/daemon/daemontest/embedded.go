package daemontest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/internal/freeport"
)

// FreeAddr is a free loopback host:port at the time of the call.
func FreeAddr(t testing.TB) string {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}

// NewEmbedded is a rig whose broker is the one thatch embeds (THATCH_NATS_URL unset): the
// host's connection, and the test's, come and go with thatch, reconnecting by themselves
// a second later. The host says hello again when its connection comes back: a real
// host's plugin does so on reconnect. NS is nil: the broker is thatch's.
func NewEmbedded(t *testing.T, api string, methods ...string) *Rig {
	t.Helper()
	addr := FreeAddr(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	nc, err := nats.Connect("nats://"+addr, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		// A second, as a host's client might wait: thatch is back before its hosts are.
		nats.ReconnectWait(time.Second), nats.ReconnectJitter(0, 0),
		// The embedded broker's token (protocol §7), once thatch created it.
		nats.TokenHandler(func() string {
			tok, _ := os.ReadFile(filepath.Join(dataDir, natsbus.TokenFile))
			return strings.TrimSpace(string(tok))
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	h, err := fakehost.New(nc, "h1", api, methods...)
	if err != nil {
		t.Fatal(err)
	}
	h.Dir = t.TempDir()
	h.HelloOnReconnect()
	t.Cleanup(h.Close)
	cfg, err := daemon.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.NATSURL, cfg.NATSListen, cfg.HostTimeoutMS, cfg.InstallCommands = dataDir, "", addr, 2000, false
	return &Rig{T: t, URL: "nats://" + addr, DataDir: dataDir, NC: nc, Host: h, Cfg: cfg}
}
