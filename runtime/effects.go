package runtime

import (
	"encoding/json"
	"log/slog"
	"math"
	"time"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Input is what Step consumes: an Event, a ToolCall, a host call's Result, a Tick (the
// periodic journal sweep), a SweepApply (a strand sweep's plan), a MemoryWrote (a memory
// tool's effective write), a Rejection (a message that is not a valid event) or a
// StreamSwitch (the stream was recreated).
type Input interface{ input() }

func (Event) input()    {}
func (ToolCall) input() {}
func (Result) input()   {}
func (Tick) input()     {}

// Op is a host operation, independent of the host's API generation: the adapters map
// each to the methods of protocol §2.
type Op string

const (
	OpCreate   Op = protocol.MethodSessionCreate
	OpPrompt   Op = protocol.MethodSessionPrompt
	OpDelete   Op = protocol.MethodSessionDelete
	OpList     Op = protocol.MethodSessionList
	OpProjects Op = protocol.MethodProjectList
	OpMove     Op = protocol.MethodSessionMove
	OpMessages Op = "messages" // v1 session.messages, v2 session.context
	OpCompact  Op = "compact"  // v1 tui.executeCommand, v2 session.compact
	OpClose    Op = "close"    // v1 tui.publish app.exit, v2 bridge.emit exit-tab-closed
	OpToast    Op = "toast"    // v1 tui.showToast, v2 bridge.emit toast
)

// Purpose says what a call's result continues. A call without one is fire-and-forget:
// its failure is logged and nothing else.
type Purpose string

const (
	PurposeNone     Purpose = ""
	PurposeExtract  Purpose = "extract"   // create an extraction child, then prompt it
	PurposeInstruct Purpose = "instruct"  // the extraction child's instruction prompt
	PurposeWrapIdle Purpose = "wrap-idle" // messages for a wrap-up armed before this idle
	PurposeWrapExec Purpose = "wrap-exec" // messages for a wrap-up seen only as command.executed
	PurposeResync   Purpose = "resync"    // session.list after a Host-Seq gap
	PurposeCompact  Purpose = "compact"   // a greenlit compaction: a failure clears the compacting flag
	PurposeLedger   Purpose = "ledger"    // an ended extraction child's messages: its cost, then its deletion (rule 14)
)

// Call is one host call. It is journaled in the outbox with the state change that implies
// it and performed after the commit; a crash repeats it.
type Call struct {
	ID int64 `json:"-"` // outbox id, assigned by the journal
	// Key is the call's idempotency key, the same in every run that repeats it: a host may
	// answer a repeated key from memory instead of acting twice.
	Key       string  `json:"-"`
	Host      string  `json:"host"`
	Op        Op      `json:"op"`
	Purpose   Purpose `json:"purpose,omitempty"`
	SessionID string  `json:"sessionID,omitempty"` // the session the call concerns; create: the parent
	Title     string  `json:"title,omitempty"`     // create, toast
	Text      string  `json:"text,omitempty"`      // prompt text, toast message
	NoReply   bool    `json:"noReply,omitempty"`
	Synthetic bool    `json:"synthetic,omitempty"`
	Variant   string  `json:"variant,omitempty"`   // toast: info, success, warning, error
	Directory string  `json:"directory,omitempty"` // move
	WrapUp    WrapUp  `json:"wrapUp,omitempty"`    // messages for a wrap-up
	// Project, on the session-start reminder, asks the driver to append that project's
	// memories section (protocol §6) when it performs the call: the store is not the
	// runtime's.
	Project string `json:"project,omitempty"`
	// Model, on a prompt, is the "provider/model" that answers it (protocol 1.1 §2); empty
	// leaves the choice to the host.
	Model string `json:"model,omitempty"`
	// Ledger, on the messages call of an ended extraction child, is what the result needs
	// to journal its cost and finish it.
	Ledger *LedgerRef `json:"ledger,omitempty"`
}

// LedgerRef says whose cost an ended extraction child's messages are.
type LedgerRef struct {
	Root    string `json:"root"`
	Project string `json:"project"`
	// Directory is the root session's folder, which thatch costs shows for the project:
	// the project key may be a hash. Outbox rows written before it load without it.
	Directory string `json:"directory,omitempty"`
	Model     string `json:"model,omitempty"` // the model thatch asked for
	Entries   int    `json:"entries"`         // entries it completed
	// Toast is rule 4's toast message when the child wrote memories; the cost is added
	// to it once the messages are read.
	Toast string `json:"toast,omitempty"`
}

// Cost is what one extraction child's assistant turns cost, as the host reported it.
type Cost struct {
	TokensIn  int64   `json:"tokensIn"`  // input, including cache reads and writes
	TokensOut int64   `json:"tokensOut"` // output, including reasoning
	USD       float64 `json:"cost"`
	Model     string  `json:"model,omitempty"` // "provider/model" of the last assistant turn
	Turns     int     `json:"turns"`
}

// Tokens is In + Out: what the daily budget counts.
func (c Cost) Tokens() int64 { return c.TokensIn + c.TokensOut }

// LedgerRow is one extraction's cost, journaled once per child.
type LedgerRow struct {
	Child     string
	Root      string
	Project   string
	Directory string // the root session's folder; empty when unknown
	Day       string // UTC, 2006-01-02
	At        time.Time
	Entries   int
	Cost
}

// Result is the outcome of a Call, fed back to Step.
type Result struct {
	Call Call
	Err  *HostError // nil on success

	Session  *SessionInfo  // create
	Messages []Message     // messages
	Sessions []SessionInfo // list
	Projects []Project     // project.list
}

// HostError is a failed host call, tool call or API request: the reply envelope's error.
// NoResponder means the host does not offer the method.
type HostError = protocol.Error

// Message is one session message in opencode's v1 shape.
type Message struct {
	Info  MessageInfo `json:"info"`
	Parts []Part      `json:"parts"`
}

// MessageInfo is what thatch reads of a message's info: an assistant message also says
// what its turn cost (protocol 1.1 §2).
type MessageInfo struct {
	ID         string   `json:"id"`
	Role       string   `json:"role"`
	ProviderID string   `json:"providerID,omitempty"`
	ModelID    string   `json:"modelID,omitempty"`
	Tokens     *Tokens  `json:"tokens,omitempty"`
	Cost       *float64 `json:"cost,omitempty"`
}

// Tokens are a turn's token counts, as opencode reports them.
type Tokens struct {
	Input     int64 `json:"input"`
	Output    int64 `json:"output"`
	Reasoning int64 `json:"reasoning"`
	Cache     struct {
		Read  int64 `json:"read"`
		Write int64 `json:"write"`
	} `json:"cache"`
}

// CostOf sums what the assistant turns of msgs cost. Negative figures (a host's bug) count
// as zero.
func CostOf(msgs []Message) Cost {
	var c Cost
	pos := func(v int64) int64 { return max(v, 0) }
	for _, m := range msgs {
		if m.Info.Role != "assistant" {
			continue
		}
		c.Turns++
		if t := m.Info.Tokens; t != nil {
			c.TokensIn += pos(t.Input) + pos(t.Cache.Read) + pos(t.Cache.Write)
			c.TokensOut += pos(t.Output) + pos(t.Reasoning)
		}
		if m.Info.Cost != nil && *m.Info.Cost > 0 && !math.IsInf(*m.Info.Cost, 0) {
			c.USD += *m.Info.Cost
		}
		if m.Info.ProviderID != "" && m.Info.ModelID != "" {
			c.Model = m.Info.ProviderID + "/" + m.Info.ModelID
		}
	}
	return c
}

// Part is one part of a message; only text parts matter to thatch.
type Part struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

// Project is a project's canonical checkout.
type Project struct {
	ID       string `json:"id"`
	Worktree string `json:"worktree"`
}

// ToolCall is a call of one of thatch's tools by a host session's model.
type ToolCall struct {
	Name      string
	SessionID string
	CallID    string
	Args      json.RawMessage
}

// Tick is the periodic sweep timer, an input like any other so tests drive time. Exists
// tells, for the tracked sessions' directories, which exist on thatch's filesystem (the
// driver looks; a directory not in the map is not judged).
type Tick struct {
	Exists map[string]bool
}

// Reply answers a ToolCall. Payload, when set, asks the driver to read the claimed
// entries' bodies from the journal after the commit and render them with FormatPayload.
type Reply struct {
	Output   string
	Metadata any
	Err      *HostError
	Payload  *PayloadRef
	// Caller, for a memory tool or a context method, says who called: the driver's
	// caller acts on the memory store with it.
	Caller *CallerRef
}

// PayloadRef names a claimant's claimed set.
type PayloadRef struct {
	Root     string
	Claimant string
	// Remaining is how many entries of Root stay pending; Again says the caller should
	// call for them (a top-level session's flush) rather than leave them to a later
	// extraction.
	Remaining int
	Again     bool
}

// EntryOpKind is a change to one journaled entry.
type EntryOpKind int

const (
	EntryInsert  EntryOpKind = iota // a new pending entry, with its body
	EntryRelease                    // one entry back to pending
	EntryDelete                     // one entry completed or dropped
	EntryMove                       // one entry moved from root From (as FromID, when set) to Root

	// Set operations on a root's entries, one statement each.
	EntryClaim          // the entries IDs claimed by Claimant at At
	EntryDeleteClaimed  // every entry claimed by Claimant completed at At: the journal keeps their call ids, tools and titles (provenance)
	EntryReleaseClaimed // every entry claimed by Claimant (any claimant when "") back to pending
	EntryDeleteAll      // every entry dropped
)

// EntryOp is one change to the entries table.
type EntryOp struct {
	Kind     EntryOpKind
	Root     string
	ID       string
	Claimant string
	At       time.Time
	From     string
	FromID   string // move: the entry's id in From when it differs from ID, its id in Root
	Body     *Body
	IDs      []string // claim
	Size     int      // insert: the entry's size in a payload
	Trivial  bool     // insert: nothing to learn from it
}

// Body is the journaled content of an entry: never held in State.
type Body struct {
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args,omitempty"`
	Title    string          `json:"title,omitempty"`
	Output   string          `json:"output,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// Note is something worth logging, returned rather than logged so Step does no I/O.
type Note struct {
	Level slog.Level
	Msg   string
	Attrs []any
}

// Effects is what one or more Steps imply. The driver commits it in one transaction and
// only then performs the calls.
type Effects struct {
	Sessions map[string]bool // sessions to upsert (when still in State) or delete
	// Touched lists the sessions whose Touched moved without their row being written
	// (touchCall): the operator's page shows the newest, the journal need not.
	Touched  []string
	Gone     map[string]bool // tombstones to write (when in State.Gone) or drop
	Hosts    map[string]bool // hosts to upsert
	Counters bool            // counters changed
	Entries  []EntryOp
	Calls    []Call
	Notes    []Note
	Reply    *Reply // the answer to a ToolCall
	Ledger   []LedgerRow
	// Hellos lists the hellos applied: the calls waiting for their host go out (rule 12),
	// and the strand sweep visits a host whose hello began a new boot.
	Hellos []SaidHello
}

// SaidHello is one host.hello as the driver needs it: the host that said it, and NewBoot
// when it began a new boot.
type SaidHello struct {
	Host    string
	NewBoot bool
}

// CanWait reports whether c waits in the outbox for its host's next host.hello when the
// host has no responder for it (rule 12): the calls whose loss strands or loses something.
// Toasts, compactions and closes are the user's moment: late, they would only confuse.
func CanWait(c Call) bool {
	switch c.Op {
	case OpCreate, OpPrompt, OpDelete, OpList, OpProjects, OpMessages, OpMove:
		return true
	}
	return false
}

// Moot reports whether a waiting call has lost its point once its host started a new boot
// (rule 7 already finalized what it was for): it is answered with HostRestartedError
// instead of being sent. Deletions and moves still heal, an ended child's messages still
// tell its cost, and a no-reply prompt (the session-start reminder of a host without the
// context capability) still delivers: the session outlives its host's restart, and
// nothing else would send its reminder again.
func Moot(c Call) bool {
	switch {
	case c.Op == OpDelete, c.Op == OpMove, c.Purpose == PurposeLedger, c.Op == OpPrompt && c.NoReply:
		return false
	}
	return true
}

// HostRestarted is the error a moot waiting call is answered with.
func HostRestarted(c Call) *HostError {
	return &HostError{Name: protocol.HostRestarted, Message: "host " + c.Host + " restarted before it could answer " + string(c.Op)}
}

// NewEffects returns empty effects.
func NewEffects() *Effects {
	return &Effects{Sessions: map[string]bool{}, Gone: map[string]bool{}, Hosts: map[string]bool{}}
}

// Merge appends o to e, so a batch of inputs commits as one.
func (e *Effects) Merge(o *Effects) {
	for id := range o.Sessions {
		e.Sessions[id] = true
	}
	for id := range o.Hosts {
		e.Hosts[id] = true
	}
	for id := range o.Gone {
		e.Gone[id] = true
	}
	e.Counters = e.Counters || o.Counters
	e.Touched = append(e.Touched, o.Touched...)
	e.Entries = append(e.Entries, o.Entries...)
	e.Calls = append(e.Calls, o.Calls...)
	e.Notes = append(e.Notes, o.Notes...)
	e.Ledger = append(e.Ledger, o.Ledger...)
	e.Hellos = append(e.Hellos, o.Hellos...)
}

// Empty reports whether e changes nothing.
func (e *Effects) Empty() bool {
	return len(e.Sessions) == 0 && len(e.Gone) == 0 && len(e.Hosts) == 0 && !e.Counters && len(e.Entries) == 0 && len(e.Calls) == 0 && len(e.Ledger) == 0
}
