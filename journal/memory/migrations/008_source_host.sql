-- thatch memories, version 8: the host a memory was written from, for memories written
-- outside a tracked session (protocol §10): thatch mcp writes source {host: "mcp", client:
-- the MCP client's name}. '' for a memory written by a session's tool call.
ALTER TABLE memories ADD COLUMN source_host TEXT NOT NULL DEFAULT '';
ALTER TABLE memories ADD COLUMN source_client TEXT NOT NULL DEFAULT '';
