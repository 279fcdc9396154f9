package runtime

import (
	"cmp"
	"log/slog"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Extraction: a top-level session's idle with pending entries creates an extraction child;
// the child claims them (thatch_get_extraction_payload), writes memories, completes them
// (thatch_extraction_done) and ends at its idle. The parent's side is an ExtractionPhase
// (phase.go).

// topIdle is rule 3 after the wrap-up: requeue stale claims, then maybe extract.
func (t *step) topIdle(sess *Session) {
	requeued := int64(0)
	for i, e := range sess.Entries {
		if !e.Accepted() || t.now.UnixMilli()-e.ClaimedAt() < t.StaleAccepted.Milliseconds() {
			continue
		}
		if c := t.s.Sessions[e.Claimant()]; c != nil && c.Status == StatusBusy {
			continue // a claimant still working keeps its claim: the check repeats at the next idle
		}
		sess.Entries[i].claim = nil
		t.fx.Entries = append(t.fx.Entries, EntryOp{Kind: EntryRelease, Root: sess.ID, ID: e.ID})
		requeued++
	}
	if requeued > 0 {
		t.dirty(sess)
		t.count(&t.s.Counters.StaleRequeued, requeued)
		t.note(slog.LevelInfo, "stale claims requeued", "session", sess.ID, "entries", requeued)
	}
	t.extract(sess)
}

// extract is rule 3's last step, which rule 4's follow-up shares: unless the session is
// compacting, already extracting, has nothing pending (or only trivial entries), its host
// lacks thatch's tools or the daily budget is spent, it sends session.create
// (ExtractionNone → ExtractionCreating). It reports whether it did.
func (t *step) extract(sess *Session) bool {
	if sess.Compacting || sess.Extraction() != ExtractionNone || sess.Pending() == 0 || t.retireTrivial(sess) || t.toolsMissing(sess) || t.overBudget(sess) {
		return false
	}
	sess.startExtraction()
	sess.RetryAt = 0 // a retry scheduled is this extraction: its failure schedules the next
	t.dirty(sess)
	t.call(Call{Host: sess.HostID, Op: OpCreate, Purpose: PurposeExtract, SessionID: sess.ID, Title: ExtractionTitle})
	return true
}

// followUp is rule 4's version 1.2 amendment: once an extraction child completed entries,
// a parent whose last known status is idle and which still has pending entries (calls
// made while the child ran, or a backlog over one payload) extracts again at once, as its
// idle would, instead of waiting for a user turn that may never come. A wrap-up armed or
// resolving waits for the idle that resolves it, and an exited session is not idle.
func (t *step) followUp(parent *Session) {
	if parent.Kind != KindTop || parent.Status != StatusIdle || parent.WrapUpPhase() != WrapUpNone || parent.Pending() == 0 {
		return
	}
	if t.extract(parent) {
		t.note(slog.LevelInfo, "entries still pending after an extraction: the next one starts", "session", parent.ID, "entries_pending", parent.Pending())
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
		case res.Err != nil && res.Err.Name == protocol.ToolsMissing:
			t.refusedTools(c.Host, res.Err) // no child: the entries stay pending
		case res.Err == nil || !res.Err.NoResponder: // a missing method was logged once by the adapter
			t.note(slog.LevelWarn, "extraction child could not be created; the next idle retries", "host", c.Host, "session", c.SessionID, "error", msg)
		}
		if parent != nil && parent.Extraction() == ExtractionCreating {
			parent.stopExtraction()
			t.dirty(parent)
			if res.Err == nil || !res.Err.NoResponder && res.Err.Name != protocol.ToolsMissing && res.Err.Name != protocol.HostRestarted {
				t.failedExtraction(parent) // a host not answering, or without the tools, is not retried on a timer
			}
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

// adoptExtraction decides whether child is the parent's running extraction. The host
// names the child twice, in its session.created event and in the create call's result,
// in either order; a create repeated after a crash names a second child, which is deleted
// so thatch never leaves its own machinery behind.
func (t *step) adoptExtraction(parent, child *Session, fromResult bool) bool {
	switch phase := parent.Extraction(); {
	case phase == ExtractionRunning && parent.Child == child.ID:
		return true
	case phase == ExtractionCreating && fromResult:
		parent.nameChild(child.ID)
		t.dirty(parent)
		for _, other := range t.s.children(parent.ID) { // children a repeated create left waiting
			if other.Kind == KindExtraction && other.ID != child.ID {
				t.note(slog.LevelWarn, "deleting a stray extraction child", "session", parent.ID, "child", other.ID)
				t.forget(other)
				t.call(Call{Host: other.HostID, Op: OpDelete, SessionID: other.ID})
			}
		}
		return true
	case phase == ExtractionCreating:
		return false // the create's result will say whether it is ours
	}
	t.note(slog.LevelWarn, "deleting a stray extraction child", "session", parent.ID, "child", child.ID)
	t.forget(child)
	t.call(Call{Host: child.HostID, Op: OpDelete, SessionID: child.ID})
	return false
}

// instructed handles the result of the extraction child's prompt: a failed prompt ends
// the child, and the parent's next idle tries again.
func (t *step) instructed(c Call, res Result) {
	if res.Err == nil {
		return
	}
	child := t.s.Sessions[c.SessionID] // the prompt is the child's
	parent := ""
	if child != nil {
		parent = child.ParentID
	}
	t.note(slog.LevelWarn, "extraction prompt failed; the next idle retries", "host", c.Host, "session", parent, "child", c.SessionID, "error", res.Err.Error())
	if child != nil {
		t.failedExtraction(t.s.Sessions[child.ParentID])
		t.endExtraction(child, true, 0, "", "prompt_failed")
	}
}

// extractionIdle is rule 4 for an extraction child.
func (t *step) extractionIdle(child *Session) {
	n := child.Completed
	root := t.s.Sessions[t.s.Root(child.ID)]
	if root != nil {
		n += t.complete(root, child.ID)
	}
	outcome := "completed"
	if n == 0 {
		outcome = "idle_without_claims"
	}
	t.endExtraction(child, true, n, t.extractionToast(child), outcome)
	if n > 0 {
		t.extractionSucceeded(t.s.Sessions[child.ParentID])
	}
	if n > 0 && root != nil && root.ID == child.ParentID {
		t.followUp(root)
	}
}

// endExtraction forgets an extraction child and ends its parent's extraction (→ None),
// unless the parent runs another child. Unless the host already deleted the child, thatch
// reads its messages for the ledger (rule 14) and then deletes it; toast, when not empty,
// is sent with the cost added. outcome says why it ended, for the log.
func (t *step) endExtraction(child *Session, del bool, completed int, toast, outcome string) {
	t.note(slog.LevelInfo, "extraction child deleted", "session", child.ParentID, "child", child.ID, "outcome", outcome, "entries_completed", completed)
	if parent := t.s.Sessions[child.ParentID]; parent != nil && (parent.Extraction() != ExtractionRunning || parent.Child == child.ID) {
		parent.stopExtraction()
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
