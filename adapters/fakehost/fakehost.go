package fakehost

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Call is one host API request the fake received.
type Call struct {
	Method string
	Params map[string]any
	Key    string // its idempotencyKey, "" when absent
	Repeat bool   // the key was answered before: answered from memory (Requests only)
}

// String renders a call compactly for assertions.
func (c Call) String() string {
	if id, ok := c.Params["sessionID"].(string); ok {
		return c.Method + " " + id
	}
	if id, ok := c.Params["parentID"].(string); ok {
		return c.Method + " parent=" + id
	}
	return c.Method
}

// Host is a fake protocol host.
type Host struct {
	ID     string
	API    string // v1 or v2
	Prefix string // opencode
	NC     *nats.Conn
	JS     jetstream.JetStream

	// Reply, when set, answers a method before the built-in behaviour; ok=false falls
	// through to it.
	Reply func(method string, params map[string]any) (result any, err *runtime.HostError, ok bool)
	// Raw, when set, may answer a method with raw bytes (garbage, for fault tests).
	Raw func(method string) ([]byte, bool)
	// Quiet stops the host from announcing the sessions it creates and deletes.
	Quiet bool
	// Model, when set, plays the extraction child's model: prompted (not noReply), the
	// child goes busy, claims through thatch_get_extraction_payload, writes a memory,
	// completes with thatch_extraction_done and goes idle. APIPrefix names thatch's prefix.
	Model     bool
	APIPrefix string
	// Write, when set, plays the model's memory writes between claiming and completing:
	// it gets the payload's answer and a tool caller, and returns the counts the model
	// reports to thatch_extraction_done. Unset, the model reports writes it never made.
	Write     func(ctx context.Context, child string, payload runtime.Answer, call func(name string, args any) (runtime.Answer, *runtime.HostError)) runtime.Metrics
	FailEvery int // the model errors on every nth extraction (0: never)
	// SmallModel, "provider/model", is announced in the hello (an extension).
	SmallModel string
	// Tokens and Cost are what each extraction turn the model plays costs, reported on
	// the child's assistant message (protocol 1.1 §2) with the model it was asked for.
	Tokens runtime.Tokens
	Cost   float64
	// ToolTimeout bounds each of the model's tool calls before it retries (30 s when 0):
	// a call in flight when thatch dies is never answered.
	ToolTimeout time.Duration
	Trace       func(string, ...any) // when set, the model reports each step
	// Dir is the host's directory: its hello's, and new sessions' when their parent is
	// unknown. It should exist: thatch sweeps sessions whose directory is gone.
	Dir string

	mu        sync.Mutex
	seq       int64
	events    int
	boot      string
	hello     map[string]any // the last hello's properties
	calls     []Call
	requests  []Call // every request, repeats included
	methods   []string
	away      bool
	sessions  map[string]runtime.SessionInfo
	messages  map[string]string // session → last assistant text
	played    map[string]string // extraction child → the model its prompt asked for
	extracted map[string]int    // entry id → times the model completed it
	answered  *protocol.Memo    // the replies by idempotency key
	repeats   map[string]int    // method → calls answered from memory
	turns     int               // extractions the model played
	nextID    int
	subs      []*nats.Subscription

	ctx    context.Context // ends at Close: the host's own goroutines stop with it
	cancel context.CancelFunc
	runMu  sync.Mutex // guards closed and wg.Add against Close (h.mu may be held by goRun's callers)
	closed bool
	wg     sync.WaitGroup
}

// goRun runs fn in a goroutine the host waits for at Close; after Close, nothing.
func (h *Host) goRun(fn func(ctx context.Context)) {
	h.runMu.Lock()
	defer h.runMu.Unlock()
	if h.closed {
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		fn(h.ctx)
	}()
}

// Methods lists the host API methods an api host serves.
func Methods(api string) []string {
	common := []string{protocol.MethodSessionCreate, protocol.MethodSessionPrompt, protocol.MethodSessionDelete, protocol.MethodSessionList, protocol.MethodProjectList, protocol.MethodSessionMove}
	if api == "v2" {
		return append(common, protocol.MethodSessionContext, protocol.MethodSessionCompact, protocol.MethodBridgeEmit)
	}
	return append(common, protocol.MethodSessionMessages, protocol.MethodTUIExecuteCommand, protocol.MethodTUIPublish, protocol.MethodTUIShowToast)
}

// New starts a fake host serving methods (all of its API's when none are given).
func New(nc *nats.Conn, id, api string, methods ...string) (*Host, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Host{ID: id, API: api, Prefix: "opencode", NC: nc, JS: js, Dir: os.TempDir(), ctx: ctx, cancel: cancel,
		sessions: map[string]runtime.SessionInfo{}, messages: map[string]string{}, played: map[string]string{}, extracted: map[string]int{},
		answered: protocol.NewMemo(protocol.MemoSize), repeats: map[string]int{}}
	if len(methods) == 0 {
		methods = Methods(api)
	}
	h.methods = methods
	return h, h.subscribe()
}

func (h *Host) subscribe() error {
	for _, m := range h.methods {
		sub, err := h.NC.Subscribe(h.Prefix+"."+h.ID+".api."+m, h.serve)
		if err != nil {
			return err
		}
		h.subs = append(h.subs, sub)
	}
	return h.flush()
}

// flush makes sure the broker has the subscriptions; a connection that is reconnecting
// sends them when it is back.
func (h *Host) flush() error {
	if !h.NC.IsConnected() {
		return nil
	}
	return h.NC.Flush()
}

// Away stops serving the host API, as a host that went away does: thatch's calls find no
// responder until Back. The session table and the idempotency memory stay.
func (h *Host) Away() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.away {
		return nil
	}
	h.away = true
	for _, s := range h.subs {
		if err := s.Unsubscribe(); err != nil {
			return err
		}
	}
	h.subs = nil
	return h.flush()
}

// Back serves the host API again after Away. A host that comes back says hello: the
// caller publishes it (Hello with the same boot, or a new one).
func (h *Host) Back() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.away {
		return nil
	}
	h.away = false
	return h.subscribe()
}

// Close stops answering and waits for the host's own goroutines.
func (h *Host) Close() {
	h.mu.Lock()
	subs := h.subs
	h.subs = nil
	h.mu.Unlock()
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
	h.cancel()
	h.runMu.Lock()
	h.closed = true
	h.runMu.Unlock()
	h.wg.Wait()
}

func (h *Host) serve(m *nats.Msg) {
	method := m.Subject[strings.LastIndex(m.Subject, ".api.")+len(".api."):]
	var params map[string]any
	_ = json.Unmarshal(m.Data, &params)
	key, _ := params[protocol.IdempotencyKey].(string)
	// A repeat is answered from memory, not acted on twice; one that arrives while the
	// first request is still being answered (thatch restarted meanwhile) waits for that
	// answer. A Raw answer is not remembered.
	data, repeat := h.answered.Do(key, func() ([]byte, bool) { return h.act(method, params, key) }, nil)
	if repeat {
		h.mu.Lock()
		h.repeats[method]++
		h.requests = append(h.requests, Call{Method: method, Params: params, Key: key, Repeat: true})
		h.mu.Unlock()
	}
	_ = m.Respond(data)
}

// act records and answers one request, and says whether its reply answers a repeat.
func (h *Host) act(method string, params map[string]any, key string) (data []byte, keep bool) {
	h.mu.Lock()
	h.calls = append(h.calls, Call{Method: method, Params: params, Key: key})
	h.requests = append(h.requests, Call{Method: method, Params: params, Key: key})
	reply, raw := h.Reply, h.Raw
	h.mu.Unlock()
	if raw != nil {
		if data, ok := raw(method); ok {
			return data, false
		}
	}
	var result any
	var herr *runtime.HostError
	handled := false
	if reply != nil {
		result, herr, handled = reply(method, params)
	}
	if !handled {
		result, herr = h.builtin(method, params)
	}
	data, _ = protocol.Encode(result, herr)
	return data, true
}

// Repeats returns, per method, the calls that repeated an idempotency key already
// answered.
func (h *Host) Repeats() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.repeats {
		out[k] = v
	}
	return out
}

func (h *Host) builtin(method string, p map[string]any) (any, *runtime.HostError) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sid, _ := p["sessionID"].(string)
	switch method {
	case protocol.MethodSessionCreate:
		h.nextID++
		parent, _ := p["parentID"].(string)
		title, _ := p["title"].(string)
		if _, ok := h.sessions[parent]; parent != "" && !ok {
			return nil, &runtime.HostError{Name: protocol.NotFound, Message: "parent session " + parent + " not found"}
		}
		s := runtime.SessionInfo{ID: fmt.Sprintf("ses_%s_c%03d", h.ID, h.nextID), ParentID: parent, Title: title, Directory: h.Dir}
		if ps, ok := h.sessions[parent]; ok {
			s.Directory = ps.Directory
		}
		h.sessions[s.ID] = s
		h.announce(protocol.EventSessionCreated, s)
		return s, nil
	case protocol.MethodSessionDelete:
		s, ok := h.sessions[sid]
		if !ok {
			return nil, &runtime.HostError{Name: protocol.NotFound, Message: "session " + sid + " not found"}
		}
		delete(h.sessions, sid)
		h.announce(protocol.EventSessionDeleted, s)
		return true, nil
	case protocol.MethodSessionList:
		out := []runtime.SessionInfo{}
		for _, s := range h.sessions {
			out = append(out, s)
		}
		slices.SortFunc(out, func(a, b runtime.SessionInfo) int { return strings.Compare(a.ID, b.ID) })
		return out, nil
	case protocol.MethodSessionPrompt:
		if noReply, _ := p["noReply"].(bool); h.Model && !noReply {
			if s, ok := h.sessions[sid]; ok && s.Title == runtime.ExtractionTitle {
				model := "fake/session-model" // no model asked: the session's, as opencode's bridge does
				if m, _ := p["model"].(map[string]any); m != nil {
					model = fmt.Sprint(m["providerID"], "/", m["modelID"])
				}
				h.played[sid] = model
				h.goRun(func(ctx context.Context) { h.extract(ctx, sid) })
			}
		}
		return map[string]any{}, nil
	case protocol.MethodSessionMove:
		s, ok := h.sessions[sid]
		if !ok {
			return nil, &runtime.HostError{Name: protocol.NotFound, Message: "session " + sid + " not found"}
		}
		s.Directory, _ = p["directory"].(string)
		h.sessions[sid] = s
		return s, nil
	case protocol.MethodProjectList:
		return []runtime.Project{{ID: "p1", Worktree: h.Dir}}, nil
	case protocol.MethodSessionMessages:
		info := h.turnInfo(sid)
		return []map[string]any{{"info": info, "parts": []map[string]any{{"type": "text", "text": h.messages[sid]}}}}, nil
	case protocol.MethodSessionContext:
		m := h.turnInfo(sid)
		m["content"] = []map[string]any{{"type": "text", "text": h.messages[sid]}}
		return map[string]any{"messages": []map[string]any{m}}, nil
	}
	return map[string]any{}, nil
}

// turnInfo is the info of sid's assistant message: for an extraction turn the model
// played, with its model, tokens and cost. The caller holds h.mu.
func (h *Host) turnInfo(sid string) map[string]any {
	info := map[string]any{"id": "msg_1", "role": "assistant"}
	if model, ok := h.played[sid]; ok {
		provider, id, _ := strings.Cut(model, "/")
		info["providerID"], info["modelID"], info["tokens"], info["cost"] = provider, id, h.Tokens, h.Cost
	}
	return info
}

// announce publishes the event a real host emits for a change it made, as opencode does,
// unless Quiet is set. It runs in the background: the caller holds h.mu.
func (h *Host) announce(typ string, s runtime.SessionInfo) {
	if h.Quiet {
		return
	}
	h.goRun(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, _ = h.Publish(ctx, typ, map[string]any{"sessionID": s.ID, "info": s})
	})
}

// extract plays an extraction child's turn. A tool call that fails (thatch restarting)
// is retried, as a model would; with FailEvery n, every nth extraction errors instead of
// completing, after claiming.
func (h *Host) extract(ctx context.Context, child string) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	prefix := h.APIPrefix
	if prefix == "" {
		prefix = "thatch"
	}
	trace := func(format string, args ...any) {
		if h.Trace != nil {
			h.Trace(child+": "+format, args...)
		}
	}
	call := func(name string, args any) (runtime.Answer, bool) {
		for ctx.Err() == nil {
			timeout := h.ToolTimeout
			if timeout == 0 {
				timeout = 30 * time.Second
			}
			actx, cancel := context.WithTimeout(ctx, timeout)
			a, herr, err := h.Tool(actx, prefix, name, child, args)
			cancel()
			trace("%s: err=%v herr=%v", name, err, herr)
			if err == nil && herr == nil {
				return a, true
			}
			if herr != nil && herr.Name != protocol.Unavailable {
				return a, false // thatch forgot the child: the turn is over
			}
			time.Sleep(50 * time.Millisecond)
		}
		return runtime.Answer{}, false
	}
	trace("turn starts")
	if err := h.Status(ctx, child, "busy"); err != nil {
		trace("busy: %v", err)
		return
	}
	defer func() { trace("idle: %v", h.Status(ctx, child, "idle")) }()
	a, ok := call(protocol.ToolPayload, map[string]any{})
	if !ok {
		return
	}
	var ids []string
	if md, ok := a.Metadata.(map[string]any); ok {
		if list, ok := md["entryIDs"].([]any); ok {
			for _, id := range list {
				ids = append(ids, fmt.Sprint(id))
			}
		}
	}
	h.mu.Lock()
	h.turns++
	fail := h.FailEvery > 0 && h.turns%h.FailEvery == 0
	h.mu.Unlock()
	if fail {
		_, _ = h.Publish(ctx, protocol.EventSessionError, map[string]any{"sessionID": child,
			"error": map[string]any{"name": "APIError", "data": map[string]any{"message": "scripted failure"}}})
		return
	}
	_ = h.ToolExecuted(ctx, child, child+"_mem", protocol.ToolRemember, "remembered")
	report := runtime.Metrics{New: int64(min(len(ids), 3))}
	if h.Write != nil {
		report = h.Write(ctx, child, a, func(name string, args any) (runtime.Answer, *runtime.HostError) {
			a, herr, err := h.Tool(ctx, prefix, name, child, args)
			if err != nil {
				herr = &runtime.HostError{Name: protocol.Transport, Message: err.Error()}
			}
			return a, herr
		})
	}
	done, ok := call(protocol.ToolDone, map[string]any{"new": report.New, "updated": report.Updated, "deleted": report.Deleted})
	if !ok {
		return
	}
	if md, ok := done.Metadata.(map[string]any); ok && md["completed"] == float64(len(ids)) {
		h.mu.Lock()
		for _, id := range ids {
			h.extracted[id]++
		}
		h.mu.Unlock()
	}
}

// Extracted returns how many times the model completed each entry it extracted.
func (h *Host) Extracted() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int, len(h.extracted))
	for k, v := range h.extracted {
		out[k] = v
	}
	return out
}

// SetReply sets the last assistant text the messages methods return for a session.
func (h *Host) SetReply(sessionID, text string) {
	h.mu.Lock()
	h.messages[sessionID] = text
	h.mu.Unlock()
}

// AddSession records a session as existing on the host, as if the host created it.
func (h *Host) AddSession(s runtime.SessionInfo) {
	h.mu.Lock()
	h.sessions[s.ID] = s
	h.mu.Unlock()
}

// Session returns a session of the host.
func (h *Host) Session(id string) (runtime.SessionInfo, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.sessions[id]
	return s, ok
}

// RemoveSession forgets a session, as the host does when it deletes one.
func (h *Host) RemoveSession(id string) {
	h.mu.Lock()
	delete(h.sessions, id)
	h.mu.Unlock()
}

// HasSession reports whether the host still has a session.
func (h *Host) HasSession(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.sessions[id]
	return ok
}

// Calls returns the calls received so far.
func (h *Host) Calls() []Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Call(nil), h.calls...)
}

// Requests returns every request received so far, repeats of an answered key included.
func (h *Host) Requests() []Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Call(nil), h.requests...)
}

// CallsTo returns the calls of one method.
func (h *Host) CallsTo(method string) []Call {
	var out []Call
	for _, c := range h.Calls() {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Publish publishes one event with a fresh id and the next Host-Seq, retrying until the
// stream acknowledges it. It returns the event id.
func (h *Host) Publish(ctx context.Context, typ string, props map[string]any) (string, error) {
	h.mu.Lock()
	h.events++
	id := fmt.Sprintf("evt_%s_%s_%06d", h.ID, h.boot, h.events)
	h.mu.Unlock()
	return id, h.PublishID(ctx, id, typ, props)
}

// PublishID publishes one event with the given id.
func (h *Host) PublishID(ctx context.Context, id, typ string, props map[string]any) error {
	body, err := json.Marshal(map[string]any{"id": id, "type": typ, "properties": props})
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.seq++
	seq := h.seq
	h.mu.Unlock()
	return h.PublishRaw(ctx, typ, body, id, seq)
}

// PublishRaw publishes a body as it is, with a Nats-Msg-Id and (when seq > 0) a Host-Seq.
func (h *Host) PublishRaw(ctx context.Context, typ string, body []byte, msgID string, seq int64) error {
	hostSeq := ""
	if seq > 0 {
		hostSeq = fmt.Sprint(seq)
	}
	return h.PublishRawHeader(ctx, typ, body, msgID, hostSeq)
}

// PublishRawHeader publishes a body with a Host-Seq header taken as it is.
func (h *Host) PublishRawHeader(ctx context.Context, typ string, body []byte, msgID, hostSeq string) error {
	_, err := natsbus.PublishEvent(ctx, h.JS, h.Prefix+"."+h.ID+".event."+typ, body, msgID, hostSeq)
	return err
}

// Hello announces a (re)start of the host with a new boot id; Host-Seq restarts at 1.
func (h *Host) Hello(ctx context.Context, boot string, resumed ...string) error {
	return h.PublishHello(ctx, boot, runtime.Capabilities{TUI: true, Compact: true, Move: true, List: true}, resumed...)
}

// PublishHello is Hello with the capabilities the host declares.
func (h *Host) PublishHello(ctx context.Context, boot string, caps runtime.Capabilities, resumed ...string) error {
	if resumed == nil {
		resumed = []string{}
	}
	h.mu.Lock()
	h.boot, h.seq = boot, 0
	h.hello = map[string]any{"hostID": h.ID, "api": h.API, "version": "fake",
		"bootID": boot, "directory": h.Dir, "worktree": h.Dir, "projectID": "p1",
		"capabilities": caps, "resumed": resumed}
	if h.SmallModel != "" {
		h.hello["smallModel"] = h.SmallModel
	}
	hello := h.hello
	h.mu.Unlock()
	_, err := h.Publish(ctx, protocol.EventHostHello, hello)
	return err
}

// HelloOnReconnect makes the host say hello again (HelloAgain) each time its connection
// to the broker comes back, unless it is away. It takes the connection's reconnect
// handler.
func (h *Host) HelloOnReconnect() {
	h.NC.SetReconnectHandler(func(*nats.Conn) {
		h.goRun(func(ctx context.Context) {
			h.mu.Lock()
			away := h.away
			h.mu.Unlock()
			if away {
				return
			}
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_ = h.HelloAgain(ctx)
		})
	})
}

// HelloAgain repeats the last hello, same boot and Host-Seq going on, as a host does when
// its connection to the broker comes back (thatch's embedded broker restarts with thatch):
// the calls thatch kept for it while it could not answer go out (rule 12).
func (h *Host) HelloAgain(ctx context.Context) error {
	h.mu.Lock()
	hello := h.hello
	h.mu.Unlock()
	if hello == nil {
		return fmt.Errorf("host %s never said hello", h.ID)
	}
	_, err := h.Publish(ctx, protocol.EventHostHello, hello)
	return err
}

// Created announces a session (a child when parent is set) and records it on the host.
func (h *Host) Created(ctx context.Context, id, parent, title, dir string) error {
	info := runtime.SessionInfo{ID: id, ParentID: parent, Title: title, Directory: dir}
	h.AddSession(info)
	_, err := h.Publish(ctx, protocol.EventSessionCreated, map[string]any{"sessionID": id, "info": info})
	return err
}

// Status publishes a status change; an idle is sent as opencode does, twice.
func (h *Host) Status(ctx context.Context, id, status string) error {
	if _, err := h.Publish(ctx, protocol.EventSessionStatus, map[string]any{"sessionID": id, "status": map[string]any{"type": status}}); err != nil {
		return err
	}
	if status != "idle" {
		return nil
	}
	_, err := h.Publish(ctx, protocol.EventSessionIdle, map[string]any{"sessionID": id})
	return err
}

// ToolExecuted publishes one finished tool call.
func (h *Host) ToolExecuted(ctx context.Context, session, callID, tool, output string) error {
	_, err := h.Publish(ctx, protocol.EventToolExecuteAfter, map[string]any{"sessionID": session, "callID": callID, "tool": tool,
		"args": map[string]any{"command": "echo " + callID}, "title": tool, "output": output, "metadata": map[string]any{}})
	return err
}

// Tool calls one of thatch's tools for a session, as the host's model would.
func (h *Host) Tool(ctx context.Context, apiPrefix, name, session string, args any) (runtime.Answer, *runtime.HostError, error) {
	return h.ToolCall(ctx, apiPrefix, name, session, "", args)
}

// ToolCall is Tool with the model's call id, which thatch's memory tools answer once.
func (h *Host) ToolCall(ctx context.Context, apiPrefix, name, session, callID string, args any) (runtime.Answer, *runtime.HostError, error) {
	data, _ := json.Marshal(map[string]any{"sessionID": session, "callID": callID, "args": args})
	msg, err := h.NC.RequestWithContext(ctx, apiPrefix+".tool."+name, data)
	if err != nil {
		return runtime.Answer{}, nil, err
	}
	result, herr, err := protocol.Decode(msg.Data)
	if err != nil || herr != nil {
		return runtime.Answer{}, herr, err
	}
	var a runtime.Answer
	return a, nil, json.Unmarshal(result, &a)
}
