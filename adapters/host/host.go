package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Client performs host calls over NATS.
type Client struct {
	NC      *nats.Conn
	Prefix  string        // host subject prefix, "opencode" by default
	Timeout time.Duration // per request
	Log     *slog.Logger

	mu      sync.Mutex
	missing map[string]bool // host/method pairs that had no responder, logged once
}

var _ runtime.Caller = (*Client)(nil)

// Request is one protocol method call: the wire form of a runtime.Call.
type Request struct {
	Method string
	Params any
}

// Encode maps c to the method and parameters of an api host.
func Encode(api string, c runtime.Call) (Request, error) {
	v2 := api == "v2"
	switch c.Op {
	case runtime.OpCreate:
		p := map[string]any{"title": c.Title}
		if c.SessionID != "" {
			p["parentID"] = c.SessionID
		}
		return Request{protocol.MethodSessionCreate, p}, nil
	case runtime.OpPrompt:
		part := map[string]any{"type": "text", "text": c.Text}
		if c.Synthetic {
			part["synthetic"] = true
		}
		p := map[string]any{"sessionID": c.SessionID, "parts": []any{part}}
		if c.NoReply {
			p["noReply"] = true
		}
		if provider, model, ok := runtime.ParseModel(c.Model); ok {
			p["model"] = map[string]string{"providerID": provider, "modelID": model}
		}
		return Request{protocol.MethodSessionPrompt, p}, nil
	case runtime.OpDelete:
		return Request{protocol.MethodSessionDelete, map[string]any{"sessionID": c.SessionID}}, nil
	case runtime.OpList:
		return Request{protocol.MethodSessionList, map[string]any{}}, nil
	case runtime.OpProjects:
		return Request{protocol.MethodProjectList, map[string]any{}}, nil
	case runtime.OpMove:
		return Request{protocol.MethodSessionMove, map[string]any{"sessionID": c.SessionID, "directory": c.Directory}}, nil
	case runtime.OpMessages:
		if v2 {
			return Request{protocol.MethodSessionContext, map[string]any{"sessionID": c.SessionID}}, nil
		}
		return Request{protocol.MethodSessionMessages, map[string]any{"sessionID": c.SessionID}}, nil
	case runtime.OpCompact:
		if v2 {
			return Request{protocol.MethodSessionCompact, map[string]any{"sessionID": c.SessionID}}, nil
		}
		// sessionID is an extension (docs/protocol.md): a host with no TUI, such as
		// the opencode bridge, compacts that session itself.
		return Request{protocol.MethodTUIExecuteCommand, map[string]any{"command": "session_compact", "sessionID": c.SessionID}}, nil
	case runtime.OpClose:
		if v2 {
			return Request{protocol.MethodBridgeEmit, map[string]any{"type": "exit-tab-closed", "properties": map[string]any{"sessionID": c.SessionID}}}, nil
		}
		return Request{protocol.MethodTUIPublish, map[string]any{"type": "tui.command.execute", "properties": map[string]any{"command": "app.exit"}}}, nil
	case runtime.OpToast:
		p := map[string]any{"title": c.Title, "message": c.Text, "variant": c.Variant}
		if v2 {
			return Request{protocol.MethodBridgeEmit, map[string]any{"type": "toast", "properties": p}}, nil
		}
		return Request{protocol.MethodTUIShowToast, p}, nil
	}
	return Request{}, fmt.Errorf("no host method for operation %q", c.Op)
}

// Decode reads a successful result of c from an api host into res.
func Decode(api string, c runtime.Call, result json.RawMessage, res *runtime.Result) error {
	switch c.Op {
	case runtime.OpCreate:
		var s runtime.SessionInfo
		if err := json.Unmarshal(result, &s); err != nil || s.ID == "" {
			return fmt.Errorf("session.create result is not a Session with an id")
		}
		res.Session = &s
	case runtime.OpList:
		if err := json.Unmarshal(result, &res.Sessions); err != nil {
			return fmt.Errorf("session.list result is not a list of sessions: %v", err)
		}
	case runtime.OpProjects:
		if err := json.Unmarshal(result, &res.Projects); err != nil {
			return fmt.Errorf("project.list result is not a list of projects: %v", err)
		}
	case runtime.OpMessages:
		if api != "v2" {
			if err := json.Unmarshal(result, &res.Messages); err != nil {
				return fmt.Errorf("session.messages result is not a list of messages: %v", err)
			}
			return nil
		}
		// A v2 message is {id, role, content}; what its turn cost, when the host has it,
		// sits beside them with v1's names (protocol 1.1 §2).
		var ctx struct {
			Messages []struct {
				runtime.MessageInfo
				Content []runtime.Part `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(result, &ctx); err != nil {
			return fmt.Errorf("session.context result is not {messages: [...]}: %v", err)
		}
		for _, m := range ctx.Messages {
			res.Messages = append(res.Messages, runtime.Message{Info: m.MessageInfo, Parts: m.Content})
		}
	}
	return nil
}

// Do performs c on its host.
func (cl *Client) Do(ctx context.Context, api string, c runtime.Call) runtime.Result {
	res := runtime.Result{Call: c}
	req, err := Encode(api, c)
	if err != nil {
		res.Err = &runtime.HostError{Name: protocol.BadRequest, Message: err.Error()}
		return res
	}
	if p, ok := req.Params.(map[string]any); ok && c.Key != "" {
		p[protocol.IdempotencyKey] = c.Key
	}
	data, _ := json.Marshal(req.Params)
	subject := cl.Prefix + "." + c.Host + ".api." + req.Method
	rctx, cancel := context.WithTimeout(ctx, cl.Timeout)
	defer cancel()
	msg, err := cl.NC.RequestWithContext(rctx, subject, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		cl.noResponder(c.Host, req.Method)
		res.Err = &runtime.HostError{Name: protocol.NoResponder, Message: "host " + c.Host + " does not serve " + req.Method, NoResponder: true}
		return res
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		res.Err = &runtime.HostError{Name: protocol.Timeout, Message: fmt.Sprintf("host %s did not answer %s within %s", c.Host, req.Method, cl.Timeout)}
		return res
	case err != nil:
		res.Err = &runtime.HostError{Name: protocol.Transport, Message: fmt.Sprintf("%s to host %s: %v", req.Method, c.Host, err)}
		return res
	}
	result, herr, err := protocol.Decode(msg.Data)
	if err != nil {
		res.Err = &runtime.HostError{Name: protocol.BadReply, Message: fmt.Sprintf("host %s answered %s with something other than {result} or {error}", c.Host, req.Method)}
		return res
	}
	if herr != nil {
		if herr.Name == "" {
			herr.Name = protocol.HostFailed
		}
		res.Err = herr
		return res
	}
	if err := Decode(api, c, result, &res); err != nil {
		res.Err = &runtime.HostError{Name: protocol.BadReply, Message: fmt.Sprintf("host %s: %v", c.Host, err)}
	}
	return res
}

func (cl *Client) noResponder(host, method string) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.missing == nil {
		cl.missing = map[string]bool{}
	}
	key := host + "/" + method
	if cl.missing[key] {
		return
	}
	cl.missing[key] = true
	cl.Log.Info("host does not serve a method; skipping it", "host", host, "method", method)
}
