// Package host talks to protocol hosts (§2): it maps each runtime.Call to the method of
// the host's API generation (v1 or v2), performs it with NATS request/reply on
// <prefix>.<host>.api.<method>, and maps the reply back into the v1 shapes the runtime
// reads. A method the host does not serve (no responder) is logged once per host and
// method and answered as a failed call marked NoResponder, which the runtime's loop parks
// until the host's next hello (rule 12); the client itself never retries a call.
//
// It imports the runtime and runtime/protocol; like every adapter it never imports cmd or
// another adapter.
package host
