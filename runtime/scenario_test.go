package runtime_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/runtime/scenario"
)

// TestScenarios runs the golden scripts of testdata/scenarios against the pure core.
// Run with -update to rewrite their outputs.
func TestScenarios(t *testing.T) {
	scripts := scenario.Scripts("../testdata/scenarios")
	if len(scripts) == 0 {
		t.Fatal("no scenario scripts found")
	}
	for _, path := range scripts {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			h := scenario.New()
			scenario.Run(t, path, h.Exec)
		})
	}
}
