package runtime

import (
	"log/slog"
	"strings"
)

// Wrap-up: /thatch/compact and /thatch/exit arm a command; the session's next idle, or the
// command's command.executed when no idle came first, reads the session's messages, and the
// command proceeds only when the model's last reply ends with its token. The session's side
// is a WrapUpPhase (phase.go).

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
	sess.armWrapUp(w)
	t.dirty(sess)
}

// wrapUpAtIdle starts resolving the armed wrap-up at a top-level session's idle
// (→ WrapUpResolving): it asks for the messages, and the idle goes on when they come. It
// reports whether a command was armed.
func (t *step) wrapUpAtIdle(sess *Session) bool {
	if sess.WrapUp == WrapNone {
		return false
	}
	sess.resolveAtIdle()
	t.call(Call{Host: sess.HostID, Op: OpMessages, Purpose: PurposeWrapIdle, SessionID: sess.ID, WrapUp: sess.WrapUp})
	return true
}

// wrapIdleMessages resolves the wrap-up an idle waits for (WrapUpResolving) from the
// messages it asked for; when the command does not proceed, the idle goes on.
func (t *step) wrapIdleMessages(c Call, res Result) {
	sess := t.s.Sessions[c.SessionID]
	if sess == nil || sess.WrapUpPhase() != WrapUpResolving {
		return
	}
	if !t.resolve(sess, c.WrapUp, res) && sess.Status == StatusIdle {
		t.topIdle(sess)
	}
}

// executed handles command.executed: it resolves a wrap-up that no idle resolved.
func (t *step) executed(ev Event) {
	w := WrapUpFor(ev.Command)
	sess := t.s.Sessions[ev.SessionID]
	if w == WrapNone || sess == nil || sess.Kind != KindTop {
		return
	}
	if sess.echo(w) {
		t.dirty(sess)
		return
	}
	sess.disarm()
	t.dirty(sess)
	t.call(Call{Host: sess.HostID, Op: OpMessages, Purpose: PurposeWrapExec, SessionID: sess.ID, WrapUp: w})
}

// wrapExecMessages resolves, from the messages, a wrap-up seen only as command.executed.
func (t *step) wrapExecMessages(c Call, res Result) {
	if sess := t.s.Sessions[c.SessionID]; sess != nil {
		t.resolve(sess, c.WrapUp, res)
	}
}

// resolve finishes a wrap-up from the session's messages. It reports whether the action
// ran, which ends that idle's handling.
func (t *step) resolve(sess *Session, w WrapUp, res Result) bool {
	sess.endWrapUp()
	t.dirty(sess)
	if res.Err == nil && Greenlit(res.Messages, w.Token()) {
		sess.Refused = nil
		switch w {
		case WrapCompact:
			sess.Compacting = true
			t.call(Call{Host: sess.HostID, Op: OpCompact, Purpose: PurposeCompact, SessionID: sess.ID})
		case WrapExit:
			t.exit(sess)
		}
		t.note(slog.LevelInfo, "wrap-up greenlit", "session", sess.ID, "command", w.CommandOn(sess.HostID))
		return true
	}
	why := "the reply does not end with " + w.Token() + ": see the blockers it lists"
	reason := "the last assistant message does not end with " + w.Token()
	if res.Err != nil {
		why = "its messages could not be read (" + res.Err.Error() + ")"
		reason = why
	}
	if h := t.s.Hosts[sess.HostID]; h != nil && len(h.MissingTools) > 0 {
		tools := "; opencode has not loaded thatch's tools, so the flush cannot run: restart opencode so it loads thatch's plugin"
		why += tools
		reason += tools
	}
	// The toast is gone in seconds: the log and the session's record keep the refusal.
	sess.Refused = &Refusal{Command: w, Reason: reason, At: t.now}
	t.note(slog.LevelWarn, "wrap-up did not proceed", "session", sess.ID, "command", w.CommandOn(sess.HostID), "reason", reason)
	t.toast(sess.HostID, "thatch", "/"+w.CommandOn(sess.HostID)+" did not proceed: "+why, "warning")
	return false
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

// exit records the session's death, removes it from the live directory, then closes it.
// Its entries stay journaled until deletion or the TTL.
func (t *step) exit(sess *Session) {
	t.note(slog.LevelInfo, "session exited", "session", sess.ID, "host", sess.HostID)
	sess.Status = StatusUnknown
	sess.Exited = true
	t.dirty(sess)
	t.call(Call{Host: sess.HostID, Op: OpClose, SessionID: sess.ID})
}

// compacted handles the result of a greenlit compaction: a failure clears Compacting,
// since no session.compacted will come to clear it.
func (t *step) compacted(c Call, res Result) {
	if res.Err == nil {
		return
	}
	if !res.Err.NoResponder {
		t.note(slog.LevelWarn, "compaction failed", "host", c.Host, "session", c.SessionID, "error", res.Err.Error())
	}
	if sess := t.s.Sessions[c.SessionID]; sess != nil && sess.Compacting {
		sess.Compacting = false
		t.dirty(sess)
	}
}
