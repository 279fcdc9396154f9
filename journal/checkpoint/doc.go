// Package checkpoint copies a SQLite database's WAL back into the database file beside its
// writer, on a connection of its own, instead of in a commit's path.
//
// A writer opened with wal_autocheckpoint(0) never checkpoints: left to SQLite, the commit
// that crosses the WAL's threshold copies the WAL back and syncs, a stall of its own every
// few hundred commits. A Checkpointer does that work on its goroutine instead: every Every
// commits the writer reports (Wrote) it runs a PASSIVE checkpoint, which waits for neither
// the writer nor the readers; what it cannot copy now, the next one does.
//
// The WAL stays bounded: it restarts from its beginning at the first write transaction
// that begins with all of it copied, which a writer that never pauses may never leave room
// for. So a kick checkpoints again (up to 4 times) while the writer wrote meanwhile, each
// time only the little it wrote, and when a checkpoint still finds the WAL at maxFrames
// pages or more it runs a RESTART checkpoint instead, which waits for the writer and the
// readers (their busy timeout), copies the rest and has the next write start the WAL over:
// that one commit waits, as every few hundred did before. The WAL file then holds at most
// maxFrames pages and what the writer appends between two kicks; SQLite deletes it when
// the last connection closes.
//
// The journal and the memory store use it. It imports nothing of thatch: database/sql and the
// modernc.org/sqlite driver.
package checkpoint
