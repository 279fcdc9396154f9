package opencode

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/runtime"
)

// HostIDFor derives a stable host id from the server's URL.
func HostIDFor(baseURL string) string {
	sum := sha256.Sum256([]byte(strings.TrimRight(baseURL, "/")))
	return "oc-" + hex.EncodeToString(sum[:6])
}

// Bridge makes an opencode server a protocol host.
type Bridge struct {
	Client *Client
	NC     *nats.Conn
	JS     jetstream.JetStream
	Prefix string // host subject prefix, "opencode"
	HostID string
	Log    *slog.Logger

	seq  int64 // Host-Seq of the last event published in this boot
	boot string

	mu       sync.Mutex
	answered map[string][]byte // idempotency key → the reply sent
	order    []string          // keys, oldest first, to bound answered
	wg       sync.WaitGroup
}

// maxAnswered bounds the idempotency memory.
const maxAnswered = 4096

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
	b.Log.Info("bridging opencode", "url", b.Client.BaseURL, "host", b.HostID)
	backoff, down, first := 250*time.Millisecond, false, true
	for ctx.Err() == nil {
		connected, err := b.stream(ctx, first || down)
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			first, backoff = false, 250*time.Millisecond
			down = false
			b.seq++ // the events between this stream and the next are unseen: a gap makes thatch resync
		} else if !down {
			down = true // unreachable: when it answers again it restarted, a new boot
			b.Log.Warn("opencode unreachable; retrying", "url", b.Client.BaseURL, "err", err)
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

// stream reads /global/event until it ends or falls silent. With newBoot, it first
// announces a new boot of the host with host.hello. It reports whether the stream
// connected.
func (b *Bridge) stream(ctx context.Context, newBoot bool) (bool, error) {
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
		return false, fmt.Errorf("GET /global/event: HTTP %d", resp.StatusCode)
	}
	if newBoot {
		if err := b.hello(ctx); err != nil {
			return true, err
		}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data bytes.Buffer
	for sc.Scan() {
		watchdog.Reset(StreamIdle)
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
	var raw [6]byte
	_, _ = rand.Read(raw[:])
	b.boot, b.seq = hex.EncodeToString(raw[:]), 0
	props, _ := json.Marshal(runtime.Hello{HostID: b.HostID, API: "v1", Version: health.Version, BootID: b.boot,
		Directory: path.Directory, Worktree: path.Worktree, Caps: runtime.Capabilities{TUI: true, Compact: true, Move: true, List: true},
		Resumed: []string{}})
	b.Log.Info("opencode connected", "version", health.Version, "boot_id", b.boot)
	return b.publish(ctx, Event{ID: "hello_" + b.boot, Type: "host.hello", Properties: props})
}

// publish puts one event on the stream, retrying until it is acknowledged.
func (b *Bridge) publish(ctx context.Context, ev Event) error {
	b.seq++
	msg := nats.NewMsg(b.Prefix + "." + b.HostID + ".event." + ev.Type)
	msg.Data = ev.Body()
	msg.Header.Set(jetstream.MsgIDHeader, ev.ID)
	msg.Header.Set("Host-Seq", fmt.Sprint(b.seq))
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := b.JS.PublishMsg(pctx, msg)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
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
