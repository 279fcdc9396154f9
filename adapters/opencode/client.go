package opencode

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Client calls an opencode server's HTTP API.
type Client struct {
	BaseURL  string // e.g. http://127.0.0.1:4096
	Password string // OPENCODE_SERVER_PASSWORD: HTTP basic auth as user "opencode"
	HTTP     *http.Client
	Log      *slog.Logger // optional: what fails after its call was answered
	// CompactAccept is how long a compaction request waits for an early error before it
	// answers that the compaction is under way; CompactMax bounds the compaction. Zero
	// means DefaultCompactAccept, DefaultCompactMax.
	CompactAccept, CompactMax time.Duration
}

// do performs one request. A JSON error body ({name, data: {message}}) becomes a
// HostError with that name; an HTML answer (opencode's reply to an unknown route) is a
// NotFoundError.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Password != "" {
		req.SetBasicAuth("opencode", c.Password)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return &protocol.Error{Name: protocol.Unavailable, Message: fmt.Sprintf("opencode at %s: %v", c.BaseURL, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return &protocol.Error{Name: protocol.Unavailable, Message: fmt.Sprintf("%s %s: %v", method, path, err)}
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "text/html" {
		return &protocol.Error{Name: protocol.NotFound, Message: fmt.Sprintf("this opencode has no route %s %s", method, path)}
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return &protocol.Error{Name: protocol.Unauthorized, Message: "opencode refused the credentials: set OPENCODE_SERVER_PASSWORD to the server's password"}
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Name string `json:"name"`
			Data struct {
				Message string `json:"message"`
			} `json:"data"`
		}
		if json.Unmarshal(data, &e) == nil && e.Name != "" {
			return &protocol.Error{Name: e.Name, Message: e.Data.Message}
		}
		return &protocol.Error{Name: protocol.HostFailed, Message: fmt.Sprintf("%s %s: HTTP %d", method, path, resp.StatusCode)}
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &protocol.Error{Name: protocol.BadReply, Message: fmt.Sprintf("%s %s answered something other than JSON", method, path)}
	}
	return nil
}

// Call performs one host API method (protocol §2, as a v1 host) and returns its result.
func (c *Client) Call(ctx context.Context, method string, p map[string]json.RawMessage) (any, error) {
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(p[k], &s)
		return s
	}
	sid := url.PathEscape(str("sessionID"))
	var out json.RawMessage
	switch method {
	case protocol.MethodSessionCreate:
		body, route := map[string]any{}, "/session"
		if v := str("parentID"); v != "" {
			// opencode creates a session in the directory the request names, else in its
			// own working directory: a child belongs in its parent's.
			var parent struct {
				Directory string `json:"directory"`
			}
			if err := c.do(ctx, "GET", "/session/"+url.PathEscape(v), nil, &parent); err != nil {
				return nil, err
			}
			body["parentID"] = v
			if parent.Directory != "" {
				route += "?directory=" + url.QueryEscape(parent.Directory)
			}
		}
		if v := str("title"); v != "" {
			body["title"] = v
		}
		err := c.do(ctx, "POST", route, body, &out)
		return out, err
	case protocol.MethodSessionPrompt:
		body := map[string]json.RawMessage{"parts": p["parts"]}
		if n, ok := p["noReply"]; ok {
			body["noReply"] = n
		}
		m, named := p["model"]
		named = named && string(m) != "null"
		if named {
			body["model"] = m // protocol 1.1: the model that answers this turn
		}
		if string(p["noReply"]) != "true" {
			var s struct {
				ParentID string `json:"parentID"`
				Title    string `json:"title"`
			}
			_ = c.do(ctx, "GET", "/session/"+sid, nil, &s) // the prompt itself says what is wrong
			if !named && s.ParentID != "" {
				// No model named: a child answers on its parent's model, as its parent's
				// turns do (opencode's own default would be the configured model).
				if m, err := c.sessionModel(ctx, s.ParentID); err == nil && m != nil {
					body["model"], _ = json.Marshal(m)
				}
			}
			if s.Title == runtime.ExtractionTitle {
				if tools := c.extractionTools(ctx, str("sessionID")); tools != nil {
					body["tools"] = tools
				}
			}
		}
		if err := c.do(ctx, "POST", "/session/"+sid+"/prompt_async", body, nil); err != nil {
			return nil, err
		}
		return map[string]any{}, nil
	case protocol.MethodSessionDelete:
		if err := c.do(ctx, "DELETE", "/session/"+sid, nil, &out); err != nil {
			return nil, err
		}
		return true, nil
	case protocol.MethodSessionList:
		err := c.sessions(ctx, 0, &out)
		return out, err
	case protocol.MethodProjectList:
		err := c.do(ctx, "GET", "/project", nil, &out)
		return out, err
	case protocol.MethodSessionMessages:
		err := c.do(ctx, "GET", "/session/"+sid+"/message", nil, &out)
		return out, err
	case protocol.MethodTUIExecuteCommand:
		if str("command") == "session_compact" && str("sessionID") != "" {
			// thatch names the session (a protocol extension): compact exactly that one,
			// which also works with no TUI attached, where session_compact does nothing.
			return c.summarize(ctx, str("sessionID"))
		}
		if err := c.do(ctx, "POST", "/tui/execute-command", map[string]any{"command": str("command")}, nil); err != nil {
			return nil, err
		}
		return true, nil
	case protocol.MethodTUIPublish:
		if err := c.do(ctx, "POST", "/tui/publish", map[string]json.RawMessage{"type": p["type"], "properties": p["properties"]}, nil); err != nil {
			return nil, err
		}
		return true, nil
	case protocol.MethodTUIShowToast:
		if err := c.do(ctx, "POST", "/tui/show-toast", map[string]string{"title": str("title"), "message": str("message"), "variant": str("variant")}, nil); err != nil {
			return nil, err
		}
		return true, nil
	case protocol.MethodSessionMove:
		err := c.do(ctx, "POST", "/experimental/control-plane/move-session",
			map[string]any{"sessionID": str("sessionID"), "destination": map[string]string{"directory": str("directory")}}, &out)
		return out, err
	}
	return nil, &protocol.Error{Name: protocol.NotFound, Message: "the opencode bridge has no method " + method}
}

// sessions lists every project's sessions, those updated at or after sinceMS when it is
// not zero. opencode returns 100 unless asked for more.
func (c *Client) sessions(ctx context.Context, sinceMS int64, out any) error {
	q := "?limit=1000000"
	if sinceMS > 0 {
		q += fmt.Sprintf("&start=%d", sinceMS)
	}
	err := c.do(ctx, "GET", "/experimental/session"+q, nil, out)
	if he, ok := err.(*protocol.Error); ok && he.Name == protocol.NotFound {
		err = c.do(ctx, "GET", "/session"+q, nil, out) // an opencode without the route: this directory's
	}
	return err
}

// ToolIDs lists the ids of the tools opencode serves its models (GET
// /experimental/tool/ids), thatch's plugin's among them once opencode has loaded it.
func (c *Client) ToolIDs(ctx context.Context) ([]string, error) {
	var ids []string
	if err := c.do(ctx, "GET", "/experimental/tool/ids", nil, &ids); err != nil {
		return nil, err
	}
	return ids, nil
}

// Model names a model as opencode's routes take it.
type Model struct {
	ProviderID string `json:"providerID"`
	ModelID    string `json:"modelID"`
}

// sessionModel returns the model of sessionID's latest user message, nil when it has none.
func (c *Client) sessionModel(ctx context.Context, sessionID string) (*Model, error) {
	var msgs []struct {
		Info struct {
			Role  string `json:"role"`
			Model Model  `json:"model"`
		} `json:"info"`
	}
	if err := c.do(ctx, "GET", "/session/"+url.PathEscape(sessionID)+"/message", nil, &msgs); err != nil {
		return nil, err
	}
	var m *Model
	for _, msg := range msgs {
		if msg.Info.Role == "user" && msg.Info.Model.ProviderID != "" {
			m = &msg.Info.Model
		}
	}
	return m, nil
}

// extractionTools is the tools map of the prompt of child, an extraction child: every tool opencode
// serves turned off except thatch's own, so that the child's model requests carry only
// their definitions (the child reads its payload and writes memories, nothing else). nil
// when opencode cannot list its tools: the child is then offered them all.
func (c *Client) extractionTools(ctx context.Context, child string) json.RawMessage {
	ids, err := c.ToolIDs(ctx)
	if err != nil {
		if c.Log != nil {
			c.Log.Warn("could not list opencode's tools: the extraction child is offered all of them", "child", child, "err", err)
		}
		return nil
	}
	off := map[string]bool{}
	for _, id := range ids {
		if !slices.Contains(thatchTools, id) {
			off[id] = false
		}
	}
	data, _ := json.Marshal(off)
	return data
}

// SmallModel returns opencode's configured small_model ("provider/model"), "" when none
// is configured.
func (c *Client) SmallModel(ctx context.Context) (string, error) {
	var cfg struct {
		SmallModel string `json:"small_model"`
	}
	if err := c.do(ctx, "GET", "/config", nil, &cfg); err != nil {
		return "", err
	}
	return cfg.SmallModel, nil
}

// summarize compacts a session with the model of its latest user message, or the
// server's configured model when the session has none yet.
func (c *Client) summarize(ctx context.Context, sessionID string) (any, error) {
	sid := url.PathEscape(sessionID)
	var provider, model string
	m, err := c.sessionModel(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if m != nil {
		provider, model = m.ProviderID, m.ModelID
	}
	if provider == "" {
		var cfg struct {
			Model string `json:"model"`
		}
		if err := c.do(ctx, "GET", "/config", nil, &cfg); err != nil {
			return nil, err
		}
		var ok bool
		if provider, model, ok = strings.Cut(cfg.Model, "/"); !ok {
			return nil, &protocol.Error{Name: protocol.BadRequest, Message: "cannot compact " + sessionID + ": it has no messages and opencode has no default model (set \"model\" in opencode.json)"}
		}
	}
	// The route answers when the compaction is over, which with a real model takes longer
	// than thatch waits for a host call: an error that comes at once is the answer;
	// otherwise the compaction is under way, and session.compacted will say when it ends.
	errc := make(chan error, 1)
	go func() {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(c.CompactMax, DefaultCompactMax))
		defer cancel()
		errc <- c.do(bg, "POST", "/session/"+sid+"/summarize", map[string]string{"providerID": provider, "modelID": model}, nil)
	}()
	select {
	case err := <-errc:
		if err != nil {
			return nil, err
		}
	case <-time.After(cmp.Or(c.CompactAccept, DefaultCompactAccept)):
		go func() {
			if err := <-errc; err != nil && c.Log != nil {
				c.Log.Warn("compaction failed after it started", "session", sessionID, "err", err)
			}
		}()
	}
	return true, nil
}

// The defaults of Client.CompactAccept and Client.CompactMax.
const (
	DefaultCompactAccept = 2 * time.Second
	DefaultCompactMax    = 30 * time.Minute
)
