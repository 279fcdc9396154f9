package daemontest

import (
	"context"
	"sync"
	"testing"

	"github.com/thatch-dev/thatch/runtime"
)

// TestCallDuringExtractionIsExtracted: a tool call the session makes while an extraction
// child runs (the user's turn starts and ends before the child's) is extracted without a
// further user turn (rule 4, version 1.2): the child's idle starts the next extraction,
// since its parent is idle with the call pending. Before, the call stayed pending until
// the session's next idle, which never came.
func TestCallDuringExtractionIsExtracted(t *testing.T) {
	r := New(t, "v1")
	r.Host.Model = true
	var once sync.Once
	r.Host.Write = func(ctx context.Context, child string, _ runtime.Answer, _ func(string, any) (runtime.Answer, *runtime.HostError)) runtime.Metrics {
		// The first child holds its claim on c1: the user's next turn makes c2 and ends
		// before the child does.
		once.Do(func() {
			must(t, r.Host.Status(ctx, "ses_a", "busy"))
			must(t, r.Host.ToolExecuted(ctx, "ses_a", "c2", "bash", "ran the migrations"))
			must(t, r.Host.Status(ctx, "ses_a", "idle"))
		})
		return runtime.Metrics{New: 1}
	}
	r.Start()
	ctx := r.Ctx()
	must(t, r.Host.Hello(ctx, "b1"))
	must(t, r.Host.Created(ctx, "ses_a", "", "t", r.Host.Dir))
	must(t, r.Host.ToolExecuted(ctx, "ses_a", "c1", "bash", "deployed with scripts/deploy.sh"))
	must(t, r.Host.Status(ctx, "ses_a", "idle"))
	waitFor(t, "both calls extracted, with no user turn after the first child", func() bool {
		x := r.Host.Extracted()
		return x["c1"] == 1 && x["c2"] == 1
	})
	waitFor(t, "nothing pending", func() bool { return len(r.Entries("ses_a")) == 0 })
	if n := len(r.Host.CallsTo("session.create")); n != 2 {
		t.Errorf("%d extraction children created, want 2", n)
	}
}
