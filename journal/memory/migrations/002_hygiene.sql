-- thatch memories, version 2: the hygiene signals of protocol §6 (duplicate pairs, stale and
-- orphaned branch memories). Nothing here deletes a memory: the signals only point at them.

-- Where a memory was written from, for the branch check: the root session's directory and the
-- branch's tip commit at write time ('' = unknown). The verdict of the last branch check that
-- judged the memory: '' (not judged, or the branch exists), 'orphaned' (the branch is gone and
-- its tip is not in the default branch) or 'merged' (gone, but its tip is). An update or a
-- restore clears the verdict; the next check judges the memory again.
ALTER TABLE memories ADD COLUMN directory TEXT NOT NULL DEFAULT '';
ALTER TABLE memories ADD COLUMN branch_tip TEXT NOT NULL DEFAULT '';
ALTER TABLE memories ADD COLUMN branch_verdict TEXT NOT NULL DEFAULT '';
ALTER TABLE memories ADD COLUMN branch_checked_at INTEGER NOT NULL DEFAULT 0;

-- The branch check reads the live memories written on a branch, and Hygiene their verdicts.
CREATE INDEX memories_branch ON memories (directory, branch) WHERE forgotten_at = 0 AND branch != '';
CREATE INDEX memories_verdict ON memories (branch_verdict, project) WHERE forgotten_at = 0 AND branch_verdict != '';

-- Two live memories of one project that look alike (Similarity >= DuplicateThreshold), found
-- by a write (Remember, Update, Restore) or by the periodic pass (FindDuplicates). a < b, so
-- a pair has one row. A pair is open while both sides are live and each side's updated_at is
-- still the one recorded here: an update or a forget of a side deletes its rows in the same
-- transaction, and readers check the times besides, so a pair never outlives a change of its
-- sides. The write that changed a side records the pairs of its new text afresh.
CREATE TABLE pairs (
    a         TEXT NOT NULL,
    b         TEXT NOT NULL,
    project   TEXT NOT NULL,
    score     REAL NOT NULL,    -- Similarity of the two texts when found
    found_at  INTEGER NOT NULL,
    a_updated INTEGER NOT NULL, -- a's updated_at when found
    b_updated INTEGER NOT NULL, -- b's updated_at when found
    PRIMARY KEY (a, b)
) WITHOUT ROWID;
CREATE INDEX pairs_by_b ON pairs (b);
CREATE INDEX pairs_by_project ON pairs (project, score);

-- Pairs a person or a model said are not duplicates. A dismissal holds while both texts are
-- the ones dismissed (the sha256 of each side's normalized content, so a change of case,
-- spacing, kind or tags keeps it) and lets the pair be found again once either text changes.
-- Kept forever: it is small, and a text changed back to the dismissed one is dismissed again.
CREATE TABLE dismissed (
    a          TEXT NOT NULL,
    b          TEXT NOT NULL,
    project    TEXT NOT NULL,
    a_hash     TEXT NOT NULL,
    b_hash     TEXT NOT NULL,
    at         INTEGER NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (a, b)
) WITHOUT ROWID;
