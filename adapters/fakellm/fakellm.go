package fakellm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Server is the fake model.
type Server struct {
	requests atomic.Int64
	mu       sync.Mutex
	log      []Request
	hold     *hold
	calls    map[string]int // tool calls answered per model since the last Restart
}

// SubAgentNote ends the prompt a TASK hands to the sub-agent, so that a test can tell the
// sub-agent's requests apart.
const SubAgentNote = "A scripted sub-agent's task."

// Restart makes every model number its tool call ids from call_1 again, as a new process
// of a model server that numbers them from 1 would.
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

// callID numbers a tool call of model.
func (s *Server) callID(model string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[model]++
	return "call_" + strconv.Itoa(s.calls[model])
}

// Request is what one chat-completions request carried.
type Request struct {
	Model    string   // the request's model field, as the provider names it
	System   string   // the system messages' text, joined in order
	LastUser string   // the text of the last user message
	Tools    []string // the names of the tools offered, in order
	// The usage the answer's last chunk reported: PromptTokens is the characters of the
	// messages' text and tool calls over 4 (at least 1), CompletionTokens those of the
	// answer's text or tool call over 4 (at least 1).
	PromptTokens, CompletionTokens int
	// IncludeUsage: the request asked for the usage chunk (stream_options.include_usage),
	// without which OpenAI sends none; this server sends it all the same.
	IncludeUsage bool
}

// answer is a reply: a text, or a call of tool with args (JSON).
type answer struct{ text, tool, args string }

type hold struct {
	arrived chan struct{}
	release chan struct{}
}

// HoldExtractions makes every extraction turn that starts from now on wait, before it
// calls its first tool, until release is called (or opencode gives up on the request).
// Each held request is announced on held.
func (s *Server) HoldExtractions() (held <-chan struct{}, release func()) {
	h := &hold{arrived: make(chan struct{}, 64), release: make(chan struct{})}
	s.mu.Lock()
	s.hold = h
	s.mu.Unlock()
	var once sync.Once
	return h.arrived, func() {
		once.Do(func() {
			s.mu.Lock()
			if s.hold == h {
				s.hold = nil
			}
			s.mu.Unlock()
			close(h.release)
		})
	}
}

// Requests returns the last user text of each request so far.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.log))
	for i, r := range s.log {
		out[i] = r.LastUser
	}
	return out
}

// Log returns what each request so far carried, oldest first.
func (s *Server) Log() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.log))
	for i, r := range s.log {
		r.Tools = append([]string(nil), r.Tools...)
		out[i] = r
	}
	return out
}

type message struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func (m message) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(m.Content, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

var (
	runPattern   = regexp.MustCompile(`RUN ([^\n]+)`)
	taskPattern  = regexp.MustCompile(`TASK ([^\n]+)`)
	writePattern = regexp.MustCompile(`WRITE (\S+) (\d+)`)
	endPattern   = regexp.MustCompile(`END WITH ([A-Z_]+)`)
	// bashEntry heads a bash call in thatch's extraction payload ("## 1. bash (call_1)"),
	// and commandArg finds the command in the entry's "args:" line.
	bashEntry  = regexp.MustCompile(`^## \d+\. bash \(`)
	commandArg = regexp.MustCompile(`"command":\s*"((?:[^"\\]|\\.)*)"`)
)

// Tool names the script knows.
const (
	toolPayload  = protocol.ToolPayload
	toolDone     = protocol.ToolDone
	toolRemember = protocol.ToolRemember
)

// firstCommand returns the first bash command an extraction payload shows, or "".
func firstCommand(payload string) string {
	inBash := false
	for _, line := range strings.Split(payload, "\n") {
		if strings.HasPrefix(line, "## ") {
			inBash = bashEntry.MatchString(line)
			continue
		}
		args, ok := strings.CutPrefix(line, "args: ")
		if !inBash || !ok {
			continue
		}
		if m := commandArg.FindStringSubmatch(args); m != nil {
			var cmd string
			if json.Unmarshal([]byte(`"`+m[1]+`"`), &cmd) == nil && strings.TrimSpace(cmd) != "" {
				return strings.TrimSpace(cmd)
			}
		}
	}
	return ""
}

// ServeHTTP implements the chat-completions route.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var req struct {
		Model    string    `json:"model"`
		Messages []message `json:"messages"`
		Tools    []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	n := s.requests.Add(1)
	var systems []string
	var lastUser, lastCall, payload string
	last := message{}
	chars := 0 // the messages' characters, for the usage
	for _, m := range req.Messages {
		chars += len(m.text())
		for _, c := range m.ToolCalls {
			chars += len(c.Function.Name) + len(c.Function.Arguments)
		}
		switch m.Role {
		case "system":
			systems = append(systems, m.text())
		case "user":
			lastUser = m.text()
		case "assistant":
			for _, c := range m.ToolCalls {
				lastCall = c.Function.Name
			}
		case "tool":
			if lastCall == toolPayload {
				payload = m.text()
			}
		}
		last = m
	}
	system := strings.Join(systems, "\n")
	offered := map[string]bool{}
	var tools []string
	for _, t := range req.Tools {
		offered[t.Function.Name] = true
		tools = append(tools, t.Function.Name)
	}
	// The answer, decided before the request is logged so that its token count is too.
	var ans answer
	reply := func(t string) { // a turn's answer, ending with the token "END WITH" asked for
		if m := endPattern.FindStringSubmatch(lastUser); m != nil {
			t += "\n\n" + m[1]
		}
		ans = answer{text: t}
	}
	call := func(name string, args any) {
		a, _ := json.Marshal(args)
		ans = answer{tool: name, args: string(a)}
	}
	done := func(n int) { call(toolDone, map[string]int{"new": n, "updated": 0, "deleted": 0}) }
	extracting := strings.Contains(lastUser, toolPayload) && offered[toolPayload]
	switch {
	// The system prompt now carries thatch's text too (memories can say anything): only
	// opencode's own title prompt makes a title request.
	case strings.Contains(strings.ToLower(system), "title generator") && len(req.Tools) == 0:
		ans = answer{text: "A scripted session"}
	case extracting && last.Role == "user":
		call(toolPayload, map[string]any{})
	case extracting && last.Role == "tool" && lastCall == toolPayload && !offered[toolRemember]:
		done(1) // a host without the memory tools: the model writes its memories elsewhere
	case extracting && last.Role == "tool" && lastCall == toolPayload:
		if cmd := firstCommand(payload); cmd != "" {
			call(toolRemember, map[string]any{"content": "The project ran: " + cmd, "kind": "command"})
		} else {
			done(0)
		}
	case extracting && last.Role == "tool" && lastCall == toolRemember:
		done(1)
	case extracting && last.Role == "tool":
		reply("Extracted.") // a wrap-up: flush, then the greenlight token
	case last.Role == "tool":
		reply("The command ran.")
	case taskPattern.MatchString(lastUser) && offered["task"]:
		call("task", map[string]string{"description": "scripted task", "subagent_type": "general",
			"prompt": "RUN " + strings.TrimSpace(taskPattern.FindStringSubmatch(lastUser)[1]) + "\n" + SubAgentNote})
	case writePattern.MatchString(lastUser) && offered["write"]:
		m := writePattern.FindStringSubmatch(lastUser)
		size, _ := strconv.Atoi(m[2])
		call("write", map[string]string{"filePath": m[1], "content": Content(size)})
	case runPattern.MatchString(lastUser) && len(req.Tools) > 0:
		call("bash", map[string]string{"command": strings.TrimSpace(runPattern.FindStringSubmatch(lastUser)[1]), "description": "scripted"})
	default:
		reply("FAKE REPLY")
	}
	prompt, completion := max(1, chars/4), max(1, (len(ans.text)+len(ans.tool)+len(ans.args))/4)

	s.mu.Lock()
	s.log = append(s.log, Request{Model: req.Model, System: system, LastUser: lastUser, Tools: tools,
		PromptTokens: prompt, CompletionTokens: completion, IncludeUsage: req.StreamOptions.IncludeUsage})
	h := s.hold
	s.mu.Unlock()
	if h != nil && extracting && last.Role == "user" {
		select {
		case h.arrived <- struct{}{}:
		default:
		}
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
	}

	w.Header().Set("Content-Type", "text/event-stream")
	id := fmt.Sprintf("chatcmpl-%d", n)
	send := func(v map[string]any) {
		v["id"], v["object"], v["model"] = id, "chat.completion.chunk", req.Model
		data, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", data)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	chunk := func(delta map[string]any, finish any) {
		send(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
	}
	if ans.tool != "" {
		// Numbered when answered: a held request takes its number after its release.
		chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": s.callID(req.Model),
			"type": "function", "function": map[string]any{"name": ans.tool, "arguments": ans.args}}}}, nil)
		chunk(map[string]any{}, "tool_calls")
	} else {
		chunk(map[string]any{"role": "assistant", "content": ans.text}, nil)
		chunk(map[string]any{}, "stop")
	}
	// The usage chunk, as OpenAI sends it last when stream_options.include_usage is set
	// (opencode sets it for @ai-sdk/openai-compatible providers): no choices.
	send(map[string]any{"choices": []any{}, "usage": map[string]int{"prompt_tokens": prompt, "completion_tokens": completion,
		"total_tokens": prompt + completion}})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// Content is the text a WRITE of size bytes writes: numbered lines, plain ASCII, with
// nothing a redaction rule could take for a secret.
func Content(size int) string {
	var b strings.Builder
	b.Grow(size + 32)
	for i := 1; b.Len() < size; i++ {
		fmt.Fprintf(&b, "thatch-e2e-big line %07d\n", i)
	}
	return b.String()[:size]
}
