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

// Figure is one measured figure with its definition.
type Figure struct {
	Name       string  `json:"name"`
	Value      float64 `json:"value"`
	Unit       string  `json:"unit"`
	Baseline   float64 `json:"baseline,omitempty"`
	Ratio      float64 `json:"ratio,omitempty"`
	Target     string  `json:"target,omitempty"`
	Definition string  `json:"definition"`
}

// BenchReport is what thatch-bench writes.
type BenchReport struct {
	Quick      bool      `json:"quick"`
	Seed       uint64    `json:"seed"`
	Started    time.Time `json:"started"`
	GoVersion  string    `json:"goVersion"`
	CPUs       int       `json:"cpus"`
	Events     int64     `json:"events"`
	Sessions   int       `json:"sessions"`
	Lost       int       `json:"entriesLost"`
	Figures    []Figure  `json:"figures"`
	JournalMix []string  `json:"journalMix,omitempty"`
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

func (b *benchRun) print(w io.Writer) {
	fmt.Fprintf(w, "\nthatch-bench (seed %d, %d CPUs, %s): %d events, %d sessions, %d entries lost\n\n",
		b.report.Seed, b.report.CPUs, b.report.GoVersion, b.report.Events, b.report.Sessions, b.report.Lost)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tVALUE\tBASELINE\tRATIO\tTARGET")
	for _, f := range b.report.Figures {
		base, ratio := "", ""
		if f.Baseline > 0 {
			base, ratio = fmt.Sprintf("%.0f %s", f.Baseline, f.Unit), fmt.Sprintf("%.2f", f.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%.2f %s\t%s\t%s\t%s\n", f.Name, f.Value, f.Unit, base, ratio, f.Target)
	}
	tw.Flush()
	if len(b.report.JournalMix) > 0 {
		fmt.Fprintf(w, "\njournal by table: %s\n", strings.Join(b.report.JournalMix, ", "))
	}
}

func goVersion() string { return goruntime.Version() }
func cpus() int         { return goruntime.NumCPU() }
