package memory

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// A simulated team: three replicas (real stores on disk) and a stream (the log every
// published version is appended to, in publish order). Each replica reads the log from its
// own position; it may read a message again, publish without the acknowledgement reaching it
// (the row stays and goes again), crash and reopen, and run with a clock minutes apart from
// the others'.

const teamProject = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"

type simMsg struct {
	project, id string
	data        []byte
}

type replica struct {
	path  string
	s     *Store
	read  int           // log messages read
	skew  time.Duration // of this replica's clock
	reads []int         // stream positions it was given, to redeliver
}

type team struct {
	t    *rapid.T
	tb   testing.TB
	dir  string
	reps []*replica
	log  []simMsg
	now  time.Time
}

func (tm *team) open(i int) {
	s, err := Open(tm.reps[i].path, Options{Author: fmt.Sprintf("author%d", i)})
	if err != nil {
		tm.t.Fatalf("open replica %d: %v", i, err)
	}
	tm.reps[i].s = s
}

func (tm *team) at(i int) time.Time { return tm.now.Add(tm.reps[i].skew) }

// publish appends up to n of replica i's outbox to the log; acked drops them from the outbox.
func (tm *team) publish(i, n int, acked bool) {
	ctx := context.Background()
	out, err := tm.reps[i].s.Outbox(ctx, n)
	if err != nil {
		tm.t.Fatal(err)
	}
	for _, o := range out {
		tm.log = append(tm.log, simMsg{project: o.Project, id: o.MemoryID, data: o.Record})
		if acked {
			if err := tm.reps[i].s.Sent(ctx, o.Seq); err != nil {
				tm.t.Fatal(err)
			}
		}
	}
}

// deliver gives replica i the log messages at poss (stream sequence pos+1), one at a time
// (ApplyVersion) or, batch, in one ApplyVersions.
func (tm *team) deliver(i int, batch bool, poss ...int) {
	var ins []Incoming
	for _, pos := range poss {
		m := tm.log[pos]
		ins = append(ins, Incoming{Project: m.project, MemoryID: m.id, Subject: "thatch.team." + m.project + "." + m.id,
			StreamSeq: uint64(pos + 1), Data: m.data})
	}
	if batch {
		res, err := tm.reps[i].s.ApplyVersions(context.Background(), ins, tm.at(i))
		if err != nil {
			tm.t.Fatalf("replica %d applies messages %v: %v", i, poss, err)
		}
		if len(res) != len(ins) {
			tm.t.Fatalf("replica %d applied %d messages: %d results", i, len(ins), len(res))
		}
		return
	}
	for j, in := range ins {
		if _, err := tm.reps[i].s.ApplyVersion(context.Background(), in, tm.at(i)); err != nil {
			tm.t.Fatalf("replica %d applies message %d: %v", i, poss[j]+1, err)
		}
	}
}

// pick is one memory of replica i's shared project, live or forgotten.
func (tm *team) pick(i int, forgotten bool) (string, bool) {
	ms, err := tm.reps[i].s.List(context.Background(), ListQuery{Projects: []string{teamProject}, Forgotten: forgotten, Limit: 1000})
	if err != nil {
		tm.t.Fatal(err)
	}
	if len(ms) == 0 {
		return "", false
	}
	return rapid.SampledFrom(ms).Draw(tm.t, "memory").ID, true
}

// state is replica i's memories of the shared project: what §9 says converges.
func state(t testing.TB, s *Store) string {
	rows, err := s.r.Query(`SELECT id, project, branch, kind, content, tags, forgotten_at != 0, author, hlc_wall, hlc_logical, node
		FROM memories WHERE project = ? ORDER BY id`, teamProject)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, project, branch, kind, content, tags, author, node string
		var forgotten bool
		var wall, logical int64
		if err := rows.Scan(&id, &project, &branch, &kind, &content, &tags, &forgotten, &author, &wall, &logical, &node); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s %s %q %s forgotten=%v %s %d.%d %s\n", id, branch, kind, content, tags, forgotten, author, wall, logical, node)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var simContents = []string{"Run make check before pushing", "run MAKE  check before pushing", "The API gateway is api-gw-02",
	"Releases are cut on Tuesdays", "Use pnpm, not npm", "Deploys need the VPN"}

func TestTeamConvergesProperty(t *testing.T) {
	// Three SQLite stores per case: under the race detector 100 cases took 9 minutes, so
	// it runs 16 unless -rapid.checks says otherwise (without it, 100 take 45 s).
	if f := flag.Lookup("rapid.checks"); underRace && f != nil && f.Value.String() == f.DefValue {
		f.Value.Set("16")
		defer f.Value.Set(f.DefValue)
	}
	base := t.TempDir()
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		dir := filepath.Join(base, fmt.Sprint(n))
		tm := &team{t: rt, tb: t, dir: dir, now: t0}
		ctx := context.Background()
		for i := range 3 {
			tm.reps = append(tm.reps, &replica{path: filepath.Join(dir, fmt.Sprint(i), "memories.db"),
				skew: time.Duration(rapid.IntRange(-120, 120).Draw(rt, "skew")) * time.Second})
			tm.open(i)
			if err := tm.reps[i].s.Share(ctx, teamProject, true, tm.at(i)); err != nil {
				rt.Fatal(err)
			}
		}
		defer func() {
			for _, r := range tm.reps {
				r.s.Close()
			}
			os.RemoveAll(dir)
		}()
		who := func() int { return rapid.IntRange(0, 2).Draw(rt, "replica") }
		caller := func(i int) Caller { return Caller{Project: teamProject, SessionID: fmt.Sprintf("ses_%d", i)} }
		rt.Repeat(map[string]func(*rapid.T){
			"": func(*rapid.T) {
				tm.now = tm.now.Add(time.Duration(rapid.IntRange(0, 2000).Draw(rt, "ms")) * time.Millisecond)
			},
			"remember": func(*rapid.T) {
				i := who()
				_, err := tm.reps[i].s.Remember(ctx, caller(i), RememberArgs{Content: rapid.SampledFrom(simContents).Draw(rt, "content"),
					Kind: rapid.SampledFrom([]string{"fact", "pitfall"}).Draw(rt, "kind")}, tm.at(i))
				if err != nil {
					rt.Fatal(err)
				}
			},
			"remember elsewhere": func(*rapid.T) { // a project not shared: never leaves
				if _, err := tm.reps[0].s.Remember(ctx, Caller{Project: "local-only", SessionID: "ses_x"},
					RememberArgs{Content: rapid.SampledFrom(simContents).Draw(rt, "content")}, tm.at(0)); err != nil {
					rt.Fatal(err)
				}
			},
			"update": func(*rapid.T) {
				i := who()
				id, ok := tm.pick(i, false)
				if !ok {
					return
				}
				a := UpdateArgs{}
				if rapid.Bool().Draw(rt, "content?") {
					c := rapid.SampledFrom(simContents).Draw(rt, "content") + rapid.SampledFrom([]string{"", " (checked)"}).Draw(rt, "suffix")
					a.Content = &c
				} else {
					tags := []string{rapid.SampledFrom([]string{"ci", "ops", "db"}).Draw(rt, "tag")}
					a.Tags = &tags
				}
				if _, err := tm.reps[i].s.Update(ctx, caller(i), id, a, tm.at(i)); err != nil && !errors.Is(err, ErrBadRequest) {
					rt.Fatal(err)
				}
			},
			"forget": func(*rapid.T) {
				i := who()
				if id, ok := tm.pick(i, false); ok {
					if _, err := tm.reps[i].s.Forget(ctx, caller(i), id, "wrong", tm.at(i)); err != nil {
						rt.Fatal(err)
					}
				}
			},
			"restore": func(*rapid.T) {
				i := who()
				if id, ok := tm.pick(i, true); ok {
					if _, err := tm.reps[i].s.Restore(ctx, caller(i), id, tm.at(i)); err != nil && !errors.Is(err, ErrBadRequest) {
						rt.Fatal(err)
					}
				}
			},
			"publish": func(*rapid.T) {
				tm.publish(who(), rapid.IntRange(1, 5).Draw(rt, "n"), rapid.IntRange(0, 4).Draw(rt, "ack") > 0)
			},
			"deliver": func(*rapid.T) { // a few messages, maybe in one batch with one read before
				i := who()
				r := tm.reps[i]
				var poss []int
				if len(r.reads) > 0 && rapid.IntRange(0, 3).Draw(rt, "again?") == 0 {
					poss = append(poss, rapid.SampledFrom(r.reads).Draw(rt, "pos"))
				}
				for range rapid.IntRange(1, 20).Draw(rt, "n") {
					if r.read < len(tm.log) {
						poss = append(poss, r.read)
						r.reads = append(r.reads, r.read)
						r.read++
					}
				}
				if len(poss) > 0 {
					tm.deliver(i, rapid.Bool().Draw(rt, "batch"), poss...)
				}
			},
			"redeliver": func(*rapid.T) {
				i := who()
				if r := tm.reps[i]; len(r.reads) > 0 {
					tm.deliver(i, false, rapid.SampledFrom(r.reads).Draw(rt, "pos"))
				}
			},
			"restart": func(*rapid.T) {
				i := who()
				if err := tm.reps[i].s.Close(); err != nil {
					rt.Fatal(err)
				}
				tm.open(i)
			},
		})
		// Everyone connected until nothing is left to send or read.
		for round := 0; ; round++ {
			if round > 50 {
				rt.Fatalf("no quiescence after 50 rounds: %d messages", len(tm.log))
			}
			for i := range tm.reps {
				tm.publish(i, 1000, true)
			}
			moved := false
			for i, r := range tm.reps {
				var poss []int
				for ; r.read < len(tm.log); r.read++ {
					poss = append(poss, r.read)
				}
				if len(poss) > 0 {
					tm.deliver(i, true, poss...)
					moved = true
				}
			}
			if !moved {
				break
			}
		}
		want := state(t, tm.reps[0].s)
		for i := 1; i < 3; i++ {
			if got := state(t, tm.reps[i].s); got != want {
				rt.Fatalf("replica %d differs from replica 0:\n%s\nreplica 0:\n%s", i, got, want)
			}
		}
		for i, r := range tm.reps { // applied in batches, the word counts still add up
			if got, want := wordTable(t, r.s); got != want {
				rt.Fatalf("replica %d's word counts\n%s\nwant, from its live memories,\n%s", i, got, want)
			}
		}
		for _, m := range tm.log {
			if m.project != teamProject {
				rt.Fatalf("a version of project %s left its machine", m.project)
			}
		}
	})
}

// wordTable is s's words table (the words of at least one memory), and what its live
// memories say it should be.
func wordTable(t testing.TB, s *Store) (got, want string) {
	live, err := s.List(context.Background(), ListQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	w := map[string]int{}
	for _, m := range live {
		addWords(w, m.Content, 1)
	}
	rows, err := s.r.Query(`SELECT word, docs FROM words WHERE docs != 0`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	g := map[string]int{}
	for rows.Next() {
		var word string
		var n int
		if err := rows.Scan(&word, &n); err != nil {
			t.Fatal(err)
		}
		g[word] = n
	}
	return fmt.Sprint(g), fmt.Sprint(w)
}
