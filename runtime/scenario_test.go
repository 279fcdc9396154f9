package runtime_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/scenario"
)

// TestScenarios runs the golden scripts of testdata/scenarios against the decision core.
// Run with -update to rewrite their outputs.
func TestScenarios(t *testing.T) {
	scripts := scenario.Scripts("../testdata/scenarios")
	if len(scripts) == 0 {
		t.Fatal("no scenario scripts found")
	}
	for _, path := range scripts {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			h := scenario.New()
			// The index (sessions by host and by parent, status's tally) is kept by Step;
			// after every step it must equal a full scan.
			h.AfterStep = func(in runtime.Input, _ *runtime.Effects) {
				if err := h.State.CheckIndex(); err != nil {
					t.Fatalf("after %T: %v", in, err)
				}
				// ExtractionPhase is derived on the promise that a child is named only
				// while Extracting.
				for id, sess := range h.State.Sessions {
					if sess.Child != "" && !sess.Extracting {
						t.Fatalf("after %T: %s names child %s but is not extracting", in, id, sess.Child)
					}
				}
			}
			scenario.Run(t, path, h.Exec)
		})
	}
}

// TestCompletionSaysWhoAndWhen: completing entries (thatch_extraction_done, or the child's
// idle) names the claimant and the time, which the journal keeps with the completed calls
// (provenance, issue 29).
func TestCompletionSaysWhoAndWhen(t *testing.T) {
	cmds, err := scenario.Parse("../testdata/scenarios/extraction.txt")
	if err != nil {
		t.Fatal(err)
	}
	h := scenario.New()
	var got []runtime.EntryOp
	h.AfterStep = func(_ runtime.Input, fx *runtime.Effects) {
		for _, op := range fx.Entries {
			if op.Kind == runtime.EntryDeleteClaimed {
				if !op.At.Equal(h.Now) {
					t.Errorf("completion of %s's entries by %s at %v, want the step's time %v", op.Root, op.Claimant, op.At, h.Now)
				}
				got = append(got, op)
			}
		}
	}
	for _, c := range cmds {
		h.Exec(c)
	}
	if len(got) != 1 || got[0].Root != "ses_a" || got[0].Claimant != "ses_x" {
		t.Fatalf("completions %+v, want one of ses_a's entries by ses_x", got)
	}
}
