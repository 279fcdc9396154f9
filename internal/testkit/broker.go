package testkit

import (
	"crypto/rand"
	"net"
	"strconv"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BrokerOptions describes a test's broker; the zero value is a broker with JetStream, its
// store in a fresh t.TempDir(), open to every client, on a free loopback port.
type BrokerOptions struct {
	// Listen is host:port; empty, or a port of 0 or -1, picks a free port on 127.0.0.1
	// (or on the host given). A fixed port lets a test start a broker again where
	// the last one listened.
	Listen string
	// StoreDir is JetStream's store (nats-server adds "jetstream" below it); empty is a
	// fresh t.TempDir(). Give the same folder again to start a broker on the same store.
	StoreDir string
	// Token, when set, is required of every client, in-process ones included.
	Token string
	// NoJetStream starts a broker of core NATS only.
	NoJetStream bool
	// MaxPayload bounds one message; zero is 8 MiB, the embedded broker's own bound (it
	// lets the stream, not the server, refuse an oversized event).
	MaxPayload int32
	// MaxStore bounds JetStream's storage; zero leaves it to nats-server.
	MaxStore int64
	// ConfigFile, when set, is a nats-server configuration file (its accounts, users and
	// permissions) the broker starts from; the fields above apply over it, the store stays
	// in the test's folders, and a max_payload it sets is kept when MaxPayload is zero.
	ConfigFile string
}

// Broker starts a broker with JetStream and a fresh token, its store in t.TempDir(), on a
// free loopback port, as thatch's embedded broker runs; the test's cleanup shuts it down.
// It returns the server, its client URL and the token.
func Broker(t testing.TB) (ns *server.Server, url, token string) {
	t.Helper()
	token = rand.Text()
	ns = StartBroker(t, BrokerOptions{Token: token})
	return ns, ns.ClientURL(), token
}

// StartBroker starts the broker o describes with nats-server's own test setup
// (NATS_LOGGING=debug shows its log), and shuts it down in the test's cleanup.
func StartBroker(t testing.TB, o BrokerOptions) *server.Server {
	t.Helper()
	opts := natstest.DefaultTestOptions
	if o.ConfigFile != "" {
		loaded, err := server.ProcessConfigFile(o.ConfigFile)
		if err != nil {
			t.Fatalf("broker configuration %s: %v", o.ConfigFile, err)
		}
		opts = *loaded
		opts.Host, opts.NoSigs = natstest.DefaultTestOptions.Host, true
	}
	opts.Port = server.RANDOM_PORT
	if o.Listen != "" {
		host, port, err := net.SplitHostPort(o.Listen)
		if err != nil {
			t.Fatalf("broker listen address %q: %v", o.Listen, err)
		}
		if opts.Port, err = strconv.Atoi(port); err != nil {
			t.Fatalf("broker listen address %q: the port is not a number", o.Listen)
		}
		if opts.Port == 0 {
			opts.Port = server.RANDOM_PORT
		}
		if host != "" {
			opts.Host = host
		}
	}
	opts.JetStream = !o.NoJetStream
	if opts.JetStream {
		opts.StoreDir = o.StoreDir
		if opts.StoreDir == "" {
			opts.StoreDir = t.TempDir()
		}
		opts.JetStreamMaxStore = o.MaxStore
	}
	if o.Token != "" {
		opts.Authorization = o.Token
	}
	if o.MaxPayload != 0 {
		opts.MaxPayload = o.MaxPayload
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = 8 << 20
	}
	ns := natstest.RunServer(&opts)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// Connect connects to the broker at url over the network, presenting token when it is
// not empty, and returns the connection and its JetStream; the test's cleanup closes it.
// opts come after the kit's own (the test's name as the connection's, and the token).
func Connect(t testing.TB, url, token string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	all := []nats.Option{nats.Name(t.Name())}
	if token != "" {
		all = append(all, nats.Token(token))
	}
	nc, err := nats.Connect(url, append(all, opts...)...)
	if err != nil {
		t.Fatalf("connect to the test broker at %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("JetStream of the test broker: %v", err)
	}
	return nc, js
}
