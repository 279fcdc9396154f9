-- thatch memories, version 6: each word is indexed twice, as itself and scoped to its
-- project. A project's search (the memory tools, the look-alike check, an extraction's
-- related memories) matches the scoped words: "scope : p… AND (…)" walked each word's
-- postings in every project before the scope cut them down, and an identifier or a path
-- (svc-12-04, src/x/y.go) is a phrase of words that most memories hold: 5–8 ms a search at
-- 100,000 memories of 100 projects, against about 1 ms scoped (docs/performance.md).
-- thatch_scoped(scope, content, tags) is the store's SQL function (scoped.go): the words
-- as the index's tokenizer sees them, each prefixed with the project's scope token. The
-- index holds no text of its own (contentless, rows deleted by rowid): the memories table
-- keeps the text once.
DROP TRIGGER memories_fts_insert;
DROP TRIGGER memories_fts_update;
DROP TRIGGER memories_fts_delete;
DROP TABLE memories_fts;

CREATE VIRTUAL TABLE memories_fts USING fts5 (
    content, tags, scoped,
    content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO memories_fts (rowid, content, tags, scoped)
    SELECT seq, content, tags, thatch_scoped(scope, content, tags) FROM memories WHERE forgotten_at = 0;

CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories WHEN new.forgotten_at = 0 BEGIN
    INSERT INTO memories_fts (rowid, content, tags, scoped)
        VALUES (new.seq, new.content, new.tags, thatch_scoped(new.scope, new.content, new.tags));
END;
CREATE TRIGGER memories_fts_update AFTER UPDATE OF content, tags, scope, forgotten_at ON memories BEGIN
    DELETE FROM memories_fts WHERE rowid = old.seq AND old.forgotten_at = 0;
    INSERT INTO memories_fts (rowid, content, tags, scoped)
        SELECT new.seq, new.content, new.tags, thatch_scoped(new.scope, new.content, new.tags) WHERE new.forgotten_at = 0;
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories WHEN old.forgotten_at = 0 BEGIN
    DELETE FROM memories_fts WHERE rowid = old.seq;
END;

-- One segment, as the daily pass leaves it (MergeIndex): the rows above went in as many.
INSERT INTO memories_fts (memories_fts) VALUES ('optimize');
