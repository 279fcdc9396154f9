// thatch's opencode plugin, written by `thatch install`: edits here are overwritten.
// It gives the models thatch's two tools and tells thatch about wrap-up commands, tool calls
// and compactions, through the bridge's loopback endpoint. Session events reach thatch
// through the bridge's own event stream, which shows every tool call too: thatch keeps
// each call once, whichever way it came first.
import { readFileSync } from "node:fs"
import { tool } from "@opencode-ai/plugin"

const ENDPOINT = "__ENDPOINT__"
const TOKEN_FILE = "__TOKEN_FILE__"

async function post(path, body, timeoutMs) {
  let token = ""
  try {
    token = readFileSync(TOKEN_FILE, "utf8").trim()
  } catch {}
  const hint = "is thatch serve running with THATCH_OPENCODE_URL set to this opencode server?"
  let res
  try {
    res = await fetch(ENDPOINT + path, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: "Bearer " + token },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    })
  } catch (err) {
    throw new Error(`thatch is not reachable at ${ENDPOINT} (${err?.cause?.code ?? err?.name ?? err}): ${hint}`)
  }
  if (res.status === 401)
    throw new Error(`thatch at ${ENDPOINT} refused the token in ${TOKEN_FILE}: run thatch install with the THATCH_DATA_DIR of thatch serve`)
  if (!res.ok) throw new Error(`thatch at ${ENDPOINT} answered HTTP ${res.status}: ${hint}`)
  return res.json()
}

function forward(name) {
  return async (args, ctx) => {
    const reply = await post("/tool/" + name, { sessionID: ctx.sessionID, callID: ctx.callID, args }, 60000)
    if (reply.error) throw new Error(`${reply.error.name}: ${reply.error.message}`)
    return { output: reply.result.output, metadata: reply.result.metadata ?? {} }
  }
}

// A hook must never break or stall the host's turn: a thatch that is down or slow costs
// the turn at most two seconds, and its event is missed (a tool call still comes through
// the event stream).
function send(type, properties) {
  return post("/event", { type, properties }, 2000).catch(() => {})
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
  "tool.execute.after": async (input, output) =>
    send("tool.execute.after", {
      sessionID: input.sessionID,
      callID: input.callID,
      tool: input.tool,
      args: input.args ?? {},
      title: output?.title ?? "",
      output: typeof output?.output === "string" ? output.output : JSON.stringify(output?.output ?? ""),
      metadata: output?.metadata ?? {},
    }),
  "experimental.session.compacting": async (input) => send("session.compacting", { sessionID: input.sessionID }),
})
