// Package claudecode makes Claude Code a protocol host of its own (protocol §10): its hooks'
// input mapped to protocol events (Events, for thatch hook), and the host API thatch calls
// on it (Host, a responder inside thatch serve on <prefix>.<host>.api.*) answered by running
// headless Claude Code children (claude -p) for extraction, restricted to thatch's tools
// through thatch mcp --extraction.
//
// docs/claude-code.md says what of the real Claude Code this relies on, as observed.
//
// It imports runtime and runtime/protocol; like every adapter it never imports cmd or
// another adapter.
package claudecode
