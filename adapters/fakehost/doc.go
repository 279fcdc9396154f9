// Package fakehost is a scriptable protocol host for tests and benchmarks: it publishes
// bus events to the stream as a host must (JetStream publish, Nats-Msg-Id, Host-Seq),
// answers the host API of protocol §2 from an in-memory session table, records every
// call it receives, and calls thatch's tools as a host's model would.
//
// It is a test double: tests and cmd/thatch-bench import it, thatch's daemon never does.
// It imports the runtime, runtime/protocol and adapters/natsbus (PublishEvent: how a host
// publishes); like every adapter it never imports cmd, and no other adapter.
package fakehost
