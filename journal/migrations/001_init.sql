-- thatch journal, version 1. Every table is written only by the runtime's owner goroutine.

-- Hosts that said hello (or sent events): the Host struct as JSON.
CREATE TABLE hosts (
    host_id TEXT PRIMARY KEY,
    data    TEXT NOT NULL
) WITHOUT ROWID;

-- Sessions thatch tracks: the Session struct as JSON (without entries), plus the columns
-- the sweeps select on.
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    host_id    TEXT NOT NULL,
    directory  TEXT NOT NULL,
    touched_at INTEGER NOT NULL, -- unix milliseconds
    data       TEXT NOT NULL
) WITHOUT ROWID;

-- Buffered tool interactions of top-level sessions, in arrival order (rowid). The body is
-- read only to build an extraction payload.
CREATE TABLE entries (
    id         INTEGER PRIMARY KEY,
    root_id    TEXT NOT NULL,
    entry_id   TEXT NOT NULL,
    tool       TEXT NOT NULL,
    claimed_by TEXT NOT NULL DEFAULT '',
    claimed_at INTEGER NOT NULL DEFAULT 0, -- unix milliseconds
    created_at INTEGER NOT NULL,
    body       TEXT NOT NULL,
    UNIQUE (root_id, entry_id)
);

-- Event ids applied, so an id is applied at most once whatever the redeliveries.
CREATE TABLE applied (
    event_id   TEXT PRIMARY KEY,
    stream_seq INTEGER NOT NULL,
    applied_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX applied_by_time ON applied (applied_at);

-- Host calls committed with the state change that implies them, deleted once performed.
CREATE TABLE outbox (
    id         INTEGER PRIMARY KEY,
    host_id    TEXT NOT NULL,
    call       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

-- Rejected input, bounded: the newest rows are kept.
CREATE TABLE dead_letters (
    id         INTEGER PRIMARY KEY,
    at         INTEGER NOT NULL,
    stream_seq INTEGER NOT NULL,
    subject    TEXT NOT NULL,
    reason     TEXT NOT NULL,
    body       BLOB NOT NULL
);

-- Single values: the consumer position and the counters.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
