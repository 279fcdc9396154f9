package runtime_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/internal/testkit"
)

// The dependency rule of thatch's packages. Each package's doc.go says in words what the
// package owns and what it must never import; depRules is the same rule in a form go list
// can check. Change both together.
//
// A pattern is a path relative to the module ("runtime/redact"), or a full import path
// ("github.com/nats-io/nats.go"); a trailing "/..." also matches every package below. A
// package is bound by every row whose pkg pattern matches it: it must not depend (directly
// or through another package) on anything a row forbids, unless a row allows it. A package
// never forbids itself or the packages below it.
var depRules = []struct {
	pkg    string
	forbid []string
	allow  []string
}{
	// The decision core: no adapter, no storage, no wiring, no NATS and no SQL.
	{pkg: "runtime/...", forbid: []string{"journal/...", "adapters/...", "commands/...", "cmd/...",
		"github.com/nats-io/...", "modernc.org/sqlite/..."}},
	// The leaves every layer may use: nothing of thatch.
	{pkg: "runtime/protocol", forbid: []string{"..."}},
	{pkg: "runtime/redact", forbid: []string{"..."}},
	// Storage: the runtime's types, never an adapter, the wiring or NATS.
	{pkg: "journal/...", forbid: []string{"adapters/...", "commands/...", "cmd/...", "github.com/nats-io/..."}},
	{pkg: "journal/memory", forbid: []string{"runtime/..."}, allow: []string{"runtime/protocol"}},
	{pkg: "journal/migrate", forbid: []string{"..."}},
	{pkg: "journal/checkpoint", forbid: []string{"..."}},
	// The slash commands, the plugin and their installer: a leaf beside the protocol.
	{pkg: "commands/...", forbid: []string{"..."}, allow: []string{"runtime/protocol", "internal/keyfile"}},
	// Adapters: the runtime, the stores, commands; never the wiring, never each other, but
	// for the two that ride on natsbus's connection and stream.
	{pkg: "adapters/...", forbid: []string{"cmd/...", "adapters/..."}},
	// natsbus is the edge to NATS: the memory service (adapters/memories) owns the memory
	// store, and natsbus's responders reach it through an interface.
	{pkg: "adapters/natsbus", forbid: []string{"journal/..."}},
	{pkg: "adapters/fakehost", allow: []string{"adapters/natsbus"}},
	{pkg: "adapters/opencode", allow: []string{"adapters/natsbus"}},
	// The test kit: a leaf that every package's tests may import without a cycle.
	{pkg: "internal/testkit", forbid: []string{"..."}},
	// The retry delay: a leaf the runtime and the adapters share.
	{pkg: "internal/backoff", forbid: []string{"..."}},
	// The secret files' one reader and writer: a leaf beside the protocol.
	{pkg: "internal/keyfile", forbid: []string{"..."}},
	// Test doubles stay out of every binary but the benchmark's, and the scenario harness
	// and the test kit (they import testing) out of every binary.
	{pkg: "...", forbid: []string{"adapters/fakehost", "adapters/fakellm", "runtime/scenario", "runtime/redact/redacttest",
		"internal/testkit", "adapters/team/teamtest", "cmd/internal/daemon/daemontest"}},
	{pkg: "cmd/thatch-bench", allow: []string{"adapters/fakehost", "adapters/fakellm", "adapters/team/teamtest"}},
	// The daemon rig: the daemon's tests' support, with the fake host and the test kit.
	{pkg: "cmd/internal/daemon/daemontest", allow: []string{"adapters/fakehost", "internal/testkit", "runtime/scenario"}},
}

// depAreas are the top-level folders a package may live in; a package elsewhere has no
// rule yet.
var depAreas = []string{"runtime/...", "journal/...", "adapters/...", "commands/...", "cmd/...", "internal/..."}

const modulePath = "github.com/thatch-dev/thatch"

// TestDepsRule: no package depends on what its rule forbids, every package is under a
// known area, and every package has its doc.go saying what it imports.
func TestDepsRule(t *testing.T) {
	root := testkit.ModuleRoot(t)
	pkgs := goList(t, root)
	if len(pkgs) < 5 {
		t.Fatalf("go list found %d packages: is the module root %s right?", len(pkgs), root)
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.path, modulePath), "/")
		if !slices.ContainsFunc(depAreas, func(a string) bool { return matchPkg(a, p.path) }) {
			t.Errorf("%s lives outside %v: give it a row in depRules (runtime/deps_test.go) and a doc.go", rel, depAreas)
		}
		checkDoc(t, root, rel, p)
		for _, dep := range p.deps {
			if dep == p.path || strings.HasPrefix(dep, p.path+"/") {
				continue
			}
			forbidden, allowed := "", false
			for _, r := range depRules {
				if !matchPkg(r.pkg, p.path) {
					continue
				}
				for _, f := range r.forbid {
					if matchPkg(f, dep) && forbidden == "" {
						forbidden = r.pkg + " never imports " + f
					}
				}
				for _, a := range r.allow {
					if matchPkg(a, dep) {
						allowed = true
					}
				}
			}
			if forbidden != "" && !allowed {
				t.Errorf("%s imports %s (%s), which its doc.go forbids: %s",
					rel, strings.TrimPrefix(dep, modulePath+"/"), how(p, dep), forbidden)
			}
		}
	}
}

// checkDoc: a library package's comment is in its doc.go and says what it imports; a
// command has a package comment.
func checkDoc(t *testing.T, root, rel string, p listedPkg) {
	t.Helper()
	if p.name == "main" {
		if strings.TrimSpace(p.doc) == "" {
			t.Errorf("%s: command without a package comment", rel)
		}
		return
	}
	src, err := os.ReadFile(filepath.Join(p.dir, "doc.go"))
	if err != nil {
		t.Errorf("%s has no doc.go: say in a few lines what the package owns and what it must never import", rel)
		return
	}
	comment, _, ok := bytes.Cut(src, []byte("\npackage "))
	if !ok || !bytes.Contains(comment, []byte("// Package "+p.name+" ")) {
		t.Errorf("%s/doc.go does not hold the package comment (// Package %s …)", rel, p.name)
		return
	}
	if !bytes.Contains(comment, []byte("import")) {
		t.Errorf("%s/doc.go does not say what the package imports or must never import", rel)
	}
}

// how says whether p imports dep itself or through another package.
func how(p listedPkg, dep string) string {
	if slices.Contains(p.imports, dep) {
		return "directly"
	}
	return "through another package"
}

// matchPkg reports whether the import path path matches pattern (see depRules).
func matchPkg(pattern, path string) bool {
	if pattern == "..." {
		return strings.HasPrefix(path, modulePath+"/")
	}
	full := pattern
	if first, _, _ := strings.Cut(pattern, "/"); !strings.Contains(first, ".") {
		full = modulePath + "/" + pattern
	}
	if base, ok := strings.CutSuffix(full, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == full
}

type listedPkg struct {
	path, name, dir, doc string
	imports, deps        []string
}

// goList lists the module's packages with what they depend on (build dependencies, not
// their tests').
func goList(t *testing.T, root string) []listedPkg {
	t.Helper()
	const sep = "\x1f"
	cmd := exec.Command("go", "list", "-e", "-f",
		`{{.ImportPath}}`+sep+`{{.Name}}`+sep+`{{.Dir}}`+sep+`{{join .Imports " "}}`+sep+`{{join .Deps " "}}`+sep+`{{.Doc}}`,
		"./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []listedPkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, sep)
		if len(f) != 6 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		pkgs = append(pkgs, listedPkg{path: f[0], name: f[1], dir: f[2],
			imports: strings.Fields(f[3]), deps: strings.Fields(f[4]), doc: f[5]})
	}
	return pkgs
}
