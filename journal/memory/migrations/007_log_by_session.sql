-- thatch memories, version 7: the history by the session that wrote it. Provenance (issue 29)
-- reads which memories an extraction child created, updated or forgot (WrittenBy): the
-- history rows name it, and they commit in the transaction of each change.
CREATE INDEX memory_log_by_session ON memory_log (session_id) WHERE session_id != '';
