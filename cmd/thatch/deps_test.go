package main

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

// TestNoTestDoubleInTheBinary: thatch's binary links no test double. go list -deps of the
// command names no package of thatch's called fake… (adapters/fakehost, adapters/fakellm:
// thatch-bench and the tests use them, thatch serve must not).
func TestNoTestDoubleInTheBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	importers := map[string][]string{}
	var doubles []string
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), " ")
		for _, imp := range strings.Fields(imports) {
			importers[imp] = append(importers[imp], pkg)
		}
		if strings.HasPrefix(pkg, "github.com/thatch-dev/thatch/") && strings.HasPrefix(path.Base(pkg), "fake") {
			doubles = append(doubles, pkg)
		}
	}
	for _, pkg := range doubles {
		t.Errorf("thatch's binary links the test double %s (imported by %s)", pkg, strings.Join(importers[pkg], ", "))
	}
}
