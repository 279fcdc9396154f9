package natsbus

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Memories is the memory service the responders hand the memory tools and methods to
// (protocol §6; adapters/memories): what they do with the memory store, and the texts the
// model reads. The responders say who calls; the service never enters the loop.
type Memories interface {
	// Tool performs a memory tool call of who; host and client name a caller from outside
	// any tracked session (thatch mcp). wrote is what the call changed, nil for a search or
	// a repeat: an extraction child's writes are counted in the runtime.
	Tool(ctx context.Context, name, callID string, args json.RawMessage, who *runtime.CallerRef, host, client string) (a runtime.Answer, wrote *runtime.Metrics, herr *runtime.HostError)
	// API answers a memory method from its request; a list asked for with a cursor is
	// answered with Rows.
	API(ctx context.Context, method string, data []byte) (any, *runtime.HostError)
	// Context answers session.context or memory.context with its text; identify says who
	// the session is, when the service needs to know.
	Context(ctx context.Context, method, sessionID string, identify func() (runtime.CallerRef, *runtime.HostError)) (string, *runtime.HostError)
	// WithRelated adds the project's related memories and hygiene signals to an
	// extraction payload.
	WithRelated(ctx context.Context, a runtime.Answer, who *runtime.CallerRef) runtime.Answer
	// Count is the number of live memories, for status.
	Count(ctx context.Context) (int, error)
}

// noMemories answers a memory tool or method of a thatch without a memory service.
func noMemories() *runtime.HostError {
	return &runtime.HostError{Name: protocol.NotImplemented, Message: "this thatch keeps no memories"}
}

// memoryTool performs a memory tool call through the memory service and counts an
// extraction child's effective writes.
func (s *Server) memoryTool(ctx context.Context, name, callID string, args json.RawMessage, who *runtime.CallerRef, from toolSource) (any, *runtime.HostError) {
	if s.Memories == nil {
		return nil, noMemories()
	}
	out, wrote, herr := s.Memories.Tool(ctx, name, callID, args, who, from.Host, from.Client)
	if herr != nil {
		return nil, herr
	}
	if wrote != nil && who.Kind == runtime.KindExtraction {
		// Counted before the model sees the answer, so before the child's turn can end.
		if err := s.Loop.Submit(ctx, runtime.MemoryWrote{SessionID: who.SessionID, Metrics: *wrote}); err != nil {
			s.Log.Warn("could not count an extraction child's memory write; its toast may show fewer", "session", who.SessionID, "err", err)
		}
	}
	return out, nil
}

// toolSource is where a memory tool call from outside any tracked session comes from:
// the host ("mcp" for thatch mcp) and its client (the MCP client's name), kept as the
// source of the memories it writes (protocol §10).
type toolSource struct {
	Host   string `json:"host"`
	Client string `json:"client"`
}

// maxSourceName is how long a source's host or client name may be.
const maxSourceName = 128

// hostlessMemoryTool performs a memory tool call that names its project instead of a
// tracked session (thatch mcp): the same tool, arguments, rules and answers as a session's
// call, for the project key the caller computed (a git checkout's root commit, else its
// directory, as opencode keys a project). Such a caller has no callID memo: its callIDs are
// not unique across callers.
func (s *Server) hostlessMemoryTool(ctx context.Context, name, project, directory string, src *toolSource, args json.RawMessage) (any, *runtime.HostError) {
	project = strings.TrimSpace(project)
	switch {
	case project == "":
		return nil, badRequest(name + ": a call without a sessionID needs {project, directory?, source: {host, client?}}: give the project key")
	case src == nil || strings.TrimSpace(src.Host) == "":
		return nil, badRequest(name + ": a call without a sessionID needs source.host, the host it comes from (thatch mcp sends \"mcp\")")
	case len(src.Host) > maxSourceName || len(src.Client) > maxSourceName:
		return nil, badRequest(fmt.Sprintf("%s: source.host and source.client are at most %d characters", name, maxSourceName))
	case directory != "" && !filepath.IsAbs(directory):
		return nil, badRequest(fmt.Sprintf("%s: directory %q must be an absolute path", name, directory))
	}
	who := &runtime.CallerRef{Project: project, Directory: directory}
	return s.memoryTool(ctx, name, "", args, who, toolSource{Host: strings.TrimSpace(src.Host), Client: strings.TrimSpace(src.Client)})
}

// withRelated renders an extraction payload with the project's related memories, when
// thatch keeps memories.
func (s *Server) withRelated(ctx context.Context, a runtime.Answer, who *runtime.CallerRef) runtime.Answer {
	if s.Memories == nil || who == nil {
		return a
	}
	return s.Memories.WithRelated(ctx, a, who)
}

// contextText answers session.context and memory.context: a session's, or for
// memory.context from outside a session (thatch mcp), a project's.
func (s *Server) contextText(ctx context.Context, method string, p apiParams) (any, *runtime.HostError) {
	if p.SessionID == "" && (method != runtime.CallMemoryContext || p.Project == "") {
		if method == runtime.CallMemoryContext {
			return nil, badRequest(method + " needs {sessionID}, or {project, directory?} from outside a session")
		}
		return nil, badRequest(method + " needs {sessionID}")
	}
	if p.SessionID == "" && p.Directory != "" && !filepath.IsAbs(p.Directory) {
		return nil, badRequest(fmt.Sprintf("%s: directory %q must be an absolute path", method, p.Directory))
	}
	if s.Memories == nil {
		return map[string]string{"text": ""}, nil
	}
	text, herr := s.Memories.Context(ctx, method, p.SessionID, func() (runtime.CallerRef, *runtime.HostError) {
		if p.SessionID == "" { // memory.context {project, directory?}: the section of a project
			return runtime.CallerRef{Project: strings.TrimSpace(p.Project), Directory: p.Directory}, nil
		}
		return s.contextCaller(ctx, method, p)
	})
	if herr != nil {
		return nil, herr
	}
	return map[string]string{"text": text}, nil
}

// contextCaller is who asks for session.context or memory.context: the runtime's word,
// else, for session.context, the host's.
func (s *Server) contextCaller(ctx context.Context, method string, p apiParams) (runtime.CallerRef, *runtime.HostError) {
	if method == runtime.CallMemoryContext {
		if known := s.known(ctx, p.SessionID); known != nil {
			return *known, nil
		}
	}
	a, herr := s.identify(ctx, method, p.SessionID)
	switch {
	case herr == nil:
		return *a.Caller, nil
	case herr.Name == protocol.UnknownSession && method == runtime.CallSessionContext:
		// The host asked before thatch saw the session (its first request can outrun the
		// event): the host's own word for the project stands in.
		who := runtime.CallerRef{SessionID: p.SessionID, Kind: runtime.KindTop, Project: runtime.ProjectKey(p.ProjectID, p.Directory), Directory: p.Directory, Reminder: runtime.Reminder(nil)}
		if who.Project == "" {
			return runtime.CallerRef{}, herr
		}
		return who, nil
	}
	return runtime.CallerRef{}, herr
}

// known is who a session is when thatch knows it already, nil otherwise.
func (s *Server) known(ctx context.Context, sessionID string) *runtime.CallerRef {
	v, err := s.Loop.Query(ctx, func(v runtime.View) any { return runtime.Identify(v.State, sessionID) })
	if err != nil {
		return nil
	}
	return v.(*runtime.CallerRef)
}

// identify asks the runtime who a session is, against every event the stream held now.
func (s *Server) identify(ctx context.Context, method, sessionID string) (runtime.Answer, *runtime.HostError) {
	a := s.Loop.Tool(ctx, runtime.ToolCall{Name: method, SessionID: sessionID}, s.streamSeq(ctx))
	if a.Err != nil {
		return a, a.Err
	}
	return a, nil
}
