package natsbus

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// apiParams are the parameters of the API methods that are not the memory store's.
type apiParams struct {
	HostID    string `json:"hostID"`
	SessionID string `json:"sessionID"`
	DryRun    bool   `json:"dryRun"`
	ProjectID string `json:"projectID"` // session.context: the host's word for the project
	Directory string `json:"directory"` // session.context: likewise; memory.context {project}: where the caller works
	Project   string `json:"project"`   // memory.context without a session: the project key (thatch mcp)
	Days      *int   `json:"days"`      // costs
	// Lists (sessions, entries, deadletters): see Page.
	Limit  *int    `json:"limit"`
	Cursor *string `json:"cursor"`
}

// apiMethod is how the responder answers one method of thatch's API.
type apiMethod struct {
	name string
	// paged: a list, answered with a Page when its request has a cursor; a reply over
	// the broker's max_payload says to ask for pages.
	paged bool
	// memories: the memory service answers it, reading the request itself; a thatch
	// without memories answers NotImplementedError.
	memories bool
	// answer answers a method that is not the memory service's from its parameters.
	answer func(s *Server, ctx context.Context, method string, p apiParams) (any, *runtime.HostError)
}

// apiMethods are the methods of thatch's API (§4, §6 and the extensions of
// docs/protocol.md), in the order the unknown-method error names them.
var apiMethods = []apiMethod{
	{name: protocol.APIStatus, answer: (*Server).apiStatus},
	{name: protocol.APISessions, paged: true, answer: (*Server).apiSessions},
	{name: protocol.APIEntries, paged: true, answer: (*Server).apiEntries},
	{name: protocol.APIDeadLetters, paged: true, answer: (*Server).apiDeadLetters},
	{name: protocol.APICosts, answer: (*Server).apiCosts},
	{name: protocol.APISweep, answer: (*Server).apiSweep},
	{name: protocol.APISessionContext, answer: (*Server).contextText},
	{name: protocol.APIMemories, paged: true, memories: true},
	{name: protocol.APIMemoryGet, memories: true},
	{name: protocol.APIMemoryForget, memories: true},
	{name: protocol.APIMemoryContext, answer: (*Server).contextText},
	{name: protocol.APIMemoryHygiene, memories: true},
	{name: protocol.APIMemorySignals, memories: true},
	{name: protocol.APIMemoryDismiss, memories: true},
	{name: protocol.APIMemoryRestore, memories: true},
	{name: protocol.APIMemoryProjects, memories: true},
	{name: protocol.APIMemoryShare, memories: true},
	{name: protocol.APIMemoryExport, paged: true, memories: true},
	{name: protocol.APIMemoryImport, memories: true},
	{name: protocol.APIUILink, answer: (*Server).apiUILink},
}

// apiByName finds a method of apiMethods by its name.
var apiByName = func() map[string]apiMethod {
	byName := make(map[string]apiMethod, len(apiMethods))
	for _, m := range apiMethods {
		byName[m.name] = m
	}
	return byName
}()

// unknownMethod answers a method thatch does not serve, naming those it does.
func unknownMethod(method string) *runtime.HostError {
	names := make([]string, len(apiMethods))
	for i, m := range apiMethods {
		names[i] = m.name
	}
	last := len(names) - 1
	return &runtime.HostError{Name: protocol.NotFound, Message: "thatch has no API method " + method +
		": use " + strings.Join(names[:last], ", ") + " or " + names[last]}
}

func (s *Server) api(ctx context.Context, m *nats.Msg) (any, *runtime.HostError) {
	return s.Answer(ctx, strings.TrimPrefix(m.Subject, s.Prefix+".api."), m.Data)
}

// Answer answers one API method with its JSON params, as the method's responder does,
// through apiMethods. A Server without NC, Loop or Consumer (the CLI reading a stopped
// thatch's files) answers the list methods of the runtime's state from State, and the
// methods that read a store from its stores; its caller keeps to those methods.
func (s *Server) Answer(ctx context.Context, method string, data []byte) (any, *runtime.HostError) {
	am, ok := apiByName[method]
	if !ok {
		return nil, unknownMethod(method)
	}
	var res any
	var herr *runtime.HostError
	if am.memories {
		if s.Memories == nil {
			return nil, noMemories()
		}
		res, herr = s.Memories.API(ctx, method, data)
	} else {
		var p apiParams
		if len(data) > 0 {
			if err := json.Unmarshal(data, &p); err != nil {
				return nil, badRequest("request is not a JSON object: " + err.Error())
			}
		}
		res, herr = am.answer(s, ctx, method, p)
	}
	if rows, ok := res.(Rows); ok && herr == nil {
		if !am.paged {
			return nil, &runtime.HostError{Name: protocol.Internal, Message: "thatch answered " + method + " with a list to page, which it does not page"}
		}
		return s.pageRows(method, rows)
	}
	return res, herr
}

func (s *Server) apiStatus(ctx context.Context, _ string, _ apiParams) (any, *runtime.HostError) {
	st, err := s.Status(ctx)
	if err != nil {
		return nil, &runtime.HostError{Name: protocol.Unavailable, Message: err.Error()}
	}
	return st, nil
}

func (s *Server) apiCosts(_ context.Context, _ string, p apiParams) (any, *runtime.HostError) {
	if s.Costs == nil {
		return nil, &runtime.HostError{Name: protocol.NotImplemented, Message: "this thatch keeps no ledger"}
	}
	days := 30
	if p.Days != nil {
		days = *p.Days
	}
	if days < 1 || days > MaxCostDays {
		return nil, badRequest(fmt.Sprintf("costs takes {days?}: 1 to %d (default 30)", MaxCostDays))
	}
	rows, err := s.costs(days)
	if err != nil {
		return nil, &runtime.HostError{Name: protocol.Unavailable, Message: err.Error()}
	}
	return rows, nil
}

func (s *Server) apiUILink(context.Context, string, apiParams) (any, *runtime.HostError) {
	if s.Login == nil {
		return nil, &runtime.HostError{Name: protocol.NotImplemented, Message: "this thatch serves no web page (THATCH_HTTP_LISTEN=off): unset it, or set an address, and restart thatch serve"}
	}
	link, expires := s.Login()
	return map[string]any{"url": link, "expiresAt": expires.UTC()}, nil
}

func (s *Server) apiSweep(ctx context.Context, _ string, p apiParams) (any, *runtime.HostError) {
	if s.Sweep == nil {
		return nil, &runtime.HostError{Name: protocol.NotImplemented, Message: "this thatch does not sweep yet"}
	}
	return s.Sweep(ctx, p.HostID, p.DryRun)
}

// The list methods of the runtime's state and of the journal answer the bare array of the
// contract, or a Page when the request has a cursor (pageRequest). The loop only copies
// out one page's rows; they are encoded here.

// pageRequest reads a list request's page: its limit (pageLimit) and the cursor it goes
// on after ("" for the first page).
func pageRequest(method string, p apiParams) (limit int, after string, herr *runtime.HostError) {
	limit, herr = pageLimit(method, p.Limit, p.Cursor, DefaultPage, MaxPage)
	if p.Cursor != nil {
		after = *p.Cursor
	}
	return limit, after, herr
}

// query runs fn on the loop's goroutine, or on State when there is no loop.
func (s *Server) query(ctx context.Context, fn func(runtime.View) any) (any, *runtime.HostError) {
	if s.Loop == nil && s.State != nil { // a stopped thatch's journal, loaded
		return fn(runtime.View{State: s.State}), nil
	}
	res, err := s.Loop.Query(ctx, fn)
	if err != nil {
		return nil, &runtime.HostError{Name: protocol.Unavailable, Message: err.Error()}
	}
	return res, nil
}

func (s *Server) apiSessions(ctx context.Context, method string, p apiParams) (any, *runtime.HostError) {
	limit, after, herr := pageRequest(method, p)
	if herr != nil {
		return nil, herr
	}
	type result struct {
		rows []runtime.SessionView
		more bool
	}
	res, herr := s.query(ctx, func(v runtime.View) any {
		rows, more := runtime.SessionPage(v.State, p.HostID, after, limit)
		return result{rows, more}
	})
	if herr != nil {
		return nil, herr
	}
	r := res.(result)
	if p.Cursor == nil {
		return r.rows, nil
	}
	return rows[runtime.SessionView]{r.rows, r.more, func(_ int, v runtime.SessionView) string { return v.SessionID }}, nil
}

func (s *Server) apiEntries(ctx context.Context, method string, p apiParams) (any, *runtime.HostError) {
	limit, after, herr := pageRequest(method, p)
	if herr != nil {
		return nil, herr
	}
	if p.SessionID == "" {
		return nil, badRequest("entries needs {sessionID}")
	}
	type result struct {
		rows []runtime.EntryView
		from int
		more bool
	}
	res, herr := s.query(ctx, func(v runtime.View) any {
		rows, from, more, _ := runtime.EntryPage(v.State, p.SessionID, after, limit)
		return result{rows, from, more}
	})
	if herr != nil {
		return nil, herr
	}
	r := res.(result)
	if r.rows == nil {
		return nil, &runtime.HostError{Name: protocol.UnknownSession, Message: "thatch does not track session " + p.SessionID}
	}
	if p.Cursor == nil {
		return r.rows, nil
	}
	return rows[runtime.EntryView]{r.rows, r.more, func(i int, v runtime.EntryView) string { return runtime.EntryCursor(r.from+i, v.ID) }}, nil
}

func (s *Server) apiDeadLetters(_ context.Context, method string, p apiParams) (any, *runtime.HostError) {
	limit, after, herr := pageRequest(method, p)
	if herr != nil {
		return nil, herr
	}
	if s.DeadLetters == nil {
		return nil, &runtime.HostError{Name: protocol.NotImplemented, Message: "this thatch does not serve its dead letters"}
	}
	var before int64
	if after != "" {
		n, err := strconv.ParseInt(after, 10, 64)
		if err != nil || n < 1 {
			return nil, badRequest("deadletters: cursor " + strconv.Quote(after) + " is not one of its nextCursor values")
		}
		before = n
	}
	n := limit
	if n == 0 {
		n = MaxPage // every row the journal keeps (it keeps fewer)
	}
	// One more row than asked says whether another page follows.
	dead, err := s.DeadLetters(before, n+1)
	if err != nil {
		return nil, &runtime.HostError{Name: protocol.Unavailable, Message: err.Error()}
	}
	more := len(dead) > n
	dead = dead[:min(len(dead), n)]
	if p.Cursor == nil {
		return dead, nil
	}
	return rows[runtime.DeadLetterView]{dead, more, func(_ int, v runtime.DeadLetterView) string { return strconv.FormatInt(v.ID, 10) }}, nil
}
