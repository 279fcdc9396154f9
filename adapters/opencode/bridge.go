package opencode

import (
	"bufio"
	"bytes"
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
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/redact"
)

// HostIDFor derives a stable host id from the server's URL.
func HostIDFor(baseURL string) string {
	sum := sha256.Sum256([]byte(strings.TrimRight(baseURL, "/")))
	return "oc-" + hex.EncodeToString(sum[:6])
}

// Bridge makes an opencode server a protocol host.
type Bridge struct {
	Client    *Client
	NC        *nats.Conn
	JS        jetstream.JetStream
	Prefix    string // host subject prefix, "opencode"
	APIPrefix string // thatch's own prefix, "thatch"
	HostID    string
	Log       *slog.Logger
	// ShimListen and TokenFile, when both set, serve the plugin shim on loopback: POST
	// /tool/<name> forwards a tool call to thatch, POST /api/<method> one of thatch's
	// context methods, POST /event publishes a hook's event.
	ShimListen string
	TokenFile  string
	// CatchUp is how far back the first connection looks for tool calls the stream could
	// not show (the bridge was not running); later connections look back to the last
	// event seen. Zero means DefaultCatchUp.
	CatchUp time.Duration

	// Redacted counts what the bridge redacted before publishing since it started.
	Redacted atomic.Int64

	lastSeen time.Time // when the stream last showed something; owned by Run

	pubMu sync.Mutex // the stream and the shim both publish: Host-Seq must count both
	seq   int64      // Host-Seq of the last event published in this boot

	mu       sync.Mutex
	answered map[string][]byte // idempotency key → the reply sent
	order    []string          // keys, oldest first, to bound answered
	wg       sync.WaitGroup
}

// maxAnswered bounds the idempotency memory.
const maxAnswered = 4096

// DefaultCatchUp covers a restart of thatch, or of a bridge, with room to spare.
const DefaultCatchUp = 15 * time.Minute

// Run serves the host API and streams events until ctx ends.
func (b *Bridge) Run(ctx context.Context) error {
	b.answered = map[string][]byte{}
	sub, err := b.NC.Subscribe(b.Prefix+"."+b.HostID+".api.>", func(m *nats.Msg) {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.serve(ctx, m)
		}()
	})
	if err != nil {
		return fmt.Errorf("serve the host API: %w", err)
	}
	defer func() {
		_ = sub.Unsubscribe()
		b.wg.Wait()
	}()
	if b.ShimListen != "" && b.TokenFile != "" {
		srv, err := b.serveShim()
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	b.Log.Info("bridging opencode", "url", b.Client.BaseURL, "host", b.HostID)
	// needHello: the next stream starts a new boot (the first one, and the first after the
	// server was unreachable: it restarted), until a hello is published.
	backoff, down, needHello := 250*time.Millisecond, false, true
	for ctx.Err() == nil {
		connected, err := b.stream(ctx, &needHello)
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			backoff, down = 250*time.Millisecond, false
			b.pubMu.Lock()
			b.seq++ // the events between this stream and the next are unseen: a gap makes thatch resync
			b.pubMu.Unlock()
		} else if !down {
			down, needHello = true, true
			b.Log.Warn("cannot stream opencode's events; retrying", "url", b.Client.BaseURL, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	return nil
}

// Stream watchdog: opencode sends server.heartbeat every 10 s, so a stream silent for
// StreamIdle is dead (a request that went in while the server was starting can hang).
var (
	StreamIdle    = 30 * time.Second
	streamHeaders = &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 10 * time.Second}}
)

// stream reads /global/event until it ends or falls silent. With *needHello, it first
// announces a new boot of the host with host.hello, and clears *needHello once that is
// published. It reports whether the stream connected.
func (b *Bridge) stream(ctx context.Context, needHello *bool) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchdog := time.AfterFunc(StreamIdle, cancel)
	defer watchdog.Stop()
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(b.Client.BaseURL, "/")+"/global/event", nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if b.Client.Password != "" {
		req.SetBasicAuth("opencode", b.Client.Password)
	}
	resp, err := streamHeaders.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusUnauthorized {
			return false, fmt.Errorf("opencode refused the credentials: set OPENCODE_SERVER_PASSWORD (or THATCH_OPENCODE_SERVER_PASSWORD) to the server's password")
		}
		return false, fmt.Errorf("GET /global/event: HTTP %d", resp.StatusCode)
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "text/event-stream" {
		return false, fmt.Errorf("GET /global/event answered %q, not an event stream: is %s an opencode server (opencode serve)?", ct, b.Client.BaseURL)
	}
	if *needHello {
		if err := b.hello(ctx); err != nil {
			return true, err
		}
		*needHello = false
	}
	// Events from here on are in the stream; the tool calls completed before it are read
	// from the sessions themselves.
	since := b.lastSeen.Add(-time.Minute) // the margin covers opencode's clock and in-flight writes
	if b.lastSeen.IsZero() {
		since = time.Now().Add(-cmp.Or(b.CatchUp, DefaultCatchUp))
	}
	connected := time.Now()
	watchdog.Stop() // the catch-up may take a while; the stream waits in its socket
	var pe *publishError
	if err := b.catchUp(ctx, since); errors.As(err, &pe) || ctx.Err() != nil {
		return true, err // the broker: try again from the same point
	} else if err != nil {
		b.Log.Warn("could not look for tool calls made while the bridge was away; some may be missing", "err", err)
	}
	b.lastSeen = connected
	watchdog.Reset(StreamIdle)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data bytes.Buffer
	for sc.Scan() {
		watchdog.Reset(StreamIdle)
		b.lastSeen = time.Now()
		line := sc.Bytes()
		if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data.Write(bytes.TrimPrefix(rest, []byte(" ")))
			continue
		}
		if len(line) != 0 || data.Len() == 0 {
			continue
		}
		events, err := Translate(data.Bytes())
		data.Reset()
		if err != nil {
			b.Log.Warn("skipping an opencode event", "err", err)
			continue
		}
		for _, ev := range events {
			if err := b.publish(ctx, ev); err != nil {
				return true, err
			}
		}
	}
	return true, sc.Err()
}

// catchUp publishes the completed tool calls of the sessions updated since then. The
// ones thatch already has are the same event ids (tool_<callID>), which it drops.
func (b *Bridge) catchUp(ctx context.Context, since time.Time) error {
	get := func(fn func(context.Context) error) error { // a hung request must not hold the stream
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return fn(rctx)
	}
	var sessions []struct {
		ID string `json:"id"`
	}
	if err := get(func(ctx context.Context) error { return b.Client.sessions(ctx, since.UnixMilli(), &sessions) }); err != nil {
		return err
	}
	published := 0
	for _, s := range sessions {
		var msgs []struct {
			Parts []part `json:"parts"`
		}
		err := get(func(ctx context.Context) error {
			return b.Client.do(ctx, "GET", "/session/"+url.PathEscape(s.ID)+"/message", nil, &msgs)
		})
		if he, ok := err.(*runtime.HostError); ok && he.Name == "NotFoundError" {
			continue // deleted meanwhile
		} else if err != nil {
			return err
		}
		for _, m := range msgs {
			for _, p := range m.Parts {
				if ev, ok := p.toolEvent(); ok {
					if err := b.publish(ctx, ev); err != nil {
						return &publishError{err}
					}
					published++
				}
			}
		}
	}
	b.Log.Info("caught up on tool calls", "since", since.Format(time.RFC3339), "sessions", len(sessions), "tool_calls", published)
	return nil
}

type publishError struct{ err error }

func (e *publishError) Error() string { return "publish: " + e.err.Error() }
func (e *publishError) Unwrap() error { return e.err }

// hello announces a new boot: a fresh bootID, Host-Seq from 1.
func (b *Bridge) hello(ctx context.Context) error {
	var health struct {
		Version string `json:"version"`
	}
	var path struct {
		Directory string `json:"directory"`
		Worktree  string `json:"worktree"`
	}
	_ = b.Client.do(ctx, "GET", "/global/health", nil, &health)
	_ = b.Client.do(ctx, "GET", "/path", nil, &path)
	small, err := b.Client.SmallModel(ctx) // extraction runs on it (protocol extension)
	if err != nil {
		b.Log.Warn("could not read opencode's config; extraction runs on the session's model", "err", err)
	}
	var raw [6]byte
	_, _ = rand.Read(raw[:])
	boot := hex.EncodeToString(raw[:])
	props, _ := json.Marshal(runtime.Hello{HostID: b.HostID, API: "v1", Version: health.Version, BootID: boot,
		Directory: path.Directory, Worktree: path.Worktree, Caps: runtime.Capabilities{TUI: true, Compact: true, Move: true, List: true, Context: true},
		Resumed: []string{}, SmallModel: small})
	b.Log.Info("opencode connected", "version", health.Version, "boot_id", boot, "small_model", small)
	b.pubMu.Lock() // held from the reset to the hello: no shim event slips in between
	defer b.pubMu.Unlock()
	b.seq = 0
	return b.publishLocked(ctx, Event{ID: "hello_" + boot, Type: "host.hello", Properties: props})
}

// publish puts one event on the stream, retrying until it is acknowledged.
func (b *Bridge) publish(ctx context.Context, ev Event) error {
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	return b.publishLocked(ctx, ev)
}

// publishLocked is publish for a caller that holds pubMu.
func (b *Bridge) publishLocked(ctx context.Context, ev Event) error {
	// Secrets never reach the broker's files (rule 13): opencode's events carry tool inputs
	// and outputs verbatim.
	if props, n := redact.JSON(ev.Properties); n.Total() > 0 {
		ev.Properties = props
		b.Redacted.Add(int64(n.Total()))
		b.Log.Debug("redacted before publishing", "event", ev.Type, "redactions", n.Total())
	}
	b.seq++
	dup, err := natsbus.PublishEvent(ctx, b.JS, b.Prefix+"."+b.HostID+".event."+ev.Type, ev.Body(), ev.ID, fmt.Sprint(b.seq))
	if dup {
		b.seq-- // not stored: thatch never sees this number, which must not look like a gap
	}
	return err
}

// serve answers one host API request. A request repeating an idempotency key already
// answered gets the same answer without acting again.
func (b *Bridge) serve(ctx context.Context, m *nats.Msg) {
	method := m.Subject[strings.LastIndex(m.Subject, ".api.")+len(".api."):]
	var p map[string]json.RawMessage
	if err := json.Unmarshal(m.Data, &p); err != nil {
		b.respond(m, "", nil, &runtime.HostError{Name: "BadRequestError", Message: "request is not a JSON object"})
		return
	}
	var key string
	_ = json.Unmarshal(p["idempotencyKey"], &key)
	if key != "" {
		b.mu.Lock()
		old, ok := b.answered[key]
		b.mu.Unlock()
		if ok {
			_ = m.Respond(old)
			return
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := b.Client.Call(cctx, method, p)
	herr, _ := err.(*runtime.HostError)
	if err != nil && herr == nil {
		herr = &runtime.HostError{Name: "HostError", Message: err.Error()}
	}
	b.respond(m, key, res, herr)
}

func (b *Bridge) respond(m *nats.Msg, key string, res any, herr *runtime.HostError) {
	var data []byte
	if herr != nil {
		data, _ = json.Marshal(map[string]any{"error": herr})
	} else {
		data, _ = json.Marshal(map[string]any{"result": res})
	}
	// A transport failure is not an answer: a repeat must try again.
	if key != "" && (herr == nil || herr.Name != "UnavailableError") {
		b.mu.Lock()
		b.answered[key] = data
		b.order = append(b.order, key)
		if len(b.order) > maxAnswered {
			delete(b.answered, b.order[0])
			b.order = b.order[1:]
		}
		b.mu.Unlock()
	}
	_ = m.Respond(data)
}

// serveShim serves the plugin shim's endpoint on loopback.
func (b *Bridge) serveShim() (*http.Server, error) {
	l, err := net.Listen("tcp", b.ShimListen)
	if err != nil {
		return nil, fmt.Errorf("serve the plugin shim on %s: %w (set THATCH_SHIM_LISTEN)", b.ShimListen, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tool/{name}", b.shimTool)
	mux.HandleFunc("POST /api/{method}", b.shimAPI)
	mux.HandleFunc("POST /event", b.shimEvent)
	srv := &http.Server{Handler: b.shimAuth(mux), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

// shimAuth admits requests bearing the token of TokenFile, read at each request so a new
// token takes effect without a restart.
func (b *Bridge) shimAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want, err := os.ReadFile(b.TokenFile)
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		tok := strings.TrimSpace(string(want))
		if err != nil || tok == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
			shimError(w, http.StatusUnauthorized, "UnauthorizedError", "bad or missing token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// shimTool forwards a tool call of the host's model to thatch and returns thatch's reply.
// Only thatch's own tools go through: the endpoint is no way onto the rest of the bus.
func (b *Bridge) shimTool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if name != runtime.ToolPayload && name != runtime.ToolDone && !runtime.MemoryTool(name) {
		shimError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("thatch serves no tool %q", name))
		return
	}
	b.shimForward(w, r, b.APIPrefix+".tool."+name)
}

// shimAPI forwards one of thatch's context methods, which the plugin's hooks ask for
// the text they add to a model request or a compaction, and returns thatch's reply.
func (b *Bridge) shimAPI(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	if method != runtime.CallSessionContext && method != runtime.CallMemoryContext {
		shimError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("the shim forwards only %s and %s, not %q",
			runtime.CallSessionContext, runtime.CallMemoryContext, method))
		return
	}
	b.shimForward(w, r, b.APIPrefix+".api."+method)
}

// shimForward sends the request's body to subject and writes thatch's reply as is, or
// an UnavailableError envelope when thatch does not answer.
func (b *Bridge) shimForward(w http.ResponseWriter, r *http.Request, subject string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		shimError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	msg, err := b.NC.RequestWithContext(r.Context(), subject, body)
	if err != nil {
		shimError(w, http.StatusOK, "UnavailableError", "thatch did not answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(msg.Data)
}

// shimError writes the reply envelope's error, {"error": {name, message}}.
func shimError(w http.ResponseWriter, code int, name, message string) {
	data, _ := json.Marshal(map[string]any{"error": runtime.HostError{Name: name, Message: message}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

// shimEventID names a hook's event. A tool call's is tool_<callID>, the id the event
// stream gives the same call, so that whichever of the two reaches thatch second is a
// duplicate; any other hook's is random.
func shimEventID(ev Event) string {
	var p struct {
		CallID string `json:"callID"`
	}
	if ev.Type == "tool.execute.after" && json.Unmarshal(ev.Properties, &p) == nil && p.CallID != "" {
		return "tool_" + p.CallID
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return "shim_" + hex.EncodeToString(id[:])
}

// shimEvent publishes a plugin hook's event ({type, properties}) as a host event.
func (b *Bridge) shimEvent(w http.ResponseWriter, r *http.Request) {
	var ev Event
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&ev); err != nil || ev.Type == "" {
		shimError(w, http.StatusBadRequest, "BadRequestError", "want {type, properties}")
		return
	}
	ev.ID = shimEventID(ev)
	if err := b.publish(r.Context(), ev); err != nil {
		shimError(w, http.StatusServiceUnavailable, "UnavailableError", "could not publish")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"result":true}`)
}
