// Package runtime is thatch's decision core and the single goroutine that owns its state.
//
// Step is deterministic, not pure: it mutates the State it is given, in place, and
// returns Effects — the journal writes the change implies, the host calls to make, and
// notes to log. The same state, input and time give the same new state and the same
// effects: it reads no clock, logs nothing and performs no I/O. Loop is the driver: it
// feeds inputs (bus events, tool calls, host-call results, ticks) to Step one at a time,
// commits the effects to the Journal in one transaction, and only then acknowledges the
// events and performs the host calls. A crash at any point repeats work; the event-id
// and callID idempotence keys make the repeat harmless.
//
// What it decides is docs/contract.md's behaviour (§5, rules 1-14) and docs/protocol.md's
// settlements; comments cite them as "rule N" and "§N", and contract_test.go keeps every
// citation pointing at a heading of the contract.
//
// Of thatch's packages it imports only its leaves, runtime/protocol and runtime/redact;
// never the journal, an adapter, commands or cmd, and no NATS and no SQL. It declares the
// small interfaces it needs (Journal, Caller), and the daemon's wiring under cmd puts
// concrete types into them. deps_test.go checks this rule for every package.
package runtime
