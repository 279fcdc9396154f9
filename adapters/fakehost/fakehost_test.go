package fakehost

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// start serves a quiet v1 fake host h1 on a broker of its own.
func start(t *testing.T) (*nats.Conn, *Host) {
	t.Helper()
	_, url, token := testkit.Broker(t)
	nc, _ := testkit.Connect(t, url, token)
	h, err := New(nc, "h1", "v1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	h.Quiet = true
	return nc, h
}

// A repeated idempotency key is answered from memory, counted as a repeat; a Raw answer
// is not remembered.
func TestHostAnswersRepeatsFromMemory(t *testing.T) {
	nc, h := start(t)
	ask := func(method, params string) string {
		t.Helper()
		msg, err := nc.Request("opencode.h1.api."+method, []byte(params), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return string(msg.Data)
	}
	first := ask(protocol.MethodSessionCreate, `{"title":"t","idempotencyKey":"k1"}`)
	if again := ask(protocol.MethodSessionCreate, `{"title":"t","idempotencyKey":"k1"}`); again != first {
		t.Fatalf("repeat answered %s, want the first answer %s", again, first)
	}
	if other := ask(protocol.MethodSessionCreate, `{"title":"t","idempotencyKey":"k2"}`); other == first {
		t.Fatalf("another key got the first answer %s", other)
	}
	if n := len(h.CallsTo(protocol.MethodSessionCreate)); n != 2 || h.Repeats()[protocol.MethodSessionCreate] != 1 || len(h.Requests()) != 3 {
		t.Fatalf("%d creates acted on, repeats %v, %d requests; want 2, 1 and 3", n, h.Repeats(), len(h.Requests()))
	}

	garbage := true
	h.Raw = func(string) ([]byte, bool) { return []byte("garbage"), garbage }
	if got := ask(protocol.MethodSessionList, `{"idempotencyKey":"k3"}`); got != "garbage" {
		t.Fatalf("Raw answer %q", got)
	}
	garbage = false
	if got := ask(protocol.MethodSessionList, `{"idempotencyKey":"k3"}`); got == "garbage" {
		t.Fatal("a Raw answer was remembered for its key")
	}
}

// Tool reads thatch's reply envelope: a result, an error, or neither.
func TestHostToolReadsTheEnvelope(t *testing.T) {
	nc, h := start(t)
	reply := []byte(`{"result":{"output":"done","metadata":{"completed":1}}}`)
	sub, err := nc.Subscribe("thatch.tool.*", func(m *nats.Msg) { _ = m.Respond(reply) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	a, herr, err := h.Tool(t.Context(), "thatch", protocol.ToolDone, "ses_1", map[string]any{})
	if err != nil || herr != nil || a.Output != "done" {
		t.Fatalf("result: %+v, %v, %v", a, herr, err)
	}
	reply = []byte(`{"error":{"name":"UnknownSessionError","message":"m"}}`)
	if _, herr, err = h.Tool(t.Context(), "thatch", protocol.ToolDone, "ses_1", nil); err != nil || herr == nil || herr.Name != protocol.UnknownSession {
		t.Fatalf("error: %v, %v", herr, err)
	}
	reply = []byte(`{}`)
	if _, herr, err = h.Tool(t.Context(), "thatch", protocol.ToolDone, "ses_1", nil); herr != nil || err == nil {
		t.Fatalf("neither: %v, %v; want an error", herr, err)
	}
}
