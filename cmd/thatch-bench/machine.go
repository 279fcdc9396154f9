package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// The machine's figures stand beside the bench's: a run on a machine whose broker echo,
// fsync or CPU share was slow says so in its own report (issue 33).

// echoProbe measures a bare request/reply of 300 bytes over the bench's broker, callers
// each calling 20 times a second: the floor of every figure over NATS.
func (b *benchRun) echoProbe(when string) error {
	sub, err := b.nc.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	payload := []byte(strings.Repeat("x", 300))
	lat, err := pacedCalls(b.size.MemoryCallers, b.size.MemoryCalls, 20, func(string, int) error {
		_, err := b.nc.Request("bench.echo", payload, 5*time.Second)
		return err
	})
	if err != nil {
		return fmt.Errorf("NATS echo: %w", err)
	}
	p50, p99 := percentiles(lat)
	b.say("NATS echo at the %s: p50 %s, p99 %s", when, p50, p99)
	def := fmt.Sprintf("a bare request/reply of 300 bytes over the bench's broker at the %s of the run, %d callers each calling 20 times a second: the floor of the figures over NATS", when, b.size.MemoryCallers)
	b.report.Machine = append(b.report.Machine,
		Figure{Name: "NATS echo p50 (" + when + ")", Value: ms(p50), Unit: "ms", Definition: def},
		Figure{Name: "NATS echo p99 (" + when + ")", Value: ms(p99), Unit: "ms", Definition: "as above, 99th percentile"})
	return nil
}

// fsyncProbe writes 4 KiB and fsyncs it, 200 times, in the bench's folder (where its
// journals and stores are): what every commit of thatch waits for at least.
func (b *benchRun) fsyncProbe() error {
	f, err := os.Create(filepath.Join(b.dir, "fsync-probe"))
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	lat := make([]time.Duration, 0, 200)
	for i := range 200 {
		t0 := time.Now()
		if _, err := f.WriteAt(block, int64(i%16)*4096); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
	}
	p50, p99 := percentiles(lat)
	b.say("fsync probe: p50 %s, p99 %s", p50, p99)
	def := fmt.Sprintf("writing 4 KiB and fsyncing it in the bench's folder (%s), 200 times one after another", b.dir)
	b.report.Machine = append(b.report.Machine,
		Figure{Name: "fsync 4 KiB p50", Value: ms(p50), Unit: "ms", Definition: def},
		Figure{Name: "fsync 4 KiB p99", Value: ms(p99), Unit: "ms", Definition: "as above, 99th percentile"})
	return nil
}

// cpuTimes is the machine's CPU time so far from /proc/stat's first line, in ticks.
type cpuTimes struct{ user, system, idle, steal, total uint64 }

// readCPUTimes reads /proc/stat; on a system without it, the zero value.
func readCPUTimes() cpuTimes {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(data), "\n")
	return parseCPUTimes(line)
}

// parseCPUTimes parses /proc/stat's "cpu" line: user nice system idle iowait irq softirq
// steal guest guest_nice. Guest time is counted in user already, so it is not added again.
func parseCPUTimes(line string) cpuTimes {
	fields := strings.Fields(line)
	if len(fields) < 2 || fields[0] != "cpu" {
		return cpuTimes{}
	}
	v := make([]uint64, 8)
	for i := range v {
		if i+1 < len(fields) {
			v[i], _ = strconv.ParseUint(fields[i+1], 10, 64)
		}
	}
	t := cpuTimes{user: v[0] + v[1], system: v[2] + v[5] + v[6], idle: v[3] + v[4], steal: v[7]}
	t.total = t.user + t.system + t.idle + t.steal
	return t
}

// cpuShares is the share of each kind of CPU time between two readings, in percent.
func cpuShares(from, to cpuTimes) (user, system, idle, steal float64, ok bool) {
	total := float64(to.total - from.total)
	if to.total <= from.total {
		return 0, 0, 0, 0, false
	}
	pct := func(a, b uint64) float64 { return float64(b-a) / total * 100 }
	return pct(from.user, to.user), pct(from.system, to.system), pct(from.idle, to.idle), pct(from.steal, to.steal), true
}

// addCPUShares adds the run's CPU shares to the machine's figures.
func (b *benchRun) addCPUShares(from, to cpuTimes) {
	user, system, idle, steal, ok := cpuShares(from, to)
	if !ok {
		return
	}
	def := "of all CPUs' time over the run, from /proc/stat (the machine's, not only this process's)"
	b.report.Machine = append(b.report.Machine,
		Figure{Name: "CPU steal", Value: steal, Unit: "%", Definition: "time the hypervisor gave another guest while this one wanted to run, share " + def},
		Figure{Name: "CPU user", Value: user, Unit: "%", Definition: "user time (nice included), share " + def},
		Figure{Name: "CPU system", Value: system, Unit: "%", Definition: "system time (interrupts included), share " + def},
		Figure{Name: "CPU idle", Value: idle, Unit: "%", Definition: "idle time (waiting for I/O included), share " + def})
}
