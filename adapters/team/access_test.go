package team_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/team"
	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/journal/memory"
)

// TestTeamConfAccess runs testdata/nats/team.conf as the README tells a team to: alice may
// share acme-api only, bob acme-api and acme-web. What bob writes to acme-web never reaches
// alice, what alice writes to acme-web never leaves her outbox, and acme-api works both
// ways (so the refusals are the permissions', not a broken connection). Alice's thatch
// says acme-web is refused, once; granted and reloaded, the server takes it and her thatch
// recovers by itself.
func TestTeamConfAccess(t *testing.T) {
	conf, err := os.ReadFile(filepath.Join("..", "..", "testdata", "nats", "team.conf"))
	if err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(t.TempDir(), "team.conf")
	load := func(conf string) *server.Options {
		if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile(confFile)
		if err != nil {
			t.Fatal(err)
		}
		return opts
	}
	opts := load(string(conf))
	opts.Port, opts.StoreDir, opts.NoLog, opts.NoSigs = -1, t.TempDir(), true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(20 * time.Second) {
		t.Fatal("team server did not start")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	port := ns.Addr().(interface{ String() string }).String()
	url := func(user string) string { return fmt.Sprintf("nats://%s:%s-secret@%s", user, user, port) }

	ctx := context.Background()
	logs := map[string]*syncBuffer{}
	teams := map[string]*team.Team{}
	mate := func(author string, projects ...string) *memory.Store {
		st, err := memory.Open(filepath.Join(t.TempDir(), "memories.db"), memory.Options{Author: author})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range projects {
			if err := st.Share(ctx, p, true, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		logs[author] = &syncBuffer{}
		tm := team.New(team.Config{URL: url(author), Author: author, Store: st, Log: slog.New(slog.NewJSONHandler(logs[author], nil))})
		teams[author] = tm
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- tm.Run(rctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s's team: %v", author, err)
			}
			st.Close()
		})
		return st
	}
	// alice shares acme-web on her side too: the server, not her thatch, keeps her out.
	alice := mate("alice", "acme-api", "acme-web")
	bob := mate("bob", "acme-api", "acme-web")
	say := func(st *memory.Store, project, content string) string {
		r, err := st.Remember(ctx, memory.Caller{Project: project, SessionID: "ses_1"}, memory.RememberArgs{Content: content}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return r.Memory.ID
	}
	webByBob := say(bob, "acme-web", "The web app builds with vite")
	webByAlice := say(alice, "acme-web", "The web app deploys on Fridays")
	apiByBob := say(bob, "acme-api", "The API listens on 8080")
	apiByAlice := say(alice, "acme-api", "The API needs Postgres 16")
	testkit.WaitFor(t, 30*time.Second, "acme-api to travel both ways", func() bool { return has(alice, apiByBob) && has(bob, apiByAlice) })
	testkit.WaitFor(t, 30*time.Second, "bob's outbox to empty", func() bool { n, _ := bob.TeamCounts(ctx); return n.Outbox == 0 })

	// alice's acme-api version leaves her outbox once the server's acknowledgement is
	// back, which may come after bob applied it: her outbox comes down to her one
	// acme-web version, which stays.
	var out []memory.Outgoing
	testkit.WaitFor(t, 30*time.Second, "alice's outbox to hold her acme-web version alone", func() bool {
		out, err = alice.Outbox(ctx, 10)
		return err == nil && len(out) == 1 && out[0].MemoryID == webByAlice
	})
	// alice, who may not read acme-web, does not have bob's memory of it, and bob does not
	// have hers.
	if has(alice, webByBob) {
		t.Error("alice read acme-web, which she is not granted")
	}
	if has(bob, webByAlice) {
		t.Error("alice wrote to acme-web, which she is not granted")
	}
	// alice's thatch says so: status.team names acme-web, and her JSON log holds one
	// structured warning for it (nats.go's errors go through it, nothing unstructured).
	testkit.WaitFor(t, 30*time.Second, "alice's status to name acme-web as refused", func() bool {
		st, err := teams["alice"].TeamStatus(ctx)
		return err == nil && slices.Equal(st.PublishRefused, []string{"acme-web"})
	})
	warned := 0
	for line := range strings.Lines(logs["alice"].String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("alice's log has a line that is not JSON: %q", line)
			continue
		}
		if strings.HasPrefix(fmt.Sprint(rec["msg"]), "publish refused by the team server (not granted?)") && rec["project"] == "acme-web" && rec["level"] == "WARN" {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("alice's log warns %d times of acme-web's refused publish, want once:\n%s", warned, logs["alice"].String())
	}
	if st, _ := teams["bob"].TeamStatus(ctx); len(st.PublishRefused) != 0 {
		t.Errorf("bob, granted both, has refused projects %v", st.PublishRefused)
	}
	// A raw try with alice's user: creating a consumer on acme-web is refused.
	anc, err := nats.Connect(url("alice"), nats.CustomInboxPrefix(team.InboxPrefix("alice")))
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	if _, err := anc.Request("$JS.API.CONSUMER.CREATE.THATCH_TEAM.x.thatch.team.acme-web.>", []byte(`{"stream_name":"THATCH_TEAM","config":{"name":"x","filter_subject":"thatch.team.acme-web.>","ack_policy":"none"}}`), 2*time.Second); err == nil {
		t.Error("alice created a consumer on acme-web")
	}
	if _, err := anc.Request("$JS.API.CONSUMER.CREATE.THATCH_TEAM.x.thatch.team.>", []byte(`{"stream_name":"THATCH_TEAM","config":{"name":"x","filter_subject":"thatch.team.>","ack_policy":"none"}}`), 2*time.Second); err == nil {
		t.Error("alice created a consumer on every project")
	}

	// The team grants alice acme-web and reloads its server (nats-server --signal reload):
	// her thatch recovers by itself, sending what waited and reading bob's.
	granted := strings.Replace(string(conf), `"thatch.team.acme-api.>",
              "$JS.API.CONSUMER.CREATE.THATCH_TEAM.*.thatch.team.acme-api.>",`, `"thatch.team.acme-api.>",
              "thatch.team.acme-web.>",
              "$JS.API.CONSUMER.CREATE.THATCH_TEAM.*.thatch.team.acme-api.>",
              "$JS.API.CONSUMER.CREATE.THATCH_TEAM.*.thatch.team.acme-web.>",`, 1)
	if granted == string(conf) {
		t.Fatal("team.conf no longer has alice's grants where this test adds acme-web")
	}
	reload := load(granted)
	reload.Port, reload.StoreDir, reload.NoLog, reload.NoSigs = ns.Addr().(*net.TCPAddr).Port, opts.StoreDir, true, true
	if err := ns.ReloadOptions(reload); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 90*time.Second, "alice's acme-web memory to reach bob and bob's to reach her after the reload", func() bool {
		return has(bob, webByAlice) && has(alice, webByBob)
	})
	testkit.WaitFor(t, 30*time.Second, "alice's outbox to empty and her status to clear", func() bool {
		n, _ := alice.TeamCounts(ctx)
		st, err := teams["alice"].TeamStatus(ctx)
		return n.Outbox == 0 && err == nil && len(st.PublishRefused) == 0
	})
}

// syncBuffer is a log sink the team's goroutines write while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
