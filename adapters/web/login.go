package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// How a browser gets in (an extension of protocol §8, docs/protocol.md): thatch ui asks the
// running daemon over its token-guarded API for a one-time link; the daemon mints a code
// (NewLogin) kept in memory only. GET /login?code= with that code, within LoginTTL and
// once, starts a session: a random id in an HttpOnly, SameSite=Strict cookie (Secure under
// TLS), kept in memory with its own random CSRF key. The broker token never reaches the
// browser, and nothing the browser holds is derived from it: no cookie or CSRF field
// outlives the session it belongs to, and no session outlives the process.

// The login's and the sessions' lifetimes.
const (
	// LoginTTL is how long a code thatch ui printed opens the page.
	LoginTTL = time.Minute
	// SessionIdle ends a session no request used for that long; SessionMax ends any
	// session that long after its login, used or not.
	SessionIdle = 12 * time.Hour
	SessionMax  = 24 * time.Hour
)

// maxCodes and maxSessions bound what the page keeps: past them the oldest code, or the
// session used least recently, is dropped.
const (
	maxCodes    = 32
	maxSessions = 64
)

// session is one browser's login.
type session struct {
	key     string // the hash of its id, its key in logins.sessions
	csrf    string
	created time.Time
	used    time.Time
}

// logins are the codes not used yet and the sessions, both by the SHA-256 of their
// secret: a map lookup then tells nothing of the secret by its timing.
type logins struct {
	mu       sync.Mutex
	codes    map[string]time.Time // code hash → expiry
	sessions map[string]*session  // session id hash → session
}

func hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return string(sum[:])
}

// random is n bytes from crypto/rand, base64url without padding.
func random(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand's contract since Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

// NewLogin mints a code that opens the page once within LoginTTL, and returns it with
// its expiry; LoginURL makes it a link.
func (s *Server) NewLogin() (code string, expires time.Time) {
	now := s.now()
	code, expires = random(32), now.Add(LoginTTL)
	l := &s.logins
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.codes == nil {
		l.codes = map[string]time.Time{}
	}
	for h, exp := range l.codes {
		if !now.Before(exp) {
			delete(l.codes, h)
		}
	}
	for len(l.codes) >= maxCodes { // the one that expires first goes
		var first string
		for h, exp := range l.codes {
			if first == "" || exp.Before(l.codes[first]) {
				first = h
			}
		}
		delete(l.codes, first)
	}
	l.codes[hash(code)] = expires
	return code, expires
}

// PageURL is the page's address for an endpoint listening on listen ("0.0.0.0" and
// friends become 127.0.0.1), ending in a slash.
func PageURL(listen string, tls bool) string {
	host, port, _ := net.SplitHostPort(listen)
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/"
}

// LoginURL is the one-time link of code on the page at base (PageURL's).
func LoginURL(base, code string) string {
	return base + "login?code=" + url.QueryEscape(code)
}

// CookieName is the session cookie's name: one per port, since a browser keeps one
// cookie jar for every port of a host and two thatches on one machine would otherwise
// sign each other's browser out at each login. Under TLS it carries the __Host- prefix:
// the browser then takes it only over HTTPS, for the whole host, never from a subdomain.
func (s *Server) CookieName() string {
	_, port, _ := net.SplitHostPort(s.Listen)
	name := "thatch_ui_" + port
	if s.TLSCert != "" {
		name = "__Host-" + name
	}
	return name
}

// login answers GET /login?code=: a code minted within LoginTTL and not used yet starts a
// session and redirects to /, so the code leaves the address bar; any other answers 401
// saying to run thatch ui again. A code is used by its first request, whatever comes of it.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	headers(w)
	code := r.URL.Query().Get("code")
	now := s.now()
	l := &s.logins
	l.mu.Lock()
	exp, ok := l.codes[hash(code)]
	delete(l.codes, hash(code))
	l.mu.Unlock()
	if code == "" || !ok || !now.Before(exp) {
		s.fail(w, r, httpError{http.StatusUnauthorized, "This link was used already or has expired: a link of thatch ui opens the page once, within a minute. Run thatch ui again for a new one."})
		return
	}
	// A browser that had a session leaves it: one browser, one session.
	if old, err := r.Cookie(s.CookieName()); err == nil {
		s.endSession(old.Value)
	}
	id := random(32)
	l.mu.Lock()
	if l.sessions == nil {
		l.sessions = map[string]*session{}
	}
	s.expire(now)
	for len(l.sessions) >= maxSessions {
		var last string
		for h, x := range l.sessions {
			if last == "" || x.used.Before(l.sessions[last].used) {
				last = h
			}
		}
		delete(l.sessions, last)
	}
	b := make([]byte, 32)
	rand.Read(b)
	l.sessions[hash(id)] = &session{key: hash(id), csrf: hex.EncodeToString(b), created: now, used: now}
	l.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: s.CookieName(), Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.TLSCert != ""})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// expire drops the sessions past their idle time or their cap. Call it with l.mu held.
func (s *Server) expire(now time.Time) {
	for h, x := range s.logins.sessions {
		if !s.alive(x, now) {
			delete(s.logins.sessions, h)
		}
	}
}

func (s *Server) alive(x *session, now time.Time) bool {
	return now.Sub(x.used) < SessionIdle && now.Sub(x.created) < SessionMax
}

// sessionFor is the live session whose id the request's cookie holds, marked used now;
// nil when there is none.
func (s *Server) sessionFor(r *http.Request) *session {
	c, err := r.Cookie(s.CookieName())
	if err != nil || c.Value == "" {
		return nil
	}
	now := s.now()
	l := &s.logins
	l.mu.Lock()
	defer l.mu.Unlock()
	h := hash(c.Value)
	x := l.sessions[h]
	if x == nil {
		return nil
	}
	if !s.alive(x, now) {
		delete(l.sessions, h)
		return nil
	}
	x.used = now
	return x
}

// signedIn says whether x is still a session (no logout, no expiry since), without
// marking it used: the live pages' event streams ask it at every tick.
func (s *Server) signedIn(x *session) bool {
	l := &s.logins
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sessions[x.key] == x && s.alive(x, s.now())
}

// endSession ends the session of id, if any.
func (s *Server) endSession(id string) {
	l := &s.logins
	l.mu.Lock()
	delete(l.sessions, hash(id))
	l.mu.Unlock()
}

// logout ends the request's session, takes the cookie back and says how to come back.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	if c, err := r.Cookie(s.CookieName()); err == nil {
		s.endSession(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: s.CookieName(), Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.TLSCert != ""})
	page, err := s.execute(r, "error", "layout", map[string]any{"Title": "Signed out", "SignedOut": true, "NoNav": true})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, err = w.Write(page)
	return err
}

// sessionKey is the request context's key of the request's session.
type sessionKey struct{}

func withSession(r *http.Request, x *session) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), sessionKey{}, x))
}

func sessionOf(ctx context.Context) *session {
	x, _ := ctx.Value(sessionKey{}).(*session)
	return x
}
