package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/thatch-dev/thatch/journal/memory"
)

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
