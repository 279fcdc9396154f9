package main

import "testing"

// TestPluralAndUSD: one is singular, zero and many plural; amounts under a dollar keep
// four decimals, larger ones and zero two.
func TestPluralAndUSD(t *testing.T) {
	if got := plural(1, "day", "days") + " " + plural(int64(0), "day", "days") + " " + plural(7, "day", "days"); got != "day days days" {
		t.Errorf("plural: %q", got)
	}
	for v, want := range map[float64]string{0: "$0.00", 0.0042: "$0.0042", 1: "$1.00", 12.345: "$12.35"} {
		if got := formatUSD(v); got != want {
			t.Errorf("formatUSD(%v) = %q, want %q", v, got, want)
		}
	}
}
