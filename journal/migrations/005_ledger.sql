-- Issue 14: what an entry takes in an extraction payload (the payload budget claims by
-- it) and whether anything can be learned from it; rows from before count their body's
-- length, a bound on what they render to.
ALTER TABLE entries ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE entries ADD COLUMN trivial INTEGER NOT NULL DEFAULT 0;
UPDATE entries SET size = min(length(body), 1000);

-- The ledger (rule 14): what each extraction child cost, read from its messages before it
-- was deleted. One row per child; kept for a year by the journal sweep.
CREATE TABLE ledger (
    child_id   TEXT PRIMARY KEY,
    root_id    TEXT NOT NULL,
    project    TEXT NOT NULL,
    day        TEXT NOT NULL, -- UTC date, 2006-01-02
    at         INTEGER NOT NULL, -- unix milliseconds
    entries    INTEGER NOT NULL,
    tokens_in  INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    cost       REAL NOT NULL,
    model      TEXT NOT NULL,
    turns      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX ledger_by_day ON ledger (day, project);
