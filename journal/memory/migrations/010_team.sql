-- thatch memories, version 10 (7-9 left to the migrations of other changes): team memory
-- (protocol §9, docs/team.md). Each memory holds the version it is at: who made it (author),
-- its hybrid logical clock (hlc_wall unix ms, hlc_logical) and the thatch that made it
-- (node). A memory never shared and not changed since this version has hlc_wall 0. The
-- reason of a forget is kept on the memory, since it travels with the forget's version.
ALTER TABLE memories ADD COLUMN author TEXT NOT NULL DEFAULT '';
ALTER TABLE memories ADD COLUMN hlc_wall INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memories ADD COLUMN hlc_logical INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memories ADD COLUMN node TEXT NOT NULL DEFAULT '';
ALTER TABLE memories ADD COLUMN forgot_reason TEXT NOT NULL DEFAULT '';

-- Who made each change: this thatch's author for a local one, the version's for one
-- received from the team ('' = before this version: a local change).
ALTER TABLE memory_log ADD COLUMN author TEXT NOT NULL DEFAULT '';

-- This thatch's own facts as text: its node id (n_ + 16 hex), made once.
CREATE TABLE team_state (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO team_state (key, value) VALUES ('node', 'n_' || lower(hex(randomblob(8))));

-- The projects this thatch shares, since when (unix ms), and the stream sequence of the
-- last version of the project it read (0 = none: the next read starts at the beginning).
CREATE TABLE team_shared (
    project TEXT PRIMARY KEY,
    since   INTEGER NOT NULL,
    cursor  INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- Versions to send, in order, written in the transaction of the change they carry; a row
-- goes once the team's JetStream acknowledged it. version is the version's id
-- (Nats-Msg-Id), record its JSON.
CREATE TABLE team_outbox (
    seq       INTEGER PRIMARY KEY,
    project   TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    version   TEXT NOT NULL,
    record    TEXT NOT NULL
);
CREATE INDEX team_outbox_by_project ON team_outbox (project);

-- Every version applied (or made here), by id: applying one again changes nothing.
CREATE TABLE team_applied (
    version TEXT PRIMARY KEY,
    at      INTEGER NOT NULL
) WITHOUT ROWID;

-- Records from the team refused (dead letters): kind is malformed, oversized, project,
-- future or format (a newer format: kept for a later build, which applies it).
CREATE TABLE team_rejected (
    id         INTEGER PRIMARY KEY,
    project    TEXT NOT NULL,
    subject    TEXT NOT NULL,
    stream_seq INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    reason     TEXT NOT NULL,
    record     BLOB NOT NULL,
    at         INTEGER NOT NULL
);
