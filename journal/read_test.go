package journal_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/runtime"
)

// PayloadEntries reads only what a payload shows, and the payload it renders is the one
// the whole bodies render, byte for byte: escapes, numbers, other scripts, args of any
// shape and length, long titles and outputs.
func TestPayloadEntriesRenderLikeWholeBodies(t *testing.T) {
	s := open(t)
	long := strings.Repeat("é<&>\u2028", 100)
	bodies := []runtime.Body{
		{Tool: "bash", Args: json.RawMessage(`{"command":"go test ./... \u003e out","n":1e21,"f":1.50}`), Title: "run", Output: "ok", Metadata: json.RawMessage(`{"exit":0}`)},
		{Tool: "multiedit", Args: json.RawMessage(`{"edits":[{"oldString":"` + strings.Repeat("x", 5000) + `"}],"filePath":"/w/a.go"}`), Output: long},
		{Tool: "read", Args: json.RawMessage(`{"filePath":"/w/` + long + `"}`), Title: strings.Repeat("t", 300), Output: strings.Repeat("ü", 3000)},
		{Tool: "todowrite", Args: json.RawMessage(`{}`), Output: ""},
		{Tool: "webfetch", Args: json.RawMessage(`null`), Output: "(no output)"},
		{Tool: "x"},
		{Tool: "list", Args: json.RawMessage(`["a","b"]`), Output: "\"quoted\"\n\ttabbed\\"},
		{Tool: "big", Args: json.RawMessage(`{"a":"b"}`), Output: "out", Metadata: json.RawMessage(`{"m":"` + strings.Repeat("m", 1<<20) + `"}`)},
	}
	st := runtime.NewState()
	st.Sessions["ses_a"] = &runtime.Session{ID: "ses_a", HostID: "h1", Kind: runtime.KindTop}
	fx := runtime.NewEffects()
	fx.Sessions["ses_a"] = true
	now := time.Now()
	var ids []string
	for i, b := range bodies {
		id := fmt.Sprintf("call_%d", i)
		ids = append(ids, id)
		fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryInsert, Root: "ses_a", ID: id, At: now, Body: &b})
	}
	fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryClaim, Root: "ses_a", Claimant: "ses_c", At: now, IDs: ids})
	if err := s.Commit(&runtime.Batch{Now: now, State: st, Effects: fx}); err != nil {
		t.Fatal(err)
	}
	whole, err := s.Payload("ses_a", "ses_c")
	if err != nil {
		t.Fatal(err)
	}
	shown, err := s.PayloadEntries("ses_a", "ses_c")
	if err != nil {
		t.Fatal(err)
	}
	if len(shown) != len(bodies) || len(whole) != len(bodies) {
		t.Fatalf("%d and %d entries read, want %d", len(whole), len(shown), len(bodies))
	}
	for i, e := range shown {
		if e.Body.Metadata != nil {
			t.Errorf("entry %s: the metadata was read", e.ID)
		}
		if n := len([]rune(string(e.Body.Args))); n > runtime.PayloadArgsMax+1 {
			t.Errorf("entry %s: %d characters of args read", e.ID, n)
		}
		w := runtime.FormatPayload(runtime.Payload{Root: "ses_a", Entries: whole[i : i+1]}, nil)
		g := runtime.FormatPayload(runtime.Payload{Root: "ses_a", Entries: shown[i : i+1]}, nil)
		if w != g {
			t.Errorf("entry %s renders\n%s\nwant\n%s", e.ID, g, w)
		}
	}
	if none, err := s.PayloadEntries("ses_a", "ses_other"); err != nil || len(none) != 0 {
		t.Fatalf("another claimant's payload: %v, %v", none, err)
	}
}
