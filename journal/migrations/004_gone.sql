-- Sessions thatch is done with, so late events cannot bring them back; swept after the TTL.
CREATE TABLE gone (
    session_id TEXT PRIMARY KEY,
    at         INTEGER NOT NULL -- unix milliseconds
) WITHOUT ROWID;
