package runtime

import (
	"log/slog"
	"slices"
	"time"
)

// Extraction retry (an extension of rules 3 and 5): a session whose extraction failed
// (its child's session.error, a failed create or prompt) is retried on a timer, since a
// session that never goes idle again (a headless Claude Code run) would otherwise keep its
// entries unextracted for good. The schedule is in the session's row (Failed, RetryAt), so
// it survives a restart; a retry is rule 3's extraction, claims and all.

// RetryTick is the retry timer, an input like Tick so tests drive time: the extractions
// whose retry is due start.
type RetryTick struct{}

func (RetryTick) input() {}

// failedExtraction counts a failed extraction of parent and schedules its retry, while
// the schedule lasts.
func (t *step) failedExtraction(parent *Session) {
	if parent == nil || parent.Kind != KindTop {
		return
	}
	parent.Failed++
	parent.RetryAt = 0
	if n := int(parent.Failed); n <= len(t.RetryAfter) {
		at := t.now.Add(t.RetryAfter[n-1])
		parent.RetryAt = at.UnixMilli()
		t.note(slog.LevelInfo, "extraction retry scheduled", "session", parent.ID, "failures", n, "retry_at", at.UTC().Format(time.RFC3339))
	} else {
		t.note(slog.LevelInfo, "extraction failed again: no more timed retries, the session's next idle retries", "session", parent.ID, "failures", n)
	}
	t.dirty(parent)
}

// extractionSucceeded clears parent's failures once an extraction completed entries, and
// records when for status.
func (t *step) extractionSucceeded(parent *Session) {
	t.s.Counters.LastExtractionSuccess = t.now.UnixMilli()
	t.fx.Counters = true
	if parent != nil && (parent.Failed != 0 || parent.RetryAt != 0) {
		parent.Failed, parent.RetryAt = 0, 0
		t.dirty(parent)
	}
}

// retryDue reports whether sess's failed extraction is to be retried at now: its retry is
// due, it is idle with pending entries, neither extracting, compacting nor wrapping up,
// its host online with thatch's tools, and the daily budget not spent. What extract
// decides besides (trivial entries) it decides at the retry.
func (r Rules) retryDue(s *State, sess *Session, now time.Time) bool {
	if sess.RetryAt == 0 || now.UnixMilli() < sess.RetryAt || sess.Kind != KindTop || sess.Status != StatusIdle || sess.Exited ||
		sess.Compacting || sess.Extraction() != ExtractionNone || sess.WrapUpPhase() != WrapUpNone || sess.Pending() == 0 {
		return false
	}
	h := s.Hosts[sess.HostID]
	return (h == nil || h.Online && len(h.MissingTools) == 0) && !s.BudgetReached(r.DailyTokens, now)
}

// RetriesDue lists, in id order, the sessions whose failed extraction is due for a retry
// at now: the driver submits a RetryTick only when there is one. It costs the sessions
// with a retry scheduled, not a pass over all.
func (r Rules) RetriesDue(s *State, now time.Time) []string {
	var ids []string
	for id, sess := range s.index().retrying {
		if r.retryDue(s, sess, now) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// retry starts the extractions due for a retry. The retry consumes the schedule's step
// (extract clears RetryAt); its failure schedules the next.
func (t *step) retry() {
	for _, id := range t.RetriesDue(t.s, t.now) {
		sess := t.s.Sessions[id]
		failed := sess.Failed
		if t.extract(sess) {
			t.note(slog.LevelInfo, "retrying a failed extraction", "session", id, "failures", failed, "entries_pending", sess.Pending())
		}
	}
}
