package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/mcp"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// mcpCommand is thatch mcp: the Model Context Protocol server (protocol §10).
type mcpCommand struct {
	project    string
	extraction string
}

func (*mcpCommand) Usage() usage {
	return usage{Name: "mcp", Summary: "serve thatch's memories to an MCP client (Claude Code, Cursor, Codex…) on stdin/stdout",
		Help: `a Model Context Protocol server on standard input and output, for any MCP client: the
tools memory_search, memory_remember, memory_update and memory_forget, the resource
thatch://memories and the prompt memories (the project's memory section). It reaches the
running thatch serve like the other commands. The project is --project, else the client's
first root, else the working directory, keyed as opencode keys it (a git checkout's root
commit, else the folder), so a repository has the same memories under every host.
thatch install --host mcp prints the configuration for an MCP client.`}
}

func (m *mcpCommand) Flags(fs *flag.FlagSet) {
	fs.StringVar(&m.project, "project", "", "the project: a `FOLDER` (keyed as opencode keys it) or a project key")
	fs.StringVar(&m.extraction, "extraction", "", "serve the extraction child `SESSION` that thatch runs for a Claude Code session: its calls are that session's, with the extraction tools")
}

func (m *mcpCommand) Run(ctx context.Context, c daemon.Config, _ io.Writer, _ []string) error {
	// Standard output is the protocol's: the log goes to standard error.
	log := daemon.NewLogger(os.Stderr, c.LogLevel, c.LogFormat).With("component", "mcp")
	dir, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("thatch mcp needs its working directory: %w", err)
	}
	t := &busThatch{c: c}
	defer t.close()
	go func() { // one line on standard error (the client's log) when thatch cannot be reached
		if _, err := t.conn(); err != nil {
			log.Warn("thatch mcp starts without thatch: its tool calls fail until it runs", "err", err)
		}
	}()
	// Claude Code gives the MCP servers of a session its id: that session's wrap-up flush
	// claims its own entries through this server (rule 6).
	owner := os.Getenv("CLAUDE_CODE_SESSION_ID")
	srv := mcp.New(mcp.Options{Thatch: t, Project: m.project, Session: m.extraction, Owner: owner, Dir: dir, Version: version(), Log: log})
	// Requests read before standard input ends are answered before thatch mcp exits: a
	// tool call may take the host timeout, and a little more.
	err = srv.Run(ctx, mcp.Stdio(ctx, os.Stdin, os.Stdout, c.HostTimeout()+5*time.Second))
	if ctx.Err() != nil || errors.Is(err, io.EOF) {
		return nil // stopped, or the client closed its end: done
	}
	return err
}

// busThatch reaches the running thatch for thatch mcp: its memory tools (§6, called with
// the project instead of a session, §10) and memory.context, over one connection to its
// broker, dialled again when thatch went away and came back.
type busThatch struct {
	c  daemon.Config
	mu sync.Mutex
	nc *nats.Conn
}

// mcpDialTimeout bounds a connection attempt: a client waits on each tool call.
const mcpDialTimeout = 2 * time.Second

// conn is the connection to thatch's broker: the one open, else a new one. It does not
// reconnect by itself: a call while thatch is away fails at once and the next one dials.
func (b *busThatch) conn() (*nats.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.nc != nil && b.nc.IsConnected() {
		return b.nc, nil
	}
	if b.nc != nil {
		b.nc.Close()
		b.nc = nil
	}
	nc, err := dialWith(b.c, nats.Name("thatch-mcp"), nats.NoReconnect(), nats.Timeout(mcpDialTimeout))
	if err != nil {
		return nil, mcpDialError(b.c, err)
	}
	b.nc = nc
	return nc, nil
}

func (b *busThatch) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.nc != nil {
		b.nc.Close()
	}
}

// request sends one request to thatch and returns its result, with errors that say what to do.
func (b *busThatch) request(ctx context.Context, subject string, body any) (json.RawMessage, error) {
	nc, err := b.conn()
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	timeout := b.c.HostTimeout() + 2*time.Second
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := nc.RequestWithContext(rctx, subject, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("thatch is not running: nothing answers on %s at %s. Start it with `thatch serve` "+
			"(if it runs with another THATCH_API_PREFIX, give thatch mcp the same)", subject, nc.ConnectedUrlRedacted())
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return nil, fmt.Errorf("thatch did not answer %s within %s: is `thatch serve` running and ready? `thatch status` says", subject, timeout)
	case err != nil && !nc.IsConnected():
		return nil, fmt.Errorf("thatch went away during the call (%v): start it again with `thatch serve`, then call again", err)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	result, replyErr, err := protocol.Decode(msg.Data)
	if err != nil {
		return nil, fmt.Errorf("%s answered garbage: %v", subject, err)
	}
	if replyErr != nil {
		return nil, fmt.Errorf("%s: %s", replyErr.Name, replyErr.Message)
	}
	return result, nil
}

// Tool calls a memory tool with the project instead of a session (protocol §10).
func (b *busThatch) Tool(ctx context.Context, name string, call mcp.Call) (mcp.Answer, error) {
	req := map[string]any{
		"project": call.Project, "directory": call.Directory, "args": call.Args,
		"source": map[string]string{"host": "mcp", "client": call.Client},
	}
	if call.Session != "" { // an extraction child's call, as a host forwards it (§3)
		req = map[string]any{"sessionID": call.Session, "callID": randomCallID(), "args": call.Args}
	}
	raw, err := b.request(ctx, b.c.APIPrefix+".tool."+name, req)
	if err != nil {
		return mcp.Answer{}, err
	}
	var a struct {
		Output   string          `json:"output"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return mcp.Answer{}, fmt.Errorf("thatch answered %s with a result thatch mcp cannot read (%v): run thatch mcp and thatch serve of the same version", name, err)
	}
	return mcp.Answer{Output: a.Output, Metadata: a.Metadata}, nil
}

// Section is the memory section of a project, from thatch's memory.context.
func (b *busThatch) Section(ctx context.Context, project, dir string) (string, error) {
	raw, err := b.request(ctx, b.c.APIPrefix+".api.memory.context", map[string]string{"project": project, "directory": dir})
	if err != nil {
		return "", err
	}
	var r struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", fmt.Errorf("thatch answered memory.context with a result thatch mcp cannot read: %v", err)
	}
	return r.Text, nil
}

var _ mcp.Thatch = (*busThatch)(nil)

// randomCallID is a call id for an extraction child's tool call: MCP gives none, and a
// repeated callID would repeat the first answer (§6).
func randomCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "mcp_" + hex.EncodeToString(b[:])
}
