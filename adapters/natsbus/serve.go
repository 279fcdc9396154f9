package natsbus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Server answers thatch's tools (<api>.tool.<name>) and API (<api>.api.<method>) in the
// queue group "thatch", as the contract asks (§3, §4). The group does not make replicas
// safe: each answer comes from one process's journal, and two thatch processes on one
// stream would split the durable consumer's events between two journals (or, each with
// its own consumer, both act on every event); one data folder serves one thatch serve
// (rule 12). Run one thatch per stream.
type Server struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	Stream   string
	Prefix   string // thatch's own subject prefix, "thatch" by default
	Loop     *runtime.Loop
	Consumer *Consumer
	Log      *slog.Logger
	// Sweep answers the sweep method; nil answers NotImplementedError.
	Sweep func(ctx context.Context, hostID string, dryRun bool) (any, *runtime.HostError)
	// Memories serves the memory tools and methods; nil answers NotImplementedError.
	Memories *Memories
	// Redactions are other parts' redaction counts (the in-process bridge's), which status
	// adds to the journal's and the store's.
	Redactions []*atomic.Int64
	// Costs reads the ledger from a UTC day on (rule 14); nil leaves costs out of status
	// and answers the costs method with NotImplementedError. Extract is the runtime's
	// budget and model, which status shows.
	Costs   func(since string) ([]runtime.CostRow, error)
	Extract runtime.Rules
	// Broker is the embedded broker's JetStreamWatch; nil (an external broker) leaves
	// brokerError out of status.
	Broker interface{ Err() string }
	// Bridge is the in-process opencode bridge; nil (none) leaves bridge out of status.
	Bridge interface{ BridgeStatus() *runtime.BridgeStatus }
	// DeadLetters reads a page of the journal's dead letters, newest first, those older
	// than the row before (0: from the newest); nil answers the deadletters method with
	// NotImplementedError.
	DeadLetters func(before int64, limit int) ([]runtime.DeadLetterView, error)
	// ExtractedFrom, when set, names the top-level session an extraction child extracted
	// (the ledger's): memory.get adds it for a memory that child wrote.
	ExtractedFrom func(child string) (string, error)
	// Login, when set, mints a one-time link to the web page and says until when it opens
	// it (ui.link); nil (the page is off) answers NotImplementedError.
	Login func() (link string, expires time.Time)
	// Provenance, when set, reads what extractions completed (the journal's): memory.get
	// adds it for the extractions that created, updated or forgot the memory.
	Provenance func(extractions []string) ([]runtime.Provenance, error)
	// ToolTook, when set, sees each tool call's name, how long its answer took and the
	// error's name ("" for a result): the operator's metrics.
	ToolTook func(tool string, took time.Duration, errName string)

	wg    sync.WaitGroup
	subs  []*nats.Subscription
	probe probe

	memories memoryCount // status's count of the live memories
}

// probe coalesces the stream-position reads of concurrent tool calls: a caller waits for
// the next read that starts after it arrived, so each gets a position at least as new as
// its arrival, and many callers cost one broker request.
type probe struct {
	mu      sync.Mutex
	running bool
	waiting []chan probeResult
}

type probeResult struct {
	seq uint64
	err error
}

func (p *probe) lastSeq(read func() (uint64, error)) (uint64, error) {
	ch := make(chan probeResult, 1)
	p.mu.Lock()
	p.waiting = append(p.waiting, ch)
	if !p.running {
		p.running = true
		go p.run(read)
	}
	p.mu.Unlock()
	r := <-ch
	return r.seq, r.err
}

func (p *probe) run(read func() (uint64, error)) {
	for {
		p.mu.Lock()
		batch := p.waiting
		p.waiting = nil
		if len(batch) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		seq, err := read() // starts after every caller of batch arrived
		for _, ch := range batch {
			ch <- probeResult{seq, err}
		}
	}
}

// Start subscribes the responders. Call it once the consumer runs: the status method is
// thatch's readiness check.
func (s *Server) Start(ctx context.Context) error {
	for subject, h := range map[string]func(context.Context, *nats.Msg) (any, *runtime.HostError){
		s.Prefix + ".tool.*": s.tool,
		s.Prefix + ".api.>":  s.api,
	} {
		sub, err := s.NC.QueueSubscribe(subject, "thatch", func(m *nats.Msg) {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				res, herr := h(ctx, m)
				s.reply(m, res, herr)
			}()
		})
		if err != nil {
			return err
		}
		s.subs = append(s.subs, sub)
	}
	return s.NC.Flush()
}

// Stop unsubscribes and waits for the requests in progress.
func (s *Server) Stop() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	s.wg.Wait()
}

// replyBuffers are the buffers replies are encoded into; one over maxPooledReply (a big
// page of a list) is left to the collector rather than kept.
var replyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledReply = 256 << 10

// reply answers m. A reply the broker would refuse (over its max_payload) is logged with
// its subject and size, and replaced by a TooLargeError saying how to ask for less; one
// that cannot be sent is logged: a caller left waiting would see only a timeout.
func (s *Server) reply(m *nats.Msg, res any, herr *runtime.HostError) {
	if m.Reply == "" {
		return
	}
	b := replyBuffers.Get().(*bytes.Buffer)
	defer func() {
		if b.Cap() <= maxPooledReply {
			b.Reset()
			replyBuffers.Put(b)
		}
	}()
	if err := protocol.EncodeTo(b, res, herr); err != nil {
		s.Log.Error("could not encode a reply; answering with an error", "subject", m.Subject, "err", err)
		_ = protocol.EncodeTo(b, nil, &runtime.HostError{Name: protocol.Internal, Message: "thatch could not encode its reply: " + err.Error()})
	}
	data := b.Bytes() // Respond copies it into the connection's buffer before it returns
	if limit := s.NC.MaxPayload(); limit > 0 && int64(len(data)) > limit {
		s.Log.Error("reply over the broker's max_payload; answering with an error instead", "subject", m.Subject, "bytes", len(data), "max_payload", limit)
		size := len(data)
		b.Reset()
		_ = protocol.EncodeTo(b, nil, tooLarge(m.Subject, size, limit))
		data = b.Bytes()
	}
	if err := m.Respond(data); err != nil {
		s.Log.Error("could not send a reply", "subject", m.Subject, "bytes", len(data), "err", err)
	}
}

// tooLarge is the error that replaces a reply over the broker's max_payload.
func tooLarge(subject string, size int, limit int64) *runtime.HostError {
	msg := fmt.Sprintf("the reply is %d bytes, over the broker's max_payload of %d bytes", size, limit)
	if _, method, ok := strings.Cut(subject, ".api."); ok && paged[method] {
		msg += `: ask for it in pages, {"cursor": ""} and then {"cursor": nextCursor} until a page has no nextCursor (a limit makes pages smaller)`
	}
	return &runtime.HostError{Name: protocol.TooLarge, Message: msg}
}

// Paging, an extension of the list methods (paged): a request with a "cursor" ("" for
// the first page) is answered with a Page of at most "limit" items, cut shorter when
// needed to fit the broker's max_payload, whose nextCursor asks for the next one. A
// request without a cursor gets the contract's bare array (at most "limit" items).
const (
	DefaultPage = 1000
	MaxPage     = 10000
)

var paged = map[string]bool{protocol.APISessions: true, protocol.APIEntries: true, protocol.APIDeadLetters: true, protocol.APIMemories: true, protocol.APIMemoryExport: true}

// Page is a list method's result when the request has a cursor: items, and the cursor
// of the next page when there may be one (a last page may be empty).
type Page struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor string            `json:"nextCursor,omitempty"`
}

// pageMargin is what a reply's envelope and cursor take besides its items.
const pageMargin = 4 << 10

// pageLimit reads a list request's limit: when absent, def for a page and 0 (all) for a
// bare array; else 1 to max.
func pageLimit(method string, limit *int, cursor *string, def, max int) (int, *runtime.HostError) {
	switch {
	case limit == nil && cursor != nil:
		return def, nil
	case limit == nil:
		return 0, nil
	case *limit < 1 || *limit > max:
		return 0, badRequest(fmt.Sprintf("%s takes a limit of 1 to %d (default %d with a cursor)", method, max, def))
	}
	return *limit, nil
}

// page encodes items as a Page: the longest prefix that fits the broker's max_payload,
// with the cursor (next, of the last item kept) of the next page when items were left
// out or more may follow.
func page[T any](s *Server, method string, items []T, more bool, next func(i int, item T) string) (any, *runtime.HostError) {
	budget := int64(1 << 20) // nats' default, when the connection does not say
	if limit := s.NC.MaxPayload(); limit > 0 {
		budget = limit
	}
	budget -= pageMargin
	out := Page{Items: make([]json.RawMessage, 0, len(items))}
	size := int64(0)
	for _, it := range items {
		raw, err := json.Marshal(it)
		if err != nil {
			return nil, &runtime.HostError{Name: protocol.Internal, Message: "thatch could not encode a " + method + " row: " + err.Error()}
		}
		if size+int64(len(raw))+1 > budget {
			if len(out.Items) == 0 {
				return nil, &runtime.HostError{Name: protocol.TooLarge, Message: fmt.Sprintf("one %s row is %d bytes, over the broker's max_payload", method, len(raw))}
			}
			more = true
			break
		}
		size += int64(len(raw)) + 1
		out.Items = append(out.Items, raw)
	}
	if more && len(out.Items) > 0 {
		out.NextCursor = next(len(out.Items)-1, items[len(out.Items)-1])
	}
	return out, nil
}

// summary is the status method's result from the loop's last snapshot.
func (s *Server) summary(snap *runtime.Snapshot) runtime.StatusView {
	st := snap.Status // a copy; its HostsMissingTools is shared, and only read
	st.Consuming = s.Consumer != nil && s.Consumer.Running.Load() && s.NC.IsConnected()
	st.Goroutines = goruntime.NumGoroutine()
	if s.Costs != nil {
		st.Extraction = &runtime.ExtractionView{DailyTokens: s.Extract.DailyTokens, Model: s.Extract.ExtractModel,
			BudgetReached: snap.BudgetReached(s.Extract.DailyTokens, time.Now())}
	}
	return st
}

// MaxCostDays bounds the costs method's window.
const MaxCostDays = 400

// costs reads the ledger's rows of the last days UTC days, today included.
func (s *Server) costs(days int) ([]runtime.CostRow, error) {
	return s.Costs(runtime.Day(time.Now().AddDate(0, 0, 1-days)))
}

// spend fills status's today and week totals from the ledger.
func (s *Server) spend(x *runtime.ExtractionView) {
	rows, err := s.costs(7)
	if err != nil {
		x.Error = err.Error()
		return
	}
	today := runtime.Day(time.Now())
	for _, r := range rows {
		x.Week.Add(r)
		if r.Day == today {
			x.Today.Add(r)
		}
	}
}

// statusMemoryWait is how long status waits for the memory store's count before it shows
// the last one read: a burst of reminders or payloads can keep the store's read
// connections busy, and status must answer at once.
const statusMemoryWait = 10 * time.Millisecond

// memoryCount is status's count of the live memories. Concurrent status requests share
// one count in flight; one that the store does not answer within statusMemoryWait shows
// the last count read, and the count in flight still ends and is kept for the next.
type memoryCount struct {
	mu       sync.Mutex
	n        int
	err      error
	known    bool          // a count ended
	inflight chan struct{} // closed when the count in flight ends; nil when none is
}

// read returns the live memories' count, or the last one when the store is slow. Before
// a first count ends, it waits for it.
func (c *memoryCount) read(ctx context.Context, count func(context.Context) (int, error)) (int, error) {
	c.mu.Lock()
	done := c.inflight
	if done == nil {
		done = make(chan struct{})
		c.inflight = done
		go func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n, err := count(cctx)
			c.mu.Lock()
			c.n, c.err, c.known, c.inflight = n, err, true, nil
			c.mu.Unlock()
			close(done)
		}()
	}
	known, n := c.known, c.n
	c.mu.Unlock()
	var late <-chan time.Time
	if known {
		t := time.NewTimer(statusMemoryWait)
		defer t.Stop()
		late = t.C
	}
	select {
	case <-done:
	case <-late:
		return n, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.err
}

// Status returns the status method's result, also for the status file. It does not
// enter the loop: the counters are the loop's last snapshot, published after every round
// before its acknowledgements and replies, so a long round cannot hold status up. The
// ledger and the memory count are read on their stores' read connections.
func (s *Server) Status(ctx context.Context) (runtime.StatusView, error) {
	snap := s.Loop.Snapshot()
	if snap == nil {
		return runtime.StatusView{}, runtime.ErrStopped // not ready: the API starts after the loop
	}
	st := s.summary(snap)
	if st.Extraction != nil {
		s.spend(st.Extraction)
	}
	for _, n := range s.Redactions {
		st.Redacted += n.Load()
	}
	if s.Broker != nil {
		st.BrokerError = s.Broker.Err()
	}
	if s.Bridge != nil {
		st.Bridge = s.Bridge.BridgeStatus()
	}
	if s.Memories != nil {
		st.Redacted += s.Memories.Redacted.Load()
		if n, err := s.memories.read(ctx, s.Memories.Store.Count); err == nil {
			st.Memories = n
		} else {
			st.MemoryError = err.Error()
		}
	}
	return st, nil
}

func badRequest(format string) *runtime.HostError {
	return &runtime.HostError{Name: protocol.BadRequest, Message: format}
}

func (s *Server) tool(ctx context.Context, m *nats.Msg) (res any, herr *runtime.HostError) {
	name := strings.TrimPrefix(m.Subject, s.Prefix+".tool.")
	if s.ToolTook != nil {
		began := time.Now()
		defer func() {
			errName := ""
			if herr != nil {
				errName = herr.Name
			}
			s.ToolTook(name, time.Since(began), errName)
		}()
	}
	var req struct {
		SessionID string          `json:"sessionID"`
		CallID    string          `json:"callID"`
		Args      json.RawMessage `json:"args"`
		// A memory tool call from outside any tracked session (thatch mcp, protocol §10)
		// names its project key, the directory it works in, and where it comes from,
		// instead of a sessionID (an extension: docs/protocol.md).
		Project   string      `json:"project"`
		Directory string      `json:"directory"`
		Source    *toolSource `json:"source"`
	}
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return nil, badRequest("request is not a JSON object {sessionID, callID?, args}: " + err.Error())
	}
	if req.SessionID == "" && runtime.MemoryTool(name) && (req.Project != "" || req.Source != nil) {
		return s.hostlessMemoryTool(ctx, name, req.Project, req.Directory, req.Source, req.Args)
	}
	if req.SessionID == "" {
		return nil, badRequest("request has no sessionID: send the calling session's id")
	}
	if runtime.MemoryTool(name) {
		// A caller thatch knows needs no wait for the stream and no commit: a memory call
		// changes nothing of the runtime's state.
		if who := s.known(ctx, req.SessionID); who != nil {
			return s.memoryTool(ctx, name, req.CallID, req.Args, who, toolSource{})
		}
	}
	a := s.Loop.Tool(ctx, runtime.ToolCall{Name: name, SessionID: req.SessionID, CallID: req.CallID, Args: req.Args}, s.streamSeq(ctx))
	if a.Err != nil {
		return nil, a.Err
	}
	if runtime.MemoryTool(name) && a.Caller != nil {
		return s.memoryTool(ctx, name, req.CallID, req.Args, a.Caller, toolSource{})
	}
	return s.withRelated(ctx, a, a.Caller), nil
}

// streamSeq is the stream's last sequence now: an answer must see every event the stream
// held when its call arrived. Without it (a broker hiccup) the call is answered against
// what is applied.
func (s *Server) streamSeq(ctx context.Context) uint64 {
	minSeq, err := s.StreamLastSeq(ctx)
	if err != nil {
		s.Log.Warn("could not read the stream position; answering against the events applied so far", "err", err)
	}
	return minSeq
}

// StreamLastSeq reads the stream's last sequence, sharing the read with concurrent
// callers (probe).
func (s *Server) StreamLastSeq(ctx context.Context) (uint64, error) {
	return s.probe.lastSeq(func() (uint64, error) {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return lastSeq(ictx, s.JS, s.Stream)
	})
}

// lastSeq asks the broker for stream's info and reads its last sequence: the request of
// jetstream's Stream (one round trip), decoded into the one field a probe needs. Decoding the
// whole info (config, state, cluster) was a tenth of a payload call's CPU at 1,000 calls/s.
func lastSeq(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	m, err := js.Conn().RequestWithContext(ctx, apiPrefix(js)+"STREAM.INFO."+stream, nil)
	if err != nil {
		return 0, fmt.Errorf("read the position of stream %s: %w", stream, err)
	}
	var info struct {
		State struct {
			LastSeq uint64 `json:"last_seq"`
		} `json:"state"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return 0, fmt.Errorf("read the position of stream %s: the broker's answer is not its info: %w", stream, err)
	}
	if info.Error != nil {
		return 0, fmt.Errorf("read the position of stream %s: %w", stream, info.Error)
	}
	return info.State.LastSeq, nil
}

// apiPrefix is the subject prefix of js's API requests ("$JS.API." unless js was made with
// another prefix or a domain), ending in a dot.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}

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

func (s *Server) api(ctx context.Context, m *nats.Msg) (any, *runtime.HostError) {
	method := strings.TrimPrefix(m.Subject, s.Prefix+".api.")
	switch method {
	case protocol.APIMemories, protocol.APIMemoryGet, protocol.APIMemoryForget, protocol.APIMemoryExport, protocol.APIMemoryImport,
		protocol.APIMemoryHygiene, protocol.APIMemorySignals, protocol.APIMemoryDismiss, protocol.APIMemoryRestore, protocol.APIMemoryProjects:
		return s.memoryAPI(ctx, method, m.Data)
	}
	var p apiParams
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return nil, badRequest("request is not a JSON object: " + err.Error())
		}
	}
	switch method {
	case protocol.APISessions, protocol.APIEntries, protocol.APIDeadLetters:
		return s.list(ctx, method, p)
	}
	switch method {
	case runtime.CallSessionContext, runtime.CallMemoryContext:
		return s.contextText(ctx, method, p)
	case protocol.APIStatus:
		st, err := s.Status(ctx)
		if err != nil {
			return nil, &runtime.HostError{Name: protocol.Unavailable, Message: err.Error()}
		}
		return st, nil
	case protocol.APICosts:
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
	case protocol.APIUILink:
		if s.Login == nil {
			return nil, &runtime.HostError{Name: protocol.NotImplemented, Message: "this thatch serves no web page (THATCH_HTTP_LISTEN=off): unset it, or set an address, and restart thatch serve"}
		}
		link, expires := s.Login()
		return map[string]any{"url": link, "expiresAt": expires.UTC()}, nil
	case protocol.APISweep:
		if s.Sweep == nil {
			return nil, &runtime.HostError{Name: protocol.NotImplemented, Message: "this thatch does not sweep yet"}
		}
		return s.Sweep(ctx, p.HostID, p.DryRun)
	default:
		return nil, &runtime.HostError{Name: protocol.NotFound, Message: "thatch has no API method " + method +
			": use status, sessions, entries, deadletters, costs, sweep, session.context, memories, memory.get, memory.forget, memory.context, memory.hygiene, memory.signals, memory.dismiss, memory.restore, memory.projects, memory.export, memory.import or ui.link"}
	}
}

// list answers the list methods of the runtime's state and of the journal: the bare
// array of the contract, or a Page when the request has a cursor. The loop only copies
// out one page's rows; they are encoded here.
func (s *Server) list(ctx context.Context, method string, p apiParams) (any, *runtime.HostError) {
	limit, herr := pageLimit(method, p.Limit, p.Cursor, DefaultPage, MaxPage)
	if herr != nil {
		return nil, herr
	}
	after := ""
	if p.Cursor != nil {
		after = *p.Cursor
	}
	query := func(fn func(runtime.View) any) (any, *runtime.HostError) {
		res, err := s.Loop.Query(ctx, fn)
		if err != nil {
			return nil, &runtime.HostError{Name: protocol.Unavailable, Message: err.Error()}
		}
		return res, nil
	}
	switch method {
	case protocol.APISessions:
		type result struct {
			rows []runtime.SessionView
			more bool
		}
		res, herr := query(func(v runtime.View) any {
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
		return page(s, method, r.rows, r.more, func(_ int, v runtime.SessionView) string { return v.SessionID })
	case protocol.APIEntries:
		if p.SessionID == "" {
			return nil, badRequest("entries needs {sessionID}")
		}
		type result struct {
			rows []runtime.EntryView
			from int
			more bool
		}
		res, herr := query(func(v runtime.View) any {
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
		return page(s, method, r.rows, r.more, func(i int, v runtime.EntryView) string { return runtime.EntryCursor(r.from+i, v.ID) })
	case protocol.APIDeadLetters:
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
		rows, err := s.DeadLetters(before, n+1)
		if err != nil {
			return nil, &runtime.HostError{Name: protocol.Unavailable, Message: err.Error()}
		}
		more := len(rows) > n
		rows = rows[:min(len(rows), n)]
		if p.Cursor == nil {
			return rows, nil
		}
		return page(s, method, rows, more, func(_ int, v runtime.DeadLetterView) string { return strconv.FormatInt(v.ID, 10) })
	default:
		return nil, &runtime.HostError{Name: protocol.NotFound, Message: "thatch has no list method " + method}
	}
}
