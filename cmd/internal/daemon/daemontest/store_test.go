package daemontest

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/natsbus"
)

// Issue 29 point 3: with the embedded broker, nothing a host published stays readable in
// the data folder: the store is encrypted at rest with a key of the data folder, and
// events thatch applied are purged from the stream.

// storeMarker is in events only as fields thatch ignores (an unknown event type, an extra
// property, a read of .env), so no other file of thatch's holds it: only the broker's
// store could.
const storeMarker = "MARKER-7f3a9c-raw-event-body-never-on-disk"

// storeSecret is a secret in the same places; thatch redacts it from what it keeps.
const storeSecret = "ghp_Zq8Wm2Lx7Ks4Jd9Hf3Ga6Pb1Vc5Nr0Ty2Ue8"

// publishRawSecrets publishes, as a raw host does, events that carry storeMarker and
// storeSecret where thatch keeps neither, and returns how many of them thatch applies.
func publishRawSecrets(ctx context.Context, t *testing.T, js jetstream.JetStream, run string, n int) int64 {
	t.Helper()
	pub := func(id, typ, body string) {
		if _, err := natsbus.PublishEvent(ctx, js, "opencode.h1.event."+typ, []byte(body), id, ""); err != nil {
			t.Fatal(err)
		}
	}
	pub("evt_sc"+run, "session.created", `{"id":"evt_sc`+run+`","type":"session.created","properties":{"sessionID":"ses_a","info":{"id":"ses_a","title":"t","directory":"/w"},"extra":"`+storeMarker+`"}}`)
	for i := range n {
		id := fmt.Sprintf("evt%s_%03d", run, i)
		// A read of .env: thatch never keeps its output, not even redacted.
		pub(id, "tool.execute.after", `{"id":"`+id+`","type":"tool.execute.after","properties":{"sessionID":"ses_a","callID":"`+id+`","tool":"read","args":{"filePath":"/w/.env"},"title":".env","output":"GITHUB_TOKEN=`+storeSecret+`\n# `+storeMarker+`","metadata":{}}}`)
		// A type thatch does not know: acknowledged and ignored, whatever it holds.
		pub(id+"_fe", "file.edited", `{"id":"`+id+`_fe","type":"file.edited","properties":{"file":"/w/.env","note":"`+storeMarker+` `+storeSecret+`"}}`)
	}
	return int64(1 + n)
}

// filesHolding returns the files under dir that hold any of needles, and how many .blk
// files (the broker's message blocks) it read.
func filesHolding(t *testing.T, dir string, needles ...string) (found []string, blocks int) {
	t.Helper()
	must(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, ".blk") {
			blocks++
		}
		for _, n := range needles {
			if bytes.Contains(data, []byte(n)) {
				rel, _ := filepath.Rel(dir, path)
				found = append(found, rel+" holds "+n[:12]+"…")
			}
		}
		return nil
	}))
	return found, blocks
}

// streamMsgs returns how many messages the stream holds and its creation time.
func streamMsgs(t *testing.T, js jetstream.JetStream) (uint64, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "OPENCODE_EVENTS")
	if err != nil {
		return ^uint64(0), time.Time{}
	}
	info, err := s.Info(ctx)
	if err != nil {
		return ^uint64(0), time.Time{}
	}
	return info.State.Msgs, info.Created
}

// TestEmbeddedStoreKeepsNoEventReadable: raw events carrying a secret and a marker in
// places thatch keeps neither are applied, purged from the stream, and after the stop no
// file of the data folder holds either; the store's key is a private file.
func TestEmbeddedStoreKeepsNoEventReadable(t *testing.T) {
	r := NewEmbedded(t, "v1")
	r.Cfg.StreamPurgeMS = 50
	r.Start()
	js, err := jetstream.New(r.NC)
	must(t, err)
	ctx := r.Ctx()
	must(t, r.Host.Hello(ctx, "b1"))
	n := publishRawSecrets(ctx, t, js, "a", 20)
	r.WaitApplied(1 + n) // the hello too
	waitFor(t, "the applied events to be purged from the stream", func() bool {
		msgs, _ := streamMsgs(t, js)
		return msgs == 0
	})
	if e := r.Entries("ses_a"); len(e) != 20 {
		t.Errorf("thatch kept %d entries of the 20 .env reads", len(e))
	}
	r.Stop()
	found, blocks := filesHolding(t, r.DataDir, storeMarker, storeSecret)
	if blocks == 0 {
		t.Fatal("no message block under the data folder: is the store elsewhere?")
	}
	for _, f := range found {
		t.Error(f)
	}
	fi, err := os.Stat(filepath.Join(r.DataDir, natsbus.StoreKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the store key: %v, %v", fi, err)
	}

	// Events the stream still holds (purge off: as between two purges, or unapplied)
	// are not readable either: the store is encrypted.
	r.Cfg.StreamPurgeMS = 0
	r.Start()
	if _, err := r.Host.Publish(ctx, "session.status", map[string]any{"sessionID": "ses_a", "status": map[string]any{"type": "busy"}}); err != nil {
		t.Fatal(err)
	}
	n2 := publishRawSecrets(ctx, t, js, "b", 5)
	waitFor(t, "the second run's events to be applied", func() bool { return r.Status().Applied >= 1+n+1+n2 })
	if msgs, _ := streamMsgs(t, js); msgs == 0 {
		t.Fatal("the stream holds nothing: the encryption is not tested")
	}
	r.Stop()
	found, _ = filesHolding(t, r.DataDir, storeMarker, storeSecret)
	for _, f := range found {
		t.Error("purge off: " + f)
	}
}

// TestEmbeddedPlainStoreIsEncrypted: a store an earlier thatch left unencrypted, holding
// events it had not applied yet, still starts: the broker encrypts it as it recovers it,
// the stream keeps its identity (creation time) and its events, thatch applies them, and
// afterwards no file holds them in the clear.
func TestEmbeddedPlainStoreIsEncrypted(t *testing.T) {
	r := NewEmbedded(t, "v1")
	// The earlier thatch: a token, a plain store, the stream as it creates it, and events
	// published while it was stopped.
	token, _, err := natsbus.EnsureToken(r.Cfg.TokenPath())
	must(t, err)
	ns, err := natsbus.StartBroker(natsbus.BrokerConfig{Listen: "127.0.0.1:-1", Dir: filepath.Join(r.DataDir, "nats"), Token: token})
	must(t, err)
	nc, err := nats.Connect(ns.ClientURL(), nats.Token(token))
	must(t, err)
	js, err := jetstream.New(nc)
	must(t, err)
	ctx := r.Ctx()
	_, err = natsbus.EnsureStream(ctx, js, natsbus.StreamConfig{Stream: r.Cfg.Stream, Prefix: r.Cfg.SubjectPrefix})
	must(t, err)
	n := publishRawSecrets(ctx, t, js, "a", 10)
	_, created := streamMsgs(t, js)
	nc.Close()
	ns.Shutdown()
	ns.WaitForShutdown()
	if found, _ := filesHolding(t, r.DataDir, storeMarker); len(found) == 0 {
		t.Fatal("the plain store holds no marker: the test does not test")
	}

	r.Cfg.StreamPurgeMS = 0 // events stay: the files are encrypted, not just emptied
	r.Start()
	r.WaitApplied(n)
	if s := r.Sessions()["ses_a"]; s.SessionID == "" {
		t.Error("the session of the plain store's events is unknown")
	}
	js, err = jetstream.New(r.NC)
	must(t, err)
	msgs, got := streamMsgs(t, js)
	if !got.Equal(created) || msgs != uint64(1+2*10) {
		t.Errorf("stream created %v holding %d messages, want the plain store's (created %v, 21 messages)", got, msgs, created)
	}
	r.Stop()
	if keys, _ := filepath.Glob(filepath.Join(r.DataDir, "nats", "jetstream", "*", "streams", "*", "meta.key")); len(keys) == 0 {
		t.Error("the stream has no key of its own: it was not encrypted")
	}
	found, _ := filesHolding(t, r.DataDir, storeMarker, storeSecret)
	for _, f := range found {
		t.Error(f)
	}
	// And it starts again encrypted, its events still there, none applied twice.
	r.Start()
	if a := r.Status().Applied; a != n {
		t.Errorf("applied %d after a second start, want %d", a, n)
	}
}
