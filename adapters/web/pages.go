package web

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"log"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

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
