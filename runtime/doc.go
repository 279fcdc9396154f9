// Package runtime is thatch's decision core and the single goroutine that owns its state.
//
// Step is a pure function of (state, input, now): it mutates the State it is given and
// returns Effects — the journal writes the change implies, the host calls to make, and
// notes to log. It reads no clock, logs nothing and performs no I/O. Loop is the driver:
// it feeds inputs (bus events, tool calls, host-call results, ticks) to Step one at a
// time, commits the effects to the Journal in one transaction, and only then acknowledges
// the events and performs the host calls. A crash at any point repeats work; the
// event-id and callID idempotence keys make the repeat harmless.
//
// The runtime imports no NATS and no SQL: it declares the small interfaces it needs
// (Journal, Caller) and cmd/thatch wires concrete types into them.
package runtime
