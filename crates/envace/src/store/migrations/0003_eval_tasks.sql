-- Version 3: every task of a benchmark evaluation (`envace eval --run`), so a score can be
-- traced to the tasks behind it: the task, its trial, its score (NULL when masked), why it
-- scored so, and the whole record (prompt, calls, verdict) as JSON.
CREATE TABLE eval_tasks (
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step       INTEGER NOT NULL,
    benchmark  TEXT    NOT NULL,
    task_id    TEXT    NOT NULL,
    trial      INTEGER NOT NULL,
    score      REAL,
    reason     TEXT    NOT NULL,
    data       TEXT    NOT NULL,
    PRIMARY KEY (run_id, step, benchmark, task_id, trial)
);
