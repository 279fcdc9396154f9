package web

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// The pages' sizes: a person reads a page, never ten thousand rows.
const (
	topPerPage      = 100 // top-level sessions of the sessions page, with their children
	entriesPerPage  = 500 // a session's entries
	memoriesPerPage = 50
	deadPerPage     = 50
	signalsShown    = 50
)

func slogLogger(l *slog.Logger) *log.Logger { return slog.NewLogLogger(l.Handler(), slog.LevelWarn) }

// parse reads the embedded templates: one set per page, each the layout plus the page.
func (s *Server) parse() error {
	s.csrfMark = "csrf" + random(24)
	funcs := template.FuncMap{
		"ago":    ago,
		"heard":  heard,
		"clock":  func(t time.Time) string { return t.Local().Format("15:04:05") },
		"recent": func(t time.Time) bool { return time.Since(t) < 10*time.Second },
		"short":  short,
		"csrf":   func() string { return s.csrfMark },
		"join":   strings.Join,
		"query": func(base string, kv ...string) string {
			q := url.Values{}
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i+1] != "" {
					q.Set(kv[i], kv[i+1])
				}
			}
			if len(q) == 0 {
				return base
			}
			return base + "?" + q.Encode()
		},
		"kinds":  func() []string { return memory.Kinds },
		"usd":    func(v float64) string { return fmt.Sprintf("$%.4f", v) },
		"add1":   func(n int) int { return n + 1 },
		"plural": counted,
		"sub1":   func(n int) int { return n - 1 },
		"actionsOf": func(actions []runtime.StrandAction, known map[string]bool, id string) map[string]any {
			return map[string]any{"Actions": actions, "Known": known, "ID": id}
		},
		"pairSide": func(keep, drop memory.Memory) map[string]memory.Memory {
			return map[string]memory.Memory{"Keep": keep, "Drop": drop}
		},
	}
	layout, err := template.New("layout").Funcs(funcs).ParseFS(files, "templates/layout.html")
	if err != nil {
		return err
	}
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return err
	}
	s.pages = map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(path.Base(n), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(files, n)
		if err != nil {
			return err
		}
		s.pages[name] = t
	}
	return nil
}

// render writes page with data: the whole document, or only its main part when the
// page's own script asks for an update (X-Partial).
func (s *Server) render(w http.ResponseWriter, r *http.Request, page string, data map[string]any) error {
	data["Page"] = page
	if s.Memories == nil {
		data["NoMemories"] = true
	}
	name := "layout"
	if r.Header.Get("X-Partial") == "1" {
		name = "main"
	}
	out, err := s.execute(r, page, name, data)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, err = w.Write(out)
	return err
}

// execute renders the template name of page with data, each form's CSRF field the
// request's session's (none without a session).
func (s *Server) execute(r *http.Request, page, name string, data map[string]any) ([]byte, error) {
	var buf bytes.Buffer
	if err := s.pages[page].ExecuteTemplate(&buf, name, data); err != nil {
		return nil, err
	}
	csrf := ""
	if x := sessionOf(r.Context()); x != nil {
		csrf = x.csrf
	}
	return bytes.ReplaceAll(buf.Bytes(), []byte(s.csrfMark), []byte(csrf)), nil
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// overview is the first page: status and hosts.
func (s *Server) overview(w http.ResponseWriter, r *http.Request) error {
	st, err := s.Status(r.Context())
	if err != nil {
		return httpError{http.StatusServiceUnavailable, "thatch is not ready: " + err.Error()}
	}
	t, err := s.Loop.Table(r.Context())
	if err != nil {
		return err
	}
	unreachable := map[string]bool{} // the bridge's host while opencode cannot be reached
	ov := overviewStatus{StatusView: st, Bridge: bridgeOf(st)}
	if b := ov.Bridge; b != nil && !b.Connected {
		unreachable[b.HostID] = true
	}
	return s.render(w, r, "overview", map[string]any{"Title": "Overview", "Status": ov, "Hosts": t.Hosts, "At": t.At, "Unreachable": unreachable})
}

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

// memories lists or searches the memories.
func (s *Server) memories(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	q := r.URL.Query()
	project, kind, search, after := q.Get("project"), q.Get("kind"), strings.TrimSpace(q.Get("q")), q.Get("after")
	forgotten := q.Get("state") == "forgotten"
	if forgotten {
		search = "" // a search looks at live memories only
	}
	if kind != "" && !slices.Contains(memory.Kinds, kind) {
		return httpError{http.StatusBadRequest, fmt.Sprintf("kind %q is not one of %s", kind, strings.Join(memory.Kinds, ", "))}
	}
	var keys []string
	if project != "" {
		var err error
		if keys, err = s.Memories.Resolve(ctx, project); err != nil {
			return err
		}
		if len(keys) == 0 {
			keys = []string{project}
		}
	}
	ms, err := s.Memories.List(ctx, memory.ListQuery{Projects: keys, Query: search, Kind: kind, Limit: memoriesPerPage, After: after, Forgotten: forgotten})
	noWords := ""
	if search != "" && errors.Is(err, memory.ErrBadRequest) {
		// Nothing to search for ("*", punctuation): the form again with a word on it, over
		// the listing, rather than a page with no way on.
		noWords, search = search, ""
		ms, err = s.Memories.List(ctx, memory.ListQuery{Projects: keys, Kind: kind, Limit: memoriesPerPage, After: after})
	}
	if err != nil {
		return err
	}
	projects, err := s.Memories.Projects(ctx, "")
	if err != nil {
		return err
	}
	next := ""
	if search == "" && len(ms) == memoriesPerPage {
		next = ms[len(ms)-1].ID
	}
	state := ""
	if forgotten {
		state = "forgotten"
	}
	data := map[string]any{"Title": "Memories", "Memories": ms, "Projects": projects, "Project": project, "Kind": kind,
		"Query": search, "Next": next, "After": after, "State": state, "Filtered": project != "" || kind != "" || after != "", "NoWords": noWords}
	// The team switch (§9), for one project key: shareable or why not, shared or not.
	if s.Share != nil && len(keys) == 1 {
		sw := map[string]any{"Key": keys[0]}
		if err := memory.ShareableProject(keys[0]); err != nil {
			sw["Refused"] = "A project keyed by its folder names a folder of this machine only, so it cannot be shared: only a project keyed by its host's projectID (a git repository under opencode) can."
		} else {
			shared, err := s.Memories.SharedProjects(ctx)
			if err != nil {
				return err
			}
			sw["Shared"] = slices.ContainsFunc(shared, func(p memory.SharedProject) bool { return p.Project == keys[0] })
		}
		data["Team"] = sw
	}
	if id := q.Get("restored"); id != "" { // a restore just done says so
		if m, _, err := s.Memories.Get(ctx, id); err == nil && m.ForgottenAt == nil {
			data["Restored"] = m
		}
	}
	if id := q.Get("forgot"); id != "" { // the undo bar of a forget just done
		if m, _, err := s.Memories.Get(ctx, id); err == nil && m.ForgottenAt != nil {
			data["Forgot"] = m
		}
	}
	return s.render(w, r, "memories", data)
}

// memory shows one memory, its form and its audit trail.
func (s *Server) memory(w http.ResponseWriter, r *http.Request) error {
	m, audit, err := s.Memories.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	ids := []string{m.Source.SessionID}
	for _, a := range audit {
		ids = append(ids, a.SessionID)
	}
	// An extraction child is deleted once done: the page names the session it extracted,
	// from the ledger, and links only to sessions thatch still tracks.
	origin, err := s.Journal.ExtractedFrom(m.Source.SessionID)
	if err != nil {
		return err
	}
	// Which tool calls fed it (issue 29): what each extraction that wrote it completed.
	ps, err := s.Journal.Provenance(memory.Writers(m, audit))
	if err != nil {
		return err
	}
	for _, p := range ps {
		ids = append(ids, p.Session)
	}
	known, err := s.Journal.HasSessions(append(ids, origin))
	if err != nil {
		return err
	}
	type provenance struct {
		runtime.Provenance
		Op     string // what the extraction did to the memory: create, update or forget
		Linked bool   // thatch still tracks the session: it has a page
	}
	prov := make([]provenance, len(ps))
	for i, p := range ps {
		prov[i] = provenance{p, memory.WroteAs(audit, p.Extraction), known[p.Session]}
	}
	return s.render(w, r, "memory", map[string]any{"Title": "Memory " + m.ID, "M": m, "Audit": audit, "Known": known, "Origin": origin,
		"Provenance": prov, "Tags": strings.Join(m.Tags, ", "), "Saved": r.URL.Query().Get("saved") != "", "Me": s.Author})
}

// back is where a form returns: its "back" field when it is a path of this endpoint.
func back(r *http.Request, def string) string {
	if b := r.PostFormValue("back"); strings.HasPrefix(b, "/") && !strings.HasPrefix(b, "//") && !strings.Contains(b, "\\") {
		return b
	}
	return def
}

func (s *Server) editMemory(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	m, _, err := s.Memories.Get(r.Context(), id)
	if err != nil {
		return err
	}
	var a memory.UpdateArgs
	if v := formText(r, "content"); v != m.Content && strings.TrimSpace(v) != "" {
		a.Content = &v
	}
	if v := r.PostFormValue("kind"); v != "" && v != m.Kind {
		a.Kind = &v
	}
	tags := splitTags(r.PostFormValue("tags"))
	if !slices.Equal(tags, m.Tags) {
		a.Tags = &tags
	}
	if a.Content != nil || a.Kind != nil || a.Tags != nil {
		if _, err := s.Memories.Update(r.Context(), memory.Caller{}, id, a, s.now()); err != nil {
			return err
		}
	}
	http.Redirect(w, r, "/memories/"+url.PathEscape(id)+"?saved=1", http.StatusSeeOther)
	return nil
}

// formText is a textarea's text as the store keeps it: a browser sends its line ends as
// CRLF, which would make an unchanged memory of several lines differ from the stored
// text, and the store trims it.
func formText(r *http.Request, name string) string {
	return strings.TrimSpace(strings.ReplaceAll(r.PostFormValue(name), "\r\n", "\n"))
}

func splitTags(v string) []string {
	tags := []string{}
	for t := range strings.SplitSeq(v, ",") {
		if t = strings.TrimSpace(t); t != "" && !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	return tags
}

func (s *Server) forgetMemory(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	reason := cmp.Or(strings.TrimSpace(r.PostFormValue("reason")), "forgotten on thatch's page")
	if _, err := s.Memories.Forget(r.Context(), memory.Caller{}, id, reason, s.now()); err != nil {
		return err
	}
	to, _ := url.Parse(back(r, "/memories"))
	q := to.Query()
	q.Set("forgot", id)
	to.RawQuery = q.Encode()
	http.Redirect(w, r, to.String(), http.StatusSeeOther)
	return nil
}

// share is the team switch: shared "on" shares the project with the team, anything else
// stops sharing it.
func (s *Server) share(w http.ResponseWriter, r *http.Request) error {
	if s.Share == nil {
		return httpError{http.StatusNotFound, "team memory is off: set THATCH_TEAM_URL and restart thatch"}
	}
	project := r.PostFormValue("project")
	if err := s.Share(r.Context(), project, r.PostFormValue("shared") == "on"); err != nil {
		if errors.Is(err, memory.ErrBadRequest) {
			return httpError{http.StatusBadRequest, err.Error()}
		}
		return err
	}
	http.Redirect(w, r, back(r, "/memories?project="+url.QueryEscape(project)), http.StatusSeeOther)
	return nil
}

func (s *Server) restoreMemory(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := s.Memories.Restore(r.Context(), memory.Caller{}, id, s.now()); err != nil {
		return err
	}
	to, _ := url.Parse(back(r, "/memories/"+url.PathEscape(id)))
	q := to.Query()
	q.Del("forgot")
	if to.Path == "/memories" {
		q.Set("restored", id)
	}
	to.RawQuery = q.Encode()
	http.Redirect(w, r, to.String(), http.StatusSeeOther)
	return nil
}

// hygiene shows the open signals: duplicate pairs side by side, stale memories and those
// of deleted branches.
func (s *Server) hygiene(w http.ResponseWriter, r *http.Request) error {
	page := 1
	if v := r.URL.Query().Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return httpError{http.StatusBadRequest, "page=" + strconv.Quote(v) + " is not a page of the hygiene signals"}
		}
		page = n
	}
	sp, err := s.Memories.SignalsPage(r.Context(), nil, (page-1)*signalsShown, signalsShown, s.now())
	if err != nil {
		return err
	}
	pages := max(1, (sp.Total+signalsShown-1)/signalsShown)
	if page > pages { // past the end (signals were resolved meanwhile): the last page
		page = pages
		if sp, err = s.Memories.SignalsPage(r.Context(), nil, (page-1)*signalsShown, signalsShown, s.now()); err != nil {
			return err
		}
	}
	var pairs, single []memory.Signal
	for _, sg := range sp.Signals {
		if sg.Kind == memory.SignalDuplicate && len(sg.Memories) == 2 {
			pairs = append(pairs, sg)
		} else if len(sg.Memories) > 0 {
			single = append(single, sg)
		}
	}
	data := map[string]any{"Title": "Hygiene", "Pairs": pairs, "Single": single, "Total": sp.Total, "Counts": sp.Counts,
		"Summary": signalsSummary(sp), "PageNo": page, "Pages": pages,
		// What other pages hold when this one shows none of a section.
		"PairsElsewhere": len(pairs) == 0 && sp.Counts[memory.SignalDuplicate] > 0, "SingleElsewhere": len(single) == 0 && sp.Total > sp.Counts[memory.SignalDuplicate]}
	if id := r.URL.Query().Get("merged"); id != "" { // the undo bar of a merge just done
		if m, _, err := s.Memories.Get(r.Context(), id); err == nil && m.ForgottenAt != nil {
			data["Merged"], data["Into"], data["Edited"] = m, r.URL.Query().Get("into"), r.URL.Query().Get("edited") != ""
		}
	}
	return s.render(w, r, "hygiene", data)
}

// counted is n with the word for n things: "1 memory", "3 memories".
func counted(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// signalsSummary says how many signals there are of each kind and which of them the page
// shows: "72 findings: 69 duplicate pairs, 3 stale memories; this page shows 1 to 50."
func signalsSummary(sp memory.SignalPage) string {
	if sp.Total == 0 {
		return ""
	}
	out := counted(sp.Total, "finding", "findings") + ": " + sp.Kinds()
	if len(sp.Signals) < sp.Total {
		out += fmt.Sprintf("; this page shows %d to %d", sp.Offset+1, sp.Offset+len(sp.Signals))
	}
	return out + "."
}

// merge keeps one memory of a duplicate pair, with the text the person settled on, and
// forgets the other, saying which it was merged into.
func (s *Server) merge(w http.ResponseWriter, r *http.Request) error {
	ctx, keep, drop := r.Context(), r.PostFormValue("keep"), r.PostFormValue("drop")
	if keep == "" || drop == "" || keep == drop {
		return httpError{http.StatusBadRequest, "A merge needs two different memories: keep and drop."}
	}
	m, _, err := s.Memories.Get(ctx, keep)
	if err != nil {
		return err
	}
	if _, _, err := s.Memories.Get(ctx, drop); err != nil {
		return err
	}
	// Forget first: the kept text may become the dropped one's, and two live memories of
	// a project never say the same.
	if _, err := s.Memories.Forget(ctx, memory.Caller{}, drop, "merged into "+keep+" on thatch's page", s.now()); err != nil {
		return err
	}
	edited := ""
	if v := formText(r, "content"); strings.TrimSpace(v) != "" && v != m.Content {
		edited = "&edited=1"
		if _, err := s.Memories.Update(ctx, memory.Caller{}, keep, memory.UpdateArgs{Content: &v}, s.now()); err != nil {
			// The text was refused (another memory says it, or it is too long): the merge
			// did not happen, so the dropped memory is live again.
			if _, rerr := s.Memories.Restore(ctx, memory.Caller{}, drop, s.now()); rerr != nil {
				return errors.Join(err, fmt.Errorf("%s stays forgotten: %w", drop, rerr))
			}
			return err
		}
	}
	http.Redirect(w, r, "/hygiene?merged="+url.QueryEscape(drop)+"&into="+url.QueryEscape(keep)+edited, http.StatusSeeOther)
	return nil
}

// unmerge undoes a merge: the dropped memory is live again and, when the merge changed the
// kept one's text, that text goes back to what it was before (its last update's).
func (s *Server) unmerge(w http.ResponseWriter, r *http.Request) error {
	ctx, keep, drop := r.Context(), r.PostFormValue("keep"), r.PostFormValue("drop")
	if _, err := s.Memories.Restore(ctx, memory.Caller{}, drop, s.now()); err != nil {
		return err
	}
	if r.PostFormValue("edited") != "" {
		_, audit, err := s.Memories.Get(ctx, keep)
		if err != nil {
			return err
		}
		for i := len(audit) - 1; i >= 0; i-- {
			if a := audit[i]; a.Op == "update" && a.SessionID == "" && a.Before != "" {
				if _, err := s.Memories.Update(ctx, memory.Caller{}, keep, memory.UpdateArgs{Content: &a.Before}, s.now()); err != nil {
					return err
				}
				break
			}
		}
	}
	http.Redirect(w, r, "/hygiene", http.StatusSeeOther)
	return nil
}

func (s *Server) dismiss(w http.ResponseWriter, r *http.Request) error {
	if err := s.Memories.Dismiss(r.Context(), memory.Caller{}, r.PostFormValue("a"), r.PostFormValue("b"), s.now()); err != nil {
		return err
	}
	http.Redirect(w, r, "/hygiene", http.StatusSeeOther)
	return nil
}

// projectWide makes a deleted branch's memory hold for the whole project.
func (s *Server) projectWide(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.Memories.Update(r.Context(), memory.Caller{}, r.PostFormValue("id"), memory.UpdateArgs{ProjectWide: true}, s.now()); err != nil {
		return err
	}
	http.Redirect(w, r, "/hygiene", http.StatusSeeOther)
	return nil
}

func (s *Server) deadLetters(w http.ResponseWriter, r *http.Request) error {
	var before int64
	if v := r.URL.Query().Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return httpError{http.StatusBadRequest, "before=" + strconv.Quote(v) + " is not a page of dead letters"}
		}
		before = n
	}
	rows, err := s.Journal.DeadLetterPage(before, deadPerPage+1)
	if err != nil {
		return err
	}
	next := int64(0)
	if len(rows) > deadPerPage {
		rows = rows[:deadPerPage]
		next = rows[len(rows)-1].ID
	}
	return s.render(w, r, "deadletters", map[string]any{"Title": "Dead letters", "Rows": rows, "Next": next, "First": before == 0})
}

// sweepPlan shows the strand sweep's plan, a dry run that touches nothing, under what
// the last sweep run from the page did.
func (s *Server) sweepPlan(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	host := r.URL.Query().Get("host")
	res, err := s.Sweep(ctx, host, true)
	data := map[string]any{"Title": "Sweep", "Actions": res.Actions, "Host": host}
	if err != nil {
		data["Error"] = err.Error()
	}
	ids := []string{}
	for _, a := range res.Actions {
		ids = append(ids, a.SessionID)
	}
	s.mu.Lock()
	if last := s.lastSweep; last != nil {
		data["Last"] = last
		for _, a := range last.Actions {
			ids = append(ids, a.SessionID)
		}
	}
	s.mu.Unlock()
	known, err := s.Journal.HasSessions(ids)
	if err != nil {
		return err
	}
	data["Known"] = known
	return s.render(w, r, "sweep", data)
}

// sweepRun is one sweep run from the page: what it did, for the page to show.
type sweepRun struct {
	At      time.Time
	Host    string
	Actions []runtime.StrandAction
	Error   string
}

// sweepRun runs one strand sweep, keeps what it did, and sends the browser back to the
// plan (a reload shows the page again; it does not run the sweep twice).
func (s *Server) sweepRun(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	host := r.PostFormValue("host")
	res, err := s.Sweep(ctx, host, false)
	run := &sweepRun{At: s.now(), Host: host, Actions: res.Actions}
	if err != nil {
		run.Error = err.Error()
	}
	s.mu.Lock()
	s.lastSweep = run
	s.mu.Unlock()
	to := "/sweep"
	if host != "" {
		to += "?host=" + url.QueryEscape(host)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}

// live streams a "change" event (server-sent events) whenever the loop publishes a new
// snapshot or the memory store commits a write: the page's script then fetches its main
// part again. It looks twice a second and holds nothing of the loop.
func (s *Server) live(w http.ResponseWriter, r *http.Request) error {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	version := func() string {
		v := ""
		if snap := s.Loop.Snapshot(); snap != nil {
			v = strconv.FormatUint(snap.Round(), 10)
		}
		if s.Memories != nil {
			v += "." + strconv.FormatInt(s.Memories.Writes(), 10)
		}
		if s.Watch != nil {
			v += "." + s.Watch()
		}
		return v
	}
	last := version()
	fmt.Fprintf(w, "retry: 2000\nevent: hello\ndata: %s\n\n", last)
	if err := rc.Flush(); err != nil {
		return nil
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	idle := 0
	x := sessionOf(r.Context())
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-tick.C:
		}
		if x == nil || !s.signedIn(x) {
			return nil // signed out or expired: the browser's reconnection gets the 401
		}
		v := version()
		idle++
		switch {
		case v != last:
			last, idle = v, 0
			fmt.Fprintf(w, "event: change\ndata: %s\n\n", v)
		case idle%20 == 0:
			// Every 10 s without a change the page still renders again: its "… ago" times
			// move on. It keeps proxies and the browser from timing out too.
			fmt.Fprintf(w, "event: change\ndata: %s\n\n", v)
		default:
			continue
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
	}
}

// heard says when a host was last heard of: thatch keeps it to the minute.
func heard(t time.Time) string {
	if !t.IsZero() && time.Since(t) < time.Minute {
		return "within the last minute"
	}
	return ago(t)
}

// ago says how long ago t was, for people.
func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t)
	switch {
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// short cuts a long id for a column; the full id is in the link and the title.
func short(id string) string {
	r := []rune(id)
	if len(r) <= 18 {
		return id
	}
	return string(r[:8]) + "…" + string(r[len(r)-8:])
}
