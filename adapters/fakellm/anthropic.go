package fakellm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Anthropic is a scripted model behind the Anthropic Messages API (POST /v1/messages), for
// running a real Claude Code offline (ANTHROPIC_BASE_URL pointing at it). It answers a
// streamed request with server-sent events as Anthropic sends them (message_start,
// content_block_start, content_block_delta, content_block_stop, message_delta with the
// usage, message_stop) and a request without "stream" with the message as one JSON object.
//
// Its script is the chat-completions server's: a turn whose last user text contains
// "RUN <command>" calls the Bash tool with that command, then answers once the tool
// result comes back; a thatch extraction prompt (it names thatch_get_extraction_payload),
// when that tool is offered (under any MCP prefix, e.g. mcp__thatch__thatch_get_extraction_payload),
// calls it, then memory_remember with "The project ran: <command>" for the first Bash
// command of the payload (when the payload shows one and memory_remember is offered), then
// thatch_extraction_done; a tool result that is an error ends the turn; anything else gets
// a short reply. When the extraction tools are deferred (Claude Code's main session), it
// finds them with ToolSearch first. "SEARCH <words>" calls memory_search (under any MCP
// prefix) with them. A reply (not a failure's) ends with the token a user text asks for
// with "END WITH <TOKEN>", as a wrap-up command's greenlight. Messages of role "system"
// (Claude Code sends its reminders so) are read for their text and move no turn. Every request is logged with
// every text it carried (system, messages, tool results), for the tests to check what
// reached the model.
type Anthropic struct {
	mu    sync.Mutex
	log   []AnthropicRequest
	calls int
}

// AnthropicRequest is what one Messages request carried.
type AnthropicRequest struct {
	Model    string
	Stream   bool
	System   string   // the system prompt's text
	Text     string   // every text of the messages (text blocks and tool results), joined with newlines
	LastUser string   // the text of the last user message's text blocks
	Tools    []string // the tools offered, in order
	// The usage the answer reported: InputTokens is the characters of the request's
	// texts over 4 (at least 1), OutputTokens those of the answer over 4 (at least 1).
	InputTokens, OutputTokens int
}

// Log returns what each request so far carried, oldest first.
func (a *Anthropic) Log() []AnthropicRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]AnthropicRequest, len(a.log))
	for i, r := range a.log {
		r.Tools = append([]string(nil), r.Tools...)
		out[i] = r
	}
	return out
}

// block is a content block of a message.
type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// blocks decodes a content that is a string or a list of blocks.
func blocks(raw json.RawMessage) []block {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []block{{Type: "text", Text: s}}
	}
	var bs []block
	_ = json.Unmarshal(raw, &bs)
	return bs
}

// text joins the texts of a content (a tool result's content is a string or blocks too).
func text(raw json.RawMessage) string {
	var parts []string
	for _, b := range blocks(raw) {
		switch b.Type {
		case "text":
			parts = append(parts, b.Text)
		case "tool_result":
			parts = append(parts, text(b.Content))
		}
	}
	return strings.Join(parts, "\n")
}

// toolNamed returns the offered tool whose name is name or ends with "__"+name (an MCP
// server's tools are offered as mcp__<server>__<tool>), or "".
func toolNamed(offered []string, name string) string {
	for _, t := range offered {
		if t == name || strings.HasSuffix(t, "__"+name) {
			return t
		}
	}
	return ""
}

// ServeHTTP implements POST /v1/messages (and answers count_tokens, which Claude Code may ask).
func (a *Anthropic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string          `json:"model"`
		Stream   bool            `json:"stream"`
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/messages") {
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"not found"}}`, http.StatusNotFound)
		return
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	var texts []string
	system := ""
	if len(req.System) > 0 {
		system = text(req.System)
	}
	var lastUser, lastCall, payload string
	lastRole, lastIsResult, failed := "", false, false
	for _, m := range req.Messages {
		bs := blocks(m.Content)
		texts = append(texts, text(m.Content))
		if m.Role == "system" {
			continue // Claude Code's reminders between turns (<total_tokens>…) move no turn
		}
		lastRole, lastIsResult, failed = m.Role, false, false
		var userText []string
		for _, b := range bs {
			switch {
			case b.Type == "tool_use":
				lastCall = b.Name
			case b.Type == "tool_result":
				lastIsResult, failed = true, b.IsError
				if strings.HasSuffix(lastCall, toolPayload) {
					payload = text(b.Content)
				}
			case b.Type == "text" && m.Role == "user":
				userText = append(userText, b.Text)
			}
		}
		if m.Role == "user" && len(userText) > 0 && !lastIsResult {
			lastUser = strings.Join(userText, "\n")
		}
	}
	var tools []string
	for _, t := range req.Tools {
		tools = append(tools, t.Name)
	}
	all := strings.Join(texts, "\n")
	if strings.HasSuffix(r.URL.Path, "/count_tokens") {
		fmt.Fprintf(w, `{"input_tokens":%d}`, max(1, (len(system)+len(all))/4))
		return
	}

	var ans answer
	call := func(name string, args any) {
		b, _ := json.Marshal(args)
		ans = answer{tool: name, args: string(b)}
	}
	payloadTool, rememberTool, doneTool := toolNamed(tools, toolPayload), toolNamed(tools, toolRemember), toolNamed(tools, toolDone)
	extracting := payloadTool != "" && strings.Contains(lastUser, toolPayload)
	afterTool := lastRole == "user" && lastIsResult
	// Claude Code defers an MCP server's tools in a main session: the model finds them
	// with ToolSearch first, as a real model does.
	searchTool := toolNamed(tools, toolSearch)
	searching := searchPattern.MatchString(lastUser)
	deferred := ((payloadTool == "" && strings.Contains(lastUser, toolPayload)) || (searchTool == "" && searching)) &&
		toolNamed(tools, "ToolSearch") != "" && lastCall != "ToolSearch"
	switch {
	case afterTool && failed:
		ans = answer{text: "The tool failed."} // a model gives up rather than loop
	case deferred:
		call("ToolSearch", map[string]any{"query": "thatch extraction payload memory", "max_results": 10})
	case extracting && (!afterTool || lastCall == "ToolSearch"):
		call(payloadTool, map[string]any{})
	case extracting && strings.HasSuffix(lastCall, toolPayload):
		if cmd := firstCommand(payload); cmd != "" && rememberTool != "" {
			call(rememberTool, map[string]any{"content": "The project ran: " + cmd, "kind": "command"})
		} else {
			call(doneTool, map[string]int{"new": 0, "updated": 0, "deleted": 0})
		}
	case extracting && strings.HasSuffix(lastCall, toolRemember):
		call(doneTool, map[string]int{"new": 1, "updated": 0, "deleted": 0})
	case extracting:
		ans = answer{text: "Extracted."} // a wrap-up: flush, then the greenlight token
	case searching && searchTool != "" && (!afterTool || lastCall == "ToolSearch"):
		call(searchTool, map[string]any{"query": strings.TrimSpace(searchPattern.FindStringSubmatch(lastUser)[1])})
	case afterTool:
		ans = answer{text: "The command ran."}
	case runPattern.MatchString(lastUser) && toolNamed(tools, "Bash") != "":
		call("Bash", map[string]string{"command": strings.TrimSpace(runPattern.FindStringSubmatch(lastUser)[1]), "description": "scripted"})
	default:
		ans = answer{text: "FAKE REPLY"}
	}
	// A turn's answer ends with the token "END WITH" asked for, as the chat model's does.
	if m := endPattern.FindStringSubmatch(lastUser); m != nil && ans.tool == "" && !(afterTool && failed) {
		ans.text += "\n\n" + m[1]
	}
	in, out := max(1, (len(system)+len(all))/4), max(1, (len(ans.text)+len(ans.tool)+len(ans.args))/4)

	a.mu.Lock()
	a.log = append(a.log, AnthropicRequest{Model: req.Model, Stream: req.Stream, System: system, Text: all, LastUser: lastUser,
		Tools: tools, InputTokens: in, OutputTokens: out})
	n := len(a.log)
	toolID := ""
	if ans.tool != "" {
		a.calls++
		toolID = "toolu_" + strconv.Itoa(a.calls)
	}
	a.mu.Unlock()

	id := fmt.Sprintf("msg_%d", n)
	stop := "end_turn"
	var content []map[string]any
	if ans.tool != "" {
		stop = "tool_use"
		content = []map[string]any{{"type": "tool_use", "id": toolID, "name": ans.tool, "input": json.RawMessage(ans.args)}}
	} else {
		content = []map[string]any{{"type": "text", "text": ans.text}}
	}
	usage := map[string]int{"input_tokens": in, "output_tokens": out, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	send := func(event string, v map[string]any) {
		v["type"] = event
		data, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	send("message_start", map[string]any{"message": map[string]any{"id": id, "type": "message", "role": "assistant",
		"model": req.Model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": in, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
	if ans.tool != "" {
		send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "tool_use", "id": toolID,
			"name": ans.tool, "input": map[string]any{}}})
		send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": ans.args}})
	} else {
		send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": ans.text}})
	}
	send("content_block_stop", map[string]any{"index": 0})
	send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": out}})
	send("message_stop", map[string]any{})
}

// searchPattern asks the Anthropic script for a memory_search call: "SEARCH <words>".
var searchPattern = regexp.MustCompile(`SEARCH ([^\n]+)`)

const toolSearch = protocol.ToolSearch
