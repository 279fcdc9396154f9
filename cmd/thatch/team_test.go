package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/adapters/team"
	"github.com/thatch-dev/thatch/adapters/team/teamtest"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Team memory with real thatch processes (protocol §9): each teammate is the built binary
// with its own data folder and embedded broker, connected to one node of an in-process
// 3-node JetStream cluster, with a fake host on its broker whose session belongs to the
// shared project.

const (
	sharedProject = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"
	localProject  = "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef"
)

type teammate struct {
	t       *testing.T
	name    string
	bin     string
	dataDir string
	listen  string
	teamURL string
	logPath string
	cmd     *exec.Cmd
	nc      *nats.Conn
	host    *fakehost.Host
	calls   int
}

func newTeammate(t *testing.T, bin, name, teamURL string) *teammate {
	m := &teammate{t: t, name: name, bin: bin, dataDir: filepath.Join(t.TempDir(), "data"), teamURL: teamURL,
		listen: fmt.Sprintf("127.0.0.1:%d", freePort(t)), logPath: filepath.Join(t.TempDir(), name+".log")}
	m.start()
	t.Cleanup(m.kill)
	return m
}

// start runs the binary and waits until its API answers and its host's sessions are known.
func (m *teammate) start() {
	t := m.t
	t.Helper()
	m.cmd = exec.Command(m.bin, "serve")
	m.cmd.Env = append(os.Environ(), "THATCH_DATA_DIR="+m.dataDir, "THATCH_NATS_LISTEN="+m.listen, "THATCH_HTTP_LISTEN=off",
		"THATCH_INSTALL_COMMANDS=off", "THATCH_LOG_FORMAT=json", "THATCH_LOG_LEVEL=debug", "THATCH_TEAM_URL="+m.teamURL,
		"THATCH_TEAM_AUTHOR="+m.name, "THATCH_NATS_URL=", "THATCH_NATS_TOKEN=", "THATCH_OPENCODE_URL=")
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	must(t, err)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	must(t, m.cmd.Start())
	waitWithin(t, 60*time.Second, m.name+"'s broker token", func() bool {
		_, err := os.Stat(filepath.Join(m.dataDir, natsbus.TokenFile))
		return err == nil
	})
	token, err := os.ReadFile(filepath.Join(m.dataDir, natsbus.TokenFile))
	must(t, err)
	waitWithin(t, 60*time.Second, m.name+" to answer status", func() bool {
		nc, err := nats.Connect("nats://"+m.listen, nats.Token(strings.TrimSpace(string(token))))
		if err != nil {
			return false
		}
		if apiCall(nc, "status", nil, new(runtime.StatusView)) != nil {
			nc.Close()
			return false
		}
		m.nc = nc
		return true
	})
	m.host, err = fakehost.New(m.nc, "h-"+m.name, "v1")
	must(t, err)
	m.host.Dir = t.TempDir()
	ctx := context.Background()
	must(t, m.host.Hello(ctx, fmt.Sprint("b", time.Now().UnixNano())))
	// A session in the shared project, one in a project not shared, and one outside git
	// (no projectID: its project is keyed by its directory).
	plain := filepath.Join(m.host.Dir, "plain")
	must(t, os.MkdirAll(plain, 0o700))
	for _, s := range []struct{ id, project, dir string }{{"ses_" + m.name, sharedProject, m.host.Dir},
		{"ses_" + m.name + "_local", localProject, m.host.Dir}, {"ses_" + m.name + "_dir", "", plain}} {
		info := runtime.SessionInfo{ID: s.id, Title: "t", Directory: s.dir, ProjectID: s.project}
		m.host.AddSession(info)
		_, err := m.host.Publish(ctx, protocol.EventSessionCreated, map[string]any{"sessionID": s.id, "info": info})
		must(t, err)
	}
	waitFor(t, m.name+"'s sessions", func() bool {
		var ss []runtime.SessionView
		return apiCall(m.nc, "sessions", nil, &ss) == nil && len(ss) >= 3
	})
}

func (m *teammate) kill() {
	if m.cmd == nil {
		return
	}
	if m.host != nil {
		m.host.Close()
	}
	if m.nc != nil {
		m.nc.Close()
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	_ = m.cmd.Wait()
	m.cmd = nil
}

// stop stops thatch as SIGTERM does; it must exit cleanly.
func (m *teammate) stop() {
	m.host.Close()
	m.nc.Close()
	must(m.t, m.cmd.Process.Signal(syscall.SIGTERM))
	if err := m.cmd.Wait(); err != nil {
		log, _ := os.ReadFile(m.logPath)
		m.t.Fatalf("%s exited with %v:\n%s", m.name, err, tail(string(log), 3000))
	}
	m.cmd = nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// tool calls a memory tool as the host's model would, in the shared project's session
// (local: the other project's).
func (m *teammate) tool(name string, local bool, args map[string]any) runtime.Answer {
	m.t.Helper()
	m.calls++
	sid := "ses_" + m.name
	if local {
		sid += "_local"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, herr, err := m.host.ToolCall(ctx, "thatch", name, sid, fmt.Sprintf("call_%d", m.calls), args)
	if err != nil || herr != nil {
		m.t.Fatalf("%s: %s %v: %v %v", m.name, name, args, herr, err)
	}
	return a
}

func (m *teammate) remember(content string) string {
	return m.tool(runtime.ToolRemember, false, map[string]any{"content": content}).Metadata.(map[string]any)["id"].(string)
}

// finds says whether a search of the shared project finds id.
func (m *teammate) finds(query, id string) bool {
	ids, _ := m.tool(runtime.ToolSearch, false, map[string]any{"query": query}).Metadata.(map[string]any)["ids"].([]any)
	return slices.Contains(ids, any(id))
}

func (m *teammate) share() {
	var r struct {
		Project string `json:"project"`
		Shared  bool   `json:"shared"`
	}
	must(m.t, apiCall(m.nc, protocol.APIMemoryShare, map[string]any{"project": sharedProject, "shared": true}, &r))
	if r.Project != sharedProject || !r.Shared {
		m.t.Fatalf("memory.share answered %+v", r)
	}
}

func (m *teammate) get(id string) (memory.Memory, []memory.Audit, bool) {
	var r struct {
		Memory memory.Memory  `json:"memory"`
		Audit  []memory.Audit `json:"audit"`
	}
	if err := apiCall(m.nc, protocol.APIMemoryGet, map[string]any{"id": id}, &r); err != nil {
		return memory.Memory{}, nil, false
	}
	return r.Memory, r.Audit, true
}

// state is the shared project's memories as §9 says they converge: ids, content, kind,
// tags, branch, live or forgotten; ids are those of the live memories and known.
func (m *teammate) state(known []string) string {
	var b strings.Builder
	for _, id := range known {
		mem, _, ok := m.get(id)
		if !ok {
			fmt.Fprintf(&b, "%s missing\n", id)
			continue
		}
		fmt.Fprintf(&b, "%s %s %q %v %q forgotten=%v\n", mem.ID, mem.Kind, mem.Content, mem.Tags, mem.Branch, mem.ForgottenAt != nil)
	}
	return b.String()
}

func (m *teammate) teamStatus() *runtime.TeamStatus {
	var st runtime.StatusView
	must(m.t, apiCall(m.nc, "status", nil, &st))
	return st.Team
}

func TestTeamOfThatches(t *testing.T) {
	if testing.Short() {
		t.Skip("three thatch processes and a 3-node cluster: skipped in -short mode")
	}
	bin := goBuild(t, "thatch-team", ".")
	// The nodes do not tell clients about each other: a thatch given one node stays cut off
	// while that node is down.
	c := teamtest.StartIsolated(t, 3)
	a := newTeammate(t, bin, "alice", c.URL(0))
	b := newTeammate(t, bin, "bob", c.URL(1))
	cc := newTeammate(t, bin, "carol", c.URL(2))
	for _, m := range []*teammate{a, b, cc} {
		m.share()
	}
	for _, m := range []*teammate{a, b, cc} {
		waitFor(t, m.name+" connected to the team", func() bool { st := m.teamStatus(); return st != nil && st.Connected })
	}

	// A memory remembered on A is found by a search on B and C.
	gw := a.remember("The staging gateway is api-gw-02")
	waitFor(t, "bob and carol to find alice's memory", func() bool { return b.finds("gateway", gw) && cc.finds("gateway", gw) })
	if mem, _, _ := b.get(gw); mem.Author != "alice" || !mem.Shared {
		t.Errorf("bob holds %+v, want alice's shared memory", mem)
	}

	// A project not shared never leaves its machine.
	local := a.tool(runtime.ToolRemember, true, map[string]any{"content": "The local secret sauce"}).Metadata.(map[string]any)["id"].(string)

	// The same text remembered on two machines ends as one memory on all.
	vb := b.remember("Run make check before pushing")
	vc := cc.remember("run MAKE check  before pushing")
	keep, drop := min(vb, vc), max(vb, vc)
	known := []string{gw, vb, vc}
	waitFor(t, "the duplicate to end as one", func() bool {
		for _, m := range []*teammate{a, b, cc} {
			k, _, ok1 := m.get(keep)
			d, _, ok2 := m.get(drop)
			if !ok1 || !ok2 || k.ForgottenAt != nil || d.ForgottenAt == nil {
				return false
			}
		}
		return true
	})
	for _, m := range []*teammate{a, b, cc} {
		_, log, _ := m.get(drop)
		if !slices.ContainsFunc(log, func(e memory.Audit) bool { return e.Reason == "duplicate of "+keep }) {
			t.Errorf("%s: %s is not forgotten as a duplicate of %s: %+v", m.name, drop, keep, log)
		}
	}

	// C is cut off (its node stopped): sharing goes on between A and B on the two nodes
	// left, while A and C both create, update and forget, the same memory on both sides.
	c.StopNode(2)
	waitFor(t, "carol to see the team gone", func() bool { return !cc.teamStatus().Connected })
	onA := a.remember("Releases are cut on Tuesdays")
	onC := cc.remember("The database is Postgres 16")
	a.tool(runtime.ToolUpdate, false, map[string]any{"id": gw, "content": "The staging gateway is api-gw-03"})
	cc.tool(runtime.ToolUpdate, false, map[string]any{"id": gw, "content": "The staging gateway is api-gw-04"}) // later: wins
	cc.tool(runtime.ToolForget, false, map[string]any{"id": keep, "reason": "make check is gone"})
	known = append(known, onA, onC)
	waitFor(t, "bob to get alice's changes with a node down", func() bool {
		mem, _, _ := b.get(gw)
		return b.finds("Tuesdays", onA) && mem.Content == "The staging gateway is api-gw-03"
	})
	if st := cc.teamStatus(); st.Outbox < 3 {
		t.Errorf("carol's outbox holds %d versions while cut off, want her 3 changes", st.Outbox)
	}
	c.StartNode(2)
	var want string
	waitWithin(t, 60*time.Second, "all three to converge", func() bool {
		want = a.state(known)
		return b.state(known) == want && cc.state(known) == want
	})
	for _, m := range []*teammate{a, b, cc} {
		mem, log, _ := m.get(gw)
		if mem.Content != "The staging gateway is api-gw-04" || mem.Author != "carol" {
			t.Errorf("%s: the later edit did not win: %+v", m.name, mem)
		}
		if !slices.ContainsFunc(log, func(e memory.Audit) bool {
			return e.Op == "superseded" && strings.Contains(e.Before, "api-gw-03") && e.Author == "alice" && e.Reason == "superseded by carol's edit"
		}) {
			t.Errorf("%s: alice's losing edit is not in the history as superseded by carol's: %+v", m.name, log)
		}
	}
	if k, _, _ := b.get(keep); k.ForgottenAt == nil {
		t.Error("carol's forget made offline did not reach bob")
	}

	// SIGKILL while the outbox holds changes: after the restart they arrive once.
	c.StopNode(0)
	waitFor(t, "alice to see the team gone", func() bool { return !a.teamStatus().Connected })
	late := a.remember("Feature flags live in flags.yaml")
	if st := a.teamStatus(); st.Outbox == 0 {
		t.Fatal("alice's change did not wait in her outbox")
	}
	a.kill()
	c.StartNode(0)
	a.start()
	known = append(known, late)
	waitFor(t, "alice's change from before the crash to reach bob", func() bool { return b.finds("flags.yaml", late) })
	_, blog, _ := b.get(late)
	if n := len(slices.DeleteFunc(slices.Clone(blog), func(e memory.Audit) bool { return e.Op != "create" })); n != 1 {
		t.Errorf("bob applied alice's version %d times: %+v", n, blog)
	}

	// A fourth thatch that starts sharing later receives everything.
	d := newTeammate(t, bin, "dave", c.URL(1))
	d.share()
	waitWithin(t, 60*time.Second, "dave to receive everything", func() bool {
		want = a.state(known)
		return d.state(known) == want && b.state(known) == want
	})
	if _, _, ok := d.get(local); ok {
		t.Error("alice's memory of a project not shared reached dave")
	}
	// The stream holds only the shared project.
	nc, err := nats.Connect(c.URL(1))
	must(t, err)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(context.Background(), team.Stream)
	must(t, err)
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(team.SubjectPrefix+".>"))
	must(t, err)
	for subject := range info.State.Subjects {
		if !strings.HasPrefix(subject, team.SubjectPrefix+"."+sharedProject+".") {
			t.Errorf("the team stream holds %s", subject)
		}
	}
	// A directory-keyed project cannot be shared, and the answer says why; the CLI stops
	// and starts sharing by key.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, herr, err := d.host.ToolCall(ctx, "thatch", runtime.ToolRemember, "ses_dave_dir", "c_dir", map[string]any{"content": "outside git"}); herr != nil || err != nil {
		t.Fatalf("remember outside git: %v %v", herr, err)
	}
	plain := filepath.Join(d.host.Dir, "plain")
	err = apiCall(d.nc, protocol.APIMemoryShare, map[string]any{"project": plain, "shared": true}, new(map[string]any))
	if err == nil || !strings.Contains(err.Error(), protocol.BadRequest) || !strings.Contains(err.Error(), "folder of this machine") {
		t.Errorf("sharing a directory key: %v", err)
	}
	cfg, err := daemon.LoadConfig()
	must(t, err)
	cfg.DataDir, cfg.NATSListen, cfg.NATSURL, cfg.NATSToken = d.dataDir, d.listen, "", ""
	var out bytes.Buffer
	must(t, memoriesCmd(context.Background(), cfg, []string{"unshare", "--project", sharedProject}, &out))
	if !strings.Contains(out.String(), "no longer sharing project "+sharedProject) || len(d.teamStatus().SharedProjects) != 0 {
		t.Errorf("thatch memories unshare: %s, status %+v", out.String(), d.teamStatus())
	}
	out.Reset()
	must(t, memoriesCmd(context.Background(), cfg, []string{"share", "--project", sharedProject}, &out))
	if !strings.Contains(out.String(), "sharing project "+sharedProject) || !slices.Equal(d.teamStatus().SharedProjects, []string{sharedProject}) {
		t.Errorf("thatch memories share: %s, status %+v", out.String(), d.teamStatus())
	}
	// A fresh checkout thatch holds no memory of is keyed by its root commit, as thatch mcp
	// keys it, from any folder in it; a name neither a known key nor a folder is refused.
	repo, root := gitRepo(t)
	out.Reset()
	must(t, memoriesCmd(context.Background(), cfg, []string{"share", "--project", filepath.Join(repo, "src")}, &out))
	if !strings.Contains(out.String(), "project "+root+": the git checkout "+repo) || !strings.Contains(out.String(), "sharing project "+root) ||
		!slices.Contains(d.teamStatus().SharedProjects, root) {
		t.Errorf("thatch memories share in a fresh checkout: %s, status %+v", out.String(), d.teamStatus())
	}
	out.Reset()
	must(t, memoriesCmd(context.Background(), cfg, []string{"unshare", "--project", root}, &out))
	if !strings.Contains(out.String(), "no longer sharing project "+root) || slices.Contains(d.teamStatus().SharedProjects, root) {
		t.Errorf("thatch memories unshare by the key shared: %s, status %+v", out.String(), d.teamStatus())
	}
	err = memoriesCmd(context.Background(), cfg, []string{"share", "--project", "acme-nope"}, &out)
	if err == nil || !strings.Contains(err.Error(), "acme-nope is neither a project key thatch knows nor a folder") ||
		!strings.Contains(err.Error(), "git rev-list --max-parents=0 HEAD") {
		t.Errorf("sharing an unknown key: %v", err)
	}
	out.Reset()
	must(t, memoriesCmd(context.Background(), cfg, []string{"show", gw}, &out))
	if !regexp.MustCompile(`author +carol`).MatchString(out.String()) || !strings.Contains(out.String(), "alice's edit, superseded by carol's edit") {
		t.Errorf("thatch memories show names no authors:\n%s", out.String())
	}
	for _, m := range []*teammate{a, b, cc, d} {
		m.stop()
	}
}
