package daemontest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/runtime"
)

// strandedHost gives the rig's host a worktree that stays and a directory that is
// removed from disk, with one session of each kind in the removed one.
func strandedHost(t *testing.T, r *Rig) (gone string) {
	t.Helper()
	gone = filepath.Join(t.TempDir(), "merged-worktree")
	must(t, os.Mkdir(gone, 0o755))
	for _, s := range []runtime.SessionInfo{
		{ID: "ses_top", Directory: gone, Title: "feature", ProjectID: "p1"},
		{ID: "ses_machinery", Directory: gone, Title: runtime.ExtractionTitle, ParentID: "ses_top", ProjectID: "p1"},
		{ID: "ses_task", Directory: gone, Title: "explore", ParentID: "ses_top", ProjectID: "p1"},
		{ID: "ses_live", Directory: r.Host.Dir, Title: runtime.ExtractionTitle, ParentID: "ses_x", ProjectID: "p1"},
	} {
		r.Host.AddSession(s)
	}
	must(t, os.RemoveAll(gone))
	return gone
}

// The strand sweep against real directories, triggered by the host's hello: it deletes the
// machinery, moves the real session to its project's worktree, skips the task child and
// never touches a session whose directory exists. One toast summarises.
func TestStrandSweep(t *testing.T) {
	r := New(t, "v1")
	r.Cfg.StrandSweepMS = 3600000 // only the sweeps the test asks for, and the one after hello
	ctx := r.Ctx()
	gone := strandedHost(t, r)
	r.Start()

	var dry runtime.SweepResult
	if err := r.TryAPI("sweep", map[string]any{"hostID": "h1", "dryRun": true}, &dry); err == nil || !strings.Contains(err.Error(), `knows no host "h1"`) {
		t.Fatalf("sweeping a host that never said hello: %v, want a clear error", err)
	}

	must(t, r.Host.Hello(ctx, "b1")) // a host's first hello triggers its strand sweep
	waitFor(t, "the machinery to be deleted", func() bool { return !r.Host.HasSession("ses_machinery") })
	waitFor(t, "the real session to be moved", func() bool { s, _ := r.Host.Session("ses_top"); return s.Directory == r.Host.Dir })
	if s, ok := r.Host.Session("ses_task"); !ok || s.Directory != gone {
		t.Fatal("the task child was touched")
	}
	if !r.Host.HasSession("ses_live") {
		t.Fatal("machinery in a live directory was deleted")
	}
	waitFor(t, "the summary toast", func() bool { return len(r.Host.CallsTo("tui.showToast")) == 1 })
	if msg := fmt.Sprint(r.Host.CallsTo("tui.showToast")[0].Params["message"]); !strings.Contains(msg, "2 stranded") {
		t.Fatalf("toast %q", msg)
	}

	// A second sweep finds only the task child, heals nothing, and toasts nothing.
	var again runtime.SweepResult
	must(t, r.TryAPI("sweep", map[string]any{"dryRun": false}, &again))
	if PlanOf(again) != "skip ses_task" {
		t.Fatalf("second sweep planned %q", PlanOf(again))
	}
	if n := len(r.Host.CallsTo("tui.showToast")); n != 1 {
		t.Fatalf("%d toasts, want the first sweep's only", n)
	}

	// The host stops answering without a goodbye: a sweep of every host passes it by
	// (its next hello sweeps it); a sweep naming it says why it cannot.
	r.Host.Close()
	var none runtime.SweepResult
	if err := r.TryAPI("sweep", map[string]any{}, &none); err != nil || len(none.Actions) != 0 {
		t.Fatalf("sweep of every host with one silent: %v %q", err, PlanOf(none))
	}
	if err := r.TryAPI("sweep", map[string]any{"hostID": "h1"}, &none); err == nil || !strings.Contains(err.Error(), "does not serve session.list") {
		t.Fatalf("sweep of the silent host: %v, want its no-responder error", err)
	}
}

// THATCH_STRAND_SWEEP=off: nothing acts on the host, a sweep that would act is refused,
// a dry run still plans.
func TestStrandSweepOff(t *testing.T) {
	r := New(t, "v1")
	r.Cfg.StrandSweep = false
	ctx := r.Ctx()
	strandedHost(t, r)
	r.Start()
	must(t, r.Host.Hello(ctx, "b1"))
	r.WaitApplied(1)
	var res runtime.SweepResult
	err := r.TryAPI("sweep", map[string]any{"dryRun": false}, &res)
	if err == nil || !strings.Contains(err.Error(), "SweepDisabledError") {
		t.Fatalf("sweep with the sweep off: %v", err)
	}
	must(t, r.TryAPI("sweep", map[string]any{"dryRun": true}, &res))
	if got := PlanOf(res); got != "delete ses_machinery, skip ses_task, move ses_top" {
		t.Fatalf("dry run planned %q", got)
	}
	if n := len(r.Host.CallsTo("session.delete")) + len(r.Host.CallsTo("session.move")); n != 0 {
		t.Fatalf("the sweep acted %d times while off", n)
	}
}

// The journal sweep drops sessions untouched for the TTL and keeps those a host resumed.
// It runs with the strand sweep off.
func TestJournalSweepTTL(t *testing.T) {
	r := New(t, "v1")
	r.Cfg.StrandSweep, r.Cfg.StrandSweepMS, r.Cfg.RuntimeStateTTLMS = false, 100, 300
	ctx := r.Ctx()
	r.Start()
	must(t, r.Host.Hello(ctx, "b1", "ses_resumed"))
	must(t, r.Host.Created(ctx, "ses_resumed", "", "t", r.Host.Dir))
	must(t, r.Host.Created(ctx, "ses_old", "", "t", r.Host.Dir))
	must(t, r.Host.ToolExecuted(ctx, "ses_old", "c1", "bash", "x"))
	r.WaitApplied(4)
	waitFor(t, "the stale session to be swept", func() bool { _, ok := r.Sessions()["ses_old"]; return !ok })
	if _, ok := r.Sessions()["ses_resumed"]; !ok {
		t.Fatal("a resumed session was swept")
	}
	if s := r.Status(); s.Pending != 0 {
		t.Fatalf("%d entries of the swept session remain", s.Pending)
	}
}

// A host restart finalizes a mid-flight extraction child: deleted on the host, its claims
// back to pending, the parent free to extract again.
func TestHostRestartFinalizesExtraction(t *testing.T) {
	r := New(t, "v1")
	ctx := r.Ctx()
	r.Start()
	child := r.ExtractionOfOneEntry(ctx)
	must(t, r.Host.Status(ctx, child, "busy"))
	r.Tool(ctx, runtime.ToolPayload, child, nil)
	must(t, r.Host.Hello(ctx, "b2"))
	waitFor(t, "the child to be deleted", func() bool { return !r.Host.HasSession(child) })
	waitFor(t, "its claim to go back", func() bool { e := r.Entries("ses_a"); return len(e) == 1 && e[0].State == "pending" })
	if r.Sessions()["ses_a"].Extracting {
		t.Fatal("the parent is still flagged extracting")
	}
	must(t, r.Host.Status(ctx, "ses_a", "idle")) // the first idle of the new boot counts
	r.ChildOf("ses_a", 2)
}

// A Host-Seq gap is counted, and the host's sessions are resynced with session.list.
func TestHostSeqGap(t *testing.T) {
	r := New(t, "v1")
	r.Cfg.StrandSweep = false
	ctx := r.Ctx()
	r.Start()
	must(t, r.Host.Hello(ctx, "b1"))                                // Host-Seq 1
	must(t, r.Host.Created(ctx, "ses_a", "", "before", r.Host.Dir)) // 2
	r.Host.AddSession(runtime.SessionInfo{ID: "ses_a", Title: "renamed", Directory: r.Host.Dir})
	body := []byte(`{"id":"evt_gap","type":"session.status","properties":{"sessionID":"ses_a","status":{"type":"busy"}}}`)
	must(t, r.Host.PublishRaw(ctx, "session.status", body, "evt_gap", 5)) // 3 and 4 were lost
	waitFor(t, "the gap", func() bool { return r.Status().Gaps == 1 })
	waitFor(t, "the resync", func() bool { return len(r.Host.CallsTo("session.list")) == 1 })
	waitFor(t, "the refreshed title", func() bool { return r.Sessions()["ses_a"].Title == "renamed" })
}
