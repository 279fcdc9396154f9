package fakellm

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// event is one server-sent event of a Messages stream.
type event struct {
	name string
	data map[string]any
}

func messages(t *testing.T, url, body string) []event {
	t.Helper()
	res, err := http.Post(url+"/v1/messages", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q, want text/event-stream", ct)
	}
	var out []event
	sc := bufio.NewScanner(res.Body)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			name = n
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			var v map[string]any
			if err := json.Unmarshal([]byte(d), &v); err != nil {
				t.Fatalf("data %q: %v", d, err)
			}
			if v["type"] != name {
				t.Fatalf("event %s carries type %v", name, v["type"])
			}
			out = append(out, event{name, v})
		}
	}
	return out
}

// answerOf returns the streamed answer: its text, or its tool call's name and input.
func answerOf(t *testing.T, evs []event) (text, tool, input, stop string) {
	t.Helper()
	var names []string
	for _, e := range evs {
		names = append(names, e.name)
		switch e.name {
		case "content_block_start":
			if cb := e.data["content_block"].(map[string]any); cb["type"] == "tool_use" {
				tool = cb["name"].(string)
			}
		case "content_block_delta":
			d := e.data["delta"].(map[string]any)
			if d["type"] == "text_delta" {
				text += d["text"].(string)
			} else {
				input += d["partial_json"].(string)
			}
		case "message_delta":
			stop = e.data["delta"].(map[string]any)["stop_reason"].(string)
			if e.data["usage"].(map[string]any)["output_tokens"].(float64) < 1 {
				t.Errorf("message_delta without output tokens: %v", e.data)
			}
		}
	}
	want := "message_start content_block_start content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	return text, tool, input, stop
}

func TestAnthropicScript(t *testing.T) {
	a := &Anthropic{}
	srv := httptest.NewServer(a)
	defer srv.Close()
	tools := `"tools":[{"name":"Bash"},{"name":"mcp__thatch__thatch_get_extraction_payload"},{"name":"mcp__thatch__memory_remember"},{"name":"mcp__thatch__thatch_extraction_done"}]`

	// A RUN turn calls Bash, then answers once the result is back.
	_, tool, input, stop := answerOf(t, messages(t, srv.URL, `{"model":"m","stream":true,"system":[{"type":"text","text":"SYS"}],`+tools+`,
		"messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>ctx</system-reminder>"},{"type":"text","text":"please RUN go test ./..."}]}]}`))
	if tool != "Bash" || input != `{"command":"go test ./...","description":"scripted"}` || stop != "tool_use" {
		t.Fatalf("RUN: tool %q input %s stop %q", tool, input, stop)
	}
	text, tool, _, stop := answerOf(t, messages(t, srv.URL, `{"model":"m","stream":true,`+tools+`,"messages":[
		{"role":"user","content":"please RUN go test ./..."},
		{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"go test ./..."}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]}]}`))
	if tool != "" || text != "The command ran." || stop != "end_turn" {
		t.Fatalf("after the tool: text %q tool %q stop %q", text, tool, stop)
	}

	// An extraction: payload, remember the payload's bash command, done.
	prompt := `{"role":"user","content":"Call thatch_get_extraction_payload, then write memories."}`
	_, tool, _, _ = answerOf(t, messages(t, srv.URL, `{"model":"small","stream":true,`+tools+`,"messages":[`+prompt+`]}`))
	if tool != "mcp__thatch__thatch_get_extraction_payload" {
		t.Fatalf("extraction's first call: %q", tool)
	}
	payload := "## 1. bash (toolu_1)\\nargs: {\\\"command\\\":\\\"make e2e\\\"}\\noutput: ok"
	_, tool, input, _ = answerOf(t, messages(t, srv.URL, `{"model":"small","stream":true,`+tools+`,"messages":[`+prompt+`,
		{"role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"mcp__thatch__thatch_get_extraction_payload","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"`+payload+`"}]}]}]}`))
	if tool != "mcp__thatch__memory_remember" || input != `{"content":"The project ran: make e2e","kind":"command"}` {
		t.Fatalf("extraction's second call: %q %s", tool, input)
	}
	_, tool, input, _ = answerOf(t, messages(t, srv.URL, `{"model":"small","stream":true,`+tools+`,"messages":[`+prompt+`,
		{"role":"assistant","content":[{"type":"tool_use","id":"toolu_3","name":"mcp__thatch__memory_remember","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3","content":"mem_1"}]}]}`))
	if tool != "mcp__thatch__thatch_extraction_done" || input != `{"deleted":0,"new":1,"updated":0}` {
		t.Fatalf("extraction's last call: %q %s", tool, input)
	}

	log := a.Log()
	if len(log) != 5 {
		t.Fatalf("%d requests logged, want 5", len(log))
	}
	if l := log[0]; l.System != "SYS" || !strings.Contains(l.Text, "<system-reminder>ctx</system-reminder>") ||
		!strings.Contains(l.LastUser, "RUN go test") || len(l.Tools) != 4 || l.InputTokens < 1 || l.OutputTokens < 1 || !l.Stream {
		t.Fatalf("first request logged as %+v", l)
	}
	if !strings.Contains(log[3].Text, "make e2e") {
		t.Fatalf("a tool result's text is not logged: %q", log[3].Text)
	}
}

func TestAnthropicWithoutStream(t *testing.T) {
	srv := httptest.NewServer(&Anthropic{})
	defer srv.Close()
	res, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi END WITH TOKEN_X"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m struct {
		Type    string `json:"type"`
		Content []struct{ Type, Text string }
		Usage   struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
		StopReason string `json:"stop_reason"`
	}
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.Type != "message" || len(m.Content) != 1 || m.Content[0].Text != "FAKE REPLY\n\nTOKEN_X" || m.StopReason != "end_turn" || m.Usage.InputTokens < 1 {
		t.Fatalf("answer %+v", m)
	}
}

// TestAnthropicDeferredTools: in a Claude Code main session, whose MCP tools are deferred,
// a wrap-up's flush and a SEARCH first load them with ToolSearch, then call them; a reply
// ends with the token END WITH asks for.
func TestAnthropicDeferredTools(t *testing.T) {
	a := &Anthropic{}
	srv := httptest.NewServer(a)
	defer srv.Close()
	deferred := `"tools":[{"name":"Bash"},{"name":"ToolSearch"}]`
	loaded := `"tools":[{"name":"Bash"},{"name":"ToolSearch"},{"name":"mcp__thatch__thatch_get_extraction_payload"},{"name":"mcp__thatch__memory_search"},{"name":"mcp__thatch__thatch_extraction_done"}]`
	wrap := `{"role":"user","content":"END WITH THATCH_COMPACT_READY. Flush: call thatch_get_extraction_payload"}`
	searched := `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"ToolSearch","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"Tool loaded."}]}`

	if _, tool, _, _ := answerOf(t, messages(t, srv.URL, `{"model":"m","stream":true,`+deferred+`,"messages":[`+wrap+`]}`)); tool != "ToolSearch" {
		t.Fatalf("a flush with deferred tools called %q, want ToolSearch", tool)
	}
	if _, tool, _, _ := answerOf(t, messages(t, srv.URL, `{"model":"m","stream":true,`+loaded+`,"messages":[`+wrap+`,`+searched+`]}`)); tool != "mcp__thatch__thatch_get_extraction_payload" {
		t.Fatalf("after ToolSearch the flush called %q", tool)
	}
	done := `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"mcp__thatch__thatch_extraction_done","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"done"}]}`
	if text, _, _, _ := answerOf(t, messages(t, srv.URL, `{"model":"m","stream":true,`+loaded+`,"messages":[`+wrap+`,`+searched+`,`+done+`]}`)); text != "Extracted.\n\nTHATCH_COMPACT_READY" {
		t.Fatalf("the flush's reply %q, want the token on its last line", text)
	}

	search := `{"role":"user","content":"SEARCH release notes"}`
	if _, tool, _, _ := answerOf(t, messages(t, srv.URL, `{"model":"m","stream":true,`+deferred+`,"messages":[`+search+`]}`)); tool != "ToolSearch" {
		t.Fatalf("a SEARCH with deferred tools called %q, want ToolSearch", tool)
	}
	if _, tool, input, _ := answerOf(t, messages(t, srv.URL, `{"model":"m","stream":true,`+loaded+`,"messages":[`+search+`,`+searched+`]}`)); tool != "mcp__thatch__memory_search" || input != `{"query":"release notes"}` {
		t.Fatalf("after ToolSearch the SEARCH called %q %s", tool, input)
	}
}
