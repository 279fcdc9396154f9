package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thatch-dev/thatch/adapters/mcp"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// mcpClientName is the name the tests' MCP client gives in its initialize: the client of
// the memories thatch mcp writes.
const mcpClientName = "thatch-test-client"

// mcpSession starts the thatch binary's MCP server as an MCP client does (the Go SDK's
// client over the process's standard input and output), in dir, reaching the thatch of c,
// with env added to its environment; roots are the client's roots (file:// URIs).
func mcpSession(t *testing.T, c envOf, dir string, roots []string, args ...string) *sdk.ClientSession {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"mcp"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "THATCH_LOG_LEVEL=warn", "THATCH_LOG_FORMAT=json", "GORACE=atexit_sleep_ms=0")
	cmd.Env = append(cmd.Env, c...)
	cmd.Stderr = os.Stderr
	client := sdk.NewClient(&sdk.Implementation{Name: mcpClientName, Version: "1.0"}, nil)
	for _, r := range roots {
		client.AddRoots(&sdk.Root{URI: r})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to thatch mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// envOf is the environment that points thatch mcp at a thatch.
type envOf []string

// mcpEnv points thatch mcp at the rig's thatch: its data folder (the broker's token) and
// its embedded broker.
func (r *rig) mcpEnv() envOf {
	return envOf{"THATCH_DATA_DIR=" + r.dataDir, "THATCH_NATS_LISTEN=" + r.cfg.NATSListen}
}

// callTool calls a tool within a minute: an answer that never comes fails the test.
func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: a protocol error, not a tool error: %v", name, args, err)
	}
	return res
}

// text is a result's text content.
func text(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// structured decodes a result's structured content.
func structured(t *testing.T, res *sdk.CallToolResult) map[string]any {
	t.Helper()
	data, err := json.Marshal(res.StructuredContent)
	must(t, err)
	var m map[string]any
	must(t, json.Unmarshal(data, &m))
	return m
}

// toolOK calls a tool that must succeed and returns its result.
func toolOK(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res := callTool(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s %v is a tool error: %s", name, args, text(res))
	}
	return res
}

// toolError calls a tool that must fail with a tool error whose text holds want.
func toolError(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, want ...string) string {
	t.Helper()
	res := callTool(t, cs, name, args)
	msg := text(res)
	if !res.IsError {
		t.Fatalf("%s %v succeeded (%s); want a tool error", name, args, msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s %v: the tool error %q does not say %q", name, args, msg, w)
		}
	}
	return msg
}

// gitIn runs git in dir, with no user configuration.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// gitRepo is a git repository with two commits; it returns the folder and its root commit,
// the project id opencode gives it.
func gitRepo(t *testing.T) (dir, root string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("the git binary is absent: a repository's project id is its root commit")
	}
	dir = filepath.Join(t.TempDir(), "repo")
	must(t, os.MkdirAll(filepath.Join(dir, "src", "pkg"), 0o755))
	gitIn(t, dir, "init", "-q", "-b", "main")
	for _, f := range []string{"README", "src/pkg/a.go"} {
		must(t, os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644))
		gitIn(t, dir, "add", f)
		gitIn(t, dir, "commit", "-q", "-m", f)
	}
	return dir, gitIn(t, dir, "rev-list", "--max-parents=0", "HEAD")
}

// opencodeSession publishes an opencode session of the repository at dir, with the
// project id opencode gives it.
func (r *rig) opencodeSession(ctx context.Context, id, dir, projectID string) {
	r.t.Helper()
	info := runtime.SessionInfo{ID: id, Title: "t", Directory: dir, ProjectID: projectID}
	r.host.AddSession(info)
	_, err := r.host.Publish(ctx, "session.created", map[string]any{"sessionID": id, "info": info})
	must(r.t, err)
}

// TestMCPServer drives thatch mcp, the real binary, with the Go SDK's own client over stdio
// against a running thatch (embedded broker with its token, SQLite): the four tools are
// listed with their input and output schemas; each works, with the model's text as text
// content and the metadata as structured content; a memory an opencode session wrote in a
// git repository is found by thatch mcp started in a subfolder of that repository (keyed
// by its root commit), and what thatch mcp writes reaches the opencode session, with
// source {host: mcp, client}; the resource thatch://memories and the prompt memories carry
// the memory section; bad arguments are tool errors and the server goes on serving.
func TestMCPServer(t *testing.T) {
	repo, root := gitRepo(t)
	r := newEmbeddedRig(t, "v1")
	r.start()
	ctx := r.ctx()
	must(t, r.host.Hello(ctx, "b1"))
	r.opencodeSession(ctx, "ses_oc", repo, root)
	a, herr, err := r.host.Tool(ctx, "thatch", runtime.ToolRemember, "ses_oc",
		map[string]any{"content": "Deploy needs the office VPN; run scripts/deploy.sh --dry-run first.", "kind": "pitfall"})
	if err != nil || herr != nil {
		t.Fatal(err, herr)
	}
	ocID := a.Metadata.(map[string]any)["id"].(string)

	cs := mcpSession(t, r.mcpEnv(), filepath.Join(repo, "src", "pkg"), nil)
	lctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tools, err := cs.ListTools(lctx, nil)
	must(t, err)
	required := map[string][]string{runtime.ToolSearch: {"query"}, runtime.ToolRemember: {"content"}, runtime.ToolUpdate: {"id"}, runtime.ToolForget: {"id"}}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		data, _ := json.Marshal(tool.InputSchema)
		var in struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		must(t, json.Unmarshal(data, &in))
		if in.Type != "object" || !slices.Equal(in.Required, required[tool.Name]) || len(in.Properties) == 0 || tool.Description == "" || tool.OutputSchema == nil {
			t.Errorf("tool %s: input schema %s, output schema %v, description %q", tool.Name, data, tool.OutputSchema, tool.Description)
		}
	}
	slices.Sort(names)
	if want := []string{runtime.ToolForget, runtime.ToolRemember, runtime.ToolSearch, runtime.ToolUpdate}; !slices.Equal(names, want) {
		t.Errorf("thatch mcp lists the tools %v, want %v", names, want)
	}
	if data, _ := json.Marshal(tools.Tools); !strings.Contains(string(data), `"enum":["fact","decision","preference","command","pitfall","todo"]`) {
		t.Errorf("no tool's schema names the kinds: %s", data)
	}

	// The opencode session's memory, found from a subfolder of its repository.
	res := toolOK(t, cs, runtime.ToolSearch, map[string]any{"query": "deploy VPN"})
	if got := text(res); got != ocID+" (pitfall) Deploy needs the office VPN; run scripts/deploy.sh --dry-run first." {
		t.Errorf("memory_search answers %q", got)
	}
	if ids := structured(t, res)["ids"]; !slices.Equal(toStrings(ids), []string{ocID}) {
		t.Errorf("memory_search's structured content has ids %v, want [%s]", ids, ocID)
	}
	// The lines are in the structured content too: Claude Code shows its model that.
	if got := structured(t, res)["text"]; got != text(res) {
		t.Errorf("memory_search's structured content has text %q, want the text content %q", got, text(res))
	}

	res = toolOK(t, cs, runtime.ToolRemember, map[string]any{"content": "Release notes live in docs/CHANGES.md.", "kind": "decision", "tags": []string{"release"}})
	meta := structured(t, res)
	id, _ := meta["id"].(string)
	if !strings.HasPrefix(id, "mem_") || meta["created"] != true || !strings.Contains(text(res), "Remembered as "+id) {
		t.Fatalf("memory_remember answered %q with %v", text(res), meta)
	}
	if again := structured(t, toolOK(t, cs, runtime.ToolRemember, map[string]any{"content": "release notes live in  docs/CHANGES.md."})); again["id"] != id || again["created"] != false {
		t.Errorf("the same content again answered %v, want id %s, created false", again, id)
	}
	ms := r.memories(root)
	var written memory.Memory
	for _, m := range ms {
		if m.ID == id {
			written = m
		}
	}
	if len(ms) != 2 || written.Project != root || written.Source != (memory.Source{Host: "mcp", Client: mcpClientName}) || written.Kind != "decision" ||
		written.Directory != repo || written.Folder != repo {
		t.Errorf("the project %s holds %+v; want the opencode memory and %s with source {mcp %s}, written from the checkout's top %s", root, ms, id, mcpClientName, repo)
	}
	var shown strings.Builder
	must(t, client(lctx, r.cfg, "memories", []string{"show", id}, &shown))
	if !strings.Contains(shown.String(), "source   mcp, client "+mcpClientName+"\n") {
		t.Errorf("thatch memories show %s:\n%s\nwant its source, mcp and the client", id, shown.String())
	}
	// The opencode session finds what thatch mcp wrote: one set of memories.
	a, herr, err = r.host.Tool(lctx, "thatch", runtime.ToolSearch, "ses_oc", map[string]any{"query": "release notes"})
	if err != nil || herr != nil || !strings.Contains(a.Output, id) {
		t.Errorf("the opencode session's search found %q (%v %v), want %s", a.Output, err, herr, id)
	}

	res = toolOK(t, cs, runtime.ToolUpdate, map[string]any{"id": id, "content": "Release notes live in docs/CHANGES.md, newest first."})
	if text(res) != "Updated "+id+"." || structured(t, res)["id"] != id {
		t.Errorf("memory_update answered %q, %v", text(res), structured(t, res))
	}

	// The memory section, as a resource and as a prompt.
	rr, err := cs.ReadResource(lctx, &sdk.ReadResourceParams{URI: mcp.URI})
	must(t, err)
	if len(rr.Contents) != 1 || !strings.HasPrefix(rr.Contents[0].Text, "Memories of this project:\n") ||
		!strings.Contains(rr.Contents[0].Text, "- ["+ocID+"] (pitfall) Deploy needs") || !strings.Contains(rr.Contents[0].Text, "newest first") {
		t.Errorf("thatch://memories reads %+v", rr.Contents)
	}
	pr, err := cs.GetPrompt(lctx, &sdk.GetPromptParams{Name: mcp.Prompt})
	must(t, err)
	if len(pr.Messages) != 1 || pr.Messages[0].Content.(*sdk.TextContent).Text != rr.Contents[0].Text {
		t.Errorf("the prompt memories is %+v, want the section %q", pr.Messages, rr.Contents[0].Text)
	}

	// Bad arguments: tool errors that say what is wrong; the server goes on.
	toolError(t, cs, runtime.ToolRemember, map[string]any{}, "content")
	toolError(t, cs, runtime.ToolRemember, map[string]any{"content": "x", "kind": "rumour"}, "kind")
	toolError(t, cs, runtime.ToolRemember, map[string]any{"content": strings.Repeat("x", memory.MaxContent+1)}, "BadRequestError", "2000")
	toolError(t, cs, runtime.ToolSearch, map[string]any{"query": "deploy", "limit": 500}, "limit")
	toolError(t, cs, runtime.ToolUpdate, map[string]any{"id": "mem_000000000000deadbeef", "content": "y"}, "NotFoundError")
	toolError(t, cs, runtime.ToolUpdate, map[string]any{"id": id}, "BadRequestError", "nothing to update")

	res = toolOK(t, cs, runtime.ToolForget, map[string]any{"id": id, "reason": "moved"})
	if text(res) != "Forgot "+id+"." || structured(t, res)["id"] != id {
		t.Errorf("memory_forget answered %q, %v", text(res), structured(t, res))
	}
	if got := text(toolOK(t, cs, runtime.ToolSearch, map[string]any{"query": "release notes"})); got != "No memory of this project matches." {
		t.Errorf("a forgotten memory is still found: %q", got)
	}
	toolError(t, cs, runtime.ToolForget, map[string]any{"id": id}, "NotFoundError")
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// memoryIn is the live memory of project whose content holds s, and whether there is one.
func (r *rig) memoryIn(project, s string) (memory.Memory, bool) {
	for _, m := range r.memories(project) {
		if strings.Contains(m.Content, s) {
			return m, true
		}
	}
	return memory.Memory{}, false
}

// TestMCPProject: thatch mcp keys its project from the client's first root (a git
// repository: its root commit) before its working directory; --project names a folder
// (keyed the same way) or a key; a folder outside git is its own key.
func TestMCPProject(t *testing.T) {
	repo, root := gitRepo(t)
	plain := t.TempDir() // outside git
	r := newEmbeddedRig(t, "v1")
	r.start()
	env := r.mcpEnv()

	byRoot := mcpSession(t, env, plain, []string{"file://" + filepath.ToSlash(repo)})
	toolOK(t, byRoot, runtime.ToolRemember, map[string]any{"content": "Written through the client's root."})
	if m, ok := r.memoryIn(root, "client's root"); !ok || m.Source.Host != "mcp" || m.Source.Client != mcpClientName {
		t.Errorf("the memory written with the root %s is not in its project %s: %+v", repo, root, r.memories(root))
	}
	byFolder := mcpSession(t, env, plain, nil, "--project", filepath.Join(repo, "src"))
	if got := text(toolOK(t, byFolder, runtime.ToolSearch, map[string]any{"query": "client's root"})); !strings.Contains(got, "Written through the client's root.") {
		t.Errorf("thatch mcp --project %s/src found %q", repo, got)
	}
	byKey := mcpSession(t, env, repo, nil, "--project", "team-key")
	toolOK(t, byKey, runtime.ToolRemember, map[string]any{"content": "Written under a key."})
	if _, ok := r.memoryIn("team-key", "under a key"); !ok {
		t.Errorf("thatch mcp --project team-key wrote elsewhere: %+v", r.memories(""))
	}
	byDir := mcpSession(t, env, plain, nil)
	toolOK(t, byDir, runtime.ToolRemember, map[string]any{"content": "Written in a folder outside git."})
	if _, ok := r.memoryIn(plain, "outside git"); !ok {
		t.Errorf("thatch mcp in %s (outside git) wrote elsewhere: %+v", plain, r.memories(""))
	}
	if _, ok := r.memoryIn(root, "outside git"); ok {
		t.Errorf("a folder outside git wrote into the repository's project")
	}
}

// TestMCPThatchAway: a thatch that is not running, or stops, is a tool error that says to
// start thatch serve, and the server goes on: once thatch is back the same client's next
// call works; the resource read fails with the same words. A data folder without the
// broker's token is a tool error that names it.
func TestMCPThatchAway(t *testing.T) {
	r := newEmbeddedRig(t, "v1")
	dir := t.TempDir()
	cs := mcpSession(t, r.mcpEnv(), dir, nil) // before thatch runs
	toolError(t, cs, runtime.ToolSearch, map[string]any{"query": "anything"}, "thatch is not running", "thatch serve")

	r.start()
	toolOK(t, cs, runtime.ToolRemember, map[string]any{"content": "Written while thatch runs."})

	r.stop()
	toolError(t, cs, runtime.ToolSearch, map[string]any{"query": "written"}, "thatch serve")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: mcp.URI}); err == nil || !strings.Contains(err.Error(), "thatch serve") {
		t.Errorf("reading %s with thatch stopped: %v; want an error that says to start thatch serve", mcp.URI, err)
	}

	r.start()
	if got := text(toolOK(t, cs, runtime.ToolSearch, map[string]any{"query": "written"})); !strings.Contains(got, "Written while thatch runs.") {
		t.Errorf("after thatch came back the search found %q", got)
	}

	noToken := mcpSession(t, envOf{"THATCH_DATA_DIR=" + t.TempDir(), "THATCH_NATS_LISTEN=" + r.cfg.NATSListen}, dir, nil)
	toolError(t, noToken, runtime.ToolSearch, map[string]any{"query": "written"}, "token", "THATCH_DATA_DIR")
}

// TestMCPInstallSnippet: thatch install --host mcp prints an mcpServers entry whose command
// is an absolute path, whose args are [mcp] and whose env reaches this thatch: the thatch
// binary started with exactly that env (and no other THATCH_ variable) serves the tools.
func TestMCPInstallSnippet(t *testing.T) {
	r := newEmbeddedRig(t, "v1")
	r.start()
	var out strings.Builder
	must(t, client(context.Background(), r.cfg, "install", []string{"--host", "mcp"}, &out))
	var snippet struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(out.String()), &snippet); err != nil {
		t.Fatalf("thatch install --host mcp printed no JSON (%v):\n%s", err, out.String())
	}
	s, ok := snippet.MCPServers["thatch"]
	if !ok || !filepath.IsAbs(s.Command) || !slices.Equal(s.Args, []string{"mcp"}) || s.Env["THATCH_DATA_DIR"] != r.dataDir ||
		s.Env["THATCH_NATS_LISTEN"] != r.cfg.NATSListen || s.Env["THATCH_API_PREFIX"] != "" {
		t.Fatalf("thatch install --host mcp printed\n%s", out.String())
	}
	var env envOf
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "THATCH_") {
			env = append(env, kv)
		}
	}
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	cmd := exec.Command(binary(t), s.Args...) // the test's own binary is the snippet's command
	cmd.Dir, cmd.Env = t.TempDir(), env
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: mcpClientName, Version: "1.0"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	must(t, err)
	defer cs.Close()
	toolOK(t, cs, runtime.ToolSearch, map[string]any{"query": "anything"})
}

// TestMemoryToolsWithoutSession: the memory tools called with a project instead of a
// session (protocol §10, an extension) need the project and the source's host, and an
// absolute directory; memory.context takes a project too. What they write is the
// project's, with its source.
func TestMemoryToolsWithoutSession(t *testing.T) {
	r := newRig(t, "v1")
	r.start()
	ctx := r.ctx()
	tool := func(name string, body map[string]any) (runtime.Answer, *protocol.Error) {
		t.Helper()
		var a runtime.Answer
		raw, err := json.Marshal(body)
		must(t, err)
		msg, err := r.nc.RequestWithContext(ctx, "thatch.tool."+name, raw)
		must(t, err)
		res, perr, err := protocol.Decode(msg.Data)
		must(t, err)
		if perr == nil {
			must(t, json.Unmarshal(res, &a))
		}
		return a, perr
	}
	dir := t.TempDir()
	args := map[string]any{"content": "Hostless calls keep their source."}
	for _, bad := range []map[string]any{
		{"args": args},
		{"project": "p1", "args": args},
		{"project": "p1", "source": map[string]any{"client": "x"}, "args": args},
		{"project": "p1", "directory": "rel/dir", "source": map[string]any{"host": "mcp"}, "args": args},
	} {
		if _, perr := tool(runtime.ToolRemember, bad); perr == nil || perr.Name != protocol.BadRequest {
			t.Errorf("memory_remember %v answered %v, want BadRequestError", bad, perr)
		}
	}
	a, perr := tool(runtime.ToolRemember, map[string]any{"project": "p1", "directory": dir, "source": map[string]any{"host": "mcp", "client": "zed"}, "args": args})
	if perr != nil {
		t.Fatal(perr)
	}
	m, ok := r.memoryIn("p1", "keep their source")
	if !ok || m.Source != (memory.Source{Host: "mcp", Client: "zed"}) || m.Directory != dir {
		t.Errorf("the hostless write answered %+v and stored %+v", a, r.memories("p1"))
	}
	var section struct {
		Text string `json:"text"`
	}
	must(t, r.tryAPI("memory.context", map[string]any{"project": "p1", "directory": dir}, &section))
	if !strings.Contains(section.Text, "- ["+m.ID+"] (fact) Hostless calls keep their source.") {
		t.Errorf("memory.context {project} answered %q", section.Text)
	}
	if err := r.tryAPI("memory.context", map[string]any{}, &section); err == nil || !strings.Contains(err.Error(), "project") {
		t.Errorf("memory.context {} answered %v, want a BadRequestError naming project", err)
	}
}

// TestMCPNoResponder: on an external broker that runs while thatch does not, a call is a
// tool error that says nothing answers and to start thatch serve; once thatch runs, the
// same client's next call works.
func TestMCPNoResponder(t *testing.T) {
	r := newRig(t, "v1") // the broker runs; thatch not yet
	cs := mcpSession(t, envOf{"THATCH_NATS_URL=" + r.url, "THATCH_DATA_DIR=" + r.dataDir}, t.TempDir(), nil)
	toolError(t, cs, runtime.ToolSearch, map[string]any{"query": "x"}, "thatch is not running: nothing answers on thatch.tool.memory_search", "thatch serve")
	r.start()
	if got := text(toolOK(t, cs, runtime.ToolSearch, map[string]any{"query": "x"})); got != "No memory of this project matches." {
		t.Errorf("once thatch runs the search answers %q", got)
	}
}
