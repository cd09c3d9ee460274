-- Version 5: runs imported from another trainer (`envace import verl`). `imported_from` names
-- the folder a run was read from (NULL for runs trained here); `import_progress` remembers how
-- many complete lines of each of its files are already in the store, written in the same
-- transaction as the rows, so importing the folder again adds only what it gained.
ALTER TABLE runs ADD COLUMN imported_from TEXT;
CREATE INDEX runs_by_import ON runs (imported_from);

CREATE TABLE import_progress (
    run_id    INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    file      TEXT    NOT NULL,
    consumed  INTEGER NOT NULL,
    PRIMARY KEY (run_id, file)
);
