package web

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/thatch-dev/thatch/runtime"
)

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
