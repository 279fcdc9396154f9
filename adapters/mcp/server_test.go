package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thatch-dev/thatch/runtime"
)

// recorder is a Thatch that records the calls it gets and answers them as told.
type recorder struct {
	mu     sync.Mutex
	calls  []Call
	answer Answer
	err    error
}

func (r *recorder) Tool(_ context.Context, name string, c Call) (Answer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	return r.answer, r.err
}

func (r *recorder) Section(_ context.Context, project, dir string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, Call{Project: project, Directory: dir})
	return "", r.err
}

func (r *recorder) last() Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[len(r.calls)-1]
}

// connect serves New(o) to client over in-memory transports.
func connect(t *testing.T, o Options, client *sdk.Client) *sdk.ClientSession {
	t.Helper()
	ctx := context.Background()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := New(o).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func resultText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestProjectFollowsRoots: the project is the client's first root, keyed once, and keyed
// again when the client says its roots changed; the client's name goes with each call.
func TestProjectFollowsRoots(t *testing.T) {
	a, b, cwd := t.TempDir(), t.TempDir(), t.TempDir() // outside git: each folder is its key
	th := &recorder{answer: Answer{Output: "No memory of this project matches.", Metadata: json.RawMessage(`{"ids":[]}`)}}
	client := sdk.NewClient(&sdk.Implementation{Name: "cursor", Version: "1"}, nil)
	client.AddRoots(&sdk.Root{URI: "file://" + filepath.ToSlash(a)}, &sdk.Root{URI: "file://" + filepath.ToSlash(b)})
	cs := connect(t, Options{Thatch: th, Dir: cwd}, client)

	res := call(t, cs, runtime.ToolSearch, map[string]any{"query": "x"})
	if res.IsError || resultText(res) != "No memory of this project matches." {
		t.Fatalf("memory_search: %+v", res)
	}
	if c := th.last(); c.Project != a || c.Directory != a || c.Client != "cursor" {
		t.Errorf("the call went out as %+v; want project %s from the first root, client cursor", c, a)
	}
	if args, _ := json.Marshal(th.last().Args); string(args) != `{"query":"x"}` {
		t.Errorf("the arguments went out as %s", args)
	}

	client.RemoveRoots("file://" + filepath.ToSlash(a))
	deadline := time.Now().Add(time.Minute)
	for {
		call(t, cs, runtime.ToolSearch, map[string]any{"query": "x"})
		if th.last().Project == b {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the roots changed the project is still %s, want %s", th.last().Project, b)
		}
	}
	client.RemoveRoots("file://" + filepath.ToSlash(b))
	for {
		call(t, cs, runtime.ToolSearch, map[string]any{"query": "x"})
		if th.last().Project == cwd {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("without roots the project is %s, want the working directory %s", th.last().Project, cwd)
		}
	}
}

// TestToolErrors: thatch's refusal or absence is a tool error with its words; arguments the
// schema refuses never reach thatch; metadata that is not the tool's is a tool error too.
func TestToolErrors(t *testing.T) {
	th := &recorder{err: errors.New("thatch is not running: start it with `thatch serve`")}
	cs := connect(t, Options{Thatch: th, Project: "key-1"}, sdk.NewClient(&sdk.Implementation{Name: "c", Version: "1"}, nil))
	res := call(t, cs, runtime.ToolForget, map[string]any{"id": "mem_1"})
	if !res.IsError || !strings.Contains(resultText(res), "thatch serve") {
		t.Errorf("with thatch away memory_forget answered %+v", res)
	}
	if c := th.last(); c.Project != "key-1" || c.Directory != "" {
		t.Errorf("--project key-1 sent %+v", c)
	}
	n := len(th.calls)
	for _, args := range []map[string]any{{}, {"content": 7}, {"content": "x", "tags": []string{strings.Repeat("t", 33)}}} {
		if res := call(t, cs, runtime.ToolRemember, args); !res.IsError {
			t.Errorf("memory_remember %v succeeded", args)
		}
	}
	if len(th.calls) != n {
		t.Errorf("arguments the schema refuses reached thatch: %+v", th.calls[n:])
	}
	th.err, th.answer = nil, Answer{Output: "Forgot mem_1.", Metadata: json.RawMessage(`{"id":7}`)}
	if res := call(t, cs, runtime.ToolForget, map[string]any{"id": "mem_1"}); !res.IsError || !strings.Contains(resultText(res), "same version") {
		t.Errorf("metadata of the wrong shape answered %+v", res)
	}
}

// TestNoRootsAskedOfAClientWithout: a client that does not declare roots is never asked
// for them (it may not answer, and the first tool call would wait RootsTimeout); its
// project is the working directory. The client here speaks raw JSON-RPC and fails the test
// on a roots/list.
func TestNoRootsAskedOfAClientWithout(t *testing.T) {
	cwd := t.TempDir()
	th := &recorder{answer: Answer{Output: "No memory of this project matches.", Metadata: json.RawMessage(`{"ids":[]}`)}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := New(Options{Thatch: th, Dir: cwd, RootsTimeout: time.Hour}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	conn, err := ct.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send := func(msg string) {
		t.Helper()
		m, err := jsonrpc.DecodeMessage([]byte(msg))
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Write(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(id string) string {
		t.Helper()
		for {
			m, err := conn.Read(ctx)
			if err != nil {
				t.Fatalf("waiting for the answer to %s: %v", id, err)
			}
			data, _ := jsonrpc.EncodeMessage(m)
			if req, ok := m.(*jsonrpc.Request); ok {
				if req.Method == "roots/list" {
					t.Fatalf("the server asked a client without roots for them: %s", data)
				}
				continue // a notification
			}
			if res, ok := m.(*jsonrpc.Response); ok && res.ID.Raw() == id {
				return string(data)
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":"1","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bare","version":"1"}}}`)
	answer("1")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":"2","method":"tools/call","params":{"name":"memory_search","arguments":{"query":"x"}}}`)
	if got := answer("2"); !strings.Contains(got, "No memory of this project matches.") {
		t.Fatalf("memory_search answered %s", got)
	}
	if c := th.last(); c.Project != cwd {
		t.Errorf("the call went out for project %s, want the working directory %s", c.Project, cwd)
	}
}

// TestStructuredCarriesText: each memory tool's structured content carries the model's
// text (text) beside its metadata, and its output schema says so: Claude Code shows its
// model the structured content instead of the text content (docs/claude-code.md), and the
// lines of memory_search must reach it.
func TestStructuredCarriesText(t *testing.T) {
	th := &recorder{answer: Answer{Output: "[mem_1] (fact) the build runs make\n[mem_2] (command) go test ./...",
		Metadata: json.RawMessage(`{"ids":["mem_1","mem_2"],"id":"mem_1","created":true,"similar":[]}`)}}
	cs := connect(t, Options{Thatch: th, Project: "p1", Dir: t.TempDir()}, sdk.NewClient(&sdk.Implementation{Name: "test"}, nil))
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]any{}
	for _, tool := range tools.Tools {
		schemas[tool.Name] = tool.OutputSchema
	}
	args := map[string]map[string]any{
		runtime.ToolSearch:   {"query": "build"},
		runtime.ToolRemember: {"content": "the build runs make"},
		runtime.ToolUpdate:   {"id": "mem_1", "content": "x"},
		runtime.ToolForget:   {"id": "mem_1"},
	}
	for name, a := range args {
		data, _ := json.Marshal(schemas[name])
		var sc struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		if err := json.Unmarshal(data, &sc); err != nil || sc.Properties["text"] == nil {
			t.Errorf("%s's output schema has no text property: %s", name, data)
		}
		res := call(t, cs, name, a)
		data, _ = json.Marshal(res.StructuredContent)
		var got map[string]any
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("%s's structured content %s: %v", name, data, err)
		}
		if got["text"] != th.answer.Output || resultText(res) != th.answer.Output {
			t.Errorf("%s: structured text %q, text content %q, want both %q", name, got["text"], resultText(res), th.answer.Output)
		}
	}
	data, _ := json.Marshal(call(t, cs, runtime.ToolSearch, args[runtime.ToolSearch]).StructuredContent)
	if !strings.Contains(string(data), `"ids":["mem_1","mem_2"]`) {
		t.Errorf("memory_search's structured content lost its ids: %s", data)
	}
}

// TestOwnerFlushes: the server of a Claude Code session (Options.Owner, the session id
// Claude Code gives its MCP servers) offers the extraction tools too, called as that
// session's, so its wrap-up command can flush its own entries (rule 6); the memory tools
// stay the project's. A server of no session offers no extraction tools.
func TestOwnerFlushes(t *testing.T) {
	th := &recorder{answer: Answer{Output: "## 1. bash (toolu_1)", Metadata: json.RawMessage(`{"ids":[]}`)}}
	names := func(cs *sdk.ClientSession) []string {
		tools, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tool := range tools.Tools {
			out = append(out, tool.Name)
		}
		return out
	}
	plain := connect(t, Options{Thatch: th, Project: "p1", Dir: t.TempDir()}, sdk.NewClient(&sdk.Implementation{Name: "test"}, nil))
	if got := names(plain); slices.Contains(got, runtime.ToolPayload) || slices.Contains(got, runtime.ToolDone) {
		t.Fatalf("a server of no session offers %v", got)
	}
	cs := connect(t, Options{Thatch: th, Project: "p1", Owner: "cc-session-1", Dir: t.TempDir()}, sdk.NewClient(&sdk.Implementation{Name: "test"}, nil))
	if got := names(cs); !slices.Contains(got, runtime.ToolPayload) || !slices.Contains(got, runtime.ToolDone) || !slices.Contains(got, runtime.ToolSearch) {
		t.Fatalf("a Claude Code session's server offers %v", got)
	}
	if res := call(t, cs, runtime.ToolPayload, map[string]any{}); resultText(res) != th.answer.Output || res.StructuredContent != nil {
		t.Fatalf("%s answered %q %v, want its text alone", runtime.ToolPayload, resultText(res), res.StructuredContent)
	}
	if c := th.last(); c.Session != "cc-session-1" || c.Project != "" {
		t.Fatalf("the payload call was %+v, want the session cc-session-1's", c)
	}
	call(t, cs, runtime.ToolSearch, map[string]any{"query": "x"})
	if c := th.last(); c.Session != "" || c.Project != "p1" {
		t.Fatalf("memory_search was %+v, want the project p1's", c)
	}
}
