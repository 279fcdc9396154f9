package mcp

import (
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// rpcError is the JSON-RPC error of a resource or prompt that thatch could not give: an
// internal error (-32603) with thatch's words, which say what to do. The SDK sends a plain
// Go error with code 0, which is no JSON-RPC code a client knows.
func rpcError(err error) error {
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		return err
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}
