// Package natsbus is thatch's edge to NATS: the embedded nats-server and the access to
// it (§7), the connection, the event stream and its durable pull consumer (§1), and the
// responders of thatch's tools and API (§3, §4). It converts between NATS messages and
// runtime inputs; every decision stays in the runtime, and the memory tools and methods
// (§6) go to the memory service through the Memories interface.
//
// It imports the runtime, runtime/protocol and internal/keyfile, and never the stores (journal,
// journal/memory). Like every adapter it never imports cmd or another adapter. Two
// adapters import it, for PublishEvent (how a host publishes an event): fakehost and
// opencode.
package natsbus
