-- Issue 29, provenance: the tool calls each extraction completed. A completed entry leaves the
-- entries table in the transaction that completes it; that transaction first copies its call
-- id, tool and title (cut to 120 characters) here, so a person can still see which calls fed
-- which memories (the memory store's history names the extraction child that wrote each).
-- child_id is the claimant: an extraction child, or a top-level session that extracted its
-- own calls. Bounded like the ledger: the journal sweep drops rows older than it keeps (400
-- days) and all but the newest 500,000.
CREATE TABLE provenance (
    id       INTEGER PRIMARY KEY,
    child_id TEXT NOT NULL,
    root_id  TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    tool     TEXT NOT NULL,
    title    TEXT NOT NULL,
    at       INTEGER NOT NULL -- unix milliseconds
);
CREATE INDEX provenance_by_child ON provenance (child_id);
CREATE INDEX provenance_by_root ON provenance (root_id);
