// Package mcp is thatch's Model Context Protocol server (protocol §10), for any MCP client
// (Claude Code, Cursor, Codex, …): the memory tools memory_search, memory_remember,
// memory_update and memory_forget with the arguments, rules and answers of §6 (the model's
// text as text content, the metadata as structured content, each tool's input schema
// published), and the project's memory section as the resource thatch://memories and the
// prompt memories.
//
// It holds no memories: every call goes to the running thatch through a Thatch (thatch mcp
// forwards them over NATS, as the other commands reach the daemon). The project is the one
// Options names, else the client's first root, else the working directory, keyed as opencode
// keys it (memory.ProjectID: a git checkout's root commit, else the directory), so one
// repository has one set of memories under every host. A thatch that cannot be reached, or
// refuses a call, is a tool error that says what to do; the server goes on serving.
//
// It imports the Go MCP SDK, the runtime (the tools' names, the project key) and the memory
// store's package for its rules (kinds, limits) and memory.ProjectID; never the store's
// files, NATS, cmd or another adapter: cmd gives it the running thatch as a Thatch.
package mcp
