package memories

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/journal/migrate"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
	"github.com/thatch-dev/thatch/runtime/redact"
)

// Service is the memory service (protocol §6): the store, how much of it a session-start
// text or a compaction may carry, and the logger its warnings go to (required).
type Service struct {
	Store       *memory.Store
	InjectChars int // THATCH_MEMORY_INJECT_CHARS
	Now         func() time.Time
	Log         *slog.Logger
	// Redacted counts the redactions the store's Redact made since thatch started.
	Redacted atomic.Int64
	// ExtractedFrom, when set, names the top-level session an extraction child extracted
	// (the ledger's): memory.get adds it for a memory that child wrote.
	ExtractedFrom func(child string) (string, error)
	// Provenance, when set, reads what extractions completed (the journal's): memory.get
	// adds it for the extractions that created, updated or forgot the memory.
	Provenance func(extractions []string) ([]runtime.Provenance, error)
	// Team, when set, is team memory (§9), woken when a project is shared or unshared;
	// nil (THATCH_TEAM_URL unset) refuses memory.share.
	Team interface{ Wake() }
}

// Redact is the memory store's redactor (rule 13), counting what it redacts.
func (m *Service) Redact(s string) string {
	out, n := redact.Text(s)
	m.Redacted.Add(int64(n.Total()))
	return out
}

// Count is the number of live memories.
func (m *Service) Count(ctx context.Context) (int, error) { return m.Store.Count(ctx) }

func (m *Service) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// RelatedMax is how many related memories an extraction payload lists.
const RelatedMax = 10

// gitID is a git commit id (SHA-1 or SHA-256), the form of a repository's projectID.
var gitID = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// shareKey is the project key memory.share names: a key thatch knows (its memories, its
// folder or its sharing) or a repository's projectID (a root commit, which a teammate
// may share before thatch holds a memory of it), a key the caller computed from a git
// checkout (checkout, its folder: the CLI keys a checkout as thatch mcp does), or the one
// key of a folder. Any other name is a mistake (a typo, a made-up name), refused.
func (s *Service) shareKey(ctx context.Context, project, checkout string) (string, *runtime.HostError) {
	if project == "" {
		return "", badRequest("memory.share: give project, a project key (memory.projects lists them)")
	}
	keys, err := s.Store.Resolve(ctx, project)
	if err != nil {
		return "", storeError(err)
	}
	if !strings.HasPrefix(project, "/") {
		if checkout != "" || slices.Contains(keys, project) || gitID.MatchString(project) {
			return project, nil
		}
		shared, err := s.Store.SharedProjects(ctx)
		if err != nil {
			return "", storeError(err)
		}
		if slices.ContainsFunc(shared, func(p memory.SharedProject) bool { return p.Project == project }) {
			return project, nil
		}
		return "", badRequest(fmt.Sprintf("memory.share: %s is neither a project key thatch knows nor a folder; give the folder of the project's git checkout "+
			"(or run thatch memories share inside it), or its key: git rev-list --max-parents=0 HEAD in the checkout prints it, thatch memories projects lists the keys thatch knows", project))
	}
	var ids []string // the keys that are not folders themselves
	for _, k := range keys {
		if !strings.HasPrefix(k, "/") {
			ids = append(ids, k)
		}
	}
	switch {
	case len(ids) == 1:
		return ids[0], nil
	case len(ids) > 1:
		return "", badRequest(fmt.Sprintf("memory.share: the folder %s holds the projects %s; give one with --project", project, strings.Join(ids, ", ")))
	}
	if slices.Contains(keys, project) {
		return project, nil // a directory key: the store says why it cannot be shared
	}
	return "", badRequest(fmt.Sprintf("memory.share: thatch knows no project in %s (it is in no git checkout with a commit, and holds no project's memories); give a git checkout's folder, or the project's key with --project (thatch memories projects lists them)", project))
}

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

// Tool performs a memory tool call for the caller the runtime identified, and renders the
// reply for the model. host and client name a caller from outside any tracked session
// (thatch mcp), the source of the memories it writes; a session's call has neither. wrote
// is what the call changed, nil for a search or a repeated callID (counted the first
// time): an extraction child's writes count towards its toast.
func (s *Service) Tool(ctx context.Context, name, callID string, args json.RawMessage, who *runtime.CallerRef, host, client string) (runtime.Answer, *runtime.Metrics, *runtime.HostError) {
	st, now := s.Store, s.now()
	c := memory.Caller{Project: who.Project, SessionID: who.SessionID, CallID: callID, Directory: who.Directory, Host: host, Client: client}
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
			return runtime.Answer{}, nil, herr
		}
		args := memory.RememberArgs{Content: a.Content, Kind: a.Kind, Tags: a.Tags, Branch: a.Branch, Directory: who.Directory}
		if a.Branch == CurrentBranch {
			// Branch scope: the branch the session's checkout is on, read from .git/HEAD.
			branch, tip, err := memory.GitBranch(who.Directory)
			if err != nil || branch == "" {
				return runtime.Answer{}, nil, badRequest(fmt.Sprintf("%s: branch %q needs the session's directory %s to be a git checkout on a branch (not a detached HEAD); name the branch instead", name, CurrentBranch, who.Directory))
			}
			args.Branch, args.BranchTip = branch, tip
		} else if a.Branch != "" {
			if b, tip, err := memory.GitBranch(who.Directory); err == nil && b == a.Branch {
				args.BranchTip = tip // known when the checkout is on that branch
			}
		}
		r, err := st.Remember(ctx, c, args, now)
		if err != nil {
			return runtime.Answer{}, nil, storeError(err)
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
			return runtime.Answer{}, nil, herr
		}
		r, err := st.Search(ctx, c, a.Query, a.Kinds, a.Limit, now)
		if err != nil {
			return runtime.Answer{}, nil, storeError(err)
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
			return runtime.Answer{}, nil, herr
		}
		if a.DistinctFrom != "" && a.Content == nil && a.Kind == nil && a.Tags == nil && !a.ProjectWide {
			if err := st.Dismiss(ctx, c, a.ID, a.DistinctFrom, now); err != nil {
				return runtime.Answer{}, nil, storeError(err)
			}
			return runtime.Answer{Output: fmt.Sprintf("Noted: %s and %s are distinct; they will not be paired again unless one changes.", a.ID, a.DistinctFrom),
				Metadata: map[string]any{"id": a.ID, "distinctFrom": a.DistinctFrom}}, nil, nil
		}
		if a.DistinctFrom != "" {
			return runtime.Answer{}, nil, badRequest(name + ": distinctFrom goes alone (with id): it dismisses a duplicate pair and changes neither memory")
		}
		r, err := st.Update(ctx, c, a.ID, memory.UpdateArgs{Content: a.Content, Kind: a.Kind, Tags: a.Tags, ProjectWide: a.ProjectWide}, now)
		if err != nil {
			return runtime.Answer{}, nil, storeError(err)
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
			return runtime.Answer{}, nil, herr
		}
		r, err := st.Forget(ctx, c, a.ID, a.Reason, now)
		if err != nil {
			return runtime.Answer{}, nil, storeError(err)
		}
		repeat, wrote.Deleted = r.Repeat, 1
		out.Metadata = map[string]any{"id": r.Memory.ID}
		out.Output = fmt.Sprintf("Forgot %s.", r.Memory.ID)
	}
	if name == runtime.ToolSearch || repeat {
		return out, nil, nil
	}
	return out, &wrote, nil
}

// WithRelated renders an extraction payload with the project's memories that look most
// like the claimed entries, so the extractor updates rather than repeats.
func (s *Service) WithRelated(ctx context.Context, a runtime.Answer, who *runtime.CallerRef) runtime.Answer {
	if a.Payload == nil || len(a.Payload.Entries) == 0 || who == nil {
		return a
	}
	related, err := s.Store.Related(ctx, who.Project, a.Output, RelatedMax)
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
	signals, err := s.Store.Signals(ctx, []string{who.Project}, SignalsMax, s.now())
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
func (s *Service) HygieneLine(ctx context.Context, project string) string {
	h, err := s.Store.Hygiene(ctx, []string{project}, s.now())
	if err != nil {
		s.Log.Warn("could not count the memory hygiene signals", "project", project, "err", err)
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

// Context answers session.context and memory.context: the memories section of the
// caller's project (memory.context), or the session-start text of a top-level session,
// the reminder with the hygiene line and the section, frozen at the first ask
// (session.context). identify says who calls (a session, or for memory.context from
// outside a session, a project); it is asked only when no text is frozen yet.
func (s *Service) Context(ctx context.Context, method, sessionID string, identify func() (runtime.CallerRef, *runtime.HostError)) (string, *runtime.HostError) {
	st, now := s.Store, s.now()
	if method == runtime.CallSessionContext {
		// The text is frozen at the first ask, so every model request of the session
		// carries the same bytes and the provider's prompt cache holds.
		text, ok, err := st.FrozenContext(ctx, sessionID)
		if err != nil {
			return "", storeError(err)
		}
		if ok {
			return text, nil
		}
	}
	who, herr := identify()
	if herr != nil {
		return "", herr
	}
	if method == runtime.CallSessionContext && who.Kind != runtime.KindTop {
		return "", nil // a child gets no session-start text
	}
	branch := ""
	if who.Directory != "" {
		branch, _, _ = memory.GitBranch(who.Directory) // not a checkout: project-wide memories only
	}
	section, err := st.SectionOn(ctx, who.Project, branch, s.InjectChars, now)
	if err != nil {
		return "", storeError(err)
	}
	if method == runtime.CallMemoryContext {
		return section, nil
	}
	text := who.Reminder
	if line := s.HygieneLine(ctx, who.Project); line != "" {
		text += "\n" + line
	}
	if section != "" {
		text += "\n\n" + section
	}
	text, err = st.FreezeContext(ctx, sessionID, text, now)
	if err != nil {
		return "", storeError(err)
	}
	return text, nil
}

// API answers the memory methods of thatch's API (protocol §6, and the extensions
// memory.get, memory.export, memory.import and memory.projects). A project in the
// parameters is a project key or a folder (memory.Store.Resolve). A list asked for with a
// cursor is answered with its rows (Rows), which the responder cuts into a page.
func (s *Service) API(ctx context.Context, method string, data []byte) (any, *runtime.HostError) {
	st, now := s.Store, s.now()
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
		Shared   *bool           `json:"shared"`
		Checkout string          `json:"checkout"` // memory.share: the git checkout project was keyed from
	}
	if len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, badRequest(method + ": request is not a JSON object of the right shape: " + err.Error())
		}
	}
	var keys []string // the project keys p.Project names; none is every project
	if p.Project != "" && method != protocol.APIMemoryProjects && method != protocol.APIMemoryShare {
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
	case protocol.APIMemoryShare:
		if s.Team == nil {
			return nil, badRequest("memory.share: team memory is off: set THATCH_TEAM_URL (and THATCH_TEAM_AUTHOR) to the team's NATS server and restart thatch")
		}
		if p.Shared == nil {
			return nil, badRequest("memory.share: give shared: true to share the project with the team, false to stop")
		}
		key, herr := s.shareKey(ctx, p.Project, p.Checkout)
		if herr != nil {
			return nil, herr
		}
		if err := st.Share(ctx, key, *p.Shared, now); err != nil {
			return nil, storeError(err)
		}
		s.Team.Wake()
		held, err := st.Held(ctx, key)
		if err != nil {
			return nil, storeError(err)
		}
		return map[string]any{"project": key, "shared": *p.Shared, "outbox": held}, nil
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
		return memoryRows{ms, more}, nil
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
		return memoryRows{ms, more}, nil
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
	Memories *Service
}

// Do performs c, with the hygiene line and the memories section appended to a reminder
// prompt.
func (i Injecting) Do(ctx context.Context, api string, c runtime.Call) runtime.Result {
	if c.Op == runtime.OpPrompt && c.Project != "" && i.Memories != nil {
		if line := i.Memories.HygieneLine(ctx, c.Project); line != "" {
			c.Text += "\n" + line
		}
		section, err := i.Memories.Store.Section(ctx, c.Project, i.Memories.InjectChars, i.Memories.now())
		if err != nil {
			i.Memories.Log.Warn("could not read the memories section; the reminder goes without it", "project", c.Project, "err", err)
		} else if section != "" {
			c.Text += "\n\n" + section
		}
	}
	return i.Caller.Do(ctx, api, c)
}

// badRequest is a BadRequestError with message.
func badRequest(message string) *runtime.HostError {
	return &runtime.HostError{Name: protocol.BadRequest, Message: message}
}

// memoryRows is a list of memories asked for with a cursor, and whether more may follow:
// the responder cuts it into pages that fit the broker's max_payload (natsbus.Rows), each
// going on after the id of its last memory.
type memoryRows struct {
	ms   []memory.Memory
	more bool
}

func (r memoryRows) Len() int            { return len(r.ms) }
func (r memoryRows) Row(i int) any       { return r.ms[i] }
func (r memoryRows) Cursor(i int) string { return r.ms[i].ID }
func (r memoryRows) More() bool          { return r.more }
