package runtime

import (
	"log/slog"

	"github.com/thatch-dev/thatch/runtime/protocol"
	"github.com/thatch-dev/thatch/runtime/redact"
)

// The session lifecycle: sessions created, updated, busy, idle, failed and deleted, and the
// entries buffered for their roots, claimed, completed and released.

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
		if h := t.s.Hosts[sess.HostID]; ev.Type == protocol.EventSessionCreated && !sess.Reminded && (h == nil || !h.Caps.Context) {
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
	id := EntryID(root.ID, sess.ID, x.CallID)
	if root.entry(id) >= 0 {
		return
	}
	t.touchCall(root.ID)
	body, n := t.entryBody(x)
	if n > 0 {
		t.count(&t.s.Counters.Redacted, int64(n))
	}
	size, trivial := EntrySize(id, body), TrivialEntry(body)
	root.Entries = append(root.Entries, NewEntry(id, x.Tool, int32(size), trivial))
	t.fx.Entries = append(t.fx.Entries, EntryOp{Kind: EntryInsert, Root: root.ID, ID: id, At: t.now, Body: body, Size: size, Trivial: trivial})
}

// entryBody is what the journal keeps of a tool call (rules 1 and 13): secrets and private
// text redacted before anything is cut (a cut could leave half a secret no rule knows), then
// the output and the args' and metadata's strings cut to OutputMax, and the metadata bounded
// as a whole. It returns the body and the number of redactions.
func (t *step) entryBody(x *ToolExec) (*Body, int) {
	if x.prepared != nil && x.preparedMax == t.OutputMax {
		return x.prepared, x.redactions
	}
	return makeBody(x, t.OutputMax)
}

// PrepareBody makes x's entryBody for r beforehand, off the loop's goroutine: the loop's
// decoder does it for each tool event, so that the redaction and the cuts, a large part of
// the loop's own work per event, overlap the loop's commits. It is the same
// pure function of x and OutputMax; Step takes what was made only for the same OutputMax.
func (r Rules) PrepareBody(x *ToolExec) {
	x.prepared, x.redactions = makeBody(x, r.OutputMax)
	x.preparedMax = r.OutputMax
}

// makeBody is entryBody's work (see entryBody).
func makeBody(x *ToolExec, outputMax int) (*Body, int) {
	if what := SensitiveRead(x.Tool, x.Args); what != "" {
		// The output is the file's content, and opencode copies it into the metadata.
		x = &ToolExec{Tool: x.Tool, CallID: x.CallID, Args: x.Args, Title: x.Title, Output: LeftOut(what)}
	}
	args, c1 := redact.JSON(x.Args)
	meta, c2 := redact.JSON(x.Metadata)
	title, c3 := redact.Text(x.Title)
	output, c4 := redact.Text(x.Output)
	return &Body{Tool: x.Tool, Args: cutArgs(args, outputMax), Title: cut(title, outputMax),
		Output: cutMiddle(output, outputMax), Metadata: boundJSON(meta, outputMax)}, c1.Total() + c2.Total() + c3.Total() + c4.Total()
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
		if t.wrapUpAtIdle(sess) {
			return // the idle goes on when the messages arrive
		}
		t.topIdle(sess)
	}
}

// complete drops the entries of root claimed by claimant and returns how many.
func (t *step) complete(root *Session, claimant string) int {
	kept := root.Entries[:0]
	n := 0
	for _, e := range root.Entries {
		if e.Claimant() == claimant {
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
		t.fx.Entries = append(t.fx.Entries, EntryOp{Kind: EntryDeleteClaimed, Root: root.ID, Claimant: claimant, At: t.now})
		t.dirty(root)
	}
	return n
}

// release puts the entries of root accepted by claimant (any claimant when claimant is
// "") back to pending and returns how many.
func (t *step) release(root *Session, claimant string) int {
	n := 0
	for i, e := range root.Entries {
		if e.Accepted() && (claimant == "" || e.Claimant() == claimant) {
			root.Entries[i].claim = nil
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
		text, _ := redact.Text(msg)
		t.s.Counters.LastExtractionFailure = &ExtractionFailure{Host: sess.HostID, Session: sess.ParentID, Child: sess.ID,
			At: t.now.UTC(), Message: cut(text, 1000)}
		t.fx.Counters = true
		t.failedExtraction(t.s.Sessions[sess.ParentID])
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
