-- thatch memories, version 1. Written only through the store's single writer connection.

-- Every memory ever written; a forgotten one stays (forgotten_at set) so its audit trail and
-- its id keep meaning something. Times are unix milliseconds; used_at 0 = never used,
-- forgotten_at 0 = live. seq (the rowid) is the insertion order, the export order and the
-- rowid of the full-text index.
CREATE TABLE memories (
    seq            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,      -- mem_ + 12 hex of unix ms + 8 random hex
    project        TEXT NOT NULL,             -- the caller's project key
    scope          TEXT NOT NULL,             -- p + 16 hex of sha256(project): the project's token in memories_fts
    branch         TEXT NOT NULL DEFAULT '',
    kind           TEXT NOT NULL,
    content        TEXT NOT NULL,             -- trimmed
    norm           TEXT NOT NULL,             -- content lower-cased, whitespace runs collapsed, trimmed
    tags           TEXT NOT NULL DEFAULT '[]', -- JSON array of strings
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    used_at        INTEGER NOT NULL DEFAULT 0,
    forgotten_at   INTEGER NOT NULL DEFAULT 0,
    source_session TEXT NOT NULL DEFAULT '',
    source_call    TEXT NOT NULL DEFAULT ''
);

-- Exact duplicates: one live memory per normalized content and project.
CREATE UNIQUE INDEX memories_norm ON memories (project, norm) WHERE forgotten_at = 0;
-- Listings, newest first (ids sort by creation).
CREATE INDEX memories_live ON memories (project, id) WHERE forgotten_at = 0;
-- Injection ranks the most recently used or updated memories of a project from this index
-- alone (kind, id and the content's length included), then reads the contents it shows.
CREATE INDEX memories_recent ON memories (project, max(used_at, updated_at), kind, id, length(content)) WHERE forgotten_at = 0;

-- Full-text index of the live memories only, over content and tags, plus the project's scope
-- token so a project's search is one FTS5 query (scope : p… AND (…)) instead of a filter
-- over every project's matches. External content: the text lives once, in memories.
CREATE VIRTUAL TABLE memories_fts USING fts5 (
    content, tags, scope,
    content = 'memories', content_rowid = 'seq',
    tokenize = 'unicode61 remove_diacritics 2'
);
-- ORDER BY rank: bm25 with content weighing twice the tags and the scope token nothing.
INSERT INTO memories_fts (memories_fts, rank) VALUES ('rank', 'bm25(2.0, 1.0, 0.0)');

-- Document frequency of every word (as Go splits it, stopwords left out) over the live
-- memories' content, kept by the store in the transaction of each change. It picks a text's
-- rarest words (similar and related memories). An fts5vocab table would give the same numbers
-- but counts them by walking the word's whole doclist: 3 ms a remember at 20,000 memories.
CREATE TABLE words (
    word TEXT PRIMARY KEY,
    docs INTEGER NOT NULL
) WITHOUT ROWID;

-- The triggers keep memories_fts equal to the live rows. Only changes of the indexed columns
-- or of forgotten_at touch it: marking memories used costs no index work.
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories WHEN new.forgotten_at = 0 BEGIN
    INSERT INTO memories_fts (rowid, content, tags, scope) VALUES (new.seq, new.content, new.tags, new.scope);
END;
CREATE TRIGGER memories_fts_update AFTER UPDATE OF content, tags, scope, forgotten_at ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content, tags, scope)
        SELECT 'delete', old.seq, old.content, old.tags, old.scope WHERE old.forgotten_at = 0;
    INSERT INTO memories_fts (rowid, content, tags, scope)
        SELECT new.seq, new.content, new.tags, new.scope WHERE new.forgotten_at = 0;
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories WHEN old.forgotten_at = 0 BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content, tags, scope)
        VALUES ('delete', old.seq, old.content, old.tags, old.scope);
END;

-- Audit trail of every change: op is create, update, forget or import; before is the content
-- before an update or a forget. Never pruned.
CREATE TABLE memory_log (
    id         INTEGER PRIMARY KEY,
    memory_id  TEXT NOT NULL,
    at         INTEGER NOT NULL,
    op         TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    call_id    TEXT NOT NULL DEFAULT '',
    reason     TEXT NOT NULL DEFAULT '',
    before     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX memory_log_by_memory ON memory_log (memory_id);

-- Answers of the memory tools by (session, callID), written in the transaction of the change
-- they describe, so a repeated call repeats its answer and changes nothing. Pruned by age.
CREATE TABLE calls (
    session_id TEXT NOT NULL,
    call_id    TEXT NOT NULL,
    tool       TEXT NOT NULL,
    result     TEXT NOT NULL, -- JSON of the answer
    at         INTEGER NOT NULL,
    PRIMARY KEY (session_id, call_id)
) WITHOUT ROWID;
CREATE INDEX calls_by_time ON calls (at);

-- The memory section a session was started with, frozen so every later read gives the same
-- text. Pruned by age.
CREATE TABLE session_context (
    session_id TEXT PRIMARY KEY,
    text       TEXT NOT NULL,
    at         INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX session_context_by_time ON session_context (at);
