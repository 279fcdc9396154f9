package natsbus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/internal/backoff"
	"github.com/thatch-dev/thatch/runtime"
)

// BrokerConfig configures the embedded broker.
type BrokerConfig struct {
	Listen string // host:port; port 0 or -1 picks a free one
	Dir    string // the JetStream store's folder
	// Token, when set, is required of every client, in-process ones included (§7).
	Token string
	// TLS, when its Cert and Key are set, makes the broker serve TLS and require it of
	// every client over the network (in-process clients need none).
	TLS TLSFiles
	// StoreKey, when set, encrypts the store at rest (AES-GCM, JetStream's key): message
	// blocks, indexes and consumer state. A store written unencrypted by an earlier thatch
	// is encrypted in place when the broker recovers it (nats-server converts each
	// stream's blocks as it loads them), keeping its events, sequences and creation time.
	StoreKey string
}

// StartBroker starts the embedded nats-server with JetStream that e describes.
func StartBroker(e BrokerConfig) (*server.Server, error) {
	listen, dir := e.Listen, e.Dir
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("listen address %q is not host:port: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("listen port %q is not a number", portStr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if port != server.RANDOM_PORT {
		// nats-server only says it is not ready after its 10 s wait; a taken address
		// fails the start at once instead.
		l, err := net.Listen("tcp", listen)
		if err != nil {
			return nil, fmt.Errorf("the embedded broker cannot listen on %s (%v): is another thatch or NATS server using it? set THATCH_NATS_LISTEN to a free address", listen, err)
		}
		l.Close()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create broker store: %w", err)
	}
	opts := &server.Options{
		ServerName: "thatch-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   filepath.Clean(dir),
		NoSigs:     true,
		NoLog:      true,
		// Above the 1 MiB event limit, so an oversized event reaches thatch and is
		// dead-lettered with its reason instead of vanishing at publish.
		MaxPayload: 8 << 20,
		// Every local account can open connections to a loopback port; those without the
		// token are closed after the auth timeout, and no more than this are held at once,
		// so a flood costs a bounded number of file descriptors.
		MaxConn: 4096,
	}
	if e.Token != "" {
		opts.Authorization = e.Token
	}
	if e.StoreKey != "" {
		opts.JetStreamKey, opts.JetStreamCipher = e.StoreKey, server.AES
	}
	if e.TLS.Cert != "" || e.TLS.Key != "" {
		if opts.TLSConfig, err = serverTLS(e.TLS); err != nil {
			return nil, err
		}
		opts.TLS, opts.TLSTimeout = true, 2
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("configure embedded broker: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded broker did not start listening on %s: is the port in use? set THATCH_NATS_LISTEN", listen)
	}
	return ns, nil
}

// ConnectOptions configures a connection.
type ConnectOptions struct {
	URL       string // one or more comma-separated URLs; empty with Embedded set
	Embedded  *server.Server
	CredsFile string
	Token     string
	Name      string
	// TLS, when set, is the TLS configuration over the network (not used in-process).
	TLS *tls.Config
	// InboxPrefix, when set, replaces _INBOX as the prefix of the connection's reply
	// subjects, so that a broker's permissions can give each user inboxes of its own.
	InboxPrefix string
}

// Connect connects to NATS, reconnecting forever with backoff and logging each
// transition once.
func Connect(o ConnectOptions, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil is a deliberate close
				log.Warn("broker connection lost; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("broker connection restored", "url", RedactURLs(nc.ConnectedUrl()))
		}),
		nats.ClosedHandler(func(*nats.Conn) { log.Debug("broker connection closed") }),
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	url, clientTLS := o.URL, o.TLS
	if o.Embedded != nil {
		opts = append(opts, nats.InProcessServer(o.Embedded))
		// In process, the broker requires no TLS: ask for none (its URL says tls:// when
		// it serves TLS over the network).
		url = "nats://" + strings.TrimPrefix(strings.TrimPrefix(o.Embedded.ClientURL(), "tls://"), "nats://")
		clientTLS = nil
	}
	opts = append(opts, AuthOptions(o.CredsFile, o.Token, clientTLS)...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURLs(url), err)
	}
	return nc, nil
}

// AuthOptions are the options that present a client to the broker: a credentials file,
// a token and a TLS configuration, each when set. Connect and the CLI's one-shot
// connection both build them here.
func AuthOptions(credsFile, token string, clientTLS *tls.Config) []nats.Option {
	var opts []nats.Option
	if credsFile != "" {
		opts = append(opts, nats.UserCredentials(credsFile))
	}
	if token != "" {
		opts = append(opts, nats.Token(token))
	}
	if clientTLS != nil {
		opts = append(opts, nats.Secure(clientTLS))
	}
	return opts
}

// StreamConfig names the stream and the consumer, and bounds the stream.
type StreamConfig struct {
	Stream   string // OPENCODE_EVENTS
	Consumer string // thatch
	Prefix   string // opencode: the stream holds <prefix>.*.event.>
	// MaxBytes bounds the stream's size on disk (zero means DefaultStreamMaxBytes): past
	// it the oldest events go (see EnsureStream for why the oldest).
	MaxBytes int64
	// MaxMsgBytes bounds one message, headers included (zero means
	// DefaultStreamMaxMsgBytes): the broker refuses a larger publish instead of storing it.
	MaxMsgBytes int32
	// Log is where EnsureStream says that it bounded the stream below MaxBytes, the
	// broker having too little storage; nil says it nowhere.
	Log *slog.Logger
	// Committed, when set, is the journal's position: the identity of the stream it counts
	// in and the last stream sequence committed (ok false while unknown). A consumer
	// created where there is none (deleted under thatch, or lost with the broker's store)
	// starts right after it in that stream, instead of replaying the stream.
	Committed func(ctx context.Context) (stream string, seq uint64, ok bool)
	// PurgeApplied, when set, is how often the consumer purges from the stream the events
	// it has acknowledged (thatch acknowledges an event once the journal committed it):
	// an event's body stays in the broker's store only until it is applied. For the
	// embedded broker only, whose one reader is thatch; zero keeps them to the limits.
	PurgeApplied time.Duration
}

// The stream's default bounds. A host's event body is at most 1 MiB (contract rule 11;
// the opencode bridge cuts larger ones to 1 MiB − 8 KiB), so DefaultStreamMaxMsgBytes
// stores every valid event with room for its headers, and still stores a body a little
// over 1 MiB, which thatch then dead-letters with its reason instead of it vanishing at
// publish. DefaultStreamMaxBytes keeps days of a busy machine's events.
const (
	DefaultStreamMaxBytes    = 1 << 30
	DefaultStreamMaxMsgBytes = 1<<20 + 64<<10
)

// limits returns the stream's bounds, defaults filled in.
func (c StreamConfig) limits() (maxBytes int64, maxMsgBytes int32) {
	maxBytes, maxMsgBytes = c.MaxBytes, c.MaxMsgBytes
	if maxBytes == 0 {
		maxBytes = DefaultStreamMaxBytes
	}
	if maxMsgBytes == 0 {
		maxMsgBytes = DefaultStreamMaxMsgBytes
	}
	return maxBytes, maxMsgBytes
}

// EnsureStream returns the event stream, creating it when absent with the protocol's
// settings and c's bounds. An existing stream gets c's bounds (MaxBytes, MaxMsgSize,
// DiscardOld) when it has others; its other settings are left alone, and it is not
// created again (its creation time is its identity).
//
// A single nats-server reserves a stream's MaxBytes out of its storage, by default three
// quarters of the disk space free when it started. When it cannot reserve MaxBytes,
// EnsureStream halves the bound until the broker can (down to 8 messages' worth) and says
// so in c.Log: a nearly full disk gets a smaller history, not a thatch that cannot start.
//
// The stream discards its oldest events when full (DiscardOld), not new ones
// (DiscardNew). Its retention is by limits: thatch acknowledges an event within
// milliseconds of its arrival, but the stream keeps it for MaxAge (7 days), so a stream
// at its byte limit is, in the normal case, full of events thatch has already applied.
// With DiscardNew every publish would then fail until enough of them aged out, up to 7
// days: one burst of events (a runaway host, or anyone who can publish filling it on
// purpose) would stop thatch hearing of anything for days. With DiscardOld the applied
// history goes first, and what is lost is only an unapplied event older than the newest
// MaxBytes of the stream (thatch down while hosts published that much); the consumer then
// starts at the oldest event kept, and a host that numbers its events (Host-Seq) shows the
// hole as a gap, which makes thatch resync that host's sessions (contract rule 10).
func EnsureStream(ctx context.Context, js jetstream.JetStream, c StreamConfig) (jetstream.Stream, error) {
	want, maxMsgBytes := c.limits()
	for maxBytes := want; ; maxBytes /= 2 {
		s, err := ensureStream(ctx, js, c, maxBytes, maxMsgBytes)
		if insufficientStorage(err) && maxBytes/2 >= 8*int64(maxMsgBytes) {
			continue
		}
		if insufficientStorage(err) {
			return nil, fmt.Errorf("%w: the broker cannot reserve even %d bytes for the stream; free disk space", err, maxBytes)
		}
		if err == nil && maxBytes < want && c.Log != nil {
			c.Log.Warn("the broker has too little storage for the event stream's byte limit: bounded it lower; free disk space and restart for the full limit",
				"stream", c.Stream, "limit", want, "bounded_to", maxBytes)
		}
		return s, err
	}
}

// ensureStream is EnsureStream with the byte limit maxBytes.
func ensureStream(ctx context.Context, js jetstream.JetStream, c StreamConfig, maxBytes int64, maxMsgBytes int32) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, c.Stream)
	if err == nil {
		return bound(ctx, js, s, maxBytes, maxMsgBytes)
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("look up stream %s: %w", c.Stream, err)
	}
	s, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       c.Stream,
		Subjects:   []string{c.Prefix + ".*.event.>"},
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		MaxAge:     7 * 24 * time.Hour,
		Duplicates: 2 * time.Minute,
		MaxBytes:   maxBytes,
		MaxMsgSize: maxMsgBytes,
		Discard:    jetstream.DiscardOld,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		// Another thatch created it first, perhaps with other bounds.
		if s, err = js.Stream(ctx, c.Stream); err != nil {
			return nil, fmt.Errorf("look up stream %s: %w", c.Stream, err)
		}
		return bound(ctx, js, s, maxBytes, maxMsgBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("create stream %s with THATCH_STREAM_MAX_BYTES=%d: %w", c.Stream, maxBytes, err)
	}
	return s, nil
}

// bound gives the existing stream s the bounds thatch is configured with, when it has
// others (a stream created before thatch set any has none). Lowering MaxBytes below what
// the stream holds drops its oldest events at once.
func bound(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, maxBytes int64, maxMsgBytes int32) (jetstream.Stream, error) {
	cfg := s.CachedInfo().Config
	if cfg.MaxBytes == maxBytes && cfg.MaxMsgSize == maxMsgBytes && cfg.Discard == jetstream.DiscardOld {
		return s, nil
	}
	cfg.MaxBytes, cfg.MaxMsgSize, cfg.Discard = maxBytes, maxMsgBytes, jetstream.DiscardOld
	u, err := js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bound stream %s to THATCH_STREAM_MAX_BYTES=%d and THATCH_STREAM_MAX_MSG_BYTES=%d: %w",
			cfg.Name, maxBytes, maxMsgBytes, err)
	}
	return u, nil
}

// insufficientStorage says whether err is the broker's refusal to reserve a stream's
// MaxBytes.
func insufficientStorage(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10047 // JSStorageResourcesExceededErr
}

// EnsureConsumer returns the durable pull consumer, creating it when absent. With
// resume set (the first setup of a process), a consumer that still holds deliveries of
// a previous instance that died unacknowledged is recreated at its ack floor, so those
// events come again at once and in stream order instead of after the ack wait and out
// of order; the journal's applied ids skip what was applied already.
//
// A consumer created where there was none starts after the journal's committed position
// (StreamConfig.Committed) when that position counts in this stream; otherwise it
// delivers the whole stream (a new thatch, or a stream created again).
func EnsureConsumer(ctx context.Context, s jetstream.Stream, c StreamConfig, resume bool, log *slog.Logger) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		Durable:       c.Consumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 4096,
	}
	cons, err := s.Consumer(ctx, c.Consumer)
	switch {
	case err == nil && resume:
		info := cons.CachedInfo()
		if info.NumAckPending == 0 {
			return cons, nil
		}
		log.Info("redelivering events a previous run received but never acknowledged",
			"consumer", c.Consumer, "from_stream_seq", info.AckFloor.Stream+1, "unacknowledged", info.NumAckPending)
		if err := s.DeleteConsumer(ctx, c.Consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("reset consumer %s: %w", c.Consumer, err)
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, info.AckFloor.Stream+1
	case err == nil:
		return cons, nil
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, fmt.Errorf("look up consumer %s: %w", c.Consumer, err)
	case c.Committed != nil:
		if stream, seq, ok := c.Committed(ctx); ok && seq > 0 && stream == StreamIdentity(s) {
			log.Info("creating the consumer at the journal's position", "consumer", c.Consumer, "from_stream_seq", seq+1)
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
		}
	}
	cons, err = s.CreateConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create consumer %s: %w", c.Consumer, err)
	}
	return cons, nil
}

// Consumer feeds the durable consumer's messages to the runtime, recreating the stream
// and the consumer when they vanish and waiting out broker outages.
type Consumer struct {
	JS      jetstream.JetStream
	Config  StreamConfig
	Out     chan<- runtime.Delivery
	Log     *slog.Logger
	Running atomic.Bool // true while messages are being consumed
	started chan struct{}
	purged  uint64 // the stream sequence purgeApplied last purged through (Run's goroutine)
}

// NewConsumer returns a consumer of the stream that hands messages to out.
func NewConsumer(js jetstream.JetStream, cfg StreamConfig, out chan<- runtime.Delivery, log *slog.Logger) *Consumer {
	return &Consumer{JS: js, Config: cfg, Out: out, Log: log, started: make(chan struct{})}
}

// Started is closed once the consumer first runs.
func (c *Consumer) Started() <-chan struct{} { return c.started }

// Run consumes until ctx ends. Messages not yet handed over are not acknowledged, so the
// broker redelivers them to the next run.
func (c *Consumer) Run(ctx context.Context) error {
	var retry backoff.Backoff
	waiting, resume := false, true
	var purge <-chan time.Time
	if c.Config.PurgeApplied > 0 {
		t := time.NewTicker(c.Config.PurgeApplied)
		defer t.Stop()
		purge = t.C
	}
	for {
		cons, stream, err := c.setup(ctx, resume)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !waiting {
				c.Log.Warn("event stream unavailable; retrying until the broker answers", "err", err)
				waiting = true
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(retry.Next()):
			}
			continue
		}
		retry.Reset()
		waiting, resume = false, false
		c.purged = 0 // a stream created again numbers from 1
		errs := make(chan error, 1)
		cc, err := cons.Consume(c.handle(ctx, stream),
			jetstream.PullMaxMessages(1024),
			// A pull the broker lost (a restart, JetStream re-enabled) is noticed in
			// seconds instead of at the pull's 30 s expiry.
			jetstream.PullHeartbeat(time.Second),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				select {
				case errs <- err:
				default:
				}
			}))
		if err != nil {
			c.Log.Warn("consume failed; retrying", "err", err)
			continue
		}
		c.Running.Store(true)
		select {
		case <-c.started:
		default:
			close(c.started)
		}
		c.Log.Info("consuming events", "stream", c.Config.Stream, "consumer", c.Config.Consumer)
		restart := false
		for !restart {
			select {
			case <-ctx.Done():
				// Drain hands the buffered messages to the handler, which returns them
				// unacknowledged (Nak) for immediate redelivery to the next run. Its end
				// waits for a round trip to the broker, so a stuck broker would hold the
				// stop for the drain's whole timeout; rule 12 gives the whole stop 2 s,
				// and the loop (1 s grace) and the bridge (0.5 s) stop after the
				// consumer. So the consumer waits 300 ms at most: the drain goes on
				// behind it (the handler NAKs what it is still handed) until the
				// connection closes, and a message it did not hand back is redelivered
				// anyway, at once by the next run (which recreates the consumer at its
				// ack floor) or after the ack wait.
				cc.Drain()
				select {
				case <-cc.Closed():
				case <-time.After(300 * time.Millisecond):
				}
				c.Running.Store(false)
				return nil
			case <-purge:
				c.purgeApplied(ctx, cons)
			case err := <-errs:
				gone := errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
					errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrStreamNotFound)
				if !gone && (errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrNoResponders)) {
					gone = c.lost(ctx, cons)
				}
				if gone {
					c.Log.Warn("consumer stopped; recreating it", "err", err)
					cc.Stop()
					c.Running.Store(false)
					restart = true
				} else {
					c.Log.Debug("consumer hiccup", "err", err)
				}
			}
		}
		// A broker deleting a stream stops its consumers before it removes the stream's
		// files: a stream created again at once takes up the old files, which the deletion
		// then takes away under it, and no publish to it is answered (nats-server 2.15).
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(recreatePause):
		}
	}
}

// recreatePause is how long the consumer waits, once its consumer or stream is gone,
// before it makes them again: what a broker takes to finish deleting a stream.
const recreatePause = time.Second

// purgeApplied purges from the stream every event up to the consumer's ack floor: each
// of them was acknowledged, so applied and committed by the journal (thatch acknowledges
// after the commit), and none is delivered again. The stream keeps its last sequence and
// its creation time (its identity, rule 12), so positions and the duplicate check stand.
// Two requests to the broker every PurgeApplied, none per event: the apply loop does not
// wait for them. A failure is logged at debug and tried again at the next tick.
func (c *Consumer) purgeApplied(ctx context.Context, cons jetstream.Consumer) {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := cons.Info(pctx)
	if err != nil {
		c.Log.Debug("purge of applied events: consumer info", "err", err)
		return
	}
	floor := info.AckFloor.Stream
	if floor == 0 || floor <= c.purged {
		return
	}
	s, err := c.JS.Stream(pctx, c.Config.Stream)
	if err == nil {
		err = s.Purge(pctx, jetstream.WithPurgeSequence(floor+1))
	}
	if err != nil {
		c.Log.Debug("purge of applied events", "through_stream_seq", floor, "err", err)
		return
	}
	c.purged = floor
}

// lost reports whether the broker no longer has the consumer although it said nothing
// (its pulls go unanswered): JetStream was disabled and enabled again, or a stream deleted
// and created again under it lost it. A broker that cannot be asked is not taken for one
// that lost it: the client resumes by itself when the connection comes back.
func (c *Consumer) lost(ctx context.Context, cons jetstream.Consumer) bool {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := cons.Info(ictx)
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrNoResponders)
}

// setup returns the durable consumer and the stream's identity: its creation time, which
// changes when the stream is deleted and created again (rule 12).
func (c *Consumer) setup(ctx context.Context, resume bool) (jetstream.Consumer, string, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := EnsureStream(sctx, c.JS, c.Config)
	if err != nil {
		return nil, "", err
	}
	cons, err := EnsureConsumer(sctx, s, c.Config, resume, c.Log)
	return cons, StreamIdentity(s), err
}

// StreamIdentity is a stream's identity: its creation time, which changes when the stream
// is deleted and created again (rule 12). Deliveries carry it (runtime.Delivery.Stream).
func StreamIdentity(s jetstream.Stream) string {
	return s.CachedInfo().Created.UTC().Format(time.RFC3339Nano)
}

func (c *Consumer) handle(ctx context.Context, stream string) jetstream.MessageHandler {
	return func(m jetstream.Msg) {
		if ctx.Err() != nil {
			_ = m.Nak()
			return
		}
		d := runtime.Delivery{Subject: m.Subject(), Data: m.Data(), HostSeq: m.Headers().Get("Host-Seq"), Stream: stream, Ack: m.Ack, Nak: m.Nak}
		if md, err := m.Metadata(); err == nil {
			d.StreamSeq, d.Published = md.Sequence.Stream, md.Timestamp
		}
		select {
		case c.Out <- d:
		case <-ctx.Done():
			_ = m.Nak()
		}
	}
}

// PublishEvent publishes a host event to the stream as the protocol asks of a host: with
// its event id as Nats-Msg-Id (and a Host-Seq when given), retrying until the stream
// acknowledges it or ctx ends. duplicate reports that the stream already held that id
// (within its duplicate window) before this call, so this message was not stored.
func PublishEvent(ctx context.Context, js jetstream.JetStream, subject string, body []byte, msgID, hostSeq string) (duplicate bool, err error) {
	msg := nats.NewMsg(subject)
	msg.Data = body
	if msgID != "" {
		msg.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	if hostSeq != "" {
		msg.Header.Set("Host-Seq", hostSeq)
	}
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := js.PublishMsg(pctx, msg)
		cancel()
		if err == nil {
			if !ack.Duplicate || attempt == 0 {
				return ack.Duplicate, nil
			}
			// After a failed attempt, a duplicate may be that attempt's own message (stored,
			// its ack lost) or one published before with the same id: the stored message's
			// Host-Seq tells.
			return !storedAs(ctx, js, ack, hostSeq), nil
		}
		if errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) || errors.Is(err, nats.ErrMaxPayload) {
			// Too big for the stream or the broker: trying again changes nothing.
			return false, fmt.Errorf("publish to %s: %w (%d bytes)", subject, err, len(msg.Data))
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("publish to %s: %w (last error: %v)", subject, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// storedAs reports whether the message ack names carries hostSeq, or cannot be read (purged
// meanwhile): then it is taken as the caller's own, as before Host-Seq was checked.
func storedAs(ctx context.Context, js jetstream.JetStream, ack *jetstream.PubAck, hostSeq string) bool {
	if hostSeq == "" {
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := js.Stream(rctx, ack.Stream)
	if err != nil {
		return true
	}
	m, err := st.GetMsg(rctx, ack.Sequence)
	if err != nil {
		return true
	}
	return m.Header.Get("Host-Seq") == hostSeq
}
