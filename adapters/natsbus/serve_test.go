package natsbus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
)

// syncLog is a log buffer safe for the server's goroutines.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// listRig is thatch's API server over a real loop and journal, on a broker whose
// max_payload is small: 64 KiB instead of 1 MiB, so a few thousand rows overflow it.
type listRig struct {
	nc    *nats.Conn
	store *journal.Store
	log   *syncLog
}

// newListRig journals sessions sessions of two hosts (ses_00000…), entries entries of
// ses_00000 and dead dead letters, then serves them.
func newListRig(t *testing.T, sessions, entries, dead int) *listRig {
	t.Helper()
	ns := testkit.StartBroker(t, testkit.BrokerOptions{NoJetStream: true, MaxPayload: 64 << 10})
	store, err := journal.Open(filepath.Join(t.TempDir(), "thatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })

	st := runtime.NewState()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var evs []runtime.Event
	for i := range sessions {
		id := fmt.Sprintf("ses_%05d", i)
		host := []string{"h1", "h2"}[i%2]
		evs = append(evs, runtime.Event{ID: "c" + id, Type: "session.created", HostID: host, SessionID: id,
			Info: &runtime.SessionInfo{ID: id, Title: "a session with a title of some length", Directory: "/w/project"}})
	}
	for i := range entries {
		evs = append(evs, runtime.Event{ID: fmt.Sprintf("t%d", i), Type: "tool.execute.after", HostID: "h1", SessionID: "ses_00000",
			Tool: &runtime.ToolExec{CallID: fmt.Sprintf("call_%05d", i), Tool: "bash", Output: "x"}})
	}
	b := &runtime.Batch{Now: now, State: st}
	b.Effects, _ = runtime.DefaultRules.ApplyEvents(st, evs, map[string]bool{}, now)
	b.Effects.Calls = nil // the reminders: no host answers here
	for i := range dead {
		b.DeadLetters = append(b.DeadLetters, runtime.DeadLetter{Seq: uint64(i + 1), Subject: "opencode.h1.event.x", Reason: "bad", Body: []byte(strings.Repeat("b", 3000))})
	}
	if err := store.Commit(b); err != nil {
		t.Fatal(err)
	}

	logs := &syncLog{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	loop := runtime.NewLoop(store, nil, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	<-loop.Ready()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{NC: nc, Prefix: "thatch", Loop: loop, Log: log, DeadLetters: store.DeadLetterPage}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Stop()
		nc.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("loop: %v", err)
		}
	})
	client, _ := testkit.Connect(t, ns.ClientURL(), "")
	return &listRig{nc: client, store: store, log: logs}
}

// call asks method and returns its result, or its error as a Go error.
func (r *listRig) call(method string, params any) (json.RawMessage, *runtime.HostError) {
	data, _ := json.Marshal(params)
	msg, err := r.nc.Request("thatch.api."+method, data, 10*time.Second)
	if err != nil {
		return nil, &runtime.HostError{Name: "RequestError", Message: err.Error()}
	}
	var env struct {
		Result json.RawMessage    `json:"result"`
		Error  *runtime.HostError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &env); err != nil {
		return nil, &runtime.HostError{Name: "DecodeError", Message: err.Error()}
	}
	return env.Result, env.Error
}

// all pages through method and returns the ids of its rows (idKey) and the number of pages.
func (r *listRig) all(t *testing.T, method string, params map[string]any, idKey string) ([]string, int) {
	t.Helper()
	var ids []string
	cursor := ""
	for pages := 1; ; pages++ {
		p := map[string]any{"cursor": cursor}
		for k, v := range params {
			p[k] = v
		}
		raw, herr := r.call(method, p)
		if herr != nil {
			t.Fatalf("%s page %d: %v", method, pages, herr)
		}
		if len(raw) > 64<<10 {
			t.Fatalf("%s page %d is %d bytes", method, pages, len(raw))
		}
		var pg Page
		if err := json.Unmarshal(raw, &pg); err != nil {
			t.Fatalf("%s page %d: %v in %.200s", method, pages, err, raw)
		}
		for _, row := range pg.Items {
			var m map[string]any
			_ = json.Unmarshal(row, &m)
			ids = append(ids, fmt.Sprint(m[idKey]))
		}
		if pg.NextCursor == "" {
			return ids, pages
		}
		cursor = pg.NextCursor
	}
}

// A list over the broker's max_payload is refused with a TooLargeError that says how to
// page, and logged with its subject and size, instead of leaving the caller to time out;
// with a cursor the same list comes whole, in pages that fit, each row once.
func TestListsPageWithinMaxPayload(t *testing.T) {
	r := newListRig(t, 2000, 1500, 30)

	_, herr := r.call("sessions", map[string]any{})
	if herr == nil || herr.Name != "TooLargeError" || !strings.Contains(herr.Message, `"cursor"`) {
		t.Fatalf("sessions over max_payload answered %v, want a TooLargeError naming the cursor", herr)
	}
	if l := r.log.String(); !strings.Contains(l, "reply over the broker's max_payload") || !strings.Contains(l, "subject=thatch.api.sessions") || !strings.Contains(l, "bytes=") {
		t.Fatalf("the refused reply was not logged with its subject and size:\n%s", l)
	}

	ids, pages := r.all(t, "sessions", nil, "sessionID")
	if len(ids) != 2000 || pages < 2 {
		t.Fatalf("paged sessions: %d rows in %d pages, want 2000 in several", len(ids), pages)
	}
	for i, id := range ids {
		if want := fmt.Sprintf("ses_%05d", i); id != want {
			t.Fatalf("row %d is %s, want %s (each once, in id order)", i, id, want)
		}
	}
	h2, _ := r.all(t, "sessions", map[string]any{"hostID": "h2", "limit": 300}, "sessionID")
	if len(h2) != 1000 || h2[0] != "ses_00001" {
		t.Fatalf("h2's sessions: %d, first %s; want 1000 from ses_00001", len(h2), h2[0])
	}

	// The bare array of the contract still answers when it fits: with a limit, or a
	// short list.
	raw, herr := r.call("sessions", map[string]any{"limit": 10})
	var rows []runtime.SessionView
	if herr != nil || json.Unmarshal(raw, &rows) != nil || len(rows) != 10 || rows[9].SessionID != "ses_00009" {
		t.Fatalf("sessions {limit: 10}: %v %.100s", herr, raw)
	}

	entries, _ := r.all(t, "entries", map[string]any{"sessionID": "ses_00000", "limit": 700}, "id")
	if len(entries) != 1500 || entries[0] != "call_00000" || entries[1499] != "call_01499" {
		t.Fatalf("paged entries: %d rows, want 1500 in arrival order", len(entries))
	}
	if _, herr := r.call("entries", map[string]any{"sessionID": "ses_nope", "cursor": ""}); herr == nil || herr.Name != "UnknownSessionError" {
		t.Fatalf("entries of an unknown session: %v", herr)
	}

	// Dead letters (the contract's method): newest first, bodies cut to 2,000 characters.
	dead, _ := r.all(t, "deadletters", map[string]any{"limit": 7}, "streamSeq")
	if len(dead) != 30 || dead[0] != "30" || dead[29] != "1" {
		t.Fatalf("paged dead letters: %v", dead)
	}
	raw, herr = r.call("deadletters", map[string]any{"limit": 2})
	var dl []runtime.DeadLetterView
	if herr != nil || json.Unmarshal(raw, &dl) != nil || len(dl) != 2 || dl[0].StreamSeq != 30 || len([]rune(dl[0].Body)) != runtime.DeadBodyMax+1 {
		t.Fatalf("deadletters {limit: 2}: %v %.200s", herr, raw)
	}

	for _, bad := range []map[string]any{{"limit": 0}, {"limit": MaxPage + 1, "cursor": ""}} {
		if _, herr := r.call("sessions", bad); herr == nil || herr.Name != "BadRequestError" {
			t.Fatalf("sessions %v: %v, want BadRequestError", bad, herr)
		}
	}
	if _, herr := r.call("deadletters", map[string]any{"cursor": "x"}); herr == nil || herr.Name != "BadRequestError" {
		t.Fatalf("deadletters with a foreign cursor: %v", herr)
	}
}
