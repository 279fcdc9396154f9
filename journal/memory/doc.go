// Package memory is thatch's memory store: what extraction sessions learn, per project, with
// full-text search (SQLite FTS5 through modernc.org/sqlite), the callID memo that makes the
// writing memory tools idempotent, the audit trail of every change and the frozen
// session-start text.
//
// It owns one SQLite file of its own (memories.db in thatch's data folder, 0600 in a 0700
// folder), apart from the journal, for three reasons: a search never queues behind the
// journal's event batches on the journal's single writer; a corrupt journal never costs the
// memories (and the other way round); and moving the memories elsewhere is a copy of one file
// (with its -wal while thatch runs). The file is opened (package sqlitedb) three times: one
// writer connection (every change is one immediate transaction, committed in groups), a
// small pool of read-only connections, so searches run while a write commits, and the
// connection of the checkpointer, which copies the WAL back beside the writer instead of
// in a write's path. A search and the section answer from the read pool alone; the used
// marks of what they show are queued and written by the writer (used.go): a crash may lose
// the last few marks, never a memory.
//
// It also keeps the hygiene signals of protocol §6 and never acts on them by itself: duplicate
// pairs (recorded by the writes and by the periodic FindDuplicates, closed by a change of
// either side or a Dismiss), stale memories (left out of injection, still searchable) and
// the verdicts of the branch check (CheckBranches, the one place it runs git). Hygiene and
// Signals read them.
//
// It remembers each project key's folder (the root session's directory of the latest write
// that knew it), because a key is more often opencode's project id, a hash, than a folder:
// people name a project by its folder (Resolve) and the listings show it (Memory.Folder).
//
// It imports no NATS and nothing of the runtime (runtime/protocol, the wire's names, aside),
// and never an adapter, commands or cmd: callers pass who acts (Caller) and the time, and
// get plain values back. Every method is safe for concurrent use.
//
// Errors callers branch on are ErrNotFound and ErrBadRequest; the messages that wrap them are
// written for a model to read and act on.
package memory
