package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// workloadEvents builds the seeded workload of one host: per session a creation, two
// turns of busy, dozens of tool calls with outputs of realistic sizes and both idle
// events; some sessions have a task child with its own calls; some error, some are
// deleted. Extraction children come from thatch itself, played by the fake host's model.
func workloadEvents(rng *rand.Rand, host string, sessions int, dir string, w *workload) [][2]string {
	sizes := []int{80, 200, 400, 900, 1500, 3000, 8000}
	out := func(n int) string { return strings.Repeat("x", n) }
	var evs [][2]string // type, properties JSON
	add := func(typ string, props map[string]any) {
		data, _ := json.Marshal(props)
		evs = append(evs, [2]string{typ, string(data)})
	}
	for s := range sessions {
		sid := fmt.Sprintf("ses_%s_%05d", host, s)
		info := map[string]any{"id": sid, "title": "work", "directory": dir, "projectID": "p1"}
		add(protocol.EventSessionCreated, map[string]any{"sessionID": sid, "info": info})
		var task string
		for turn := range 2 {
			add(protocol.EventSessionStatus, map[string]any{"sessionID": sid, "status": map[string]any{"type": "busy"}})
			for c := range 12 + rng.IntN(24) {
				w.entries[sid] = append(w.entries[sid], fmt.Sprintf("%s_t%d_c%d", sid, turn, c))
				add(protocol.EventToolExecuteAfter, map[string]any{"sessionID": sid, "callID": fmt.Sprintf("%s_t%d_c%d", sid, turn, c),
					"tool": []string{"bash", "read", "edit", "grep"}[rng.IntN(4)], "args": map[string]any{"command": "go test ./...", "filePath": dir + "/main.go"},
					"title": "step", "output": out(sizes[rng.IntN(len(sizes))]), "metadata": map[string]any{}})
			}
			if turn == 0 && rng.IntN(10) < 3 {
				task = sid + "_task"
				add(protocol.EventSessionCreated, map[string]any{"sessionID": task, "info": map[string]any{"id": task, "parentID": sid, "title": "explore", "directory": dir}})
				add(protocol.EventSessionStatus, map[string]any{"sessionID": task, "status": map[string]any{"type": "busy"}})
				for c := range 3 {
					w.entries[sid] = append(w.entries[sid], runtime.EntryID(sid, task, fmt.Sprintf("%s_c%d", task, c)))
					add(protocol.EventToolExecuteAfter, map[string]any{"sessionID": task, "callID": fmt.Sprintf("%s_c%d", task, c), "tool": "read",
						"args": map[string]any{"filePath": dir + "/x.go"}, "output": out(sizes[rng.IntN(4)]), "metadata": map[string]any{}})
				}
				add(protocol.EventSessionStatus, map[string]any{"sessionID": task, "status": map[string]any{"type": "idle"}})
				add(protocol.EventSessionIdle, map[string]any{"sessionID": task})
			}
			if rng.IntN(10) == 0 {
				add(protocol.EventSessionError, map[string]any{"sessionID": sid, "error": map[string]any{"name": "APIError", "data": map[string]any{"message": "overloaded"}}})
			}
			add(protocol.EventSessionStatus, map[string]any{"sessionID": sid, "status": map[string]any{"type": "idle"}})
			add(protocol.EventSessionIdle, map[string]any{"sessionID": sid})
		}
		if rng.IntN(10) == 0 {
			add(protocol.EventSessionDeleted, map[string]any{"sessionID": sid, "info": info})
			w.deleted[sid] = true
		}
	}
	return evs
}

// workload is what the seeded events hold: the entry ids of each root session and the
// sessions the workload deletes.
type workload struct {
	entries map[string][]string
	deleted map[string]bool
}

// publishAll publishes events with asynchronous JetStream publishes and waits for every ack.
func publishAll(ctx context.Context, js jetstream.JetStream, subjectOf func(i int) string, bodies [][]byte, ids []string, hostSeq []int64) error {
	const window = 4096
	var pending []jetstream.PubAckFuture
	flush := func() error {
		for _, f := range pending {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		pending = pending[:0]
		return nil
	}
	for i, body := range bodies {
		m := nats.NewMsg(subjectOf(i))
		m.Data = body
		m.Header.Set(jetstream.MsgIDHeader, ids[i])
		if hostSeq != nil {
			m.Header.Set("Host-Seq", fmt.Sprint(hostSeq[i]))
		}
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		pending = append(pending, f)
		if len(pending) == window {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

func (b *benchRun) throughput(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(b.seed, 42))
	work := filepath.Join(b.dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	var bodies [][]byte
	var ids, subjects []string
	var seqs []int64
	var hosts []*fakehost.Host
	w := &workload{entries: map[string][]string{}, deleted: map[string]bool{}}
	for h := range b.size.Hosts {
		host := fmt.Sprintf("h%d", h)
		fh, err := fakehost.New(b.nc, host, "v1")
		if err != nil {
			return err
		}
		defer fh.Close()
		fh.Model, fh.Quiet, fh.Dir = true, false, work
		hosts = append(hosts, fh)
		hello, _ := json.Marshal(map[string]any{"hostID": host, "api": "v1", "version": "bench", "bootID": "b1",
			"directory": work, "worktree": work, "projectID": "p1", "capabilities": map[string]bool{"move": true}, "resumed": []string{}})
		evs := append([][2]string{{protocol.EventHostHello, string(hello)}}, workloadEvents(rng, host, b.size.Sessions/b.size.Hosts, work, w)...)
		for i, e := range evs {
			id := fmt.Sprintf("evt_%s_%07d", host, i)
			bodies = append(bodies, []byte(`{"id":"`+id+`","type":"`+e[0]+`","properties":`+e[1]+`}`))
			ids, subjects, seqs = append(ids, id), append(subjects, "opencode."+host+".event."+e[0]), append(seqs, int64(i+1))
			if e[0] == protocol.EventSessionCreated {
				var p struct{ Info runtime.SessionInfo }
				_ = json.Unmarshal([]byte(e[1]), &p)
				fh.AddSession(p.Info)
			}
		}
	}
	n := len(bodies)
	b.report.Events, b.report.Sessions = int64(n), b.size.Sessions

	// The bare pipeline: the same events, a durable pull consumer, batched SQLite inserts,
	// ack after commit.
	base := "BASELINE"
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: base, Subjects: []string{"baseline.>"}, Storage: jetstream.FileStorage}); err != nil {
		return err
	}
	if err := publishAll(ctx, b.js, func(i int) string { return "baseline." + subjects[i] }, bodies, ids, nil); err != nil {
		return err
	}
	baseRate, err := b.bareDrain(ctx, base, n)
	if err != nil {
		return err
	}
	// The bare pipeline's stream is the bench's, not thatch's: it goes, with the broker's
	// record of its messages' ids (kept two minutes against duplicates: 14 MB of pointers
	// that every garbage collection of this process marked, until then, in the parts
	// after this one).
	if err := b.js.DeleteStream(ctx, base); err != nil {
		return err
	}
	b.say("bare pipeline: %.0f events/s", baseRate)

	// thatch: the same events, pre-loaded, then drained by the daemon with extraction
	// traffic answered by the fake hosts' model.
	if _, err := natsbus.EnsureStream(ctx, b.js, natsbus.StreamConfig{Stream: "OPENCODE_EVENTS", Prefix: "opencode"}); err != nil {
		return err
	}
	if err := publishAll(ctx, b.js, func(i int) string { return subjects[i] }, bodies, ids, seqs); err != nil {
		return err
	}
	// The drain has two phases: the pre-loaded stream (n events), and then the extraction
	// tail, whose tool calls had to wait for the events the stream held when they were
	// made (protocol §3). The process's CPU time over the tail says what it cost.
	var first, last, backlogAt, cpuAtBacklog, cpuAtLast atomic.Int64
	c, stop, err := b.startThatch("thatch", func(l *runtime.Loop) {
		l.OnCommit = func(a []runtime.Applied, at time.Time) {
			first.CompareAndSwap(0, at.UnixNano())
			last.Store(at.UnixNano())
			if a[len(a)-1].Seq >= uint64(n) && backlogAt.CompareAndSwap(0, at.UnixNano()) {
				cpuAtBacklog.Store(int64(processCPU()))
			}
			cpuAtLast.Store(int64(processCPU()))
		}
	})
	if err != nil {
		return err
	}
	// Drained: the consumer reached the stream's end, every host call was answered, and
	// that held across two looks (the model's replies add events).
	var st runtime.StatusView
	deadline := time.Now().Add(10 * time.Minute)
	stable := 0
	for stable < 2 {
		time.Sleep(100 * time.Millisecond)
		info, err := b.js.Stream(ctx, "OPENCODE_EVENTS")
		if err != nil {
			stop()
			return err
		}
		si, err := info.Info(ctx)
		if err != nil {
			stop()
			return err
		}
		if err := b.api("status", nil, &st); err == nil && st.LastStreamSeq == si.State.LastSeq && st.OutstandingCalls == 0 && st.Accepted == 0 {
			stable++
		} else {
			stable = 0
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("thatch did not drain the workload: %+v", st)
		}
	}
	elapsed := time.Duration(last.Load() - first.Load())
	rate := float64(st.Applied) / elapsed.Seconds()
	backlog := time.Duration(backlogAt.Load() - first.Load())
	b.say("thatch: %d events applied in %s: %.0f events/s (the pre-loaded %d in %s, then the extraction tail in %s)", st.Applied,
		elapsed.Round(time.Millisecond), rate, n, backlog.Round(time.Millisecond), (elapsed - backlog).Round(time.Millisecond))
	b.add(Figure{Name: "end-to-end throughput", Value: rate, Unit: "events/s", Baseline: baseRate, Target: "≥ 0.6 of baseline", Goal: ratioAtLeast(0.6),
		Definition: "events applied and committed per second, first commit to last, while draining a pre-loaded stream of the seeded workload, extraction traffic included; baseline: the same events through a bare durable pull consumer into SQLite batches, ack after commit"})
	children := 0
	for _, h := range hosts {
		children += len(h.CallsTo(protocol.MethodSessionCreate))
	}
	b.add(Figure{Name: "end-to-end: the pre-loaded events", Value: ms(backlog), Unit: "ms",
		Definition: fmt.Sprintf("of the end-to-end time, first commit to the commit of the last of the %d pre-loaded events", n)})
	b.add(Figure{Name: "end-to-end: the extraction tail", Value: ms(elapsed - backlog), Unit: "ms",
		Definition: fmt.Sprintf("of the end-to-end time, the rest: the extractions of %d children, whose tool calls waited for the pre-loaded events", children)})
	if children > 0 {
		b.add(Figure{Name: "CPU per extraction in the tail", Value: ms(time.Duration(cpuAtLast.Load()-cpuAtBacklog.Load())) / float64(children), Unit: "ms",
			Definition: "the bench process's CPU time over the extraction tail (thatch, the broker and the fake hosts with their model), per extraction child"})
	}
	if st.Applied != int64(st.LastStreamSeq) || st.Rejected != 0 {
		stop()
		return fmt.Errorf("applied %d of %d events (%d rejected)", st.Applied, st.LastStreamSeq, st.Rejected)
	}
	lost, err := b.reconcile(w, hosts)
	b.report.Lost = lost
	if serr := stop(); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	// The apply loop alone: the same stream drained by a fresh journal and consumer while
	// no host answers (no extraction traffic), like for like with the bare pipeline.
	for _, h := range hosts {
		h.Close()
	}
	applyRate, err := b.applyOnly(ctx, st.LastStreamSeq)
	if err != nil {
		return err
	}
	b.say("apply loop alone: %.0f events/s", applyRate)
	b.add(Figure{Name: "apply-loop throughput", Value: applyRate, Unit: "events/s", Baseline: baseRate, Target: "≥ 0.85 of baseline", Goal: ratioAtLeast(0.85),
		Definition: "the same stream drained by a fresh thatch while no host answers: events decoded, applied once, journaled with their outbox and acknowledged, without the extraction traffic"})

	size, live, mix := journalSize(filepath.Join(c.DataDir, "thatch.db"))
	b.report.JournalMix = mix
	per := func(n int64) float64 { return float64(n) / float64(b.size.Sessions) * 1000 / (1 << 20) }
	b.add(Figure{Name: "journal file", Value: per(size), Unit: "MiB per 1,000 sessions",
		Definition: "thatch.db (+WAL) on disk after the workload, per 1,000 of its sessions, before any sweep returned free pages"})
	b.add(Figure{Name: "journal live data", Value: per(live), Unit: "MiB per 1,000 sessions",
		Definition: "bytes in use in the journal's pages after the workload (what a sweep's incremental vacuum shrinks the file to); applied event ids, kept 8 days, are most of it"})
	return nil
}

// applyOnly drains the whole stream (n messages) with a fresh journal and consumer.
func (b *benchRun) applyOnly(ctx context.Context, n uint64) (float64, error) {
	var first, last atomic.Int64
	var applied atomic.Int64
	_, stop, err := b.startThatchAs("apply-only", "apply", func(l *runtime.Loop) {
		l.OnCommit = func(a []runtime.Applied, at time.Time) {
			first.CompareAndSwap(0, at.UnixNano())
			last.Store(at.UnixNano())
			applied.Add(int64(len(a)))
		}
	})
	if err != nil {
		return 0, err
	}
	defer stop()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var st runtime.StatusView
		if err := b.api("status", nil, &st); err == nil && st.LastStreamSeq >= n {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, errors.New("the apply-only run did not drain the stream")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return float64(applied.Load()) / time.Duration(last.Load()-first.Load()).Seconds(), nil
}

// reconcile checks that no buffered interaction vanished or was extracted twice: every
// entry of the workload was completed once by an extraction, or is still journaled for a
// live session, or went with its deleted session.
func (b *benchRun) reconcile(w *workload, hosts []*fakehost.Host) (lost int, err error) {
	extracted := map[string]int{}
	for _, h := range hosts {
		for id, n := range h.Extracted() {
			extracted[id] += n
		}
	}
	var problems []string
	for root, ids := range w.entries {
		var journaled []runtime.EntryView
		if !w.deleted[root] {
			if err := b.api("entries", map[string]any{"sessionID": root}, &journaled); err != nil {
				return 0, fmt.Errorf("entries of %s: %w", root, err)
			}
		}
		held := map[string]bool{}
		for _, e := range journaled {
			held[e.ID] = true
		}
		for _, id := range ids {
			switch n := extracted[id]; {
			case n > 1:
				problems = append(problems, id+" extracted twice")
			case n == 1 && held[id]:
				problems = append(problems, id+" extracted and still journaled")
			case n == 0 && !held[id] && !w.deleted[root]:
				lost++
				problems = append(problems, id+" lost")
			}
		}
	}
	if len(problems) > 0 {
		return lost, fmt.Errorf("%d problems, first: %s", len(problems), strings.Join(problems[:min(5, len(problems))], "; "))
	}
	return 0, nil
}

// bareDrain consumes n messages of stream into SQLite batches, acking after each commit.
func (b *benchRun) bareDrain(ctx context.Context, stream string, n int) (float64, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(b.dir, "bare.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE events (id TEXT PRIMARY KEY, subject TEXT, body BLOB)`); err != nil {
		return 0, err
	}
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	cons, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "bare", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4096})
	if err != nil {
		return 0, err
	}
	msgs := make(chan jetstream.Msg, 1024)
	cc, err := cons.Consume(func(m jetstream.Msg) { msgs <- m }, jetstream.PullMaxMessages(1024))
	if err != nil {
		return 0, err
	}
	defer cc.Stop()
	start := time.Now()
	done := 0
	for done < n {
		batch := []jetstream.Msg{<-msgs}
	drain:
		for len(batch) < 512 {
			select {
			case m := <-msgs:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		tx, err := db.Begin()
		if err != nil {
			return 0, err
		}
		for _, m := range batch {
			var id struct{ ID string }
			_ = json.Unmarshal(m.Data(), &id)
			if _, err := tx.Exec(`INSERT OR IGNORE INTO events (id, subject, body) VALUES (?, ?, ?)`, id.ID, m.Subject(), m.Data()); err != nil {
				tx.Rollback()
				return 0, err
			}
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
		for _, m := range batch {
			_ = m.Ack()
		}
		done += len(batch)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// journalSize returns the journal's size on disk, the bytes in use, and the largest tables.
func journalSize(path string) (file, live int64, mix []string) {
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			file += fi.Size()
		}
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return file, 0, nil
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name, sum(pgsize - unused) FROM dbstat GROUP BY name ORDER BY 2 DESC`)
	if err != nil {
		return file, 0, nil
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var size int64
		if rows.Scan(&name, &size) == nil {
			live += size
			if len(mix) < 5 {
				mix = append(mix, fmt.Sprintf("%s %.2f MiB", name, float64(size)/(1<<20)))
			}
		}
	}
	return file, live, mix
}

// processCPU is the CPU time this process used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
