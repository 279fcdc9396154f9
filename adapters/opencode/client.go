package opencode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/thatch-dev/thatch/runtime"
)

// Client calls an opencode server's HTTP API.
type Client struct {
	BaseURL  string // e.g. http://127.0.0.1:4096
	Password string // OPENCODE_SERVER_PASSWORD: HTTP basic auth as user "opencode"
	HTTP     *http.Client
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
		return &runtime.HostError{Name: "UnavailableError", Message: fmt.Sprintf("opencode at %s: %v", c.BaseURL, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return &runtime.HostError{Name: "UnavailableError", Message: fmt.Sprintf("%s %s: %v", method, path, err)}
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "text/html" {
		return &runtime.HostError{Name: "NotFoundError", Message: fmt.Sprintf("this opencode has no route %s %s", method, path)}
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return &runtime.HostError{Name: "UnauthorizedError", Message: "opencode refused the credentials: set OPENCODE_SERVER_PASSWORD to the server's password"}
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Name string `json:"name"`
			Data struct {
				Message string `json:"message"`
			} `json:"data"`
		}
		if json.Unmarshal(data, &e) == nil && e.Name != "" {
			return &runtime.HostError{Name: e.Name, Message: e.Data.Message}
		}
		return &runtime.HostError{Name: "HostError", Message: fmt.Sprintf("%s %s: HTTP %d", method, path, resp.StatusCode)}
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &runtime.HostError{Name: "BadReplyError", Message: fmt.Sprintf("%s %s answered something other than JSON", method, path)}
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
	case "session.create":
		body := map[string]any{}
		if v := str("parentID"); v != "" {
			body["parentID"] = v
		}
		if v := str("title"); v != "" {
			body["title"] = v
		}
		err := c.do(ctx, "POST", "/session", body, &out)
		return out, err
	case "session.prompt":
		body := map[string]json.RawMessage{"parts": p["parts"]}
		if n, ok := p["noReply"]; ok {
			body["noReply"] = n
		}
		if err := c.do(ctx, "POST", "/session/"+sid+"/prompt_async", body, nil); err != nil {
			return nil, err
		}
		return map[string]any{}, nil
	case "session.delete":
		if err := c.do(ctx, "DELETE", "/session/"+sid, nil, &out); err != nil {
			return nil, err
		}
		return true, nil
	case "session.list":
		err := c.do(ctx, "GET", "/experimental/session", nil, &out) // every project's sessions
		if he, ok := err.(*runtime.HostError); ok && he.Name == "NotFoundError" {
			err = c.do(ctx, "GET", "/session", nil, &out)
		}
		return out, err
	case "project.list":
		err := c.do(ctx, "GET", "/project", nil, &out)
		return out, err
	case "session.messages":
		err := c.do(ctx, "GET", "/session/"+sid+"/message", nil, &out)
		return out, err
	case "tui.executeCommand":
		if err := c.do(ctx, "POST", "/tui/execute-command", map[string]any{"command": str("command")}, nil); err != nil {
			return nil, err
		}
		return true, nil
	case "tui.publish":
		if err := c.do(ctx, "POST", "/tui/publish", map[string]json.RawMessage{"type": p["type"], "properties": p["properties"]}, nil); err != nil {
			return nil, err
		}
		return true, nil
	case "tui.showToast":
		if err := c.do(ctx, "POST", "/tui/show-toast", map[string]string{"title": str("title"), "message": str("message"), "variant": str("variant")}, nil); err != nil {
			return nil, err
		}
		return true, nil
	case "session.move":
		err := c.do(ctx, "POST", "/experimental/control-plane/move-session",
			map[string]any{"sessionID": str("sessionID"), "destination": map[string]string{"directory": str("directory")}}, &out)
		return out, err
	}
	return nil, &runtime.HostError{Name: "NotFoundError", Message: "the opencode bridge has no method " + method}
}
