// thatch's opencode plugin, written by `thatch install`: edits here are overwritten.
// It gives the models thatch's two tools and tells thatch about wrap-up commands and
// compactions, through the bridge's loopback endpoint. Tool calls and session events reach
// thatch through the bridge's own event stream.
import { readFileSync } from "node:fs"
import { tool } from "@opencode-ai/plugin"

const ENDPOINT = "__ENDPOINT__"
const TOKEN_FILE = "__TOKEN_FILE__"

async function post(path, body) {
  let token = ""
  try {
    token = readFileSync(TOKEN_FILE, "utf8").trim()
  } catch {}
  const res = await fetch(ENDPOINT + path, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer " + token },
    body: JSON.stringify(body),
  })
  if (!res.ok) throw new Error(`thatch is not reachable at ${ENDPOINT} (HTTP ${res.status}): is thatch serve running with THATCH_OPENCODE_URL?`)
  return res.json()
}

function forward(name) {
  return async (args, ctx) => {
    const reply = await post("/tool/" + name, { sessionID: ctx.sessionID, callID: ctx.callID, args })
    if (reply.error) throw new Error(`${reply.error.name}: ${reply.error.message}`)
    return { output: reply.result.output, metadata: reply.result.metadata ?? {} }
  }
}

// A hook must never break the host's turn: thatch being down is logged by thatch's side.
function send(type, properties) {
  return post("/event", { type, properties }).catch(() => {})
}

export const Thatch = async () => ({
  tool: {
    thatch_get_extraction_payload: tool({
      description:
        "Claim this session's pending tool interactions for memory extraction and return them. Call it once, before writing memories.",
      args: {},
      execute: forward("thatch_get_extraction_payload"),
    }),
    thatch_extraction_done: tool({
      description: "Report how many memories you created, updated and deleted from the claimed interactions; this completes them.",
      args: {
        new: tool.schema.number().int().min(0).describe("memories created"),
        updated: tool.schema.number().int().min(0).describe("memories updated"),
        deleted: tool.schema.number().int().min(0).describe("memories deleted"),
      },
      execute: forward("thatch_extraction_done"),
    }),
  },
  "command.execute.before": async (input) =>
    send("command.execute.before", { command: input.command, sessionID: input.sessionID, arguments: input.arguments }),
  "experimental.session.compacting": async (input) => send("session.compacting", { sessionID: input.sessionID }),
})
