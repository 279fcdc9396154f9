package main

import (
	"bytes"
	"testing"
)

// TestMemoriesListAlias: thatch memories list is thatch memories (its listing), flags and
// help included.
func TestMemoriesListAlias(t *testing.T) {
	r := newRig(t, "v1")
	r.start()
	if got, want := cli(t, r, "memories", "list", "--json"), cli(t, r, "memories", "--json"); got != want {
		t.Fatalf("thatch memories list --json printed %q, thatch memories --json %q", got, want)
	}
	var list, direct bytes.Buffer
	must(t, runCommand(r.ctx(), nil, &list, []string{"help", "memories", "list"}))
	must(t, runCommand(r.ctx(), nil, &direct, []string{"help", "memories"}))
	if list.String() != direct.String() {
		t.Fatalf("thatch help memories list:\n%s\nthatch help memories:\n%s", list.String(), direct.String())
	}
}
