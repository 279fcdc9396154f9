package fakellm

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/runtime"
)

// usage is a usage chunk's counts.
type usage struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
}

// stream posts one chat-completions request and returns the content and tool calls the
// streamed chunks carry, and the finish reason. It checks the stream's form: every chunk
// a chat.completion.chunk of one id naming the request's model, the last one before
// [DONE] the usage chunk (no choices), and nothing after [DONE].
func stream(t *testing.T, url, body string) (content string, tools []string, finish string) {
	t.Helper()
	content, tools, finish, _ = streamUsage(t, url, body)
	return content, tools, finish
}

// streamUsage is stream, with the usage the stream reported.
func streamUsage(t *testing.T, url, body string) (content string, tools []string, finish string, use usage) {
	t.Helper()
	var req struct{ Model string }
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatalf("a request that is not JSON: %s", body)
	}
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	done, usages, id := false, 0, ""
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if done {
			t.Fatalf("a chunk after [DONE]: %s", data)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Model   *string
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						Function struct{ Name, Arguments string } `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				Finish *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("a chunk that is not JSON: %s", data)
		}
		if id == "" {
			id = c.ID
		}
		if c.ID == "" || c.ID != id || c.Object != "chat.completion.chunk" || c.Model == nil || *c.Model != req.Model || c.Choices == nil {
			t.Fatalf("a chunk of request model %q that is not a well-formed chunk of %q: %s", req.Model, id, data)
		}
		if usages > 0 {
			t.Fatalf("a chunk after the usage chunk: %s", data)
		}
		if c.Usage != nil {
			usages++
			use = *c.Usage
			if len(c.Choices) != 0 || use.Prompt < 1 || use.Completion < 1 || use.Total != use.Prompt+use.Completion {
				t.Fatalf("a malformed usage chunk: %s", data)
			}
		}
		for _, ch := range c.Choices {
			content += ch.Delta.Content
			for _, tc := range ch.Delta.ToolCalls {
				tools = append(tools, tc.Function.Name+" "+tc.Function.Arguments)
			}
			if ch.Finish != nil {
				finish = *ch.Finish
			}
		}
	}
	if !done {
		t.Fatal("the stream did not end with [DONE]")
	}
	if usages != 1 {
		t.Fatal("the stream has no usage chunk before [DONE]")
	}
	return content, tools, finish, use
}

func TestScript(t *testing.T) {
	s := &Server{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	if c, _, f := stream(t, srv.URL, `{"stream":true,"messages":[{"role":"system","content":"You are a title generator"},{"role":"user","content":"hi"}]}`); c != "A scripted session" || f != "stop" {
		t.Fatalf("title: %q %q", c, f)
	}
	_, tools, f := stream(t, srv.URL, `{"stream":true,"tools":[{}],"messages":[{"role":"user","content":[{"type":"text","text":"please RUN echo hi"}]}]}`)
	if len(tools) != 1 || !strings.HasPrefix(tools[0], `bash {"command":"echo hi"`) || f != "tool_calls" {
		t.Fatalf("tool call: %v %q", tools, f)
	}
	if c, _, _ := stream(t, srv.URL, `{"stream":true,"tools":[{}],"messages":[{"role":"user","content":"RUN echo hi, END WITH THATCH_COMPACT_READY"},{"role":"tool","content":"hi"}]}`); c != "The command ran.\n\nTHATCH_COMPACT_READY" {
		t.Fatalf("after the tool: %q", c)
	}
	if c, _, _ := stream(t, srv.URL, `{"stream":true,"messages":[{"role":"user","content":"wrap up. END WITH THATCH_EXIT_READY"}]}`); !strings.HasSuffix(c, "\nTHATCH_EXIT_READY") {
		t.Fatalf("token: %q", c)
	}
	// An extraction child: payload, then done, then a reply.
	offer := `"tools":[{"type":"function","function":{"name":"thatch_get_extraction_payload"}},{"type":"function","function":{"name":"thatch_extraction_done"}}]`
	prompt := `{"role":"user","content":"Call thatch_get_extraction_payload once."}`
	if _, tools, _ := stream(t, srv.URL, `{"stream":true,`+offer+`,"messages":[`+prompt+`]}`); len(tools) != 1 || !strings.HasPrefix(tools[0], "thatch_get_extraction_payload") {
		t.Fatalf("extraction start: %v", tools)
	}
	payloadCall := `{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"thatch_get_extraction_payload"}}]},{"role":"tool","content":"2 entries"}`
	if _, tools, _ := stream(t, srv.URL, `{"stream":true,`+offer+`,"messages":[`+prompt+`,`+payloadCall+`]}`); len(tools) != 1 || tools[0] != `thatch_extraction_done {"deleted":0,"new":1,"updated":0}` {
		t.Fatalf("after the payload: %v", tools)
	}
	doneCall := `{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"thatch_extraction_done"}}]},{"role":"tool","content":"ok"}`
	if c, _, _ := stream(t, srv.URL, `{"stream":true,`+offer+`,"messages":[`+prompt+`,`+payloadCall+`,`+doneCall+`]}`); c != "Extracted." {
		t.Fatalf("after done: %q", c)
	}
	// A wrap-up flush ends with the token it was asked for.
	wrap := `{"role":"user","content":"# Pre-compact wrap-up checklist: call thatch_get_extraction_payload. END WITH THATCH_COMPACT_READY"}`
	if c, _, _ := stream(t, srv.URL, `{"stream":true,`+offer+`,"messages":[`+wrap+`,`+payloadCall+`,`+doneCall+`]}`); c != "Extracted.\n\nTHATCH_COMPACT_READY" {
		t.Fatalf("wrap-up flush: %q", c)
	}
	if got := s.Requests(); len(got) != 8 || got[1] != "please RUN echo hi" {
		t.Fatalf("requests %q", got)
	}
}

// An extraction offered the memory tools writes one memory from the payload's first bash
// command before it reports, and reports nothing written when the payload shows none.
func TestExtractionWritesMemory(t *testing.T) {
	s := &Server{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	offer := `"tools":[{"type":"function","function":{"name":"thatch_get_extraction_payload"}},{"type":"function","function":{"name":"thatch_extraction_done"}},` +
		`{"type":"function","function":{"name":"memory_remember"}},{"type":"function","function":{"name":"memory_search"}}]`
	prompt := `{"role":"user","content":"Call thatch_get_extraction_payload once."}`
	toolResult := func(name, content string) string {
		c, _ := json.Marshal(content)
		return `{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"` + name + `"}}]},{"role":"tool","content":` + string(c) + `}`
	}
	// The payload as thatch writes it: a read, then two bash calls, one with a quote.
	payload := runtime.FormatPayload(runtime.Payload{Root: "ses_a", Entries: []runtime.PayloadEntry{
		{ID: "call_1", Body: runtime.Body{Tool: "read", Args: json.RawMessage(`{"filePath":"/w/go.mod","command":"not bash"}`), Output: "module x"}},
		{ID: "call_2", Body: runtime.Body{Tool: "bash", Title: "scripted", Args: json.RawMessage(`{"command":"echo \"thatch-e2e-one\"","description":"scripted"}`), Output: "thatch-e2e-one\n"}},
		{ID: "call_3", Body: runtime.Body{Tool: "bash", Args: json.RawMessage(`{"command":"make test"}`), Output: "ok"}},
	}}, []string{"- [mem_1] (fact) The module is x"})
	history := prompt + "," + toolResult("thatch_get_extraction_payload", payload)
	if _, tools, _ := stream(t, srv.URL, `{"stream":true,`+offer+`,"messages":[`+history+`]}`); len(tools) != 1 ||
		tools[0] != `memory_remember {"content":"The project ran: echo \"thatch-e2e-one\"","kind":"command"}` {
		t.Fatalf("after the payload: %v", tools)
	}
	history += "," + toolResult("memory_remember", "Remembered mem_2.")
	if _, tools, _ := stream(t, srv.URL, `{"stream":true,`+offer+`,"messages":[`+history+`]}`); len(tools) != 1 || tools[0] != `thatch_extraction_done {"deleted":0,"new":1,"updated":0}` {
		t.Fatalf("after memory_remember: %v", tools)
	}
	history += "," + toolResult("thatch_extraction_done", "Extraction recorded.")
	if c, tools, _ := stream(t, srv.URL, `{"stream":true,`+offer+`,"messages":[`+history+`]}`); c != "Extracted." || len(tools) != 0 {
		t.Fatalf("after done: %q %v", c, tools)
	}
	// Nothing to extract: nothing written, and the report says so.
	empty := prompt + "," + toolResult("thatch_get_extraction_payload", runtime.FormatPayload(runtime.Payload{Root: "ses_a"}, nil))
	if _, tools, _ := stream(t, srv.URL, `{"stream":true,`+offer+`,"messages":[`+empty+`]}`); len(tools) != 1 || tools[0] != `thatch_extraction_done {"deleted":0,"new":0,"updated":0}` {
		t.Fatalf("after an empty payload: %v", tools)
	}
}

// The log keeps what each request carried: its model, system text, last user text and
// the tools offered.
func TestLog(t *testing.T) {
	s := &Server{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	stream(t, srv.URL, `{"model":"fake-model","stream":true,"tools":[{"type":"function","function":{"name":"bash"}},{"type":"function","function":{"name":"memory_search"}}],`+
		`"messages":[{"role":"system","content":"You are opencode."},{"role":"system","content":"[thatch] Memories of this project:"},`+
		`{"role":"user","content":"first"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"text","text":"second"}]}]}`)
	stream(t, srv.URL, `{"model":"small","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	log := s.Log()
	if len(log) != 2 {
		t.Fatalf("%d requests logged, want 2", len(log))
	}
	if r := log[0]; r.Model != "fake-model" || r.System != "You are opencode.\n[thatch] Memories of this project:" || r.LastUser != "second" ||
		!slices.Equal(r.Tools, []string{"bash", "memory_search"}) {
		t.Fatalf("first request logged as %+v", r)
	}
	if r := log[1]; r.Model != "small" || r.System != "" || r.LastUser != "hi" || r.Tools != nil {
		t.Fatalf("second request logged as %+v", r)
	}
	log[0].Tools[0] = "changed"
	if s.Log()[0].Tools[0] != "bash" {
		t.Fatal("Log shares its slices with the server")
	}
	if got := s.Requests(); !slices.Equal(got, []string{"second", "hi"}) {
		t.Fatalf("Requests() = %q", got)
	}
}

// A held extraction waits for its release; other requests go on meanwhile.
func TestHoldExtractions(t *testing.T) {
	s := &Server{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	held, release := s.HoldExtractions()
	offer := `"tools":[{"type":"function","function":{"name":"thatch_get_extraction_payload"}}]`
	got := make(chan []string, 1)
	go func() {
		_, tools, _ := stream(t, srv.URL, `{"stream":true,`+offer+`,"messages":[{"role":"user","content":"Call thatch_get_extraction_payload once."}]}`)
		got <- tools
	}()
	<-held
	if c, _, _ := stream(t, srv.URL, `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`); c != "FAKE REPLY" {
		t.Fatalf("a request beside a held one: %q", c)
	}
	select {
	case tools := <-got:
		t.Fatalf("the held extraction answered before its release: %v", tools)
	default:
	}
	release()
	release() // twice is harmless
	if tools := <-got; len(tools) != 1 || !strings.HasPrefix(tools[0], "thatch_get_extraction_payload") {
		t.Fatalf("released: %v", tools)
	}
}

// Every answer ends with a usage chunk: the prompt's tokens are the characters of the
// messages (text and tool calls) over 4, the completion's those of the answer; the log
// keeps both, and whether the request asked for them.
func TestUsage(t *testing.T) {
	s := &Server{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	// 40 + 8 characters of text, and a tool call of 4 + 16: 68 / 4 = 17. The answer,
	// "FAKE REPLY", is 10 characters: 2.
	history := `{"role":"system","content":"` + strings.Repeat("s", 40) + `"},{"role":"user","content":[{"type":"text","text":"12345678"}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"read","arguments":"{\"filePath\":\"/a\"}"}}]}`
	c, _, _, u := streamUsage(t, srv.URL, `{"model":"fake-small","stream":true,"stream_options":{"include_usage":true},"messages":[`+history+`]}`)
	if c != "FAKE REPLY" || u != (usage{Prompt: 17, Completion: 2, Total: 19}) {
		t.Fatalf("answer %q with usage %+v, want FAKE REPLY with 17 + 2", c, u)
	}
	// A prompt of 2 characters still costs a token.
	if _, _, _, u := streamUsage(t, srv.URL, `{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`); u != (usage{Prompt: 1, Completion: 2, Total: 3}) {
		t.Fatalf("a 2-character prompt: usage %+v, want 1 + 2", u)
	}
	// A tool call's completion is its name and arguments: "bash" and
	// {"command":"echo hi","description":"scripted"}, 4 + 46 = 50 characters: 12.
	_, tools, _, u := streamUsage(t, srv.URL, `{"model":"fake-model","stream":true,"tools":[{}],"messages":[{"role":"user","content":"RUN echo hi"}]}`)
	if len(tools) != 1 || u != (usage{Prompt: 2, Completion: 12, Total: 14}) {
		t.Fatalf("a tool call %v with usage %+v, want 2 + 12", tools, u)
	}
	log := s.Log()
	want := []Request{{Model: "fake-small", PromptTokens: 17, CompletionTokens: 2, IncludeUsage: true},
		{Model: "fake-model", PromptTokens: 1, CompletionTokens: 2}, {Model: "fake-model", PromptTokens: 2, CompletionTokens: 12}}
	if len(log) != len(want) {
		t.Fatalf("%d requests logged, want %d", len(log), len(want))
	}
	for i, r := range log {
		if r.Model != want[i].Model || r.PromptTokens != want[i].PromptTokens || r.CompletionTokens != want[i].CompletionTokens || r.IncludeUsage != want[i].IncludeUsage {
			t.Errorf("request %d logged as %+v, want %+v", i, r, want[i])
		}
	}
	// A held extraction's request is logged, usage included, before it is answered: 40
	// characters of prompt, 10; thatch_get_extraction_payload and {}, 31 characters: 7.
	held, release := s.HoldExtractions()
	answered := make(chan usage, 1)
	go func() {
		_, _, _, u := streamUsage(t, srv.URL, `{"model":"fake-small","stream":true,"tools":[{"type":"function","function":{"name":"thatch_get_extraction_payload"}}],`+
			`"messages":[{"role":"user","content":"Call thatch_get_extraction_payload once."}]}`)
		answered <- u
	}()
	<-held
	l := s.Log()
	release()
	if u := <-answered; u != (usage{Prompt: 10, Completion: 7, Total: 17}) {
		t.Fatalf("the held request's usage %+v, want 10 + 7", u)
	}
	if len(l) != 4 || l[3].PromptTokens != 10 || l[3].CompletionTokens != 7 {
		t.Fatalf("the held request logged as %+v", l[len(l)-1])
	}
}

// callIDs posts one chat-completions request and returns the ids of the tool calls its
// answer carries.
func callIDs(t *testing.T, url, body string) []string {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ids []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						ID string `json:"id"`
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("a chunk that is not JSON: %s", data)
		}
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				ids = append(ids, tc.ID)
			}
		}
	}
	return ids
}

// Each model numbers its tool call ids from call_1, text answers take no number, and
// Restart starts every model's numbering again; a held extraction takes its number when
// it is answered.
func TestCallIDs(t *testing.T) {
	s := &Server{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	run := func(model string) string {
		ids := callIDs(t, srv.URL, `{"model":"`+model+`","stream":true,"tools":[{}],"messages":[{"role":"user","content":"RUN echo hi"}]}`)
		if len(ids) != 1 {
			t.Fatalf("a RUN on %s answered %d tool calls", model, len(ids))
		}
		return ids[0]
	}
	if got := []string{run("a"), run("a"), run("b")}; !slices.Equal(got, []string{"call_1", "call_2", "call_1"}) {
		t.Fatalf("call ids %v, want call_1 and call_2 of a, call_1 of b", got)
	}
	if ids := callIDs(t, srv.URL, `{"model":"a","stream":true,"messages":[{"role":"user","content":"hi"}]}`); len(ids) != 0 {
		t.Fatalf("a text answer carried tool calls %v", ids)
	}
	if id := run("a"); id != "call_3" {
		t.Fatalf("after a text answer, a's next call id is %s, want call_3", id)
	}
	held, release := s.HoldExtractions()
	got := make(chan []string, 1)
	go func() {
		got <- callIDs(t, srv.URL, `{"model":"a","stream":true,"tools":[{"type":"function","function":{"name":"thatch_get_extraction_payload"}}],`+
			`"messages":[{"role":"user","content":"Call thatch_get_extraction_payload once."}]}`)
	}()
	<-held
	s.Restart()
	if id := run("a"); id != "call_1" {
		t.Fatalf("after Restart, a's call id is %s, want call_1", id)
	}
	release()
	if ids := <-got; !slices.Equal(ids, []string{"call_2"}) {
		t.Fatalf("the extraction held across the restart answered %v, want call_2", ids)
	}
}

// TASK hands a RUN to a sub-agent through the task tool; the sub-agent's prompt runs the
// command. WRITE writes a file of the size asked with the write tool.
func TestTaskAndWrite(t *testing.T) {
	s := &Server{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	offer := `"tools":[{"type":"function","function":{"name":"bash"}},{"type":"function","function":{"name":"task"}},{"type":"function","function":{"name":"write"}}]`
	_, tools, f := stream(t, srv.URL, `{"stream":true,`+offer+`,"messages":[{"role":"user","content":"TASK echo sub"}]}`)
	var task struct{ Description, Prompt, Subagent_type string }
	if len(tools) != 1 || f != "tool_calls" || !strings.HasPrefix(tools[0], "task ") || json.Unmarshal([]byte(strings.TrimPrefix(tools[0], "task ")), &task) != nil ||
		task.Subagent_type != "general" || task.Prompt != "RUN echo sub\n"+SubAgentNote || task.Description == "" {
		t.Fatalf("TASK answered %v %q", tools, f)
	}
	prompt, _ := json.Marshal(task.Prompt)
	if _, tools, _ := stream(t, srv.URL, `{"stream":true,`+offer+`,"messages":[{"role":"user","content":`+string(prompt)+`}]}`); len(tools) != 1 ||
		!strings.HasPrefix(tools[0], `bash {"command":"echo sub"`) {
		t.Fatalf("the sub-agent's prompt answered %v", tools)
	}
	if _, tools, _ := stream(t, srv.URL, `{"stream":true,"tools":[{"type":"function","function":{"name":"bash"}}],"messages":[{"role":"user","content":"TASK echo sub"}]}`); len(tools) != 0 {
		t.Fatalf("TASK without the task tool answered %v", tools)
	}
	_, tools, _ = stream(t, srv.URL, `{"stream":true,`+offer+`,"messages":[{"role":"user","content":"WRITE /w/big.txt 20000"}]}`)
	var write struct{ FilePath, Content string }
	if len(tools) != 1 || !strings.HasPrefix(tools[0], "write ") || json.Unmarshal([]byte(strings.TrimPrefix(tools[0], "write ")), &write) != nil ||
		write.FilePath != "/w/big.txt" || write.Content != Content(20000) {
		t.Fatalf("WRITE answered %.200v", tools)
	}
	if c := Content(1000); len(c) != 1000 || !strings.HasPrefix(c, "thatch-e2e-big line 0000001\n") {
		t.Fatalf("Content(1000) is %d bytes: %.60q", len(c), c)
	}
}
