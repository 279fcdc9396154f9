package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/adapters/web"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// TestTeamSwitchAndCard: with team memory on, the memories page of a project keyed by its
// projectID has a switch that shares it and stops sharing it; a directory-keyed project
// says why it cannot be shared; the overview has the team card; listings and history name
// the author.
func TestTeamSwitchAndCard(t *testing.T) {
	r := newRig(t)
	mem, err := memory.Open(filepath.Join(t.TempDir(), "memories.db"), memory.Options{Author: "alice@laptop"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	const key = "0123456789abcdef0123456789abcdef01234567"
	ctx := context.Background()
	if _, err := mem.Remember(ctx, memory.Caller{Project: key, SessionID: "ses_1"}, memory.RememberArgs{Content: "Use pnpm"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Remember(ctx, memory.Caller{Project: "/home/dev/shop", SessionID: "ses_1"}, memory.RememberArgs{Content: "Local only"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Minute)
	srv := &web.Server{Listen: r.srv.Listen, Loop: r.srv.Loop, Journal: r.srv.Journal, Sweep: r.srv.Sweep,
		Metrics: r.srv.Metrics, Log: r.srv.Log, Memories: mem}
	srv.Share = func(ctx context.Context, project string, shared bool) error {
		return mem.Share(ctx, project, shared, time.Now())
	}
	srv.Status = func(ctx context.Context) (runtime.StatusView, error) {
		st, err := r.status(ctx)
		st.Team = &runtime.TeamStatus{URL: "nats://team:4222", Connected: false, Since: since, Author: "alice@laptop", Outbox: 3, SharedProjects: []string{key},
			Rejected: 1, Refused: []runtime.TeamRefusal{{Project: key, Subject: "thatch.team.x.mem_1", Kind: "malformed", Reason: "not JSON", At: since}}, PublishRefused: []string{"acme-web"}}
		return st, err
	}
	h, err := srv.Handler()
	if err != nil {
		t.Fatal(err)
	}
	r.ts = httptest.NewServer(h)
	t.Cleanup(r.ts.Close)
	r.srv = srv // the one-time links are the new server's
	c := r.login()

	page := r.page(c, "/memories?project="+key)
	if !strings.Contains(page, `id="team-switch"`) || !strings.Contains(page, "Share with the team") || !strings.Contains(page, "by alice@laptop") {
		t.Fatalf("no team switch or author on the project's page:\n%s", page)
	}
	res := r.post(c, "/share", url.Values{"csrf": {r.csrf(c, "/memories?project="+key)}, "project": {key}, "shared": {"on"}})
	if res.code != http.StatusSeeOther {
		t.Fatalf("POST /share: %d %s", res.code, res.body)
	}
	if ps, _ := mem.SharedProjects(ctx); len(ps) != 1 || ps[0].Project != key {
		t.Fatalf("shared projects after the switch: %+v", ps)
	}
	if n, _ := mem.TeamCounts(ctx); n.Outbox != 1 {
		t.Errorf("sharing put %d versions in the outbox, want the project's one memory", n.Outbox)
	}
	if page := r.page(c, "/memories?project="+key); !strings.Contains(page, "Stop sharing") {
		t.Fatalf("the switch does not say the project is shared:\n%s", page)
	}
	r.post(c, "/share", url.Values{"csrf": {r.csrf(c, "/memories?project="+key)}, "project": {key}, "shared": {"off"}})
	if ps, _ := mem.SharedProjects(ctx); len(ps) != 0 {
		t.Fatalf("still shared after stop: %+v", ps)
	}
	if page := r.page(c, "/memories?project=/home/dev/shop"); !strings.Contains(page, `id="team-refused"`) || !strings.Contains(page, "folder of this machine") {
		t.Errorf("a directory-keyed project's page does not say why it cannot be shared:\n%s", page)
	}
	res = r.post(c, "/share", url.Values{"csrf": {r.csrf(c, "/memories")}, "project": {"/home/dev/shop"}, "shared": {"on"}})
	if res.code != http.StatusBadRequest || !strings.Contains(res.body, "folder of this machine") {
		t.Errorf("sharing a directory key from the page: %d %s", res.code, res.body)
	}
	over := r.page(c, "/")
	if !strings.Contains(over, `id="team-card"`) || !strings.Contains(over, "not connected") || !strings.Contains(over, "3 to send") || !strings.Contains(over, key) {
		t.Errorf("no team card on the overview:\n%s", over)
	}
	if !strings.Contains(over, "publish refused by the team server (not granted?): acme-web</strong>; its versions stay in the outbox") {
		t.Errorf("the team card does not say the team server refuses acme-web's versions:\n%s", over)
	}
	if !strings.Contains(over, `id="team-refused-list"`) || !strings.Contains(over, "thatch.team.x.mem_1 (malformed): not JSON") {
		t.Errorf("the overview does not list the refused team record:\n%s", over)
	}
}
