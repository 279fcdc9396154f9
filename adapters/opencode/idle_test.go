package opencode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime"
)

// TestCatchUpIdle: a session that went idle while the bridge was away gets, after the
// caught-up tool calls, a session.status idle from the catch-up (opencode keeps no event
// history), children before parents; a busy or retrying one gets none, each asked of its
// own directory (opencode keeps statuses per directory). A repeat within the boot is a
// duplicate that costs no Host-Seq. Fed to the runtime's rules after a restart of thatch,
// the idle starts the extraction of the session's pending entries.
func TestCatchUpIdle(t *testing.T) {
	nc, js, stream := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := func(sid, callID string) string {
		p := strings.ReplaceAll(toolPartJSON, `"sessionID":"ses_a"`, `"sessionID":"`+sid+`"`)
		return `[{"info":{"role":"assistant"},"parts":[` + strings.ReplaceAll(p, `"callID":"call_1"`, `"callID":"`+callID+`"`) + `]}]`
	}
	fake := &fakeOpencode{
		events: make(chan string, 16),
		sessions: `[{"id":"ses_idle","directory":"/w","title":"top","time":{"updated":40}},` +
			`{"id":"ses_task","parentID":"ses_idle","directory":"/w","title":"sub-agent","time":{"updated":41}},` +
			`{"id":"ses_busy","directory":"/w","title":"busy","time":{"updated":42}},` +
			`{"id":"ses_retry","directory":"/w","title":"retry","time":{"updated":43}},` +
			`{"id":"ses_far","directory":"/x y","title":"far","time":{"updated":44}},` +
			`{"id":"ses_near","directory":"/x y","title":"near","time":{"updated":45}}]`,
		info: map[string]string{"ses_idle": `{}`, "ses_task": `{}`, "ses_busy": `{}`, "ses_retry": `{}`, "ses_far": `{}`, "ses_near": `{}`},
		messages: map[string]string{"ses_idle": call("ses_idle", "call_1"), "ses_task": call("ses_task", "call_2"),
			"ses_busy": call("ses_busy", "call_3")},
		// ses_far is busy in its own directory and absent from /w's statuses: asking /w
		// alone would call it idle.
		status: map[string]string{
			"/w":   `{"ses_busy":{"type":"busy"},"ses_retry":{"type":"retry","attempt":1,"message":"overloaded","next":5}}`,
			"/x y": `{"ses_far":{"type":"busy"}}`,
		},
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test", Log: testkit.Logger(t)}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	defer func() { stop(); <-done }()

	var got []string
	var msgs []*jetstream.RawStreamMsg
	for seq := uint64(1); seq <= 13; seq++ {
		m := storedEvent(t, ctx, stream, seq)
		var ev Event
		must(t, json.Unmarshal(m.Data, &ev))
		got = append(got, ev.Type+" "+ev.ID)
		msgs = append(msgs, m)
	}
	_, boot := helloOf(t, msgs[0])
	want := []string{"host.hello hello_" + boot,
		"session.updated sync_ses_idle_40", "session.updated sync_ses_task_41", "session.updated sync_ses_busy_42",
		"session.updated sync_ses_retry_43", "session.updated sync_ses_far_44", "session.updated sync_ses_near_45",
		"tool.execute.after " + ToolEventID("ses_idle", "call_1"), "tool.execute.after " + ToolEventID("ses_task", "call_2"),
		"tool.execute.after " + ToolEventID("ses_busy", "call_3"),
		"session.status sync_idle_ses_near_45_" + boot, "session.status sync_idle_ses_task_41_" + boot,
		"session.status sync_idle_ses_idle_40_" + boot}
	if !slices.Equal(got, want) {
		t.Fatalf("published\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var idle struct {
		Properties struct {
			SessionID string `json:"sessionID"`
			Status    struct {
				Type string `json:"type"`
			} `json:"status"`
		} `json:"properties"`
	}
	must(t, json.Unmarshal(msgs[12].Data, &idle))
	if idle.Properties.SessionID != "ses_idle" || idle.Properties.Status.Type != "idle" {
		t.Fatalf("the idle's properties: %+v", idle.Properties)
	}

	// The stream breaks and the bridge catches up again in the same boot: the idles are
	// duplicates, stored once, and take no Host-Seq (only the break's skipped number).
	fake.events <- ""
	fake.events <- `{"payload":{"id":"evt_m","type":"session.idle","properties":{"sessionID":"ses_idle"}}}`
	m := storedEvent(t, ctx, stream, 14)
	if id, seq := m.Header.Get(jetstream.MsgIDHeader), m.Header.Get("Host-Seq"); id != "evt_m" || seq != "15" {
		t.Fatalf("after the second catch-up: %s at Host-Seq %s, want evt_m at 15", id, seq)
	}
	msgs = append(msgs, m)
	for dir, n := range map[string]int{"/session/status?directory=%2Fw": 2, "/session/status?directory=%2Fx+y": 2, "/session/status ": 0} {
		if c := countRequests(fake, "GET "+dir); c != n {
			t.Errorf("%d requests GET %s, want %d: %q", c, dir, n, fake.seen())
		}
	}

	// thatch knew the sessions busy before it went down; the bridge's new boot resets
	// that, and the caught-up idle is the transition that extracts (rule 3).
	st := runtime.NewState()
	var events []runtime.Event
	for _, e := range []struct{ typ, body string }{
		{"host.hello", `{"id":"hello_old","type":"host.hello","properties":{"bootID":"old","api":"v1"}}`},
		{"session.updated", `{"id":"evt_o1","type":"session.updated","properties":{"info":{"id":"ses_idle","directory":"/w","title":"top"}}}`},
		{"session.updated", `{"id":"evt_o2","type":"session.updated","properties":{"info":{"id":"ses_busy","directory":"/w","title":"busy"}}}`},
		{"session.status", `{"id":"evt_o3","type":"session.status","properties":{"sessionID":"ses_idle","status":{"type":"busy"}}}`},
		{"session.status", `{"id":"evt_o4","type":"session.status","properties":{"sessionID":"ses_busy","status":{"type":"busy"}}}`},
	} {
		ev, err := runtime.DecodeEvent("opencode", "opencode.oc-test.event."+e.typ, []byte(e.body))
		must(t, err)
		events = append(events, ev) // stream sequence 0: before the stream of this test
	}
	for _, m := range msgs {
		ev, err := runtime.DecodeEvent("opencode", m.Subject, m.Data)
		if err != nil {
			t.Fatalf("event %d: %v", m.Sequence, err)
		}
		ev.Seq = m.Sequence
		ev.HostSeq, _ = strconv.ParseInt(m.Header.Get("Host-Seq"), 10, 64)
		events = append(events, ev)
	}
	fx, _ := runtime.DefaultRules.ApplyEvents(st, events, map[string]bool{}, time.Now())
	var extracts []string
	for _, c := range fx.Calls {
		if c.Op == runtime.OpCreate && c.Purpose == runtime.PurposeExtract {
			extracts = append(extracts, c.SessionID)
		}
	}
	if !slices.Equal(extracts, []string{"ses_idle"}) {
		t.Fatalf("extractions started for %v, want [ses_idle] (ses_busy is busy, ses_near has no entries): %+v", extracts, fx.Calls)
	}
	if s := st.Sessions["ses_idle"]; s.Status != runtime.StatusIdle || s.Pending() != 2 || !s.Extracting {
		t.Fatalf("ses_idle: status %v, %d pending, extracting %v; want idle, its call and its task's, extracting", s.Status, s.Pending(), s.Extracting)
	}
	if s := st.Sessions["ses_busy"]; s.Status == runtime.StatusIdle || s.Pending() != 1 {
		t.Fatalf("ses_busy: status %v, %d pending; want not idle, 1 pending", s.Status, s.Pending())
	}
}

// TestCatchUpIdleWithoutStatusRoute: an opencode that cannot list its sessions' statuses
// (the route is missing, or it fails) gets no idle from the catch-up: its sessions wait for
// their next turn, as before, rather than being called idle while busy.
func TestCatchUpIdleWithoutStatusRoute(t *testing.T) {
	nc, js, stream := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fake := &fakeOpencode{sessions: `[{"id":"ses_idle","directory":"/w","title":"top","time":{"updated":40}}]`,
		info: map[string]string{"ses_idle": `{}`}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	b := &Bridge{Client: &Client{BaseURL: srv.URL}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test", Log: testkit.Logger(t)}
	must(t, b.catchUp(ctx, time.Now().Add(-time.Minute)))
	if c := countRequests(fake, "GET /session/status?directory=%2Fw"); c != 1 {
		t.Fatalf("%d status requests, want 1", c)
	}
	if info, _ := stream.Info(ctx); info.State.Msgs != 1 {
		t.Fatalf("%d events, want 1 (the session.updated): no idle without the statuses", info.State.Msgs)
	}
}

// TestBridgeStatus: the bridge's state names the opencode it bridges, without the URL's
// credentials, and says whether its event stream is open, since when, and why not.
func TestBridgeStatus(t *testing.T) {
	nc, js, _ := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := freeAddr(t)
	b := &Bridge{Client: &Client{BaseURL: "http://opencode:s3cret@" + addr}, NC: nc, JS: js, Prefix: "opencode", HostID: "oc-test", Log: testkit.Logger(t)}
	if st := b.BridgeStatus(); st.Connected || !st.Since.IsZero() || st.Error != "" {
		t.Fatalf("before Run: %+v", st)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	defer func() { stop(); <-done }()
	wait := func(what string, ok func(*runtime.BridgeStatus) bool) *runtime.BridgeStatus {
		t.Helper()
		var st *runtime.BridgeStatus
		testkit.WaitFor(t, 30*time.Second, what, func() error {
			if st = b.BridgeStatus(); !ok(st) {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		})
		return st
	}

	down := wait("unreachable", func(st *runtime.BridgeStatus) bool { return st.Error != "" })
	if down.Connected || down.Since.IsZero() || down.URL != "http://REDACTED@"+addr || down.HostID != "oc-test" ||
		strings.Contains(down.Error, "s3cret") || !strings.Contains(down.Error, addr) {
		t.Fatalf("while nothing listens: %+v", down)
	}

	fake := &fakeOpencode{events: make(chan string, 16)}
	srv := listenAt(t, addr, fake)
	up := wait("connected", func(st *runtime.BridgeStatus) bool { return st.Connected })
	if up.Error != "" || !up.Since.After(down.Since) {
		t.Fatalf("once opencode answers: %+v (down since %s)", up, down.Since)
	}

	srv.CloseClientConnections() // as a dying server does
	srv.Close()
	gone := wait("unreachable again", func(st *runtime.BridgeStatus) bool { return !st.Connected && st.Error != "" })
	if gone.Since.Before(up.Since) {
		t.Fatalf("after opencode went away: %+v (connected since %s)", gone, up.Since)
	}
}
