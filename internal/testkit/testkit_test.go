package testkit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// fatalTB records what a test would fail with, instead of failing.
type fatalTB struct {
	testing.TB
	failed string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

// WaitFor returns once its condition holds, polling it again meanwhile.
func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	polls := 0
	WaitFor(t, time.Minute, "the third poll", func() bool { polls++; return polls == 3 })
	if polls != 3 {
		t.Fatalf("polled %d times, want 3", polls)
	}
	calls := 0
	WaitFor(t, time.Minute, "the second call", func() error {
		if calls++; calls < 2 {
			return errors.New("first call")
		}
		return nil
	})
	if calls != 2 {
		t.Fatalf("called %d times, want 2", calls)
	}
}

// A condition that never holds fails the test with what it waited for and, for an error
// condition, the last reason it gave.
func TestWaitForFailsWithWhatAndTheLastReason(t *testing.T) {
	f := &fatalTB{TB: t}
	WaitFor(f, 50*time.Millisecond, "the moon", func() bool { return false })
	if !strings.Contains(f.failed, "for the moon") {
		t.Fatalf("failed with %q, want it to name what it waited for", f.failed)
	}
	f = &fatalTB{TB: t}
	n := 0
	WaitFor(f, 50*time.Millisecond, "the sun", func() error { n++; return fmt.Errorf("reason %d", n) })
	if want := fmt.Sprintf("for the sun: reason %d", n); !strings.Contains(f.failed, want) || n < 2 {
		t.Fatalf("failed with %q after %d polls, want %q", f.failed, n, want)
	}
}

// Broker's broker requires its token and serves JetStream; the test's cleanup stops it.
func TestBroker(t *testing.T) {
	var stopped func() bool
	t.Run("broker", func(t *testing.T) {
		ns, url, token := Broker(t)
		stopped = func() bool { return !ns.Running() }
		if nc, err := nats.Connect(url); err == nil {
			nc.Close()
			t.Fatal("connected without the token")
		}
		_, js := Connect(t, url, token)
		if _, err := js.AccountInfo(t.Context()); err != nil {
			t.Fatalf("JetStream: %v", err)
		}
	})
	if !stopped() {
		t.Fatal("the broker runs after its test ended")
	}
	ns := StartBroker(t, BrokerOptions{NoJetStream: true})
	_, js := Connect(t, ns.ClientURL(), "")
	if _, err := js.AccountInfo(t.Context()); err == nil {
		t.Fatal("JetStream answers on a broker started without it")
	}
}

// A broker started from a configuration file has its users; the kit's options apply
// over it.
func TestBrokerFromConfigFile(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "broker.conf")
	if err := os.WriteFile(conf, []byte("max_payload: 1024\nauthorization { users: [ {user: a, password: pw} ] }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := StartBroker(t, BrokerOptions{ConfigFile: conf})
	if nc, err := nats.Connect(ns.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("connected without the configuration's user")
	}
	nc, js := Connect(t, ns.ClientURL(), "", nats.UserInfo("a", "pw"))
	if _, err := js.AccountInfo(t.Context()); err != nil {
		t.Fatalf("JetStream: %v", err)
	}
	if got := nc.MaxPayload(); got != 1024 {
		t.Fatalf("max payload %d, want the configuration's 1024", got)
	}
}

// outputTB is a test whose output and cleanups the test holds.
type outputTB struct {
	testing.TB
	out      strings.Builder
	cleanups []func()
}

func (o *outputTB) Helper()           {}
func (o *outputTB) Output() io.Writer { return &o.out }
func (o *outputTB) Cleanup(f func())  { o.cleanups = append(o.cleanups, f) }

// The logger writes into the test's output until the test's cleanup reaches it; later,
// when the testing package would panic at a write into a finished test, it drops what it
// is given.
func TestLoggerStopsAtCleanup(t *testing.T) {
	o := &outputTB{TB: t}
	log := Logger(o)
	log.Debug("during the test", "n", 1)
	if !strings.Contains(o.out.String(), `msg="during the test" n=1`) {
		t.Fatalf("output %q, want the record", o.out.String())
	}
	for _, f := range o.cleanups {
		f()
	}
	before := o.out.Len()
	log.Info("after the test")
	if o.out.Len() != before {
		t.Fatalf("written after the cleanup: %q", o.out.String()[before:])
	}
}
