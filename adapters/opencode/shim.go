package opencode

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/commands"
	"github.com/thatch-dev/thatch/runtime/protocol"
	"golang.org/x/net/netutil"
)

// ShimLimits bound the plugin shim's endpoint. It listens on loopback, where every local
// account can connect: the token keeps their requests out, and these bounds keep what
// their connections cost. A connection that sends nothing, or stays open doing nothing, is
// closed; a refused request closes its connection; no more than MaxConns connections are
// served at once, and the others wait in the kernel's accept queue, where they cost the
// process neither a file descriptor nor a goroutine. Zero fields take the defaults.
type ShimLimits struct {
	MaxConns   int           // connections served at once (256)
	ReadHeader time.Duration // to read a request's headers (3 s: the plugin sends them at once)
	// Read is how long reading a whole request, headers and body, may take (30 s). The
	// wait for thatch's answer is not reading: net/http lifts the deadline once the body
	// is read (TestShimToolCallOutlastsReadTimeout).
	Read time.Duration
	// Call is how long a tool call or a context method waits for thatch's answer, and a
	// hook's event for the broker (60 s: the plugin waits that long for a tool).
	Call time.Duration
	// Write is how long a request may take from its headers to the end of its answer:
	// Call and time to spare (90 s). It must not cut a tool call thatch answers in time.
	Write time.Duration
	Idle  time.Duration // a kept-alive connection waits this long for its next request (60 s)
}

func (l ShimLimits) withDefaults() ShimLimits {
	l.MaxConns = cmp.Or(l.MaxConns, 256)
	l.ReadHeader = cmp.Or(l.ReadHeader, 3*time.Second)
	l.Read = cmp.Or(l.Read, 30*time.Second)
	l.Call = cmp.Or(l.Call, 60*time.Second)
	l.Write = cmp.Or(l.Write, l.Call+30*time.Second)
	l.Idle = cmp.Or(l.Idle, 60*time.Second)
	return l
}

// Bounds of a request's body. A tool call or a context method carries a few KiB.
// A hook's event carries a tool call whole: a write's content, its diff and its output,
// about three times the file. maxShimEvent takes a write of some 5 MB; a larger one is
// refused (413) and reaches thatch all the same through the event stream, which reports
// every tool call (the later of the two is a duplicate anyway). publish cuts what it takes
// to fit the broker. shimEventsAtOnce bounds the memory the bodies take: the events are
// published one at a time anyway.
const (
	maxShimRequest   = 1 << 20
	maxShimEvent     = 16 << 20
	shimEventsAtOnce = 4
)

// serveShim serves the plugin shim's endpoint on loopback, within ShimLimits.
func (b *Bridge) serveShim() (*http.Server, error) {
	lim := b.ShimLimits.withDefaults()
	l, err := net.Listen("tcp", b.ShimListen)
	if err != nil {
		cause := err // "listen tcp …: bind: address already in use" says the address twice
		for u := errors.Unwrap(cause); u != nil; u = errors.Unwrap(cause) {
			cause = u
		}
		return nil, fmt.Errorf("the plugin shim cannot listen on %s (THATCH_SHIM_LISTEN): %w; set THATCH_SHIM_LISTEN to a free loopback address", b.ShimListen, cause)
	}
	b.shimEvents = make(chan struct{}, shimEventsAtOnce)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tool/{name}", b.shimTool)
	mux.HandleFunc("POST /api/{method}", b.shimAPI)
	mux.HandleFunc("POST /event", b.shimEvent)
	srv := &http.Server{
		Handler:           b.shimAuth(mux),
		ReadHeaderTimeout: lim.ReadHeader,
		ReadTimeout:       lim.Read,
		WriteTimeout:      lim.Write,
		IdleTimeout:       lim.Idle,
		MaxHeaderBytes:    32 << 10,
		// A stranger's malformed requests are no news worth a line at the default level.
		ErrorLog: slog.NewLogLogger(b.Log.With("component", "shim").Handler(), slog.LevelDebug),
	}
	go func() { _ = srv.Serve(netutil.LimitListener(l, lim.MaxConns)) }()
	return srv, nil
}

// shimAuth admits requests bearing the token of TokenFile, read at each request so a new
// token takes effect without a restart. The file must pass commands.ReadToken's rule (long
// enough, private to this user), the one thatch install applies: a token that fails it is
// no token. A refused request's connection is closed, so a refused client holds nothing.
func (b *Bridge) shimAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want, err := commands.ReadToken(b.TokenFile)
		if err != nil {
			if !b.shimTokenBad.Swap(true) {
				b.Log.Warn("the plugin shim refuses every request: its token is unusable", "err", err)
			}
		} else {
			b.shimTokenBad.Store(false)
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		// Hashes have one length whatever the token's: the comparison takes one time.
		gh, wh := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
		if err != nil || !ok || subtle.ConstantTimeCompare(gh[:], wh[:]) != 1 {
			w.Header().Set("Connection", "close")
			shimError(w, http.StatusUnauthorized, protocol.Unauthorized, "bad or missing token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// shimTool forwards a tool call of the host's model to thatch and returns thatch's reply.
// Only thatch's own tools go through: the endpoint is no way onto the rest of the bus.
func (b *Bridge) shimTool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !slices.Contains(thatchTools, name) {
		shimError(w, http.StatusNotFound, protocol.NotFound, fmt.Sprintf("thatch serves no tool %q: the shim forwards only %s",
			clip(name), strings.Join(thatchTools, ", ")))
		return
	}
	b.shimForward(w, r, b.APIPrefix+".tool."+name)
}

// shimAPI forwards one of thatch's context methods, which the plugin's hooks ask for
// the text they add to a model request or a compaction, and returns thatch's reply.
func (b *Bridge) shimAPI(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	if method != protocol.APISessionContext && method != protocol.APIMemoryContext {
		shimError(w, http.StatusNotFound, protocol.NotFound, fmt.Sprintf("the shim forwards only %s and %s, not %q",
			protocol.APISessionContext, protocol.APIMemoryContext, clip(method)))
		return
	}
	b.shimForward(w, r, b.APIPrefix+".api."+method)
}

// clip shortens a name taken from a request's path for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// shimForward sends the request's body to subject and writes thatch's reply as is, or
// an UnavailableError envelope when thatch does not answer within ShimLimits.Call.
func (b *Bridge) shimForward(w http.ResponseWriter, r *http.Request, subject string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxShimRequest))
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		shimError(w, http.StatusRequestEntityTooLarge, protocol.BadRequest, fmt.Sprintf("a request body over %d MiB", maxShimRequest>>20))
		return
	}
	if err != nil {
		shimError(w, http.StatusBadRequest, protocol.BadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), b.ShimLimits.withDefaults().Call)
	defer cancel()
	msg, err := b.NC.RequestWithContext(ctx, subject, body)
	if err != nil {
		shimError(w, http.StatusOK, protocol.Unavailable, "thatch did not answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(msg.Data)
}

// shimError writes the reply envelope's error, {"error": {name, message}}.
func shimError(w http.ResponseWriter, code int, name, message string) {
	data, _ := protocol.Encode(nil, &protocol.Error{Name: name, Message: message})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

// shimEventID names a hook's event. A tool call's is ToolEventID, the id the event
// stream gives the same call, so that whichever of the two reaches thatch second is a
// duplicate; any other hook's is random.
func shimEventID(ev Event) string {
	var p struct {
		SessionID string `json:"sessionID"`
		CallID    string `json:"callID"`
	}
	if ev.Type == protocol.EventToolExecuteAfter && json.Unmarshal(ev.Properties, &p) == nil && p.CallID != "" && p.SessionID != "" {
		return ToolEventID(p.SessionID, p.CallID)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return "shim_" + hex.EncodeToString(id[:])
}

// shimEvent publishes a plugin hook's event ({type, properties}) as a host event.
func (b *Bridge) shimEvent(w http.ResponseWriter, r *http.Request) {
	tooLarge := func() {
		w.Header().Set("Connection", "close") // the rest of the body is not read
		shimError(w, http.StatusRequestEntityTooLarge, protocol.BadRequest, fmt.Sprintf("an event over %d MiB", maxShimEvent>>20))
	}
	if r.ContentLength > maxShimEvent {
		tooLarge()
		return
	}
	select {
	case b.shimEvents <- struct{}{}:
		defer func() { <-b.shimEvents }()
	case <-r.Context().Done():
		return
	}
	var ev Event
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxShimEvent)).Decode(&ev)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		tooLarge()
		return
	}
	if err != nil || ev.Type == "" {
		shimError(w, http.StatusBadRequest, protocol.BadRequest, "want {type, properties}")
		return
	}
	ev.ID = shimEventID(ev)
	ctx, cancel := context.WithTimeout(r.Context(), b.ShimLimits.withDefaults().Call)
	defer cancel()
	if err := b.publish(ctx, ev); err != nil {
		shimError(w, http.StatusServiceUnavailable, protocol.Unavailable, "could not publish: "+err.Error())
		return
	}
	data, _ := protocol.Encode(true, nil)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}
