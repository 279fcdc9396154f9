package natsbus

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/journal/migrate"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
	"github.com/thatch-dev/thatch/runtime/redact"
)

// Memories is the memory side of the server (protocol §6): the store, and how much of it
// a session-start text or a compaction may carry.
type Memories struct {
	Store       *memory.Store
	InjectChars int // THATCH_MEMORY_INJECT_CHARS
	Now         func() time.Time
	// Redacted counts the redactions the store's Redact made since thatch started.
	Redacted atomic.Int64
}

// Redact is the memory store's redactor (rule 13), counting what it redacts.
func (m *Memories) Redact(s string) string {
	out, n := redact.Text(s)
	m.Redacted.Add(int64(n.Total()))
	return out
}

func (m *Memories) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// RelatedMax is how many related memories an extraction payload lists.
const RelatedMax = 10

// storeError maps a store error to the protocol's error names.
func storeError(err error) *runtime.HostError {
	switch {
	case errors.Is(err, memory.ErrNotFound):
		return &runtime.HostError{Name: protocol.NotFound, Message: err.Error()}
	case errors.Is(err, memory.ErrBadRequest):
		return &runtime.HostError{Name: protocol.BadRequest, Message: err.Error()}
	}
	if migrate.DiskFull(err) {
		return &runtime.HostError{Name: protocol.Unavailable, Message: "disk full: free space in thatch's data folder (THATCH_DATA_DIR): the memory store cannot write, so nothing was written; call again once there is space: " + err.Error()}
	}
	return &runtime.HostError{Name: protocol.Unavailable, Message: "thatch's memory store failed; call again: " + err.Error()}
}

// decodeArgs reads a tool's args into dst; absent args are an empty object.
func decodeArgs(tool string, raw json.RawMessage, dst any) *runtime.HostError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return badRequest(fmt.Sprintf("%s: %s must be %s, not a JSON %s", tool, te.Field, argType(te.Field), te.Value))
		}
		return badRequest(fmt.Sprintf("%s takes a JSON object of arguments: %v", tool, err))
	}
	return nil
}

func argType(field string) string {
	switch field {
	case "tags", "kinds":
		return "an array of strings"
	case "limit":
		return "an integer"
	}
	return "a string"
}

// memoryTool performs a memory tool call for the caller the runtime identified, counts an
// extraction child's effective writes, and renders the reply for the model.
func (s *Server) memoryTool(ctx context.Context, name, callID string, args json.RawMessage, who *runtime.CallerRef, from toolSource) (any, *runtime.HostError) {
	if s.Memories == nil {
		return nil, &runtime.HostError{Name: protocol.NotImplemented, Message: "this thatch keeps no memories"}
	}
	st, now := s.Memories.Store, s.Memories.now()
	c := memory.Caller{Project: who.Project, SessionID: who.SessionID, CallID: callID, Directory: who.Directory, Host: from.Host, Client: from.Client}
	var wrote runtime.Metrics
	var out runtime.Answer
	repeat := false // a repeated callID: counted the first time
	switch name {
	case runtime.ToolRemember:
		var a struct {
			Content string   `json:"content"`
			Kind    string   `json:"kind"`
			Tags    []string `json:"tags"`
			Branch  string   `json:"branch"`
		}
		if herr := decodeArgs(name, args, &a); herr != nil {
			return nil, herr
		}
		args := memory.RememberArgs{Content: a.Content, Kind: a.Kind, Tags: a.Tags, Branch: a.Branch, Directory: who.Directory}
		if a.Branch == CurrentBranch {
			// Branch scope: the branch the session's checkout is on, read from .git/HEAD.
			branch, tip, err := memory.GitBranch(who.Directory)
			if err != nil || branch == "" {
				return nil, badRequest(fmt.Sprintf("%s: branch %q needs the session's directory %s to be a git checkout on a branch (not a detached HEAD); name the branch instead", name, CurrentBranch, who.Directory))
			}
			args.Branch, args.BranchTip = branch, tip
		} else if a.Branch != "" {
			if b, tip, err := memory.GitBranch(who.Directory); err == nil && b == a.Branch {
				args.BranchTip = tip // known when the checkout is on that branch
			}
		}
		r, err := st.Remember(ctx, c, args, now)
		if err != nil {
			return nil, storeError(err)
		}
		repeat = r.Repeat
		if r.Created {
			wrote.New = 1
		}
		similar := r.Similar
		if similar == nil {
			similar = []memory.Similar{}
		}
		out.Metadata = map[string]any{"id": r.Memory.ID, "created": r.Created, "similar": similar}
		if r.Created {
			out.Output = fmt.Sprintf("Remembered as %s (%s).", r.Memory.ID, r.Memory.Kind)
		} else {
			out.Output = fmt.Sprintf("Already remembered as %s; nothing added.", r.Memory.ID)
		}
		if len(similar) > 0 {
			ids := make([]string, len(similar))
			for i, x := range similar {
				ids[i] = fmt.Sprintf("%s (%.2f)", x.ID, x.Score)
			}
			out.Output += " Alike: " + strings.Join(ids, ", ") + ". If one says the same, update it and forget the other."
		}
	case runtime.ToolSearch:
		var a struct {
			Query string   `json:"query"`
			Limit int      `json:"limit"`
			Kinds []string `json:"kinds"`
		}
		if herr := decodeArgs(name, args, &a); herr != nil {
			return nil, herr
		}
		r, err := st.Search(ctx, c, a.Query, a.Kinds, a.Limit, now)
		if err != nil {
			return nil, storeError(err)
		}
		ids := make([]string, 0, len(r.Hits))
		lines := make([]string, 0, len(r.Hits))
		for _, h := range r.Hits {
			ids = append(ids, h.Memory.ID)
			lines = append(lines, fmt.Sprintf("%s (%s) %s", h.Memory.ID, h.Memory.Kind, strings.Join(strings.Fields(h.Memory.Content), " ")))
		}
		out.Metadata = map[string]any{"ids": ids}
		out.Output = strings.Join(lines, "\n")
		if len(lines) == 0 {
			out.Output = "No memory of this project matches."
		}
	case runtime.ToolUpdate:
		var a struct {
			ID      string    `json:"id"`
			Content *string   `json:"content"`
			Kind    *string   `json:"kind"`
			Tags    *[]string `json:"tags"`
			// DistinctFrom (an extension) dismisses a duplicate pair: the two memories say
			// different things and stay apart.
			DistinctFrom string `json:"distinctFrom"`
			// ProjectWide (an extension) drops the memory's branch scope.
			ProjectWide bool `json:"projectWide"`
		}
		if herr := decodeArgs(name, args, &a); herr != nil {
			return nil, herr
		}
		if a.DistinctFrom != "" && a.Content == nil && a.Kind == nil && a.Tags == nil && !a.ProjectWide {
			if err := st.Dismiss(ctx, c, a.ID, a.DistinctFrom, now); err != nil {
				return nil, storeError(err)
			}
			return runtime.Answer{Output: fmt.Sprintf("Noted: %s and %s are distinct; they will not be paired again unless one changes.", a.ID, a.DistinctFrom),
				Metadata: map[string]any{"id": a.ID, "distinctFrom": a.DistinctFrom}}, nil
		}
		if a.DistinctFrom != "" {
			return nil, badRequest(name + ": distinctFrom goes alone (with id): it dismisses a duplicate pair and changes neither memory")
		}
		r, err := st.Update(ctx, c, a.ID, memory.UpdateArgs{Content: a.Content, Kind: a.Kind, Tags: a.Tags, ProjectWide: a.ProjectWide}, now)
		if err != nil {
			return nil, storeError(err)
		}
		repeat, wrote.Updated = r.Repeat, 1
		out.Metadata = map[string]any{"id": r.Memory.ID}
		out.Output = fmt.Sprintf("Updated %s.", r.Memory.ID)
	case runtime.ToolForget:
		var a struct {
			ID     string `json:"id"`
			Reason string `json:"reason"`
		}
		if herr := decodeArgs(name, args, &a); herr != nil {
			return nil, herr
		}
		r, err := st.Forget(ctx, c, a.ID, a.Reason, now)
		if err != nil {
			return nil, storeError(err)
		}
		repeat, wrote.Deleted = r.Repeat, 1
		out.Metadata = map[string]any{"id": r.Memory.ID}
		out.Output = fmt.Sprintf("Forgot %s.", r.Memory.ID)
	}
	if name != runtime.ToolSearch && who.Kind == runtime.KindExtraction && !repeat {
		// Counted before the model sees the answer, so before the child's turn can end.
		if err := s.Loop.Submit(ctx, runtime.MemoryWrote{SessionID: who.SessionID, Metrics: wrote}); err != nil {
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

// withRelated renders an extraction payload with the project's memories that look most
// like the claimed entries, so the extractor updates rather than repeats.
func (s *Server) withRelated(ctx context.Context, a runtime.Answer, who *runtime.CallerRef) runtime.Answer {
	if s.Memories == nil || a.Payload == nil || len(a.Payload.Entries) == 0 || who == nil {
		return a
	}
	related, err := s.Memories.Store.Related(ctx, who.Project, a.Output, RelatedMax)
	if err != nil {
		s.Log.Warn("could not look up related memories for a payload; sending it without them", "session", who.SessionID, "err", err)
		return a
	}
	if len(related) > 0 { // else a.Output, rendered without related memories, stands
		lines := make([]string, len(related))
		for i, m := range related {
			lines[i] = memory.Line(m)
		}
		a.Output = runtime.FormatPayload(*a.Payload, lines)
	}
	signals, err := s.Memories.Store.Signals(ctx, []string{who.Project}, SignalsMax, s.Memories.now())
	if err != nil {
		s.Log.Warn("could not read the memory hygiene signals for a payload; sending it without them", "session", who.SessionID, "err", err)
		return a
	}
	a.Output += FormatSignals(signals)
	return a
}

// SignalsMax is how many open hygiene signals an extraction payload carries.
const SignalsMax = 5

// CurrentBranch, as memory_remember's branch, scopes a memory to the branch the session's
// checkout is on.
const CurrentBranch = "current"

// FormatSignals renders open hygiene signals for an extraction child, with what to do about
// each; "" when there are none.
func FormatSignals(signals []memory.Signal) string {
	if len(signals) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## Memory hygiene to resolve while you are here\n")
	for i, sig := range signals {
		switch sig.Kind {
		case memory.SignalDuplicate:
			fmt.Fprintf(&b, "%d. These look like duplicates. If they say the same, merge them: %s the better one with what both say, then %s the other. If they say different things, call %s with {id, distinctFrom} naming both.\n",
				i+1, runtime.ToolUpdate, runtime.ToolForget, runtime.ToolUpdate)
		case memory.SignalOrphaned:
			fmt.Fprintf(&b, "%d. Written on a branch that was deleted without being merged: %s it unless it holds for the whole project, then call %s with {id, projectWide: true}.\n", i+1, runtime.ToolForget, runtime.ToolUpdate)
		case memory.SignalMerged:
			fmt.Fprintf(&b, "%d. Written on a branch that was merged and deleted: if it holds for the whole project now, call %s with {id, projectWide: true}; else %s it.\n", i+1, runtime.ToolUpdate, runtime.ToolForget)
		case memory.SignalStale:
			fmt.Fprintf(&b, "%d. Neither used nor updated for a long time: %s it if it is obsolete; %s it if it still holds.\n", i+1, runtime.ToolForget, runtime.ToolUpdate)
		}
		for _, m := range sig.Memories {
			b.WriteString("   " + memory.Line(m) + "\n")
		}
	}
	return b.String()
}

// HygieneLine is the reminder's line naming a project's non-zero memory hygiene counts
// (protocol §6), "" when all are zero.
func HygieneLine(ctx context.Context, m *Memories, project string, log *slog.Logger) string {
	h, err := m.Store.Hygiene(ctx, []string{project}, m.now())
	if err != nil {
		log.Warn("could not count the memory hygiene signals", "project", project, "err", err)
		return ""
	}
	var parts []string
	for _, c := range []struct {
		n        int
		one, all string
	}{{len(h.DuplicatePairs), "duplicate pair", "duplicate pairs"}, {len(h.Stale), "stale memory", "stale memories"},
		{len(h.Orphaned), "memory of a deleted branch", "memories of deleted branches"},
		{len(h.Merged), "memory of a merged branch", "memories of merged branches"}} {
		switch {
		case c.n == 1:
			parts = append(parts, "1 "+c.one)
		case c.n > 1:
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.all))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "Memory hygiene: " + strings.Join(parts, ", ") + " (the next extraction resolves them; thatch memories hygiene lists them)."
}

// contextText answers session.context and memory.context.
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
	st, now := s.Memories.Store, s.Memories.now()
	if p.SessionID == "" { // memory.context {project, directory?}: the section of a project (thatch mcp)
		branch := ""
		if p.Directory != "" {
			branch, _, _ = memory.GitBranch(p.Directory) // not a checkout: project-wide memories only
		}
		section, err := st.SectionOn(ctx, strings.TrimSpace(p.Project), branch, s.Memories.InjectChars, now)
		if err != nil {
			return nil, storeError(err)
		}
		return map[string]string{"text": section}, nil
	}
	if method == runtime.CallSessionContext {
		// The text is frozen at the first ask, so every model request of the session
		// carries the same bytes and the provider's prompt cache holds.
		text, ok, err := st.FrozenContext(ctx, p.SessionID)
		if err != nil {
			return nil, storeError(err)
		}
		if ok {
			return map[string]string{"text": text}, nil
		}
	}
	var a runtime.Answer
	var herr *runtime.HostError
	if known := s.known(ctx, p.SessionID); known != nil && method == runtime.CallMemoryContext {
		a.Caller = known
	} else {
		a, herr = s.identify(ctx, method, p.SessionID)
	}
	var who runtime.CallerRef
	switch {
	case herr == nil:
		who = *a.Caller
	case herr.Name == protocol.UnknownSession && method == runtime.CallSessionContext:
		// The host asked before thatch saw the session (its first request can outrun the
		// event): the host's own word for the project stands in.
		who = runtime.CallerRef{SessionID: p.SessionID, Kind: runtime.KindTop, Project: runtime.ProjectKey(p.ProjectID, p.Directory), Directory: p.Directory, Reminder: runtime.Reminder(nil)}
		if who.Project == "" {
			return nil, herr
		}
	default:
		return nil, herr
	}
	if method == runtime.CallSessionContext && who.Kind != runtime.KindTop {
		return map[string]string{"text": ""}, nil // a child gets no session-start text
	}
	branch := ""
	if who.Directory != "" {
		branch, _, _ = memory.GitBranch(who.Directory) // not a checkout: project-wide memories only
	}
	section, err := st.SectionOn(ctx, who.Project, branch, s.Memories.InjectChars, now)
	if err != nil {
		return nil, storeError(err)
	}
	if method == runtime.CallMemoryContext {
		return map[string]string{"text": section}, nil
	}
	text := who.Reminder
	if line := HygieneLine(ctx, s.Memories, who.Project, s.Log); line != "" {
		text += "\n" + line
	}
	if section != "" {
		text += "\n\n" + section
	}
	text, err = st.FreezeContext(ctx, p.SessionID, text, now)
	if err != nil {
		return nil, storeError(err)
	}
	return map[string]string{"text": text}, nil
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

// memoryAPI answers the memory methods of thatch's API (protocol §6, and the extensions
// memory.get, memory.export, memory.import and memory.projects). A project in the
// parameters is a project key or a folder (memory.Store.Resolve).
func (s *Server) memoryAPI(ctx context.Context, method string, data []byte) (any, *runtime.HostError) {
	if s.Memories == nil {
		return nil, &runtime.HostError{Name: protocol.NotImplemented, Message: "this thatch keeps no memories"}
	}
	st, now := s.Memories.Store, s.Memories.now()
	var p struct {
		Project  string          `json:"project"`
		Query    string          `json:"query"`
		Kind     string          `json:"kind"`
		Limit    int             `json:"limit"`
		Offset   *int            `json:"offset"` // memory.signals: a SignalPage is asked for
		After    string          `json:"after"`
		Cursor   *string         `json:"cursor"` // memories, memory.export: a Page is asked for
		ID       string          `json:"id"`
		Reason   string          `json:"reason"`
		Other    string          `json:"distinctFrom"`
		Memories []memory.Memory `json:"memories"`
	}
	if len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, badRequest(method + ": request is not a JSON object of the right shape: " + err.Error())
		}
	}
	var keys []string // the project keys p.Project names; none is every project
	if p.Project != "" && method != protocol.APIMemoryProjects {
		var err error
		if keys, err = st.Resolve(ctx, p.Project); err != nil {
			return nil, storeError(err)
		}
		if len(keys) == 0 {
			// A name that names nothing selects nothing, as a project without memories
			// does (memory.projects tells the two apart).
			keys = []string{p.Project}
		}
	}
	switch method {
	case protocol.APIMemoryProjects:
		ps, err := st.Projects(ctx, p.Project)
		if err != nil {
			return nil, storeError(err)
		}
		return ps, nil
	case protocol.APIMemories:
		after := p.After
		if p.Cursor != nil {
			after = *p.Cursor
		}
		ms, err := st.List(ctx, memory.ListQuery{Projects: keys, Query: p.Query, Kind: p.Kind, Limit: p.Limit, After: after})
		if err != nil {
			return nil, storeError(err)
		}
		if ms == nil {
			ms = []memory.Memory{}
		}
		if p.Cursor == nil {
			return ms, nil
		}
		// A search is one page (its best matches); a listing goes on after its last id
		// while pages come full.
		more := p.Query == "" && len(ms) == cmp.Or(p.Limit, memory.DefaultListLimit)
		return page(s, method, ms, more, func(_ int, m memory.Memory) string { return m.ID })
	case protocol.APIMemoryGet:
		m, audit, err := st.Get(ctx, p.ID)
		if err != nil {
			return nil, storeError(err)
		}
		if audit == nil {
			audit = []memory.Audit{}
		}
		res := map[string]any{"memory": m, "audit": audit}
		// The session the memory's extraction came from: its writer, an extraction child,
		// is deleted once done (an extension of memory.get).
		if s.ExtractedFrom != nil && m.Source.SessionID != "" {
			if root, err := s.ExtractedFrom(m.Source.SessionID); err == nil && root != "" {
				res["extractedFrom"] = root
			}
		}
		// Which tool calls fed the memory (issue 29): what each extraction that wrote it
		// completed, oldest first (an extension of memory.get).
		if s.Provenance != nil {
			if ps, err := s.Provenance(memory.Writers(m, audit)); err == nil {
				res["provenance"] = ps
			} else {
				s.Log.Warn("could not read a memory's provenance; memory.get answers without it", "memory", m.ID, "err", err)
			}
		}
		return res, nil
	case protocol.APIMemoryForget:
		r, err := st.Forget(ctx, memory.Caller{}, p.ID, p.Reason, now)
		if err != nil {
			return nil, storeError(err)
		}
		return map[string]string{"id": r.Memory.ID}, nil
	case protocol.APIMemoryExport:
		after := p.After
		if p.Cursor != nil {
			after = *p.Cursor
		}
		ms, err := st.Export(ctx, keys, after, p.Limit)
		if err != nil {
			return nil, storeError(err)
		}
		if ms == nil {
			ms = []memory.Memory{}
		}
		if p.Cursor == nil {
			return ms, nil
		}
		more := len(ms) == cmp.Or(p.Limit, memory.DefaultExportLimit)
		return page(s, method, ms, more, func(_ int, m memory.Memory) string { return m.ID })
	case protocol.APIMemoryImport:
		n, err := st.Import(ctx, p.Memories, now)
		if err != nil {
			return nil, storeError(err)
		}
		return map[string]int{"added": n}, nil
	case protocol.APIMemoryRestore:
		r, err := st.Restore(ctx, memory.Caller{}, p.ID, now)
		if err != nil {
			return nil, storeError(err)
		}
		return map[string]string{"id": r.Memory.ID}, nil
	case protocol.APIMemoryHygiene:
		h, err := st.Hygiene(ctx, keys, now)
		if err != nil {
			return nil, storeError(err)
		}
		return h, nil
	case protocol.APIMemorySignals: // the hygiene signals with their memories' texts, for a person
		if p.Offset != nil { // a page, with the total and the counts by kind
			page, err := st.SignalsPage(ctx, keys, *p.Offset, p.Limit, now)
			if err != nil {
				return nil, storeError(err)
			}
			return page, nil
		}
		sigs, err := st.Signals(ctx, keys, max(p.Limit, 1), now)
		if err != nil {
			return nil, storeError(err)
		}
		if sigs == nil {
			sigs = []memory.Signal{}
		}
		return sigs, nil
	case protocol.APIMemoryDismiss:
		if err := st.Dismiss(ctx, memory.Caller{}, p.ID, p.Other, now); err != nil {
			return nil, storeError(err)
		}
		return map[string]string{"id": p.ID, "distinctFrom": p.Other}, nil
	}
	return nil, &runtime.HostError{Name: protocol.NotFound, Message: "thatch has no API method " + method}
}

// Injecting is a runtime.Caller that appends the memories section of a call's Project to
// the session-start reminder prompt as it performs it (rule 2 for hosts that take the
// reminder as a prompt): the store is read when the call goes out, not when the runtime
// decided it.
type Injecting struct {
	runtime.Caller
	Memories *Memories
	Log      *slog.Logger
}

// Do performs c, with the hygiene line and the memories section appended to a reminder
// prompt.
func (i Injecting) Do(ctx context.Context, api string, c runtime.Call) runtime.Result {
	if c.Op == runtime.OpPrompt && c.Project != "" && i.Memories != nil {
		if line := HygieneLine(ctx, i.Memories, c.Project, i.Log); line != "" {
			c.Text += "\n" + line
		}
		section, err := i.Memories.Store.Section(ctx, c.Project, i.Memories.InjectChars, i.Memories.now())
		if err != nil {
			i.Log.Warn("could not read the memories section; the reminder goes without it", "project", c.Project, "err", err)
		} else if section != "" {
			c.Text += "\n\n" + section
		}
	}
	return i.Caller.Do(ctx, api, c)
}
