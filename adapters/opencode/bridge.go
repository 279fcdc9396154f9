package opencode

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/internal/backoff"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
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
	// StreamIdle is how long the event stream may stay silent before the bridge takes it
	// as dead and connects again (zero means DefaultStreamIdle).
	StreamIdle time.Duration
	// ToolsRecheck is how often the bridge looks at opencode's tools again while thatch
	// was told that some are missing (zero means DefaultToolsRecheck).
	ToolsRecheck time.Duration
	// ToolsTTL is how long a look at opencode's tools holds before an extraction child's
	// creation looks again (zero means DefaultToolsTTL).
	ToolsTTL time.Duration
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

	link link // the event stream as status shows it (BridgeStatus)

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

// The bridge's defaults. opencode sends server.heartbeat every 10 s, so a stream silent
// for DefaultStreamIdle is dead; DefaultCatchUp covers a restart of thatch, or of a
// bridge, with room to spare.
const (
	DefaultCatchUp      = 15 * time.Minute
	DefaultStreamIdle   = 30 * time.Second
	DefaultToolsRecheck = 10 * time.Second
	DefaultToolsTTL     = 10 * time.Second
)

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
	b.link.connecting()
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
	var retry backoff.Backoff
	down, needHello := false, true
	for ctx.Err() == nil {
		connected, err := b.stream(ctx, &needHello)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case connected:
			retry.Reset()
			down = false
			b.pubMu.Lock()
			b.seq++ // the events between this stream and the next are unseen: a gap makes thatch resync
			b.pubMu.Unlock()
		case !down:
			down, needHello = true, true
			b.link.unreachable(err)
			b.endBoot()
			b.withdrawAPI() // until the next boot's hello (serveAPI)
			b.Log.Warn("cannot stream opencode's events; retrying", "url", b.Client.BaseURL, "err", err)
		default:
			b.link.unreachable(err) // status shows the last attempt's error
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry.Next()):
		}
	}
	return nil
}

// BridgeStatus is the bridge's row of thatch status (its bridge field): the opencode it
// bridges, as which host, and whether its event stream is open. Hosts online counts a
// host from its hello until its goodbye, and an opencode that went away sends none.
type BridgeStatus struct {
	URL       string    `json:"url"` // credentials redacted
	HostID    string    `json:"hostID"`
	Connected bool      `json:"connected"`       // its event stream is open
	Since     time.Time `json:"since,omitzero"`  // when Connected last changed (or the bridge started)
	Error     string    `json:"error,omitempty"` // why opencode cannot be reached, while not connected
}

// BridgeStatus is the bridge's row of thatch status: the opencode it bridges (the URL's
// credentials redacted), as which host, and whether its event stream is open. The
// runtime's count of hosts online cannot say: opencode gone sends no goodbye.
func (b *Bridge) BridgeStatus() *BridgeStatus {
	connected, since, err := b.link.state()
	return &BridgeStatus{URL: natsbus.RedactURLs(b.Client.BaseURL), HostID: b.HostID,
		Connected: connected, Since: since, Error: err}
}
