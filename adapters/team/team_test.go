package team_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thatch-dev/thatch/adapters/team"
	"github.com/thatch-dev/thatch/adapters/team/teamtest"
	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/journal/memory"
)

const project = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

type mate struct {
	store *memory.Store
	team  *team.Team
	reg   *prometheus.Registry
	stop  func()
}

// join runs a teammate's store and team connection to url.
func join(t *testing.T, author, url string) *mate {
	t.Helper()
	st, err := memory.Open(filepath.Join(t.TempDir(), "memories.db"), memory.Options{Author: author})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Share(context.Background(), project, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	tm := team.New(team.Config{URL: url, Author: author, Store: st, Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tm.Run(ctx) }()
	m := &mate{store: st, team: tm, reg: reg}
	m.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s's team ended with %v", author, err)
		}
		st.Close()
	}
	t.Cleanup(func() {
		if m.stop != nil {
			m.stop()
		}
	})
	return m
}

func has(s *memory.Store, id string) bool {
	m, _, err := s.Get(context.Background(), id)
	return err == nil && m.ForgottenAt == nil
}

func TestTeamOverACluster(t *testing.T) {
	c := teamtest.Start(t, 3)
	ctx := context.Background()
	a, b, cc := join(t, "alice", c.URL(0)), join(t, "bob", c.URL(1)), join(t, "carol", c.URL(2))
	r, err := a.store.Remember(ctx, memory.Caller{Project: project, SessionID: "ses_a"}, memory.RememberArgs{Content: "The gateway is api-gw-02"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.Remember(ctx, memory.Caller{Project: "not-shared", SessionID: "ses_a"}, memory.RememberArgs{Content: "stays here"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "bob and carol to have alice's memory", func() bool { return has(b.store, r.Memory.ID) && has(cc.store, r.Memory.ID) })
	m, _, _ := b.store.Get(ctx, r.Memory.ID)
	if m.Author != "alice" || m.Content != "The gateway is api-gw-02" {
		t.Fatalf("bob holds %+v", m)
	}
	testkit.WaitFor(t, 30*time.Second, "alice's outbox to empty", func() bool { n, _ := a.store.TeamCounts(ctx); return n.Outbox == 0 })

	nc, err := nats.Connect(c.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctx, team.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(team.SubjectPrefix+".>"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 {
		t.Errorf("stream replicas %d, want 3 on a 3-node cluster", info.Config.Replicas)
	}
	for subject := range info.State.Subjects {
		if subject != team.Subject(project, r.Memory.ID) {
			t.Errorf("the stream holds %s: only the shared project's memory may leave", subject)
		}
	}

	// A bad record is refused, counted and does not stop the reader.
	if _, err := js.Publish(ctx, team.Subject(project, "mem_00000000000000000000"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "bob to refuse the bad record", func() bool {
		return metric(t, b.reg, "thatch_team_rejected_total") == 1
	})
	// Status names it: what was wrong, to fix at the teammate who sent it.
	if st, err := b.team.TeamStatus(ctx); err != nil || st.Rejected != 1 || len(st.Refused) != 1 ||
		st.Refused[0].Subject != team.Subject(project, "mem_00000000000000000000") || st.Refused[0].Kind == "" || st.Refused[0].Reason == "" {
		t.Errorf("bob's status after the bad record: %+v %v", st, err)
	}

	// One node gone for good: the others go on (R3 keeps the stream), carol reconnects to
	// another node.
	c.StopNode(2)
	r2, err := a.store.Remember(ctx, memory.Caller{Project: project, SessionID: "ses_a"}, memory.RememberArgs{Content: "Deploys need the VPN"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "bob and carol to have the memory written after a node died", func() bool { return has(b.store, r2.Memory.ID) && has(cc.store, r2.Memory.ID) })
	st, err := cc.team.TeamStatus(ctx)
	if err != nil || !st.Connected || st.Author != "carol" || len(st.SharedProjects) != 1 || st.LastApplied == nil {
		t.Errorf("carol's status: %+v %v", st, err)
	}
	if metric(t, b.reg, "thatch_team_applied_total") < 2 {
		t.Error("bob counted no applied versions")
	}
}

// metric is the counter name's value in reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestTeamOfflineIsNotAnError(t *testing.T) {
	// Nothing listens there: the team starts, keeps the outbox and stops cleanly.
	a := join(t, "alice", fmt.Sprintf("nats://127.0.0.1:%d", 1))
	ctx := context.Background()
	if _, err := a.store.Remember(ctx, memory.Caller{Project: project, SessionID: "ses_a"}, memory.RememberArgs{Content: "offline"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	st, err := a.team.TeamStatus(ctx)
	if err != nil || st.Connected || st.Outbox != 1 {
		t.Fatalf("offline status: %+v %v", st, err)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// TestReaderAsksForHeartbeats: a teammate's reader asks the team's server for a heartbeat
// every second on its pulls, so it notices a lost pull (the node holding its consumer gone)
// within two seconds. Without it nats.go asks every 5 s and notices at 10 (the trials are
// in docs/performance.md, team memory).
func TestReaderAsksForHeartbeats(t *testing.T) {
	c := teamtest.Start(t, 1)
	nc, err := nats.Connect(c.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	pulls, err := nc.SubscribeSync("$JS.API.CONSUMER.MSG.NEXT." + team.Stream + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	join(t, "bob", c.URL(0))
	m, err := pulls.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no pull from bob's reader: %v", err)
	}
	var pull struct {
		Heartbeat time.Duration `json:"idle_heartbeat"`
	}
	if err := json.Unmarshal(m.Data, &pull); err != nil {
		t.Fatalf("pull %s: %v", m.Data, err)
	}
	if pull.Heartbeat != time.Second {
		t.Fatalf("the reader's pull asks for a heartbeat every %v (%s), want every second", pull.Heartbeat, m.Data)
	}
}

// TestTeamBackfillInWindows: more versions than a publish window and an apply batch go
// out and arrive once: the sender's outbox empties, the stream holds each memory once, and
// a teammate that starts sharing afterwards receives every one of them.
func TestTeamBackfillInWindows(t *testing.T) {
	const n = 1500 // about three windows, six batches
	c := teamtest.Start(t, 1)
	ctx := context.Background()
	a := join(t, "alice", c.URL(0))
	ms := make([]memory.Memory, 0, n)
	base := time.Now().Add(-time.Hour)
	for i := range n {
		at := base.Add(time.Duration(i) * time.Millisecond)
		ms = append(ms, memory.Memory{ID: fmt.Sprintf("mem_%012x%08x", at.UnixMilli(), i), Project: project, Kind: "fact",
			Content: fmt.Sprintf("Host h%d runs job j%d nightly", i%97, i), CreatedAt: at, UpdatedAt: at})
	}
	if _, err := a.store.Import(ctx, ms, time.Now()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 60*time.Second, "alice's outbox to empty", func() bool { n, _ := a.store.TeamCounts(ctx); return n.Outbox == 0 })
	nc, err := nats.Connect(c.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctx, team.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n || info.State.NumSubjects != n {
		t.Errorf("the stream holds %d messages on %d subjects, want %d once each", info.State.Msgs, info.State.NumSubjects, n)
	}
	d := join(t, "dave", c.URL(0))
	testkit.WaitFor(t, 60*time.Second, "dave to receive every memory", func() bool { live, _ := d.store.Count(ctx); return live == n })
	for _, m := range []memory.Memory{ms[0], ms[n/2], ms[n-1]} {
		if got, _, err := d.store.Get(ctx, m.ID); err != nil || got.Content != m.Content || got.Author != "alice" {
			t.Errorf("dave holds %+v %v, want alice's %q", got, err, m.Content)
		}
	}
	testkit.WaitFor(t, 60*time.Second, "dave's stream position to reach the end", func() bool {
		ps, _ := d.store.SharedProjects(ctx)
		return len(ps) == 1 && ps[0].Cursor == info.State.LastSeq
	})
	if metric(t, d.reg, "thatch_team_applied_total") != n {
		t.Errorf("dave counted %v applied versions, want %d", metric(t, d.reg, "thatch_team_applied_total"), n)
	}
}
