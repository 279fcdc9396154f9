-- thatch memories, version 11: the number of live memories, kept by triggers in meta
-- (live_memories), so that status reads one row: counting them scanned an index of every
-- memory, 0.3-1 s of a core at 1,000,000 memories, and thatch serve's status file asks every
-- second. The triggers follow every write path (a remember, a forget, a restore, an import,
-- a teammate's version) without any of them knowing.
INSERT INTO meta (key, value) SELECT 'live_memories', count(*) FROM memories WHERE forgotten_at = 0
    ON CONFLICT (key) DO UPDATE SET value = excluded.value;

CREATE TRIGGER memories_live_insert AFTER INSERT ON memories WHEN new.forgotten_at = 0 BEGIN
    UPDATE meta SET value = value + 1 WHERE key = 'live_memories';
END;
CREATE TRIGGER memories_live_update AFTER UPDATE OF forgotten_at ON memories
    WHEN (old.forgotten_at = 0) != (new.forgotten_at = 0) BEGIN
    UPDATE meta SET value = value + CASE WHEN new.forgotten_at = 0 THEN 1 ELSE -1 END WHERE key = 'live_memories';
END;
CREATE TRIGGER memories_live_delete AFTER DELETE ON memories WHEN old.forgotten_at = 0 BEGIN
    UPDATE meta SET value = value - 1 WHERE key = 'live_memories';
END;
