package runtime

import (
	"fmt"
	"log/slog"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Memory tools (protocol §6) and thatch's context methods. The memory store lives outside
// the runtime; Step only says who is calling: the caller must be tracked, and its project
// is its root session's. The driver's caller then acts on the store.
const (
	ToolRemember = protocol.ToolRemember
	ToolSearch   = protocol.ToolSearch
	ToolUpdate   = protocol.ToolUpdate
	ToolForget   = protocol.ToolForget

	// CallSessionContext asks for a session's start text (the reminder and the memories
	// section), for a host that declared Capabilities.Context. The first ask counts as the
	// session's reminder.
	CallSessionContext = protocol.APISessionContext
	// CallMemoryContext asks only who a session is, for the memories section of a
	// compaction.
	CallMemoryContext = protocol.APIMemoryContext
)

// MemoryTool reports whether name is one of the memory tools.
func MemoryTool(name string) bool {
	switch name {
	case ToolRemember, ToolSearch, ToolUpdate, ToolForget:
		return true
	}
	return false
}

// ownTool reports whether name is one of thatch's tools: its calls are never buffered.
func ownTool(name string) bool { return name == ToolPayload || name == ToolDone || MemoryTool(name) }

// CallerRef says who called a memory tool or a context method.
type CallerRef struct {
	SessionID string
	Kind      Kind
	Root      string
	// Project is the caller's project key: its root session's projectID when the host
	// gave one, else the root's directory.
	Project string
	// Directory is the root session's directory: where a branch is read from.
	Directory string
	// Reminder, for session.context on a top-level session: the session-start reminder
	// without the memories section, which the driver adds from the store.
	Reminder string
}

// ProjectKey is a session's project key (protocol §6): its projectID, else its directory.
func (s *Session) ProjectKey() string { return ProjectKey(s.ProjectID, s.Directory) }

// GlobalProject is the projectID opencode gives every directory outside a git history.
// It names no project: such a session's directory is its project key, or every such
// folder on the machine would share one pool of memories.
const GlobalProject = "global"

// ProjectKey is the project key of a session with this projectID and directory.
func ProjectKey(projectID, directory string) string {
	if projectID != "" && projectID != GlobalProject {
		return projectID
	}
	return directory
}

// Identify says who a tracked session is to the memory store, or nil when thatch does not
// know it or its project. It only reads s: a driver may call it through a query, without
// a commit, for a session it expects thatch to know.
func Identify(s *State, sessionID string) *CallerRef {
	caller := s.Sessions[sessionID]
	if caller == nil {
		return nil
	}
	root := s.Sessions[s.Root(sessionID)]
	if root == nil || root.ProjectKey() == "" {
		return nil
	}
	return &CallerRef{SessionID: caller.ID, Kind: caller.Kind, Root: root.ID, Project: root.ProjectKey(), Directory: root.Directory}
}

// identify answers a memory tool or a context method with the caller's identity. Only
// session.context changes state: its first ask on a top-level session is the reminder.
func (t *step) identify(c ToolCall, caller, root *Session) *Reply {
	ref := Identify(t.s, caller.ID)
	if ref == nil {
		return toolError(protocol.UnknownSession, "thatch does not know the project of session %q yet: its host gave neither a projectID nor a directory", c.SessionID)
	}
	if c.Name == CallSessionContext && caller.Kind == KindTop {
		ref.Reminder = t.reminder()
		if !caller.Reminded {
			caller.Reminded = true
			t.dirty(caller)
		}
	}
	return &Reply{Caller: ref}
}

// MemoryWrote is an input: an extraction child's effective writes through the memory
// tools, as the store counted them (a repeated callID counts nothing). Rule 4's toast
// reports them.
type MemoryWrote struct {
	SessionID string
	Metrics   // what the call changed: zero for an exact duplicate or a repeat
}

func (MemoryWrote) input() {}

func (t *step) memoryWrote(in MemoryWrote) {
	sess := t.s.Sessions[in.SessionID]
	if sess == nil || sess.Kind != KindExtraction {
		return
	}
	sess.Wrote.New += in.New
	sess.Wrote.Updated += in.Updated
	sess.Wrote.Deleted += in.Deleted
	sess.WroteThrough = true
	t.dirty(sess)
}

// extractionToast is rule 4's toast message, "" when the child wrote nothing: thatch's own
// count of the child's writes when it wrote through the memory tools (even when they
// changed nothing: an exact duplicate), else what it reported. The toast itself goes out
// once the child's cost is known (rule 14).
func (t *step) extractionToast(child *Session) string {
	m, counted := child.Wrote, "counted by thatch"
	if !child.WroteThrough {
		m, counted = child.Metrics, "reported by the child"
	}
	if m.Total() == 0 {
		return ""
	}
	t.note(slog.LevelInfo, "extraction wrote memories", "session", child.ParentID, "child", child.ID,
		"new", m.New, "updated", m.Updated, "deleted", m.Deleted, "counts", counted)
	return fmt.Sprintf("Memories: %d new, %d updated, %d deleted", m.New, m.Updated, m.Deleted)
}
