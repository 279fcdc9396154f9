package web

import (
	"cmp"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// Node is a session in the sessions tree, with its children.
type Node struct {
	runtime.SessionRow
	Children []*Node
	Depth    int
}

// Tree is one page of the sessions tree: top-level sessions, newest activity first, each
// with its descendants. A live session whose parent is not live (it exited through
// /thatch/exit while its task runs on) is shown among the top-level ones.
type Tree struct {
	Roots          []*Node
	Total, Matched int // live sessions; top-level sessions that pass the filter
	Page, Pages    int
	Host, Query    string
	Busy, Pending  int
}

// BuildTree makes page (from 1) of the sessions tree of t: the top-level sessions of host
// (all when "") whose id, title or folder holds q, most recently active first.
func BuildTree(t *runtime.Table, host, q string, page int) Tree {
	tr := Tree{Total: len(t.Sessions), Host: host, Query: q}
	children := map[string][]*runtime.SessionRow{}
	var tops []*runtime.SessionRow
	q = strings.ToLower(q)
	live := make(map[string]bool, len(t.Sessions))
	for i := range t.Sessions {
		live[t.Sessions[i].SessionID] = true
	}
	for i := range t.Sessions {
		row := &t.Sessions[i]
		if row.Status == runtime.StatusBusy {
			tr.Busy++
		}
		tr.Pending += row.Pending
		if row.ParentID != "" && live[row.ParentID] {
			children[row.ParentID] = append(children[row.ParentID], row)
			continue
		}
		if host != "" && row.HostID != host {
			continue
		}
		if q != "" && !strings.Contains(strings.ToLower(row.SessionID), q) && !strings.Contains(strings.ToLower(row.Title), q) &&
			!strings.Contains(strings.ToLower(row.Directory), q) {
			continue
		}
		tops = append(tops, row)
	}
	tr.Matched = len(tops)
	tr.Pages = max(1, (len(tops)+topPerPage-1)/topPerPage)
	tr.Page = min(max(page, 1), tr.Pages)
	slices.SortFunc(tops, func(a, b *runtime.SessionRow) int {
		return cmp.Or(b.Touched.Compare(a.Touched), strings.Compare(a.SessionID, b.SessionID))
	})
	from := (tr.Page - 1) * topPerPage
	tops = tops[from:min(len(tops), from+topPerPage)]
	var grow func(row *runtime.SessionRow, depth int) *Node
	grow = func(row *runtime.SessionRow, depth int) *Node {
		n := &Node{SessionRow: *row, Depth: depth}
		if depth < 8 { // hosts nest tasks a few levels at most
			for _, c := range children[row.SessionID] {
				n.Children = append(n.Children, grow(c, depth+1))
			}
		}
		return n
	}
	for _, row := range tops {
		tr.Roots = append(tr.Roots, grow(row, 0))
	}
	return tr
}

func (s *Server) sessions(w http.ResponseWriter, r *http.Request) error {
	t, err := s.Loop.Table(r.Context())
	if err != nil {
		return err
	}
	q := r.URL.Query()
	page, _ := strconv.Atoi(q.Get("page"))
	tr := BuildTree(t, q.Get("host"), q.Get("q"), page)
	return s.render(w, r, "sessions", map[string]any{"Title": "Sessions", "Tree": tr, "Hosts": t.Hosts, "At": t.At})
}

// session shows one session: its row in the directory when live, and what the journal
// holds of it (entries, claims, extractions).
func (s *Server) session(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	t, err := s.Loop.Table(r.Context())
	if err != nil {
		return err
	}
	var live *runtime.SessionRow
	var kids []runtime.SessionRow
	for i := range t.Sessions {
		switch {
		case t.Sessions[i].SessionID == id:
			live = &t.Sessions[i]
		case t.Sessions[i].ParentID == id:
			kids = append(kids, t.Sessions[i])
		}
	}
	d, err := s.Journal.SessionDetail(id, entriesPerPage)
	if err != nil && (live == nil || !errors.Is(err, journal.ErrNoSession)) {
		return err
	}
	type claim struct {
		Child   string
		Entries int
		At      time.Time
		Running bool
		Live    bool // thatch still tracks the child: it has a page
	}
	var claims []claim
	pending := 0
	for _, e := range d.Entries {
		if e.ClaimedBy == "" {
			pending++
			continue
		}
		if i := slices.IndexFunc(claims, func(c claim) bool { return c.Child == e.ClaimedBy }); i >= 0 {
			claims[i].Entries++
			continue
		}
		live := slices.ContainsFunc(kids, func(k runtime.SessionRow) bool { return k.SessionID == e.ClaimedBy })
		claims = append(claims, claim{Child: e.ClaimedBy, Entries: 1, At: e.ClaimedAt, Running: d.Session.Child == e.ClaimedBy, Live: live})
	}
	// Provenance (issue 29): the memories each extraction wrote, from the memory store's
	// history, beside the calls it completed, from the journal.
	written := map[string][]memory.Written{}
	if s.Memories != nil && len(d.Provenance) > 0 {
		xs := make([]string, len(d.Provenance))
		for i, p := range d.Provenance {
			xs[i] = p.Extraction
		}
		if written, err = s.Memories.WrittenBy(r.Context(), xs); err != nil {
			return err
		}
	}
	return s.render(w, r, "session", map[string]any{"Title": "Session " + short(id), "ID": id, "Live": live, "Detail": d,
		"Children": kids, "Claims": claims, "Pending": pending, "At": t.At, "Written": written})
}
