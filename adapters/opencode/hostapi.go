package opencode

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

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
