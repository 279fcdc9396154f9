// Package team connects thatch's memory store to the team's NATS server or cluster (protocol
// §9, docs/team.md): a connection of its own, the stream THATCH_TEAM, a publisher that sends
// the store's outbox and one reader per shared project that applies the team's versions.
// It decides nothing itself: the store stamps, decides and applies (journal/memory); this
// package moves bytes and counts.
//
// It imports the memory store, the runtime's status types, nats.go and Prometheus; like
// every adapter it never imports cmd or another adapter. Its test double, teamtest (an
// in-process JetStream cluster), stays out of every binary.
package team
