-- The folder of an extraction's root session, which thatch costs shows for its project (the
-- project key may be a hash). Rows from before have none: costs shows their project key.
ALTER TABLE ledger ADD COLUMN directory TEXT NOT NULL DEFAULT '';
