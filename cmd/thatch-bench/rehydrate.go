package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
)

// rehydrate builds a journal of many sessions and pending entries and measures, in a
// child process so its memory is its own, how long loading it takes and the peak RSS.
func (b *benchRun) rehydrate(ctx context.Context) error {
	path, err := b.bigJournalCopy()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	return b.runRehydrateChild(ctx, self, path, b.size.RehydrateEntries/b.size.RehydrateSessions)
}

// bigJournalCopy puts the journal of the rehydrate and status figures into the run's
// folder big, unless it is there: it is built once per invocation among the fixtures and
// copied (the status part's thatch writes to its copy).
func (b *benchRun) bigJournalCopy() (string, error) {
	path := filepath.Join(b.dir, "big", "thatch.db")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	fixture := filepath.Join(b.fixtures, fmt.Sprintf("journal-%dx%d", b.size.RehydrateSessions, b.size.RehydrateEntries))
	done := filepath.Join(fixture, "built")
	if _, err := os.Stat(done); err != nil {
		t0 := time.Now()
		if err := os.RemoveAll(fixture); err != nil {
			return "", err
		}
		if err := b.bigJournal(filepath.Join(fixture, "thatch.db")); err != nil {
			return "", err
		}
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			return "", err
		}
		b.fixtureTime += time.Since(t0)
	}
	t0 := time.Now()
	if err := copyFiles(fixture, filepath.Dir(path), "thatch.db"); err != nil {
		return "", err
	}
	b.say("journal copied in %s", time.Since(t0).Round(time.Millisecond))
	return path, nil
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
	if _, err := b.bigJournalCopy(); err != nil {
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
	b.add(Figure{Name: "status p99", Value: ms(p99), Unit: "ms", Target: "< 10 ms at 1M entries", Goal: under(10), Definition: "as above, 99th percentile"})
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
	b.add(Figure{Name: "rehydrate time", Value: r.Ms, Unit: "ms", Target: "< 2 s at 100k/1M", Goal: under(2000), Definition: "journal.Load of " + scale + ", in a fresh process"})
	b.add(Figure{Name: "rehydrate peak RSS", Value: r.RSSMiB, Unit: "MiB", Target: "< 150 MB at 100k/1M", Goal: under(150e6 / (1 << 20)), Definition: "that process's peak resident set (VmHWM) after loading " + scale})
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
	b.add(Figure{Name: "strand-sweep planning", Value: ms(best), Unit: "ms", Target: "< 200 ms for 100k rows", Goal: under(200),
		Definition: fmt.Sprintf("PlanStrandActions over %d session rows, a tenth in missing directories (best of 5; directory checks are cached lookups)", len(rows))})
	return nil
}
