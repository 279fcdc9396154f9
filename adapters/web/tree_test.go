package web_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/adapters/web"
	"github.com/thatch-dev/thatch/runtime"
)

var treeT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// row is a live session of host, touched minutes after treeT0.
func row(id, host, parent string, minutes int) runtime.SessionRow {
	kind := runtime.KindTop
	if parent != "" {
		kind = runtime.KindTask
	}
	return runtime.SessionRow{SessionView: runtime.SessionView{SessionID: id, HostID: host, ParentID: parent, Kind: kind,
		Status: runtime.StatusIdle, Directory: "/w/" + host, Title: "title of " + id}, Touched: treeT0.Add(time.Duration(minutes) * time.Minute)}
}

// table is a directory of rows in id order, as runtime.BuildTable makes it.
func table(rows ...runtime.SessionRow) *runtime.Table {
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b runtime.SessionRow) int {
		switch {
		case a.SessionID < b.SessionID:
			return -1
		case a.SessionID > b.SessionID:
			return 1
		}
		return 0
	})
	return &runtime.Table{At: treeT0, Sessions: rows}
}

func ids(nodes []*web.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.SessionID)
	}
	return out
}

// flat is the tree in the order the page shows it: each node, then its children, with
// its depth.
func flat(nodes []*web.Node) []string {
	var out []string
	var walk func(n *web.Node)
	walk = func(n *web.Node) {
		out = append(out, fmt.Sprintf("%d:%s", n.Depth, n.SessionID))
		for _, c := range n.Children {
			walk(c)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
	return out
}

func TestBuildTreeNestsChildren(t *testing.T) {
	tb := table(
		row("ses_a", "h1", "", 10),
		row("ses_a1", "h1", "ses_a", 11),
		row("ses_a1x", "h1", "ses_a1", 12),
		row("ses_a2", "h1", "ses_a", 1),
		row("ses_b", "h1", "", 20),
		row("ses_b1", "h1", "ses_b", 2),
	)
	tb.Sessions[0].Status = runtime.StatusBusy
	tb.Sessions[0].Pending, tb.Sessions[3].Pending = 4, 1
	tr := web.BuildTree(tb, "", "", 1)
	want := []string{"0:ses_b", "1:ses_b1", "0:ses_a", "1:ses_a1", "2:ses_a1x", "1:ses_a2"}
	if got := flat(tr.Roots); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tree %v, want %v", got, want)
	}
	if tr.Total != 6 || tr.Matched != 2 || tr.Page != 1 || tr.Pages != 1 {
		t.Errorf("total %d matched %d page %d of %d, want 6, 2, 1 of 1", tr.Total, tr.Matched, tr.Page, tr.Pages)
	}
	if tr.Busy != 1 || tr.Pending != 5 {
		t.Errorf("busy %d pending %d, want 1 and 5", tr.Busy, tr.Pending)
	}
}

func TestBuildTreeOrdersByLastActivity(t *testing.T) {
	tb := table(
		row("ses_1", "h1", "", 5),
		row("ses_2", "h1", "", 50),
		row("ses_3", "h1", "", 30),
		row("ses_4", "h1", "", 30), // a tie: id order
		row("ses_0", "h1", "", 30),
	)
	if got := ids(web.BuildTree(tb, "", "", 1).Roots); fmt.Sprint(got) != "[ses_2 ses_0 ses_3 ses_4 ses_1]" {
		t.Errorf("order %v, want the most recently active first, ties by id", got)
	}
}

func TestBuildTreePages(t *testing.T) {
	var rows []runtime.SessionRow
	for i := range 250 {
		rows = append(rows, row(fmt.Sprintf("ses_%03d", i), "h1", "", i))
		if i%10 == 0 { // children are not counted as top-level sessions, and follow their parent
			rows = append(rows, row(fmt.Sprintf("ses_%03d_child", i), "h1", fmt.Sprintf("ses_%03d", i), 1000+i))
		}
	}
	tb := table(rows...)
	cases := []struct {
		page, wantPage int
		first, last    string
		n              int
	}{
		{1, 1, "ses_249", "ses_150", 100},
		{2, 2, "ses_149", "ses_050", 100},
		{3, 3, "ses_049", "ses_000", 50},
		{0, 1, "ses_249", "ses_150", 100},  // no page: the first
		{-4, 1, "ses_249", "ses_150", 100}, // nonsense: the first
		{99, 3, "ses_049", "ses_000", 50},  // past the end: the last
	}
	for _, c := range cases {
		tr := web.BuildTree(tb, "", "", c.page)
		got := ids(tr.Roots)
		if tr.Page != c.wantPage || tr.Pages != 3 || len(got) != c.n || got[0] != c.first || got[len(got)-1] != c.last {
			t.Errorf("page %d: page %d of %d, %d roots %s…%s; want page %d of 3, %d roots %s…%s", c.page, tr.Page, tr.Pages,
				len(got), got[0], got[len(got)-1], c.wantPage, c.n, c.first, c.last)
		}
		if tr.Total != 275 || tr.Matched != 250 {
			t.Errorf("page %d: total %d matched %d, want 275 and 250", c.page, tr.Total, tr.Matched)
		}
		for _, n := range tr.Roots {
			var i int
			fmt.Sscanf(n.SessionID, "ses_%d", &i)
			if wantKids := i%10 == 0; wantKids != (len(n.Children) == 1) {
				t.Errorf("%s has %d children", n.SessionID, len(n.Children))
			}
		}
	}
	// Exactly a page: one page.
	if tr := web.BuildTree(table(rows[:110]...), "", "", 1); tr.Pages != 1 || len(tr.Roots) != 100 {
		t.Errorf("100 top-level sessions: %d pages, %d roots", tr.Pages, len(tr.Roots))
	}
	// None: one empty page.
	if tr := web.BuildTree(table(), "", "", 3); tr.Pages != 1 || tr.Page != 1 || len(tr.Roots) != 0 {
		t.Errorf("no session: page %d of %d, %d roots", tr.Page, tr.Pages, len(tr.Roots))
	}
}

func TestBuildTreeFilters(t *testing.T) {
	tb := table(
		row("ses_alpha", "h1", "", 1),
		row("ses_alpha_kid", "h1", "ses_alpha", 2),
		row("ses_beta", "h2", "", 3),
		row("ses_gamma", "h2", "", 4),
	)
	tb.Sessions[slices.IndexFunc(tb.Sessions, func(r runtime.SessionRow) bool { return r.SessionID == "ses_gamma" })].Title = "Fix the Flaky Login test"
	tb.Sessions[slices.IndexFunc(tb.Sessions, func(r runtime.SessionRow) bool { return r.SessionID == "ses_beta" })].Directory = "/home/me/Payments"
	cases := []struct {
		host, q string
		want    string
	}{
		{"h1", "", "[0:ses_alpha 1:ses_alpha_kid]"},
		{"h2", "", "[0:ses_gamma 0:ses_beta]"},
		{"h3", "", "[]"},
		{"", "flaky login", "[0:ses_gamma]"},               // title, any case
		{"", "payments", "[0:ses_beta]"},                   // folder
		{"", "SES_ALPHA", "[0:ses_alpha 1:ses_alpha_kid]"}, // id
		{"h1", "flaky", "[]"},                              // both filters
		{"h2", "flaky", "[0:ses_gamma]"},
	}
	for _, c := range cases {
		tr := web.BuildTree(tb, c.host, c.q, 1)
		if got := fmt.Sprint(flat(tr.Roots)); got != c.want {
			t.Errorf("host %q q %q: %s, want %s", c.host, c.q, got, c.want)
		}
		if tr.Host != c.host || tr.Query != c.q || tr.Total != 4 {
			t.Errorf("host %q q %q: tree says host %q q %q total %d", c.host, c.q, tr.Host, tr.Query, tr.Total)
		}
	}
}

// A live session whose parent is not in the directory (the parent exited through
// /thatch/exit while its task child runs on) is still on the page: it counts in Total, so
// it must be somewhere a person can find it.
func TestBuildTreeShowsOrphans(t *testing.T) {
	tb := table(
		row("ses_top", "h1", "", 1),
		row("ses_orphan", "h1", "ses_exited", 2),
	)
	tr := web.BuildTree(tb, "", "", 1)
	if got := flat(tr.Roots); !slices.ContainsFunc(got, func(s string) bool { return s[2:] == "ses_orphan" }) {
		t.Errorf("the sessions page shows %v of %d live sessions: ses_orphan, whose parent is not live, is nowhere", got, tr.Total)
	}
	if tr := web.BuildTree(tb, "", "orphan", 1); len(tr.Roots) != 1 {
		t.Errorf("searching for the orphan finds %v", flat(tr.Roots))
	}
}
