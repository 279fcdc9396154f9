package natsbus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jetStream starts a nats-server with JetStream for one test, with the embedded broker's
// 8 MiB max_payload: the stream, not the server, must refuse what is too large.
// maxStore, when not zero, is the server's JetStream storage limit.
func jetStream(t *testing.T, maxStore int64) jetstream.JetStream {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		JetStreamMaxStore: maxStore, NoLog: true, NoSigs: true, MaxPayload: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// publishEvent publishes body as a host would, with an event id and a Host-Seq.
func publishEvent(ctx context.Context, js jetstream.JetStream, id string, body []byte) error {
	m := nats.NewMsg("opencode.h1.event.tool.execute.after")
	m.Data = body
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set("Host-Seq", "1")
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := js.PublishMsg(pctx, m)
	return err
}

// With the default bounds, an event body of 1 MiB (the largest the contract allows) is
// stored with its headers, and one past the per-message limit (the probe's 7.9 MB among
// them) is refused by the broker at publish, not stored.
func TestStreamRefusesOversizedMessages(t *testing.T) {
	js := jetStream(t, 0)
	ctx := context.Background()
	s, err := EnsureStream(ctx, js, StreamConfig{Stream: "OPENCODE_EVENTS", Consumer: "thatch", Prefix: "opencode"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxBytes != DefaultStreamMaxBytes || cfg.MaxMsgSize != DefaultStreamMaxMsgBytes || cfg.Discard != jetstream.DiscardOld {
		t.Fatalf("a new stream's bounds: max_bytes %d, max_msg_size %d, discard %v", cfg.MaxBytes, cfg.MaxMsgSize, cfg.Discard)
	}
	if err := publishEvent(ctx, js, "ev_1mib", make([]byte, 1<<20)); err != nil {
		t.Fatalf("a 1 MiB event: %v, want it stored", err)
	}
	for _, n := range []int{DefaultStreamMaxMsgBytes, 7_900_000} {
		err := publishEvent(ctx, js, fmt.Sprint("ev_", n), make([]byte, n))
		if !errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) {
			t.Fatalf("a %d-byte event: %v, want the broker to refuse it (message size exceeds maximum)", n, err)
		}
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("the stream holds %+v (%v), want the 1 MiB event alone", info.State, err)
	}
}

// A stream created before thatch bounded it (no byte or message limit, DiscardNew) gets
// thatch's bounds at EnsureStream, without being created again (its creation time is its
// identity, rule 12) and keeping its other settings; what it holds past the byte limit
// goes, oldest first, and from then on the newest events are kept.
func TestEnsureStreamBoundsAnExistingStream(t *testing.T) {
	js := jetStream(t, 0)
	ctx := context.Background()
	old, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OPENCODE_EVENTS", Subjects: []string{"opencode.*.event.>"},
		Storage: jetstream.FileStorage, MaxAge: 7 * 24 * time.Hour, Duplicates: time.Minute, Discard: jetstream.DiscardNew})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"x","type":"session.idle","properties":{"pad":"` + strings.Repeat("p", 10<<10) + `"}}`)
	for i := range 20 {
		if err := publishEvent(ctx, js, fmt.Sprint("old_", i), body); err != nil {
			t.Fatal(err)
		}
	}
	const maxBytes, maxMsg = 64 << 10, 16 << 10
	c := StreamConfig{Stream: "OPENCODE_EVENTS", Consumer: "thatch", Prefix: "opencode", MaxBytes: maxBytes, MaxMsgBytes: maxMsg}
	s, err := EnsureStream(ctx, js, c)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	if cfg.MaxBytes != maxBytes || cfg.MaxMsgSize != maxMsg || cfg.Discard != jetstream.DiscardOld {
		t.Fatalf("bounds after EnsureStream: max_bytes %d, max_msg_size %d, discard %v", cfg.MaxBytes, cfg.MaxMsgSize, cfg.Discard)
	}
	if cfg.Duplicates != time.Minute || cfg.MaxAge != 7*24*time.Hour || !info.Created.Equal(old.CachedInfo().Created) {
		t.Fatalf("EnsureStream changed more than the bounds: duplicates %v, max age %v, created %v (was %v)",
			cfg.Duplicates, cfg.MaxAge, info.Created, old.CachedInfo().Created)
	}
	if st := info.State; st.Bytes > maxBytes || st.LastSeq != 20 || st.FirstSeq == 1 {
		t.Fatalf("the stream holds %d bytes, seq %d-%d: want at most %d bytes, the newest kept", st.Bytes, st.FirstSeq, st.LastSeq, maxBytes)
	}
	if err := publishEvent(ctx, js, "too_big", make([]byte, maxMsg)); !errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) {
		t.Fatalf("a message over the new per-message limit: %v, want it refused", err)
	}
	if err := publishEvent(ctx, js, "new_1", body); err != nil {
		t.Fatalf("a publish to the full stream: %v, want the oldest event dropped instead", err)
	}
	info, _ = s.Info(ctx)
	if st := info.State; st.Bytes > maxBytes || st.LastSeq != 21 {
		t.Fatalf("after one more event the stream holds %d bytes, last seq %d", st.Bytes, st.LastSeq)
	}
	// Once bounded, EnsureStream leaves the stream as it is.
	again, err := EnsureStream(ctx, js, c)
	if err != nil || !again.CachedInfo().Created.Equal(info.Created) {
		t.Fatalf("a second EnsureStream: %v", err)
	}
}

// A broker that cannot reserve the byte limit (a nearly full disk) gets a stream bounded
// to what it can reserve, and a warning that says so, instead of no stream at all.
func TestEnsureStreamOnSmallStorage(t *testing.T) {
	js := jetStream(t, 40<<20)
	var logs bytes.Buffer
	s, err := EnsureStream(context.Background(), js, StreamConfig{Stream: "OPENCODE_EVENTS", Consumer: "thatch", Prefix: "opencode",
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxBytes; got != 32<<20 {
		t.Fatalf("bounded to %d bytes on a broker with 40 MiB of storage, want 32 MiB", got)
	}
	if !strings.Contains(logs.String(), "too little storage") || !strings.Contains(logs.String(), "bounded_to=33554432") {
		t.Fatalf("logged:\n%s\nwant a warning naming the lower bound", logs.String())
	}
	small := jetStream(t, 4<<20)
	_, err = EnsureStream(context.Background(), small, StreamConfig{Stream: "OPENCODE_EVENTS", Consumer: "thatch", Prefix: "opencode"})
	if err == nil || !strings.Contains(err.Error(), "free disk space") {
		t.Fatalf("a broker with 4 MiB of storage: %v, want an error saying to free disk space", err)
	}
}

// A publish retried after a failed attempt can come back as a duplicate: of that attempt's
// own message (stored, its ack lost), or of an earlier publish with the same event id. The
// stored message's Host-Seq tells them apart, so a host does not take a number the stream
// never stored for its own (thatch would count a gap).
func TestStoredAsTellsARetryFromADuplicate(t *testing.T) {
	js := jetStream(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := EnsureStream(ctx, js, StreamConfig{Stream: "OPENCODE_EVENTS", Prefix: "opencode"}); err != nil {
		t.Fatal(err)
	}
	if err := publishEvent(ctx, js, "evt_1", []byte(`{"id":"evt_1","type":"session.idle"}`)); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("opencode.h1.event.tool.execute.after")
	m.Data = []byte(`{"id":"evt_1","type":"session.idle"}`)
	m.Header.Set(jetstream.MsgIDHeader, "evt_1")
	m.Header.Set("Host-Seq", "2")
	ack, err := js.PublishMsg(ctx, m)
	if err != nil || !ack.Duplicate {
		t.Fatalf("the second publish of evt_1: %+v, %v; want a duplicate", ack, err)
	}
	if storedAs(ctx, js, ack, "2") {
		t.Error("a duplicate of an earlier publish (Host-Seq 1) was taken for the retry's own (Host-Seq 2)")
	}
	if !storedAs(ctx, js, ack, "1") {
		t.Error("the stored message's own Host-Seq was not recognised")
	}
}
