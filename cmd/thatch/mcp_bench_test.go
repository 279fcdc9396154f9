package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime"
)

// BenchmarkMCPToolCall measures the round trip of one MCP tool call as a client sees it:
// the request over thatch mcp's standard input, its NATS request to a running thatch (the
// embedded broker, SQLite), a memory_search of a project of 200 memories, and the answer
// back over its standard output. It reports the p50 and p99 in milliseconds (issue 33's
// target: a p99 under 20 ms). The binary is built without the race detector.
func BenchmarkMCPToolCall(b *testing.B) {
	c, err := daemon.LoadConfig()
	if err != nil {
		b.Fatal(err)
	}
	c.DataDir, c.NATSURL, c.NATSListen = filepath.Join(b.TempDir(), "data"), "", freeAddr(b)
	c.InstallCommands, c.HTTPListen = false, "off"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Serve(ctx, c, testLogger()) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("serve returned %v", err)
		}
	}()

	cmd := exec.Command(goBuild(b, "thatch-norace", "."), "mcp", "--project", "bench-project")
	cmd.Dir = b.TempDir()
	cmd.Env = append(os.Environ(), "THATCH_DATA_DIR="+c.DataDir, "THATCH_NATS_LISTEN="+c.NATSListen, "THATCH_LOG_LEVEL=warn")
	cctx, ccancel := context.WithTimeout(ctx, time.Minute)
	defer ccancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(cctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any) {
		res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %+v", name, err, res)
		}
	}
	// thatch serve answers once its consumer runs: the first calls may find it starting.
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: runtime.ToolSearch, Arguments: map[string]any{"query": "warm"}})
		if err == nil && !res.IsError {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("thatch mcp did not reach thatch within a minute: %v %+v", err, res)
		}
		time.Sleep(100 * time.Millisecond) // a start-up wait, not a synchronisation of the measure
	}
	for i := range 200 {
		call(runtime.ToolRemember, map[string]any{"content": benchText(i)})
	}
	took := make([]time.Duration, 0, b.N)
	for b.Loop() {
		began := time.Now()
		call(runtime.ToolSearch, map[string]any{"query": "deploy gateway timeout"})
		took = append(took, time.Since(began))
	}
	slices.Sort(took)
	ms := func(q float64) float64 { return float64(took[int(q*float64(len(took)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
}

// benchText is the i-th memory of the benchmark's project: distinct texts of shared words.
func benchText(i int) string {
	words := []string{"deploy", "gateway", "timeout", "retry", "cache", "schema", "migration", "token", "worker", "queue"}
	return "Memory " + string(rune('A'+i%26)) + string(rune('a'+i/26%26)) + ": the " + words[i%10] + " of the " + words[(i/10)%10] + " needs a " + words[(i*7)%10] + " first."
}
