package natsbus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/runtime"
)

// Server answers thatch's tools (<api>.tool.<name>) and API (<api>.api.<method>) in the
// queue group "thatch", so several thatch replicas may share the load.
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

	wg    sync.WaitGroup
	subs  []*nats.Subscription
	probe probe
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
				reply(m, res, herr)
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

func reply(m *nats.Msg, res any, herr *runtime.HostError) {
	if m.Reply == "" {
		return
	}
	var data []byte
	if herr != nil {
		data, _ = json.Marshal(map[string]any{"error": herr})
	} else {
		data, _ = json.Marshal(map[string]any{"result": res})
	}
	_ = m.Respond(data)
}

// summary is the status method's result.
func (s *Server) summary(v runtime.View) runtime.StatusView {
	st := runtime.Summary(v.State, v.Pos)
	st.Consuming = s.Consumer != nil && s.Consumer.Running.Load() && s.NC.IsConnected()
	st.OutstandingCalls, st.WaitingCalls, st.JournalError = v.Outstanding, v.Waiting, v.JournalError
	st.Goroutines = goruntime.NumGoroutine()
	if s.Costs != nil {
		st.Extraction = &runtime.ExtractionView{DailyTokens: s.Extract.DailyTokens, Model: s.Extract.ExtractModel,
			BudgetReached: v.State.BudgetReached(s.Extract.DailyTokens, time.Now())}
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

// Status returns the status method's result, also for the status file. The memory count
// is read after the loop answered: the store is not the loop's.
func (s *Server) Status(ctx context.Context) (runtime.StatusView, error) {
	v, err := s.Loop.Query(ctx, func(v runtime.View) any { return s.summary(v) })
	if err != nil {
		return runtime.StatusView{}, err
	}
	st := v.(runtime.StatusView)
	if st.Extraction != nil {
		s.spend(st.Extraction)
	}
	for _, n := range s.Redactions {
		st.Redacted += n.Load()
	}
	if s.Broker != nil {
		st.BrokerError = s.Broker.Err()
	}
	if s.Memories != nil {
		st.Redacted += s.Memories.Redacted.Load()
		if n, err := s.Memories.Store.Count(ctx); err == nil {
			st.Memories = n
		} else {
			st.MemoryError = err.Error()
		}
	}
	return st, nil
}

func badRequest(format string) *runtime.HostError {
	return &runtime.HostError{Name: "BadRequestError", Message: format}
}

func (s *Server) tool(ctx context.Context, m *nats.Msg) (any, *runtime.HostError) {
	name := strings.TrimPrefix(m.Subject, s.Prefix+".tool.")
	var req struct {
		SessionID string          `json:"sessionID"`
		CallID    string          `json:"callID"`
		Args      json.RawMessage `json:"args"`
	}
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return nil, badRequest("request is not a JSON object {sessionID, callID?, args}: " + err.Error())
	}
	if req.SessionID == "" {
		return nil, badRequest("request has no sessionID: send the calling session's id")
	}
	if runtime.MemoryTool(name) {
		// A caller thatch knows needs no wait for the stream and no commit: a memory call
		// changes nothing of the runtime's state.
		if who := s.known(ctx, req.SessionID); who != nil {
			return s.memoryTool(ctx, name, req.CallID, req.Args, who)
		}
	}
	a := s.Loop.Tool(ctx, runtime.ToolCall{Name: name, SessionID: req.SessionID, CallID: req.CallID, Args: req.Args}, s.streamSeq(ctx))
	if a.Err != nil {
		return nil, a.Err
	}
	if runtime.MemoryTool(name) && a.Caller != nil {
		return s.memoryTool(ctx, name, req.CallID, req.Args, a.Caller)
	}
	return s.withRelated(ctx, a, a.Caller), nil
}

// streamSeq is the stream's last sequence now: an answer must see every event the stream
// held when its call arrived. Without it (a broker hiccup) the call is answered against
// what is applied.
func (s *Server) streamSeq(ctx context.Context) uint64 {
	minSeq, err := s.probe.lastSeq(func() (uint64, error) {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := s.JS.Stream(ictx, s.Stream)
		if err != nil {
			return 0, err
		}
		info, err := st.Info(ictx)
		if err != nil {
			return 0, err
		}
		return info.State.LastSeq, nil
	})
	if err != nil {
		s.Log.Warn("could not read the stream position; answering against the events applied so far", "err", err)
	}
	return minSeq
}

// apiParams are the parameters of the API methods that are not the memory store's.
type apiParams struct {
	HostID    string `json:"hostID"`
	SessionID string `json:"sessionID"`
	DryRun    bool   `json:"dryRun"`
	ProjectID string `json:"projectID"` // session.context: the host's word for the project
	Directory string `json:"directory"` // session.context: likewise
	Days      *int   `json:"days"`      // costs
}

func (s *Server) api(ctx context.Context, m *nats.Msg) (any, *runtime.HostError) {
	method := strings.TrimPrefix(m.Subject, s.Prefix+".api.")
	switch method {
	case "memories", "memory.get", "memory.forget", "memory.export", "memory.import", "memory.hygiene", "memory.signals", "memory.dismiss", "memory.restore":
		return s.memoryAPI(ctx, method, m.Data)
	}
	var p apiParams
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return nil, badRequest("request is not a JSON object: " + err.Error())
		}
	}
	var fn func(runtime.View) any
	switch method {
	case runtime.CallSessionContext, runtime.CallMemoryContext:
		return s.contextText(ctx, method, p)
	case "status":
		st, err := s.Status(ctx)
		if err != nil {
			return nil, &runtime.HostError{Name: "UnavailableError", Message: err.Error()}
		}
		return st, nil
	case "sessions":
		fn = func(v runtime.View) any { return runtime.LiveSessions(v.State, p.HostID) }
	case "entries":
		if p.SessionID == "" {
			return nil, badRequest("entries needs {sessionID}")
		}
		fn = func(v runtime.View) any { return runtime.EntryList(v.State, p.SessionID) }
	case "costs":
		if s.Costs == nil {
			return nil, &runtime.HostError{Name: "NotImplementedError", Message: "this thatch keeps no ledger"}
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
			return nil, &runtime.HostError{Name: "UnavailableError", Message: err.Error()}
		}
		return rows, nil
	case "sweep":
		if s.Sweep == nil {
			return nil, &runtime.HostError{Name: "NotImplementedError", Message: "this thatch does not sweep yet"}
		}
		return s.Sweep(ctx, p.HostID, p.DryRun)
	default:
		return nil, &runtime.HostError{Name: "NotFoundError", Message: "thatch has no API method " + method +
			": use status, sessions, entries, costs, sweep, session.context, memories, memory.get, memory.forget, memory.context, memory.hygiene, memory.signals, memory.dismiss, memory.restore, memory.export or memory.import"}
	}
	res, err := s.Loop.Query(ctx, fn)
	if err != nil {
		return nil, &runtime.HostError{Name: "UnavailableError", Message: err.Error()}
	}
	if method == "entries" && res.([]runtime.EntryView) == nil {
		return nil, &runtime.HostError{Name: "UnknownSessionError", Message: "thatch does not track session " + p.SessionID}
	}
	return res, nil
}
