-- thatch memories, version 3: the folder of each project, so a person can name a project by
-- its folder. A project key is more often opencode's project id (a hash) than a folder.

-- One row per project key: the folder is the root session's directory of the latest write
-- (remember, update) by a session whose directory is known, or of an import when the key had
-- none. updated is when the folder was recorded (unix ms).
CREATE TABLE projects (
    key     TEXT PRIMARY KEY,
    folder  TEXT NOT NULL,
    updated INTEGER NOT NULL
) WITHOUT ROWID;

-- The memories written since version 2 keep the directory they were written from: the
-- latest one of a project is its folder (SQLite takes the bare column from the max() row).
-- A key that is a folder itself (a session outside git) is its own folder.
INSERT INTO projects (key, folder, updated)
    SELECT project, directory, max(created_at) FROM memories WHERE directory != '' GROUP BY project;
INSERT OR IGNORE INTO projects (key, folder, updated)
    SELECT project, project, max(created_at) FROM memories WHERE substr(project, 1, 1) = '/' GROUP BY project;
