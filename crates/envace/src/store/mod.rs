//! The run store: one SQLite file (WAL mode, versioned migrations) holding every run's config,
//! metrics, log lines, trajectories, fidelity pairs, evaluation results and checkpoints.
//!
//! Writes go in batches, each one transaction: after a crash a batch is either all there or not
//! there at all. Readers see a consistent snapshot while a writer runs (WAL); use
//! [`Store::read`] when several queries must agree with each other. Each thread or process
//! opens its own [`Store`].

mod export;
mod rows;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

pub use export::{ExportFormat, ExportTable, Imported, export_rows, import_rows};
pub use rows::{
    Batch, CheckpointRow, EvalRow, EvalTaskRow, EventRow, FidelityRow, MetricRow, RunId, RunRecord,
    RunStatus, RunSummary, TrajectoryRow,
};

/// File name of the store inside `ENVACE_HOME` or the platform data directory.
pub const STORE_FILE_NAME: &str = "runs.sqlite";

/// The migrations, in order; the store's `user_version` is the number applied.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_episodes.sql"),
    include_str!("migrations/0003_eval_tasks.sql"),
    include_str!("migrations/0004_resumes.sql"),
    include_str!("migrations/0005_imports.sql"),
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// How long a connection waits for another writer's lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Seconds since the Unix epoch, as stored in every `wall_time` column.
pub fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |elapsed| elapsed.as_secs_f64())
}

/// Hex SHA-256 of a config text, as stored in `runs.config_hash`.
pub fn config_hash(config_toml: &str) -> String {
    let digest = Sha256::digest(config_toml.as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Where the store lives when `--store` is not given: `$ENVACE_HOME/runs.sqlite`, else the
/// platform data directory (`~/.local/share/envace-studio/runs.sqlite` on Linux).
pub fn default_path() -> Result<PathBuf> {
    if let Some(home) = std::env::var_os("ENVACE_HOME").filter(|home| !home.is_empty()) {
        return Ok(PathBuf::from(home).join(STORE_FILE_NAME));
    }
    directories::ProjectDirs::from("", "", "envace-studio")
        .map(|dirs| dirs.data_dir().join(STORE_FILE_NAME))
        .ok_or(Error::NoDataDir)
}

/// An open run store.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

/// SQLite's "not a database" and "malformed" at open said in the store's terms.
fn unusable(path: &Path, err: Error) -> Error {
    let Error::Store { source, .. } = &err else {
        return err;
    };
    let message = match source.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => {
            "not an SQLite file, so not a run store (another file, or its start overwritten)"
        }
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            "damaged (SQLite: database disk image is malformed; a truncated or partly overwritten \
             file); restore it from a copy, or use another --store"
        }
        _ => return err,
    };
    Error::StoreFormat {
        path: path.to_path_buf(),
        message: message.to_owned(),
    }
}

/// The error for a store whose schema `version` is newer than this build's.
fn newer_build(path: &Path, version: u32) -> Error {
    Error::StoreFormat {
        path: path.to_path_buf(),
        message: format!(
            "written by a newer EnvACE (schema version {version}; this build knows up to {SCHEMA_VERSION}); upgrade EnvACE or use another --store"
        ),
    }
}

impl Store {
    /// Opens (creating if needed) the store at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store> {
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent).map_err(|err| Error::io(parent, err))?;
        }
        if path.is_dir() {
            return Err(Error::StoreFormat {
                path: path.to_path_buf(),
                message: "is a folder; a run store is a file (e.g. runs.sqlite)".to_owned(),
            });
        }
        let conn = Connection::open(path).map_err(|source| Error::Store {
            path: path.to_path_buf(),
            source,
        })?;
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
        };
        // Before anything is written (switching to WAL rewrites the header): a file that is not
        // a store, or one from a newer build, is refused untouched.
        let opened = store
            .check_version()
            .and_then(|()| store.configure())
            .and_then(|()| store.migrate());
        opened.map_err(|err| unusable(path, err))?;
        Ok(store)
    }

    /// Opens the store at `$ENVACE_HOME` or the platform data directory.
    pub fn open_default() -> Result<Store> {
        Store::open(&default_path()?)
    }

    fn configure(&self) -> Result<()> {
        let err = self.err();
        self.conn.busy_timeout(BUSY_TIMEOUT).map_err(&err)?;
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(&err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::StoreFormat {
                path: self.path.clone(),
                message: format!("cannot switch to WAL journal mode (got {mode:?})"),
            });
        }
        // In WAL mode NORMAL keeps every committed transaction across a process crash.
        self.conn
            .execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
            .map_err(&err)
    }

    /// Refuses a file written by a newer build, reading only its header.
    fn check_version(&self) -> Result<()> {
        let version: u32 = self
            .conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(self.err())?;
        if version > SCHEMA_VERSION {
            return Err(newer_build(&self.path, version));
        }
        Ok(())
    }

    fn migrate(&mut self) -> Result<()> {
        let path = self.path.clone();
        let err = move |source| Error::Store {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        let version: u32 = tx
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(&err)?;
        if version > SCHEMA_VERSION {
            return Err(newer_build(&self.path, version));
        }
        for (idx, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(sql).map_err(&err)?;
            tx.pragma_update(None, "user_version", idx as u32 + 1)
                .map_err(&err)?;
            tracing::debug!(path = %self.path.display(), version = idx + 1, "migrated run store");
        }
        tx.commit().map_err(&err)
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> Error + use<> {
        let path = self.path.clone();
        move |source| Error::Store {
            path: path.clone(),
            source,
        }
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open file.
    pub fn schema_version(&self) -> Result<u32> {
        self.conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(self.err())
    }

    /// SQLite's own consistency check; `Ok(())` when the file is sound.
    pub fn check_integrity(&self) -> Result<()> {
        let report: Vec<String> = {
            let mut stmt = self
                .conn
                .prepare("PRAGMA integrity_check")
                .map_err(self.err())?;
            stmt.query_map([], |row| row.get(0))
                .map_err(self.err())?
                .collect::<rusqlite::Result<_>>()
                .map_err(self.err())?
        };
        if report.len() == 1 && report[0] == "ok" {
            Ok(())
        } else {
            Err(Error::StoreFormat {
                path: self.path.clone(),
                message: format!("integrity check failed: {}", report.join("; ")),
            })
        }
    }

    /// Records a new run with its config text; returns its id.
    pub fn create_run(&self, name: &str, config_toml: &str) -> Result<RunId> {
        let now = now_secs();
        self.conn
            .execute(
                "INSERT INTO runs (name, status, config_toml, config_hash, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
                params![
                    name,
                    RunStatus::Created.as_str(),
                    config_toml,
                    config_hash(config_toml),
                    now
                ],
            )
            .map_err(self.err())?;
        Ok(RunId(self.conn.last_insert_rowid()))
    }

    /// The run imported from `source` (a folder, as `envace import` names it), if any.
    pub fn imported_run(&self, source: &str) -> Result<Option<RunId>> {
        self.conn
            .query_row(
                "SELECT id FROM runs WHERE imported_from = ?1 ORDER BY id DESC LIMIT 1",
                params![source],
                |row| row.get(0),
            )
            .optional()
            .map(|id| id.map(RunId))
            .map_err(self.err())
    }

    /// Records a run read from another trainer's folder `source`; returns its id.
    pub fn create_imported_run(
        &self,
        name: &str,
        config_toml: &str,
        source: &str,
    ) -> Result<RunId> {
        let run = self.create_run(name, config_toml)?;
        self.conn
            .execute(
                "UPDATE runs SET imported_from = ?2 WHERE id = ?1",
                params![run.0, source],
            )
            .map_err(self.err())?;
        Ok(run)
    }

    /// The folder a run was imported from; `None` for a run trained here.
    pub fn imported_from(&self, run: RunId) -> Result<Option<String>> {
        self.conn
            .query_row(
                "SELECT imported_from FROM runs WHERE id = ?1",
                params![run.0],
                |row| row.get(0),
            )
            .optional()
            .map_err(self.err())?
            .ok_or_else(|| Error::RunNotFound(run.0.to_string()))
    }

    /// How much of each file of an imported run is in the store (complete lines read).
    pub fn import_progress(&self, run: RunId) -> Result<std::collections::BTreeMap<String, u64>> {
        let mut stmt = self
            .conn
            .prepare("SELECT file, consumed FROM import_progress WHERE run_id = ?1")
            .map_err(self.err())?;
        let rows = stmt
            .query_map(params![run.0], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })
            .map_err(self.err())?;
        let mut out = std::collections::BTreeMap::new();
        for row in rows {
            let (file, consumed) = row.map_err(self.err())?;
            out.insert(file, u64::try_from(consumed).unwrap_or(0));
        }
        Ok(out)
    }

    /// Writes an import step in one transaction: the metric rows named in `replace` (step,
    /// key) are removed first (values recomputed from a file that grew), then the batch, then
    /// each file's new progress. After a crash the rows and the progress agree.
    pub fn write_import(
        &mut self,
        batch: &Batch,
        replace: &[(u64, String)],
        progress: &[(String, u64)],
    ) -> Result<()> {
        let err = self.err();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        for (step, key) in replace {
            tx.execute(
                "DELETE FROM metrics WHERE run_id = ?1 AND step = ?2 AND key = ?3",
                params![batch.run.0, *step as i64, key],
            )
            .map_err(&err)?;
        }
        rows::insert_batch(&tx, batch).map_err(&err)?;
        for (file, consumed) in progress {
            tx.execute(
                "INSERT INTO import_progress (run_id, file, consumed) VALUES (?1, ?2, ?3)
                 ON CONFLICT (run_id, file) DO UPDATE SET consumed = excluded.consumed",
                params![batch.run.0, file, *consumed as i64],
            )
            .map_err(&err)?;
        }
        tx.execute(
            "UPDATE runs SET updated_at = ?2 WHERE id = ?1",
            params![batch.run.0, now_secs()],
        )
        .map_err(&err)?;
        tx.commit().map_err(&err)
    }

    /// Sets a run's status.
    pub fn set_run_status(&self, run: RunId, status: RunStatus) -> Result<()> {
        let changed = self
            .conn
            .execute(
                "UPDATE runs SET status = ?2, updated_at = ?3 WHERE id = ?1",
                params![run.0, status.as_str(), now_secs()],
            )
            .map_err(self.err())?;
        if changed == 0 {
            return Err(Error::RunNotFound(run.0.to_string()));
        }
        Ok(())
    }

    /// Forgets a run's checkpoint at `step` (after its files were deleted).
    pub fn delete_checkpoint(&mut self, run: RunId, step: u64) -> Result<()> {
        self.conn
            .execute(
                "DELETE FROM checkpoints WHERE run_id = ?1 AND step = ?2",
                rusqlite::params![run.0, step as i64],
            )
            .map_err(self.err())?;
        Ok(())
    }

    /// Writes a batch of rows for one run in a single transaction: all or nothing.
    pub fn write(&mut self, batch: &Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.write_batch(batch, false)
    }

    /// Writes a benchmark evaluation in one transaction: every `(step, benchmark)` the batch
    /// holds scores or task records for first loses the scores and task records stored for it
    /// before, so evaluating a checkpoint again replaces its result instead of doubling it.
    pub fn write_evaluation(&mut self, batch: &Batch) -> Result<()> {
        self.write_batch(batch, true)
    }

    fn write_batch(&mut self, batch: &Batch, replace_evaluations: bool) -> Result<()> {
        let err = self.err();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        if replace_evaluations {
            let mut replaced: Vec<(u64, &str)> = batch
                .evals
                .iter()
                .map(|e| (e.step, e.benchmark.as_str()))
                .chain(
                    batch
                        .eval_tasks
                        .iter()
                        .map(|t| (t.step, t.benchmark.as_str())),
                )
                .collect();
            replaced.sort_unstable();
            replaced.dedup();
            for (step, benchmark) in replaced {
                for table in ["eval_results", "eval_tasks"] {
                    tx.execute(
                        &format!(
                            "DELETE FROM {table} WHERE run_id = ?1 AND step = ?2 AND benchmark = ?3"
                        ),
                        params![batch.run.0, step as i64, benchmark],
                    )
                    .map_err(&err)?;
                }
            }
        }
        rows::insert_batch(&tx, batch).map_err(&err)?;
        tx.execute(
            "UPDATE runs SET updated_at = ?2 WHERE id = ?1",
            params![batch.run.0, now_secs()],
        )
        .map_err(&err)?;
        crate::crash::point("store.batch");
        tx.commit().map_err(&err)
    }

    /// Makes a run's rows agree with the checkpoint it resumes from, in one transaction that
    /// also marks it running: every row of a step at or after `next_step` (metrics, log lines
    /// with a step, trajectories, fidelity pairs, evaluations) is removed, and every checkpoint
    /// row after `checkpoint_step`; the replay then writes them again. Returns how many rows
    /// were removed. A log line without a step (such as the one this writes) is kept.
    pub fn resume_run(&mut self, run: RunId, checkpoint_step: u64, next_step: u64) -> Result<u64> {
        let err = self.err();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        let mut removed = 0u64;
        for table in [
            "metrics",
            "events",
            "trajectories",
            "fidelity_pairs",
            "eval_results",
            "eval_tasks",
        ] {
            let n = tx
                .execute(
                    &format!("DELETE FROM {table} WHERE run_id = ?1 AND step >= ?2"),
                    params![run.0, next_step as i64],
                )
                .map_err(&err)?;
            removed += n as u64;
        }
        removed += tx
            .execute(
                "DELETE FROM checkpoints WHERE run_id = ?1 AND step > ?2",
                params![run.0, checkpoint_step as i64],
            )
            .map_err(&err)? as u64;
        let changed = tx
            .execute(
                "UPDATE runs SET status = ?2, updated_at = ?3, resumes = resumes + 1 WHERE id = ?1",
                params![run.0, RunStatus::Running.as_str(), now_secs()],
            )
            .map_err(&err)?;
        if changed == 0 {
            return Err(Error::RunNotFound(run.0.to_string()));
        }
        let mut note = Batch::new(run);
        note.events.push(EventRow {
            wall_time: now_secs(),
            level: "info".to_owned(),
            step: None,
            message: format!(
                "resumed from the checkpoint at step {checkpoint_step}: continuing at step {next_step}, {removed} rows written after it removed"
            ),
            fields: serde_json::json!({
                "checkpoint_step": checkpoint_step,
                "next_step": next_step,
                "rows_removed": removed,
            }),
        });
        rows::insert_batch(&tx, &note).map_err(&err)?;
        tx.commit().map_err(&err)?;
        Ok(removed)
    }

    /// Runs `f` inside one read transaction: every query it makes sees the same snapshot,
    /// whatever other writers commit meanwhile.
    pub fn read<T>(&mut self, f: impl FnOnce(&View<'_>) -> Result<T>) -> Result<T> {
        let err = self.err();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(&err)?;
        let view = View {
            conn: &tx,
            path: &self.path,
        };
        let out = f(&view)?;
        tx.finish().map_err(&err)?;
        Ok(out)
    }

    /// Read access outside an explicit transaction: each query is consistent on its own.
    pub fn view(&self) -> View<'_> {
        View {
            conn: &self.conn,
            path: &self.path,
        }
    }
}

/// Read queries over a store connection or a read transaction.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    conn: &'a Connection,
    path: &'a Path,
}

impl View<'_> {
    fn err(&self) -> impl Fn(rusqlite::Error) -> Error + use<> {
        let path = self.path.to_path_buf();
        move |source| Error::Store {
            path: path.clone(),
            source,
        }
    }

    /// Every run, newest first, with its last step.
    pub fn runs(&self) -> Result<Vec<RunSummary>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT r.id, r.name, r.status, r.created_at, r.updated_at, r.config_hash,
                        (SELECT MAX(step) FROM metrics m WHERE m.run_id = r.id), r.resumes
                 FROM runs r ORDER BY r.id DESC",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map([], RunSummary::from_row)
            .map_err(self.err())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err())?;
        Ok(rows)
    }

    /// The run with this id, or the newest run with this name.
    pub fn find_run(&self, query: &str) -> Result<RunRecord> {
        let by_id = query.parse::<i64>().ok();
        let found = self
            .conn
            .query_row(
                "SELECT id, name, status, config_toml, config_hash, created_at, updated_at
                 FROM runs WHERE id = ?1 OR name = ?2 ORDER BY (id = ?1) DESC, id DESC LIMIT 1",
                params![by_id, query],
                RunRecord::from_row,
            )
            .optional()
            .map_err(self.err())?;
        found.ok_or_else(|| Error::RunNotFound(query.to_string()))
    }

    /// A run's metrics, in step then insertion order.
    pub fn metrics(&self, run: RunId) -> Result<Vec<MetricRow>> {
        self.collect(
            "SELECT step, key, value, wall_time FROM metrics WHERE run_id = ?1 ORDER BY step, rowid",
            run,
            MetricRow::from_row,
        )
    }

    /// The newest value of each metric key: (key, step, value).
    pub fn latest_metrics(&self, run: RunId) -> Result<Vec<MetricRow>> {
        self.collect(
            "SELECT m.step, m.key, m.value, m.wall_time FROM metrics m
             WHERE m.run_id = ?1 AND m.rowid = (
                 SELECT m2.rowid FROM metrics m2 WHERE m2.run_id = m.run_id AND m2.key = m.key
                 ORDER BY m2.step DESC, m2.rowid DESC LIMIT 1)
             ORDER BY m.key",
            run,
            MetricRow::from_row,
        )
    }

    /// Number of metric rows of a run.
    pub fn count_metrics(&self, run: RunId) -> Result<u64> {
        let count: i64 = self
            .conn
            .query_row(
                "SELECT COUNT(*) FROM metrics WHERE run_id = ?1",
                [run.0],
                |row| row.get(0),
            )
            .map_err(self.err())?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// A run's log lines, oldest first.
    pub fn events(&self, run: RunId) -> Result<Vec<EventRow>> {
        self.collect(
            "SELECT wall_time, level, step, message, fields FROM events WHERE run_id = ?1 ORDER BY id",
            run,
            EventRow::from_row,
        )
    }

    /// The run's metric rows committed after row `after` (0: from the first), in the order
    /// they were written, each with its row id: what a follower that already holds the rows
    /// up to `after` reads next. At most `limit` rows; ask again from the last id for more.
    pub fn metrics_after(
        &self,
        run: RunId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, MetricRow)>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT step, key, value, wall_time, rowid FROM metrics INDEXED BY metrics_by_run
                 WHERE run_id = ?1 AND rowid > ?2 ORDER BY rowid LIMIT ?3",
            )
            .map_err(self.err())?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![run.0, after, limit], |row| {
                Ok((row.get(4)?, MetricRow::from_row(row)?))
            })
            .map_err(self.err())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err())?;
        Ok(rows)
    }

    /// The run's log lines committed after line `after` (0: from the first), oldest first,
    /// each with its id, as [`View::metrics_after`] reads metrics.
    pub fn events_after(
        &self,
        run: RunId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, EventRow)>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT wall_time, level, step, message, fields, id FROM events
                 WHERE run_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
            )
            .map_err(self.err())?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![run.0, after, limit], |row| {
                Ok((row.get(5)?, EventRow::from_row(row)?))
            })
            .map_err(self.err())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err())?;
        Ok(rows)
    }

    /// A run's trajectories, in step and episode order.
    pub fn trajectories(&self, run: RunId) -> Result<Vec<TrajectoryRow>> {
        self.collect(
            "SELECT step, episode_idx, task_id, reward, masked, mask_reason, data
             FROM trajectories WHERE run_id = ?1 ORDER BY step, episode_idx",
            run,
            TrajectoryRow::from_row,
        )
    }

    /// A run's fidelity pairs, in step order.
    pub fn fidelity_pairs(&self, run: RunId) -> Result<Vec<FidelityRow>> {
        self.collect(
            "SELECT step, episode_idx, turn_idx, call_idx, tool, arguments, rehearsed, real,
                    valid_json, outcome_agrees, key_f1, value_accuracy, exact_match
             FROM fidelity_pairs WHERE run_id = ?1 ORDER BY step, id",
            run,
            FidelityRow::from_row,
        )
    }

    /// A run's evaluation results.
    pub fn eval_results(&self, run: RunId) -> Result<Vec<EvalRow>> {
        self.collect(
            "SELECT step, benchmark, category, metric, value, n_tasks, wall_time
             FROM eval_results WHERE run_id = ?1 ORDER BY step, rowid",
            run,
            EvalRow::from_row,
        )
    }

    /// A run's benchmark task records, of one benchmark or all, by step, benchmark, task and
    /// trial.
    pub fn eval_tasks(&self, run: RunId, benchmark: Option<&str>) -> Result<Vec<EvalTaskRow>> {
        let rows = self.collect(
            "SELECT step, benchmark, task_id, trial, score, reason, data
             FROM eval_tasks WHERE run_id = ?1 ORDER BY step, benchmark, rowid",
            run,
            EvalTaskRow::from_row,
        )?;
        Ok(match benchmark {
            Some(name) => rows.into_iter().filter(|r| r.benchmark == name).collect(),
            None => rows,
        })
    }

    /// A run's checkpoints, oldest first.
    pub fn checkpoints(&self, run: RunId) -> Result<Vec<CheckpointRow>> {
        self.collect(
            "SELECT step, path, bytes, wall_time FROM checkpoints WHERE run_id = ?1 ORDER BY step",
            run,
            CheckpointRow::from_row,
        )
    }

    fn collect<T>(
        &self,
        sql: &str,
        run: RunId,
        map: fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(self.err())?;
        let rows = stmt
            .query_map([run.0], map)
            .map_err(self.err())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err())?;
        Ok(rows)
    }
}

/// A buffered writer for one run: rows collect in memory and go to the store in one
/// transaction when `max_rows` are waiting or on [`RunWriter::flush`] (and on drop).
#[derive(Debug)]
pub struct RunWriter {
    store: Store,
    batch: Batch,
    max_rows: usize,
}

impl RunWriter {
    /// A writer for `run` that commits every `max_rows` rows.
    pub fn new(store: Store, run: RunId, max_rows: usize) -> Self {
        RunWriter {
            store,
            batch: Batch::new(run),
            max_rows: max_rows.max(1),
        }
    }

    /// The rows waiting to be committed.
    pub fn pending(&self) -> &Batch {
        &self.batch
    }

    /// Adds one metric value.
    pub fn metric(&mut self, step: u64, key: &str, value: f64) -> Result<()> {
        self.batch.metrics.push(MetricRow {
            step,
            key: key.to_string(),
            value,
            wall_time: now_secs(),
        });
        self.maybe_flush()
    }

    /// Adds one log line.
    pub fn event(&mut self, level: &str, step: Option<u64>, message: &str) -> Result<()> {
        self.batch.events.push(EventRow {
            wall_time: now_secs(),
            level: level.to_string(),
            step,
            message: message.to_string(),
            fields: serde_json::Value::Object(Default::default()),
        });
        self.maybe_flush()
    }

    fn maybe_flush(&mut self) -> Result<()> {
        if self.batch.len() >= self.max_rows {
            self.flush()?;
        }
        Ok(())
    }

    /// Commits every waiting row in one transaction.
    pub fn flush(&mut self) -> Result<()> {
        self.store.write(&self.batch)?;
        self.batch.clear();
        Ok(())
    }

    /// The store, for direct writes (commit [`RunWriter::flush`] first to keep order).
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// The store this writer commits to (for reads between flushes).
    pub fn store(&self) -> &Store {
        &self.store
    }
}

impl Drop for RunWriter {
    fn drop(&mut self) {
        if !self.batch.is_empty()
            && let Err(err) = self.flush()
        {
            tracing::error!(%err, "run store: could not commit the last rows on drop");
        }
    }
}
