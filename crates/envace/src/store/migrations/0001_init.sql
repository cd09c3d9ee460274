-- Version 1: runs, their metrics and their log lines.
CREATE TABLE runs (
    id           INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL,
    status       TEXT    NOT NULL DEFAULT 'created',
    config_toml  TEXT    NOT NULL,
    config_hash  TEXT    NOT NULL,
    created_at   REAL    NOT NULL,
    updated_at   REAL    NOT NULL
);
CREATE INDEX runs_by_name ON runs (name, id);

CREATE TABLE metrics (
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step       INTEGER NOT NULL,
    key        TEXT    NOT NULL,
    -- NULL holds NaN: SQLite stores NaN as NULL.
    value      REAL,
    wall_time  REAL    NOT NULL
);
CREATE INDEX metrics_by_run_key_step ON metrics (run_id, key, step);

CREATE TABLE events (
    id         INTEGER PRIMARY KEY,
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    wall_time  REAL    NOT NULL,
    level      TEXT    NOT NULL,
    message    TEXT    NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, id);
