-- Version 2: structured event fields, trajectories, fidelity pairs, evaluation results and
-- checkpoints.
ALTER TABLE events ADD COLUMN step INTEGER;
ALTER TABLE events ADD COLUMN fields TEXT NOT NULL DEFAULT '{}';

CREATE TABLE trajectories (
    id           INTEGER PRIMARY KEY,
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step         INTEGER NOT NULL,
    episode_idx  INTEGER NOT NULL,
    task_id      TEXT    NOT NULL,
    reward       REAL,
    masked       INTEGER NOT NULL DEFAULT 0,
    mask_reason  TEXT,
    data         TEXT    NOT NULL,
    UNIQUE (run_id, step, episode_idx)
);

CREATE TABLE fidelity_pairs (
    id              INTEGER PRIMARY KEY,
    run_id          INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step            INTEGER NOT NULL,
    episode_idx     INTEGER NOT NULL,
    turn_idx        INTEGER NOT NULL,
    call_idx        INTEGER NOT NULL,
    tool            TEXT    NOT NULL,
    arguments       TEXT    NOT NULL,
    rehearsed       TEXT    NOT NULL,
    real            TEXT    NOT NULL,
    valid_json      INTEGER NOT NULL,
    outcome_agrees  INTEGER NOT NULL,
    key_f1          REAL    NOT NULL,
    value_accuracy  REAL    NOT NULL,
    exact_match     INTEGER NOT NULL
);
CREATE INDEX fidelity_by_run_step ON fidelity_pairs (run_id, step, tool);

CREATE TABLE eval_results (
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step       INTEGER NOT NULL,
    benchmark  TEXT    NOT NULL,
    category   TEXT    NOT NULL,
    metric     TEXT    NOT NULL,
    value      REAL,
    n_tasks    INTEGER NOT NULL,
    wall_time  REAL    NOT NULL
);
CREATE INDEX eval_by_run ON eval_results (run_id, benchmark, step);

CREATE TABLE checkpoints (
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step       INTEGER NOT NULL,
    path       TEXT    NOT NULL,
    bytes      INTEGER NOT NULL,
    wall_time  REAL    NOT NULL,
    PRIMARY KEY (run_id, step)
);
