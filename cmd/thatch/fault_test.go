package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime"
)

// extractionWorkload publishes a seeded workload in which thatch's extractions run
// through the tools (the fake host's model plays the children, failing every fifth):
// sessions with two turns of tool calls, sub-agents, top-level errors, deletions.
func extractionWorkload(ctx context.Context, r *rig, seed uint64, sessions int) (map[string][]string, map[string]bool, error) {
	rng := rand.New(rand.NewPCG(seed, 11))
	entries, deleted := map[string][]string{}, map[string]bool{}
	if err := r.host.Hello(ctx, "b1"); err != nil {
		return nil, nil, err
	}
	for s := range sessions {
		sid := fmt.Sprintf("ses_%03d", s)
		if err := r.host.Created(ctx, sid, "", "t", r.host.Dir); err != nil {
			return nil, nil, err
		}
		for turn := range 2 {
			if err := r.host.Status(ctx, sid, "busy"); err != nil {
				return nil, nil, err
			}
			owner := sid
			if turn == 1 && rng.IntN(3) == 0 {
				owner = sid + "_task"
				if err := r.host.Created(ctx, owner, sid, "sub-agent", r.host.Dir); err != nil {
					return nil, nil, err
				}
			}
			for c := range 2 + rng.IntN(5) {
				id := fmt.Sprintf("%s_t%d_c%d", sid, turn, c)
				entries[sid] = append(entries[sid], runtime.EntryID(sid, owner, id)) // a sub-agent's call is <child>/<callID>
				if err := r.host.ToolExecuted(ctx, owner, id, "bash", strings.Repeat("x", 300)); err != nil {
					return nil, nil, err
				}
			}
			if rng.IntN(8) == 0 {
				if _, err := r.host.Publish(ctx, "session.error", map[string]any{"sessionID": sid,
					"error": map[string]any{"name": "APIError", "data": map[string]any{"message": "overloaded"}}}); err != nil {
					return nil, nil, err
				}
			}
			if err := r.host.Status(ctx, sid, "idle"); err != nil {
				return nil, nil, err
			}
		}
		if rng.IntN(6) == 0 {
			deleted[sid] = true
			r.host.RemoveSession(sid)
			if _, err := r.host.Publish(ctx, "session.deleted", map[string]any{"sessionID": sid,
				"info": map[string]any{"id": sid, "title": "t", "directory": r.host.Dir}}); err != nil {
				return nil, nil, err
			}
		}
	}
	return entries, deleted, nil
}

// settle waits until thatch has applied the whole stream and answered every host call,
// then idles every live session until nothing is pending: the run's end state.
func settle(t *testing.T, r *rig, entries map[string][]string, deleted map[string]bool) {
	t.Helper()
	ctx := r.ctx()
	quiet := func() {
		stable := 0
		waitFor(t, "thatch to settle", func() bool {
			var st runtime.StatusView
			if r.tryAPI("status", nil, &st) != nil {
				stable = 0
				return false
			}
			js, err := r.host.JS.Stream(ctx, "OPENCODE_EVENTS")
			if err != nil {
				return false
			}
			info, err := js.Info(ctx)
			if err != nil {
				return false
			}
			extracting := slices.ContainsFunc(slices.Collect(maps.Values(r.sessions())), func(v runtime.SessionView) bool { return v.Extracting })
			if st.LastStreamSeq == info.State.LastSeq && st.OutstandingCalls == 0 && st.Accepted == 0 && !extracting {
				stable++
			} else {
				stable = 0
			}
			return stable >= 3
		})
	}
	for round := 0; ; round++ {
		quiet()
		if r.status().Pending == 0 {
			return
		}
		if round == 6 {
			var stuck []string
			for _, v := range r.sessions() {
				if v.Pending > 0 || v.Extracting || v.Kind == runtime.KindExtraction {
					_, onHost := r.host.Session(v.SessionID)
					stuck = append(stuck, fmt.Sprintf("%s %s parent=%s status=%s pending=%d extracting=%v on-host=%v",
						v.SessionID, v.Kind, v.ParentID, v.Status, v.Pending, v.Extracting, onHost))
				}
			}
			if r.logPath != "" {
				data, _ := os.ReadFile(r.logPath)
				lines := strings.Split(string(data), "\n")
				var interesting []string
				for _, l := range lines {
					if strings.Contains(l, "c001") || strings.Contains(l, "ses_000\"") || strings.Contains(l, "resuming") || strings.Contains(l, "redelivering") {
						interesting = append(interesting, l)
					}
				}
				stuck = append(stuck, interesting[max(0, len(interesting)-40):]...)
			}
			t.Fatalf("entries still pending after %d rounds of idles:\n%s", round, strings.Join(stuck, "\n"))
		}
		for sid := range entries {
			if !deleted[sid] {
				must(t, r.host.Status(ctx, sid, "busy"))
				must(t, r.host.Status(ctx, sid, "idle"))
			}
		}
	}
}

// checkOutcome verifies what the fault tests promise: every entry extracted exactly once
// (or gone with its deleted session), no extraction child left on the host, and only
// thatch's own machinery deleted there.
func checkOutcome(t *testing.T, r *rig, entries map[string][]string, deleted map[string]bool) {
	t.Helper()
	extracted := r.host.Extracted()
	for sid, ids := range entries {
		for _, id := range ids {
			switch n := extracted[id]; {
			case n > 1:
				t.Errorf("%s extracted %d times", id, n)
			case n == 0 && !deleted[sid]:
				t.Errorf("%s of live session %s was never extracted", id, sid)
			}
		}
	}
	for _, c := range r.host.CallsTo("session.delete") {
		id := fmt.Sprint(c.Params["sessionID"])
		if !strings.HasPrefix(id, "ses_h1_c") {
			t.Errorf("thatch deleted %s, which is not its own machinery", id)
		}
	}
	var live []string
	for _, s := range r.sessions() {
		if s.Kind == runtime.KindExtraction {
			live = append(live, s.SessionID)
		}
		if r.host.HasSession(s.SessionID) && s.Kind == runtime.KindExtraction {
			t.Errorf("extraction child %s left behind", s.SessionID)
		}
	}
	if len(live) > 0 {
		t.Errorf("extraction children still tracked: %v", live)
	}
}

// TestCrashAtAnyPoint plays a seeded workload with extractions through the tools against
// the real binary, kills it with SIGKILL at random moments (at least 20 times), restarts
// it on the same folder, and compares the end with an uninterrupted run of the same seed.
func TestCrashAtAnyPoint(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level crash test: skipped in -short mode")
	}
	bin := binary(t)
	const kills, sessions = 20, 30
	run := func(kill bool) (string, map[string]int) {
		r := newRig(t, "v1")
		r.host.Model, r.host.FailEvery, r.host.ToolTimeout = true, 5, 3*time.Second
		var traceMu sync.Mutex
		var traces []string
		r.host.Trace = func(format string, args ...any) {
			traceMu.Lock()
			traces = append(traces, fmt.Sprintf(format, args...))
			traceMu.Unlock()
		}
		defer func() {
			if t.Failed() {
				traceMu.Lock()
				for _, l := range traces {
					if strings.Contains(l, "c001") {
						t.Log("model:", l)
					}
				}
				traceMu.Unlock()
			}
		}()
		cmd := r.process(bin)
		waitFor(t, "thatch to answer", func() bool { return r.tryAPI("status", nil, new(map[string]any)) == nil })
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		type result struct {
			entries map[string][]string
			deleted map[string]bool
			err     error
		}
		done := make(chan result, 1)
		var published atomic.Bool
		go func() {
			e, d, err := extractionWorkload(ctx, r, 7, sessions)
			published.Store(true)
			done <- result{e, d, err}
		}()
		var res result
		if kill {
			rng := rand.New(rand.NewPCG(99, 1))
			var progress int64 // events applied and requests the host got, at the last look
			for i := range kills {
				// Kills at a random point: once thatch made some progress since the last
				// kill (an event applied, a host call made), or once it is idle after the
				// workload.
				target := progress + 1 + int64(rng.IntN(20))
				waitWithin(t, time.Minute, "thatch to make progress before a kill", func() bool {
					var s runtime.StatusView
					if r.tryAPI("status", nil, &s) != nil {
						return false
					}
					progress = max(progress, s.Applied+int64(len(r.host.Requests())))
					return progress >= target || (published.Load() && s.OutstandingCalls == 0)
				})
				must(t, cmd.Process.Signal(syscall.SIGKILL))
				_ = cmd.Wait()
				cmd = r.process(bin)
				if i == kills/2 { // the second half kills during the settling too
					res = <-done
				}
			}
		}
		if res.entries == nil {
			res = <-done
		}
		if res.err != nil {
			t.Fatal(res.err)
		}
		settle(t, r, res.entries, res.deleted)
		checkOutcome(t, r, res.entries, res.deleted)
		must(t, cmd.Process.Signal(syscall.SIGTERM))
		if err := cmd.Wait(); err != nil {
			t.Fatalf("thatch did not exit cleanly: %v", err)
		}
		// Counters and extraction ids depend on timing; sessions and entries must not.
		var keep []string
		for _, l := range strings.Split(r.journalDump(), "\n") {
			if !strings.HasPrefix(l, "counters") && !strings.HasPrefix(l, "host ") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n"), r.host.Repeats()
	}
	want, _ := run(false)
	got, repeats := run(true)
	if want != got {
		t.Fatalf("journal after %d SIGKILLs differs from an uninterrupted run:\n--- uninterrupted\n%s\n--- killed\n%s", kills, want, got)
	}
	// A kill between a host call and the commit of its result repeats the call at the next
	// start, with the same idempotency key: the host answers it from memory.
	t.Logf("calls repeated across %d kills (each answered from the host's memory by its idempotency key): %v", kills, repeats)
}

// A host that times out, answers garbage, answers errors and lacks methods degrades
// alone: its calls fail once each and are never retried in a loop (a call to a method it
// lacks waits in the outbox for its next hello, rule 12), while another host's extraction
// runs end to end meanwhile.
func TestHostFaults(t *testing.T) {
	r := newRig(t, "v1", "session.create", "session.prompt", "session.delete", "tui.showToast") // no session.list, no session.messages
	r.cfg.StrandSweep = false
	ctx := r.ctx()
	bad := r.host
	bad.Raw = func(method string) ([]byte, bool) {
		switch method {
		case "session.prompt":
			return []byte("<html>not a reply</html>"), true
		case "session.delete":
			return []byte(`{"error":{"name":"InternalError","message":"disk on fire"}}`), true
		}
		return nil, false
	}
	timedOut := make(chan struct{}) // closed once thatch gave the first create up
	giveUp := sync.OnceFunc(func() { close(timedOut) })
	t.Cleanup(giveUp)
	bad.Reply = func(method string, _ map[string]any) (any, *runtime.HostError, bool) {
		if method == "session.create" {
			<-timedOut // answered past THATCH_HOST_TIMEOUT_MS (2000 in the rig)
		}
		return nil, nil, false
	}
	good, err := fakehostNew(r, "h2")
	must(t, err)
	r.start()

	must(t, bad.Hello(ctx, "b1"))
	must(t, good.Hello(ctx, "b1"))
	must(t, bad.Created(ctx, "ses_bad", "", "t", bad.Dir))
	must(t, bad.ToolExecuted(ctx, "ses_bad", "b1", "bash", "x"))
	must(t, bad.Status(ctx, "ses_bad", "idle")) // its create will time out
	_, err = bad.Publish(ctx, "command.executed", map[string]any{"name": "thatch/exit", "sessionID": "ses_bad", "arguments": "", "messageID": "m"})
	must(t, err) // session.messages has no responder

	must(t, good.Created(ctx, "ses_good", "", "t", good.Dir))
	must(t, good.ToolExecuted(ctx, "ses_good", "g1", "bash", "x"))
	must(t, good.Status(ctx, "ses_good", "idle"))
	waitFor(t, "the healthy host's extraction", func() bool {
		return len(good.Extracted()) == 1 && len(good.CallsTo("session.delete")) == 1
	})
	if n := len(bad.CallsTo("session.create")); n != 1 {
		t.Fatalf("the faulty host got %d creates, want 1", n)
	}
	waitFor(t, "the timed-out create to clear the flag", func() bool { return !r.sessions()["ses_bad"].Extracting })
	giveUp() // the host answers it now, too late
	if e := r.entries("ses_bad"); len(e) != 1 || e[0].State != "pending" {
		t.Fatalf("ses_bad entries %+v, want b1 pending", e)
	}
	// No call is retried by itself: once every committed call is answered, nothing new
	// can start without an event, and the faulty host has seen each call once.
	// The late create's stray child is deleted, and the host's events resend the waiting
	// call once more: settled means nothing in flight and that one call waiting.
	waitFor(t, "every host call answered, and the wrap-up's session.messages (which the host lacks) waiting", func() bool {
		st := r.status()
		return st.OutstandingCalls == 0 && st.WaitingCalls == 1
	})
	for method, want := range map[string]int{"session.create": 1, "session.prompt": 1} {
		if n := len(bad.CallsTo(method)); n != want {
			t.Errorf("%s called %d times on the faulty host, want %d", method, n, want)
		}
	}
	// The next idle retries the extraction, once.
	must(t, bad.Status(ctx, "ses_bad", "busy"))
	must(t, bad.Status(ctx, "ses_bad", "idle"))
	waitFor(t, "the retry", func() bool { return len(bad.CallsTo("session.create")) == 2 })
}

// A journal on a full filesystem (a small tmpfs): thatch stops acknowledging, says what is
// wrong in its log and in status, loses nothing, and resumes when space returns.
func TestJournalOnFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a tmpfs: skipped in -short mode")
	}
	bin := binary(t)
	r := newRig(t, "v1", "session.prompt")
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a 2 MiB tmpfs for the full disk (it needs root, as CI has): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	r.dataDir = filepath.Join(mnt, "data")
	cmd := r.process(bin)
	waitFor(t, "thatch to answer", func() bool { return r.tryAPI("status", nil, new(map[string]any)) == nil })
	ctx := r.ctx()
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
	const n = 2000 // about 4 MB of entries for a 2 MB disk
	for i := range n {
		must(t, r.host.ToolExecuted(ctx, "ses_a", fmt.Sprintf("c%04d", i), "bash", strings.Repeat("o", 2000)))
	}
	var st runtime.StatusView
	waitFor(t, "status to report the journal error", func() bool {
		return r.tryAPI("status", nil, &st) == nil && strings.Contains(st.JournalError, "full")
	})
	if st.Applied >= int64(n+2) {
		t.Fatalf("every event applied on a full disk: %+v", st)
	}
	log, _ := os.ReadFile(r.logPath)
	if !strings.Contains(string(log), "journal write failed") || !strings.Contains(string(log), "check the disk holding the journal") {
		t.Fatal("the log does not say the journal write failed and what to check")
	}
	if out, err := exec.Command("mount", "-o", "remount,size=64m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	recovered := false
	defer func() { // the loop's stack and the log's end when it did not recover
		if recovered {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		_ = cmd.Wait()
		log, _ := os.ReadFile(r.logPath)
		if i := strings.Index(string(log), "(*Loop).Run"); i > 0 {
			t.Logf("loop stack:\n%s", string(log)[max(0, i-3000):i+200])
		}
		lines := strings.Split(string(log), "\n")
		t.Logf("last log lines:\n%s", strings.Join(lines[max(0, len(lines)-8):], "\n"))
	}()
	testkit.WaitFor(t, 20*time.Second, "thatch to recover once space returned", func() error {
		st = runtime.StatusView{}
		if err := r.tryAPI("status", nil, &st); err != nil {
			return err
		}
		if st.Applied != int64(n+2) || st.JournalError != "" {
			return fmt.Errorf("not recovered: %+v", st)
		}
		return nil
	})
	recovered = true
	if e := r.entries("ses_a"); len(e) != n {
		t.Fatalf("%d entries after recovery, want %d", len(e), n)
	}
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("thatch did not exit cleanly: %v", err)
	}
}
