package natsbus

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime"
)

// frozenProxy forwards TCP connections to target until freeze, after which nothing more
// passes either way, as with a broker that stopped answering.
type frozenProxy struct {
	l      net.Listener
	frozen chan struct{}
	once   sync.Once
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *frozenProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &frozenProxy{l: l, frozen: make(chan struct{})}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(out, in) }()
			go func() { defer wg.Done(); p.pipe(in, out) }()
		}
	}()
	return p
}

// pipe copies from src to dst until either closes; once frozen it forwards nothing.
func (p *frozenProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		select {
		case <-p.frozen:
			_, _ = io.Copy(io.Discard, src) // until the test closes the connections
			return
		default:
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (p *frozenProxy) freeze() { p.once.Do(func() { close(p.frozen) }) }

// TestConsumerStopsOnAStuckBroker: a stop does not wait for a broker that stopped
// answering (rule 12: thatch stops within 2 s, and the loop and the bridge stop after the
// consumer): the drain's wait is bounded.
func TestConsumerStopsOnAStuckBroker(t *testing.T) {
	ns := testkit.StartBroker(t, testkit.BrokerOptions{})
	proxy := startProxy(t, ns.Addr().String())
	log := testkit.Logger(t)
	nc, err := Connect(ConnectOptions{URL: "nats://" + proxy.l.Addr().String(), Name: "test"}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c := NewConsumer(js, StreamConfig{Stream: "OPENCODE_EVENTS", Consumer: "thatch", Prefix: "opencode"}, make(chan runtime.Delivery, 16), log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Started():
	case <-time.After(20 * time.Second):
		t.Fatal("the consumer did not start")
	}
	proxy.freeze()
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer did not stop")
	}
	if took := time.Since(began); took > time.Second {
		t.Fatalf("the consumer took %v to stop on a stuck broker, want about 300 ms", took)
	}
}
