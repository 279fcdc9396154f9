package backoff

import (
	"slices"
	"testing"
	"time"
)

// takes returns the next n waits of b.
func takes(b *Backoff, n int) []time.Duration {
	var got []time.Duration
	for range n {
		got = append(got, b.Next())
	}
	return got
}

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		b    Backoff
		want []time.Duration
	}{
		{"zero value: the defaults", Backoff{},
			[]time.Duration{250 * ms, 500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{"own first and ceiling", Backoff{First: 100 * ms, Max: 300 * ms},
			[]time.Duration{100 * ms, 200 * ms, 300 * ms, 300 * ms}},
		{"only a ceiling", Backoff{Max: 30 * time.Second},
			[]time.Duration{250 * ms, 500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}},
		{"a first above the ceiling is kept once", Backoff{First: 8 * time.Second},
			[]time.Duration{8 * time.Second, 5 * time.Second, 5 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b
			if got := takes(&b, len(tc.want)); !slices.Equal(got, tc.want) {
				t.Fatalf("waits %v, want %v", got, tc.want)
			}
		})
	}
}

// Reset starts the series over, and Retrying says whether a wait was given since.
func TestBackoffReset(t *testing.T) {
	var b Backoff
	if b.Retrying() {
		t.Fatal("a new Backoff says it is retrying")
	}
	takes(&b, 4)
	if !b.Retrying() {
		t.Fatal("a Backoff that gave waits says it is not retrying")
	}
	b.Reset()
	if b.Retrying() {
		t.Fatal("a reset Backoff says it is retrying")
	}
	if got := b.Next(); got != DefaultFirst {
		t.Fatalf("first wait after Reset %v, want %v", got, DefaultFirst)
	}
}
