package main

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestGoalMet(t *testing.T) {
	cases := []struct {
		goal *Goal
		f    Figure
		want bool
	}{
		{under(15), Figure{Value: 14.9}, true},
		{under(15), Figure{Value: 15}, false},
		{atMost(10), Figure{Value: 10}, true},
		{atMost(10), Figure{Value: 10.01}, false},
		{atLeast(1000), Figure{Value: 1000}, true},
		{atLeast(1000), Figure{Value: 999}, false},
		{ratioAtLeast(0.6), Figure{Value: 600, Baseline: 1000}, true},
		{ratioAtLeast(0.6), Figure{Value: 590, Baseline: 1000}, false},
		{&Goal{Op: "?", Bound: 1}, Figure{Value: 0}, false},
	}
	for _, c := range cases {
		f := c.f
		f.Goal = c.goal
		got := judge(f)
		if got.Met == nil || *got.Met != c.want {
			t.Errorf("%+v against %s %v (of baseline %v): met %v, want %v", c.f, c.goal.Op, c.goal.Bound, c.goal.OfBaseline, got.Met, c.want)
		}
	}
	if judge(Figure{Value: 3}).Met != nil {
		t.Error("a figure without a goal was judged")
	}
}

func TestSummarizeNamesEveryMiss(t *testing.T) {
	run := func(n int, search, remember float64) BenchReport {
		return BenchReport{Run: n, Machine: []Figure{{Name: "NATS echo p99 (start)", Value: float64(n), Unit: "ms"}},
			Figures: []Figure{
				judge(Figure{Name: "memory_search p99", Value: search, Unit: "ms", Target: "≤ 10 ms", Goal: atMost(10)}),
				judge(Figure{Name: "memory_remember p99", Value: remember, Unit: "ms", Target: "≤ 20 ms", Goal: atMost(20)}),
				{Name: "index merge", Value: 2, Unit: "s"},
			}}
	}
	s := summarize([]BenchReport{run(1, 3, 9), run(2, 12.5, 9), run(3, 4, 21)})
	want := []string{"run 2: memory_search p99 12.50 ms (target ≤ 10 ms)", "run 3: memory_remember p99 21.00 ms (target ≤ 20 ms)"}
	if !slices.Equal(s.Missed, want) {
		t.Errorf("missed %q, want %q", s.Missed, want)
	}
	rows := map[string]SummaryRow{}
	for _, r := range s.Summary {
		rows[r.Name] = r
	}
	if r := rows["memory_search p99"]; !slices.Equal(r.Values, []float64{3, 12.5, 4}) || r.MetAll == nil || *r.MetAll {
		t.Errorf("memory_search row %+v: want values 3, 12.5, 4, not met in all runs", r)
	}
	if r := rows["index merge"]; r.MetAll != nil {
		t.Errorf("a figure without a target has metAll %v", *r.MetAll)
	}
	if r := rows["NATS echo p99 (start)"]; !slices.Equal(r.Runs, []int{1, 2, 3}) {
		t.Errorf("the machine's echo is not in the summary of each run: %+v", r)
	}
	if s := summarize([]BenchReport{run(1, 3, 9)}); len(s.Missed) != 0 || !*s.Summary[1].MetAll {
		t.Errorf("a run meeting its targets: %+v", s)
	}
	if s := summarize([]BenchReport{run(0, 11, 9)}); !slices.Equal(s.Missed, []string{"memory_search p99 11.00 ms (target ≤ 10 ms)"}) {
		t.Errorf("a single run's misses: %q", s.Missed)
	}
	var out bytes.Buffer
	printSummary(&out, s)
	if !strings.Contains(out.String(), "MISSED") || !strings.Contains(out.String(), "RUN 3") {
		t.Errorf("summary table:\n%s", out.String())
	}
}

func TestCPUShares(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	from := parseCPUTimes("cpu  1000 0 500 8000 100 0 0 400 50 0")
	to := parseCPUTimes("cpu  1300 100 600 8300 200 50 50 800 80 0")
	user, system, idle, steal, ok := cpuShares(from, to)
	// deltas: user 300+100, system 100+50+50, idle 300+100, steal 400: 1,400 in all
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !ok || !near(user, 400.0/14) || !near(system, 200.0/14) || !near(idle, 400.0/14) || !near(steal, 400.0/14) {
		t.Errorf("shares user %v system %v idle %v steal %v (ok %v)", user, system, idle, steal, ok)
	}
	if _, _, _, _, ok := cpuShares(to, to); ok {
		t.Error("no time passed, yet shares")
	}
	if parseCPUTimes("cpu0 1 2 3 4") != (cpuTimes{}) {
		t.Error("a single CPU's line taken for the machine's")
	}
}
