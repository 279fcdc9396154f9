package main

import (
	"fmt"
	"io"
	goruntime "runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Figure is one measured figure with its definition, and its target when it has one.
type Figure struct {
	Name       string  `json:"name"`
	Value      float64 `json:"value"`
	Unit       string  `json:"unit"`
	Baseline   float64 `json:"baseline,omitempty"`
	Ratio      float64 `json:"ratio,omitempty"`
	Target     string  `json:"target,omitempty"` // as a reader says it
	Goal       *Goal   `json:"goal,omitempty"`   // the same, as data: what Met is judged by
	Met        *bool   `json:"met,omitempty"`    // whether the figure meets its Goal
	Definition string  `json:"definition"`
}

// Goal is a figure's target as data: its value (its ratio to the baseline when OfBaseline)
// compared with Bound by Op, one of <, ≤, ≥.
type Goal struct {
	Op         string  `json:"op"`
	Bound      float64 `json:"bound"`
	OfBaseline bool    `json:"ofBaseline,omitempty"`
}

func under(bound float64) *Goal        { return &Goal{Op: "<", Bound: bound} }
func atMost(bound float64) *Goal       { return &Goal{Op: "≤", Bound: bound} }
func atLeast(bound float64) *Goal      { return &Goal{Op: "≥", Bound: bound} }
func ratioAtLeast(bound float64) *Goal { return &Goal{Op: "≥", Bound: bound, OfBaseline: true} }

// met says whether f meets g. A goal of an operator it does not know is never met.
func (g Goal) met(f Figure) bool {
	v := f.Value
	if g.OfBaseline {
		v = f.Ratio
	}
	switch g.Op {
	case "<":
		return v < g.Bound
	case "≤":
		return v <= g.Bound
	case "≥":
		return v >= g.Bound
	}
	return false
}

// judge sets f.Met from its goal.
func judge(f Figure) Figure {
	if f.Baseline > 0 && f.Ratio == 0 {
		f.Ratio = f.Value / f.Baseline
	}
	if f.Goal != nil {
		m := f.Goal.met(f)
		f.Met = &m
	}
	return f
}

// Machine is what the machine did beside the figures: the broker's echo at the run's start
// and end, an fsync probe in the bench's folder, and where the CPU time went over the run.
type Machine struct {
	Figures []Figure `json:"figures"`
}

// BenchReport is what thatch-bench writes for one run.
type BenchReport struct {
	Run        int       `json:"run,omitempty"` // 1-based, with --runs
	Quick      bool      `json:"quick"`
	Seed       uint64    `json:"seed"`
	Started    time.Time `json:"started"`
	Seconds    float64   `json:"seconds"`
	GoVersion  string    `json:"goVersion"`
	CPUs       int       `json:"cpus"`
	Events     int64     `json:"events"`
	Sessions   int       `json:"sessions"`
	Lost       int       `json:"entriesLost"`
	Machine    []Figure  `json:"machine,omitempty"`
	Parts      []Part    `json:"parts,omitempty"`
	Figures    []Figure  `json:"figures"`
	JournalMix []string  `json:"journalMix,omitempty"`
}

// Part is how long one part of the bench took, its set-up included.
type Part struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// Missed is the figures of the report that missed their targets.
func (r BenchReport) Missed() []Figure {
	var out []Figure
	for _, f := range r.Figures {
		if f.Met != nil && !*f.Met {
			out = append(out, f)
		}
	}
	return out
}

// RunsReport is what thatch-bench --runs N (N > 1) writes: each run, and per figure its
// values in the runs and whether it met its target in all of them.
type RunsReport struct {
	Runs    []BenchReport `json:"runs"`
	Summary []SummaryRow  `json:"summary"`
	Missed  []string      `json:"missed,omitempty"` // "run 2: memory_search p99 12.3 ms (≤ 10 ms)"
}

// SummaryRow is one figure over the runs. Values holds one value per run, NaN-free: a run
// that did not measure the figure (a part that failed) is absent from Runs.
type SummaryRow struct {
	Name   string    `json:"name"`
	Unit   string    `json:"unit"`
	Target string    `json:"target,omitempty"`
	Runs   []int     `json:"runs"`
	Values []float64 `json:"values"`
	MetAll *bool     `json:"metAll,omitempty"` // nil: no target
}

// summarize folds the runs' reports into one row per figure, in the first run's order, and
// lists every figure missed in any run.
func summarize(reports []BenchReport) RunsReport {
	out := RunsReport{Runs: reports}
	index := map[string]int{}
	for _, r := range reports {
		for _, f := range slices.Concat(r.Machine, r.Figures) {
			i, ok := index[f.Name]
			if !ok {
				i = len(out.Summary)
				index[f.Name] = i
				out.Summary = append(out.Summary, SummaryRow{Name: f.Name, Unit: f.Unit, Target: f.Target})
			}
			row := &out.Summary[i]
			row.Runs, row.Values = append(row.Runs, r.Run), append(row.Values, f.Value)
			if f.Met != nil {
				all := *f.Met && (row.MetAll == nil || *row.MetAll)
				row.MetAll = &all
			}
		}
		prefix := "" // a single run has no number
		if r.Run > 0 {
			prefix = fmt.Sprintf("run %d: ", r.Run)
		}
		for _, f := range r.Missed() {
			out.Missed = append(out.Missed, fmt.Sprintf("%s%s %s (target %s)", prefix, f.Name, value(f), f.Target))
		}
	}
	return out
}

// value is a figure's value as the report prints it, with its ratio when it has a baseline.
func value(f Figure) string {
	if f.Baseline > 0 {
		return fmt.Sprintf("%.2f %s = %.2f×", f.Value, f.Unit, f.Ratio)
	}
	return fmt.Sprintf("%.2f %s", f.Value, f.Unit)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}

func metWord(m *bool) string {
	switch {
	case m == nil:
		return ""
	case *m:
		return "met"
	}
	return "MISSED"
}

func printReport(w io.Writer, r BenchReport) {
	run := ""
	if r.Run > 0 {
		run = fmt.Sprintf("run %d, ", r.Run)
	}
	fmt.Fprintf(w, "\nthatch-bench (%sseed %d, %d CPUs, %s, %.0f s): %d events, %d sessions, %d entries lost\n",
		run, r.Seed, r.CPUs, r.GoVersion, r.Seconds, r.Events, r.Sessions, r.Lost)
	if len(r.Machine) > 0 {
		fmt.Fprintln(w, "\nthe machine:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, f := range r.Machine {
			fmt.Fprintf(tw, "  %s\t%.2f %s\n", f.Name, f.Value, f.Unit)
		}
		tw.Flush()
	}
	if len(r.Parts) > 0 {
		var parts []string
		for _, p := range r.Parts {
			parts = append(parts, fmt.Sprintf("%s %.0f s", p.Name, p.Seconds))
		}
		fmt.Fprintf(w, "\nparts: %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tVALUE\tBASELINE\tRATIO\tTARGET\t")
	for _, f := range r.Figures {
		base, ratio := "", ""
		if f.Baseline > 0 {
			base, ratio = fmt.Sprintf("%.0f %s", f.Baseline, f.Unit), fmt.Sprintf("%.2f", f.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%.2f %s\t%s\t%s\t%s\t%s\n", f.Name, f.Value, f.Unit, base, ratio, f.Target, metWord(f.Met))
	}
	tw.Flush()
	if len(r.JournalMix) > 0 {
		fmt.Fprintf(w, "\njournal by table: %s\n", strings.Join(r.JournalMix, ", "))
	}
}

// printSummary prints the runs side by side: each figure's value per run and whether it
// met its target in all of them.
func printSummary(w io.Writer, s RunsReport) {
	fmt.Fprintf(w, "\nsummary of %d runs:\n\n", len(s.Runs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "FIGURE\t"
	for _, r := range s.Runs {
		head += fmt.Sprintf("RUN %d\t", r.Run)
	}
	fmt.Fprintln(tw, head+"TARGET\tALL RUNS\t")
	for _, row := range s.Summary {
		line := row.Name + "\t"
		for _, r := range s.Runs {
			if i := slices.Index(row.Runs, r.Run); i >= 0 {
				line += fmt.Sprintf("%.2f %s\t", row.Values[i], row.Unit)
			} else {
				line += "-\t"
			}
		}
		fmt.Fprintln(tw, line+row.Target+"\t"+metWord(row.MetAll)+"\t")
	}
	tw.Flush()
}

func goVersion() string { return goruntime.Version() }
func cpus() int         { return goruntime.NumCPU() }
