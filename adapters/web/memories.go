package web

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

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
