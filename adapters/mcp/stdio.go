package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Stdio is thatch mcp's transport: newline-delimited JSON-RPC on in and out, as the SDK's
// StdioTransport, except that the end of in is held back until every request read before
// it has been answered on out (or linger passes, or ctx ends). The SDK closes the session
// at the end of its input, dropping the answers still being made: a client that pipes its
// requests and closes its end (printf … | thatch mcp) got none but the first.
func Stdio(ctx context.Context, in io.Reader, out io.Writer, linger time.Duration) sdk.Transport {
	f := &inflight{ids: map[string]bool{}, changed: make(chan struct{}, 1), closed: make(chan struct{})}
	r := &heldReader{r: in, ctx: ctx, linger: linger, f: f}
	r.lines.each = f.read
	w := &answerWriter{w: out}
	w.lines.each = f.written
	return &sdk.IOTransport{Reader: r, Writer: w}
}

// maxLine bounds the part of a line kept to read its id: a longer line is not followed
// (the SDK refuses it anyway: its own bound is the same).
const maxLine = sdk.DefaultMaxLineLength

// inflight is the requests read and not yet answered, by id.
type inflight struct {
	mu      sync.Mutex
	ids     map[string]bool
	changed chan struct{} // one pending signal: an answer went out
	closed  chan struct{} // the transport was closed
	once    sync.Once
}

// message is what inflight reads of a JSON-RPC message: a request has a method and an id,
// an answer an id and no method, a notification no id.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// messages decodes a line: one message or a batch of them.
func messages(line []byte) []message {
	line = bytes.TrimSpace(line)
	if len(line) > 0 && line[0] == '[' {
		var batch []message
		_ = json.Unmarshal(line, &batch)
		return batch
	}
	var m message
	if json.Unmarshal(line, &m) != nil {
		return nil
	}
	return []message{m}
}

// key is an id as both sides write it (2 and 2.0 are one id).
func key(id json.RawMessage) string {
	var v any
	if json.Unmarshal(id, &v) != nil || v == nil {
		return ""
	}
	k, _ := json.Marshal(v)
	return string(k)
}

func (f *inflight) read(line []byte) {
	for _, m := range messages(line) {
		if k := key(m.ID); k != "" && m.Method != "" {
			f.mu.Lock()
			f.ids[k] = true
			f.mu.Unlock()
		}
	}
}

func (f *inflight) written(line []byte) {
	for _, m := range messages(line) {
		if k := key(m.ID); k != "" && m.Method == "" {
			f.mu.Lock()
			delete(f.ids, k)
			f.mu.Unlock()
			select {
			case f.changed <- struct{}{}:
			default:
			}
		}
	}
}

// wait returns once no request waits for its answer, ctx ends, the transport is closed or
// linger passes.
func (f *inflight) wait(ctx context.Context, linger time.Duration) {
	timer := time.NewTimer(linger)
	defer timer.Stop()
	for {
		f.mu.Lock()
		n := len(f.ids)
		f.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-f.changed:
		case <-ctx.Done():
			return
		case <-f.closed:
			return
		case <-timer.C:
			return
		}
	}
}

// lines cuts a stream into lines and hands each to each, keeping at most maxLine of one.
type lines struct {
	buf  []byte
	skip bool // the current line is over maxLine: not followed
	each func([]byte)
}

func (l *lines) feed(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if !l.skip && len(l.buf)+len(p) > maxLine {
				l.buf, l.skip = l.buf[:0], true
			}
			if !l.skip {
				l.buf = append(l.buf, p...)
			}
			return
		}
		if !l.skip {
			line := p[:i]
			if len(l.buf) > 0 {
				l.buf = append(l.buf, line...)
				line = l.buf
			}
			l.each(line)
		}
		l.buf, l.skip = l.buf[:0], false
		p = p[i+1:]
	}
}

// end hands over a last line that has no newline.
func (l *lines) end() {
	if !l.skip && len(bytes.TrimSpace(l.buf)) > 0 {
		l.each(l.buf)
	}
	l.buf, l.skip = nil, false
}

// heldReader reads in, noting the requests; at its end it waits for their answers.
type heldReader struct {
	r      io.Reader
	ctx    context.Context
	linger time.Duration
	f      *inflight
	lines  lines
}

func (h *heldReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.lines.feed(p[:n])
	if errors.Is(err, io.EOF) {
		h.lines.end()
		if n > 0 {
			return n, nil // the SDK gets these bytes first; the next Read ends
		}
		h.f.wait(h.ctx, h.linger)
	}
	return n, err
}

func (h *heldReader) Close() error {
	h.f.once.Do(func() { close(h.f.closed) })
	if c, ok := h.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// answerWriter writes to w, noting the answers.
type answerWriter struct {
	mu    sync.Mutex
	w     io.Writer
	lines lines
}

func (a *answerWriter) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, err := a.w.Write(p)
	a.lines.feed(p[:n])
	return n, err
}

func (*answerWriter) Close() error { return nil }
