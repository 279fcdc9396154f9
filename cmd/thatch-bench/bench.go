package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// benchSize is the scale of one benchmark run.
type benchSize struct {
	Hosts, Sessions     int // throughput workload
	LatencySeconds      int // at the fixed offered load
	ToolCalls           int // per caller
	RehydrateSessions   int
	RehydrateEntries    int
	SweepRows           int
	OfferedEventsPerSec int
	ToolCallers         int
	Memories            int // memory store size
	MemoryProjects      int
	MemoryCallers       int
	MemoryCalls         int // per caller and phase
	UISessions          int // the operator's page: live sessions
	UIMemories          int // and memories
	TeamSeconds         int // of replication at TeamRate changes/s
	TeamBackfill        int // memories a new teammate receives
}

var (
	fullSize  = benchSize{4, 2000, 10, 200, 100_000, 1_000_000, 100_000, 5000, 50, 100_000, 100, 10, 100, 10_000, 10_000, 20, 100_000}
	quickSize = benchSize{2, 60, 1, 10, 2_000, 20_000, 2_000, 2000, 10, 2_000, 10, 2, 10, 500, 500, 2, 500}
)

// Figure is one measured figure with its definition.
type Figure struct {
	Name       string  `json:"name"`
	Value      float64 `json:"value"`
	Unit       string  `json:"unit"`
	Baseline   float64 `json:"baseline,omitempty"`
	Ratio      float64 `json:"ratio,omitempty"`
	Target     string  `json:"target,omitempty"`
	Definition string  `json:"definition"`
}

// BenchReport is what thatch-bench writes.
type BenchReport struct {
	Quick      bool      `json:"quick"`
	Seed       uint64    `json:"seed"`
	Started    time.Time `json:"started"`
	GoVersion  string    `json:"goVersion"`
	CPUs       int       `json:"cpus"`
	Events     int64     `json:"events"`
	Sessions   int       `json:"sessions"`
	Lost       int       `json:"entriesLost"`
	Figures    []Figure  `json:"figures"`
	JournalMix []string  `json:"journalMix,omitempty"`
}

// bench runs the benchmark with the command line's flags, printing its figures to out and
// what it is doing to progress (none when nil).
func bench(ctx context.Context, args []string, out io.Writer, progress io.Writer) error {
	fs := flag.NewFlagSet("thatch-bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "a short run that checks correctness only")
	outPath := fs.String("out", "", "write the JSON report here")
	seed := fs.Uint64("seed", 1, "workload seed")
	only := fs.String("only", "", "run some parts, comma-separated: throughput, latency, tools, rehydrate, status, sweep, memory, ui, team")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run here")
	blockprofile := fs.String("blockprofile", "", "write a blocking profile (where goroutines waited) of the run here")
	mutexprofile := fs.String("mutexprofile", "", "write a mutex contention profile of the run here")
	memprofile := fs.String("memprofile", "", "write an allocation profile (what allocated how much, from where) of the run here")
	soakFor := fs.Duration("soak", 0, "instead of the figures, soak for this long, sampling memory and goroutines")
	thatchBin := fs.String("thatch", "", "the thatch binary --soak runs (default: the thatch next to thatch-bench)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: thatch-bench [flags]\n  measure thatch against the bare pipeline (see docs/performance.md)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("thatch-bench takes no arguments, got %q", fs.Args())
	}
	size := fullSize
	if *quick {
		size = quickSize
	}
	dir, err := os.MkdirTemp("", "thatch-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for _, p := range []struct {
		path, name string
		on         func()
	}{
		{*blockprofile, "block", func() { goruntime.SetBlockProfileRate(blockRate) }}, // again once the broker runs: run
		{*mutexprofile, "mutex", func() { goruntime.SetMutexProfileFraction(10) }},
		{*memprofile, "allocs", func() {}}, // at the default rate, one sample per 512 KB allocated
	} {
		if p.path == "" {
			continue
		}
		p.on()
		defer writeProfile(p.name, p.path)
	}
	if *soakFor > 0 {
		b := &benchRun{dir: dir, seed: *seed, progress: progress}
		return b.soak(ctx, *soakFor, *thatchBin, out)
	}
	b := &benchRun{size: size, dir: dir, seed: *seed, progress: progress, only: *only, cpuprofile: *cpuprofile, blockprofile: *blockprofile != "",
		report: BenchReport{Quick: *quick, Seed: *seed, Started: time.Now().UTC(), GoVersion: goVersion(), CPUs: cpus()}}
	if err := b.run(ctx); err != nil {
		return err
	}
	b.print(out)
	if *outPath != "" {
		data, _ := json.MarshalIndent(b.report, "", "  ")
		if err := os.WriteFile(*outPath, append(data, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nreport written to %s\n", *outPath)
	}
	return nil
}

// blockRate is the blocking profile's rate (one event sampled per 100 µs spent blocked).
const blockRate = int(100 * time.Microsecond)

// writeProfile writes the named runtime profile (block, mutex, allocs) to path.
func writeProfile(name, path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "thatch-bench:", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, "thatch-bench:", err)
	}
}

type benchRun struct {
	only         string
	cpuprofile   string
	blockprofile bool // the embedded broker turns the blocking profile off when it starts: run turns it on again
	size         benchSize
	dir          string
	seed         uint64
	progress     io.Writer
	report       BenchReport
	ns           *server.Server
	token        string // the bench broker's
	nc           *nats.Conn
	js           jetstream.JetStream
}

func (b *benchRun) say(format string, args ...any) {
	if b.progress != nil {
		fmt.Fprintf(b.progress, "  "+format+"\n", args...)
	}
}

func (b *benchRun) add(f Figure) {
	if f.Baseline > 0 && f.Ratio == 0 {
		f.Ratio = f.Value / f.Baseline
	}
	b.report.Figures = append(b.report.Figures, f)
}

func (b *benchRun) run(ctx context.Context) error {
	ns, err := b.startBroker()
	if err != nil {
		return err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	b.ns = ns
	if b.blockprofile {
		goruntime.SetBlockProfileRate(blockRate)
	}
	if b.nc, err = nats.Connect(ns.ClientURL(), natsbus.AuthOptions("", b.token, nil)...); err != nil {
		return err
	}
	defer b.nc.Close()
	if b.js, err = jetstream.New(b.nc); err != nil {
		return err
	}
	steps := []struct {
		key, name string
		fn        func(context.Context) error
	}{
		{"throughput", "throughput (thatch and the bare pipeline)", b.throughput},
		{"latency", "latency at a fixed offered load", b.latency},
		{"tools", "tool-call latency", b.toolLatency},
		{"rehydrate", "rehydrate", b.rehydrate},
		{"status", "status at 1,000,000 entries", b.statusLatency},
		{"sweep", "strand-sweep planning", b.sweepPlanning},
		{"memory", "memory store", b.memoryBench},
		{"ui", "the operator's page", b.uiBench},
		{"team", "team memory over a 3-node cluster", b.teamBench},
	}
	for _, s := range steps {
		if b.only != "" && !slices.Contains(strings.Split(b.only, ","), s.key) {
			continue
		}
		b.say("%s…", s.name)
		settle()
		var err error
		// The step's goroutines (its thatch, callers and hosts) carry its name in the
		// profiles: go tool pprof -tagfocus step=tools.
		pprof.Do(ctx, pprof.Labels("step", s.key), func(ctx context.Context) { err = s.fn(ctx) })
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// settle writes the dirty pages of the page cache back before a part's figures are taken:
// the bench's own set-up writes hundreds of megabytes (up to 500 MB were dirty at once
// while the 1,000,000-entry journal was built), and a part's figures should not carry the
// writeback of another's. (The memory figures did not change measurably with it.) It also
// collects the garbage the parts before left, and gives its memory back: one process runs
// the thatch of each part in turn, and the status part's, stopped, left the state of a
// million entries to collect and some 100 MB to scavenge while the memory part measured; a
// thatch process carries only its own.
func settle() {
	syscall.Sync()
	debug.FreeOSMemory()
}

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

// startBroker starts the bench's own broker, which like thatch's requires a token (§7):
// the bench's hosts and thatch get it, no other account on the machine does.
func (b *benchRun) startBroker() (*server.Server, error) {
	var err error
	if b.token, err = natsbus.NewToken(); err != nil {
		return nil, err
	}
	return natsbus.StartBroker(natsbus.BrokerConfig{Listen: "127.0.0.1:-1", Dir: filepath.Join(b.dir, "broker"), Token: b.token})
}

// startThatch runs the daemon's own wiring (daemon.ServeWith, what thatch serve runs) in
// this process against the bench broker, so that tune can observe its loop's commits.
func (b *benchRun) startThatch(name string, tune func(*runtime.Loop)) (daemon.Config, func() error, error) {
	return b.startThatchAs(name, "thatch", tune)
}

// startThatchAs is startThatch with a consumer name of its own.
func (b *benchRun) startThatchAs(name, consumer string, tune func(*runtime.Loop)) (daemon.Config, func() error, error) {
	c, err := daemon.LoadConfig()
	if err != nil {
		return c, nil, err
	}
	c.DataDir, c.NATSURL, c.InstallCommands, c.StrandSweep = filepath.Join(b.dir, name), b.ns.ClientURL(), false, false
	c.NATSToken = b.token
	c.Consumer = consumer
	c.HTTPListen = "off" // the bench's own figures; a thatch of the user's may hold 127.0.0.1:4224
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.ServeWith(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil)), tune) }()
	stop := func() error { cancel(); return <-done }
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st runtime.StatusView
		if err := b.api("status", nil, &st); err == nil {
			return c, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return c, nil, errors.New("thatch did not become ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// api calls a method of the API of the thatch the bench started, as the tests' rig does.
func (b *benchRun) api(method string, params, out any) error {
	return daemon.API{NC: b.nc, Prefix: "thatch", Timeout: 5 * time.Second}.Call(context.Background(), method, params, out)
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
	var first, last atomic.Int64
	c, stop, err := b.startThatch("thatch", func(l *runtime.Loop) {
		l.OnCommit = func(a []runtime.Applied, at time.Time) {
			first.CompareAndSwap(0, at.UnixNano())
			last.Store(at.UnixNano())
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
	b.say("thatch: %d events applied in %s: %.0f events/s", st.Applied, elapsed.Round(time.Millisecond), rate)
	b.add(Figure{Name: "end-to-end throughput", Value: rate, Unit: "events/s", Baseline: baseRate, Target: "≥ 0.6 of baseline",
		Definition: "events applied and committed per second, first commit to last, while draining a pre-loaded stream of the seeded workload, extraction traffic included; baseline: the same events through a bare durable pull consumer into SQLite batches, ack after commit"})
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
	b.add(Figure{Name: "apply-loop throughput", Value: applyRate, Unit: "events/s", Baseline: baseRate, Target: "≥ 0.85 of baseline",
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

// latency offers tool.execute.after events at a fixed rate and measures publish → commit.
func (b *benchRun) latency(ctx context.Context) error {
	published := sync.Map{}
	var mu sync.Mutex
	var lat []time.Duration
	_, stop, err := b.startThatch("latency", func(l *runtime.Loop) {
		l.OnCommit = func(a []runtime.Applied, at time.Time) {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range a {
				if t0, ok := published.LoadAndDelete(e.ID); ok {
					lat = append(lat, at.Sub(t0.(time.Time)))
				}
			}
		}
	})
	if err != nil {
		return err
	}
	defer stop()
	fh, err := fakehost.New(b.nc, "lat", "v1")
	if err != nil {
		return err
	}
	defer fh.Close()
	for s := range 100 {
		if err := fh.Created(ctx, fmt.Sprintf("ses_lat_%03d", s), "", "t", os.TempDir()); err != nil {
			return err
		}
	}
	rate := b.size.OfferedEventsPerSec
	total := rate * b.size.LatencySeconds
	const tick = 10 * time.Millisecond
	per := rate / int(time.Second/tick)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	output := strings.Repeat("o", 900)
	var futures []jetstream.PubAckFuture
	for i := 0; i < total; {
		<-ticker.C
		for j := 0; j < per && i < total; j, i = j+1, i+1 {
			id := fmt.Sprintf("evt_lat_%07d", i)
			body := fmt.Sprintf(`{"id":%q,"type":"tool.execute.after","properties":{"sessionID":"ses_lat_%03d","callID":"c%d","tool":"bash","args":{},"output":%q}}`, id, i%100, i, output)
			m := nats.NewMsg("opencode.lat.event.tool.execute.after")
			m.Data = []byte(body)
			m.Header.Set(jetstream.MsgIDHeader, id)
			published.Store(id, time.Now())
			f, err := b.js.PublishMsgAsync(m)
			if err != nil {
				return err
			}
			futures = append(futures, f)
		}
		// An acknowledged publish goes: each future holds its message, and keeping all
		// 50,000 (80 MB) made every collection of this process, thatch's included, mark them.
		acked := 0
		for _, f := range futures {
			select {
			case <-f.Ok():
				acked++
				continue
			case err := <-f.Err():
				return err
			default:
			}
			break
		}
		futures = slices.Delete(futures, 0, acked)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		got := len(lat)
		mu.Unlock()
		if got >= total {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d events committed", got, total)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p50, p99 := percentiles(lat)
	b.say("publish → commit at %d events/s: p50 %s, p99 %s", rate, p50, p99)
	b.add(Figure{Name: "publish → commit p50", Value: ms(p50), Unit: "ms", Definition: fmt.Sprintf("time from a host's JetStream publish to thatch's commit of the event, at %d tool events/s offered for %ds", rate, b.size.LatencySeconds)})
	b.add(Figure{Name: "publish → commit p99", Value: ms(p99), Unit: "ms", Target: "< 15 ms", Definition: "as above, 99th percentile"})
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}

// toolLatency measures thatch_get_extraction_payload with concurrent callers, each for
// its own session holding 10 entries.
func (b *benchRun) toolLatency(ctx context.Context) error {
	_, stop, err := b.startThatch("tools", nil)
	if err != nil {
		return err
	}
	defer stop()
	fh, err := fakehost.New(b.nc, "tools", "v1")
	if err != nil {
		return err
	}
	defer fh.Close()
	callers := b.size.ToolCallers
	for s := range callers {
		sid := fmt.Sprintf("ses_tool_%03d", s)
		if err := fh.Created(ctx, sid, "", "t", os.TempDir()); err != nil {
			return err
		}
		for c := range 10 {
			if err := fh.ToolExecuted(ctx, sid, fmt.Sprintf("%s_c%d", sid, c), "bash", strings.Repeat("o", 1500)); err != nil {
				return err
			}
		}
	}
	// Closed loop (no pause between calls) measures capacity; paced (each caller 20 calls/s,
	// 1,000 calls/s in all with 50 callers) measures latency under a load the machine
	// carries.
	for _, paced := range []bool{false, true} {
		lat, elapsed, err := b.callTools(ctx, fh, callers, paced)
		if err != nil {
			return err
		}
		p50, p99 := percentiles(lat)
		if !paced {
			rate := float64(len(lat)) / elapsed.Seconds()
			b.say("%s closed loop, %d callers: %.0f calls/s, p50 %s, p99 %s", runtime.ToolPayload, callers, rate, p50, p99)
			b.add(Figure{Name: "tool calls, closed loop", Value: rate, Unit: "calls/s", Definition: fmt.Sprintf("%s round trips over NATS per second, %d callers calling back to back, each for its session of 10 entries of 1.5 KB (client and server share the machine)", runtime.ToolPayload, callers)})
			b.add(Figure{Name: "tool call p99, closed loop", Value: ms(p99), Unit: "ms", Definition: "as above: latency at saturation, queueing included"})
			continue
		}
		b.say("%s paced, %d callers at 20 calls/s each: p50 %s, p99 %s", runtime.ToolPayload, callers, p50, p99)
		b.add(Figure{Name: "tool call p50", Value: ms(p50), Unit: "ms", Definition: fmt.Sprintf("%s round trip over NATS, %d concurrent callers each calling 20 times a second, 10 entries of 1.5 KB each", runtime.ToolPayload, callers)})
		b.add(Figure{Name: "tool call p99", Value: ms(p99), Unit: "ms", Target: "< 5 ms", Definition: "as above, 99th percentile"})
	}
	return nil
}

// callTools has each caller call the payload tool for its own session.
func (b *benchRun) callTools(ctx context.Context, fh *fakehost.Host, callers int, paced bool) ([]time.Duration, time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	start := time.Now()
	for s := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := fmt.Sprintf("ses_tool_%03d", s)
			req, _ := json.Marshal(map[string]any{"sessionID": sid, "args": map[string]any{}})
			want := []byte(`{"result":{"output":"10 tool interactions of session ` + sid + ` to extract memories from.\n`)
			next := time.Now().Add(time.Duration(s) * time.Millisecond) // spread the callers' phases
			for range b.size.ToolCalls {
				if paced {
					time.Sleep(time.Until(next))
					next = next.Add(50 * time.Millisecond)
				}
				t0 := time.Now()
				msg, err := fh.NC.RequestWithContext(ctx, "thatch.tool."+runtime.ToolPayload, req)
				d := time.Since(t0)
				if err != nil {
					errs <- fmt.Errorf("tool call for %s: %v", sid, err)
					return
				}
				// The answer's bytes are checked, not decoded: decoding took a third of this
				// process's allocations, which a real caller, another process, does not add
				// to thatch's collections.
				if !bytes.HasPrefix(msg.Data, want) || !bytes.HasSuffix(msg.Data, []byte("}}")) {
					_, herr, err := protocol.Decode(msg.Data)
					errs <- fmt.Errorf("tool call for %s did not return its 10 entries: %v %v %.300s", sid, err, herr, msg.Data)
					return
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, 0, err
	}
	return lat, time.Since(start), nil
}

// rehydrate builds a journal of many sessions and pending entries and measures, in a
// child process so its memory is its own, how long loading it takes and the peak RSS.
func (b *benchRun) rehydrate(ctx context.Context) error {
	path := filepath.Join(b.dir, "big", "thatch.db")
	if err := b.bigJournal(path); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	return b.runRehydrateChild(ctx, self, path, b.size.RehydrateEntries/b.size.RehydrateSessions)
}

// bigJournal writes, unless path holds it already, the journal of the rehydrate and status
// figures: RehydrateSessions idle sessions holding RehydrateEntries pending entries in all.
func (b *benchRun) bigJournal(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	store, err := journal.Open(path)
	if err != nil {
		return err
	}
	st := runtime.NewState()
	per := b.size.RehydrateEntries / b.size.RehydrateSessions
	now := time.Now()
	const chunk = 2000
	for s0 := 0; s0 < b.size.RehydrateSessions; s0 += chunk {
		fx := runtime.NewEffects()
		for s := s0; s < min(s0+chunk, b.size.RehydrateSessions); s++ {
			sid := fmt.Sprintf("ses_%07d", s)
			sess := &runtime.Session{ID: sid, HostID: "h1", Kind: runtime.KindTop, Status: runtime.StatusIdle, Directory: os.TempDir(), Title: "t", Touched: now}
			st.Sessions[sid] = sess
			fx.Sessions[sid] = true
			for e := range per {
				id := fmt.Sprintf("call_%07d_%03d", s, e)
				fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryInsert, Root: sid, ID: id, At: now,
					Body: &runtime.Body{Tool: "bash", Args: json.RawMessage(`{"command":"go test ./..."}`), Output: strings.Repeat("o", 200)}})
			}
		}
		if err := store.Commit(&runtime.Batch{Now: now, State: st, Effects: fx}); err != nil {
			store.Close()
			return err
		}
		for id := range fx.Sessions {
			delete(st.Sessions, id) // keep the generator's own memory flat
		}
		if s0%(chunk*10) == 0 {
			b.say("journal: %d/%d sessions written", s0, b.size.RehydrateSessions)
		}
	}
	return store.Close()
}

// statusLatency measures the status method (what an operator's status command and the
// readiness check ask) on a thatch serving the journal of the rehydrate figure, 1,000,000
// entries, with callers asking 20 times a second each.
func (b *benchRun) statusLatency(ctx context.Context) error {
	if err := b.bigJournal(filepath.Join(b.dir, "big", "thatch.db")); err != nil {
		return err
	}
	t0 := time.Now()
	_, stop, err := b.startThatch("big", nil)
	if err != nil {
		return err
	}
	defer stop()
	b.say("thatch on %d entries ready in %s", b.size.RehydrateEntries, time.Since(t0).Round(time.Millisecond))
	lat, err := pacedCalls(b.size.MemoryCallers, b.size.MemoryCalls, 20, func(string, int) error {
		var st runtime.StatusView
		if err := b.api("status", nil, &st); err != nil {
			return err
		}
		if st.Pending != b.size.RehydrateEntries {
			return fmt.Errorf("status says %d pending entries, want %d", st.Pending, b.size.RehydrateEntries)
		}
		return nil
	})
	if err != nil {
		return err
	}
	p50, p99 := percentiles(lat)
	b.say("status at %d entries, %d callers at 20 calls/s each: p50 %s, p99 %s", b.size.RehydrateEntries, b.size.MemoryCallers, p50, p99)
	def := fmt.Sprintf("the status method over NATS on a thatch serving %d sessions and %d pending entries, %d callers each asking 20 times a second", b.size.RehydrateSessions, b.size.RehydrateEntries, b.size.MemoryCallers)
	b.add(Figure{Name: "status p50", Value: ms(p50), Unit: "ms", Definition: def})
	b.add(Figure{Name: "status p99", Value: ms(p99), Unit: "ms", Target: "< 10 ms at 1M entries", Definition: "as above, 99th percentile"})
	return nil
}

// runRehydrateChild loads the journal at path in a child process and reports the figure.
func (b *benchRun) runRehydrateChild(ctx context.Context, self, path string, per int) error {
	args := []string{rehydrateChild, path}
	if b.cpuprofile != "" {
		args = append(args, b.cpuprofile+".rehydrate")
	}
	out, err := exec.CommandContext(ctx, self, args...).Output()
	if err != nil {
		return fmt.Errorf("rehydrate child: %w", err)
	}
	var r struct {
		Ms       float64 `json:"ms"`
		RSSMiB   float64 `json:"rssMiB"`
		Sessions int     `json:"sessions"`
		Entries  int     `json:"entries"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return fmt.Errorf("rehydrate child said %q: %w", out, err)
	}
	if r.Sessions != b.size.RehydrateSessions || r.Entries != per*b.size.RehydrateSessions {
		return fmt.Errorf("rehydrate loaded %d sessions and %d entries, want %d and %d", r.Sessions, r.Entries, b.size.RehydrateSessions, per*b.size.RehydrateSessions)
	}
	b.say("rehydrate of %d sessions / %d entries: %.0f ms, peak RSS %.0f MiB", r.Sessions, r.Entries, r.Ms, r.RSSMiB)
	scale := fmt.Sprintf("%d sessions and %d pending entries", r.Sessions, r.Entries)
	b.add(Figure{Name: "rehydrate time", Value: r.Ms, Unit: "ms", Target: "< 2 s at 100k/1M", Definition: "journal.Load of " + scale + ", in a fresh process"})
	b.add(Figure{Name: "rehydrate peak RSS", Value: r.RSSMiB, Unit: "MiB", Target: "< 150 MB at 100k/1M", Definition: "that process's peak resident set (VmHWM) after loading " + scale})
	return nil
}

// benchRehydrate is the child process of the rehydrate figure: thatch-bench rehydrate-child
// JOURNAL [CPUPROFILE].
func benchRehydrate(path, profile string, out io.Writer) error {
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	store, err := journal.Open(path)
	if err != nil {
		return err
	}
	defer store.Close()
	store.BeforeLoad = daemon.BoundLoadHeap // as thatch serve loads
	t0 := time.Now()
	st, _, _, err := store.Load()
	if err != nil {
		return err
	}
	elapsed := time.Since(t0)
	entries := 0
	for _, s := range st.Sessions {
		entries += len(s.Entries)
	}
	return json.NewEncoder(out).Encode(map[string]any{"ms": ms(elapsed), "rssMiB": procStatusMiB("self", "VmHWM"), "sessions": len(st.Sessions), "entries": entries})
}

// procStatusMiB reads a memory field (VmHWM, VmRSS) of a process from /proc, in MiB.
func procStatusMiB(pid, field string) float64 {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(rest), "%f", &kb)
			return kb / 1024
		}
	}
	return 0
}

// sweepPlanning times PlanStrandActions over many session rows.
func (b *benchRun) sweepPlanning(context.Context) error {
	rows := make([]runtime.SessionInfo, b.size.SweepRows)
	for i := range rows {
		dir := fmt.Sprintf("/work/tree%03d", i%200)
		rows[i] = runtime.SessionInfo{ID: fmt.Sprintf("ses_%07d", i), Directory: dir, ProjectID: "p1", Title: "t"}
		if i%10 == 0 {
			rows[i].Title, rows[i].ParentID = runtime.ExtractionTitle, "ses_0000000"
		}
	}
	gone := func(d string) bool { return d >= "/work/tree180" } // a tenth of the trees are gone
	worktrees := map[string]string{"p1": "/work/main"}
	exists := func(d string) bool { return d == "/work/main" || !gone(d) }
	best := time.Duration(1 << 62)
	var actions []runtime.StrandAction
	for range 5 {
		t0 := time.Now()
		actions = runtime.PlanStrandActions(rows, exists, worktrees, true)
		best = min(best, time.Since(t0))
	}
	b.say("planned %d rows into %d actions in %s", len(rows), len(actions), best)
	b.add(Figure{Name: "strand-sweep planning", Value: ms(best), Unit: "ms", Target: "< 200 ms for 100k rows",
		Definition: fmt.Sprintf("PlanStrandActions over %d session rows, a tenth in missing directories (best of 5; directory checks are cached lookups)", len(rows))})
	return nil
}

func (b *benchRun) print(w io.Writer) {
	fmt.Fprintf(w, "\nthatch-bench (seed %d, %d CPUs, %s): %d events, %d sessions, %d entries lost\n\n",
		b.report.Seed, b.report.CPUs, b.report.GoVersion, b.report.Events, b.report.Sessions, b.report.Lost)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tVALUE\tBASELINE\tRATIO\tTARGET")
	for _, f := range b.report.Figures {
		base, ratio := "", ""
		if f.Baseline > 0 {
			base, ratio = fmt.Sprintf("%.0f %s", f.Baseline, f.Unit), fmt.Sprintf("%.2f", f.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%.2f %s\t%s\t%s\t%s\n", f.Name, f.Value, f.Unit, base, ratio, f.Target)
	}
	tw.Flush()
	if len(b.report.JournalMix) > 0 {
		fmt.Fprintf(w, "\njournal by table: %s\n", strings.Join(b.report.JournalMix, ", "))
	}
}

func goVersion() string { return goruntime.Version() }
func cpus() int         { return goruntime.NumCPU() }

// soak runs thatch serve, the thatch binary at bin (the one next to thatch-bench when ""),
// as its own process against the bench broker, plays the workload in paced rounds (20
// sessions a second, extractions included) with sweeps on a short timer, and samples that
// process's memory, goroutines and journal every 10 s: what grows without bound shows here
// (thatch-bench --soak 10m).
func (b *benchRun) soak(ctx context.Context, d time.Duration, bin string, out io.Writer) error {
	ns, err := b.startBroker()
	if err != nil {
		return err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if b.nc, err = nats.Connect(ns.ClientURL(), natsbus.AuthOptions("", b.token, nil)...); err != nil {
		return err
	}
	defer b.nc.Close()
	work, data := filepath.Join(b.dir, "work"), filepath.Join(b.dir, "soak")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		bin = filepath.Join(filepath.Dir(self), "thatch")
	}
	cmd := exec.CommandContext(ctx, bin, "serve")
	cmd.Env = append(os.Environ(), "THATCH_NATS_URL="+ns.ClientURL(), "THATCH_NATS_TOKEN="+b.token, "THATCH_DATA_DIR="+data, "THATCH_INSTALL_COMMANDS=off",
		"THATCH_STRAND_SWEEP_MS=5000", "THATCH_RUNTIME_STATE_TTL_MS=60000", "THATCH_LOG_LEVEL=error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start thatch serve: %w (make build puts thatch next to thatch-bench; --thatch names another)", err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); b.api("status", nil, new(runtime.StatusView)) != nil; {
		if time.Now().After(deadline) {
			return errors.New("thatch serve did not become ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	fh, err := fakehost.New(b.nc, "soak", "v1")
	if err != nil {
		return err
	}
	defer fh.Close()
	fh.Model, fh.Dir, fh.FailEvery = true, work, 7
	if err := fh.Hello(ctx, "b1"); err != nil {
		return err
	}
	fmt.Fprintf(out, "%8s %9s %9s %9s %9s %11s %12s\n", "elapsed", "applied", "sessions", "pending", "RSS MiB", "goroutines", "journal MiB")
	sample := func(elapsed time.Duration) {
		var st runtime.StatusView
		_ = b.api("status", nil, &st)
		size, _, _ := journalSize(filepath.Join(data, "thatch.db"))
		fmt.Fprintf(out, "%8s %9d %9d %9d %9.1f %11d %12.1f\n", elapsed.Round(time.Second), st.Applied, st.Sessions, st.Pending,
			procStatusMiB(fmt.Sprint(cmd.Process.Pid), "VmRSS"), st.Goroutines, float64(size)/(1<<20))
	}
	rng := rand.New(rand.NewPCG(b.seed, 3))
	start, next := time.Now(), time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for round := 0; time.Since(start) < d && ctx.Err() == nil; round++ {
		w := &workload{entries: map[string][]string{}, deleted: map[string]bool{}}
		for _, e := range workloadEvents(rng, fmt.Sprintf("r%05d", round), 20, work, w) {
			var props map[string]any
			_ = json.Unmarshal([]byte(e[1]), &props)
			if e[0] == protocol.EventSessionCreated {
				info, _ := props["info"].(map[string]any)
				fh.AddSession(runtime.SessionInfo{ID: fmt.Sprint(info["id"]), Title: fmt.Sprint(info["title"]), Directory: work})
			}
			if _, err := fh.Publish(ctx, e[0], props); err != nil {
				return err
			}
		}
		if time.Now().After(next) {
			sample(time.Since(start))
			next = next.Add(10 * time.Second)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	sample(time.Since(start))
	return nil
}
