package claudecode

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Host answers the host API (protocol §2) for Claude Code's host inside thatch serve. Claude
// Code has no API of its own to call: its sessions reach thatch through hooks, and the only
// sessions thatch asks it to run are extraction children, which Host runs as headless
// Claude Code processes (claude -p) in the parent session's folder, restricted to thatch's
// tools through thatch mcp --extraction <child>, on the small model. A child's end is
// published as its idle (or its error), as a host would, and its tokens and cost, read from
// its JSON result, answer session.messages for the ledger (rule 14).
type Host struct {
	NC        *nats.Conn
	JS        jetstream.JetStream
	Prefix    string // the host subject prefix, "opencode"
	APIPrefix string // thatch's own, "thatch"
	ID        string // the host id, HostID
	Claude    string // the claude binary
	Thatch    string // the thatch binary, which the child runs as its MCP server
	Env       []string
	// Model is the child's model when a prompt names none ("haiku": Claude Code's alias
	// of its small, fast model).
	Model   string
	Timeout time.Duration // a child's run at most (default 10 minutes)
	// CompactWait bounds the wait for a headless session's own process to end before its
	// compaction runs (default 2 minutes).
	CompactWait time.Duration
	Log         *slog.Logger

	memo     *protocol.Memo
	mu       sync.Mutex
	children map[string]*child
	turns    map[string]Turn // the last turn of each session, from its Stop hook
	wg       sync.WaitGroup
}

// maxTurns bounds the turns kept: a wrap-up reads its session's within seconds of its Stop.
const maxTurns = 4096

// child is one extraction child.
type child struct {
	id, parent, dir, title string
	model                  string
	cancel                 context.CancelFunc
	done                   bool
	result                 *Result
}

// Result is what a headless Claude Code's --output-format json result says of its run.
type Result struct {
	Type    string  `json:"type"`
	Subtype string  `json:"subtype"`
	IsError bool    `json:"is_error"`
	Result  string  `json:"result"`
	Session string  `json:"session_id"`
	Cost    float64 `json:"total_cost_usd"`
	Usage   struct {
		Input       int64 `json:"input_tokens"`
		Output      int64 `json:"output_tokens"`
		CacheRead   int64 `json:"cache_read_input_tokens"`
		CacheCreate int64 `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	ModelUsage map[string]ModelUsage `json:"modelUsage"` // by the model's full name
}

// ExtractionTools are the tools an extraction child may call, as Claude Code names the
// tools of the MCP server "thatch".
func ExtractionTools() []string {
	var out []string
	for _, t := range []string{protocol.ToolPayload, protocol.ToolDone, protocol.ToolRemember, protocol.ToolUpdate,
		protocol.ToolForget, protocol.ToolSearch} {
		out = append(out, MCPPrefix+t)
	}
	return out
}

// Run answers until ctx ends, then stops the children it runs.
func (h *Host) Run(ctx context.Context) error {
	h.memo = protocol.NewMemo(1024)
	h.children = map[string]*child{}
	h.turns = map[string]Turn{}
	if h.Timeout == 0 {
		h.Timeout = 10 * time.Minute
	}
	if h.CompactWait == 0 {
		h.CompactWait = 2 * time.Minute
	}
	if h.Model == "" {
		h.Model = "haiku"
	}
	sub, err := h.NC.Subscribe(h.Prefix+"."+h.ID+".api.>", func(m *nats.Msg) {
		method := m.Subject[strings.LastIndex(m.Subject, ".api.")+len(".api."):]
		var params map[string]any
		_ = json.Unmarshal(m.Data, &params)
		key, _ := params[protocol.IdempotencyKey].(string)
		data, _ := h.memo.Do(key, func() ([]byte, bool) {
			res, herr := h.answer(ctx, method, m.Data)
			data, _ := protocol.Encode(res, herr)
			return data, true
		}, nil)
		_ = m.Respond(data)
	})
	if err != nil {
		return fmt.Errorf("claude code host %s: subscribe to its API: %w", h.ID, err)
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.reap(ctx)
	}()
	<-ctx.Done()
	_ = sub.Unsubscribe()
	h.mu.Lock()
	for _, c := range h.children {
		if c.cancel != nil {
			c.cancel()
		}
	}
	h.mu.Unlock()
	h.wg.Wait()
	return nil
}

func notFound(msg string) *runtime.HostError {
	return &runtime.HostError{Name: protocol.NotFound, Message: msg}
}

// answer performs one host method.
func (h *Host) answer(ctx context.Context, method string, data []byte) (any, *runtime.HostError) {
	var p struct {
		SessionID string `json:"sessionID"`
		ParentID  string `json:"parentID"`
		Title     string `json:"title"`
		NoReply   bool   `json:"noReply"`
		Parts     []struct {
			Text string `json:"text"`
		} `json:"parts"`
		Model *struct {
			ProviderID string `json:"providerID"`
			ModelID    string `json:"modelID"`
		} `json:"model"`
		Title2     string `json:"message"`
		Variant    string `json:"variant"`
		Command    string `json:"command"`
		Text       string `json:"text"`
		Headless   bool   `json:"headless"`
		PID        int    `json:"pid"`
		Properties struct {
			Command string `json:"command"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, &runtime.HostError{Name: protocol.BadRequest, Message: "request is not a JSON object: " + err.Error()}
	}
	switch method {
	case protocol.MethodSessionCreate:
		return h.create(ctx, p.ParentID, p.Title)
	case protocol.MethodSessionPrompt:
		h.mu.Lock()
		c := h.children[p.SessionID]
		h.mu.Unlock()
		if c == nil || p.NoReply {
			// A Claude Code session takes its start text through its SessionStart hook
			// (capabilities.context): a no-reply prompt to it has nowhere to go.
			return map[string]any{}, nil
		}
		var text []string
		for _, part := range p.Parts {
			text = append(text, part.Text)
		}
		// THATCH_EXTRACT_MODEL names one model for every host: a Claude Code child takes
		// it only when it is Anthropic's, else Claude Code's small model.
		model := h.Model
		if p.Model != nil && p.Model.ModelID != "" && (p.Model.ProviderID == "anthropic" || p.Model.ProviderID == "") {
			model = p.Model.ModelID
		}
		h.start(ctx, c, strings.Join(text, "\n"), model)
		return map[string]any{}, nil
	case protocol.MethodSessionDelete:
		h.mu.Lock()
		c := h.children[p.SessionID]
		delete(h.children, p.SessionID)
		h.mu.Unlock()
		if c == nil {
			return nil, notFound("no extraction child " + p.SessionID + " runs on this Claude Code host")
		}
		if c.cancel != nil {
			c.cancel()
		}
		return true, nil
	case protocol.MethodSessionMessages:
		h.mu.Lock()
		c := h.children[p.SessionID]
		h.mu.Unlock()
		if c == nil {
			return h.lastReply(p.SessionID), nil
		}
		return h.messages(c), nil
	case MethodTurn:
		h.mu.Lock()
		if len(h.turns) >= maxTurns {
			clear(h.turns) // old sessions' turns: nothing waits for them
		}
		h.turns[p.SessionID] = Turn{SessionID: p.SessionID, Text: p.Text, Headless: p.Headless, PID: p.PID}
		h.mu.Unlock()
		return true, nil
	case protocol.MethodTUIExecuteCommand:
		if p.Command != "session_compact" {
			break
		}
		return h.compact(ctx, p.SessionID)
	case protocol.MethodTUIPublish:
		if p.Properties.Command != "app.exit" {
			break
		}
		// A greenlit /thatch:exit (rule 6): thatch has recorded the session's death and
		// taken it out of the live directory. A headless session's process ends by
		// itself after its turn; an interactive one is the user's to end (its Stop hook
		// told them so): nothing outside Claude Code closes it.
		h.Log.Info("Claude Code session wrapped up by /thatch:exit: Claude Code ends it itself", "host", h.ID)
		return true, nil
	case protocol.MethodSessionList:
		h.mu.Lock()
		defer h.mu.Unlock()
		out := []runtime.SessionInfo{}
		for _, c := range h.children {
			out = append(out, runtime.SessionInfo{ID: c.id, ParentID: c.parent, Title: c.title, Directory: c.dir})
		}
		return out, nil
	case protocol.MethodProjectList:
		return []any{}, nil
	case protocol.MethodTUIShowToast:
		h.Log.Info("thatch toast for Claude Code", "host", h.ID, "message", p.Title2, "variant", p.Variant)
		return true, nil
	}
	return nil, &runtime.HostError{Name: protocol.NotImplemented, Message: "Claude Code's host has no " + method}
}

// lastReply is a Claude Code session's messages as thatch can know them: its last turn's
// reply, from its Stop hook (rule 6 reads no more), or none.
func (h *Host) lastReply(session string) []runtime.Message {
	h.mu.Lock()
	t, ok := h.turns[session]
	h.mu.Unlock()
	if !ok {
		return []runtime.Message{}
	}
	return []runtime.Message{{Info: runtime.MessageInfo{ID: "msg_last_" + session, Role: "assistant"},
		Parts: []runtime.Part{{Type: "text", Text: t.Text}}}}
}

// compact compacts a Claude Code session after a greenlit /thatch:compact (rule 6): for a
// headless session, once its claude -p has ended (one still running after CompactWait is
// not compacted: session.compacted ends its compacting), thatch runs claude -p /compact --resume
// <session> in its folder. That run's hooks are the session's: PreCompact marks it
// compacting, SessionStart source=compact marks it compacted and gives it the memory
// section, and SessionEnd is its idle, where the extraction goes on; a busy is published
// before it so that idle counts. An interactive session keeps its context in its own
// process, which nothing outside Claude Code can compact: NotImplementedError, which
// clears the compacting flag (its Stop hook asked the user to run /compact).
func (h *Host) compact(ctx context.Context, session string) (any, *runtime.HostError) {
	h.mu.Lock()
	t, ok := h.turns[session]
	h.mu.Unlock()
	if !ok || !t.Headless {
		return nil, &runtime.HostError{Name: protocol.NotImplemented, Message: "Claude Code session " + session +
			" is interactive (or thatch has not seen its turn end): its context lives in its own process, so the user runs /compact there"}
	}
	dir, err := h.directory(ctx, session)
	if err != nil {
		return nil, &runtime.HostError{Name: protocol.Unavailable, Message: err.Error()}
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		run := newUUID()[:8]
		if !h.waitEnded(ctx, t.PID) {
			if ctx.Err() == nil {
				// A claude -p that reads its prompts as a stream (or an SDK's process) is
				// still the session's: a compaction beside it would write the transcript
				// under it. Its session is as it was.
				h.Log.Warn("claude code session's process still runs: not compacted", "host", h.ID, "session", session, "pid", t.PID)
				h.publish(ctx, "cc_compactskipped_"+session+"_"+run, protocol.EventSessionCompacted, map[string]any{"sessionID": session})
			}
			return
		}
		h.publish(ctx, "cc_compactbusy_"+session+"_"+run, protocol.EventSessionStatus, map[string]any{"sessionID": session, "status": map[string]any{"type": "busy"}})
		// Only the wrap-up asks a Claude Code host to compact (runtime/wrapup.go).
		const why = "its greenlit /thatch:compact wrap-up"
		h.Log.Info("claude code compaction starts: claude -p /compact --resume", "host", h.ID, "session", session, "why", why, "directory", dir)
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, h.Timeout)
		defer cancel()
		cmd := exec.CommandContext(rctx, h.Claude, CompactArgs(session)...)
		cmd.Dir, cmd.SysProcAttr = dir, childAttr()
		cmd.Env = append(os.Environ(), h.Env...) // its hooks are the session's: no ChildEnv
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if ctx.Err() != nil {
			return
		}
		var res Result
		jerr := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &res)
		if err != nil || jerr != nil || res.IsError {
			// No SessionStart source=compact will come: the session is as it was, and
			// session.compacted ends its compacting.
			h.Log.Warn("claude code compaction failed: the session is as it was", "host", h.ID, "session", session, "why", why,
				"outcome", "failed", "duration", time.Since(start).Round(time.Millisecond),
				"err", fmt.Sprintf("%v %s", errors.Join(err, jerr), cutText(errb.String()+" "+res.Result, 300)))
			h.publish(ctx, "cc_compactfailed_"+session+"_"+run, protocol.EventSessionCompacted, map[string]any{"sessionID": session})
		} else {
			h.Log.Info("claude code compaction done", "host", h.ID, "session", session, "why", why,
				"outcome", "compacted", "duration", time.Since(start).Round(time.Millisecond), "cost_usd", res.Cost)
		}
		h.publish(ctx, "cc_compactidle_"+session+"_"+run, protocol.EventSessionStatus, map[string]any{"sessionID": session, "status": map[string]any{"type": "idle"}})
	}()
	return true, nil
}

// CompactArgs are the claude arguments that compact a session: Claude Code's own /compact,
// headless, on the session resumed.
func CompactArgs(session string) []string {
	return []string{"-p", "/compact", "--resume", session, "--output-format", "json"}
}

// waitEnded waits, at most CompactWait, until the process pid has ended (a session's own
// claude -p still writes its transcript while its last hooks run), and says whether it did.
func (h *Host) waitEnded(ctx context.Context, pid int) bool {
	if pid <= 0 {
		return true
	}
	deadline := time.After(h.CompactWait)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for processAlive(pid) {
		select {
		case <-ctx.Done():
			return false
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
	return true
}

// create records an extraction child of parent, in parent's folder, and announces it.
func (h *Host) create(ctx context.Context, parent, title string) (any, *runtime.HostError) {
	if parent == "" {
		return nil, &runtime.HostError{Name: protocol.BadRequest, Message: "Claude Code's host creates extraction children only: give parentID"}
	}
	dir, err := h.directory(ctx, parent)
	if err != nil {
		return nil, &runtime.HostError{Name: protocol.Unavailable, Message: err.Error()}
	}
	c := &child{id: newUUID(), parent: parent, dir: dir, title: title}
	h.mu.Lock()
	h.children[c.id] = c
	h.mu.Unlock()
	info := runtime.SessionInfo{ID: c.id, ParentID: parent, Title: title, Directory: dir}
	h.publish(ctx, "cc_created_"+c.id, protocol.EventSessionCreated, map[string]any{"sessionID": c.id, "info": info})
	return info, nil
}

// sessionRows asks thatch for the sessions of this host (§4 sessions).
func (h *Host) sessionRows(ctx context.Context) ([]sessionRow, error) {
	body, _ := json.Marshal(map[string]string{"hostID": h.ID})
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := h.NC.RequestWithContext(rctx, h.APIPrefix+".api.sessions", body)
	if err != nil {
		return nil, err
	}
	res, rerr, err := protocol.Decode(m.Data)
	if err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	var rows []sessionRow
	if err := json.Unmarshal(res, &rows); err != nil {
		return nil, fmt.Errorf("thatch's sessions: %w", err)
	}
	return rows, nil
}

type sessionRow struct {
	SessionID string `json:"sessionID"`
	Kind      string `json:"kind"`
	Directory string `json:"directory"`
}

// reap ends the extraction children thatch still tracks for this host that no process of
// this responder runs: their claude -p died with the thatch before (a Claude Code host has
// no boot of its own to say so, rule 7). Each gets a session.error, so its claims go back
// to pending and its parent extracts again (rule 5). It asks until thatch's API answers.
func (h *Host) reap(ctx context.Context) {
	for attempt := 0; attempt < 60; attempt++ {
		rows, err := h.sessionRows(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				continue
			}
		}
		for _, r := range rows {
			h.mu.Lock()
			mine := h.children[r.SessionID] != nil
			h.mu.Unlock()
			if r.Kind == "extraction" && !mine {
				h.Log.Info("claude code extraction child died with the thatch before: ending it", "host", h.ID, "session", r.SessionID)
				h.publish(ctx, "cc_orphan_"+r.SessionID, protocol.EventSessionError, map[string]any{"sessionID": r.SessionID,
					"error": map[string]any{"name": "ClaudeCodeError", "data": map[string]any{"message": "the extraction child's process ended with thatch"}}})
			}
		}
		return
	}
}

// directory asks thatch for the folder of one of this host's sessions.
func (h *Host) directory(ctx context.Context, session string) (string, error) {
	rows, err := h.sessionRows(ctx)
	if err != nil {
		return "", fmt.Errorf("ask thatch for the folder of session %s: %w", session, err)
	}
	for _, r := range rows {
		if r.SessionID == session && r.Directory != "" {
			return r.Directory, nil
		}
	}
	return "", fmt.Errorf("thatch knows no folder of session %s", session)
}

// publish publishes one event of this host, as a host does (protocol §1), logging a failure.
func (h *Host) publish(ctx context.Context, id, typ string, props map[string]any) {
	body, _ := Event{ID: id, Type: typ, Props: props}.Body()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	msg := nats.NewMsg(h.Prefix + "." + h.ID + ".event." + typ)
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, id)
	if _, err := h.JS.PublishMsg(pctx, msg); err != nil {
		h.Log.Warn("claude code host: publish an event", "host", h.ID, "type", typ, "err", err)
	}
}

// Args are the claude arguments of an extraction child's run: headless, JSON result, no
// built-in tools, thatch's MCP server alone (thatch mcp --extraction <child>), thatch's
// tools allowed, nothing saved.
func (h *Host) Args(c *child, prompt, model string) []string {
	mcp, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"thatch": map[string]any{
		"type": "stdio", "command": h.Thatch, "args": []string{"mcp", "--extraction", c.id}}}})
	return []string{"-p", prompt, "--output-format", "json", "--model", model, "--tools", "",
		"--mcp-config", string(mcp), "--strict-mcp-config", "--allowedTools", strings.Join(ExtractionTools(), ","),
		"--no-session-persistence"}
}

// ChildEnv marks a process as thatch's extraction child: thatch hook does nothing in it, so
// the child's own session is never journaled.
const ChildEnv = "THATCH_CLAUDE_CHILD"

// start runs the child's turn in the background: busy, claude -p, then idle or error.
func (h *Host) start(ctx context.Context, c *child, prompt, model string) {
	rctx, cancel := context.WithTimeout(ctx, h.Timeout)
	h.mu.Lock()
	if c.cancel != nil {
		h.mu.Unlock()
		cancel()
		return // a turn runs already
	}
	c.cancel, c.model = cancel, model
	h.mu.Unlock()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer cancel()
		h.publish(ctx, "cc_busy_"+c.id, protocol.EventSessionStatus, map[string]any{"sessionID": c.id, "status": map[string]any{"type": "busy"}})
		cmd := exec.CommandContext(rctx, h.Claude, h.Args(c, prompt, model)...)
		cmd.Dir, cmd.SysProcAttr = c.dir, childAttr()
		cmd.Env = append(append(os.Environ(), h.Env...), ChildEnv+"=1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var res Result
		jerr := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &res)
		h.mu.Lock()
		c.done = true
		if jerr == nil {
			c.result = &res
		}
		gone := h.children[c.id] == nil
		h.mu.Unlock()
		if gone || ctx.Err() != nil {
			return // deleted meanwhile (thatch is done with it), or thatch is stopping
		}
		if err != nil || jerr != nil || res.IsError {
			msg := failure(err, jerr, errb.String(), res)
			h.Log.Warn("claude code extraction child failed", "host", h.ID, "session", c.id, "err", msg)
			h.publish(ctx, "cc_error_"+c.id, protocol.EventSessionError, map[string]any{"sessionID": c.id,
				"error": map[string]any{"name": "ClaudeCodeError", "data": map[string]any{"message": msg}}})
			return
		}
		h.publish(ctx, "cc_idle_"+c.id, protocol.EventSessionStatus, map[string]any{"sessionID": c.id, "status": map[string]any{"type": "idle"}})
	}()
}

// messages is a child's turn as one assistant message with its tokens and cost.
func (h *Host) messages(c *child) []runtime.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.result == nil {
		return []runtime.Message{}
	}
	r := c.result
	tokens := &runtime.Tokens{Input: r.Usage.Input, Output: r.Usage.Output}
	tokens.Cache.Read, tokens.Cache.Write = r.Usage.CacheRead, r.Usage.CacheCreate
	cost := r.Cost
	return []runtime.Message{{Info: runtime.MessageInfo{ID: "msg_" + c.id, Role: "assistant", ProviderID: "anthropic",
		ModelID: r.model(c.model), Tokens: tokens, Cost: &cost}, Parts: []runtime.Part{{Type: "text", Text: r.Result}}}}
}

func cutText(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// newUUID is a random version-4 UUID (Claude Code's session ids are UUIDs).
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
