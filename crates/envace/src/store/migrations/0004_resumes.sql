-- Version 4: how many times each run was resumed, and indexes that let a reader follow the
-- metrics as they are written.
--
-- A resume removes the rows written after its checkpoint and row ids may then be used again,
-- so a reader that follows a run by row id (the native monitor) reads the run again from the
-- start when this count changes.
ALTER TABLE runs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0;

-- A run's rows in the order they were written (an index entry holds the row id after its
-- columns): the rows after a given one are read without scanning the run's earlier rows.
CREATE INDEX metrics_by_run ON metrics (run_id);

-- A run's last step (the run list's `MAX(step)`) read from an index instead of a scan of the
-- run's metric rows: the monitor lists the runs on every poll.
CREATE INDEX metrics_by_run_step ON metrics (run_id, step);
