package web

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

//go:embed templates static
var files embed.FS

// maxForm bounds a form's body: a memory's text is far shorter.
const maxForm = 1 << 20

// Server is the HTTP endpoint. Set its fields, then Run it.
type Server struct {
	Listen string // host:port
	// TLSCert and TLSKey serve HTTPS (needed off loopback, checked by the config).
	TLSCert, TLSKey string

	// Author is the name on this thatch's memory versions (THATCH_TEAM_AUTHOR): a change
	// with no session and this author is a person's here; another author is a teammate's.
	Author string

	Loop    *runtime.Loop
	Status  func(context.Context) (runtime.StatusView, error)
	Journal *journal.Store
	// Memories is the memory store; nil hides the memory pages.
	Memories *memory.Store
	// Sweep runs one strand sweep (a dry run only plans it).
	Sweep   func(ctx context.Context, hostID string, dryRun bool) (runtime.SweepResult, error)
	Metrics *Metrics
	// Watch, when set, is a fingerprint of what the pages show beyond the loop's snapshot
	// and the memory store (the bridge's connection, the broker's error): the open pages
	// render again when it changes.
	Watch func() string
	Log   *slog.Logger
	// Now is the clock of the memory changes (tests); nil is time.Now.
	Now func() time.Time
	// Share starts or stops sharing a project with the team (§9); nil (team memory off)
	// hides the switch.
	Share func(ctx context.Context, project string, shared bool) error

	pages map[string]*template.Template
	// csrfMark stands for the CSRF field in the parsed templates; render puts the
	// viewer's session's key in its place.
	csrfMark string
	logins   logins

	mu        sync.Mutex
	lastSweep *sweepRun // the last sweep run from the page
}

// Handler is the endpoint's routes.
func (s *Server) Handler() (http.Handler, error) {
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	if err := s.parse(); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Metrics.Registry, promhttp.HandlerOpts{ErrorLog: slogPrinter{s.Log}}))
	static, _ := fs.Sub(files, "static")
	serveStatic := http.StripPrefix("/static/", http.FileServerFS(static))
	mux.HandleFunc("GET /static/", func(w http.ResponseWriter, r *http.Request) {
		// The files only: a folder's listing is nobody's business.
		name := strings.TrimPrefix(r.URL.Path, "/static/")
		if fi, err := fs.Stat(static, name); name == "" || strings.HasSuffix(name, "/") || err != nil || fi.IsDir() {
			http.NotFound(w, r)
			return
		}
		serveStatic.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /login", s.login)

	page := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		mux.Handle(pattern, s.guard(h))
	}
	// The memory pages, on a thatch that keeps memories.
	memoryPage := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		page(pattern, func(w http.ResponseWriter, r *http.Request) error {
			if s.Memories == nil {
				return httpError{http.StatusNotFound, "This thatch keeps no memories."}
			}
			return h(w, r)
		})
	}
	page("GET /{$}", s.overview)
	page("GET /sessions", s.sessions)
	page("GET /sessions/{id}", s.session)
	memoryPage("GET /memories", s.memories)
	memoryPage("GET /memories/{id}", s.memory)
	memoryPage("POST /memories/{id}", s.editMemory)
	memoryPage("POST /memories/{id}/forget", s.forgetMemory)
	memoryPage("POST /memories/{id}/restore", s.restoreMemory)
	memoryPage("POST /share", s.share)
	memoryPage("GET /hygiene", s.hygiene)
	memoryPage("POST /hygiene/merge", s.merge)
	memoryPage("POST /hygiene/unmerge", s.unmerge)
	memoryPage("POST /hygiene/dismiss", s.dismiss)
	memoryPage("POST /hygiene/projectwide", s.projectWide)
	page("GET /deadletters", s.deadLetters)
	page("GET /sweep", s.sweepPlan)
	page("POST /sweep", s.sweepRun)
	page("GET /live", s.live)
	page("POST /logout", s.logout)
	page("GET /", func(w http.ResponseWriter, r *http.Request) error {
		return httpError{http.StatusNotFound, "There is no page " + r.URL.Path + " here."}
	})

	// Browsers say where a state-changing request comes from; one from another site is
	// refused before any handler sees it (besides the CSRF field each form carries).
	cop := http.NewCrossOriginProtection()
	return s.hostCheck(cop.Handler(mux)), nil
}

// Run serves ln until ctx ends, then gives the requests in progress a second.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	h, err := s.Handler()
	if err != nil {
		return err
	}
	// Requests live in base: the stop ends the live pages' event streams at once instead of
	// waiting for their browsers to hang up.
	base, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10, ErrorLog: slogLogger(s.Log),
		BaseContext: func(net.Listener) context.Context { return base }}
	errc := make(chan error, 1)
	go func() {
		if s.TLSCert != "" {
			errc <- srv.ServeTLS(ln, s.TLSCert, s.TLSKey)
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	endRequests()
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close() // the live pages' streams end here
	}
	return nil
}

// Listen binds addr, with TLS when cert is set: a taken address fails here, naming the
// variable.
func Listen(addr, cert, key string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("THATCH_HTTP_LISTEN=%q: %w (choose another address, or off)", addr, err)
	}
	if cert != "" {
		if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
			ln.Close()
			return nil, fmt.Errorf("THATCH_HTTP_LISTEN: TLS certificate: %w", err)
		}
	}
	return ln, nil
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// guard lets a request through only with the cookie of a live session (login.go); any
// other request answers 401 with a page that says how to get a link. A POST must carry the
// session's CSRF field in a form of at most maxForm bytes.
func (s *Server) guard(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		x := s.sessionFor(r)
		if x == nil {
			msg := ""
			if r.URL.Query().Has("token") {
				msg = "Links with the broker token no longer open the page: thatch ui prints a link that opens it once, within a minute."
			}
			s.fail(w, r, httpError{http.StatusUnauthorized, msg})
			return
		}
		r = withSession(r, x)
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if err := r.ParseForm(); err != nil {
				if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
					s.fail(w, r, httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("This form is over the %d KiB the page takes: shorten the text and send it again.", maxForm>>10)})
					return
				}
				s.fail(w, r, httpError{http.StatusBadRequest, "This form could not be read: " + err.Error()})
				return
			}
			if !equal(r.PostFormValue("csrf"), x.csrf) {
				s.fail(w, r, httpError{http.StatusForbidden, "This form is not from this thatch's page (its CSRF field is missing or wrong). Reload the page and try again."})
				return
			}
		}
		if err := h(w, r); err != nil {
			s.fail(w, r, err)
		}
	})
}

// headers are the security headers of every page.
func headers(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
}

// hostCheck refuses a request to a loopback endpoint whose Host is not a loopback name or
// address: a page of another site whose name resolves to 127.0.0.1 (DNS rebinding) never
// reaches a handler. An endpoint off loopback serves HTTPS, whose certificate names it.
func (s *Server) hostCheck(next http.Handler) http.Handler {
	listenHost, _, _ := net.SplitHostPort(s.Listen)
	if ip := net.ParseIP(listenHost); listenHost != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "thatch answers only requests addressed to "+s.Listen+" (Host "+r.Host+" refused)", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// httpError is an error page's status and text.
type httpError struct {
	code int
	msg  string
}

func (e httpError) Error() string { return e.msg }

// fail answers err as a page: 401 says how to get the link, others their message.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he httpError
	if !errors.As(err, &he) {
		switch {
		case errors.Is(err, memory.ErrNotFound), errors.Is(err, journal.ErrNoSession):
			he = httpError{http.StatusNotFound, err.Error()}
		case errors.Is(err, memory.ErrBadRequest):
			he = httpError{http.StatusBadRequest, err.Error()}
		case errors.Is(err, runtime.ErrSweepDisabled):
			he = httpError{http.StatusConflict, err.Error()}
		case errors.Is(err, context.Canceled):
			return
		default:
			s.Log.Warn("web page failed", "path", r.URL.Path, "err", err)
			he = httpError{http.StatusInternalServerError, err.Error()}
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if he.code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Cookie realm="thatch ui"`)
	}
	page, err := s.execute(r, "error", "layout", map[string]any{"Code": he.code, "Title": http.StatusText(he.code),
		"Message": he.msg, "Unauthorized": he.code == http.StatusUnauthorized, "NoNav": he.code == http.StatusUnauthorized})
	if err != nil {
		s.Log.Warn("web page failed", "path", r.URL.Path, "err", err)
	}
	w.WriteHeader(he.code)
	_, _ = w.Write(page)
}

// readyz answers 200 once the consumer runs and the journal takes writes (§8).
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	reason := ""
	st, err := s.Status(ctx)
	switch {
	case err != nil:
		reason = "not ready: the journal is loading or thatch is stopping (" + err.Error() + ")"
	case st.JournalError != "":
		reason = "journal error: " + st.JournalError
	case st.BrokerError != "":
		reason = "broker error: " + st.BrokerError
	case !st.Consuming:
		reason = "broker unreachable: the durable consumer is not running"
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if reason != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, reason)
		return
	}
	fmt.Fprintln(w, "ready")
}

// slogPrinter is promhttp's error log.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics", "err", fmt.Sprint(v...)) }
