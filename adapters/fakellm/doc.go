// Package fakellm is a scripted, OpenAI-compatible chat-completions server for running a
// real opencode offline: it answers POST /v1/chat/completions with streamed chunks
// (server-sent events ending with [DONE]). Its script: a title request gets a title; a
// turn whose last user text contains "RUN <command>" calls the bash tool with that
// command, then answers once the tool result comes back; "TASK <command>" hands the
// command to a sub-agent with the task tool (the sub-agent's prompt is "RUN <command>"
// and SubAgentNote); "WRITE <path> <bytes>" calls the write tool with a file of that many
// bytes (Content); a message containing "END WITH <token>" ends the reply with that token
// on its own line; a thatch extraction prompt, when the tools are offered, calls
// thatch_get_extraction_payload, then (when memory_remember is offered and the payload
// shows a bash command) memory_remember with "The project ran: <that command>", then
// thatch_extraction_done; anything else gets a short reply. Every answer ends with a usage
// chunk, as OpenAI's do with stream_options.include_usage, its token counts derived from
// the request and the answer. It logs what each request carried, and the usage reported
// (Log), for the tests to check.
//
// Each model it serves answers as its own process would: it numbers its tool call ids
// from call_1, and Restart starts every model's numbering again, as a restart of those
// processes would. Call ids are thus unique per model between restarts, and no more: some
// real providers do the same.
//
// Anthropic is the same script behind the Anthropic Messages API (POST /v1/messages, streamed
// as server-sent events), for running a real Claude Code offline (anthropic.go).
//
// It is a test double for the end-to-end tests: thatch's daemon never imports it. Of
// thatch's packages it imports only runtime/protocol (the tools' names); like every
// adapter it never imports cmd or another adapter.
package fakellm
