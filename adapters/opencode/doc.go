// Package opencode bridges a running `opencode serve` to the thatch protocol: it reads
// the server's bus events (GET /global/event, server-sent events) and publishes the ones
// thatch acts on as host events, turning each completed tool part into one
// tool.execute.after; it answers the host API (opencode.<host>.api.*) with the server's
// HTTP routes; and it serves the plugin shim's loopback endpoint. docs/protocol.md ("The
// opencode bridge as a host") is its specification.
//
// It is a host, beside thatch rather than inside it: it imports the runtime for a few
// shared types (Hello), runtime/protocol for the wire's names,
// runtime/redact to redact before it publishes, adapters/natsbus (PublishEvent,
// RedactURLs) and commands (the shim's token). Like every adapter it never imports cmd,
// and no other adapter than natsbus.
package opencode
