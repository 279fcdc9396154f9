// Package fakellm is a scripted, OpenAI-compatible chat-completions server for running a
// real opencode offline: it answers POST /v1/chat/completions with streamed chunks
// (server-sent events ending with [DONE]). Its script: a title request gets a title; a
// turn whose last user text contains "RUN <command>" calls the bash tool with that
// command, then answers once the tool result comes back; a message containing
// "END WITH <token>" ends the reply with that token on its own line; a thatch extraction
// prompt, when the tools are offered, calls thatch_get_extraction_payload and then
// thatch_extraction_done; anything else gets a short reply.
package fakellm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
)

// Server is the fake model.
type Server struct {
	calls atomic.Int64
	mu    sync.Mutex
	log   []string // the last user text of each request, for assertions
	hold  *hold
}

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
	return append([]string(nil), s.log...)
}

type message struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls []struct {
		Function struct {
			Name string `json:"name"`
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
	runPattern = regexp.MustCompile(`RUN ([^\n]+)`)
	endPattern = regexp.MustCompile(`END WITH ([A-Z_]+)`)
)

// ServeHTTP implements the chat-completions route.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var req struct {
		Messages []message `json:"messages"`
		Tools    []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	n := s.calls.Add(1)
	var system, lastUser, lastCall string
	last := message{}
	for _, m := range req.Messages {
		switch m.Role {
		case "system":
			system += m.text()
		case "user":
			lastUser = m.text()
		case "assistant":
			for _, c := range m.ToolCalls {
				lastCall = c.Function.Name
			}
		}
		last = m
	}
	offered := map[string]bool{}
	for _, t := range req.Tools {
		offered[t.Function.Name] = true
	}
	s.mu.Lock()
	s.log = append(s.log, lastUser)
	h := s.hold
	s.mu.Unlock()
	extracting := strings.Contains(lastUser, "thatch_get_extraction_payload") && offered["thatch_get_extraction_payload"]
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
	chunk := func(delta map[string]any, finish any) {
		data, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion.chunk",
			"model": "fake-model", "choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", data)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	text := func(t string) {
		chunk(map[string]any{"role": "assistant", "content": t}, nil)
		chunk(map[string]any{}, "stop")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
	reply := func(t string) { // a turn's answer, ending with the token "END WITH" asked for
		if m := endPattern.FindStringSubmatch(lastUser); m != nil {
			t += "\n\n" + m[1]
		}
		text(t)
	}
	call := func(name string, args any) {
		a, _ := json.Marshal(args)
		chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": fmt.Sprintf("call_%d", n),
			"type": "function", "function": map[string]any{"name": name, "arguments": string(a)}}}}, nil)
		chunk(map[string]any{}, "tool_calls")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
	switch {
	case strings.Contains(strings.ToLower(system), "title") && len(req.Tools) == 0:
		text("A scripted session")
	case extracting && last.Role == "user":
		call("thatch_get_extraction_payload", map[string]any{})
	case extracting && last.Role == "tool" && lastCall == "thatch_get_extraction_payload":
		call("thatch_extraction_done", map[string]int{"new": 1, "updated": 0, "deleted": 0})
	case extracting && last.Role == "tool":
		reply("Extracted.") // a wrap-up: flush, then the greenlight token
	case last.Role == "tool":
		reply("The command ran.")
	case runPattern.MatchString(lastUser) && len(req.Tools) > 0:
		call("bash", map[string]string{"command": strings.TrimSpace(runPattern.FindStringSubmatch(lastUser)[1]), "description": "scripted"})
	default:
		reply("FAKE REPLY")
	}
}
