-- Outbox ids make the idempotency keys of host calls, so they must never be reused:
-- a plain INTEGER PRIMARY KEY hands out a deleted maximum again once the table empties.
CREATE TABLE outbox_new (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    host_id    TEXT NOT NULL,
    call       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
INSERT INTO outbox_new (id, host_id, call, created_at) SELECT id, host_id, call, created_at FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_new RENAME TO outbox;
