-- thatch memories, version 4: the store's own facts that outlive a process, so a restart does
-- not redo a day's work: when the all-pairs duplicate pass last started (pass_at) and when an
-- import last added memories (import_at), both unix ms.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
