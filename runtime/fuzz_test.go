package runtime

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// realSamples returns the bus events opencode 1.18.33 emitted (testdata), unwrapped from
// /global/event frames where needed.
func realSamples(t testing.TB) [][]byte {
	f, err := os.Open("../testdata/opencode-events-1.18.33.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var frame struct {
			Payload json.RawMessage `json:"payload"`
		}
		line := append([]byte(nil), sc.Bytes()...)
		if json.Unmarshal(line, &frame) == nil && len(frame.Payload) > 0 {
			line = frame.Payload
		}
		out = append(out, line)
	}
	return out
}

// Every event the real opencode emitted decodes, or is an unknown type thatch ignores.
func TestRealOpencodeEventsDecode(t *testing.T) {
	known := 0
	for _, body := range realSamples(t) {
		var env struct{ ID, Type string }
		_ = json.Unmarshal(body, &env)
		ev, err := DecodeEvent("opencode", "opencode.h1.event."+env.Type, body)
		if env.ID == "" {
			if err == nil {
				t.Errorf("a body without an id decoded: %s", body)
			}
			continue // opencode's sync frames carry their id elsewhere: rejected, as the protocol says
		}
		if err != nil {
			t.Errorf("%s: %v", env.Type, err)
			continue
		}
		if Known(ev.Type) {
			known++
		}
	}
	if known < 8 {
		t.Fatalf("only %d known events among the samples", known)
	}
}

func fuzzState(now time.Time) *State {
	s := NewState()
	DefaultRules.Step(s, Event{ID: "e1", Type: "session.created", HostID: "h1", SessionID: "ses_a", Info: &SessionInfo{ID: "ses_a", Directory: "/w"}}, now)
	DefaultRules.Step(s, Event{ID: "e2", Type: "session.created", HostID: "h1", SessionID: "ses_x", Info: &SessionInfo{ID: "ses_x", ParentID: "ses_a", Title: ExtractionTitle}}, now)
	DefaultRules.Step(s, Event{ID: "e3", Type: "tool.execute.after", HostID: "h1", SessionID: "ses_a", Tool: &ToolExec{CallID: "c1", Tool: "bash"}}, now)
	return s
}

// FuzzDecodeEvent: no body crashes the decoder or the core; a rejection is always a
// bad-event error; an accepted event of a known type applies.
func FuzzDecodeEvent(f *testing.F) {
	for _, body := range realSamples(f) {
		f.Add("session.status", body)
	}
	f.Add("tool.execute.after", []byte(`{"id":"e","type":"tool.execute.after","properties":{"sessionID":"ses_a","callID":"c9","tool":"bash","args":{"x":"`+strings.Repeat("y", 3000)+`"},"output":"o"}}`))
	f.Add("host.hello", []byte(`{"id":"h","type":"host.hello","properties":{"hostID":"h1","api":"v2","bootID":"b2","resumed":["ses_a"]}}`))
	// Where encoding/json's ways are easy to miss: names matched without regard to case
	// (ſ and the Kelvin sign fold to s and k), escaped names, repeated names, invalid
	// UTF-8, null raw values, a number for a string, nesting past the depth limit,
	// trailing data, a byte order mark.
	f.Add("x", []byte(`{"ID":"e","TYPE":"session.idle","Properties":{"SessionID":"s"}}`))
	f.Add("x", []byte(`{"id":"e","type":"session.idle","properties":{"ſessionID":"s"}}`))
	f.Add("x", []byte(`{"id":"e","type":"tool.execute.after","properties":{"sessionID":"s","callID":"c","tool":"t","\u212aey":1,"ou\u0074put":"o"}}`))
	f.Add("x", []byte(`{"id":"a","id":"b","type":"session.idle","properties":{"sessionID":"s","sessionID":"t"}}`))
	f.Add("x", []byte("{\"id\":\"e\",\"type\":\"tool.execute.after\",\"properties\":{\"sessionID\":\"s\",\"callID\":\"c\",\"tool\":\"t\",\"output\":\"\xff\xfe\\ud800\"}}"))
	f.Add("x", []byte(`{"id":"e","type":"tool.execute.after","properties":{"sessionID":"s","callID":"c","tool":"t","args":null,"metadata":null,"info":null}}`))
	f.Add("x", []byte(`{"id":"e","type":"tool.execute.after","properties":{"sessionID":5,"callID":"c","tool":"t"}}`))
	f.Add("x", []byte(`{"id":"e","type":"tool.execute.after","properties":{"sessionID":"s","callID":"c","tool":"t","args":{"a":`+strings.Repeat("[", 10001)+strings.Repeat("]", 10001)+`}}}`))
	f.Add("x", []byte(`{"id":"e","type":"session.idle","properties":{"sessionID":"s"}} {}`))
	f.Add("x", []byte("\ufeff{\"id\":\"e\",\"type\":\"session.idle\",\"properties\":{\"sessionID\":\"s\"}}"))
	f.Add("x", []byte(`{"id":1}`))
	f.Add("x", []byte(`[]`))
	f.Add("x", []byte(``))
	f.Fuzz(func(t *testing.T, tail string, body []byte) {
		ev, err := DecodeEvent("opencode", "opencode.h1.event."+tail, body)
		// The event, or the error, is the one encoding/json alone decodes.
		std, stdErr := decodeEvent("opencode", "opencode.h1.event."+tail, body, func(data []byte, v *envelope) error { return json.Unmarshal(data, v) })
		if fmt.Sprint(err) != fmt.Sprint(stdErr) || !reflect.DeepEqual(ev, std) {
			t.Fatalf("decoded %+v, %v; encoding/json alone decodes %+v, %v", ev, err, std, stdErr)
		}
		if err != nil {
			if !errors.Is(err, ErrBadEvent) {
				t.Fatalf("a rejection that is not ErrBadEvent: %v", err)
			}
			return
		}
		if ev.ID == "" || ev.Type == "" || ev.HostID != "h1" {
			t.Fatalf("accepted an event without id, type or host: %+v", ev)
		}
		now := time.Unix(1e9, 0)
		s := fuzzState(now)
		DefaultRules.Step(s, ev, now.Add(time.Hour))
		checkInvariants(t, s)
	})
}

// FuzzToolCall: no tool call crashes the core or leaves an entry claimed by nobody.
func FuzzToolCall(f *testing.F) {
	f.Add(ToolPayload, "ses_x", []byte(`{}`))
	f.Add(ToolDone, "ses_x", []byte(`{"new":1,"updated":2,"deleted":3}`))
	f.Add(ToolDone, "ses_a", []byte(`{"new":-1}`))
	f.Add(ToolDone, "ses_x", []byte(`{"new":1e400}`))
	f.Add(ToolPayload, "nobody", []byte(`null`))
	f.Add("other", "ses_a", []byte(`[`))
	f.Fuzz(func(t *testing.T, name, session string, args []byte) {
		now := time.Unix(1e9, 0)
		s := fuzzState(now)
		fx := DefaultRules.Step(s, ToolCall{Name: name, SessionID: session, Args: json.RawMessage(args)}, now)
		if fx.Reply == nil {
			t.Fatal("a tool call got no reply")
		}
		if e := fx.Reply.Err; e != nil && e.Name != "UnknownSessionError" && e.Name != "BadRequestError" {
			t.Fatalf("unexpected error %s", e.Name)
		}
		checkInvariants(t, s)
	})
}

// checkInvariants: every accepted entry is claimed by a tracked session, every entry of a
// top-level session, ids unique per root.
func checkInvariants(t *testing.T, s *State) {
	t.Helper()
	if err := s.CheckIndex(); err != nil {
		t.Fatal(err)
	}
	for _, sess := range s.Sessions {
		seen := map[string]bool{}
		for _, e := range sess.Entries {
			if sess.ParentID != "" {
				t.Fatalf("child %s holds entries", sess.ID)
			}
			if seen[e.ID] {
				t.Fatalf("entry %s twice in %s", e.ID, sess.ID)
			}
			seen[e.ID] = true
			if e.Accepted() && s.Sessions[e.Claimant()] == nil {
				t.Fatalf("entry %s claimed by untracked %s", e.ID, e.Claimant())
			}
		}
	}
}
