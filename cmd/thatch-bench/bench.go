package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime"
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
	MillionMemories     int // the large memory store (a fixture)
	MillionProjects     int
	MCPCalls            int // per MCP tool
}

var (
	fullSize  = benchSize{4, 2000, 10, 200, 100_000, 1_000_000, 100_000, 5000, 50, 100_000, 100, 10, 100, 10_000, 10_000, 20, 100_000, 1_000_000, 100, 400}
	quickSize = benchSize{2, 60, 1, 10, 2_000, 20_000, 2_000, 2000, 10, 2_000, 10, 2, 10, 500, 500, 2, 500, 5_000, 10, 20}
)

// bench runs the benchmark with the command line's flags, printing its figures to out and
// what it is doing to progress (none when nil).
func bench(ctx context.Context, args []string, out io.Writer, progress io.Writer) error {
	fs := flag.NewFlagSet("thatch-bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "a short run that checks correctness only")
	outPath := fs.String("out", "", "write the JSON report here")
	seed := fs.Uint64("seed", 1, "workload seed")
	only := fs.String("only", "", "run some parts, comma-separated: "+onlyNames)
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run here")
	blockprofile := fs.String("blockprofile", "", "write a blocking profile (where goroutines waited) of the run here")
	mutexprofile := fs.String("mutexprofile", "", "write a mutex contention profile of the run here")
	memprofile := fs.String("memprofile", "", "write an allocation profile (what allocated how much, from where) of the run here")
	soakFor := fs.Duration("soak", 0, "instead of the figures, soak for this long, sampling memory and goroutines")
	thatchBin := fs.String("thatch", "", "the thatch binary that --soak and the mcp part run (default: the thatch next to thatch-bench, else one built with go build)")
	runs := fs.Int("runs", 1, "run the whole bench this many times, each in fresh folders, and print a summary; exit non-zero when any run misses a target")
	fixturesDir := fs.String("fixtures", "", "build the fixtures every run copies (the rehydrate journal, the large memory store) in this folder and keep them for the next invocation (default: a temporary folder, once per invocation)")
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
	for _, part := range strings.Split(*only, ",") {
		if part != "" && !slices.Contains(strings.Split(onlyNames, ", "), part) {
			return fmt.Errorf("--only: no part %q; the parts are %s", part, onlyNames)
		}
	}
	size := fullSize
	if *quick {
		size = quickSize
	}
	if *runs < 1 {
		return fmt.Errorf("--runs takes a number of runs, 1 or more, got %d", *runs)
	}
	// What every run reads and none changes (the rehydrate journal, the large memory
	// store) is built once per invocation, here, and copied into each run's folder.
	fixtures := *fixturesDir
	if fixtures == "" {
		dir, err := os.MkdirTemp("", "thatch-bench-fixtures")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fixtures = dir
	} else if err := os.MkdirAll(fixtures, 0o755); err != nil {
		return err
	}
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
		dir, err := os.MkdirTemp("", "thatch-bench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		b := &benchRun{dir: dir, seed: *seed, progress: progress}
		return b.soak(ctx, *soakFor, *thatchBin, out)
	}
	var reports []BenchReport
	for i := range *runs {
		r, err := benchOnce(ctx, benchRun{size: size, fixtures: fixtures, seed: *seed, progress: progress, only: *only, cpuprofile: *cpuprofile,
			blockprofile: *blockprofile != "", thatchBin: *thatchBin,
			report: BenchReport{Quick: *quick, Seed: *seed, GoVersion: goVersion(), CPUs: cpus()}}, i+1, *runs)
		if err != nil {
			return err
		}
		printReport(out, r)
		reports = append(reports, r)
	}
	var result any = reports[0]
	summary := summarize(reports)
	if *runs > 1 {
		printSummary(out, summary)
		result = summary
	}
	if *outPath != "" {
		data, _ := json.MarshalIndent(result, "", "  ")
		if err := os.WriteFile(*outPath, append(data, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nreport written to %s\n", *outPath)
	}
	// --quick checks correctness only: its figures, at its small sizes, have no targets
	// to meet.
	if !*quick && len(summary.Missed) > 0 {
		return fmt.Errorf("%d figures missed their targets:\n  %s", len(summary.Missed), strings.Join(summary.Missed, "\n  "))
	}
	return nil
}

// benchOnce runs the bench once, in a folder of its own, and returns its report.
func benchOnce(ctx context.Context, b benchRun, run, runs int) (BenchReport, error) {
	dir, err := os.MkdirTemp("", "thatch-bench")
	if err != nil {
		return BenchReport{}, err
	}
	defer os.RemoveAll(dir)
	b.dir = dir
	if runs > 1 {
		b.report.Run = run
		b.say("run %d of %d…", run, runs)
	}
	b.report.Started = time.Now().UTC()
	err = b.run(ctx)
	b.report.Seconds = time.Since(b.report.Started).Seconds()
	if err != nil && runs > 1 {
		err = fmt.Errorf("run %d: %w", run, err)
	}
	return b.report, err
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
	fixtures     string        // built once per invocation, copied into dir
	fixtureTime  time.Duration // spent building fixtures in the part that runs
	thatchBin    string
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
	b.report.Figures = append(b.report.Figures, judge(f))
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
	// The client's default bound on unacknowledged asynchronous publishes (4,000) is below
	// publishAll's window (4,096): on a busy machine a publish stalled past its wait and
	// failed the throughput part ("too many outstanding async published messages").
	if b.js, err = jetstream.New(b.nc, jetstream.WithPublishAsyncMaxPending(1<<16)); err != nil {
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
		{"memory1m", "memory store at 1,000,000 memories over 100 projects", b.memoryMillion},
		{"mcp", "the memory tools through thatch mcp", b.mcpBench},
		{"team", "team memory over a 3-node cluster", b.teamBench},
	}
	// The machine beside the figures: the broker's echo and an fsync probe before the
	// parts, the echo again after them, and the CPU's shares over the whole run.
	cpu0 := readCPUTimes()
	if err := b.echoProbe("start"); err != nil {
		return err
	}
	if err := b.fsyncProbe(); err != nil {
		return err
	}
	for _, s := range steps {
		if b.only != "" && !slices.Contains(strings.Split(b.only, ","), s.key) {
			continue
		}
		b.say("%s…", s.name)
		settle()
		t0 := time.Now()
		b.fixtureTime = 0
		var err error
		// The step's goroutines (its thatch, callers and hosts) carry its name in the
		// profiles: go tool pprof -tagfocus step=tools.
		pprof.Do(ctx, pprof.Labels("step", s.key), func(ctx context.Context) { err = s.fn(ctx) })
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		took := time.Since(t0) - b.fixtureTime
		if b.fixtureTime > 0 {
			b.report.Parts = append(b.report.Parts, Part{Name: s.key + "'s fixture (once)", Seconds: b.fixtureTime.Seconds()})
		}
		b.report.Parts = append(b.report.Parts, Part{Name: s.key, Seconds: took.Seconds()})
		b.say("%s took %s", s.key, took.Round(100*time.Millisecond))
	}
	settle()
	if err := b.echoProbe("end"); err != nil {
		return err
	}
	b.addCPUShares(cpu0, readCPUTimes())
	return nil
}

// onlyNames is the parts --only takes, for its usage.
const onlyNames = "throughput, latency, tools, rehydrate, status, sweep, memory, ui, memory1m, mcp, team"

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
