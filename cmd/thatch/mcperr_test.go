package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thatch-dev/thatch/runtime"
)

// mcpSessionLog is mcpSession with thatch mcp's standard error kept.
func mcpSessionLog(t *testing.T, c envOf, dir string) (*sdk.ClientSession, *syncBuf) {
	t.Helper()
	cmd := exec.Command(binary(t), "mcp")
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "THATCH_LOG_LEVEL=warn", "THATCH_LOG_FORMAT=json", "GORACE=atexit_sleep_ms=0"), c...)
	logs := &syncBuf{}
	cmd.Stderr = logs
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: mcpClientName, Version: "1.0"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to thatch mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, logs
}

// TestMCPSaysWhy: thatch mcp started while thatch is down says so once on standard error
// (the client's log: an MCP client's "Connected" only means the server started); with a
// token that thatch refuses, the tool error names the refused token first, not "thatch is
// not running".
func TestMCPSaysWhy(t *testing.T) {
	r := newEmbeddedRig(t, "v1")
	dir := t.TempDir()
	_, logs := mcpSessionLog(t, r.mcpEnv(), dir)
	waitFor(t, "thatch mcp's line saying thatch is unreachable", func() bool {
		return bytes.Contains(logs.Bytes(), []byte("thatch mcp starts without thatch")) && bytes.Contains(logs.Bytes(), []byte("thatch serve"))
	})

	r.start()
	noToken, _ := mcpSessionLog(t, envOf{"THATCH_DATA_DIR=" + t.TempDir(), "THATCH_NATS_LISTEN=" + r.cfg.NATSListen}, dir)
	msg := toolError(t, noToken, runtime.ToolSearch, map[string]any{"query": "x"}, "THATCH_DATA_DIR")
	if !strings.HasPrefix(msg, "thatch runs but refused thatch mcp's token") || strings.Contains(msg, "not running") {
		t.Fatalf("with its token refused, thatch mcp's tool error is %q", msg)
	}
	ok, _ := mcpSessionLog(t, r.mcpEnv(), dir)
	toolOK(t, ok, runtime.ToolSearch, map[string]any{"query": "x"})
}
