// Package journal is thatch's durable state: a SQLite database (modernc.org/sqlite)
// holding the runtime's state (hosts, sessions, entries and their bodies), the outbox of
// host calls, the applied event ids, the consumer position, the dead letters and the
// extraction ledger. One connection writes; every change of one batch commits in one
// transaction; a pool of read-only connections serves the other goroutines without
// waiting for the writer. The file is private to its user (0600 in a 0700 folder).
//
// It implements the runtime's Journal interface, so it imports the runtime (and
// journal/migrate); it never imports an adapter, commands, cmd or NATS. The memory store
// is journal/memory, a file of its own.
package journal
