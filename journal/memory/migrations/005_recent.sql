-- thatch memories, version 5: the session-start section's index covers its whole query.
-- Version 2 gave memories a branch, which the section's query filters on, and the query
-- names forgotten_at besides the index's own WHERE: with the index of version 1 SQLite read
-- each of a project's 1,000 candidate rows from the table (a page read each, most of the
-- section's time at 100,000 memories). TestSectionQueryIsCovered keeps it so.
DROP INDEX memories_recent;
CREATE INDEX memories_recent ON memories (project, max(used_at, updated_at), kind, id, length(content), branch, forgotten_at) WHERE forgotten_at = 0;
