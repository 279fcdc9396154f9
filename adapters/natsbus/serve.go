package natsbus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	goruntime "runtime"
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
	NC     *nats.Conn
	JS     jetstream.JetStream
	Stream string
	Prefix string // thatch's own subject prefix, "thatch" by default
	Loop   *runtime.Loop
	// State, when Loop is nil, is the runtime state the list methods (sessions, entries)
	// answer from: a stopped thatch's journal, loaded by the CLI.
	State    *runtime.State
	Consumer *Consumer
	Log      *slog.Logger
	// Sweep answers the sweep method; nil answers NotImplementedError.
	Sweep func(ctx context.Context, hostID string, dryRun bool) (any, *runtime.HostError)
	// Memories serves the memory tools and methods; nil answers NotImplementedError.
	Memories Memories
	// Redactions are other parts' redaction counts (the in-process bridge's, the memory
	// store's), which status adds to the journal's.
	Redactions []*atomic.Int64
	// Costs reads the ledger from a UTC day on (rule 14); nil leaves costs out of status
	// and answers the costs method with NotImplementedError. Extract is the runtime's
	// budget and model, which status shows.
	Costs   func(since string) ([]runtime.CostRow, error)
	Extract runtime.Rules
	// Broker is the embedded broker's JetStreamWatch; nil (an external broker) leaves
	// brokerError out of status.
	Broker interface{ Err() string }
	// Bridge, when set, is the in-process opencode bridge's row of status, which status
	// holds as it marshals; nil (no bridge) leaves bridge out of status.
	Bridge func() any
	// Team is team memory (§9); nil (THATCH_TEAM_URL unset) leaves team out of status
	// and refuses memory.share.
	Team interface {
		TeamStatus(context.Context) (*runtime.TeamStatus, error)
		Wake()
	}
	// DeadLetters reads a page of the journal's dead letters, newest first, those older
	// than the row before (0: from the newest); nil answers the deadletters method with
	// NotImplementedError.
	DeadLetters func(before int64, limit int) ([]runtime.DeadLetterView, error)
	// Login, when set, mints a one-time link to the web page and says until when it opens
	// it (ui.link); nil (the page is off) answers NotImplementedError.
	Login func() (link string, expires time.Time)
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
	if _, method, ok := strings.Cut(subject, ".api."); ok && apiByName[method].paged {
		msg += `: ask for it in pages, {"cursor": ""} and then {"cursor": nextCursor} until a page has no nextCursor (a limit makes pages smaller)`
	}
	return &runtime.HostError{Name: protocol.TooLarge, Message: msg}
}

// Paging, an extension of the list methods (apiMethod.paged): a request with a "cursor"
// ("" for the first page) is answered with a Page of at most "limit" items, cut shorter
// when needed to fit the broker's max_payload, whose nextCursor asks for the next one. A
// request without a cursor gets the contract's bare array (at most "limit" items).
const (
	DefaultPage = 1000
	MaxPage     = 10000
)

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

// Rows is a list asked for with a cursor, before it is cut into a Page: its rows, the
// cursor of the page after row i, and whether more may follow the last row. The memory
// service answers its lists so.
type Rows interface {
	Len() int
	Row(i int) any
	Cursor(i int) string
	More() bool
}

// rows are the Rows of a slice.
type rows[T any] struct {
	items []T
	more  bool
	next  func(i int, item T) string
}

func (r rows[T]) Len() int            { return len(r.items) }
func (r rows[T]) Row(i int) any       { return r.items[i] }
func (r rows[T]) Cursor(i int) string { return r.next(i, r.items[i]) }
func (r rows[T]) More() bool          { return r.more }

// pageRows encodes r as a Page: the longest prefix that fits the broker's max_payload,
// with the cursor (of the last row kept) of the next page when rows were left out or
// more may follow.
func (s *Server) pageRows(method string, r Rows) (any, *runtime.HostError) {
	budget := int64(1 << 20) // nats' default, when the connection does not say
	if s.NC == nil {         // answered in process (Answer): no broker to fit
		budget = math.MaxInt64
	} else if limit := s.NC.MaxPayload(); limit > 0 {
		budget = limit
	}
	budget -= pageMargin
	out := Page{Items: make([]json.RawMessage, 0, r.Len())}
	more := r.More()
	size := int64(0)
	for i := range r.Len() {
		raw, err := json.Marshal(r.Row(i))
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
		out.NextCursor = r.Cursor(len(out.Items) - 1)
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
		if b, err := json.Marshal(s.Bridge()); err == nil {
			st.Bridge = b
		}
	}
	if s.Team != nil {
		if ts, err := s.Team.TeamStatus(ctx); err == nil {
			st.Team = ts
		}
	}
	if s.Memories != nil {
		if n, err := s.memories.read(ctx, s.Memories.Count); err == nil {
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
// jetstream's Stream (one round trip), decoded into the one field a probe needs: tool
// calls probe all the time, and the whole info (config, state, cluster) is work to decode
// that no caller uses.
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
