// Package backoff is thatch's one retry delay: the wait before each attempt of a series
// doubles, up to a ceiling, and starts over once an attempt succeeds. It is pure (no
// clock, no sleeping): the caller waits, so tests drive it without time passing.
//
// It imports nothing of thatch, so the runtime and every adapter may use it.
package backoff
