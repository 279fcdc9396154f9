package opencode

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
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
	// ShimLimits bound the shim's connections and requests (zero fields: the defaults).
	ShimLimits ShimLimits
	// CatchUp is how far back the first connection looks for tool calls the stream could
	// not show (the bridge was not running); later connections look back to the last
	// event seen. Zero means DefaultCatchUp.
	CatchUp time.Duration
	// PluginPath is where thatch install writes the plugin shim, for the error that asks
	// to restart opencode when it has not loaded it.
	PluginPath string
	// CallTimeout bounds one host API request (zero means 30 s). Requests do not end with
	// Run: a stop lets an HTTP call to opencode in flight finish (protocol rule 12), since
	// cutting it half-way would leave opencode in a state nobody knows.
	CallTimeout time.Duration
	// StopWait is how long Run, on its way out, waits for the host API requests in
	// flight (zero means 500 ms); they go on after it returns.
	StopWait time.Duration
	// Broker, when set, says what is wrong with the embedded broker ("" while it works):
	// a publish that fails says it, since the broker's own answer to a publish it cannot
	// store (a full disk) is only a timeout. Nil for an external broker.
	Broker func() string

	// Redacted counts what the bridge redacted before publishing since it started.
	Redacted atomic.Int64

	lastSeen time.Time // when the stream last showed something; owned by Run

	pubMu sync.Mutex // the stream and the shim both publish: Host-Seq must count both
	seq   int64      // Host-Seq of the last event published in this boot

	mu       sync.Mutex
	answered *protocol.Memo     // the host API's replies by idempotency key
	started  bool               // Start succeeded
	stopped  bool               // Close ran: no new request is served
	sub      *nats.Subscription // the host API's; nil while opencode is unreachable (withdrawAPI)
	shim     *http.Server
	// shimEvents bounds the hook events read at once; shimTokenBad is set while the token
	// file is unusable, so that the refusal is logged once.
	shimEvents   chan struct{}
	shimTokenBad atomic.Bool
	wg           sync.WaitGroup // host API requests in flight

	tools toolCheck

	// link is the connection to opencode as status shows it (BridgeStatus).
	link struct {
		sync.Mutex
		connected bool      // the event stream is open, or was last time it was tried
		since     time.Time // when connected last changed, or Run started
		err       string    // why the last attempt failed, while not connected
	}

	// helloMu guards the current boot's hello, which the bridge says again (same bootID)
	// when the tools thatch was told are missing change. It is taken before pubMu.
	helloMu  sync.Mutex
	boot     *runtime.Hello // the current boot's last hello; nil before it and after the server went away
	told     []string       // the missing tools thatch was last told of: by that hello, or by a refused create
	rehellos int            // hellos said again in this boot, which name their event ids

	// turnedAway is set when a request was turned away (turnAway) since the last hello:
	// thatch parked it until the host's next hello, which the next stream connection says
	// when the boot goes on. rehello carries Rehello's asks to Run's watcher.
	turnedAway  atomic.Bool
	rehelloOnce sync.Once
	rehello     chan struct{}
}

// DefaultCatchUp covers a restart of thatch, or of a bridge, with room to spare.
const DefaultCatchUp = 15 * time.Minute

// Start serves the host API and, when ShimListen and TokenFile are set, binds the plugin
// shim's listener. Its owner calls it before thatch's outbox resumes, so that the calls
// waiting there find a responder, and learns at once when the bridge cannot start (the
// shim's address is taken). Run then streams the events; Run's return, or Close for a
// bridge that never runs, releases what Start took.
func (b *Bridge) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return errors.New("the opencode bridge was closed: make a new one")
	}
	if b.started {
		return errors.New("the opencode bridge was already started")
	}
	b.answered = protocol.NewMemo(protocol.MemoSize)
	if err := b.subscribeLocked(); err != nil {
		return err
	}
	if b.ShimListen != "" && b.TokenFile != "" {
		srv, err := b.serveShim()
		if err != nil {
			_ = b.sub.Unsubscribe()
			b.sub = nil
			return err
		}
		b.shim = srv
	}
	b.started = true
	return nil
}

// subscribeLocked serves the host API unless it is served already. The caller holds mu.
func (b *Bridge) subscribeLocked() error {
	if b.sub != nil {
		return nil
	}
	subject := b.Prefix + "." + b.HostID + ".api.>"
	sub, err := b.NC.Subscribe(subject, b.onRequest)
	if err != nil {
		return fmt.Errorf("serve the host API on %s: %w", subject, err)
	}
	b.sub = sub
	return nil
}

// serveAPI serves the host API again once opencode is back, unless the bridge was
// closed. hello calls it just before it publishes a new boot's hello: thatch sends the
// calls that waited for the host when it applies that hello, and they must find a
// responder. The flush makes sure the broker has the subscription before the hello.
func (b *Bridge) serveAPI(ctx context.Context) error {
	b.mu.Lock()
	if b.stopped || b.sub != nil {
		b.mu.Unlock()
		return nil
	}
	err := b.subscribeLocked()
	b.mu.Unlock()
	if err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := b.NC.FlushWithContext(fctx); err != nil {
		// The hello goes out on the same connection after the subscription all the same.
		b.Log.Debug("could not flush the host API's subscription", "err", err)
	}
	b.Log.Info("serving thatch's calls again")
	return nil
}

// withdrawAPI stops serving the host API while opencode is unreachable (rule 12): a call
// of thatch then finds no responder and waits in thatch's outbox for the host's next
// hello, where an error would fail it, and a deletion that fails is lost, the child left
// in opencode for good. The requests already delivered are still served (Drain): they
// find opencode unreachable and are turned away (turnAway).
func (b *Bridge) withdrawAPI() {
	b.mu.Lock()
	sub := b.sub
	b.sub = nil
	b.mu.Unlock()
	if sub == nil {
		return
	}
	if err := sub.Drain(); err != nil {
		_ = sub.Unsubscribe()
	}
	b.Log.Info("not serving thatch's calls while opencode is unreachable: they wait in thatch for its next hello")
}

// onRequest serves one host API request on its own goroutine, with its own deadline:
// a stop of the bridge does not cut it.
func (b *Bridge) onRequest(m *nats.Msg) {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		turnAway(m) // thatch keeps the call in its outbox for the host's next hello
		return
	}
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		b.serve(m)
	}()
}

// Close stops serving the host API and the plugin shim, then waits at most StopWait for
// the host API requests in flight, which go on to their end. Run calls it on return.
func (b *Bridge) Close() {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return
	}
	b.stopped = true
	sub, shim := b.sub, b.shim
	b.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	if shim != nil {
		_ = shim.Close()
	}
	done := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(done)
	}()
	wait := cmp.Or(b.StopWait, 500*time.Millisecond)
	select {
	case <-done:
	case <-time.After(wait):
		b.Log.Info("host API requests still in flight at stop; they finish on their own", "waited", wait)
	}
}

// Run streams opencode's events until ctx ends, starting the bridge first when its owner
// has not. From a failed connection to the next boot's hello it serves no host API
// (withdrawAPI), so that thatch's calls wait for that hello. On return it closes the
// bridge (Close).
func (b *Bridge) Run(ctx context.Context) error {
	b.mu.Lock()
	started := b.started
	b.mu.Unlock()
	if !started {
		if err := b.Start(); err != nil {
			return err
		}
	}
	defer b.Close()
	b.link.Lock()
	b.link.since = time.Now() // connecting
	b.link.Unlock()
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		b.watch(wctx)
	}()
	defer func() { stopWatch(); <-watched }()
	b.Log.Info("bridging opencode", "url", b.Client.BaseURL, "host", b.HostID)
	// needHello: the next stream starts a new boot (the first one, and the first after the
	// server was unreachable: it restarted), until a hello is published.
	backoff, down, needHello := 250*time.Millisecond, false, true
	for ctx.Err() == nil {
		connected, err := b.stream(ctx, &needHello)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case connected:
			backoff, down = 250*time.Millisecond, false
			b.pubMu.Lock()
			b.seq++ // the events between this stream and the next are unseen: a gap makes thatch resync
			b.pubMu.Unlock()
		case !down:
			down, needHello = true, true
			b.unreachable(err)
			b.endBoot()
			b.withdrawAPI() // until the next boot's hello (serveAPI)
			b.Log.Warn("cannot stream opencode's events; retrying", "url", b.Client.BaseURL, "err", err)
		default:
			b.unreachable(err) // status shows the last attempt's error
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	return nil
}

// reachable records that opencode's event stream is open.
func (b *Bridge) reachable() {
	b.link.Lock()
	defer b.link.Unlock()
	if !b.link.connected {
		b.link.connected, b.link.since = true, time.Now()
	}
	b.link.err = ""
}

// unreachable records that opencode's event stream could not be opened: since counts
// from the first failure of the outage, err is the last one's.
func (b *Bridge) unreachable(err error) {
	b.link.Lock()
	defer b.link.Unlock()
	if b.link.connected {
		b.link.connected, b.link.since = false, time.Now()
	}
	if err != nil {
		b.link.err = natsbus.RedactURLs(err.Error())
	}
}

// BridgeStatus is the bridge's row of thatch status: the opencode it bridges (the URL's
// credentials redacted), as which host, and whether its event stream is open. The
// runtime's count of hosts online cannot say: opencode gone sends no goodbye.
func (b *Bridge) BridgeStatus() *runtime.BridgeStatus {
	b.link.Lock()
	defer b.link.Unlock()
	return &runtime.BridgeStatus{URL: natsbus.RedactURLs(b.Client.BaseURL), HostID: b.HostID,
		Connected: b.link.connected, Since: b.link.since, Error: b.link.err}
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
	b.reachable()
	if *needHello {
		if err := b.hello(ctx); err != nil {
			return true, err
		}
		*needHello = false
	} else if b.turnedAway.Load() {
		// The boot goes on (a break, or a restart faster than the first reconnect), and
		// calls were turned away meanwhile: they wait in thatch for a hello.
		if err := b.helloAgain(ctx, "calls were turned away while opencode could not be reached"); err != nil {
			return true, err
		}
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
	sc.Buffer(make([]byte, 64<<10), 64<<20) // a large write's tool part; publish cuts it
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
			if idle(ev) {
				// An idle is when thatch would extract: it should know of tools opencode
				// loaded meanwhile. The look holds ToolsTTL.
				if err := b.recheckTools(ctx, false); err != nil {
					return true, err
				}
			}
			if err := b.publish(ctx, ev); err != nil {
				return true, err
			}
		}
	}
	return true, sc.Err()
}

// catchUp publishes the sessions updated since then, each as a session.updated after
// its ancestors, then their completed tool calls, then an idle for each of them that is
// idle now (catchUpIdles). The ones thatch already has are the same event ids
// (ToolEventID, sync_<sessionID>_<time.updated>, sync_idle_…), which it drops. A
// child created while thatch was away (a task's sub-agent) is thus known to thatch, as a
// child, before its tool calls arrive.
func (b *Bridge) catchUp(ctx context.Context, since time.Time) error {
	get := func(fn func(context.Context) error) error { // a hung request must not hold the stream
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return fn(rctx)
	}
	var sessions []listedSession
	if err := get(func(ctx context.Context) error { return b.Client.sessions(ctx, since.UnixMilli(), &sessions) }); err != nil {
		return err
	}
	ordered, err := b.lineage(get, sessions)
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, s := range sessions {
		listed[s.ID] = true
	}
	for _, s := range ordered {
		if err := b.publish(ctx, s.event()); err != nil {
			return &publishError{err}
		}
	}
	published := 0
	var read []listedSession // the listed sessions whose messages were read: not deleted meanwhile
	for _, s := range ordered {
		if !listed[s.ID] {
			continue // an ancestor updated before then: no new tool calls
		}
		var msgs []struct {
			Parts []part `json:"parts"`
		}
		err := get(func(ctx context.Context) error {
			return b.Client.do(ctx, "GET", "/session/"+url.PathEscape(s.ID)+"/message", nil, &msgs)
		})
		if he, ok := err.(*protocol.Error); ok && he.Name == protocol.NotFound {
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
		read = append(read, s)
	}
	idles, unknown, err := b.catchUpIdles(ctx, get, read)
	if err != nil {
		return err
	}
	b.Log.Info("caught up on tool calls", "since", since.Format(time.RFC3339), "sessions", len(sessions),
		"ancestors", len(ordered)-len(sessions), "tool_calls", published, "idle", idles, "status_unknown", unknown)
	return nil
}

// catchUpIdles publishes, after every caught-up tool call, a session.status idle for each
// session of read (listed, not deleted) that opencode says is idle now: one that went idle
// while the bridge was away would otherwise wait, its entries pending, for its next turn
// (opencode keeps no event history, and thatch extracts at an idle). Children come before
// their parents, as opencode's own idles do: a task's calls count for its root, whose idle
// must find them. The id, sync_idle_<sessionID>_<time.updated>_<bootID>, makes a repeat
// within the boot a duplicate; a new boot, whose hello reset the sessions' status in
// thatch, says it again. opencode keeps statuses per directory (GET /session/status
// answers for the directory of the request, and lists only the sessions that are not
// idle), so each session's own directory is asked. A directory whose statuses cannot be
// read (an opencode without the route) gets no idle: its sessions wait as before. It
// returns how many idles it published and how many sessions it could not tell.
func (b *Bridge) catchUpIdles(ctx context.Context, get func(func(context.Context) error) error, read []listedSession) (idles, unknown int, err error) {
	boot := b.bootID()
	type status struct {
		Type string `json:"type"`
	}
	statuses := map[string]map[string]status{} // directory → its sessions that are not idle
	known := map[string]bool{}                 // directory → its statuses were read
	checked := false
	for _, s := range slices.Backward(read) {
		if _, asked := known[s.Directory]; !asked {
			route := "/session/status"
			if s.Directory != "" {
				route += "?directory=" + url.QueryEscape(s.Directory)
			}
			var st map[string]status
			err := get(func(ctx context.Context) error { return b.Client.do(ctx, "GET", route, nil, &st) })
			if err != nil {
				b.Log.Debug("could not read opencode's session statuses; its sessions that went idle while the bridge was away wait for their next turn", "directory", s.Directory, "err", err)
			}
			statuses[s.Directory], known[s.Directory] = st, err == nil
		}
		if !known[s.Directory] {
			unknown++
			continue
		}
		st := statuses[s.Directory]
		if cur, busy := st[s.ID]; busy && cur.Type != "idle" {
			continue // the stream tells of its idle when it comes
		}
		if !checked {
			// As before an idle of the stream: thatch should know of tools opencode loaded.
			if err := b.recheckTools(ctx, false); err != nil {
				return idles, unknown, &publishError{err}
			}
			checked = true
		}
		if err := b.publish(ctx, s.idleEvent(boot)); err != nil {
			return idles, unknown, &publishError{err}
		}
		idles++
	}
	return idles, unknown, nil
}

// listedSession is a session as GET /session, /experimental/session and /session/{id}
// return it: what the catch-up orders by, and the object as it came.
type listedSession struct {
	ID        string
	ParentID  string
	Directory string
	Updated   int64           // time.updated, in ms
	Info      json.RawMessage // the whole object, as session.updated carries it
}

func (s *listedSession) UnmarshalJSON(data []byte) error {
	var f struct {
		ID        string `json:"id"`
		ParentID  string `json:"parentID"`
		Directory string `json:"directory"`
		Time      struct {
			Updated int64 `json:"updated"`
		} `json:"time"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	*s = listedSession{ID: f.ID, ParentID: f.ParentID, Directory: f.Directory, Updated: f.Time.Updated, Info: bytes.Clone(data)}
	return nil
}

// event is the session.updated that tells thatch of s as it is now, as opencode's own
// would. Its id names the update, so a repeat of the same state is one event.
func (s listedSession) event() Event {
	props, _ := json.Marshal(map[string]any{"sessionID": s.ID, "info": s.Info})
	return Event{ID: fmt.Sprintf("sync_%s_%d", s.ID, s.Updated), Type: protocol.EventSessionUpdated, Properties: props}
}

// idleEvent is the session.status idle that tells thatch s is idle now, as opencode's
// own would, in boot (catchUpIdles).
func (s listedSession) idleEvent(boot string) Event {
	props, _ := json.Marshal(map[string]any{"sessionID": s.ID, "status": map[string]string{"type": "idle"}})
	id := fmt.Sprintf("sync_idle_%s_%d", s.ID, s.Updated)
	if boot != "" {
		id += "_" + boot
	}
	return Event{ID: id, Type: protocol.EventSessionStatus, Properties: props}
}

// lineage orders sessions parents first, adding the ancestors the list lacks (opencode
// lists the sessions updated since a time, and a child's parent may not be one of them),
// read with GET /session/{id}. An ancestor deleted meanwhile is left out.
func (b *Bridge) lineage(get func(func(context.Context) error) error, sessions []listedSession) ([]listedSession, error) {
	byID := map[string]listedSession{}
	for _, s := range sessions {
		byID[s.ID] = s
	}
	var out []listedSession
	seen := map[string]bool{}
	var visit func(s listedSession) error
	visit = func(s listedSession) error {
		if seen[s.ID] {
			return nil
		}
		seen[s.ID] = true // before the parent: a cycle ends here
		if p := s.ParentID; p != "" && !seen[p] {
			parent, ok := byID[p]
			if !ok {
				err := get(func(ctx context.Context) error {
					return b.Client.do(ctx, "GET", "/session/"+url.PathEscape(p), nil, &parent)
				})
				if he, isHE := err.(*protocol.Error); isHE && he.Name == protocol.NotFound {
					parent = listedSession{} // deleted meanwhile
				} else if err != nil {
					return err
				}
				ok = parent.ID == p
				if ok {
					byID[p] = parent
				}
			}
			if ok {
				if err := visit(parent); err != nil {
					return err
				}
			}
		}
		out = append(out, s)
		return nil
	}
	for _, s := range sessions {
		if s.ID == "" {
			continue // not a session thatch could take
		}
		if err := visit(s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type publishError struct{ err error }

func (e *publishError) Error() string { return "publish: " + e.err.Error() }
func (e *publishError) Unwrap() error { return e.err }

// hello announces a new boot: a fresh bootID, Host-Seq from 1. recheckTools says it again
// within the boot when the tools opencode lacks change.
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
	missing, err := b.missingTools(ctx, true)
	if err != nil {
		b.Log.Debug("could not list opencode's tools; the hello says nothing of thatch's", "err", err)
	} else if len(missing) > 0 {
		// thatch says so (an error, a toast, status); this line is for a bridge run on its own.
		b.Log.Info(b.toolsMissing(missing).Message)
	}
	var raw [6]byte
	_, _ = rand.Read(raw[:])
	boot := hex.EncodeToString(raw[:])
	hi := &runtime.Hello{HostID: b.HostID, API: "v1", Version: health.Version, BootID: boot,
		Directory: path.Directory, Worktree: path.Worktree, Caps: runtime.Capabilities{TUI: true, Compact: true, Move: true, List: true, Context: true},
		Resumed: []string{}, SmallModel: small, MissingTools: missing}
	props, _ := json.Marshal(hi)
	b.Log.Info("opencode connected", "version", health.Version, "boot_id", boot, "small_model", small)
	if err := b.serveAPI(ctx); err != nil {
		return err
	}
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	b.pubMu.Lock() // held from the reset to the hello: no shim event slips in between
	defer b.pubMu.Unlock()
	b.seq = 0
	// Cleared before the publish: a call turned away after it is owed the next hello.
	turned := b.turnedAway.Swap(false)
	if err := b.publishLocked(ctx, Event{ID: "hello_" + boot, Type: protocol.EventHostHello, Properties: props}); err != nil {
		if turned {
			b.turnedAway.Store(true)
		}
		return err
	}
	b.boot, b.told, b.rehellos = hi, missing, 0
	return nil
}

// Rehello asks the bridge to say the current boot's hello again (the same bootID), as
// soon as it can: thatch sends a host's waiting calls when it applies a hello of the
// host, and waits for one after a call found no responder. Its owner calls it when the
// connection to NATS is restored (thatch restarted with its embedded broker, and parked
// the calls it resumed while the bridge was not connected). It does not block, and does
// nothing before Run says the first hello or while opencode is unreachable: the next
// boot's hello then does it.
func (b *Bridge) Rehello() {
	select {
	case b.rehelloC() <- struct{}{}:
	default: // one is on its way
	}
}

func (b *Bridge) rehelloC() chan struct{} {
	b.rehelloOnce.Do(func() { b.rehello = make(chan struct{}, 1) })
	return b.rehello
}

// helloAgain says the current boot's hello again, with the tools opencode lacks as of the
// last look (ToolsTTL), and does nothing when there is no current boot.
func (b *Bridge) helloAgain(ctx context.Context, why string) error {
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	if b.boot == nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	missing, err := b.missingTools(lctx, false)
	cancel()
	if err != nil {
		missing = b.told
	}
	if err := b.helloAgainLocked(ctx, missing); err != nil {
		return err
	}
	b.Log.Info("said hello again so that thatch sends the calls waiting for opencode", "boot_id", b.boot.BootID, "why", why)
	return nil
}

// helloAgainLocked publishes the boot's hello again with missing as its missingTools:
// the same bootID and fields, the next Host-Seq, the event id hello_<bootID>_<n>. The
// caller holds helloMu, and b.boot is set.
func (b *Bridge) helloAgainLocked(ctx context.Context, missing []string) error {
	hi := *b.boot
	hi.MissingTools = missing
	props, _ := json.Marshal(hi)
	b.rehellos++
	turned := b.turnedAway.Swap(false) // before the publish, as in hello
	if err := b.publish(ctx, Event{ID: fmt.Sprintf("hello_%s_%d", hi.BootID, b.rehellos), Type: protocol.EventHostHello, Properties: props}); err != nil {
		if turned {
			b.turnedAway.Store(true)
		}
		return err
	}
	b.boot, b.told = &hi, missing
	return nil
}

// bootID is the current boot's id, "" when there is none.
func (b *Bridge) bootID() string {
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	if b.boot == nil {
		return ""
	}
	return b.boot.BootID
}

// endBoot forgets the current boot's hello once the server went away: the next boot
// starts with a hello of its own, and none is said again for the old one.
func (b *Bridge) endBoot() {
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	b.boot, b.told = nil, nil
}

// ToolsRecheck is how often the bridge looks at opencode's tools again while thatch was
// told that some are missing.
var ToolsRecheck = 10 * time.Second

// watch looks at opencode's tools every ToolsRecheck while thatch was told that some are
// missing (recheckTools), and says hello again when Rehello asks, until ctx ends.
func (b *Bridge) watch(ctx context.Context) {
	tick := time.NewTicker(ToolsRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := b.recheckTools(ctx, true); err != nil && ctx.Err() == nil {
				b.Log.Warn("could not tell thatch that opencode's tools changed; the next look tries again", "err", err)
			}
		case <-b.rehelloC():
			if err := b.helloAgain(ctx, "the broker connection was restored"); err != nil && ctx.Err() == nil {
				b.Log.Warn("could not say hello again after the broker connection was restored; calls waiting in thatch wait for the next one", "err", err)
			}
		}
	}
}

// recheckTools says the boot's hello again, with the same bootID, when the tools opencode
// lacks are no longer the ones thatch was told of. While a host's last hello names missing
// tools thatch starts no extraction, and opencode can load thatch's plugin without a
// restart (POST /instance/dispose after thatch install): without a new hello the block
// would last as long as the connection. It does nothing unless thatch was told of missing
// tools, so a bridge whose opencode has them makes no request; fresh looks again whatever
// the age of the last look. An error is the broker's: a look that fails says nothing.
func (b *Bridge) recheckTools(ctx context.Context, fresh bool) error {
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	if b.boot == nil || len(b.told) == 0 {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	missing, err := b.missingTools(lctx, fresh)
	cancel()
	if err != nil || slices.Equal(missing, b.told) {
		return nil
	}
	if err := b.helloAgainLocked(ctx, missing); err != nil {
		return err
	}
	if len(missing) == 0 {
		b.Log.Info("opencode loaded thatch's tools: said hello again so that extraction resumes", "boot_id", b.boot.BootID)
	} else {
		b.Log.Info(b.toolsMissing(missing).Message, "boot_id", b.boot.BootID)
	}
	return nil
}

// idle says whether ev tells that a session went idle.
func idle(ev Event) bool {
	switch ev.Type {
	case protocol.EventSessionIdle:
		return true
	case protocol.EventSessionStatus:
		var p struct {
			Status struct {
				Type string `json:"type"`
			} `json:"status"`
		}
		return json.Unmarshal(ev.Properties, &p) == nil && p.Status.Type == "idle"
	}
	return false
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
	// A body over the broker's max_payload is refused, one over 1 MiB is dead-lettered
	// by thatch (rule 11): a large write's tool call would be lost whole. Cut it instead.
	body := ev.Body()
	if limit := eventLimit(b.NC.MaxPayload()); len(body) > limit {
		size := len(body)
		ev = Fit(ev, limit)
		body = ev.Body()
		b.Log.Info("cut an event to fit the broker", "event", ev.Type, "id", ev.ID, "bytes", size, "cut_to", len(body))
	}
	b.seq++
	tooBig := func(size int) error {
		// Publishing it would fail at every try and hold up every later event: it is left
		// out, and its Host-Seq number with it, so thatch counts a gap and resyncs.
		b.Log.Warn("an event too big for the broker, even cut, is left out: thatch will count a gap", "event", ev.Type, "id", ev.ID, "bytes", size)
		return nil
	}
	if len(body) > eventLimit(b.NC.MaxPayload()) { // Fit cannot cut many small values
		return tooBig(len(body))
	}
	dup, err := natsbus.PublishEvent(ctx, b.JS, b.Prefix+"."+b.HostID+".event."+ev.Type, body, ev.ID, fmt.Sprint(b.seq))
	if dup {
		b.seq-- // not stored: thatch never sees this number, which must not look like a gap
	}
	if errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) || errors.Is(err, nats.ErrMaxPayload) {
		return tooBig(len(body))
	}
	if err != nil && b.Broker != nil {
		if p := b.Broker(); p != "" {
			return fmt.Errorf("%s (%w)", p, err)
		}
	}
	return err
}

// serve answers one host API request. A request repeating an idempotency key already
// answered gets the same answer without acting again; one that arrives while the first
// with its key is in flight waits for that one's answer (b.answered). An answer not to
// remember (opencode unreachable, tools missing) is not: a repeat tries again for itself.
// The request has its own deadline, CallTimeout, and no other: a stop of the bridge does
// not cut it.
func (b *Bridge) serve(m *nats.Msg) {
	method := m.Subject[strings.LastIndex(m.Subject, ".api.")+len(".api."):]
	var p map[string]json.RawMessage
	if err := json.Unmarshal(m.Data, &p); err != nil {
		data, _ := reply(nil, &protocol.Error{Name: protocol.BadRequest, Message: "request is not a JSON object"})
		_ = m.Respond(data)
		return
	}
	var key string
	_ = json.Unmarshal(p[protocol.IdempotencyKey], &key)
	data, _ := b.answered.Do(key, func() ([]byte, bool) { return b.perform(method, p) }, func() {
		b.Log.Debug("a repeat of a request in flight waits for its answer", "method", method, "idempotency_key", key)
	})
	send(m, data)
}

// perform acts on one request and returns its reply, nil to turn it away, and whether a
// repeat of its key may be answered with it.
func (b *Bridge) perform(method string, p map[string]json.RawMessage) (data []byte, kept bool) {
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(b.CallTimeout, 30*time.Second))
	defer cancel()
	if method == protocol.MethodSessionCreate {
		var title string
		_ = json.Unmarshal(p["title"], &title)
		if title == runtime.ExtractionTitle {
			// A child that cannot call thatch's tools would run the extraction for nothing.
			if missing, err := b.missingTools(ctx, false); err == nil && len(missing) > 0 {
				b.refused(missing)
				return reply(nil, b.toolsMissing(missing))
			}
		}
	}
	res, err := b.Client.Call(ctx, method, p)
	herr, _ := err.(*protocol.Error)
	if err != nil && herr == nil {
		herr = &protocol.Error{Name: protocol.HostFailed, Message: err.Error()}
	}
	if herr != nil && herr.Name == protocol.Unavailable && ctx.Err() == nil {
		// opencode could not be reached, or went away during the call (a connection
		// error, not the call's deadline): turned away like the calls that come while the
		// stream is down. An error, or no answer (thatch's timeout), would fail the call
		// in thatch and lose it: a deletion would leave the child in opencode for good.
		// The next hello sends it again, with its key; a deletion that opencode did
		// perform before it went away is then NotFoundError, which thatch takes as done.
		b.turnedAway.Store(true)
		b.Log.Info("opencode could not be reached: turned a call away; thatch sends it again at the next hello", "method", method, "err", herr.Message)
		return nil, false
	}
	return reply(res, herr)
}

// reply encodes a host API reply. A refusal that did nothing (tools missing) is not
// remembered: a repeat must try again.
func reply(res any, herr *protocol.Error) (data []byte, kept bool) {
	data, _ = protocol.Encode(res, herr)
	if herr != nil && (herr.Name == protocol.ToolsMissing || herr.Name == protocol.Unavailable) {
		return data, false
	}
	return data, true
}

// send answers m with data, or turns it away when data is nil.
func send(m *nats.Msg, data []byte) {
	if data == nil {
		turnAway(m)
		return
	}
	_ = m.Respond(data)
}

// turnAway answers m as the broker answers a request that nobody serves: an empty reply
// with status 503, which nats.go's requester reports as nats.ErrNoResponders. thatch
// then keeps the call in its outbox until the host's next hello (rule 12), as it does a
// call made while the bridge serves no host API (withdrawAPI).
func turnAway(m *nats.Msg) {
	_ = m.RespondMsg(&nats.Msg{Header: nats.Header{"Status": []string{"503"}}})
}

// thatchTools are the tools thatch's plugin gives opencode's models.
var thatchTools = []string{protocol.ToolPayload, protocol.ToolDone, protocol.ToolRemember, protocol.ToolSearch, protocol.ToolUpdate, protocol.ToolForget}

// ToolsTTL is how long a look at opencode's tools holds before an extraction child's
// creation looks again.
var ToolsTTL = 10 * time.Second

// toolCheck is the last look at opencode's tools.
type toolCheck struct {
	mu      sync.Mutex
	at      time.Time
	missing []string
	err     error
}

// missingTools returns thatch's tools that opencode does not serve, from a look at most
// ToolsTTL old unless fresh. An error means opencode cannot say (one without the route).
func (b *Bridge) missingTools(ctx context.Context, fresh bool) ([]string, error) {
	b.tools.mu.Lock()
	defer b.tools.mu.Unlock()
	if !fresh && !b.tools.at.IsZero() && time.Since(b.tools.at) < ToolsTTL {
		return b.tools.missing, b.tools.err
	}
	ids, err := b.Client.ToolIDs(ctx)
	var missing []string
	for _, t := range thatchTools {
		if err == nil && !slices.Contains(ids, t) {
			missing = append(missing, t)
		}
	}
	b.tools.at, b.tools.missing, b.tools.err = time.Now(), missing, err
	return missing, err
}

// refused records that thatch was told of missing tools by a refused create: thatch then
// holds them missing until the next hello, which recheckTools says when they change.
func (b *Bridge) refused(missing []string) {
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	if b.boot != nil {
		b.told = missing
	}
}

// toolsMissing is the answer to an extraction child's creation when opencode has not
// loaded thatch's plugin.
func (b *Bridge) toolsMissing(missing []string) *protocol.Error {
	plugin := cmp.Or(b.PluginPath, "plugin/thatch.js in its config folder")
	return &protocol.Error{Name: protocol.ToolsMissing, Message: fmt.Sprintf(
		"opencode has not loaded thatch's plugin (missing tools: %s): run thatch install if you have not, then restart opencode (or POST /instance/dispose) so it loads the plugin from %s",
		strings.Join(missing, ", "), plugin)}
}
