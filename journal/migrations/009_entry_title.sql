-- An entry's call title beside its body. Completing an entry copies its title into
-- provenance (008), and reading it out of the body's JSON was 6 % of the process's CPU over
-- a run of extractions (docs/performance.md). NULL: a row written before this column, whose
-- title is read from its body.
ALTER TABLE entries ADD COLUMN title TEXT;
