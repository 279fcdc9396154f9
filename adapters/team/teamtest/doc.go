// Package teamtest runs a team's NATS for tests: an in-process JetStream cluster on
// loopback, built from nats-server's own packages, whose nodes can be stopped and started
// again on their ports and stores.
//
// It imports nats-server and nothing of thatch; only tests and thatch-bench import it.
package teamtest
