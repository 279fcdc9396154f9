package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// endSignal is a reader that says when it has reached its end.
type endSignal struct {
	r    io.Reader
	once sync.Once
	end  chan struct{}
}

func (e *endSignal) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if errors.Is(err, io.EOF) {
		e.once.Do(func() { close(e.end) })
	}
	return n, err
}

// gated is a Thatch whose tool calls answer only once gate is closed.
type gated struct {
	recorder
	gate chan struct{}
}

func (g *gated) Tool(ctx context.Context, name string, c Call) (Answer, error) {
	<-g.gate
	return g.recorder.Tool(ctx, name, c)
}

// syncBuffer is an output the server writes while the test waits.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestStdioAnswersBeforeItEnds: requests piped before standard input ends are all answered
// before the server returns, even a tool call that answers only after the end was read
// (printf '<initialize>\n<tools/list>\n<tools/call>\n' | thatch mcp).
func TestStdioAnswersBeforeItEnds(t *testing.T) {
	input := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"sh","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"memory_search","arguments":{"query":"build"}}}`,
	}, "\n") // the last line without its newline, as a hand-typed pipe may end
	in := &endSignal{r: strings.NewReader(input), end: make(chan struct{})}
	th := &gated{recorder: recorder{answer: Answer{Output: "No memory of this project matches.", Metadata: json.RawMessage(`{"ids":[]}`)}}, gate: in.end}
	out := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := New(Options{Thatch: th, Project: "github.com/acme/api", Dir: t.TempDir()})
	if err := srv.Run(ctx, Stdio(ctx, in, out, time.Minute)); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("run: %v", err)
	}
	answered := map[string]bool{}
	for line := range strings.Lines(out.String()) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Result != nil {
			answered[string(m.ID)] = true
		}
	}
	for _, id := range []string{`1`, `2`, `"three"`} {
		if !answered[id] {
			t.Errorf("request %s not answered before the server ended; it wrote:\n%s", id, out.String())
		}
	}
	if !strings.Contains(out.String(), "No memory of this project matches.") {
		t.Errorf("the tool call's answer is not its output:\n%s", out.String())
	}
}
