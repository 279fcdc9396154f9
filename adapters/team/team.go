package team

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thatch-dev/thatch/internal/backoff"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// Stream is the team's stream, SubjectPrefix its subjects' first tokens.
const (
	Stream        = "THATCH_TEAM"
	SubjectPrefix = "thatch.team"
	maxPerSubject = 64
)

// Subject is the subject of a version of memory id of project.
func Subject(project, id string) string { return SubjectPrefix + "." + project + "." + id }

// Config is how to reach the team and what to share through it.
type Config struct {
	URL       string // comma-separated NATS URLs
	CredsFile string
	Token     string
	TLS       *tls.Config
	Author    string
	Store     *memory.Store
	Log       *slog.Logger
	// Registerer takes the team's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Poll is how often the publisher and the readers look for work when nothing told
	// them (0: 10 ms for the outbox, which costs a look at the store's write count unless
	// it wrote; 20 times that for the shared projects).
	Poll time.Duration
}

// Team is the running connection to the team.
type Team struct {
	c   Config
	log *slog.Logger

	connected atomic.Bool
	mu        sync.Mutex
	since     time.Time // when connected last changed
	last      time.Time // when a version was last applied
	url       string    // connected URL, without credentials
	logged    map[int]bool
	// refused is the projects whose publishes the team's server refused (no permission),
	// since when; a publish it takes clears its project.
	refused map[string]time.Time
	limit   limiter
	epoch   atomic.Int64 // counts reconnects: a reader says it caught up again after one

	applied, rejected prometheus.Counter
	lag               prometheus.Histogram
	wake              chan struct{}
}

// New makes a Team; Run connects it.
func New(c Config) *Team {
	t := &Team{c: c, log: c.Log, since: time.Now(), logged: map[int]bool{}, refused: map[string]time.Time{}, wake: make(chan struct{}, 1)}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	if c.Poll <= 0 {
		t.c.Poll = 10 * time.Millisecond
	}
	t.applied = prometheus.NewCounter(prometheus.CounterOpts{Name: "thatch_team_applied_total", Help: "Team versions applied."})
	t.rejected = prometheus.NewCounter(prometheus.CounterOpts{Name: "thatch_team_rejected_total", Help: "Team records refused (dead letters)."})
	t.lag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "thatch_team_lag_seconds", Help: "A team version's clock to its apply.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600}})
	if c.Registerer != nil {
		c.Registerer.MustRegister(t.applied, t.rejected, t.lag,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "thatch_team_connected", Help: "1 while connected to the team's NATS."}, func() float64 {
				if t.connected.Load() {
					return 1
				}
				return 0
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "thatch_team_outbox", Help: "Versions waiting to be sent to the team."}, func() float64 {
				n, err := c.Store.TeamCounts(context.Background())
				if err != nil {
					return -1
				}
				return float64(n.Outbox)
			}))
	}
	return t
}

// Wake tells the team that the shared projects changed (a share or an unshare).
func (t *Team) Wake() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Status is status.team.
type Status = runtime.TeamStatus

// TeamStatus reads the team's status; nil t is no team.
func (t *Team) TeamStatus(ctx context.Context) (*Status, error) {
	if t == nil {
		return nil, nil
	}
	st := &Status{URL: RedactURL(t.c.URL), Connected: t.connected.Load(), Author: t.c.Author, SharedProjects: []string{}}
	t.mu.Lock()
	st.Since = t.since
	if !t.last.IsZero() {
		last := t.last
		st.LastApplied = &last
	}
	if t.url != "" {
		st.URL = t.url
	}
	for p := range t.refused {
		st.PublishRefused = append(st.PublishRefused, p)
	}
	t.mu.Unlock()
	slices.Sort(st.PublishRefused)
	ps, err := t.c.Store.SharedProjects(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		st.SharedProjects = append(st.SharedProjects, p.Project)
	}
	// A project unshared since its refusal is no longer being refused.
	st.PublishRefused = slices.DeleteFunc(st.PublishRefused, func(p string) bool { return !slices.Contains(st.SharedProjects, p) })
	n, err := t.c.Store.TeamCounts(ctx)
	if err != nil {
		return nil, err
	}
	st.Outbox, st.Rejected = n.Outbox, n.Rejected
	if n.Rejected > 0 {
		rs, err := t.c.Store.Rejections(ctx, runtime.TeamRefusedShown)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			st.Refused = append(st.Refused, runtime.TeamRefusal{Project: r.Project, Subject: r.Subject, Kind: r.Kind, Reason: r.Reason, StreamSeq: r.StreamSeq, At: r.At})
		}
	}
	return st, nil
}

var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^@/,]*@`)

// RedactURL is url (or a comma-separated list) without user, password or token.
func RedactURL(url string) string { return userinfo.ReplaceAllString(url, "$1") }

// InboxPrefix is the inbox prefix of author's connection: _INBOX_ and the author with
// anything but letters, digits, _ and - replaced by _, so the team's permissions can let
// each teammate receive on its own inboxes only.
func InboxPrefix(author string) string {
	return "_INBOX_" + regexp.MustCompile(`[^A-Za-z0-9_-]`).ReplaceAllString(author, "_")
}

func (t *Team) setConnected(on bool, url string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.connected.Load() != on {
		t.since = time.Now()
	}
	t.connected.Store(on)
	t.url = RedactURL(url)
}

// Run connects to the team and runs until ctx ends. The team unreachable is not an error:
// it reconnects forever, and the outbox keeps what waits. An error is the store's failure.
func (t *Team) Run(ctx context.Context) error {
	opts := []nats.Option{
		nats.Name("thatch team " + t.c.Author),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.RetryOnFailedConnect(true),
		nats.CustomInboxPrefix(InboxPrefix(t.c.Author)),
		// nats.go's handlers log through slog (a JSON log stays JSON), each kind of line
		// at most once per logEvery.
		nats.ConnectHandler(func(nc *nats.Conn) {
			t.setConnected(true, nc.ConnectedUrl())
			t.log.Info("connected to the team", "url", RedactURL(nc.ConnectedUrl()))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			t.setConnected(true, nc.ConnectedUrl())
			t.epoch.Add(1)
			if ok, held := t.limit.allow("reconnect", time.Now()); ok {
				t.log.Info("connected to the team again", "url", RedactURL(nc.ConnectedUrl()), "reconnects_not_logged", held)
			}
			t.Wake()
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			t.setConnected(false, "")
			if err == nil {
				return
			}
			if ok, held := t.limit.allow("disconnect", time.Now()); ok {
				t.log.Warn("team connection lost; reconnecting (changes wait in the outbox)", "err", err, "disconnects_not_logged", held)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) { t.asyncError(sub, err) }),
	}
	if t.c.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(t.c.CredsFile))
	}
	if t.c.Token != "" {
		opts = append(opts, nats.Token(t.c.Token))
	}
	if t.c.TLS != nil {
		opts = append(opts, nats.Secure(t.c.TLS))
	}
	nc, err := nats.Connect(t.c.URL, opts...)
	if err != nil { // a bad option, not an unreachable server (RetryOnFailedConnect)
		return fmt.Errorf("connect to the team at %s: %w", RedactURL(t.c.URL), err)
	}
	defer nc.Close()
	if nc.IsConnected() {
		t.setConnected(true, nc.ConnectedUrl())
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(publishWindow), jetstream.WithPublishAsyncTimeout(publishTimeout))
	if err != nil {
		return fmt.Errorf("team jetstream: %w", err)
	}
	// The stream first: until it exists (the team unreachable, or its JetStream not ready)
	// nothing can be sent or read.
	var stream jetstream.Stream
	for retry := (backoff.Backoff{First: 100 * time.Millisecond}); ; {
		if stream, err = t.ensureStream(ctx, nc, js); err == nil {
			break
		}
		t.log.Debug("team stream not ready; trying again", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry.Next()):
		}
	}
	// Records a previous build kept for a newer format: this one may read them.
	if n, err := t.c.Store.RetryKept(ctx, time.Now()); err != nil {
		return ctxOr(ctx, err)
	} else if n > 0 {
		t.log.Info("applied team records kept for a newer format", "applied", n)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	rctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() {
		if err := t.publish(rctx, js); err != nil {
			errs <- err
		}
	})
	wg.Go(func() {
		if err := t.readAll(rctx, stream); err != nil {
			errs <- err
		}
	})
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}

// ensureStream finds the team's stream, or creates it with as many replicas as the
// cluster has servers, at most 3.
func (t *Team) ensureStream(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (jetstream.Stream, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := js.Stream(cctx, Stream)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	replicas := 1
	if nc.ConnectedClusterName() != "" {
		replicas = min(3, max(1, len(nc.Servers())))
	}
	cfg := jetstream.StreamConfig{Name: Stream, Subjects: []string{SubjectPrefix + ".>"}, Storage: jetstream.FileStorage,
		MaxMsgsPerSubject: maxPerSubject, Discard: jetstream.DiscardOld, MaxMsgSize: memory.MaxRecord + 1024,
		Duplicates: 2 * time.Minute, Replicas: replicas}
	s, err = js.CreateStream(cctx, cfg)
	if err != nil && replicas > 1 {
		cfg.Replicas = 1 // the servers that answered are not all JetStream servers
		s, err = js.CreateStream(cctx, cfg)
	}
	if err == nil {
		t.log.Info("created the team stream", "stream", Stream, "replicas", cfg.Replicas)
	}
	return s, err
}

// publishWindow bounds the versions in flight to the team: the outbox is sent a window
// at a time, asynchronously, and the window's acknowledged rows are dropped in one
// transaction. One synchronous publish per version drained 100,000 versions at a round
// trip each; a crash re-sends at most a window, which the teammates' idempotent apply
// ignores.
const publishWindow = 512

// publishTimeout is how long a version waits for the team's acknowledgement.
const publishTimeout = 5 * time.Second

// publish sends the outbox, oldest first, a window at a time, each version deleted once
// acknowledged. A project whose version the team does not take (no permission, the stream
// refusing) waits a while, growing to 30 s, while the other projects' versions go.
func (t *Team) publish(ctx context.Context, js jetstream.JetStream) error {
	st := t.c.Store
	writes := int64(-1)
	type wait struct {
		until time.Time
		retry backoff.Backoff
	}
	waiting := map[string]*wait{}
	tick := time.NewTicker(t.c.Poll)
	defer tick.Stop()
	for {
		now := time.Now()
		var skip []string
		retry := false
		for p, w := range waiting {
			if now.Before(w.until) {
				skip = append(skip, p)
			} else {
				retry = true
			}
		}
		if w := st.Writes(); w != writes || retry {
			writes = w
			for {
				out, err := st.Outbox(ctx, publishWindow, skip...)
				if err != nil {
					return ctxOr(ctx, err)
				}
				if len(out) == 0 {
					break
				}
				failed, err := t.send(ctx, js, out)
				if err != nil || ctx.Err() != nil {
					return ctxOr(ctx, err)
				}
				if len(failed) > 0 && !t.connected.Load() { // offline: everything waits for the reconnect
					writes = -1
					break
				}
				for p, err := range failed {
					w := waiting[p]
					if w == nil {
						w = &wait{retry: backoff.Backoff{Max: 30 * time.Second}}
						waiting[p] = w
					}
					in := w.retry.Next()
					w.until = time.Now().Add(in)
					t.log.Debug("team publish failed; the project's versions stay in the outbox", "project", p, "retry_in", in, "err", err)
					skip = append(skip, p)
				}
				for _, o := range out {
					if failed[o.Project] == nil {
						delete(waiting, o.Project)
						t.granted(o.Project)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// send publishes out asynchronously, waits for the team's acknowledgements and drops the
// acknowledged versions from the outbox. It says which projects had a version refused or
// unanswered (their first error); an error is the store's.
func (t *Team) send(ctx context.Context, js jetstream.JetStream, out []memory.Outgoing) (map[string]error, error) {
	failed := map[string]error{}
	futures := make([]jetstream.PubAckFuture, len(out))
	for i, o := range out {
		if failed[o.Project] != nil { // its versions wait together
			continue
		}
		msg := &nats.Msg{Subject: Subject(o.Project, o.MemoryID), Data: o.Record, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, o.Version)
		f, err := js.PublishMsgAsync(msg)
		if err != nil {
			failed[o.Project] = err
			continue
		}
		futures[i] = f
	}
	sent := make([]int64, 0, len(out))
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
			sent = append(sent, out[i].Seq)
		case err := <-f.Err():
			if failed[out[i].Project] == nil {
				failed[out[i].Project] = err
			}
		case <-ctx.Done():
			return failed, nil
		}
	}
	return failed, t.c.Store.Sent(ctx, sent...)
}

// readAll runs one reader per shared project, started and stopped as projects are shared
// and unshared.
func (t *Team) readAll(ctx context.Context, stream jetstream.Stream) error {
	type reader struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	readers := map[string]*reader{}
	errs := make(chan error, 1)
	defer func() {
		for _, r := range readers {
			r.cancel()
			<-r.done
		}
	}()
	tick := time.NewTicker(20 * t.c.Poll)
	defer tick.Stop()
	for {
		ps, err := t.c.Store.SharedProjects(ctx)
		if err != nil {
			return ctxOr(ctx, err)
		}
		want := map[string]uint64{}
		for _, p := range ps {
			want[p.Project] = p.Cursor
		}
		for project, r := range readers {
			if _, ok := want[project]; !ok {
				r.cancel()
				<-r.done
				delete(readers, project)
			}
		}
		for project, cursor := range want {
			if readers[project] != nil {
				continue
			}
			rctx, cancel := context.WithCancel(ctx)
			r := &reader{cancel: cancel, done: make(chan struct{})}
			readers[project] = r
			go func() {
				defer close(r.done)
				if err := t.read(rctx, stream, project, cursor); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}()
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case <-t.wake:
		case <-tick.C:
		}
	}
}

// read applies project's versions from the stream sequence after cursor, with an ordered
// consumer (recreated by nats.go after a reconnect or a gap) until ctx ends.
func (t *Team) read(ctx context.Context, stream jetstream.Stream, project string, cursor uint64) error {
	t.log.Info("sharing a project with the team", "project", project, "after_stream_seq", cursor)
	caught := &catchUp{epoch: -1}
	for retry := (backoff.Backoff{First: 100 * time.Millisecond}); ; {
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{SubjectPrefix + "." + project + ".>"}, DeliverPolicy: jetstream.DeliverAllPolicy}
		if cursor > 0 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, cursor+1
		}
		cons, err := stream.OrderedConsumer(ctx, cfg)
		if err == nil {
			var last uint64
			last, err = t.consume(ctx, cons, project, caught)
			cursor = max(cursor, last)
		}
		if ctx.Err() != nil {
			return nil
		}
		var fatal *storeFailure
		if errors.As(err, &fatal) {
			return fatal.err
		}
		if !retry.Retrying() { // said once at warning level, then quietly
			t.log.Warn("cannot read the team's versions of a project; retrying (is it granted to this teammate?)", "project", project, "err", err)
		} else {
			t.log.Debug("team reader stopped; starting again", "project", project, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry.Next()):
		}
	}
}

// asyncError logs an error nats.go reports outside a call. A publish the team's server
// refused marks its project refused (status.team.publishRefused) and is said once per
// project at warning level; the others are said at most once per logEvery each.
func (t *Team) asyncError(sub *nats.Subscription, err error) {
	if project := refusedProject(err); project != "" {
		// nats.go calls this from one goroutine: the check, the line and the mark are not
		// raced by another refusal, and status shows the project once the line is written.
		t.mu.Lock()
		_, was := t.refused[project]
		t.mu.Unlock()
		if !was {
			defer func() {
				t.mu.Lock()
				t.refused[project] = time.Now()
				t.mu.Unlock()
			}()
			t.log.Warn("publish refused by the team server (not granted?)", "project", project, "author", t.c.Author, "err", err,
				"outbox", "the project's versions stay in the outbox: nothing is lost",
				"fix", "grant the project to this teammate in the server's configuration and reload it, or thatch memories unshare it")
		}
		return
	}
	key := err.Error()
	if errors.Is(err, nats.ErrPermissionViolation) {
		key = "permissions" // one line for the violations of every subject
	}
	if ok, held := t.limit.allow(key, time.Now()); ok {
		args := []any{"err", err, "errors_not_logged", held}
		if sub != nil {
			args = append(args, "subject", sub.Subject)
		}
		t.log.Warn("team connection error", args...)
	}
}

// granted clears project's refusal: the team's server took a version of it.
func (t *Team) granted(project string) {
	t.mu.Lock()
	_, was := t.refused[project]
	delete(t.refused, project)
	t.mu.Unlock()
	if was {
		t.log.Info("the team server takes the project's versions again", "project", project)
	}
}

type storeFailure struct{ err error }

func (e *storeFailure) Error() string { return e.err.Error() }

// catchUp is what a reader read since it last said it caught up with the stream, and in
// which connection epoch it said so (-1: not yet).
type catchUp struct {
	read  int
	epoch int64
}

// applyBatch bounds the versions applied in one transaction: a backfill applies them a
// batch at a time, while a tool's write waits for at most one batch.
const applyBatch = 256

// readerHeartbeat is how often the team's server tells a reader its pull is alive. A
// reader notices a lost pull (the node holding its consumer gone) at two missed beats:
// with nats.go's default of 5 s a teammate's versions stopped arriving for 10 s.
const readerHeartbeat = time.Second

// consume applies the consumer's messages until it fails or ctx ends: as many as wait
// (up to applyBatch) in one transaction, so a backfill does not pay a commit per version
// while one change at a time is applied at once. It says the stream sequence of the last
// message applied, and once it has caught up with the stream.
func (t *Team) consume(ctx context.Context, cons jetstream.Consumer, project string, caught *catchUp) (uint64, error) {
	it, err := cons.Messages(jetstream.PullHeartbeat(readerHeartbeat))
	if err != nil {
		return 0, err
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	type next struct {
		msg jetstream.Msg
		err error
	}
	msgs := make(chan next, applyBatch)
	done := make(chan struct{})
	fed := make(chan struct{})
	defer func() {
		it.Stop()
		close(done)
		<-fed
	}()
	go func() { // reads ahead while a batch is applied
		defer close(fed)
		for {
			msg, err := it.Next()
			select {
			case msgs <- next{msg, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var last uint64
	batch := make([]memory.Incoming, 0, applyBatch)
	for {
		batch = batch[:0]
		var failed error
		pending := uint64(1)
		n := <-msgs
	gather:
		for {
			if n.err != nil {
				failed = n.err
				break
			}
			if meta, err := n.msg.Metadata(); err == nil {
				pending = meta.NumPending
				subject := n.msg.Subject()
				batch = append(batch, memory.Incoming{Project: project, MemoryID: strings.TrimPrefix(subject, SubjectPrefix+"."+project+"."),
					Subject: subject, StreamSeq: meta.Sequence.Stream, Data: n.msg.Data()})
			}
			if len(batch) == applyBatch {
				break
			}
			select {
			case n = <-msgs:
			default:
				break gather
			}
		}
		if len(batch) > 0 {
			res, err := t.c.Store.ApplyVersions(ctx, batch, time.Now())
			if err != nil {
				if ctx.Err() != nil {
					return last, ctx.Err()
				}
				return last, &storeFailure{err}
			}
			last = batch[len(batch)-1].StreamSeq
			for i, r := range res {
				t.count(r, batch[i].Subject)
			}
			caught.read += len(batch)
			if epoch := t.epoch.Load(); pending == 0 && caught.epoch != epoch {
				// Said once at the start and once after each reconnect.
				t.log.Info("caught up with the team", "project", project, "versions", caught.read, "stream_seq", last)
				caught.read, caught.epoch = 0, epoch
			}
		}
		if failed != nil {
			return last, failed
		}
	}
}

func (t *Team) count(res memory.ApplyResult, subject string) {
	switch res.Outcome {
	case memory.Applied, memory.Superseded:
		t.applied.Inc()
		now := time.Now()
		t.lag.Observe(max(0, now.Sub(time.UnixMilli(res.Version.HLC.Wall)).Seconds()))
		t.mu.Lock()
		t.last = now
		t.mu.Unlock()
	case memory.Rejected:
		t.rejected.Inc()
		if res.Reject.Kind == memory.RejectFormat {
			t.mu.Lock()
			first := !t.logged[res.Reject.Format]
			t.logged[res.Reject.Format] = true
			t.mu.Unlock()
			if first {
				t.log.Warn("a teammate sends team records of a newer format: they are kept unapplied; upgrade thatch to apply them",
					"format", res.Reject.Format, "subject", subject)
			}
			return
		}
		t.log.Warn("refused a team record", "subject", subject, "kind", res.Reject.Kind, "reason", res.Reject.Detail)
	}
}

func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
