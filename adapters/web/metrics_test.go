package web_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// metrics is one scrape of /metrics, parsed.
type metrics map[string]*dto.MetricFamily

func (r *rig) metricsNow() metrics {
	r.t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(r.scrape()))
	if err != nil {
		r.t.Fatalf("/metrics is not the Prometheus text format: %v", err)
	}
	return mfs
}

// find is the series of name whose labels include labels (name=value pairs); nil if none.
func (m metrics) find(name string, labels ...string) *dto.Metric {
	mf := m[name]
	if mf == nil {
		return nil
	}
	for _, x := range mf.GetMetric() {
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range x.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			ok = ok && found
		}
		if ok {
			return x
		}
	}
	return nil
}

// value is the value of a counter or gauge series, or a histogram's count; -1 if absent.
func (m metrics) value(name string, labels ...string) float64 {
	x := m.find(name, labels...)
	switch {
	case x == nil:
		return -1
	case x.Counter != nil:
		return x.Counter.GetValue()
	case x.Gauge != nil:
		return x.Gauge.GetValue()
	case x.Histogram != nil:
		return float64(x.Histogram.GetSampleCount())
	}
	return -1
}

// contractMetrics are the metrics protocol §8 lists, with their types and labels.
var contractMetrics = []struct {
	name   string
	typ    dto.MetricType
	labels []string
}{
	{"thatch_events_applied_total", dto.MetricType_COUNTER, nil},
	{"thatch_events_rejected_total", dto.MetricType_COUNTER, nil},
	{"thatch_gaps_total", dto.MetricType_COUNTER, nil},
	{"thatch_sessions", dto.MetricType_GAUGE, nil},
	{"thatch_entries", dto.MetricType_GAUGE, []string{"state"}},
	{"thatch_memories", dto.MetricType_GAUGE, nil},
	{"thatch_host_calls_total", dto.MetricType_COUNTER, []string{"method", "outcome"}},
	{"thatch_tool_call_seconds", dto.MetricType_HISTOGRAM, []string{"tool"}},
	{"thatch_commit_seconds", dto.MetricType_HISTOGRAM, nil},
	{"thatch_stream_lag", dto.MetricType_GAUGE, nil},
}

func checkContract(t *testing.T, m metrics) {
	t.Helper()
	for _, c := range contractMetrics {
		mf := m[c.name]
		if mf == nil {
			t.Errorf("/metrics lacks %s (protocol §8)", c.name)
			continue
		}
		if mf.GetType() != c.typ {
			t.Errorf("%s is a %v, want a %v", c.name, mf.GetType(), c.typ)
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s has no help text", c.name)
		}
		for _, x := range mf.GetMetric() {
			var names []string
			for _, lp := range x.GetLabel() {
				names = append(names, lp.GetName())
			}
			if fmt.Sprint(names) != fmt.Sprint(c.labels) && !(len(names) == 0 && len(c.labels) == 0) {
				t.Errorf("%s has labels %v, want %v", c.name, names, c.labels)
			}
		}
	}
	for _, state := range []string{"pending", "accepted"} {
		if m.find("thatch_entries", "state", state) == nil {
			t.Errorf("thatch_entries lacks state=%q", state)
		}
	}
}

// Every metric §8 lists is there from the first scrape, before thatch did anything: an
// alert on a rate or on absent() needs the series to exist.
func TestMetricsOfTheContractFromTheStart(t *testing.T) {
	r := newRig(t)
	checkContract(t, r.metricsNow())
}

// ... and after some work too, with the right types.
func TestMetricsOfTheContractAfterWork(t *testing.T) {
	r := newRig(t)
	r.populate()
	r.metrics.ToolTook(runtime.ToolRemember, time.Millisecond, "")
	r.waitCalls(1)
	checkContract(t, r.metricsNow())
}

// waitCalls waits until the stub caller saw at least n host calls.
func (r *rig) waitCalls(n int) {
	r.t.Helper()
	testkit.WaitFor(r.t, 10*time.Second, fmt.Sprintf("%d host calls", n), func() error {
		if ops := r.caller.ops(); len(ops) < n {
			return fmt.Errorf("%d host calls: %v", len(ops), ops)
		}
		return nil
	})
}

func TestMetricsCountTheState(t *testing.T) {
	r := newRig(t)
	m0 := r.metricsNow()
	if v := m0.value("thatch_status_up"); v != 1 {
		t.Errorf("thatch_status_up %v, want 1", v)
	}
	applied0, rejected0, commits0 := m0.value("thatch_events_applied_total"), m0.value("thatch_events_rejected_total"), m0.value("thatch_commit_seconds")

	r.populate() // 6 events of known types and one that is not JSON
	m1 := r.metricsNow()
	if got := m1.value("thatch_events_applied_total"); got != applied0+6 {
		t.Errorf("thatch_events_applied_total %v after 6 events, want %v", got, applied0+6)
	}
	if got := m1.value("thatch_events_rejected_total"); got != rejected0+1 {
		t.Errorf("thatch_events_rejected_total %v after a rejected event, want %v", got, rejected0+1)
	}
	if got := m1.value("thatch_commit_seconds"); got <= commits0 || commits0 < 0 {
		t.Errorf("thatch_commit_seconds count %v after commits, was %v", got, commits0)
	}
	if h := m1.find("thatch_commit_seconds").GetHistogram(); h.GetSampleSum() <= 0 || len(h.GetBucket()) == 0 {
		t.Errorf("thatch_commit_seconds: sum %v, %d buckets", h.GetSampleSum(), len(h.GetBucket()))
	}
	for name, want := range map[string]float64{"thatch_sessions": 3, "thatch_memories": 3, "thatch_hosts_online": 1, "thatch_gaps_total": 0, "thatch_stream_lag": 0, "thatch_consuming": 1} {
		if got := m1.value(name); got != want {
			t.Errorf("%s %v, want %v", name, got, want)
		}
	}
	if got := m1.value("thatch_entries", "state", "pending"); got != 2 {
		t.Errorf(`thatch_entries{state="pending"} %v, want 2`, got)
	}
	if got := m1.value("thatch_entries", "state", "accepted"); got != 0 {
		t.Errorf(`thatch_entries{state="accepted"} %v, want 0`, got)
	}

	// The stream holds messages not yet applied: the lag says how many.
	r.lastSeq.Store(r.seq + 5)
	if got := r.metricsNow().value("thatch_stream_lag"); got != 5 {
		t.Errorf("thatch_stream_lag %v, want 5", got)
	}
	r.lastSeq.Store(r.seq)

	// More events: the counters move on.
	r.toolCall(otherTopID, "call_9", "one more")
	r.applied()
	m2 := r.metricsNow()
	if got := m2.value("thatch_events_applied_total"); got != applied0+7 {
		t.Errorf("thatch_events_applied_total %v, want %v", got, applied0+7)
	}
	if got := m2.value("thatch_commit_seconds"); got <= m1.value("thatch_commit_seconds") {
		t.Errorf("thatch_commit_seconds count %v did not grow from %v", got, m1.value("thatch_commit_seconds"))
	}
	if got := m2.value("thatch_entries", "state", "pending"); got != 3 {
		t.Errorf(`thatch_entries{state="pending"} %v, want 3`, got)
	}

	// A consumer that stops, a failing journal: the gauges say so.
	r.consuming.Store(false)
	je := "disk full"
	r.journalErr.Store(&je)
	m3 := r.metricsNow()
	if m3.value("thatch_consuming") != 0 || m3.value("thatch_store_failing", "store", "journal") != 1 || m3.value("thatch_store_failing", "store", "memories") != 0 {
		t.Errorf("consuming %v, journal failing %v, memories failing %v", m3.value("thatch_consuming"),
			m3.value("thatch_store_failing", "store", "journal"), m3.value("thatch_store_failing", "store", "memories"))
	}

	// A status that cannot be read: the scrape still answers, and says so.
	r.statusErr.Store(errPtr(errors.New("thatch is stopping")))
	m4 := r.metricsNow()
	if v := m4.value("thatch_status_up"); v != 0 {
		t.Errorf("thatch_status_up %v while status fails, want 0", v)
	}
	if m4["thatch_events_applied_total"] != nil {
		t.Error("a counter is reported while status fails (it would read as a reset)")
	}
}

func TestMetricsCountHostCalls(t *testing.T) {
	r := newRig(t)
	r.populate() // two top-level sessions created: two reminders (session.prompt)
	r.waitCalls(2)
	m := r.metricsNow()
	if got := m.value("thatch_host_calls_total", "method", "session.prompt", "outcome", "ok"); got < 2 {
		t.Errorf(`thatch_host_calls_total{method="session.prompt",outcome="ok"} %v, want at least 2`, got)
	}

	// An idle session with pending entries starts an extraction: its child is created.
	before := m.value("thatch_host_calls_total", "method", "session.create", "outcome", "ok")
	r.deliver("session.status", fmt.Sprintf(`{"sessionID":%q,"status":{"type":"idle"}}`, topID))
	r.applied()
	testkit.WaitFor(t, 10*time.Second, "the extraction's session.create to be counted", func() error {
		if r.metricsNow().value("thatch_host_calls_total", "method", "session.create", "outcome", "ok") != max(before, 0)+1 {
			return fmt.Errorf("calls %v", r.caller.ops())
		}
		return nil
	})

	// The decorator's outcomes: thatch's own error names, and a host's as host_error.
	failing := &answering{}
	c := r.metrics.Caller(failing)
	cases := []struct {
		err     *runtime.HostError
		outcome string
	}{
		{nil, "ok"},
		{&runtime.HostError{Name: "UnknownError", NoResponder: true}, "no_responder"},
		{&runtime.HostError{Name: "TimeoutError"}, "timeout"},
		{&runtime.HostError{Name: "TransportError"}, "transport"},
		{&runtime.HostError{Name: "BadReplyError"}, "bad_reply"},
		{&runtime.HostError{Name: "BadRequestError"}, "bad_reply"},
		{&runtime.HostError{Name: "HostRestartedError"}, "host_restarted"},
		{&runtime.HostError{Name: "NotFoundError"}, "not_found"},
		{&runtime.HostError{Name: "UnknownSessionError"}, "not_found"},
		{&runtime.HostError{Name: "Quokka-Zanzibar made-up error " + secretTitle}, "host_error"},
	}
	for _, cs := range cases {
		before := r.metricsNow().value("thatch_host_calls_total", "method", "session.delete", "outcome", cs.outcome)
		failing.err = cs.err
		res := c.Do(context.Background(), "v1", runtime.Call{Host: "h1", Op: runtime.OpDelete, SessionID: "ses_x"})
		if res.Err != cs.err {
			t.Errorf("the decorator changed the result: %v, want %v", res.Err, cs.err)
		}
		if got := r.metricsNow().value("thatch_host_calls_total", "method", "session.delete", "outcome", cs.outcome); got != max(before, 0)+1 {
			t.Errorf("after a call answering %v: outcome %q counts %v, want %v", cs.err, cs.outcome, got, max(before, 0)+1)
		}
	}
	if strings.Contains(r.scrape(), "Quokka") {
		t.Error("a host's error name reached /metrics")
	}
}

// answering is a host that answers every call with err.
type answering struct{ err *runtime.HostError }

func (a *answering) Do(_ context.Context, _ string, c runtime.Call) runtime.Result {
	return runtime.Result{Call: c, Err: a.err}
}

func TestMetricsToolCallSeconds(t *testing.T) {
	r := newRig(t)
	tools := []string{runtime.ToolPayload, runtime.ToolDone, runtime.ToolSearch, runtime.ToolRemember, runtime.ToolUpdate, runtime.ToolForget}
	for i, tool := range tools {
		for range i + 1 {
			r.metrics.ToolTook(tool, 3*time.Millisecond, "")
		}
	}
	r.metrics.ToolTook("bash", time.Second, "")
	r.metrics.ToolTook("memory_dismiss", 2*time.Second, "BadRequestError")
	r.metrics.ToolTook(strings.Repeat("x", 300), time.Second, "")
	m := r.metricsNow()
	for i, tool := range tools {
		x := m.find("thatch_tool_call_seconds", "tool", tool)
		if x == nil {
			t.Errorf("no thatch_tool_call_seconds{tool=%q}", tool)
			continue
		}
		h := x.GetHistogram()
		if h.GetSampleCount() != uint64(i+1) {
			t.Errorf("thatch_tool_call_seconds{tool=%q} count %d, want %d", tool, h.GetSampleCount(), i+1)
		}
		if want := 0.003 * float64(i+1); h.GetSampleSum() < want*0.99 || h.GetSampleSum() > want*1.01 {
			t.Errorf("thatch_tool_call_seconds{tool=%q} sum %v, want %v", tool, h.GetSampleSum(), want)
		}
	}
	other := m.find("thatch_tool_call_seconds", "tool", "other").GetHistogram()
	if other.GetSampleCount() != 3 || other.GetSampleSum() < 3.99 || other.GetSampleSum() > 4.01 {
		t.Errorf(`thatch_tool_call_seconds{tool="other"}: count %d sum %v, want 3 and 4`, other.GetSampleCount(), other.GetSampleSum())
	}
	for _, x := range m["thatch_tool_call_seconds"].GetMetric() {
		for _, lp := range x.GetLabel() {
			if lp.GetName() == "tool" && lp.GetValue() != "other" && !slices.Contains(tools, lp.GetValue()) {
				t.Errorf("thatch_tool_call_seconds has tool=%q: an unknown tool is not other", lp.GetValue())
			}
		}
	}
}

// The memories' kinds and hygiene signals are reported too (read at most every 30 s).
func TestMetricsOfTheMemoryStore(t *testing.T) {
	r := newRig(t)
	r.remember(api, ten)
	r.remember(api, oneOff)
	r.remember(api, "we ship on tuesdays", memory.RememberArgs{Kind: "decision"})
	m := r.metricsNow()
	if got := m.value("thatch_memories_by_kind", "kind", "fact"); got != 2 {
		t.Errorf(`thatch_memories_by_kind{kind="fact"} %v, want 2`, got)
	}
	if got := m.value("thatch_memories_by_kind", "kind", "decision"); got != 1 {
		t.Errorf(`thatch_memories_by_kind{kind="decision"} %v, want 1`, got)
	}
	if got := m.value("thatch_memory_hygiene", "signal", "duplicate"); got != 1 {
		t.Errorf(`thatch_memory_hygiene{signal="duplicate"} %v, want 1`, got)
	}
}
