package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/claudecode"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// hookDrainBudget is the part of a hook's budget it may spend delivering the spool of the
// hooks before it, before its own events.
const hookDrainBudget = 2 * time.Second

// hookSpool is the spool of c's data folder; a file it sets aside is said on standard error.
func hookSpool(c daemon.Config) claudecode.Spool {
	return claudecode.Spool{Dir: claudecode.SpoolDir(c.DataDir), Rejected: func(path string, err error) {
		fmt.Fprintf(os.Stderr, "thatch hook: WARN: the spool file %s cannot be decoded (it %v): set aside, its good events sent; read it, then delete it\n", path, err)
	}}
}

// spoolHook keeps msgs, which could not be delivered because of cause, in the spool.
func spoolHook(c daemon.Config, msgs []claudecode.Spooled, cause error) error {
	if err := hookSpool(c).Append(msgs); err != nil {
		return fmt.Errorf("%w; and %d events of this hook are lost: %v", cause, len(msgs), err)
	}
	return fmt.Errorf("%w (%d events kept in %s: thatch delivers them when it is reachable again)", cause, len(msgs), hookSpool(c).Dir)
}

// publishSpooled publishes one hook event (daemon.PublishSpooled), saying on standard error
// when the broker can never take it.
func publishSpooled(ctx context.Context, js jetstream.JetStream, e claudecode.Spooled) error {
	return daemon.PublishSpooled(ctx, js, e, func(from, to int) {
		fmt.Fprintf(os.Stderr, "thatch hook: event %s cut from %d to %d bytes to fit the broker\n", e.ID, from, to)
	}, func(err error) {
		fmt.Fprintf(os.Stderr, "thatch hook: event %s dropped: %v\n", e.ID, err)
	})
}

// deliverHook publishes msgs after delivering what the spool holds; what cannot be
// delivered in the hook's budget (or would overtake the spool) goes to the spool.
func deliverHook(ctx context.Context, c daemon.Config, js jetstream.JetStream, msgs []claudecode.Spooled) error {
	sp := hookSpool(c)
	dctx, cancel := context.WithTimeout(ctx, hookDrainBudget)
	_, derr := sp.Drain(dctx, func(ctx context.Context, e claudecode.Spooled) error { return publishSpooled(ctx, js, e) })
	cancel()
	if sp.Pending() {
		// Events of earlier hooks wait still (another drainer sends them, or the budget
		// ran out): this hook's go behind them.
		cause := errors.New("the events of earlier hooks wait in the spool")
		if derr != nil {
			cause = fmt.Errorf("%w: %v", cause, derr)
		}
		return spoolHook(c, msgs, cause)
	}
	for i, m := range msgs {
		if err := publishSpooled(ctx, js, m); err != nil {
			return spoolHook(c, msgs[i:], fmt.Errorf("publish to thatch: %w", err))
		}
	}
	return nil
}
