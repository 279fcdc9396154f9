package daemontest

import (
	"testing"

	"github.com/thatch-dev/thatch/internal/testkit"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds or the rig's usual timeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, WaitTimeout, what, cond)
}
