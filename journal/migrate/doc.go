// Package migrate applies numbered SQL migrations (NNN_name.sql, forward only) to a SQLite
// database, each in its own transaction with its version recorded in schema_migrations.
//
// The journal and the memory store share it. It imports nothing of thatch.
package migrate
