package memory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// sendAll applies every version in from's outbox to each of to, in order, as the team
// stream would deliver them, and drops them from the outbox.
func sendAll(t *testing.T, from *Store, seq *uint64, to ...*Store) {
	t.Helper()
	ctx := context.Background()
	out, err := from.Outbox(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		*seq++
		for _, s := range to {
			if _, err := s.ApplyVersion(ctx, Incoming{Project: o.Project, MemoryID: o.MemoryID, StreamSeq: *seq, Data: o.Record}, t0.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		if err := from.Sent(ctx, o.Seq); err != nil {
			t.Fatal(err)
		}
	}
}

func sharedPair(t *testing.T) (a, b *Store) {
	a, b = setup(t, Options{Author: "alice"}), setup(t, Options{Author: "bob"})
	for _, s := range []*Store{a, b} {
		if err := s.Share(context.Background(), teamProject, true, t0); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

func TestTeamOutboxOnlyForShared(t *testing.T) {
	ctx := context.Background()
	s := setup(t, Options{Author: "alice"})
	remember(t, s, Caller{Project: teamProject, SessionID: "ses_1"}, "Written before sharing")
	remember(t, s, Caller{Project: "other", SessionID: "ses_1"}, "Never leaves")
	if c, _ := s.TeamCounts(ctx); c.Outbox != 0 {
		t.Fatalf("outbox before sharing: %d", c.Outbox)
	}
	if err := s.Share(ctx, "/home/dev/shop", true, t0); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("sharing a directory key: %v", err)
	}
	if err := s.Share(ctx, teamProject, true, t0); err != nil {
		t.Fatal(err)
	}
	remember(t, s, Caller{Project: teamProject, SessionID: "ses_1"}, "Written after sharing")
	remember(t, s, Caller{Project: "other", SessionID: "ses_1"}, "Never leaves either")
	out, _ := s.Outbox(ctx, 100)
	if len(out) != 2 || out[0].Project != teamProject || out[1].Project != teamProject {
		t.Fatalf("outbox: %+v", out)
	}
	for _, o := range out {
		v, err := DecodeVersion(o.Record)
		if err != nil || v.Author != "alice" || o.Version != v.Key() {
			t.Fatalf("record %s: %+v %v", o.Record, v, err)
		}
	}
	m, _, _ := s.Get(ctx, out[1].MemoryID)
	if !m.Shared || m.Author != "alice" {
		t.Fatalf("memory of a shared project: %+v", m)
	}
	if err := s.Share(ctx, teamProject, false, t0); err != nil {
		t.Fatal(err)
	}
	// Unsharing sends nothing more of the project, and loses none of its unsent versions.
	if out, _ := s.Outbox(ctx, 100); len(out) != 0 {
		t.Fatalf("outbox to send after unsharing: %+v", out)
	}
	if n, _ := s.Held(ctx, teamProject); n != 2 {
		t.Fatalf("versions held after unsharing: %d, want 2", n)
	}
}

func TestTeamApplyAndHistory(t *testing.T) {
	ctx := context.Background()
	a, b := sharedPair(t)
	var seq uint64
	r := remember(t, a, Caller{Project: teamProject, SessionID: "ses_a"}, "The gateway is api-gw-02")
	sendAll(t, a, &seq, b)
	if ids := found(t, b, Caller{Project: teamProject}, "gateway"); !contains(ids, r.Memory.ID) {
		t.Fatalf("b does not find a's memory: %v", ids)
	}
	// Both change it without seeing the other's change: b's change is later, it wins on
	// both sides, and a's stays in the history as superseded by bob's edit, at its own
	// time and under its own author, on the side that lost it as on the other.
	ca, cb := "The gateway is api-gw-03", "The gateway is api-gw-04"
	if _, err := a.Update(ctx, Caller{Project: teamProject, SessionID: "ses_a"}, r.Memory.ID, UpdateArgs{Content: &ca}, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Update(ctx, Caller{Project: teamProject, SessionID: "ses_b"}, r.Memory.ID, UpdateArgs{Content: &cb}, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	aOut, _ := a.Outbox(ctx, 10)
	sendAll(t, a, &seq, b)
	sendAll(t, b, &seq, a)
	sendAll(t, a, &seq, b) // a resends nothing: it took b's version
	for _, s := range []*Store{a, b} {
		m, log, err := s.Get(ctx, r.Memory.ID)
		if err != nil || m.Content != cb || m.Author != "bob" {
			t.Fatalf("%s holds %+v %v", s.Author(), m, err)
		}
		var lost int
		for _, e := range log {
			if e.Op == "superseded" && e.Author == "alice" && e.Before == ca && e.Reason == "superseded by bob's edit" && e.At.Equal(t0.Add(time.Second)) {
				lost++
			}
		}
		if lost != 1 {
			t.Errorf("%s: alice's edit is %d times in the history as superseded by bob's at its own time, want once: %+v", s.Author(), lost, log)
		}
	}
	// Applying a version again changes nothing.
	_, before, _ := b.Get(ctx, r.Memory.ID)
	res, err := b.ApplyVersion(ctx, Incoming{Project: teamProject, MemoryID: r.Memory.ID, StreamSeq: 99, Data: aOut[0].Record}, t0)
	if err != nil || res.Outcome != Repeated {
		t.Fatalf("applied again: %+v %v", res, err)
	}
	if _, after, _ := b.Get(ctx, r.Memory.ID); len(after) != len(before) {
		t.Errorf("history grew on a repeat: %d → %d", len(before), len(after))
	}
	// A forget is a version.
	if _, err := a.Forget(ctx, Caller{Project: teamProject, SessionID: "ses_a"}, r.Memory.ID, "moved", t0.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	sendAll(t, a, &seq, b)
	if m, _, _ := b.Get(ctx, r.Memory.ID); m.ForgottenAt == nil {
		t.Fatal("a's forget did not reach b")
	}
	if ids := found(t, b, Caller{Project: teamProject}, "gateway"); len(ids) != 0 {
		t.Fatalf("b still finds the forgotten memory: %v", ids)
	}
}

func TestTeamDuplicatesEndAsOne(t *testing.T) {
	ctx := context.Background()
	a, b := sharedPair(t)
	var seq uint64
	ra := remember(t, a, Caller{Project: teamProject, SessionID: "ses_a"}, "Deploys need the VPN")
	rb := remember(t, b, Caller{Project: teamProject, SessionID: "ses_b"}, "deploys  need the vpn")
	if ra.Memory.ID == rb.Memory.ID {
		t.Fatal("one id")
	}
	sendAll(t, a, &seq, b)
	sendAll(t, b, &seq, a)
	sendAll(t, a, &seq, b)
	keep, drop := min(ra.Memory.ID, rb.Memory.ID), max(ra.Memory.ID, rb.Memory.ID)
	for _, s := range []*Store{a, b} {
		live, _ := s.List(ctx, ListQuery{Projects: []string{teamProject}})
		if len(live) != 1 || live[0].ID != keep {
			t.Fatalf("%s: live %+v, want only %s", s.Author(), live, keep)
		}
		m, log, _ := s.Get(ctx, drop)
		var why bool
		for _, e := range log {
			why = why || e.Op == "forget" && e.Reason == "duplicate of "+keep
		}
		if m.ForgottenAt == nil || !why {
			t.Errorf("%s: %s is not forgotten as a duplicate of %s: %+v", s.Author(), drop, keep, log)
		}
	}
	if state(t, a) != state(t, b) {
		t.Errorf("a and b differ:\n%s\n%s", state(t, a), state(t, b))
	}
}

func TestTeamRejects(t *testing.T) {
	ctx := context.Background()
	_, b := sharedPair(t)
	good := testVersion()
	future := testVersion()
	future.HLC.Wall = t0.Add(48 * time.Hour).UnixMilli()
	for i, tc := range []struct {
		project string
		data    []byte
		kind    string
	}{
		{teamProject, []byte("not json"), RejectMalformed},
		{"another", good.Encode(), RejectProject},
		{teamProject, future.Encode(), RejectFuture},
		{teamProject, []byte(`{"format":2,"id":"mem_0195519a3f2b1a2b3c4d"}`), RejectFormat},
	} {
		if tc.project != teamProject {
			if err := b.Share(ctx, tc.project, true, t0); err != nil {
				t.Fatal(err)
			}
		}
		res, err := b.ApplyVersion(ctx, Incoming{Project: tc.project, MemoryID: good.ID, StreamSeq: uint64(i + 1), Data: tc.data}, t0)
		if err != nil || res.Outcome != Rejected || res.Reject.Kind != tc.kind {
			t.Errorf("%d: %+v %v, want rejected %s", i, res, err, tc.kind)
		}
	}
	if _, _, err := b.Get(ctx, good.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused record was applied: %v", err)
	}
	rej, _ := b.Rejections(ctx, 10)
	if len(rej) != 4 {
		t.Errorf("dead letters: %+v", rej)
	}
	sp, _ := b.SharedProjects(ctx)
	for _, p := range sp {
		if p.Project == teamProject && p.Cursor != 4 {
			t.Errorf("the stream position did not move past refused records: %d", p.Cursor)
		}
	}
	// A project not shared here is not applied.
	res, err := b.ApplyVersion(ctx, Incoming{Project: "nobody", MemoryID: good.ID, StreamSeq: 9, Data: good.Encode()}, t0)
	if err != nil || res.Outcome != NotShared {
		t.Errorf("a project not shared: %+v %v", res, err)
	}
}

func TestTeamClockSurvivesRestart(t *testing.T) {
	path := t.TempDir() + "/memories.db"
	s := openAt(t, path, Options{Author: "alice"})
	ctx := context.Background()
	if err := s.Share(ctx, teamProject, true, t0); err != nil {
		t.Fatal(err)
	}
	remember(t, s, Caller{Project: teamProject, SessionID: "ses_a"}, "one")
	out, _ := s.Outbox(ctx, 10)
	first, _ := DecodeVersion(out[0].Record)
	node := s.Node()
	s.Close()
	s = openAt(t, path, Options{Author: "alice"})
	if s.Node() != node {
		t.Fatalf("node id changed: %s → %s", node, s.Node())
	}
	// The machine's clock went back an hour: the next version is still later.
	if _, err := s.Remember(ctx, Caller{Project: teamProject, SessionID: "ses_a"}, RememberArgs{Content: "two"}, t0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	out, _ = s.Outbox(ctx, 10)
	second, _ := DecodeVersion(out[1].Record)
	if second.HLC.Compare(first.HLC) <= 0 {
		t.Errorf("clock went back: %v then %v", first.HLC, second.HLC)
	}
}

// TestTeamClockOfAStoreWithoutOne: a store whose clock was never persisted (made before the
// team clock, or filled by import only) takes its newest memory's at the first open, and
// persists it: the next open reads it instead of scanning every memory again, and the
// next version is later than every memory's.
func TestTeamClockOfAStoreWithoutOne(t *testing.T) {
	path := t.TempDir() + "/memories.db"
	ctx := context.Background()
	s := openAt(t, path, Options{Author: "alice"})
	m := remember(t, s, Caller{Project: teamProject, SessionID: "ses_a"}, "one")
	const wall = int64(4_000_000_000_000) // after t0 and the machine's now
	if _, err := s.w.Exec(`UPDATE memories SET hlc_wall = ? WHERE id = ?`, wall, m.Memory.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`DELETE FROM meta WHERE key IN (?, ?)`, metaClockWall, metaClockLogical); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openAt(t, path, Options{Author: "alice"})
	if s.team.clock.Wall != wall {
		t.Fatalf("clock at open: %+v, want the newest memory's wall %d", s.team.clock, wall)
	}
	// A memory written under the clock (which no version does) shows whether the next open
	// scans again: it must read the persisted clock instead.
	if _, err := s.w.Exec(`UPDATE memories SET hlc_wall = ? WHERE id = ?`, wall+1000, m.Memory.ID); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openAt(t, path, Options{Author: "alice"})
	if s.team.clock.Wall != wall {
		t.Fatalf("clock at the second open: %+v, want the persisted %d, not a new scan", s.team.clock, wall)
	}
	if err := s.Share(ctx, teamProject, true, t0); err != nil {
		t.Fatal(err)
	}
	remember(t, s, Caller{Project: teamProject, SessionID: "ses_a"}, "two")
	out, _ := s.Outbox(ctx, 10)
	v, _ := DecodeVersion(out[len(out)-1].Record)
	if v.HLC.Wall < wall {
		t.Errorf("a version after the open has clock %v, before the newest memory's %d", v.HLC, wall)
	}
}

// TestTeamKeepsNewerFormats: a record of a newer format is kept unapplied, and applied by a
// build that reads that format.
func TestTeamKeepsNewerFormats(t *testing.T) {
	ctx := context.Background()
	_, b := sharedPair(t)
	v := testVersion()
	v.Project = teamProject
	data := strings.Replace(string(v.Encode()), `"format":1`, `"format":2`, 1)
	res, err := b.ApplyVersion(ctx, Incoming{Project: teamProject, MemoryID: v.ID, Subject: "thatch.team." + teamProject + "." + v.ID,
		StreamSeq: 1, Data: []byte(data)}, t0)
	if err != nil || res.Outcome != Rejected || res.Reject.Kind != RejectFormat {
		t.Fatalf("a newer format: %+v %v", res, err)
	}
	if n, err := b.RetryKept(ctx, t0); n != 0 || err != nil {
		t.Fatalf("this build applied a newer format: %d %v", n, err)
	}
	readFormat = 2
	defer func() { readFormat = VersionFormat }()
	if n, err := b.RetryKept(ctx, t0); n != 1 || err != nil {
		t.Fatalf("a later build applied %d kept records: %v", n, err)
	}
	if m, _, err := b.Get(ctx, v.ID); err != nil || m.Content != v.Content {
		t.Fatalf("the kept record was not applied: %+v %v", m, err)
	}
	if rej, _ := b.Rejections(ctx, 10); len(rej) != 0 {
		t.Errorf("applied record still kept: %+v", rej)
	}
}

// TestTeamApplyBatch: one ApplyVersions of a bulk batch says for each record what
// ApplyVersion would have (applied, repeated, refused, not shared), moves the stream
// position past the batch, and a second delivery of the batch changes nothing.
func TestTeamApplyBatch(t *testing.T) {
	ctx := context.Background()
	a, b := sharedPair(t)
	for i := range 20 {
		remember(t, a, Caller{Project: teamProject, SessionID: "ses_a"}, fmt.Sprintf("Batch fact %d", i))
	}
	out, err := a.Outbox(ctx, 100)
	if err != nil || len(out) != 20 {
		t.Fatalf("outbox: %d %v", len(out), err)
	}
	var ins []Incoming
	for i, o := range out {
		ins = append(ins, Incoming{Project: o.Project, MemoryID: o.MemoryID, StreamSeq: uint64(i + 1), Data: o.Record})
	}
	ins = append(ins, ins[3]) // delivered twice in one batch
	ins = append(ins, Incoming{Project: teamProject, MemoryID: out[0].MemoryID, StreamSeq: 21, Data: []byte("not json")})
	ins = append(ins, Incoming{Project: "nobody", MemoryID: out[0].MemoryID, StreamSeq: 22, Data: out[0].Record})
	res, err := b.ApplyVersions(ctx, ins, t0.Add(time.Minute))
	if err != nil || len(res) != len(ins) {
		t.Fatalf("apply: %d results for %d records, %v", len(res), len(ins), err)
	}
	for i := range 20 {
		if res[i].Outcome != Applied {
			t.Errorf("record %d: %s, want applied", i, res[i].Outcome)
		}
	}
	if got := []string{res[20].Outcome, res[21].Outcome, res[22].Outcome}; got[0] != Repeated || got[1] != Rejected || got[2] != NotShared {
		t.Errorf("repeat, malformed, not shared: %v", got)
	}
	if n, _ := b.Count(ctx); n != 20 {
		t.Errorf("b holds %d memories, want 20", n)
	}
	sp, _ := b.SharedProjects(ctx)
	if len(sp) != 1 || sp[0].Cursor != 21 {
		t.Errorf("stream position after the batch: %+v, want 21", sp)
	}
	before := state(t, b)
	res, err = b.ApplyVersions(ctx, ins[:20], t0.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Outcome != Repeated {
			t.Errorf("again, record %d: %s, want repeated", i, r.Outcome)
		}
	}
	if after := state(t, b); after != before || after != state(t, a) {
		t.Errorf("b after the batch again:\n%s\nbefore:\n%s\na:\n%s", after, before, state(t, a))
	}
}
