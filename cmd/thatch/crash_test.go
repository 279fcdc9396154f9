package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var builds struct {
	sync.Mutex
	done map[string]string
}

// goBuild builds a main package once per test run and returns the binary.
func goBuild(t testing.TB, name string, args ...string) string {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	if path, ok := builds.done[name]; ok {
		return path
	}
	dir, err := os.MkdirTemp("", "thatch-test-bin")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if out, err := exec.Command("go", append([]string{"build", "-o", path}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, out)
	}
	if builds.done == nil {
		builds.done = map[string]string{}
	}
	builds.done[name] = path
	return path
}

// binary builds cmd/thatch, with the race detector.
func binary(t *testing.T) string { return goBuild(t, "thatch", "-race", ".") }

// process runs the thatch binary against the rig's broker (its own embedded one for an
// embedded rig) and data folder.
func (r *rig) process(bin string) *exec.Cmd {
	r.t.Helper()
	cmd := exec.Command(bin, "serve")
	broker := "THATCH_NATS_URL=" + r.url
	if r.cfg.NATSURL == "" { // an embedded rig: thatch's own broker, where the rig's host connects
		broker = "THATCH_NATS_LISTEN=" + r.cfg.NATSListen
	}
	cmd.Env = append(os.Environ(), "THATCH_DATA_DIR="+r.dataDir, broker,
		"THATCH_HOST_TIMEOUT_MS=2000", "THATCH_LOG_FORMAT=json", "THATCH_LOG_LEVEL=debug", "THATCH_INSTALL_COMMANDS=off",
		"GORACE=atexit_sleep_ms=0") // a race-enabled binary otherwise sleeps 1 s at exit: a stop's time is thatch's own
	if r.logPath == "" {
		r.logPath = filepath.Join(r.t.TempDir(), "thatch.log")
	}
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	must(r.t, cmd.Start())
	r.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	return cmd
}

// crashWorkload publishes a deterministic stream: sessions with tool calls, idles (whose
// extraction the host refuses: it serves no session.create), task children, deletions.
func crashWorkload(ctx context.Context, r *rig, sessions int) (events int64, err error) {
	if err := r.host.Hello(ctx, "b1"); err != nil {
		return 0, err
	}
	events = 1
	for s := range sessions {
		sid := fmt.Sprintf("ses_%03d", s)
		if err := r.host.Created(ctx, sid, "", "t", r.host.Dir); err != nil {
			return events, err
		}
		events++
		for c := range 8 {
			owner := sid
			if c == 4 {
				if err := r.host.Created(ctx, sid+"_task", sid, "sub-agent", r.host.Dir); err != nil {
					return events, err
				}
				events++
			}
			if c >= 4 {
				owner = sid + "_task"
			}
			if err := r.host.ToolExecuted(ctx, owner, fmt.Sprintf("%s_c%d", sid, c), "bash", strings.Repeat("x", 200)); err != nil {
				return events, err
			}
			events++
		}
		if err := r.host.Status(ctx, sid, "busy"); err != nil {
			return events, err
		}
		if err := r.host.Status(ctx, sid, "idle"); err != nil {
			return events, err
		}
		events += 3
		if s%4 == 3 {
			if _, err := r.host.Publish(ctx, "session.deleted", map[string]any{"sessionID": sid,
				"info": map[string]any{"id": sid, "title": "t", "directory": r.host.Dir}}); err != nil {
				return events, err
			}
			events++
		}
	}
	return events, nil
}

// TestSIGKILLMidStream kills the real binary with SIGKILL while events stream in,
// restarts it on the same data folder, and compares the journal with an uninterrupted run.
func TestSIGKILLMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level crash test: skipped in -short mode")
	}
	bin := binary(t)
	run := func(kills int) (string, int) {
		r := newRig(t, "v1", "session.prompt")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := r.process(bin)
		waitFor(t, "thatch to answer", func() bool { return r.tryAPI("status", nil, new(map[string]any)) == nil })
		type result struct {
			n   int64
			err error
		}
		done := make(chan result, 1)
		var published atomic.Bool
		go func() {
			n, err := crashWorkload(ctx, r, 40)
			published.Store(true)
			done <- result{n, err}
		}()
		rng := rand.New(rand.NewPCG(uint64(kills), 7))
		var applied int64
		for range kills {
			// Lets a random amount of the stream through: at least one event more than at
			// the last kill, or the rest once the workload has published everything.
			target := applied + 1 + int64(rng.IntN(30))
			waitWithin(t, time.Minute, "events to stream in before a kill", func() bool {
				var s struct{ Applied int64 }
				if r.tryAPI("status", nil, &s) == nil {
					applied = max(applied, s.Applied)
				}
				return applied >= target || published.Load()
			})
			must(t, cmd.Process.Signal(syscall.SIGKILL))
			_ = cmd.Wait()
			cmd = r.process(bin)
		}
		res := <-done
		if res.err != nil {
			t.Fatal(res.err)
		}
		waitFor(t, "every event to be applied", func() bool {
			var s struct{ Applied int64 }
			return r.tryAPI("status", nil, &s) == nil && s.Applied >= res.n
		})
		waitFor(t, "every host call to be answered", func() bool {
			var s struct{ OutstandingCalls int }
			return r.tryAPI("status", nil, &s) == nil && s.OutstandingCalls == 0
		})
		must(t, cmd.Process.Signal(syscall.SIGTERM))
		if err := cmd.Wait(); err != nil {
			t.Fatalf("thatch did not exit cleanly on SIGTERM: %v", err)
		}
		return r.journalDump(), len(r.host.CallsTo("session.prompt"))
	}
	want, _ := run(0)
	got, prompts := run(5)
	if want != got {
		t.Fatalf("journal after 5 SIGKILLs differs from an uninterrupted run:\n--- uninterrupted\n%s\n--- killed\n%s", want, got)
	}
	// A reminder whose result a kill lost is sent again: at least once, never dropped.
	t.Logf("reminders sent across 5 kills: %d for 40 sessions", prompts)
}
