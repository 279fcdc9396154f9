package natsbus

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime"
)

// TestConsumerResumesAfterJetStreamRestarts: JetStream disabled and enabled again in the
// process (what the JetStream watch does after a store write error) loses the durable
// consumer's pull without a word, and when the store lost the stream (the write error hit
// a stream just created again), the consumer too: its pulls go unanswered. The consumer
// notices, sets the stream and itself up again, and the next event is delivered, from the
// stream it came back with (the new one, counting from 1, when the store lost it).
func TestConsumerResumesAfterJetStreamRestarts(t *testing.T) {
	for _, lost := range []bool{false, true} {
		name := "store kept"
		if lost {
			name = "store lost"
		}
		t.Run(name, func(t *testing.T) { consumerAfterJetStreamRestart(t, lost) })
	}
}

func consumerAfterJetStreamRestart(t *testing.T, storeLost bool) {
	dir := filepath.Join(t.TempDir(), "broker")
	ns := testkit.StartBroker(t, testkit.BrokerOptions{StoreDir: dir})
	log := testkit.Logger(t)
	nc, err := Connect(ConnectOptions{Embedded: ns, Name: "test"}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := StreamConfig{Stream: "OPENCODE_EVENTS", Consumer: "thatch", Prefix: "opencode"}
	out := make(chan runtime.Delivery, 16)
	c := NewConsumer(js, cfg, out, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
	<-c.Started()
	publish := func(id string) {
		t.Helper()
		pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := PublishEvent(pctx, js, "opencode.h1.event.session.idle", []byte(`{"id":"`+id+`"}`), id, ""); err != nil {
			t.Fatal(err)
		}
	}
	receive := func(id string) runtime.Delivery {
		t.Helper()
		for {
			select {
			case d := <-out:
				_ = d.Ack()
				if string(d.Data) == `{"id":"`+id+`"}` {
					return d
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s was not delivered", id)
			}
		}
	}
	publish("e1")
	first := receive("e1")

	jcfg := *ns.JetStreamConfig()
	jcfg.StoreDir = filepath.Dir(jcfg.StoreDir) // EnableJetStream adds "jetstream"
	if err := ns.ShutdownJetStream(); err != nil {
		t.Fatal(err)
	}
	if storeLost {
		if err := os.RemoveAll(filepath.Join(jcfg.StoreDir, server.JetStreamStoreDir)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ns.EnableJetStream(&jcfg); err != nil {
		t.Fatal(err)
	}
	if filepath.Base(ns.JetStreamConfig().StoreDir) != server.JetStreamStoreDir {
		t.Fatalf("JetStream came back in %s", ns.JetStreamConfig().StoreDir)
	}
	publish("e2") // retried until the stream exists again
	second := receive("e2")
	switch {
	case !storeLost && (second.Stream != first.Stream || second.StreamSeq != first.StreamSeq+1):
		t.Fatalf("after JetStream came back: stream %q seq %d, want the same stream %q at %d",
			second.Stream, second.StreamSeq, first.Stream, first.StreamSeq+1)
	case storeLost && (second.Stream == first.Stream || second.StreamSeq != 1):
		t.Fatalf("after JetStream came back without its store: stream %q seq %d, want a new stream (not %q) at 1",
			second.Stream, second.StreamSeq, first.Stream)
	}
	if second.Published.IsZero() {
		t.Fatal("a delivery without the time the stream stored it")
	}
}

// A consumer deleted under a running thatch is created again at the journal's committed
// position: the next delivery is the first event after it, not a replay of the stream
// (issue 19). A position in another stream (the stream was created again) or none yet
// delivers the whole stream.
func TestConsumerRecreatedAtTheCommittedPosition(t *testing.T) {
	js := jetStream(t, 0)
	ctx := context.Background()
	log := testkit.Logger(t)
	var committedSeq atomic.Uint64
	var identity atomic.Value
	identity.Store("")
	cfg := StreamConfig{Stream: "OPENCODE_EVENTS", Consumer: "thatch", Prefix: "opencode",
		Committed: func(context.Context) (string, uint64, bool) {
			return identity.Load().(string), committedSeq.Load(), true
		}}
	out := make(chan runtime.Delivery, 64)
	c := NewConsumer(js, cfg, out, log)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
	<-c.Started()
	publish := func(id string) {
		t.Helper()
		if err := publishEvent(ctx, js, id, []byte(`{"id":"`+id+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	next := func() runtime.Delivery {
		t.Helper()
		select {
		case d := <-out:
			_ = d.Ack()
			committedSeq.Store(d.StreamSeq) // as the loop commits and acknowledges
			identity.Store(d.Stream)
			return d
		case <-time.After(30 * time.Second):
			t.Fatal("no delivery")
			return runtime.Delivery{}
		}
	}
	for i := range 5 {
		publish(fmt.Sprintf("e%d", i+1))
		if d := next(); d.StreamSeq != uint64(i+1) {
			t.Fatalf("delivery %d has stream seq %d", i+1, d.StreamSeq)
		}
	}
	if err := js.DeleteConsumer(ctx, cfg.Stream, cfg.Consumer); err != nil {
		t.Fatal(err)
	}
	publish("e6")
	// A replay of the stream would start at seq 1. Under -race, an event the old consumer
	// delivered and that was acknowledged comes again before e6 in about 1 run of 10 (the
	// cause is not pinned down; the loop skips it as applied), so what counts is that seq 1
	// never comes again and e6 does.
	for d := next(); d.StreamSeq != 6; d = next() {
		if d.StreamSeq == 1 || d.StreamSeq > 6 {
			t.Fatalf("after the consumer was deleted, a delivery of stream seq %d before seq 6 (a replay from the start)", d.StreamSeq)
		}
	}

	// The unit: EnsureConsumer's start for each kind of committed position.
	s, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		stream  string
		seq     uint64
		ok      bool
		pending uint64
	}{
		{"this stream's position", StreamIdentity(s), 4, true, 2},
		{"another stream's position", "2020-01-01T00:00:00Z", 4, true, 6},
		{"no position yet", "", 0, false, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.Consumer = "probe"
			c.Committed = func(context.Context) (string, uint64, bool) { return tc.stream, tc.seq, tc.ok }
			cons, err := EnsureConsumer(ctx, s, c, false, log)
			if err != nil {
				t.Fatal(err)
			}
			defer js.DeleteConsumer(ctx, c.Stream, c.Consumer)
			info, err := cons.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.NumPending != tc.pending {
				t.Fatalf("a consumer created with %s has %d messages pending, want %d", tc.name, info.NumPending, tc.pending)
			}
		})
	}
}
