package runtime

import (
	"log/slog"
	"time"

	"github.com/thatch-dev/thatch/runtime/protocol"
	"github.com/thatch-dev/thatch/runtime/redact"
)

// The decision core: Step and ApplyEvents, and what every handler shares. The handlers
// are split by what they decide: hosts.go (hellos, boots, missing tools, Host-Seq),
// sessions.go (the session lifecycle and its entries), extraction.go and wrapup.go (the
// two state machines of a top-level session, whose phases phase.go defines), and, outside
// this split, tools.go, memory.go, ledger.go and sweep.go.

// Rules are the tunables of the decision core.
type Rules struct {
	StaleAccepted time.Duration // an accepted entry older than this goes back at the root's idle
	OutputMax     int           // journaled outputs and top-level string args are cut to this many characters
	TTL           time.Duration // the journal sweep drops sessions untouched this long

	// PayloadChars bounds one extraction's payload: a claim takes the oldest pending
	// entries whose sizes fit, at least one.
	PayloadChars int
	// ExtractModel, "provider/model", is the extraction children's model; empty: the
	// host's small model, else the host's choice.
	ExtractModel string
	// DailyTokens, when positive, stops new extractions for the rest of the UTC day once
	// the day's extraction tokens reach it (rule 14).
	DailyTokens int64
	// RetryAfter is the wait before each timed retry of a failed extraction, counted from
	// the failure: the first failure is retried after RetryAfter[0], the retry's failure
	// after RetryAfter[1], and so on; past the last, the session's next idle retries
	// (retry.go).
	RetryAfter []time.Duration
}

// DefaultRules are the protocol's defaults.
var DefaultRules = Rules{StaleAccepted: 15 * time.Minute, OutputMax: 2000, TTL: 7 * 24 * time.Hour, PayloadChars: 24000,
	RetryAfter: []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute}}

// Tool names thatch serves (protocol §3). Their own calls are never buffered.
const (
	ToolPayload = protocol.ToolPayload
	ToolDone    = protocol.ToolDone
)

// ApplyEvents applies events in order, each id at most once: seen holds the ids applied
// before (the journal's record) and gains the new ones. A redelivery or a duplicate
// publish of an applied id changes nothing.
func (r Rules) ApplyEvents(s *State, events []Event, seen map[string]bool, now time.Time) (*Effects, []Applied) {
	t := &step{Rules: r, s: s, fx: NewEffects(), now: now} // one Effects for the whole batch
	var applied []Applied
	for _, ev := range events {
		if seen[ev.ID] {
			// Republished (a bridge catching up): its Host-Seq still counts, or the
			// number it took would look like a lost event. A hello's counts only within
			// its own boot: one of another boot sets no baseline when it is a repeat.
			if h := s.Hosts[ev.HostID]; h != nil && (ev.Type != protocol.EventHostHello || ev.Hello != nil && ev.Hello.BootID == h.BootID) {
				t.heard(h)
				t.hostSeq(h, ev)
			}
			continue
		}
		seen[ev.ID] = true
		t.event(ev)
		applied = append(applied, Applied{ID: ev.ID, Seq: ev.Seq})
	}
	s.recount(t.fx)
	return t.fx, applied
}

// step carries one Step's arguments so the handlers stay short.
type step struct {
	Rules
	s   *State
	fx  *Effects
	now time.Time
}

// Step applies one input to s, mutating s in place, and returns what it implies. It is
// deterministic, not pure: the same state, input and time give the same new state and
// the same effects, and it reads no clock and performs no I/O.
func (r Rules) Step(s *State, in Input, now time.Time) *Effects {
	t := &step{Rules: r, s: s, fx: NewEffects(), now: now}
	switch in := in.(type) {
	case Event:
		t.event(in)
	case ToolCall:
		t.fx.Reply = t.tool(in)
	case Result:
		t.result(in)
	case Tick:
		t.journalSweep(in)
	case RetryTick:
		t.retry()
	case SweepApply:
		t.sweepApply(in)
	case MemoryWrote:
		t.memoryWrote(in)
	case StreamSwitch:
		FollowStream(s, in.ID, t.fx)
	case Rejection:
		t.rejected(in)
	}
	s.recount(t.fx)
	return t.fx
}

// StreamSwitch says the deliveries come from stream ID, not the one the state counts in:
// the first stream the journal knows, or a stream created again (FollowStream).
type StreamSwitch struct{ ID string }

// Rejection is a delivery that does not decode (a malformed event, a bad Host-Seq
// header): it is acknowledged, never retried. Step counts it, and the redactions its body
// took; the driver journals its DeadLetter in the same commit.
type Rejection struct {
	Seq      uint64 // its stream sequence
	Subject  string
	Reason   string
	Body     string // the message as it came, redacted (rule 13): kept for a person to read
	Redacted int    // secrets and private blocks redacted from Body
}

func (StreamSwitch) input() {}
func (Rejection) input()    {}

// Reject makes the Rejection of the message data, which failed to decode with err. The
// body is redacted as an entry's arguments are (redact.JSON: a JSON document's strings
// decoded, with their keys as context; anything else as text), and so are the subject and
// the reason, which may quote a subject or a header: nothing of a secret reaches the
// journal or the log.
func Reject(seq uint64, subject string, data []byte, err error) Rejection {
	body, n := redact.JSON(data)
	subj, n2 := redact.Text(subject)
	reason, n3 := redact.Text(err.Error())
	return Rejection{Seq: seq, Subject: subj, Reason: reason, Body: string(body), Redacted: n.Total() + n2.Total() + n3.Total()}
}

// DeadLetter is what the journal keeps of r.
func (r Rejection) DeadLetter() DeadLetter {
	return DeadLetter{Seq: r.Seq, Subject: r.Subject, Reason: r.Reason, Body: []byte(r.Body)}
}

func (t *step) rejected(r Rejection) {
	t.count(&t.s.Counters.Rejected, 1)
	t.count(&t.s.Counters.Redacted, int64(r.Redacted))
	t.note(slog.LevelWarn, "rejected event: acknowledged and dead-lettered", "subject", r.Subject, "stream_seq", r.Seq, "reason", r.Reason)
}

func (t *step) note(level slog.Level, msg string, attrs ...any) {
	t.fx.Notes = append(t.fx.Notes, Note{Level: level, Msg: msg, Attrs: attrs})
}

func (t *step) call(c Call) { t.fx.Calls = append(t.fx.Calls, c) }

// dirty marks sess for the journal (and for the recount of status's tally: every change
// of its exit marks it; a change of its entries is counted by their EntryOps).
func (t *step) dirty(sess *Session) { t.fx.Sessions[sess.ID] = true }

// touch records activity of a session (an event or a tool call about it): the journal
// sweep's TTL counts from the last one. thatch's own bookkeeping does not touch.
func (t *step) touch(id string) {
	if sess := t.s.Sessions[id]; sess != nil {
		sess.Touched = t.now
		t.dirty(sess)
	}
}

// touchCall is touch for a tool call or a tool event, which dirties what it changes
// itself: one in the minute of the session's last touch does not write the session for
// its Touched alone. The journal's Touched is then at most a minute behind (whatever else
// writes the session writes the newest), which a TTL of hours does not notice; a call
// that changes nothing else commits nothing (a payload asked for again), and a busy
// session's tool events write their entries, not its row each time.
func (t *step) touchCall(id string) {
	if sess := t.s.Sessions[id]; sess != nil {
		if !sess.Touched.Truncate(time.Minute).Equal(t.now.Truncate(time.Minute)) {
			t.dirty(sess)
		} else {
			t.fx.Touched = append(t.fx.Touched, id)
		}
		sess.Touched = t.now
	}
}

func (t *step) forget(sess *Session) {
	t.s.drop(sess)
	t.fx.Sessions[sess.ID] = true
	t.bury(sess.ID)
}

// bury remembers that thatch is done with a session, so its late events are ignored.
func (t *step) bury(id string) {
	t.s.Gone[id] = t.now.UnixMilli()
	t.fx.Gone[id] = true
}

func (t *step) count(c *int64, n int64) {
	*c += n
	t.fx.Counters = true
}

func (t *step) toast(host, title, message, variant string) {
	t.call(Call{Host: host, Op: OpToast, Title: title, Text: message, Variant: variant})
}

func (t *step) event(ev Event) {
	if !Known(ev.Type) {
		return
	}
	t.count(&t.s.Counters.Applied, 1)
	h := t.host(ev.HostID)
	t.heard(h)
	if ev.Type == protocol.EventHostHello {
		t.hello(h, ev)
		return
	}
	t.hostSeq(h, ev) // every event of the host counts, also the ones ignored below
	if _, gone := t.s.Gone[ev.SessionID]; gone && ev.SessionID != "" {
		return // a late or redelivered event of a session thatch is done with
	}
	switch ev.Type {
	case protocol.EventHostGoodbye:
		if h.Online {
			h.Online = false
			t.fx.Hosts[h.ID] = true
		}
	case protocol.EventSessionCreated, protocol.EventSessionUpdated:
		t.upsert(ev)
	case protocol.EventSessionDeleted:
		t.deleted(ev)
	case protocol.EventSessionStatus:
		if ev.Status == StatusIdle {
			t.idle(ev)
		} else {
			t.busy(ev)
		}
	case protocol.EventSessionIdle:
		t.idle(ev)
	case protocol.EventSessionError:
		t.errored(ev)
	case protocol.EventSessionCompacting, protocol.EventSessionCompacted:
		if sess := t.s.Sessions[ev.SessionID]; sess != nil {
			sess.Compacting = ev.Type == protocol.EventSessionCompacting
			t.dirty(sess)
		}
	case protocol.EventToolExecuteAfter:
		t.buffer(ev)
	case protocol.EventCommandExecuteBefore:
		t.arm(ev)
	case protocol.EventCommandExecuted:
		t.executed(ev)
	}
	if ev.Type == protocol.EventToolExecuteAfter {
		t.touchCall(ev.SessionID)
	} else {
		t.touch(ev.SessionID)
	}
}

func (t *step) result(res Result) {
	c := res.Call
	if res.Err != nil && c.Purpose == PurposeNone {
		// Deleting an absent session is done; a method the host lacks was logged once by the adapter.
		// A moot call after a host restart was logged by the driver.
		if !(c.Op == OpDelete && res.Err.Name == protocol.NotFound) && !res.Err.NoResponder && res.Err.Name != protocol.HostRestarted {
			t.note(slog.LevelWarn, "host call failed", "host", c.Host, "method", string(c.Op), "session", c.SessionID, "error", res.Err.Error())
		}
		return
	}
	switch c.Purpose {
	case PurposeExtract:
		t.created(c, res)
	case PurposeInstruct:
		t.instructed(c, res)
	case PurposeWrapIdle:
		t.wrapIdleMessages(c, res)
	case PurposeWrapExec:
		t.wrapExecMessages(c, res)
	case PurposeResync:
		t.resync(c.Host, res)
	case PurposeLedger:
		t.ledger(c, res)
	case PurposeCompact:
		t.compacted(c, res)
	}
}

// children returns the children of id in id order.
func (s *State) children(id string) []*Session {
	return sortedSet(s.index().byParent[id])
}

// sorted returns the sessions in id order, so that iteration (and so the order of the
// effects) is deterministic.
func (s *State) sorted() []*Session {
	out := make([]*Session, 0, len(s.Sessions))
	for _, sess := range s.Sessions {
		out = append(out, sess)
	}
	slicesSortByID(out)
	return out
}
