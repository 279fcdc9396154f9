package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(dir, "bench.json")
	cmd := exec.CommandContext(ctx, bin, "--quick", "--out", out)
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
		t.Fatalf("thatch-bench --quick: %v\n%s%s", err, stdout.String(), stderr.String())
	}
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
	for _, name := range []string{"end-to-end throughput", "publish → commit p99", "tool call p99", "rehydrate time", "strand-sweep planning", "journal file", "memory_search p99", "memory_remember p99", "memory section p99", "duplicate pass", "redactor cost"} {
		found := false
		for _, f := range r.Figures {
			if f.Name == name {
				found = f.Value > 0 && f.Definition != ""
			}
		}
		if !found {
			t.Errorf("figure %q missing, zero or undefined", name)
		}
	}
	if !strings.Contains(stdout.String(), "BASELINE") {
		t.Errorf("no table printed:\n%s", stdout.String())
	}
}
