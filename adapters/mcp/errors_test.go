package mcp

import (
	"context"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestResourceErrorCode: a resource or prompt thatch cannot give is a JSON-RPC error with
// a standard code (internal error) and thatch's words, not code 0.
func TestResourceErrorCode(t *testing.T) {
	th := &recorder{err: errors.New("thatch is not running: start it with `thatch serve`")}
	cs := connect(t, Options{Thatch: th, Project: "key-1"}, sdk.NewClient(&sdk.Implementation{Name: "c", Version: "1"}, nil))
	ctx := context.Background()
	_, rerr := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: URI})
	_, perr := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: Prompt})
	for what, err := range map[string]error{"resources/read": rerr, "prompts/get": perr} {
		var wire *jsonrpc.Error
		if !errors.As(err, &wire) || wire.Code != jsonrpc.CodeInternalError || wire.Message != th.err.Error() {
			t.Errorf("%s failing: %#v, want a JSON-RPC internal error (%d) saying %q", what, err, jsonrpc.CodeInternalError, th.err)
		}
	}
}
