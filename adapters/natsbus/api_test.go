package natsbus

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/adapters/memories"
	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// The memory service is what the daemon hands the responders.
var _ Memories = (*memories.Service)(nil)

// newMemoryRig serves the memory methods of a store holding n memories of project p1,
// each of about 600 bytes, on a broker whose max_payload is 64 KiB: a few hundred of them
// overflow it.
func newMemoryRig(t *testing.T, n int) *listRig {
	t.Helper()
	ns := testkit.StartBroker(t, testkit.BrokerOptions{NoJetStream: true, MaxPayload: 64 << 10})
	log := testkit.Logger(t)
	store, err := memory.Open(filepath.Join(t.TempDir(), "memories.db"), memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		c := memory.Caller{Project: "p1", SessionID: "ses_1", CallID: fmt.Sprintf("call_%d", i)}
		content := fmt.Sprintf("memory %d says %s", i, strings.Repeat(fmt.Sprintf("w%dx ", i), 600/(len(fmt.Sprint(i))+3)))
		if _, err := store.Remember(ctx, c, memory.RememberArgs{Content: content}, now); err != nil {
			t.Fatal(err)
		}
	}
	nc, _ := testkit.Connect(t, ns.ClientURL(), "")
	srv := &Server{NC: nc, Prefix: "thatch", Log: log, Memories: &memories.Service{Store: store, Log: log}}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	client, _ := testkit.Connect(t, ns.ClientURL(), "")
	return &listRig{nc: client}
}

// The memory service's lists page as the runtime's do: asked with a cursor, memories and
// memory.export come whole in pages that fit the broker, each memory once; asked without
// one over max_payload, the TooLargeError says to page.
func TestMemoryListsPageWithinMaxPayload(t *testing.T) {
	r := newMemoryRig(t, 300)
	for _, method := range []string{protocol.APIMemories, protocol.APIMemoryExport} {
		ids, pages := r.all(t, method, map[string]any{"project": "p1", "limit": 250}, "id")
		if pages < 3 {
			t.Errorf("%s: %d pages of 250 memories, want pages cut to 64 KiB", method, pages)
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("%s: %s twice", method, id)
			}
			seen[id] = true
		}
		if len(seen) != 300 {
			t.Errorf("%s: %d memories in pages, want 300", method, len(seen))
		}
		_, herr := r.call(method, map[string]any{"project": "p1", "limit": 250})
		if herr == nil || herr.Name != protocol.TooLarge || !strings.Contains(herr.Message, `ask for it in pages, {"cursor": ""}`) {
			t.Errorf("%s without a cursor: %v, want a TooLargeError saying to page", method, herr)
		}
	}
}

// The method table answers every method it names, and only those: an unknown method's
// error lists them all, the memory service answers each of its methods, and a thatch
// without memories refuses them.
func TestAPIMethods(t *testing.T) {
	ctx := context.Background()
	srv := &Server{Prefix: "thatch", Log: testkit.Logger(t)}
	_, herr := srv.Answer(ctx, "memory.nope", nil)
	want := "thatch has no API method memory.nope: use status, sessions, entries, deadletters, costs, sweep, session.context, " +
		"memories, memory.get, memory.forget, memory.context, memory.hygiene, memory.signals, memory.dismiss, memory.restore, " +
		"memory.projects, memory.share, memory.export, memory.import or ui.link"
	if herr == nil || herr.Name != protocol.NotFound || herr.Message != want {
		t.Fatalf("an unknown method: %v\nwant NotFoundError %q", herr, want)
	}

	var mine []string
	for _, m := range apiMethods {
		if (m.answer == nil) != m.memories {
			t.Errorf("%s: the memory service's methods, and only they, have no answer of their own", m.name)
		}
		if m.memories {
			mine = append(mine, m.name)
		}
	}
	// Without memories: NotImplemented, and an empty text for the context methods.
	for _, method := range mine {
		if _, herr := srv.Answer(ctx, method, []byte(`{}`)); herr == nil || herr.Name != protocol.NotImplemented || herr.Message != "this thatch keeps no memories" {
			t.Errorf("%s without memories: %v", method, herr)
		}
	}
	for _, method := range []string{protocol.APISessionContext, protocol.APIMemoryContext} {
		res, herr := srv.Answer(ctx, method, []byte(`{"sessionID": "ses_1"}`))
		if raw, _ := json.Marshal(res); herr != nil || string(raw) != `{"text":""}` {
			t.Errorf("%s without memories: %s %v", method, raw, herr)
		}
	}

	// With memories, the service answers each of its methods (an error of its own, such as
	// memory.get's unknown id, is fine; "no API method" is not).
	store, err := memory.Open(filepath.Join(t.TempDir(), "memories.db"), memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv.Memories = &memories.Service{Store: store, Log: srv.Log}
	for _, method := range mine {
		if _, herr := srv.Answer(ctx, method, []byte(`{}`)); herr != nil && strings.Contains(herr.Message, "no API method") {
			t.Errorf("%s: the memory service does not answer it: %v", method, herr)
		}
	}
	if !slices.Contains(mine, protocol.APIMemories) || slices.Contains(mine, protocol.APIMemoryContext) {
		t.Errorf("the memory service's methods: %v", mine)
	}
}
