package runtime

import (
	"fmt"
	"testing"
)

func TestPlanStrandActions(t *testing.T) {
	live := map[string]bool{"/live": true, "/wt": true}
	exists := func(d string) bool { return live[d] }
	worktrees := map[string]string{"p1": "/wt", "p2": "/gone-wt", "p3": "/dead", "global": "/"}
	for _, tc := range []struct {
		name    string
		row     SessionInfo
		canMove bool
		want    string // "" when the session is left out of the plan
	}{
		{"real session in a live directory", SessionInfo{ID: "s", Directory: "/live", ProjectID: "p1"}, true, ""},
		{"machinery in a live directory is never touched", SessionInfo{ID: "s", Directory: "/live", Title: ExtractionTitle, ParentID: "p"}, true, ""},
		{"unknown directory is not judged", SessionInfo{ID: "s", Directory: ""}, true, ""},
		{"machinery in a missing directory", SessionInfo{ID: "s", Directory: "/dead", Title: ExtractionTitle, ParentID: "p"}, true, "delete /dead"},
		{"machinery is deleted even when the host cannot move", SessionInfo{ID: "s", Directory: "/dead", Title: ExtractionTitle, ParentID: "p"}, false, "delete /dead"},
		{"top-level session moved to its worktree", SessionInfo{ID: "s", Directory: "/dead", ProjectID: "p1"}, true, "move /wt"},
		{"task child always skipped", SessionInfo{ID: "s", Directory: "/dead", ParentID: "p", Title: "explore", ProjectID: "p1"}, true, "skip /dead"},
		{"no worktree known", SessionInfo{ID: "s", Directory: "/dead", ProjectID: "p9"}, true, "skip /dead"},
		{"no project at all", SessionInfo{ID: "s", Directory: "/dead"}, true, "skip /dead"},
		{"opencode's global project has no checkout", SessionInfo{ID: "s", Directory: "/dead", ProjectID: "global"}, true, "skip /dead"},
		{"worktree itself gone", SessionInfo{ID: "s", Directory: "/dead", ProjectID: "p2"}, true, "skip /dead"},
		{"worktree is the missing directory", SessionInfo{ID: "s", Directory: "/dead", ProjectID: "p3"}, true, "skip /dead"},
		{"host cannot move", SessionInfo{ID: "s", Directory: "/dead", ProjectID: "p1"}, false, "skip /dead"},
	} {
		got := ""
		actions := PlanStrandActions([]SessionInfo{tc.row}, exists, worktrees, tc.canMove)
		if len(actions) > 1 {
			t.Fatalf("%s: %d actions for one row", tc.name, len(actions))
		}
		if len(actions) == 1 {
			got = fmt.Sprintf("%s %s", actions[0].Kind, actions[0].Directory)
			if actions[0].Reason == "" || actions[0].SessionID != "s" {
				t.Errorf("%s: action without a reason or session: %+v", tc.name, actions[0])
			}
		}
		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
