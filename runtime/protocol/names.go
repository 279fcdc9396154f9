package protocol

// Error names: an Error's Name. A host may send names of its own (opencode's, as it
// reports them); these are the ones thatch and its hosts send or match.
const (
	// NotFound: what the request names does not exist: a session (deleting an absent
	// session is one, which thatch takes as done), a memory, a method, a route.
	NotFound = "NotFoundError"
	// BadRequest: the request or its args are not of the shape the method takes.
	BadRequest = "BadRequestError"
	// Unavailable: the answerer cannot answer now (thatch stopping, a store failing,
	// opencode unreachable): call again.
	Unavailable = "UnavailableError"
	// UnknownSession: thatch does not track the session a tool call or method names.
	UnknownSession = "UnknownSessionError"
	// NotImplemented: this thatch does not serve the method (no ledger, no memory store,
	// no sweep, no dead letters).
	NotImplemented = "NotImplementedError"
	// ToolsMissing: a host refuses to create an extraction child because it has not loaded
	// thatch's tools; a refusal that did nothing, so a repeat of its key acts again.
	ToolsMissing = "ToolsMissingError"
	// TooLarge: the reply would be over the broker's max_payload.
	TooLarge = "TooLargeError"
	// Internal: thatch could not encode its reply (a bug).
	Internal = "InternalError"
	// Unauthorized: the request's credentials are missing or wrong (the plugin shim's
	// token, opencode's password).
	Unauthorized = "UnauthorizedError"
	// HostRestarted: the host said hello with a new boot before it answered a call.
	HostRestarted = "HostRestartedError"
	// SweepDisabled: a sweep that would act while THATCH_STRAND_SWEEP=off.
	SweepDisabled = "SweepDisabledError"
	// SweepFailed: a sweep that could not be made (a host thatch never heard from).
	SweepFailed = "SweepError"
	// HostFailed: a host's failure with no name of its own (an error reply without a
	// name, an HTTP error without a JSON body).
	HostFailed = "HostError"

	// The requester's names: no answerer sends these; a requester sets them on a call
	// that got no usable reply.

	// NoResponder: nobody serves the subject (the host does not serve the method, or is
	// away); Error.NoResponder is set with it.
	NoResponder = "NoResponderError"
	// Timeout: no reply within the requester's timeout.
	Timeout = "TimeoutError"
	// Transport: the request could not be sent or its reply not received, for another
	// reason than the two above.
	Transport = "TransportError"
	// BadReply: the reply is not an envelope (ErrBadReply), or its result not the shape
	// the method answers.
	BadReply = "BadReplyError"
)

// Event types thatch acts on: the "type" of a host's event, and the last part of its
// subject <prefix>.<host>.event.<type>.
const (
	EventHostHello            = "host.hello"
	EventHostGoodbye          = "host.goodbye"
	EventSessionCreated       = "session.created"
	EventSessionUpdated       = "session.updated"
	EventSessionDeleted       = "session.deleted"
	EventSessionStatus        = "session.status"
	EventSessionIdle          = "session.idle"
	EventSessionError         = "session.error"
	EventSessionCompacting    = "session.compacting"
	EventSessionCompacted     = "session.compacted"
	EventToolExecuteAfter     = "tool.execute.after"
	EventCommandExecuteBefore = "command.execute.before"
	EventCommandExecuted      = "command.executed"
)

// Host API methods, served on <prefix>.<host>.api.<method>: the v1 and v2 generations
// share the first six.
const (
	MethodSessionCreate     = "session.create"
	MethodSessionPrompt     = "session.prompt"
	MethodSessionDelete     = "session.delete"
	MethodSessionList       = "session.list"
	MethodProjectList       = "project.list"
	MethodSessionMove       = "session.move"
	MethodSessionMessages   = "session.messages"   // v1
	MethodTUIExecuteCommand = "tui.executeCommand" // v1
	MethodTUIPublish        = "tui.publish"        // v1
	MethodTUIShowToast      = "tui.showToast"      // v1
	MethodSessionContext    = "session.context"    // v2
	MethodSessionCompact    = "session.compact"    // v2
	MethodBridgeEmit        = "bridge.emit"        // v2
)

// IdempotencyKey is the host API parameter that carries a call's idempotency key: the
// same in every run that repeats the call, so that a host answers a repeat from memory
// (Memo).
const IdempotencyKey = "idempotencyKey"

// thatch's tools, served on <api>.tool.<name>: the extraction tools and the memory tools.
const (
	ToolPayload  = "thatch_get_extraction_payload"
	ToolDone     = "thatch_extraction_done"
	ToolRemember = "memory_remember"
	ToolSearch   = "memory_search"
	ToolUpdate   = "memory_update"
	ToolForget   = "memory_forget"
)

// thatch's API methods, served on <api>.api.<method>.
const (
	APIStatus      = "status"
	APISessions    = "sessions"
	APIEntries     = "entries"
	APIDeadLetters = "deadletters"
	APICosts       = "costs"
	APISweep       = "sweep"
	// APISessionContext asks for a session's start text; APIMemoryContext only who a
	// session is, for the memories section of a compaction.
	APISessionContext = "session.context"
	APIMemoryContext  = "memory.context"
	APIMemories       = "memories"
	APIMemoryGet      = "memory.get"
	APIMemoryForget   = "memory.forget"
	APIMemoryRestore  = "memory.restore"
	APIMemoryExport   = "memory.export"
	APIMemoryImport   = "memory.import"
	APIMemoryHygiene  = "memory.hygiene"
	APIMemorySignals  = "memory.signals"
	APIMemoryDismiss  = "memory.dismiss"
	APIMemoryProjects = "memory.projects"
	// APIUILink mints a one-time link to the web page (an extension: thatch ui).
	APIUILink = "ui.link"
	// APIMemoryShare starts or stops sharing a project with the team (§9).
	APIMemoryShare = "memory.share"
)

// ClaudeCodeHostPrefix begins the host id of every Claude Code host (§10: cc-…), whose
// sessions name thatch's wrap-up commands /thatch:compact and /thatch:exit.
const ClaudeCodeHostPrefix = "cc-"
