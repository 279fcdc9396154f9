// Package sqlitedb opens the SQLite files of thatch's stores (the journal and the memory
// store) one way: a private file, one writer connection that never checkpoints, a pool of
// read-only connections kept open, the background checkpointer, the migrations, and the
// message that tells a person what to do with a damaged file. OpenReadOnly opens every
// connection mode=ro and checks the version instead of migrating. What differs between
// the stores is in Options, not in copies.
//
// It imports of thatch only journal/checkpoint and journal/migrate; never a store, the
// runtime, adapters or commands.
package sqlitedb
