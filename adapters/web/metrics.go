package web

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Metrics is thatch's Prometheus registry (protocol §8): counts and timings only, never a
// session's content, an id or a text. Its labels take bounded sets of values: a tool name
// thatch does not serve, or an error name a host made up, is counted as "other".
type Metrics struct {
	Registry *prometheus.Registry

	toolSeconds   *prometheus.HistogramVec
	commitSeconds prometheus.Histogram
	hostCalls     *prometheus.CounterVec
}

// Source is where the collector reads the state it reports at each scrape.
type Source struct {
	// Status is the status method's result (the loop's last snapshot and the stores'
	// counts).
	Status func(context.Context) (runtime.StatusView, error)
	// Snapshot is the loop's last snapshot: its waiting calls by host.
	Snapshot func() *runtime.Snapshot
	// StreamLastSeq is the stream's last sequence: the lag is it less the last applied.
	StreamLastSeq func(context.Context) (uint64, error)
	// Memories is the memory store (by kind, hygiene signals); nil leaves them out.
	Memories *memory.Store
	Log      *slog.Logger
}

// NewMetrics returns the registry with the Go and process collectors, the timings thatch
// observes (ToolTook, CommitTook, Caller) and the state's counts read from src.
func NewMetrics(src Source) *Metrics {
	if src.Log == nil {
		src.Log = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		toolSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "thatch_tool_call_seconds", Help: "How long thatch took to answer a tool call, by tool.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"tool"}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "thatch_commit_seconds", Help: "How long a journal commit (one round of the loop) took.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		hostCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "thatch_host_calls_total", Help: "Host calls performed, by protocol operation and outcome.",
		}, []string{"method", "outcome"}),
	}
	// Every series a dashboard or an alert names exists from the first scrape, before any
	// call: a vector without a child is absent from the exposition, and an absent series
	// reads as no data, not as zero.
	for _, tool := range append(slices.Clone(tools), "other") {
		m.toolSeconds.WithLabelValues(tool)
	}
	for _, op := range hostOps {
		m.hostCalls.WithLabelValues(string(op), "ok")
	}
	m.Registry.MustRegister(m.toolSeconds, m.commitSeconds, m.hostCalls,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&stateCollector{src: src})
	return m
}

// tools are the tool names the histogram labels; any other is "other".
var tools = []string{
	runtime.ToolPayload, runtime.ToolDone,
	runtime.ToolSearch, runtime.ToolRemember, runtime.ToolUpdate, runtime.ToolForget,
}

// hostOps are the host operations whose ok count is reported from the start.
var hostOps = []runtime.Op{runtime.OpCreate, runtime.OpPrompt, runtime.OpDelete, runtime.OpList, runtime.OpProjects,
	runtime.OpMove, runtime.OpMessages, runtime.OpCompact, runtime.OpClose, runtime.OpToast}

// ToolTook observes one tool call (natsbus.Server.ToolTook).
func (m *Metrics) ToolTook(tool string, took time.Duration, _ string) {
	if !slices.Contains(tools, tool) {
		tool = "other"
	}
	m.toolSeconds.WithLabelValues(tool).Observe(took.Seconds())
}

// CommitTook observes one journal commit (runtime.Loop.CommitTook).
func (m *Metrics) CommitTook(took time.Duration) { m.commitSeconds.Observe(took.Seconds()) }

// outcome is a host call's outcome label: ok, or one of the errors thatch itself names
// (a host's own error names are its own business: "host_error").
func outcome(err *runtime.HostError) string {
	switch {
	case err == nil:
		return "ok"
	case err.NoResponder:
		return "no_responder"
	}
	switch err.Name {
	case protocol.Timeout:
		return "timeout"
	case protocol.Transport:
		return "transport"
	case protocol.BadReply, protocol.BadRequest:
		return "bad_reply"
	case protocol.HostRestarted:
		return "host_restarted"
	case protocol.NotFound, protocol.UnknownSession:
		return "not_found"
	}
	return "host_error"
}

// Caller counts the host calls c performs.
func (m *Metrics) Caller(c runtime.Caller) runtime.Caller { return countingCaller{c, m.hostCalls} }

type countingCaller struct {
	runtime.Caller
	calls *prometheus.CounterVec
}

func (c countingCaller) Do(ctx context.Context, api string, call runtime.Call) runtime.Result {
	res := c.Caller.Do(ctx, api, call)
	c.calls.WithLabelValues(string(call.Op), outcome(res.Err)).Inc()
	return res
}

// stateCollector reports the state's counts at each scrape, from the status and the
// stores: nothing is kept twice, so a count can never drift from what status says.
type stateCollector struct {
	src Source

	mu      sync.Mutex // one store read at a time; scrapes in between reuse it
	readAt  time.Time
	kinds   map[string]int
	hygiene memory.Hygiene
}

var (
	descApplied    = prometheus.NewDesc("thatch_events_applied_total", "Events of known types applied.", nil, nil)
	descRejected   = prometheus.NewDesc("thatch_events_rejected_total", "Events rejected (dead letters).", nil, nil)
	descGaps       = prometheus.NewDesc("thatch_gaps_total", "Gaps seen in hosts' Host-Seq.", nil, nil)
	descSessions   = prometheus.NewDesc("thatch_sessions", "Live sessions tracked.", nil, nil)
	descEntries    = prometheus.NewDesc("thatch_entries", "Journaled entries, by state.", []string{"state"}, nil)
	descMemories   = prometheus.NewDesc("thatch_memories", "Live memories.", nil, nil)
	descLag        = prometheus.NewDesc("thatch_stream_lag", "Messages in the stream not yet applied.", nil, nil)
	descHosts      = prometheus.NewDesc("thatch_hosts_online", "Hosts online (hello without a later goodbye).", nil, nil)
	descMissing    = prometheus.NewDesc("thatch_hosts_missing_tools", "Online hosts that have not loaded thatch's tools.", nil, nil)
	descOutstand   = prometheus.NewDesc("thatch_host_calls_outstanding", "Host calls committed and not yet answered.", nil, nil)
	descWaiting    = prometheus.NewDesc("thatch_host_calls_waiting", "Host calls waiting in the outbox for their host's next hello, by host.", []string{"host"}, nil)
	descRedacted   = prometheus.NewDesc("thatch_redactions_total", "Secrets and private blocks kept out of storage.", nil, nil)
	descConsuming  = prometheus.NewDesc("thatch_consuming", "1 while the durable consumer runs.", nil, nil)
	descFailing    = prometheus.NewDesc("thatch_store_failing", "1 while a store fails, by store.", []string{"store"}, nil)
	descBridge     = prometheus.NewDesc("thatch_bridge_connected", "1 while the in-process opencode bridge's event stream is open.", nil, nil)
	descKinds      = prometheus.NewDesc("thatch_memories_by_kind", "Live memories, by kind.", []string{"kind"}, nil)
	descHygiene    = prometheus.NewDesc("thatch_memory_hygiene", "Open hygiene signals, by signal.", []string{"signal"}, nil)
	descSpend      = prometheus.NewDesc("thatch_extraction_tokens_today", "Extraction tokens spent today (UTC).", nil, nil)
	descBudget     = prometheus.NewDesc("thatch_extraction_budget_reached", "1 when the daily token budget stops new extractions.", nil, nil)
	descScrapeFail = prometheus.NewDesc("thatch_status_up", "1 when the scrape read thatch's status.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descApplied, descRejected, descGaps, descSessions, descEntries, descMemories,
		descLag, descHosts, descMissing, descOutstand, descWaiting, descRedacted, descConsuming, descFailing, descBridge,
		descKinds, descHygiene, descSpend, descBudget, descScrapeFail} {
		ch <- d
	}
}

// storeEvery is how often the scrape reads the memory store's kinds and signals: they
// change slowly and the hygiene read scans the store.
const storeEvery = 30 * time.Second

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	st, err := c.src.Status(ctx)
	if err != nil {
		gauge(descScrapeFail, 0)
		return
	}
	gauge(descScrapeFail, 1)
	counter(descApplied, float64(st.Applied))
	counter(descRejected, float64(st.Rejected))
	counter(descGaps, float64(st.Gaps))
	counter(descRedacted, float64(st.Redacted))
	gauge(descSessions, float64(st.Sessions))
	gauge(descEntries, float64(st.Pending), "pending")
	gauge(descEntries, float64(st.Accepted), "accepted")
	gauge(descMemories, float64(st.Memories))
	gauge(descHosts, float64(st.Hosts))
	gauge(descMissing, float64(len(st.HostsMissingTools)))
	gauge(descOutstand, float64(st.OutstandingCalls))
	gauge(descConsuming, b2f(st.Consuming))
	gauge(descFailing, b2f(st.JournalError != ""), "journal")
	gauge(descFailing, b2f(st.MemoryError != ""), "memories")
	gauge(descFailing, b2f(st.BrokerError != ""), "broker")
	if b := bridgeOf(st); b != nil {
		gauge(descBridge, b2f(b.Connected))
	}
	if x := st.Extraction; x != nil {
		gauge(descSpend, float64(x.Today.Tokens))
		gauge(descBudget, b2f(x.BudgetReached))
	}
	if snap := c.src.Snapshot(); snap != nil {
		for host, n := range snap.WaitingByHost() {
			gauge(descWaiting, float64(n), host)
		}
	}
	if c.src.StreamLastSeq != nil {
		if last, err := c.src.StreamLastSeq(ctx); err == nil {
			gauge(descLag, float64(last-min(last, st.LastStreamSeq)))
		} else {
			c.src.Log.Debug("metrics: the stream's position", "err", err)
		}
	}
	if c.src.Memories != nil {
		kinds, h, err := c.store(ctx)
		if err == nil {
			for _, k := range memory.Kinds {
				gauge(descKinds, float64(kinds[k]), k)
			}
			gauge(descHygiene, float64(len(h.DuplicatePairs)), "duplicate")
			gauge(descHygiene, float64(len(h.Stale)), "stale")
			gauge(descHygiene, float64(len(h.Orphaned)), "orphaned")
			gauge(descHygiene, float64(len(h.Merged)), "merged")
		}
	}
}

// store reads the memory store's counts, at most once every storeEvery.
func (c *stateCollector) store(ctx context.Context) (map[string]int, memory.Hygiene, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kinds != nil && time.Since(c.readAt) < storeEvery {
		return c.kinds, c.hygiene, nil
	}
	kinds, err := c.src.Memories.Kinds(ctx)
	if err != nil {
		c.src.Log.Debug("metrics: memories by kind", "err", err)
		return nil, memory.Hygiene{}, err
	}
	h, err := c.src.Memories.Hygiene(ctx, nil, time.Now())
	if err != nil {
		c.src.Log.Debug("metrics: memory hygiene", "err", err)
		return nil, memory.Hygiene{}, err
	}
	c.kinds, c.hygiene, c.readAt = kinds, h, time.Now()
	return kinds, h, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
