package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// TestMemoriesByFolder: the memories a session writes through the daemon are kept under its
// project key, opencode's project id (a hash), and a person names the project by its folder:
// thatch memories lists them by the folder, a folder inside it, . there, or the key, and
// shows the folder rather than the hash; --json carries it; export and hygiene take the
// folder too; a --project that names nothing fails and names the projects there are.
func TestMemoriesByFolder(t *testing.T) {
	r := newRig(t, "v1")
	r.start()
	ctx := r.ctx()
	must(t, r.host.Hello(ctx, "b1"))
	const hash = "b30d1efdfcef71db296cfacb7db191c07152b3aa"
	folder := r.host.Dir
	info := runtime.SessionInfo{ID: "ses_a", Title: "t", Directory: folder, ProjectID: hash}
	r.host.AddSession(info)
	_, err := r.host.Publish(ctx, "session.created", map[string]any{"sessionID": "ses_a", "info": info})
	must(t, err)
	other := t.TempDir() // a folder outside git: its own key
	must(t, r.host.Created(ctx, "ses_b", "", "t", other))
	for _, w := range []struct{ session, content string }{
		{"ses_a", "The trial project builds with make trial."},
		{"ses_a", "Trial data lives in fixtures/trial.json."},
		{"ses_b", "The other project indents with tabs."},
	} {
		if _, herr, err := r.host.Tool(ctx, "thatch", runtime.ToolRemember, w.session, map[string]any{"content": w.content}); err != nil || herr != nil {
			t.Fatal(err, herr)
		}
	}
	memories := func(args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := memoriesCmd(ctx, r.cfg, args, &out)
		return out.String(), err
	}
	trial := func(out string) bool {
		return strings.Count(out, "fixtures/trial.json")+strings.Count(out, "make trial") == 2 && !strings.Contains(out, "tabs")
	}

	out, err := memories()
	must(t, err)
	if strings.Count(out, folder) != 2 || strings.Count(out, other) != 1 || strings.Contains(out, hash) {
		t.Errorf("thatch memories shows the projects as\n%s\nwant folder %s twice, %s once, not the key %s", out, folder, other, hash)
	}

	sub := filepath.Join(folder, "src", "pkg")
	must(t, os.MkdirAll(sub, 0o700))
	for _, p := range []string{folder, folder + "/", hash, sub} {
		out, err := memories("--project", p)
		if err != nil || !trial(out) {
			t.Errorf("thatch memories --project %s: %v\n%s", p, err, out)
		}
	}
	t.Chdir(sub)
	if out, err := memories("--project", "."); err != nil || !trial(out) {
		t.Errorf("thatch memories --project . in %s: %v\n%s", sub, err, out)
	}
	if out, err := memories("--project", other, "--search", "tabs"); err != nil || !strings.Contains(out, "tabs") || strings.Contains(out, "trial") {
		t.Errorf("thatch memories --project %s --search tabs: %v\n%s", other, err, out)
	}

	out, err = memories("--project", folder, "--json")
	must(t, err)
	var ms []memory.Memory
	must(t, json.Unmarshal([]byte(out), &ms))
	if len(ms) != 2 || ms[0].Folder != folder || ms[0].Project != hash || !strings.Contains(out, `"folder":`) {
		t.Errorf("thatch memories --project %s --json:\n%s", folder, out)
	}
	out, err = memories("export", "--project", sub)
	if err != nil || strings.Count(out, "\n") != 2 || strings.Count(out, `"folder":"`+folder+`"`) != 2 {
		t.Errorf("thatch memories export --project %s: %v\n%s", sub, err, out)
	}
	if out, err := memories("hygiene", "--project", folder); err != nil || !strings.Contains(out, "nothing to tidy") {
		t.Errorf("thatch memories hygiene --project %s: %v\n%s", folder, err, out)
	}
	out, err = memories("projects")
	if err != nil || !strings.Contains(out, folder) || !strings.Contains(out, hash) || !strings.Contains(out, other) {
		t.Errorf("thatch memories projects: %v\n%s", err, out)
	}
	// The API takes the folder too.
	if n := len(r.memories(folder)); n != 2 {
		t.Errorf("the memories method with project %s lists %d, want 2", folder, n)
	}

	// A name that matches nothing says so, for the listing, the export and hygiene.
	nowhere := filepath.Join(t.TempDir(), "nowhere")
	for _, args := range [][]string{{"--project", nowhere}, {"export", "--project", nowhere}, {"hygiene", "--project", nowhere}, {"--project", "trialproj"}} {
		out, err := memories(args...)
		if err == nil || !strings.Contains(err.Error(), "no memories of project "+args[len(args)-1]+" (known projects: ") ||
			!strings.Contains(err.Error(), folder) || !strings.Contains(err.Error(), other) || out != "" {
			t.Errorf("thatch memories %s: %v, out %q; want an error naming the known projects", strings.Join(args, " "), err, out)
		}
	}
}

// TestMemoriesAddInACheckout: thatch memories add remembers a text in the project of a git
// checkout, keyed by its root commit as thatch mcp keys it, from any folder in it, and prints
// the id; the same text again is the same memory; memory_remember's rules hold (a bad kind
// is refused, naming it); the other memories commands find the project by a folder of the
// checkout, though no session of it ever ran; an unknown key is refused.
func TestMemoriesAddInACheckout(t *testing.T) {
	r := newRig(t, "v1")
	r.start()
	ctx := r.ctx()
	repo, root := gitRepo(t)
	memories := func(args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := memoriesCmd(ctx, r.cfg, args, &out)
		return out.String(), err
	}
	out, err := memories("add", "--project", filepath.Join(repo, "src"), "--kind", "decision", "--tags", "build, ci", "Releases are cut from main on Mondays.")
	must(t, err)
	id := strings.TrimSpace(out)
	if !strings.HasPrefix(id, "mem_") || strings.Contains(id, " ") {
		t.Fatalf("thatch memories add printed %q, want the id", out)
	}
	var got []memory.Memory
	out, err = memories("--json", "--project", filepath.Join(repo, "src", "pkg"))
	must(t, err)
	must(t, json.Unmarshal([]byte(out), &got))
	if len(got) != 1 || got[0].ID != id || got[0].Project != root || got[0].Kind != "decision" || strings.Join(got[0].Tags, ",") != "build,ci" ||
		got[0].Source.Host != "cli" {
		t.Errorf("the checkout's project %s holds %+v, want %s with kind, tags and source cli", root, got, id)
	}
	out, err = memories("add", "--project", root, "releases are cut   from main on Mondays.")
	if err != nil || !strings.HasPrefix(out, id+" (already remembered") {
		t.Errorf("the same text again: %q %v, want %s already remembered", out, err, id)
	}
	if _, err := memories("add", "--project", repo, "--kind", "nonsense", "Something"); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Errorf("a bad kind: %v, want it refused and named", err)
	}
	if _, err := memories("add", "--project", "acme-nope", "Something"); err == nil || !strings.Contains(err.Error(), "acme-nope") {
		t.Errorf("an unknown project key: %v, want it refused and named", err)
	}
}
