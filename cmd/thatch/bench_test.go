package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchQuick keeps the benchmark working: the quick mode asserts correctness only
// (every event applied, no entry lost or extracted twice), never a speed.
func TestBenchQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole quick benchmark")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "bench.json")
	var stdout bytes.Buffer
	// The rehydrate figure runs the test binary as its child process (see TestMain).
	if err := bench(ctx, []string{"--quick", "--out", out}, &stdout, nil); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r BenchReport
	must(t, json.Unmarshal(data, &r))
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
