package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// API is a client of a running thatch's API, PREFIX.api.METHOD over core NATS: the one the
// CLI, the tests' rig and the benchmark all call it through.
type API struct {
	NC      *nats.Conn
	Prefix  string        // THATCH_API_PREFIX
	Timeout time.Duration // of each call
}

// Raw calls method with params and returns its result. A reply's error is returned as a
// *protocol.Error.
func (a API) Raw(ctx context.Context, method string, params any) (json.RawMessage, error) {
	data, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	subject := a.Prefix + ".api." + method
	msg, err := a.NC.RequestWithContext(rctx, subject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("no thatch answers on %s at %s: it is not running or not ready yet, or it runs with another THATCH_API_PREFIX",
			subject, a.NC.ConnectedUrlRedacted())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	result, replyErr, err := protocol.Decode(msg.Data)
	if err != nil {
		return nil, fmt.Errorf("%s answered garbage: %v", subject, err)
	}
	if replyErr != nil {
		return nil, replyErr
	}
	return result, nil
}

// Call calls method with params and decodes its result into out.
func (a API) Call(ctx context.Context, method string, params, out any) error {
	raw, err := a.Raw(ctx, method, params)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}
