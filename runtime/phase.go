package runtime

// A top-level session runs two state machines: its extraction and its wrap-up. Their
// state is kept in Session's fields Extracting and Child, and WrapUp, Resolving and
// Resolved, as the journal stores them (old rows load as they are): the phases below are
// derived from those fields, and the methods in this file are the only code that changes
// them or reads them together. Step's handlers ask for the phase, with Child and WrapUp
// naming its child and command; the views and the sweep read a field alone.

// ExtractionPhase is where a top-level session's extraction stands (rules 3 to 5).
type ExtractionPhase int

const (
	// ExtractionNone: no extraction, as a session starts and once one ended. An idle with
	// pending entries sends session.create (→ Creating).
	ExtractionNone ExtractionPhase = iota
	// ExtractionCreating: session.create sent at an idle. Its result names the child
	// (→ Running); a failed create, a host restart or the end of an extraction child not
	// named yet → None.
	ExtractionCreating
	// ExtractionRunning: Child, named by the create's result, is prompted and works. Its
	// end (idle, error, deletion, host restart, failed prompt) → None.
	ExtractionRunning
)

// Extraction returns the phase of the session's extraction. Child is set only while
// Extracting: no version of thatch wrote a row with one and not the other.
func (s *Session) Extraction() ExtractionPhase {
	switch {
	case s.Child != "":
		return ExtractionRunning
	case s.Extracting:
		return ExtractionCreating
	}
	return ExtractionNone
}

// startExtraction: None → Creating, as the idle sends session.create.
func (s *Session) startExtraction() { s.Extracting = true }

// nameChild: Creating → Running, as the create's result names child.
func (s *Session) nameChild(child string) { s.Child = child }

// stopExtraction: any phase → None.
func (s *Session) stopExtraction() { s.Extracting, s.Child = false, "" }

// WrapUpPhase is where a top-level session's wrap-up command (/thatch/compact,
// /thatch/exit) stands (rule 6). Its outcome is not a phase: a greenlit compaction sets
// Compacting, a greenlit exit sets Exited.
type WrapUpPhase int

const (
	// WrapUpNone: nothing armed or resolving, as a session starts and once a wrap-up is
	// resolved. command.execute.before of /thatch/compact or /thatch/exit arms it (→ Armed).
	WrapUpNone WrapUpPhase = iota
	// WrapUpArmed: WrapUp armed. The next idle asks for the messages (→ Resolving); a
	// wrap-up's command.executed before any idle disarms it and resolves it from the
	// messages it asks for itself, and a host restart drops it (→ None).
	WrapUpArmed
	// WrapUpResolving: the idle waits for the messages it asked for. Their answer resolves
	// the command, greenlit or not, and so does the answer to a command.executed's; a host
	// restart drops it (→ None).
	WrapUpResolving
)

// WrapUpPhase returns the phase of the session's wrap-up. While Resolving, WrapUp still
// names the command armed: it stays armed until the resolution, and a command armed or
// disarmed meanwhile changes WrapUp, not the phase.
func (s *Session) WrapUpPhase() WrapUpPhase {
	switch {
	case s.Resolving:
		return WrapUpResolving
	case s.WrapUp != WrapNone:
		return WrapUpArmed
	}
	return WrapUpNone
}

// armWrapUp arms w (→ Armed; Resolving stays Resolving): a new command, whose
// command.executed is no echo of an earlier resolution.
func (s *Session) armWrapUp(w WrapUp) { s.WrapUp, s.Resolved, s.Refused = w, WrapNone, nil }

// resolveAtIdle: → Resolving, as the idle asks for the messages. Resolved remembers the
// command, so that its command.executed, which follows, does not resolve it again.
func (s *Session) resolveAtIdle() { s.Resolving, s.Resolved = true, s.WrapUp }

// echo reports whether command.executed of w is the echo of the command an idle resolved,
// and forgets that resolution: an echo is consumed once.
func (s *Session) echo(w WrapUp) bool {
	if s.Resolved != w {
		return false
	}
	s.Resolved = WrapNone
	return true
}

// disarm drops the armed command (Armed → None) as command.executed resolves it from the
// messages; a resolution in flight stays in flight.
func (s *Session) disarm() { s.WrapUp = WrapNone }

// endWrapUp: any phase → None, once a wrap-up is resolved or a host restart drops it.
func (s *Session) endWrapUp() { s.WrapUp, s.Resolving = WrapNone, false }
