// thatch's opencode plugin, written by `thatch install`: edits here are overwritten.
// It gives the models thatch's tools (the extraction pair and the four memory tools),
// puts thatch's session-start text (its reminder and the project's memories) into each
// session's system prompt, adds the memories to a compaction, and tells thatch about
// wrap-up commands, tool calls and compactions, through the bridge's loopback endpoint.
// Session events reach thatch through the bridge's own event stream, which shows every
// tool call too: thatch keeps each call once, whichever way it came first.
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
// the turn at most HOOK_MS, and its event is missed (a tool call still comes through the
// event stream) or its text left out of that one request.
const HOOK_MS = 2000

function send(type, properties) {
  return post("/event", { type, properties }, HOOK_MS).catch(() => {})
}

// within settles with promise's value, or with fallback once ms have passed or when the
// promise fails: the hook's deadline holds whatever the network does.
function within(ms, promise, fallback) {
  let timer
  const late = new Promise((resolve) => {
    timer = setTimeout(() => resolve(fallback), ms)
  })
  return Promise.race([Promise.resolve(promise).catch(() => fallback), late]).finally(() => clearTimeout(timer))
}

// contextText asks thatch for a context method's text; it fails when thatch does not
// give one, so that a failure is never taken for "nothing to say".
async function contextText(method, body) {
  const reply = await post("/api/" + method, body, HOOK_MS)
  if (reply?.error) throw new Error(`${reply.error.name}: ${reply.error.message}`)
  const text = reply?.result?.text
  if (typeof text !== "string") throw new Error(`thatch's ${method} answered no text`)
  return text
}

// MAX_SESSIONS bounds the session-start texts kept; the least recently used go first.
const MAX_SESSIONS = 1000

const KINDS = ["fact", "decision", "preference", "command", "pitfall", "todo"]
const kind = () => tool.schema.enum(KINDS)
const tags = () =>
  tool.schema
    .array(tool.schema.string().min(1).max(32))
    .max(8)
    .describe("up to 8 short labels (1-32 characters each), e.g. a component or a topic")

export const Thatch = async (input) => {
  const project = input?.project
  const directory = input?.directory
  // texts: sessionID → the session's start text, or the request for it while one is in
  // flight (the title and the first turn ask at once). thatch gives one session the same
  // text every time, and keeping it here makes every request of the session carry the
  // same bytes, so the provider's prompt cache holds. "" (a child session, nothing to
  // say) is kept too; a failure is not, so the next request asks again.
  const texts = new Map()
  function sessionText(sessionID) {
    const known = texts.get(sessionID)
    if (typeof known === "string") {
      texts.delete(sessionID) // most recently used goes last
      texts.set(sessionID, known)
      return known
    }
    if (known) return known
    const asked = contextText("session.context", { sessionID, projectID: project?.id, directory }).then(
      (text) => {
        if (texts.get(sessionID) === asked) texts.set(sessionID, text)
        return text
      },
      () => {
        if (texts.get(sessionID) === asked) texts.delete(sessionID)
        return ""
      },
    )
    texts.set(sessionID, asked)
    while (texts.size > MAX_SESSIONS) texts.delete(texts.keys().next().value)
    return asked
  }

  return {
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
      memory_search: tool({
        description:
          "Search this project's memories (what earlier sessions learned: facts, decisions, preferences, commands, pitfalls, todos). " +
          "Returns one line per memory, `mem_… (kind) content`, best match first. " +
          "Search before memory_remember, so that you update an existing memory instead of adding a near-duplicate.",
        args: {
          query: tool.schema.string().min(1).describe("words to look for, in any order"),
          limit: tool.schema.number().int().min(1).max(50).optional().describe("at most this many memories (default 10)"),
          kinds: tool.schema.array(kind()).optional().describe("only memories of these kinds"),
        },
        execute: forward("memory_search"),
      }),
      memory_remember: tool({
        description:
          "Keep a new memory for later sessions on this project: one point, in one or two plain sentences that stand on their own. " +
          "Kinds: fact (default), decision (with its reason), preference (the user's), command (one that worked), pitfall (and how to avoid it), todo (work left). " +
          "Search first with memory_search: when a memory already says this or nearly this, call memory_update on it instead. " +
          "Skip what is transient or obvious from the code.",
        args: {
          content: tool.schema.string().min(1).max(2000).describe("the memory, 1-2000 characters"),
          kind: kind().optional().describe("fact, decision, preference, command, pitfall or todo (default fact)"),
          tags: tags().optional(),
          branch: tool.schema
            .string()
            .min(1)
            .optional()
            .describe('only when this holds on one git branch alone: "current" for the branch this session is on, or a branch name'),
        },
        execute: forward("memory_remember"),
      }),
      memory_update: tool({
        description:
          "Change an existing memory, by its mem_… id, when it is incomplete or out of date, or says nearly what you were about to add: " +
          "prefer this to memory_remember for a near-duplicate. Give only what changes; tags replace the old ones. " +
          "For two memories flagged as duplicates that say different things, give only id and distinctFrom.",
        args: {
          id: tool.schema.string().min(1).describe("the memory's id, mem_…"),
          content: tool.schema.string().min(1).max(2000).optional().describe("the new text, 1-2000 characters"),
          kind: kind().optional().describe("fact, decision, preference, command, pitfall or todo"),
          tags: tags().optional(),
          distinctFrom: tool.schema
            .string()
            .optional()
            .describe("the id of a memory flagged as this one's duplicate that says something different: they stop being paired"),
          projectWide: tool.schema
            .boolean()
            .optional()
            .describe("true: the memory holds for the whole project, not only on the branch it was written on"),
        },
        execute: forward("memory_update"),
      }),
      memory_forget: tool({
        description:
          "Forget a memory, by its mem_… id, that is wrong or obsolete: it leaves search and the context of later sessions. " +
          "When it is only out of date, memory_update it instead.",
        args: {
          id: tool.schema.string().min(1).describe("the memory's id, mem_…"),
          reason: tool.schema.string().optional().describe("why, in a few words"),
        },
        execute: forward("memory_forget"),
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
    // The session-start text goes into the system prompt of every model request of the
    // session: a message sent at session start would land after the user's first one.
    "experimental.chat.system.transform": async (input, output) => {
      try {
        if (!input?.sessionID) return
        // opencode's title request (its own system prompt names a title generator) needs no
        // memories: they would cost the small model tokens and steer the title.
        if (Array.isArray(output?.system) && output.system.some((s) => /title generator/i.test(String(s)))) return
        const known = sessionText(input.sessionID)
        const text = typeof known === "string" ? known : await within(HOOK_MS, known, "")
        if (text && Array.isArray(output?.system)) output.system.push(text)
      } catch {}
    },
    "experimental.session.compacting": async (input, output) => {
      try {
        const [, text] = await Promise.all([
          send("session.compacting", { sessionID: input.sessionID }),
          within(HOOK_MS, contextText("memory.context", { sessionID: input.sessionID }), ""),
        ])
        if (text && Array.isArray(output?.context)) output.context.push(text)
      } catch {}
    },
  }
}
