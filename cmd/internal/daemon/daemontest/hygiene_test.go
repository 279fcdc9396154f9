package daemontest

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// TestOrphanedBranchMemory: a memory scoped to the branch a session's checkout is on (read
// from .git/HEAD) becomes an orphan once the branch is deleted unmerged, found by the
// periodic sweep; a real git repository in a temporary folder.
func TestOrphanedBranchMemory(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs the git binary to make the repository: " + err.Error())
	}
	r := New(t, "v1")
	r.Cfg.StrandSweepMS = 200 // the journal sweep's timer runs the branch check
	repo := r.Host.Dir
	gitRun := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.email=t@t", "-c", "user.name=t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	gitRun("init", "-q", "-b", "main")
	gitRun("commit", "-q", "--allow-empty", "-m", "root")
	gitRun("checkout", "-q", "-b", "spike")
	gitRun("commit", "-q", "--allow-empty", "-m", "spike work")
	r.Start()
	ctx := r.Ctx()
	must(t, r.Host.Hello(ctx, "b1"))
	must(t, r.Host.Created(ctx, "ses_a", "", "t", repo))
	a, herr, err := r.Host.Tool(ctx, "thatch", runtime.ToolRemember, "ses_a", map[string]any{"content": "On the spike branch the cache is disabled.", "branch": "current"})
	if err != nil || herr != nil {
		t.Fatal(err, herr)
	}
	id := a.Metadata.(map[string]any)["id"].(string)
	var got struct {
		Memory memory.Memory `json:"memory"`
	}
	must(t, r.TryAPI("memory.get", map[string]any{"id": id}, &got))
	if got.Memory.Branch != "spike" {
		t.Fatalf("the memory's branch is %q, want spike (read from .git/HEAD)", got.Memory.Branch)
	}
	// A branch memory reaches sessions on its branch only.
	var ctxText struct {
		Text string `json:"text"`
	}
	must(t, r.Host.Created(ctx, "ses_on_spike", "", "t", repo))
	must(t, r.TryAPI("session.context", map[string]any{"sessionID": "ses_on_spike"}, &ctxText))
	if !strings.Contains(ctxText.Text, "the cache is disabled") {
		t.Errorf("a session on the spike branch lacks its branch memory:\n%s", ctxText.Text)
	}
	gitRun("checkout", "-q", "main")
	must(t, r.Host.Created(ctx, "ses_on_main", "", "t", repo))
	must(t, r.TryAPI("session.context", map[string]any{"sessionID": "ses_on_main"}, &ctxText))
	if strings.Contains(ctxText.Text, "the cache is disabled") {
		t.Errorf("a session on main got the spike branch's memory:\n%s", ctxText.Text)
	}
	gitRun("branch", "-q", "-D", "spike")
	waitFor(t, "the sweep to find the orphan", func() bool { return len(r.Hygiene(repo).Orphaned) == 1 })
	if h := r.Hygiene(repo); h.Orphaned[0] != id {
		t.Errorf("hygiene: %+v", h)
	}
	// It still holds for the whole project: the branch scope goes, and so does the signal.
	if _, herr, err := r.Host.Tool(ctx, "thatch", runtime.ToolUpdate, "ses_a", map[string]any{"id": id, "projectWide": true}); err != nil || herr != nil {
		t.Fatal(err, herr)
	}
	got.Memory = memory.Memory{}
	must(t, r.TryAPI("memory.get", map[string]any{"id": id}, &got))
	if got.Memory.Branch != "" || len(r.Hygiene(repo).Orphaned) != 0 {
		t.Errorf("after projectWide: branch %q, hygiene %+v", got.Memory.Branch, r.Hygiene(repo))
	}
}
