package memory

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	c := Clock{Wall: 100, Logical: 3}
	if got := c.Tick(50); got != (Clock{100, 4}) { // the wall clock went back: logical moves
		t.Errorf("tick behind = %v", got)
	}
	if got := c.Tick(200); got != (Clock{200, 0}) {
		t.Errorf("tick ahead = %v", got)
	}
	for _, tc := range []struct {
		r    Clock
		now  int64
		want Clock
	}{
		{Clock{100, 7}, 90, Clock{100, 8}},  // same wall: past both logicals
		{Clock{150, 2}, 90, Clock{150, 3}},  // received ahead: past it
		{Clock{50, 9}, 90, Clock{100, 4}},   // held ahead
		{Clock{50, 9}, 300, Clock{300, 0}},  // now ahead of both
		{Clock{300, 1}, 300, Clock{300, 2}}, // received = now
	} {
		got := c.Receive(tc.r, tc.now)
		if got != tc.want {
			t.Errorf("receive %v at %d = %v, want %v", tc.r, tc.now, got, tc.want)
		}
		if got.Compare(c) <= 0 || got.Compare(tc.r) <= 0 {
			t.Errorf("receive %v at %d = %v: not after both", tc.r, tc.now, got)
		}
	}
}

func testVersion() Version {
	return Version{Format: 1, ID: "mem_0195519a3f2b1a2b3c4d", Project: teamProject, Kind: "fact", Content: "Use pnpm", Tags: []string{"js"},
		CreatedAt: t0, UpdatedAt: t0, Op: "create", Author: "alice", HLC: Clock{Wall: t0.UnixMilli()}, Node: "n_0123456789abcdef"}
}

func TestDecodeVersion(t *testing.T) {
	v := testVersion()
	got, err := DecodeVersion(v.Encode())
	if err != nil || got.Key() != v.Key() || got.Content != v.Content || !got.CreatedAt.Equal(t0) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	kind := func(data []byte) string {
		_, err := DecodeVersion(data)
		var re *RecordError
		if !errors.As(err, &re) {
			return "ok"
		}
		return re.Kind
	}
	mod := func(f func(*Version)) []byte { w := testVersion(); f(&w); return w.Encode() }
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"not json":      {[]byte("{"), RejectMalformed},
		"no format":     {[]byte(`{"id":"x"}`), RejectMalformed},
		"newer format":  {[]byte(`{"format":2,"whatever":true}`), RejectFormat},
		"bad id":        {mod(func(v *Version) { v.ID = "mem_x" }), RejectMalformed},
		"folder key":    {mod(func(v *Version) { v.Project = "/home/x" }), RejectMalformed},
		"bad kind":      {mod(func(v *Version) { v.Kind = "rumour" }), RejectMalformed},
		"no author":     {mod(func(v *Version) { v.Author = "" }), RejectMalformed},
		"no clock":      {mod(func(v *Version) { v.HLC = Clock{} }), RejectMalformed},
		"empty content": {mod(func(v *Version) { v.Content = "  " }), RejectMalformed},
		"long content":  {mod(func(v *Version) { v.Content = strings.Repeat("x", MaxContent+1) }), RejectOversized},
		"huge record":   {mod(func(v *Version) { v.Content = strings.Repeat("é", MaxRecord) }), RejectOversized},
		"nine tags":     {mod(func(v *Version) { v.Tags = strings.Fields("a b c d e f g h i") }), RejectMalformed},
		"trailing data": {append(testVersion().Encode(), []byte(` {}`)...), RejectMalformed},
	} {
		if got := kind(tc.data); got != tc.want {
			t.Errorf("%s: %s, want %s", name, got, tc.want)
		}
	}
	if _, err := DecodeVersion([]byte(`{"format":7}`)); !errors.Is(err, ErrNewerFormat) {
		t.Errorf("format 7: %v, want ErrNewerFormat", err)
	}
	now := t0
	if err := CheckVersion(v, "other", v.ID, now); !isKind(err, RejectProject) {
		t.Errorf("another project's subject: %v", err)
	}
	if err := CheckVersion(v, v.Project, "mem_00000000000000000000", now); !isKind(err, RejectProject) {
		t.Errorf("another memory's subject: %v", err)
	}
	if err := CheckVersion(v, v.Project, v.ID, now.Add(-25*time.Hour)); !isKind(err, RejectFuture) {
		t.Errorf("a clock 25 h ahead: %v", err)
	}
	if err := CheckVersion(v, v.Project, v.ID, now.Add(-23*time.Hour)); err != nil {
		t.Errorf("a clock 23 h ahead: %v", err)
	}
}

func isKind(err error, kind string) bool {
	var re *RecordError
	return errors.As(err, &re) && re.Kind == kind
}

func TestDecide(t *testing.T) {
	held := testVersion()
	later := held
	later.HLC.Logical++
	if d := Decide(&held, held, ""); !d.Same {
		t.Errorf("the same version: %+v", d)
	}
	if d := Decide(&later, held, ""); d.Take || d.Same {
		t.Errorf("an earlier version: %+v", d)
	}
	if d := Decide(&held, later, ""); !d.Take {
		t.Errorf("a later version: %+v", d)
	}
	tie := held
	tie.Author = "bob" // same clock: the author breaks the tie, the same way everywhere
	if Decide(&held, tie, "").Take == Decide(&tie, held, "").Take {
		t.Error("a tie is decided the same way from both sides")
	}
	if d := Decide(nil, held, "mem_00000000000000000000"); d.DuplicateOf != "mem_00000000000000000000" {
		t.Errorf("a smaller live duplicate: %+v", d)
	}
	if d := Decide(nil, held, "mem_ffffffffffffffffffff"); d.ForgetDuplicate != "mem_ffffffffffffffffffff" {
		t.Errorf("a greater live duplicate: %+v", d)
	}
	gone := held
	gone.Forgotten = true
	if d := Decide(nil, gone, "mem_00000000000000000000"); d.DuplicateOf != "" || d.ForgetDuplicate != "" {
		t.Errorf("a forgotten version is nobody's duplicate: %+v", d)
	}
}

func TestShareableProject(t *testing.T) {
	for _, p := range []string{"/home/dev/shop", `C:\src`, "a.b", "", "with space"} {
		if err := ShareableProject(p); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%q: %v", p, err)
		}
	}
	if err := ShareableProject("/home/dev/shop"); err == nil || !strings.Contains(err.Error(), "folder of this machine") {
		t.Errorf("a directory key's refusal says why: %v", err)
	}
	for _, p := range []string{"0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c", "global"} {
		if err := ShareableProject(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
}

// FuzzDecodeVersion: any bytes decode to a valid version or a RecordError, never a panic;
// a version decoded encodes to a record that decodes to the same version.
func FuzzDecodeVersion(f *testing.F) {
	f.Add(testVersion().Encode())
	f.Add([]byte(`{"format":2}`))
	f.Add([]byte(`{"format":1,"id":"mem_0195519a3f2b1a2b3c4d","tags":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := DecodeVersion(data)
		if err != nil {
			var re *RecordError
			if !errors.As(err, &re) {
				t.Fatalf("not a RecordError: %v", err)
			}
			return
		}
		again, err := DecodeVersion(v.Encode())
		if err != nil && !isKind(err, RejectOversized) {
			t.Fatalf("re-encoded version refused: %v", err)
		}
		if err == nil && (again.Key() != v.Key() || again.Content != v.Content || CompareVersions(again, v) != 0) {
			t.Fatalf("round trip changed the version: %+v, was %+v", again, v)
		}
	})
}
