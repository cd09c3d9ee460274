//! The rows of the run store's tables, and how they are written and read.

use rusqlite::{Row, Transaction, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A run's id in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RunId(pub i64);

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Recorded, not started.
    Created,
    /// Training or evaluating now.
    Running,
    /// Paused by the user; can resume.
    Paused,
    /// Stopped by the user; can resume from its last checkpoint.
    Stopped,
    /// Ran to the end.
    Finished,
    /// Ended by an error.
    Failed,
}

impl RunStatus {
    /// The word stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Created => "created",
            RunStatus::Running => "running",
            RunStatus::Paused => "paused",
            RunStatus::Stopped => "stopped",
            RunStatus::Finished => "finished",
            RunStatus::Failed => "failed",
        }
    }

    /// Parses a stored status word; unknown words read as `failed` rather than erroring.
    pub fn parse(word: &str) -> RunStatus {
        match word {
            "created" => RunStatus::Created,
            "running" => RunStatus::Running,
            "paused" => RunStatus::Paused,
            "stopped" => RunStatus::Stopped,
            "finished" => RunStatus::Finished,
            _ => RunStatus::Failed,
        }
    }
}

/// A run with its full config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Store id.
    pub id: RunId,
    /// Name from the config's `[run]`.
    pub name: String,
    /// Where it stands.
    pub status: RunStatus,
    /// The config text exactly as it was given.
    pub config_toml: String,
    /// Hex SHA-256 of `config_toml`.
    pub config_hash: String,
    /// When it was created, Unix seconds.
    pub created_at: f64,
    /// When it last changed, Unix seconds.
    pub updated_at: f64,
}

impl RunRecord {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(RunRecord {
            id: RunId(row.get(0)?),
            name: row.get(1)?,
            status: RunStatus::parse(&row.get::<_, String>(2)?),
            config_toml: row.get(3)?,
            config_hash: row.get(4)?,
            created_at: row.get(5)?,
            updated_at: row.get(6)?,
        })
    }
}

/// A line of the run list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Store id.
    pub id: RunId,
    /// Name from the config.
    pub name: String,
    /// Where it stands.
    pub status: RunStatus,
    /// When it was created, Unix seconds.
    pub created_at: f64,
    /// When it last changed, Unix seconds.
    pub updated_at: f64,
    /// Hex SHA-256 of its config text.
    pub config_hash: String,
    /// Highest step with a metric, if any.
    pub last_step: Option<u64>,
    /// How many times it was resumed from a checkpoint (each resume removes the rows written
    /// after that checkpoint).
    pub resumes: u32,
}

impl RunSummary {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(RunSummary {
            id: RunId(row.get(0)?),
            name: row.get(1)?,
            status: RunStatus::parse(&row.get::<_, String>(2)?),
            created_at: row.get(3)?,
            updated_at: row.get(4)?,
            config_hash: row.get(5)?,
            last_step: row.get::<_, Option<i64>>(6)?.map(to_u64),
            resumes: row.get(7)?,
        })
    }
}

/// One scalar metric at one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricRow {
    /// Optimizer step.
    pub step: u64,
    /// Metric name, e.g. `act/reward_mean`.
    pub key: String,
    /// Value; NaN and infinities are kept.
    #[serde(with = "nonfinite")]
    pub value: f64,
    /// When it was recorded, Unix seconds.
    pub wall_time: f64,
}

impl MetricRow {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(MetricRow {
            step: to_u64(row.get(0)?),
            key: row.get(1)?,
            value: row.get::<_, Option<f64>>(2)?.unwrap_or(f64::NAN),
            wall_time: row.get(3)?,
        })
    }
}

/// One log line, with optional structured fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRow {
    /// When it happened, Unix seconds.
    pub wall_time: f64,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub level: String,
    /// The step it belongs to, if any.
    pub step: Option<u64>,
    /// The line.
    pub message: String,
    /// Structured fields (a JSON object).
    pub fields: Value,
}

impl EventRow {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(EventRow {
            wall_time: row.get(0)?,
            level: row.get(1)?,
            step: row.get::<_, Option<i64>>(2)?.map(to_u64),
            message: row.get(3)?,
            fields: json_column(row, 4)?,
        })
    }
}

/// One recorded episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrajectoryRow {
    /// Optimizer step it was sampled at.
    pub step: u64,
    /// Index within the step's batch.
    pub episode_idx: u64,
    /// The task it attempted.
    pub task_id: String,
    /// Episode score; `None` when masked.
    pub reward: Option<f64>,
    /// Excluded from training (e.g. the judge call failed).
    pub masked: bool,
    /// Why it was masked.
    pub mask_reason: Option<String>,
    /// The whole trajectory: messages, labelled tokens, tool calls and responses.
    pub data: Value,
}

impl TrajectoryRow {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(TrajectoryRow {
            step: to_u64(row.get(0)?),
            episode_idx: to_u64(row.get(1)?),
            task_id: row.get(2)?,
            reward: row.get(3)?,
            masked: row.get(4)?,
            mask_reason: row.get(5)?,
            data: json_column(row, 6)?,
        })
    }
}

/// A rehearsed tool response next to the real one for the same call and state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FidelityRow {
    /// Optimizer step.
    pub step: u64,
    /// Episode within the step.
    pub episode_idx: u64,
    /// Assistant turn within the episode.
    pub turn_idx: u64,
    /// Call within the turn.
    pub call_idx: u64,
    /// Tool name.
    pub tool: String,
    /// Call arguments.
    pub arguments: Value,
    /// What the rehearse role (or external simulator) answered.
    pub rehearsed: Value,
    /// What the real environment answered.
    pub real: Value,
    /// The rehearsed response parsed as valid JSON.
    pub valid_json: bool,
    /// Same outcome: both errors with the same code, or both successes.
    pub outcome_agrees: bool,
    /// F1 of the two key sets.
    pub key_f1: f64,
    /// Fraction of real leaf values matched.
    pub value_accuracy: f64,
    /// Identical JSON.
    pub exact_match: bool,
}

impl FidelityRow {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(FidelityRow {
            step: to_u64(row.get(0)?),
            episode_idx: to_u64(row.get(1)?),
            turn_idx: to_u64(row.get(2)?),
            call_idx: to_u64(row.get(3)?),
            tool: row.get(4)?,
            arguments: json_column(row, 5)?,
            rehearsed: json_column(row, 6)?,
            real: json_column(row, 7)?,
            valid_json: row.get(8)?,
            outcome_agrees: row.get(9)?,
            key_f1: row.get(10)?,
            value_accuracy: row.get(11)?,
            exact_match: row.get(12)?,
        })
    }
}

/// One task of a benchmark evaluation: its score and why, and the whole record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalTaskRow {
    /// Optimizer step of the evaluated weights.
    pub step: u64,
    /// Benchmark name, e.g. `bfcl_simple_python` or `tau2_retail`.
    pub benchmark: String,
    /// The benchmark's task id.
    pub task_id: String,
    /// 0-based trial of the task.
    pub trial: u64,
    /// 1 or 0 for a checker's verdict, the reward for a graded conversation; `None` when
    /// masked.
    pub score: Option<f64>,
    /// Why the task scored so (empty when it scored full marks).
    pub reason: String,
    /// The record: prompt or conversation, the model's calls, the verdict's details.
    pub data: Value,
}

impl EvalTaskRow {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(EvalTaskRow {
            step: to_u64(row.get(0)?),
            benchmark: row.get(1)?,
            task_id: row.get(2)?,
            trial: to_u64(row.get(3)?),
            score: row.get(4)?,
            reason: row.get(5)?,
            data: json_column(row, 6)?,
        })
    }
}

/// One benchmark score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRow {
    /// Optimizer step of the evaluated weights.
    pub step: u64,
    /// Benchmark name, e.g. `tau2_retail`.
    pub benchmark: String,
    /// Category within it (`all` for the whole).
    pub category: String,
    /// Metric, e.g. `pass^1` or `accuracy`.
    pub metric: String,
    /// Value; NaN is kept.
    #[serde(with = "nonfinite")]
    pub value: f64,
    /// Tasks it was computed over.
    pub n_tasks: u64,
    /// When it was recorded, Unix seconds.
    pub wall_time: f64,
}

impl EvalRow {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(EvalRow {
            step: to_u64(row.get(0)?),
            benchmark: row.get(1)?,
            category: row.get(2)?,
            metric: row.get(3)?,
            value: row.get::<_, Option<f64>>(4)?.unwrap_or(f64::NAN),
            n_tasks: to_u64(row.get(5)?),
            wall_time: row.get(6)?,
        })
    }
}

/// A saved checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRow {
    /// Optimizer step it was saved at.
    pub step: u64,
    /// Its folder.
    pub path: String,
    /// Total size on disk.
    pub bytes: u64,
    /// When it was saved, Unix seconds.
    pub wall_time: f64,
}

impl CheckpointRow {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(CheckpointRow {
            step: to_u64(row.get(0)?),
            path: row.get(1)?,
            bytes: to_u64(row.get(2)?),
            wall_time: row.get(3)?,
        })
    }
}

/// Rows for one run, committed together in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The run they belong to.
    pub run: RunId,
    /// Scalar metrics.
    pub metrics: Vec<MetricRow>,
    /// Log lines.
    pub events: Vec<EventRow>,
    /// Episodes.
    pub trajectories: Vec<TrajectoryRow>,
    /// Rehearsed-vs-real pairs.
    pub fidelity: Vec<FidelityRow>,
    /// Benchmark scores.
    pub evals: Vec<EvalRow>,
    /// Benchmark task records.
    pub eval_tasks: Vec<EvalTaskRow>,
    /// Saved checkpoints.
    pub checkpoints: Vec<CheckpointRow>,
}

impl Batch {
    /// An empty batch for `run`.
    pub fn new(run: RunId) -> Self {
        Batch {
            run,
            metrics: Vec::new(),
            events: Vec::new(),
            trajectories: Vec::new(),
            fidelity: Vec::new(),
            evals: Vec::new(),
            eval_tasks: Vec::new(),
            checkpoints: Vec::new(),
        }
    }

    /// Rows waiting, all tables together.
    pub fn len(&self) -> usize {
        self.metrics.len()
            + self.events.len()
            + self.trajectories.len()
            + self.fidelity.len()
            + self.evals.len()
            + self.eval_tasks.len()
            + self.checkpoints.len()
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Empties every table, keeping the run.
    pub fn clear(&mut self) {
        *self = Batch::new(self.run);
    }
}

pub(crate) fn insert_batch(tx: &Transaction<'_>, batch: &Batch) -> rusqlite::Result<()> {
    let run = batch.run.0;
    if !batch.metrics.is_empty() {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO metrics (run_id, step, key, value, wall_time) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for m in &batch.metrics {
            stmt.execute(params![run, to_i64(m.step), m.key, m.value, m.wall_time])?;
        }
    }
    if !batch.events.is_empty() {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO events (run_id, wall_time, level, step, message, fields)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for e in &batch.events {
            stmt.execute(params![
                run,
                e.wall_time,
                e.level,
                e.step.map(to_i64),
                e.message,
                e.fields.to_string()
            ])?;
        }
    }
    if !batch.trajectories.is_empty() {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO trajectories (run_id, step, episode_idx, task_id, reward, masked, mask_reason, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for t in &batch.trajectories {
            stmt.execute(params![
                run,
                to_i64(t.step),
                to_i64(t.episode_idx),
                t.task_id,
                t.reward,
                t.masked,
                t.mask_reason,
                t.data.to_string()
            ])?;
        }
    }
    if !batch.fidelity.is_empty() {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO fidelity_pairs (run_id, step, episode_idx, turn_idx, call_idx, tool, arguments,
                 rehearsed, real, valid_json, outcome_agrees, key_f1, value_accuracy, exact_match)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )?;
        for f in &batch.fidelity {
            stmt.execute(params![
                run,
                to_i64(f.step),
                to_i64(f.episode_idx),
                to_i64(f.turn_idx),
                to_i64(f.call_idx),
                f.tool,
                f.arguments.to_string(),
                f.rehearsed.to_string(),
                f.real.to_string(),
                f.valid_json,
                f.outcome_agrees,
                f.key_f1,
                f.value_accuracy,
                f.exact_match
            ])?;
        }
    }
    if !batch.eval_tasks.is_empty() {
        let mut stmt = tx.prepare_cached(
            "INSERT OR REPLACE INTO eval_tasks (run_id, step, benchmark, task_id, trial, score, reason, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for t in &batch.eval_tasks {
            stmt.execute(params![
                run,
                to_i64(t.step),
                t.benchmark,
                t.task_id,
                to_i64(t.trial),
                t.score,
                t.reason,
                t.data.to_string()
            ])?;
        }
    }
    if !batch.evals.is_empty() {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO eval_results (run_id, step, benchmark, category, metric, value, n_tasks, wall_time)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for e in &batch.evals {
            stmt.execute(params![
                run,
                to_i64(e.step),
                e.benchmark,
                e.category,
                e.metric,
                e.value,
                to_i64(e.n_tasks),
                e.wall_time
            ])?;
        }
    }
    if !batch.checkpoints.is_empty() {
        let mut stmt = tx.prepare_cached(
            "INSERT OR REPLACE INTO checkpoints (run_id, step, path, bytes, wall_time)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for c in &batch.checkpoints {
            stmt.execute(params![
                run,
                to_i64(c.step),
                c.path,
                to_i64(c.bytes),
                c.wall_time
            ])?;
        }
    }
    Ok(())
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// Reads a JSON text column; text that is not JSON is kept as a JSON string.
fn json_column(row: &Row<'_>, idx: usize) -> rusqlite::Result<Value> {
    let text: String = row.get(idx)?;
    Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Serde for `f64` that keeps NaN and infinities: finite values as numbers, the others as the
/// strings `NaN`, `inf` and `-inf` (JSON has no literal for them).
pub(crate) mod nonfinite {
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
        if value.is_finite() {
            serializer.serialize_f64(*value)
        } else if value.is_nan() {
            serializer.serialize_str("NaN")
        } else if *value > 0.0 {
            serializer.serialize_str("inf")
        } else {
            serializer.serialize_str("-inf")
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        deserializer.deserialize_any(FloatVisitor)
    }

    struct FloatVisitor;

    impl Visitor<'_> for FloatVisitor {
        type Value = f64;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a number, or one of \"NaN\", \"inf\", \"-inf\"")
        }

        fn visit_f64<E: de::Error>(self, value: f64) -> Result<f64, E> {
            Ok(value)
        }

        fn visit_i64<E: de::Error>(self, value: i64) -> Result<f64, E> {
            Ok(value as f64)
        }

        fn visit_u64<E: de::Error>(self, value: u64) -> Result<f64, E> {
            Ok(value as f64)
        }

        fn visit_str<E: de::Error>(self, value: &str) -> Result<f64, E> {
            match value.trim() {
                "NaN" | "nan" => Ok(f64::NAN),
                "inf" | "+inf" | "Infinity" => Ok(f64::INFINITY),
                "-inf" | "-Infinity" => Ok(f64::NEG_INFINITY),
                other => other
                    .parse()
                    .map_err(|_| E::invalid_value(de::Unexpected::Str(value), &self)),
            }
        }
    }
}
