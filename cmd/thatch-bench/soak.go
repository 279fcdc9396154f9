package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// soak runs thatch serve, the thatch binary at bin (the one next to thatch-bench when ""),
// as its own process against the bench broker, plays the workload in paced rounds (20
// sessions a second, extractions included) with sweeps on a short timer, and samples that
// process's memory, goroutines and journal every 10 s: what grows without bound shows here
// (thatch-bench --soak 10m).
func (b *benchRun) soak(ctx context.Context, d time.Duration, bin string, out io.Writer) error {
	ns, err := b.startBroker()
	if err != nil {
		return err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if b.nc, err = nats.Connect(ns.ClientURL(), natsbus.AuthOptions("", b.token, nil)...); err != nil {
		return err
	}
	defer b.nc.Close()
	work, data := filepath.Join(b.dir, "work"), filepath.Join(b.dir, "soak")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		bin = filepath.Join(filepath.Dir(self), "thatch")
	}
	cmd := exec.CommandContext(ctx, bin, "serve")
	cmd.Env = append(os.Environ(), "THATCH_NATS_URL="+ns.ClientURL(), "THATCH_NATS_TOKEN="+b.token, "THATCH_DATA_DIR="+data, "THATCH_INSTALL_COMMANDS=off",
		"THATCH_STRAND_SWEEP_MS=5000", "THATCH_RUNTIME_STATE_TTL_MS=60000", "THATCH_LOG_LEVEL=error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start thatch serve: %w (make build puts thatch next to thatch-bench; --thatch names another)", err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); b.api("status", nil, new(runtime.StatusView)) != nil; {
		if time.Now().After(deadline) {
			return errors.New("thatch serve did not become ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	fh, err := fakehost.New(b.nc, "soak", "v1")
	if err != nil {
		return err
	}
	defer fh.Close()
	fh.Model, fh.Dir, fh.FailEvery = true, work, 7
	if err := fh.Hello(ctx, "b1"); err != nil {
		return err
	}
	fmt.Fprintf(out, "%8s %9s %9s %9s %9s %11s %12s\n", "elapsed", "applied", "sessions", "pending", "RSS MiB", "goroutines", "journal MiB")
	sample := func(elapsed time.Duration) {
		var st runtime.StatusView
		_ = b.api("status", nil, &st)
		size, _, _ := journalSize(filepath.Join(data, "thatch.db"))
		fmt.Fprintf(out, "%8s %9d %9d %9d %9.1f %11d %12.1f\n", elapsed.Round(time.Second), st.Applied, st.Sessions, st.Pending,
			procStatusMiB(fmt.Sprint(cmd.Process.Pid), "VmRSS"), st.Goroutines, float64(size)/(1<<20))
	}
	rng := rand.New(rand.NewPCG(b.seed, 3))
	start, next := time.Now(), time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for round := 0; time.Since(start) < d && ctx.Err() == nil; round++ {
		w := &workload{entries: map[string][]string{}, deleted: map[string]bool{}}
		for _, e := range workloadEvents(rng, fmt.Sprintf("r%05d", round), 20, work, w) {
			var props map[string]any
			_ = json.Unmarshal([]byte(e[1]), &props)
			if e[0] == protocol.EventSessionCreated {
				info, _ := props["info"].(map[string]any)
				fh.AddSession(runtime.SessionInfo{ID: fmt.Sprint(info["id"]), Title: fmt.Sprint(info["title"]), Directory: work})
			}
			if _, err := fh.Publish(ctx, e[0], props); err != nil {
				return err
			}
		}
		if time.Now().After(next) {
			sample(time.Since(start))
			next = next.Add(10 * time.Second)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	sample(time.Since(start))
	return nil
}
