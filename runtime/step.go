package runtime

import (
	"cmp"
	"log/slog"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/runtime/redact"
)

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
}

// DefaultRules are the protocol's defaults.
var DefaultRules = Rules{StaleAccepted: 15 * time.Minute, OutputMax: 2000, TTL: 7 * 24 * time.Hour, PayloadChars: 24000}

// Tool names thatch serves (protocol §3). Their own calls are never buffered.
const (
	ToolPayload = "thatch_get_extraction_payload"
	ToolDone    = "thatch_extraction_done"
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
			if h := s.Hosts[ev.HostID]; h != nil && (ev.Type != "host.hello" || ev.Hello != nil && ev.Hello.BootID == h.BootID) {
				t.heard(h)
				t.hostSeq(h, ev)
			}
			continue
		}
		seen[ev.ID] = true
		t.event(ev)
		applied = append(applied, Applied{ID: ev.ID, Seq: ev.Seq})
	}
	s.recount(t.fx.Sessions, t.fx.Hosts)
	return t.fx, applied
}

// step carries one Step's arguments so the handlers stay short.
type step struct {
	Rules
	s   *State
	fx  *Effects
	now time.Time
}

// Step applies one input to s and returns what it implies. It is pure: the same state,
// input and time give the same result.
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
	case SweepApply:
		t.sweepApply(in)
	case MemoryWrote:
		t.memoryWrote(in)
	}
	s.recount(t.fx.Sessions, t.fx.Hosts)
	return t.fx
}

func (t *step) note(level slog.Level, msg string, attrs ...any) {
	t.fx.Notes = append(t.fx.Notes, Note{Level: level, Msg: msg, Attrs: attrs})
}

func (t *step) call(c Call) { t.fx.Calls = append(t.fx.Calls, c) }

// dirty marks sess for the journal (and for the recount of status's tally: every change
// of a session's entries or of its exit marks it).
func (t *step) dirty(sess *Session) { t.fx.Sessions[sess.ID] = true }

// touch records activity of a session (an event or a tool call about it): the journal
// sweep's TTL counts from the last one. thatch's own bookkeeping does not touch.
func (t *step) touch(id string) {
	if sess := t.s.Sessions[id]; sess != nil {
		sess.Touched = t.now
		t.dirty(sess)
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

// host returns the host record for id, creating a v1 record for a host that never said hello.
func (t *step) host(id string) *Host {
	h := t.s.Hosts[id]
	if h == nil {
		h = &Host{ID: id, API: "v1"}
		t.s.Hosts[id] = h
		t.fx.Hosts[id] = true
	}
	return h
}

// heardEvery is how stale a host's Heard may get before an event refreshes it: the TTL
// it serves counts in days, and a host row written at every event would cost a write per
// batch.
const heardEvery = time.Minute

// heard records that an event of h was applied now.
func (t *step) heard(h *Host) {
	if now := t.now.UnixMilli(); now-h.Heard >= heardEvery.Milliseconds() || now < h.Heard {
		h.Heard = now
		t.fx.Hosts[h.ID] = true
	}
}

func (t *step) event(ev Event) {
	if !Known(ev.Type) {
		return
	}
	t.count(&t.s.Counters.Applied, 1)
	h := t.host(ev.HostID)
	t.heard(h)
	if ev.Type == "host.hello" {
		t.hello(h, ev)
		return
	}
	t.hostSeq(h, ev) // every event of the host counts, also the ones ignored below
	if _, gone := t.s.Gone[ev.SessionID]; gone && ev.SessionID != "" {
		return // a late or redelivered event of a session thatch is done with
	}
	switch ev.Type {
	case "host.goodbye":
		if h.Online {
			h.Online = false
			t.fx.Hosts[h.ID] = true
		}
	case "session.created", "session.updated":
		t.upsert(ev)
	case "session.deleted":
		t.deleted(ev)
	case "session.status":
		if ev.Status == StatusIdle {
			t.idle(ev)
		} else {
			t.busy(ev)
		}
	case "session.idle":
		t.idle(ev)
	case "session.error":
		t.errored(ev)
	case "session.compacting", "session.compacted":
		if sess := t.s.Sessions[ev.SessionID]; sess != nil {
			sess.Compacting = ev.Type == "session.compacting"
			t.dirty(sess)
		}
	case "tool.execute.after":
		t.buffer(ev)
	case "command.execute.before":
		t.arm(ev)
	case "command.executed":
		t.executed(ev)
	}
	t.touch(ev.SessionID)
}

// hello handles a host.hello: the host's record, its restart when the bootID is new, and
// the tools it lacks. A hello of the same boot (the opencode bridge says it again when the
// tools it lacks change) restarts nothing: sessions keep their status, and its Host-Seq
// counts like any event's.
func (t *step) hello(h *Host, ev Event) {
	hi := ev.Hello
	restarted := h.BootID != hi.BootID
	if !restarted {
		t.hostSeq(h, ev)
	}
	h.API, h.Version, h.BootID = hi.API, hi.Version, hi.BootID
	h.Directory, h.Worktree, h.ProjectID = hi.Directory, hi.Worktree, hi.ProjectID
	h.Caps, h.Resumed, h.Online = hi.Caps, hi.Resumed, true
	h.SmallModel = ""
	if _, _, ok := ParseModel(hi.SmallModel); ok {
		h.SmallModel = hi.SmallModel
	} else if hi.SmallModel != "" {
		t.note(slog.LevelWarn, "host.hello names a small model that is not provider/model; extraction uses the host's default", "host", h.ID, "small_model", cut(hi.SmallModel, 80))
	}
	t.fx.Hosts[h.ID] = true
	t.fx.Awake = append(t.fx.Awake, Awake{Host: h.ID, Restarted: restarted})
	if restarted {
		t.restart(h, ev)
	}
	t.helloTools(h, hi.MissingTools)
}

// restart handles a hello that began a new boot (rule 7): it finalizes the host's
// extraction children and resets its sessions' volatile flags; entries stay.
func (t *step) restart(h *Host, ev Event) {
	h.Seq = ev.HostSeq // the first event of a boot sets the baseline
	h.ToolsWarned = false
	for _, sess := range t.s.HostSessions(h.ID) { // the host's only: a hello costs what its host has
		if t.s.Sessions[sess.ID] == nil {
			continue // an extraction child finalized with its parent's earlier in this loop
		}
		if sess.Kind == KindExtraction {
			t.endWith(sess, true, "host_restarted")
			continue
		}
		// A status from the previous boot is stale either way: the first idle of the new
		// boot must count.
		if sess.Status != StatusUnknown || sess.Compacting || sess.WrapUp != WrapNone || sess.Resolving || (sess.Extracting && sess.Child == "") {
			sess.Status = StatusUnknown
			sess.Compacting, sess.WrapUp, sess.Resolving = false, WrapNone, false
			if sess.Child == "" {
				sess.Extracting = false
			}
			t.dirty(sess)
		}
	}
	t.fx.Hellos = append(t.fx.Hellos, h.ID)
	t.note(slog.LevelInfo, "host started", "host", h.ID, "api", h.API, "boot_id", h.BootID)
}

// helloTools records the tools a hello says the host lacks. While any is missing no
// extraction starts for the host's sessions (an extraction child could not call them):
// each hello with missing tools says so in one error line, and a hello without them lets
// the next idles extract again.
func (t *step) helloTools(h *Host, missing []string) {
	had := len(h.MissingTools) > 0
	h.MissingTools = boundNames(missing)
	switch {
	case len(h.MissingTools) > 0:
		t.noteToolsMissing(h)
	case had:
		t.note(slog.LevelInfo, "the host has thatch's tools again: extraction resumes at its sessions' next idle", "host", h.ID)
	}
}

// boundNames keeps a host's list of tool names to a size worth holding: 16 names of 64
// characters at most, in a fresh slice; nil when empty.
func boundNames(names []string) []string {
	var out []string
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" && len(out) < 16 {
			out = append(out, cut(n, 64))
		}
	}
	return out
}

func (t *step) noteToolsMissing(h *Host) {
	t.note(slog.LevelError, "the host has not loaded thatch's plugin: its sessions get no memories and no extraction starts (their entries stay pending); run thatch install if you have not, then restart opencode or POST /instance/dispose to it so it loads the plugin",
		"host", h.ID, "missing_tools", strings.Join(h.MissingTools, ","))
}

// toolsMissing is the check before an extraction starts: while the session's host lacks
// thatch's tools, no child is created and the entries stay pending. The first refusal of
// a host boot says so in a warning toast (the error line came with the hello, or with the
// refused create).
func (t *step) toolsMissing(sess *Session) bool {
	h := t.s.Hosts[sess.HostID]
	if h == nil || len(h.MissingTools) == 0 {
		return false
	}
	t.warnTools(h)
	return true
}

// warnTools sends the missing tools' warning toast, once per host boot.
func (t *step) warnTools(h *Host) {
	if h.ToolsWarned {
		return
	}
	h.ToolsWarned = true
	t.fx.Hosts[h.ID] = true
	t.toast(h.ID, "thatch", "opencode has not loaded thatch's plugin: no memories are given or extracted (nothing is lost). Run thatch install if you have not, then restart opencode so it loads the plugin.", "warning")
}

// refusedTools handles a session.create refused with ToolsMissingError: the host lost
// thatch's tools after its hello said it had them. They are marked missing until the next
// hello, with the same error line as a hello's (once) and the boot's toast.
func (t *step) refusedTools(host string, err *HostError) {
	h := t.host(host)
	if len(h.MissingTools) == 0 {
		h.MissingTools = missingFrom(err.Message)
		t.fx.Hosts[h.ID] = true
		t.noteToolsMissing(h)
	}
	t.warnTools(h)
}

// missingFrom reads the tool names out of a ToolsMissingError's message, "… (missing
// tools: a, b) …" as the opencode bridge writes it; any other message names the two
// extraction tools, which a child needs in any case.
func missingFrom(msg string) []string {
	if _, rest, ok := strings.Cut(msg, "missing tools: "); ok {
		if list, _, ok := strings.Cut(rest, ")"); ok {
			if names := boundNames(strings.Split(list, ",")); len(names) > 0 {
				return names
			}
		}
	}
	return []string{ToolPayload, ToolDone}
}

// hostSeq checks Host-Seq continuity within a boot (rule 10).
func (t *step) hostSeq(h *Host, ev Event) {
	switch {
	case ev.HostSeq <= 0:
		return
	case h.Seq == 0 || ev.HostSeq == h.Seq+1:
		h.Seq = ev.HostSeq
	case ev.HostSeq > h.Seq+1:
		t.count(&t.s.Counters.Gaps, 1)
		t.note(slog.LevelWarn, "events lost upstream of the stream: resyncing the host's sessions",
			"host", h.ID, "missing_from", h.Seq+1, "missing_to", ev.HostSeq-1)
		t.call(Call{Host: h.ID, Op: OpList, Purpose: PurposeResync})
		h.Seq = ev.HostSeq
	default:
		return // a redelivery or a reordering: already counted
	}
	t.fx.Hosts[h.ID] = true
}

// ensure returns the session id, recording a placeholder top-level session of host when
// thatch has not seen it yet (a host that ran before thatch, or a missed creation).
func (t *step) ensure(id, host string) *Session {
	sess := t.s.Sessions[id]
	if sess == nil {
		sess = &Session{ID: id, HostID: host, Kind: KindTop, Status: StatusUnknown, Touched: t.now}
		t.s.add(sess)
		t.dirty(sess)
	}
	return sess
}

// upsert handles session.created and session.updated (rule 2).
func (t *step) upsert(ev Event) {
	info := ev.Info
	_, known := t.s.Sessions[info.ID]
	if !known && info.ParentID != "" {
		// A child of a session thatch is done with is not tracked, and machinery of a parent
		// thatch does not know (gone, or never seen) is a stray: deleted.
		_, parentGone := t.s.Gone[info.ParentID]
		machinery := info.Title == ExtractionTitle && t.s.Sessions[info.ParentID] == nil
		if machinery {
			t.note(slog.LevelWarn, "deleting an extraction child of an unknown parent", "session", info.ParentID, "child", info.ID)
			t.call(Call{Host: ev.HostID, Op: OpDelete, SessionID: info.ID})
		}
		if machinery || parentGone {
			t.bury(info.ID)
			return
		}
	}
	sess := t.ensure(info.ID, ev.HostID)
	title, n := redact.Text(info.Title) // opencode titles a session after its first prompt
	if n.Total() > 0 {
		t.count(&t.s.Counters.Redacted, int64(n.Total()))
	}
	sess.Title, sess.Directory = title, info.Directory
	if info.ProjectID != "" {
		sess.ProjectID = info.ProjectID
	}
	t.dirty(sess)
	if info.ParentID == "" {
		if sess.ParentID != "" {
			return // an update that omits the parent does not make a child top-level
		}
		// A host that takes the session-start text itself (its first model request carries
		// it) asks with session.context; any other gets the reminder as a no-reply prompt,
		// and the driver adds the memories section of Project.
		if h := t.s.Hosts[sess.HostID]; ev.Type == "session.created" && !sess.Reminded && (h == nil || !h.Caps.Context) {
			sess.Reminded = true
			t.call(Call{Host: sess.HostID, Op: OpPrompt, SessionID: sess.ID, Text: t.reminder(),
				NoReply: true, Synthetic: true, Project: sess.ProjectKey()})
		}
		return
	}
	wasTop := sess.ParentID == ""
	t.s.setParent(sess, info.ParentID)
	sess.Kind = KindTask
	if info.Title == ExtractionTitle {
		sess.Kind = KindExtraction
	}
	parent := t.ensure(info.ParentID, ev.HostID)
	root := t.s.Sessions[t.s.Root(sess.ID)]
	if root == nil {
		t.note(slog.LevelWarn, "session parent chain loops; treating it as its own root", "session", sess.ID)
		return
	}
	if wasTop && len(sess.Entries) > 0 {
		t.moveEntries(sess, root) // a placeholder turned out to be a child
	}
	if !known || wasTop {
		sess.Snapshot = root.pendingIDs()
	}
	if sess.Kind == KindExtraction && parent.ID == root.ID {
		t.adoptExtraction(root, sess, false)
	}
}

// adoptExtraction decides whether child is the parent's running extraction. The host
// names the child twice, in its session.created event and in the create call's result,
// in either order; a create repeated after a crash names a second child, which is deleted
// so thatch never leaves its own machinery behind.
func (t *step) adoptExtraction(parent, child *Session, fromResult bool) bool {
	switch {
	case parent.Child == child.ID:
		return true
	case parent.Extracting && parent.Child == "" && fromResult:
		parent.Child = child.ID
		t.dirty(parent)
		for _, other := range t.s.children(parent.ID) { // children a repeated create left waiting
			if other.Kind == KindExtraction && other.ID != child.ID {
				t.note(slog.LevelWarn, "deleting a stray extraction child", "session", parent.ID, "child", other.ID)
				t.forget(other)
				t.call(Call{Host: other.HostID, Op: OpDelete, SessionID: other.ID})
			}
		}
		return true
	case parent.Extracting && parent.Child == "":
		return false // the create's result will say whether it is ours
	}
	t.note(slog.LevelWarn, "deleting a stray extraction child", "session", parent.ID, "child", child.ID)
	t.forget(child)
	t.call(Call{Host: child.HostID, Op: OpDelete, SessionID: child.ID})
	return false
}

// moveEntries moves the entries of a placeholder that turned out to be a child to its
// root. Its own calls are then a descendant's, qualified by its id (EntryID); its
// descendants' calls are qualified already.
func (t *step) moveEntries(from, to *Session) {
	for _, e := range from.Entries {
		old := e.ID
		if !qualified(e.ID) {
			e.ID = EntryID(to.ID, from.ID, e.ID)
		}
		if to.entry(e.ID) < 0 {
			to.Entries = append(to.Entries, e)
			op := EntryOp{Kind: EntryMove, From: from.ID, Root: to.ID, ID: e.ID}
			if e.ID != old {
				op.FromID = old
			}
			t.fx.Entries = append(t.fx.Entries, op)
		} else {
			t.fx.Entries = append(t.fx.Entries, EntryOp{Kind: EntryDelete, Root: from.ID, ID: old})
		}
	}
	from.Entries = nil
	t.dirty(to)
}

func (s *Session) pendingIDs() []string {
	var ids []string
	for _, e := range s.Entries {
		if !e.Accepted() {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// buffer adds a tool interaction to its root's entries (rule 1), as entry EntryID: a
// task child's call_1 and its parent's call_1 are two entries.
func (t *step) buffer(ev Event) {
	x := ev.Tool
	if ownTool(x.Tool) {
		return
	}
	sess := t.ensure(ev.SessionID, ev.HostID)
	if sess.Kind == KindExtraction {
		return
	}
	root := t.s.Sessions[t.s.Root(sess.ID)]
	if root == nil {
		t.note(slog.LevelWarn, "session parent chain loops; interaction not buffered", "session", sess.ID, "call_id", x.CallID)
		return
	}
	t.dirty(sess)
	id := EntryID(root.ID, sess.ID, x.CallID)
	if root.entry(id) >= 0 {
		return
	}
	t.touch(root.ID)
	body, n := t.entryBody(x)
	if n > 0 {
		t.count(&t.s.Counters.Redacted, int64(n))
	}
	e := Entry{ID: id, Tool: x.Tool, Size: int32(EntrySize(id, body)), Trivial: TrivialEntry(body)}
	root.Entries = append(root.Entries, e)
	t.fx.Entries = append(t.fx.Entries, EntryOp{Kind: EntryInsert, Root: root.ID, ID: id, At: t.now, Body: body, Size: int(e.Size), Trivial: e.Trivial})
}

// entryBody is what the journal keeps of a tool call (rules 1 and 13): secrets and private
// text redacted before anything is cut (a cut could leave half a secret no rule knows), then
// the output and the args' and metadata's strings cut to OutputMax, and the metadata bounded
// as a whole. It returns the body and the number of redactions.
func (t *step) entryBody(x *ToolExec) (*Body, int) {
	if what := SensitiveRead(x.Tool, x.Args); what != "" {
		// The output is the file's content, and opencode copies it into the metadata.
		x = &ToolExec{Tool: x.Tool, CallID: x.CallID, Args: x.Args, Title: x.Title, Output: LeftOut(what)}
	}
	args, c1 := redact.JSON(x.Args)
	meta, c2 := redact.JSON(x.Metadata)
	title, c3 := redact.Text(x.Title)
	output, c4 := redact.Text(x.Output)
	return &Body{Tool: x.Tool, Args: cutArgs(args, t.OutputMax), Title: cut(title, t.OutputMax),
		Output: cutMiddle(output, t.OutputMax), Metadata: boundJSON(meta, t.OutputMax)}, c1.Total() + c2.Total() + c3.Total() + c4.Total()
}

// stale reports whether ev is older than the last status change applied to sess: a
// redelivery that must not undo newer state.
func stale(sess *Session, ev Event) bool { return ev.Seq != 0 && ev.Seq < sess.Seq }

func (t *step) busy(ev Event) {
	sess := t.s.Sessions[ev.SessionID]
	if sess == nil || stale(sess, ev) {
		return
	}
	sess.Seq = max(sess.Seq, ev.Seq)
	if sess.Status != StatusBusy || sess.Exited {
		sess.Status, sess.Exited = StatusBusy, false
		t.dirty(sess)
	}
}

// idle handles one idle transition (rules 3, 4 and 6): a session already idle, or an
// idle older than the session's last status change, counts for nothing.
func (t *step) idle(ev Event) {
	sess := t.s.Sessions[ev.SessionID]
	if sess == nil || stale(sess, ev) {
		return
	}
	// The watermark advances even when the idle is no transition: an older busy delivered
	// late must not undo it.
	sess.Seq = max(sess.Seq, ev.Seq)
	t.dirty(sess)
	if sess.Status == StatusIdle {
		return
	}
	sess.Status = StatusIdle
	switch sess.Kind {
	case KindExtraction:
		t.extractionIdle(sess)
	case KindTask:
		if root := t.s.Sessions[t.s.Root(sess.ID)]; root != nil {
			t.complete(root, sess.ID)
		}
	case KindTop:
		if sess.WrapUp != WrapNone {
			sess.Resolving, sess.Resolved = true, sess.WrapUp
			t.call(Call{Host: sess.HostID, Op: OpMessages, Purpose: PurposeWrapIdle, SessionID: sess.ID, WrapUp: sess.WrapUp})
			return // the idle goes on when the messages arrive
		}
		t.topIdle(sess)
	}
}

// topIdle is rule 3 after the wrap-up: requeue stale claims, then maybe extract.
func (t *step) topIdle(sess *Session) {
	requeued := int64(0)
	for i, e := range sess.Entries {
		if !e.Accepted() || t.now.UnixMilli()-e.ClaimedAt < t.StaleAccepted.Milliseconds() {
			continue
		}
		if c := t.s.Sessions[e.Claimant]; c != nil && c.Status == StatusBusy {
			continue // a claimant still working keeps its claim: the check repeats at the next idle
		}
		sess.Entries[i].Claimant, sess.Entries[i].ClaimedAt = "", 0
		t.fx.Entries = append(t.fx.Entries, EntryOp{Kind: EntryRelease, Root: sess.ID, ID: e.ID})
		requeued++
	}
	if requeued > 0 {
		t.dirty(sess)
		t.count(&t.s.Counters.StaleRequeued, requeued)
		t.note(slog.LevelInfo, "stale claims requeued", "session", sess.ID, "entries", requeued)
	}
	if sess.Compacting || sess.Extracting || sess.Pending() == 0 || t.retireTrivial(sess) || t.toolsMissing(sess) || t.overBudget(sess) {
		return
	}
	sess.Extracting = true
	t.call(Call{Host: sess.HostID, Op: OpCreate, Purpose: PurposeExtract, SessionID: sess.ID, Title: ExtractionTitle})
}

// extractionIdle is rule 4 for an extraction child.
func (t *step) extractionIdle(child *Session) {
	n := child.Completed
	if root := t.s.Sessions[t.s.Root(child.ID)]; root != nil {
		n += t.complete(root, child.ID)
	}
	outcome := "completed"
	if n == 0 {
		outcome = "idle_without_claims"
	}
	t.endExtraction(child, true, n, t.extractionToast(child), outcome)
}

// endExtraction forgets an extraction child and unflags its parent. Unless the host
// already deleted the child, thatch reads its messages for the ledger (rule 14) and then
// deletes it; toast, when not empty, is sent with the cost added. outcome says why it
// ended, for the log.
func (t *step) endExtraction(child *Session, del bool, completed int, toast, outcome string) {
	t.note(slog.LevelInfo, "extraction child deleted", "session", child.ParentID, "child", child.ID, "outcome", outcome, "entries_completed", completed)
	if parent := t.s.Sessions[child.ParentID]; parent != nil && (parent.Child == child.ID || parent.Child == "") {
		parent.Extracting, parent.Child = false, ""
		t.dirty(parent)
	}
	ref := &LedgerRef{Root: child.ParentID, Project: child.Directory, Directory: child.Directory, Model: t.extractModel(child.HostID), Entries: completed, Toast: toast}
	if who := Identify(t.s, child.ID); who != nil {
		ref.Root, ref.Project = who.Root, who.Project
		ref.Directory = cmp.Or(who.Directory, ref.Directory)
	}
	t.forget(child)
	if del {
		t.call(Call{Host: child.HostID, Op: OpMessages, Purpose: PurposeLedger, SessionID: child.ID, Ledger: ref})
	}
}

// complete drops the entries of root claimed by claimant and returns how many.
func (t *step) complete(root *Session, claimant string) int {
	kept := root.Entries[:0]
	n := 0
	for _, e := range root.Entries {
		if e.Claimant == claimant {
			n++
			continue
		}
		kept = append(kept, e)
	}
	clear(root.Entries[len(kept):])
	root.Entries = kept
	if len(kept) == 0 {
		root.Entries = nil // as the journal reloads it
	}
	if n > 0 {
		t.fx.Entries = append(t.fx.Entries, EntryOp{Kind: EntryDeleteClaimed, Root: root.ID, Claimant: claimant})
		t.dirty(root)
	}
	return n
}

// release puts the entries of root accepted by claimant (any claimant when claimant is
// "") back to pending and returns how many.
func (t *step) release(root *Session, claimant string) int {
	n := 0
	for i, e := range root.Entries {
		if e.Accepted() && (claimant == "" || e.Claimant == claimant) {
			root.Entries[i].Claimant, root.Entries[i].ClaimedAt = "", 0
			n++
		}
	}
	if n > 0 {
		t.fx.Entries = append(t.fx.Entries, EntryOp{Kind: EntryReleaseClaimed, Root: root.ID, Claimant: claimant})
		t.dirty(root)
	}
	return n
}

// releaseClaims is the shared first step of a child's error and deletion (rule 5): its
// own claims go back; an extraction child that claimed none returns its parent's whole
// accepted set, since the error or deletion says that delivery was never processed.
func (t *step) releaseClaims(child *Session) {
	root := t.s.Sessions[t.s.Root(child.ID)]
	if root == nil {
		return
	}
	if t.release(root, child.ID) == 0 && child.Kind == KindExtraction {
		t.release(root, "")
	}
}

func (t *step) errored(ev Event) {
	sess := t.s.Sessions[ev.SessionID]
	if sess == nil || sess.Kind == KindTop {
		return // a top-level error is followed by its idle, which is handled as usual
	}
	if sess.Kind == KindExtraction {
		msg := ""
		if ev.Error != nil {
			msg = ev.Error.Name + ": " + ev.Error.Data.Message
		}
		t.note(slog.LevelWarn, "extraction child failed; its entries go back to pending", "session", sess.ParentID, "child", sess.ID, "error", msg)
	}
	t.endWith(sess, true, "failed")
}

func (t *step) deleted(ev Event) {
	if sess := t.s.Sessions[ev.SessionID]; sess != nil {
		t.end(sess, false) // the host deleted it, and a parent's children with it
	}
}

// end finishes with a session by its kind (rules 5, 7 and 9). A child's claims go back
// (an extraction child that claimed nothing returns its parent's accepted set); an
// extraction child unflags its parent and, with deleteMachinery, is deleted on the host;
// a top-level session takes its entries and its children with it.
func (t *step) end(sess *Session, deleteMachinery bool) {
	outcome := "finalized"
	if !deleteMachinery {
		outcome = "deleted_by_host"
	}
	t.endWith(sess, deleteMachinery, outcome)
}

// endWith is end with the outcome an extraction child's log line gives.
func (t *step) endWith(sess *Session, deleteMachinery bool, outcome string) {
	switch sess.Kind {
	case KindExtraction:
		t.releaseClaims(sess)
		t.endExtraction(sess, deleteMachinery, 0, "", outcome)
	case KindTask:
		t.releaseClaims(sess)
		t.forget(sess)
	case KindTop:
		if len(sess.Entries) > 0 {
			t.fx.Entries = append(t.fx.Entries, EntryOp{Kind: EntryDeleteAll, Root: sess.ID})
		}
		sess.Entries = nil
		for _, c := range t.s.children(sess.ID) {
			t.endWith(c, deleteMachinery, outcome)
		}
		t.forget(sess)
	}
}

// arm handles command.execute.before for a wrap-up command (rule 6).
func (t *step) arm(ev Event) {
	w := WrapUpFor(ev.Command)
	sess := t.s.Sessions[ev.SessionID]
	if w == WrapNone || sess == nil || sess.Kind != KindTop {
		return
	}
	if stale(sess, ev) && sess.Status == StatusIdle {
		return // the idle that would have resolved it is already past
	}
	sess.WrapUp, sess.Resolved = w, WrapNone
	t.dirty(sess)
}

// executed handles command.executed: it resolves a wrap-up that no idle resolved.
func (t *step) executed(ev Event) {
	w := WrapUpFor(ev.Command)
	sess := t.s.Sessions[ev.SessionID]
	if w == WrapNone || sess == nil || sess.Kind != KindTop {
		return
	}
	if sess.Resolved == w {
		sess.Resolved = WrapNone
		t.dirty(sess)
		return
	}
	sess.WrapUp = WrapNone
	t.dirty(sess)
	t.call(Call{Host: sess.HostID, Op: OpMessages, Purpose: PurposeWrapExec, SessionID: sess.ID, WrapUp: w})
}

// Greenlit reports whether the last assistant message's last non-empty line, trimmed, is
// exactly token.
func Greenlit(msgs []Message, token string) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Info.Role != "assistant" {
			continue
		}
		var text strings.Builder
		for _, p := range msgs[i].Parts {
			if p.Type == "text" {
				text.WriteString(p.Text)
				text.WriteString("\n")
			}
		}
		lines := strings.Split(text.String(), "\n")
		for j := len(lines) - 1; j >= 0; j-- {
			if l := strings.TrimSpace(lines[j]); l != "" {
				return l == token
			}
		}
		return false
	}
	return false
}

// resolve finishes a wrap-up from the session's messages. It reports whether the action
// ran, which ends that idle's handling.
func (t *step) resolve(sess *Session, w WrapUp, res Result) bool {
	sess.WrapUp, sess.Resolving = WrapNone, false
	t.dirty(sess)
	if res.Err == nil && Greenlit(res.Messages, w.Token()) {
		switch w {
		case WrapCompact:
			sess.Compacting = true
			t.call(Call{Host: sess.HostID, Op: OpCompact, Purpose: PurposeCompact, SessionID: sess.ID})
		case WrapExit:
			t.exit(sess)
		}
		t.note(slog.LevelInfo, "wrap-up greenlit", "session", sess.ID, "command", w.Command())
		return true
	}
	why := "the reply does not end with " + w.Token() + ": see the blockers it lists"
	if res.Err != nil {
		why = "its messages could not be read (" + res.Err.Error() + ")"
	}
	if h := t.s.Hosts[sess.HostID]; h != nil && len(h.MissingTools) > 0 {
		why += "; opencode has not loaded thatch's tools, so the flush cannot run: restart opencode so it loads thatch's plugin"
	}
	t.toast(sess.HostID, "thatch", "/"+w.Command()+" did not proceed: "+why, "warning")
	return false
}

// exit records the session's death, removes it from the live directory, then closes it.
// Its entries stay journaled until deletion or the TTL.
func (t *step) exit(sess *Session) {
	t.note(slog.LevelInfo, "session exited", "session", sess.ID, "host", sess.HostID)
	sess.Status = StatusUnknown
	sess.Exited = true
	t.dirty(sess)
	t.call(Call{Host: sess.HostID, Op: OpClose, SessionID: sess.ID})
}

func (t *step) result(res Result) {
	c := res.Call
	if res.Err != nil && c.Purpose == PurposeNone {
		// Deleting an absent session is done; a method the host lacks was logged once by the adapter.
		// A moot call after a host restart was logged by the driver.
		if !(c.Op == OpDelete && res.Err.Name == "NotFoundError") && !res.Err.NoResponder && res.Err.Name != "HostRestartedError" {
			t.note(slog.LevelWarn, "host call failed", "host", c.Host, "method", string(c.Op), "session", c.SessionID, "error", res.Err.Error())
		}
		return
	}
	switch c.Purpose {
	case PurposeExtract:
		t.created(c, res)
	case PurposeInstruct:
		if res.Err != nil {
			child := t.s.Sessions[c.SessionID] // the prompt is the child's
			parent := ""
			if child != nil {
				parent = child.ParentID
			}
			t.note(slog.LevelWarn, "extraction prompt failed; the next idle retries", "host", c.Host, "session", parent, "child", c.SessionID, "error", res.Err.Error())
			if child != nil {
				t.endExtraction(child, true, 0, "", "prompt_failed")
			}
		}
	case PurposeWrapIdle:
		sess := t.s.Sessions[c.SessionID]
		if sess == nil || !sess.Resolving {
			return
		}
		if !t.resolve(sess, c.WrapUp, res) && sess.Status == StatusIdle {
			t.topIdle(sess)
		}
	case PurposeWrapExec:
		if sess := t.s.Sessions[c.SessionID]; sess != nil {
			t.resolve(sess, c.WrapUp, res)
		}
	case PurposeResync:
		t.resync(c.Host, res)
	case PurposeLedger:
		t.ledger(c, res)
	case PurposeCompact:
		if res.Err == nil {
			return
		}
		if !res.Err.NoResponder {
			t.note(slog.LevelWarn, "compaction failed", "host", c.Host, "session", c.SessionID, "error", res.Err.Error())
		}
		if sess := t.s.Sessions[c.SessionID]; sess != nil && sess.Compacting {
			sess.Compacting = false // no session.compacted will come to clear it
			t.dirty(sess)
		}
	}
}

// created continues an extraction once the host created (or failed to create) the child.
func (t *step) created(c Call, res Result) {
	parent := t.s.Sessions[c.SessionID]
	if res.Err != nil || res.Session == nil || res.Session.ID == "" {
		msg := "the host returned no session"
		if res.Err != nil {
			msg = res.Err.Error()
		}
		switch {
		case res.Err != nil && res.Err.Name == "ToolsMissingError":
			t.refusedTools(c.Host, res.Err) // no child: the entries stay pending
		case res.Err == nil || !res.Err.NoResponder: // a missing method was logged once by the adapter
			t.note(slog.LevelWarn, "extraction child could not be created; the next idle retries", "host", c.Host, "session", c.SessionID, "error", msg)
		}
		if parent != nil && parent.Child == "" && parent.Extracting {
			parent.Extracting = false
			t.dirty(parent)
		}
		return
	}
	info := res.Session
	child := t.s.Sessions[info.ID]
	if child == nil {
		child = &Session{ID: info.ID, HostID: c.Host, ParentID: c.SessionID, Kind: KindExtraction,
			Title: ExtractionTitle, Directory: info.Directory, ProjectID: info.ProjectID, Status: StatusUnknown, Touched: t.now}
		if parent != nil {
			child.Snapshot = parent.pendingIDs()
		}
		t.s.add(child)
		t.dirty(child)
	}
	if parent == nil {
		t.note(slog.LevelWarn, "deleting an extraction child whose parent is gone", "session", c.SessionID, "child", child.ID)
		t.forget(child)
		t.call(Call{Host: c.Host, Op: OpDelete, SessionID: child.ID})
		return
	}
	if t.adoptExtraction(parent, child, true) {
		t.note(slog.LevelInfo, "extraction started", "session", parent.ID, "child", child.ID, "entries_pending", parent.Pending())
		t.call(Call{Host: c.Host, Op: OpPrompt, Purpose: PurposeInstruct, SessionID: child.ID, Text: ExtractionPrompt,
			Model: t.extractModel(c.Host)})
	}
}

// resync refreshes what thatch knows of a host's sessions from session.list (rule 10).
// A session the list omits is never deleted. It costs what the list holds: each row is
// looked up, no other session is visited.
func (t *step) resync(host string, res Result) {
	if res.Err != nil {
		t.note(slog.LevelWarn, "resync failed", "host", host, "error", res.Err.Error())
		return
	}
	for _, info := range res.Sessions {
		sess := t.s.Sessions[info.ID]
		if sess == nil || sess.HostID != host {
			continue
		}
		if sess.Title != info.Title || sess.Directory != info.Directory || (info.ParentID != "" && sess.ParentID == "") {
			t.upsert(Event{Type: "session.updated", HostID: host, SessionID: info.ID, Info: &info})
		}
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
