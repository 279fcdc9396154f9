package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thatch-dev/thatch/runtime"
)

// mcpBench measures the memory tools as an MCP client sees them (issue 33: p99 < 20 ms):
// the real thatch binary's `thatch mcp` as a child process, driven over its standard
// input and output by the Go SDK's client, asking the bench's thatch over the bench's
// broker, on a store of UIMemories memories of the client's project. One client calls
// each tool MCPCalls times at 20 calls a second, as one agent session does at most.
func (b *benchRun) mcpBench(ctx context.Context) error {
	bin, err := b.thatchBinary(ctx)
	if err != nil {
		return err
	}
	const project = "bench-mcp-project" // a project key, not a folder: no git to ask
	name := "mcp"
	if err := fillStore(ctx, filepath.Join(b.dir, name, "memories.db"), rand.New(rand.NewPCG(b.seed, 12)), b.size.UIMemories, []string{project}, 2000, nil); err != nil {
		return err
	}
	_, stop, err := b.startThatch(name, nil)
	if err != nil {
		return err
	}
	defer stop()

	cmd := exec.Command(bin, "mcp", "--project", project)
	cmd.Dir = b.dir
	for _, kv := range os.Environ() { // the bench's thatch, whatever the shell exports
		if !strings.HasPrefix(kv, "THATCH_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "THATCH_NATS_URL="+b.ns.ClientURL(), "THATCH_NATS_TOKEN="+b.token,
		"THATCH_DATA_DIR="+filepath.Join(b.dir, name), "THATCH_LOG_LEVEL=warn", "THATCH_INSTALL_COMMANDS=off")
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "thatch-bench", Version: "1"}, nil).Connect(cctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("start %s mcp: %w", bin, err)
	}
	defer cs.Close()
	call := func(tool string, args map[string]any) error {
		res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			return fmt.Errorf("%s: %w", tool, err)
		}
		if res.IsError {
			var text []string
			for _, c := range res.Content {
				if t, ok := c.(*sdk.TextContent); ok {
					text = append(text, t.Text)
				}
			}
			return fmt.Errorf("%s answered an error: %s", tool, strings.Join(text, " "))
		}
		return nil
	}
	// The first call starts thatch mcp's connection: it is not measured.
	if err := call(runtime.ToolSearch, map[string]any{"query": "warm"}); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(b.seed, 13))
	z := benchZipf(rng)
	var mu sync.Mutex // the generator is the callers'
	phases := []struct {
		tool, target string
		goal         *Goal
		args         func(i int) map[string]any
	}{
		{runtime.ToolSearch, "< 20 ms", under(20), func(int) map[string]any {
			mu.Lock()
			defer mu.Unlock()
			return map[string]any{"query": benchWord(z) + " " + benchWord(z)}
		}},
		{runtime.ToolRemember, "< 20 ms", under(20), func(i int) map[string]any {
			n := b.size.UIMemories + i
			return map[string]any{"content": benchMemory(rand.New(rand.NewPCG(b.seed, uint64(n))), n)}
		}},
	}
	for _, ph := range phases {
		lat, err := pacedCalls(1, b.size.MCPCalls, 20, func(_ string, i int) error { return call(ph.tool, ph.args(i)) })
		if err != nil {
			return err
		}
		p50, p99 := percentiles(lat)
		b.say("%s through thatch mcp: p50 %s, p99 %s", ph.tool, p50, p99)
		def := fmt.Sprintf("%s round trip as an MCP client sees it: over the standard input of the real `thatch mcp`, its NATS request to thatch, and back; one client calling 20 times a second, %d calls, a project of %d memories", ph.tool, len(lat), b.size.UIMemories)
		b.add(Figure{Name: "MCP " + ph.tool + " p50", Value: ms(p50), Unit: "ms", Definition: def})
		b.add(Figure{Name: "MCP " + ph.tool + " p99", Value: ms(p99), Unit: "ms", Target: ph.target, Goal: ph.goal, Definition: "as above, 99th percentile"})
	}
	return nil
}

// thatchBinary is the thatch the mcp part runs: --thatch, else the thatch next to
// thatch-bench (make build puts it there), else one go build makes among the fixtures
// (once per invocation; it needs the module's source, as in its tests).
func (b *benchRun) thatchBinary(ctx context.Context) (string, error) {
	if b.thatchBin != "" {
		return b.thatchBin, nil
	}
	if self, err := os.Executable(); err == nil {
		if next := filepath.Join(filepath.Dir(self), "thatch"); isExecutable(next) {
			return next, nil
		}
	}
	built := filepath.Join(b.fixtures, "thatch")
	if isExecutable(built) {
		return built, nil
	}
	b.say("building thatch for the mcp part…")
	defer func(t0 time.Time) { b.fixtureTime += time.Since(t0) }(time.Now())
	out, err := exec.CommandContext(ctx, "go", "build", "-o", built, "github.com/thatch-dev/thatch/cmd/thatch").CombinedOutput()
	if err != nil {
		return "", errors.New("no thatch binary for the mcp part: give one with --thatch, or run `make build` " +
			"(it puts thatch next to thatch-bench); go build said: " + strings.TrimSpace(string(out)))
	}
	return built, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
