package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBenchQuick keeps the benchmark working: it builds thatch-bench and runs its quick
// mode, which asserts correctness only (every event applied, no entry lost or extracted
// twice), never a speed.
func TestBenchQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole quick benchmark")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "thatch-bench")
	// thatch beside it, as make build puts it: the mcp part runs its thatch mcp.
	if out, err := exec.Command("go", "build", "-o", dir+"/", ".", "../thatch").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(dir, "bench.json")
	stdout := runBench(ctx, t, bin, "--quick", "--out", out)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r BenchReport
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if r.Lost != 0 || r.Events == 0 {
		t.Fatalf("report: %d events, %d entries lost", r.Events, r.Lost)
	}
	for _, name := range []string{"end-to-end throughput", "publish → commit p99", "tool call p99", "rehydrate time", "strand-sweep planning", "journal file",
		"memory_search p99", "memory_remember p99", "memory section p99", "duplicate pass", "redactor cost", "memory_search p99 at 5k", "memory_remember p99 at 5k",
		"MCP memory_search p99", "MCP memory_remember p99", "team replication lag p99", "team backfill",
		"NATS echo p99 (start)", "NATS echo p99 (end)", "fsync 4 KiB p99", "CPU user"} {
		found := false
		for _, f := range slices.Concat(r.Machine, r.Figures) {
			if f.Name == name {
				found = f.Value > 0 && f.Definition != ""
			}
		}
		if !found {
			t.Errorf("figure %q missing, zero or undefined", name)
		}
	}
	for _, f := range r.Figures {
		if f.Target != "" && f.Goal != nil && f.Met == nil {
			t.Errorf("figure %q has a goal but was not judged", f.Name)
		}
	}
	if len(r.Parts) == 0 {
		t.Error("the report says nothing of how long its parts took")
	}
	if !strings.Contains(stdout, "BASELINE") {
		t.Errorf("no table printed:\n%s", stdout)
	}

	// --runs: each run in its report and a summary of them all.
	stdout = runBench(ctx, t, bin, "--quick", "--runs", "2", "--only", "sweep", "--out", out)
	if data, err = os.ReadFile(out); err != nil {
		t.Fatal(err)
	}
	var rr RunsReport
	if err := json.Unmarshal(data, &rr); err != nil {
		t.Fatal(err)
	}
	if len(rr.Runs) != 2 || rr.Runs[1].Run != 2 || len(rr.Summary) == 0 {
		t.Fatalf("--runs 2 wrote %d runs and %d summary rows:\n%s", len(rr.Runs), len(rr.Summary), data)
	}
	for _, row := range rr.Summary {
		if len(row.Values) != 2 {
			t.Errorf("summary row %q has %d values, want one per run", row.Name, len(row.Values))
		}
	}
	if !strings.Contains(stdout, "summary of 2 runs") {
		t.Errorf("no summary printed:\n%s", stdout)
	}
}

// runBench runs thatch-bench with args and returns what it printed.
func runBench(ctx context.Context, t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	// The bench's thatch starts from the defaults, whatever the developer's shell exports,
	// with the operator's endpoint off (a daemon of the developer's may hold its address).
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "THATCH_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "THATCH_HTTP_LISTEN=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("thatch-bench %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}
