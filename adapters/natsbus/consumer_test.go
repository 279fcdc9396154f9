package natsbus

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

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
