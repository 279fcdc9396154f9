package protocol_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// The envelope's bytes are the contract's, and decode back to what was encoded.
func TestEnvelopeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		result any
		err    *protocol.Error
		wire   string
	}{
		{map[string]any{"id": "ses_1"}, nil, `{"result":{"id":"ses_1"}}`},
		{true, nil, `{"result":true}`},
		{nil, nil, `{"result":null}`},
		{[]string{}, nil, `{"result":[]}`},
		{"<&>", nil, `{"result":"\u003c\u0026\u003e"}`}, // escaped as json.Marshal always did
		{nil, &protocol.Error{Name: protocol.NotFound, Message: "session ses_1 not found"},
			`{"error":{"name":"NotFoundError","message":"session ses_1 not found"}}`},
		{"ignored", &protocol.Error{Name: protocol.NoResponder, Message: "m", NoResponder: true},
			`{"error":{"name":"NoResponderError","message":"m"}}`},
	} {
		data, err := protocol.Encode(tc.result, tc.err)
		if err != nil || string(data) != tc.wire {
			t.Errorf("Encode(%v, %v) = %s, %v; want %s", tc.result, tc.err, data, err, tc.wire)
			continue
		}
		// The same bytes as the map the adapters used to marshal.
		old := map[string]any{"result": tc.result}
		if tc.err != nil {
			old = map[string]any{"error": tc.err}
		}
		if want, _ := json.Marshal(old); string(want) != string(data) {
			t.Errorf("Encode = %s, the old envelope %s", data, want)
		}
		result, rerr, err := protocol.Decode(data)
		if err != nil {
			t.Errorf("Decode(%s): %v", data, err)
			continue
		}
		if tc.err != nil {
			if rerr == nil || rerr.Name != tc.err.Name || rerr.Message != tc.err.Message || rerr.NoResponder || result != nil {
				t.Errorf("Decode(%s) = %s, %+v; want the error %+v", data, result, rerr, tc.err)
			}
			continue
		}
		want, _ := json.Marshal(tc.result)
		if rerr != nil || string(result) != string(want) {
			t.Errorf("Decode(%s) = %s, %v; want the result %s", data, result, rerr, want)
		}
	}
	if _, err := protocol.Encode(func() {}, nil); err == nil {
		t.Error("a result that cannot be encoded encoded")
	}
}

// EncodeTo appends Encode's bytes, and nothing when the result cannot be encoded.
func TestEncodeTo(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("before|")
	if err := protocol.EncodeTo(&b, map[string]any{"a": "<b>"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := protocol.EncodeTo(&b, func() {}, nil); err == nil {
		t.Fatal("a result that cannot be encoded encoded")
	}
	want, _ := protocol.Encode(map[string]any{"a": "<b>"}, nil)
	if b.String() != "before|"+string(want) {
		t.Fatalf("EncodeTo wrote %q, want %q", b.String(), "before|"+string(want))
	}
}

// A reply that is neither {result} nor {error} is ErrBadReply; an error wins over a result.
func TestDecodeMalformed(t *testing.T) {
	for _, data := range []string{``, `garbage`, `null`, `[]`, `"result"`, `{}`, `{"other":1}`,
		`{"error":null}`, `{"error":"a string"}`, `{"result":1`} {
		result, rerr, err := protocol.Decode([]byte(data))
		if !errors.Is(err, protocol.ErrBadReply) || result != nil || rerr != nil {
			t.Errorf("Decode(%q) = %s, %v, %v; want ErrBadReply", data, result, rerr, err)
		}
	}
	result, rerr, err := protocol.Decode([]byte(`{"result":1,"error":{"name":"X","message":"m"}}`))
	if err != nil || result != nil || rerr == nil || rerr.Error() != "X: m" {
		t.Errorf("both: %s, %v, %v; want the error", result, rerr, err)
	}
	result, rerr, err = protocol.Decode([]byte(`{"error":{}}`))
	if err != nil || result != nil || rerr == nil || rerr.Name != "" {
		t.Errorf("a nameless error: %s, %v, %v; want it as it is", result, rerr, err)
	}
}

// A repeat is answered from memory; a reply not kept is not; an empty key never is.
func TestMemoRepeats(t *testing.T) {
	m := protocol.NewMemo(protocol.MemoSize)
	acts := 0
	act := func(reply string, keep bool) func() ([]byte, bool) {
		return func() ([]byte, bool) { acts++; return []byte(reply), keep }
	}
	if r, repeat := m.Do("k", act("first", true), nil); string(r) != "first" || repeat {
		t.Fatalf("first: %s, %v", r, repeat)
	}
	if r, repeat := m.Do("k", act("second", true), nil); string(r) != "first" || !repeat || acts != 1 {
		t.Fatalf("repeat: %s, %v after %d acts; want the first reply from memory", r, repeat, acts)
	}
	if r, repeat := m.Do("refused", act("no", false), nil); string(r) != "no" || repeat {
		t.Fatalf("refused: %s, %v", r, repeat)
	}
	if r, repeat := m.Do("refused", act("yes", true), nil); string(r) != "yes" || repeat || acts != 3 {
		t.Fatalf("a repeat of a reply not kept: %s, %v after %d acts; want it to act", r, repeat, acts)
	}
	m.Do("", act("a", true), nil)
	if r, repeat := m.Do("", act("b", true), nil); string(r) != "b" || repeat || m.Len() != 2 {
		t.Fatalf("empty key: %s, %v, %d kept; want no memory", r, repeat, m.Len())
	}
}

// A repeat that arrives while the first request is in flight waits for its reply; when
// that reply is not kept, the waiters act for themselves, one at a time.
func TestMemoInFlight(t *testing.T) {
	m := protocol.NewMemo(8)
	for _, keep := range []bool{true, false} {
		key := fmt.Sprint("k", keep)
		started, release := make(chan struct{}), make(chan struct{})
		var acts, inAct atomic.Int32
		act := func() ([]byte, bool) {
			if inAct.Add(1) != 1 {
				t.Error("two requests with one key acted at once")
			}
			defer inAct.Add(-1)
			if acts.Add(1) == 1 {
				close(started)
				<-release
			}
			return []byte("reply"), keep
		}
		first := make(chan bool)
		go func() { _, repeat := m.Do(key, act, nil); first <- repeat }()
		<-started
		var wg sync.WaitGroup
		var waiting atomic.Int32
		repeats := make(chan bool, 3)
		for range 3 {
			wg.Go(func() {
				r, repeat := m.Do(key, act, func() { waiting.Add(1) })
				repeats <- repeat && string(r) == "reply"
			})
		}
		testkit.WaitFor(t, 10*time.Second, "three callers waiting", func() bool { return waiting.Load() == 3 })
		if n := acts.Load(); n != 1 {
			t.Fatalf("keep=%v: %d acts while the first is in flight", keep, n)
		}
		close(release)
		if <-first {
			t.Errorf("keep=%v: the first request said repeat", keep)
		}
		wg.Wait()
		close(repeats)
		n := 0
		for r := range repeats {
			if r {
				n++
			}
		}
		if keep && (n != 3 || acts.Load() != 1) {
			t.Errorf("kept: %d of 3 waiters got the first's reply, %d acts", n, acts.Load())
		}
		if !keep && (n != 0 || acts.Load() != 4) {
			t.Errorf("not kept: %d waiters answered from memory, %d acts; want each to act", n, acts.Load())
		}
	}
}

// The memo keeps the replies of its size keys used last: the least recently used goes.
func TestMemoBound(t *testing.T) {
	const size = 3
	m := protocol.NewMemo(size)
	acted := map[string]int{}
	do := func(key string) bool {
		_, repeat := m.Do(key, func() ([]byte, bool) { acted[key]++; return []byte(key), true }, nil)
		return repeat
	}
	for _, k := range []string{"a", "b", "c"} {
		do(k)
	}
	if !do("a") { // a is now the most recently used: b goes next
		t.Fatal("a was forgotten within the bound")
	}
	do("d")
	if m.Len() != size {
		t.Fatalf("%d keys kept, want %d", m.Len(), size)
	}
	if !do("a") || !do("c") || !do("d") {
		t.Fatal("a recently used key was forgotten")
	}
	if do("b") || acted["b"] != 2 {
		t.Fatalf("b, the least recently used, was kept (acted %d times)", acted["b"])
	}
	for i := range 10 * protocol.MemoSize {
		do(fmt.Sprint("many", i))
	}
	if m.Len() != size {
		t.Fatalf("%d keys kept after many, want %d", m.Len(), size)
	}
}
