//! Exporting a run's rows as CSV or JSON Lines, and reading such files back.

use std::io::{BufRead, BufReader, Read, Write};

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use super::{Batch, EvalRow, EvalTaskRow, EventRow, MetricRow, RunId, View};
use crate::error::{Error, Result};

/// File format of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

impl std::str::FromStr for ExportFormat {
    type Err = String;

    fn from_str(word: &str) -> Result<Self, String> {
        match word {
            "csv" => Ok(ExportFormat::Csv),
            "jsonl" => Ok(ExportFormat::Jsonl),
            other => Err(format!("unknown format {other:?}; use csv or jsonl")),
        }
    }
}

/// Which table of a run to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportTable {
    /// `step, key, value, wall_time`.
    Metrics,
    /// `wall_time, level, step, message, fields`.
    Events,
    /// `step, benchmark, category, metric, value, n_tasks, wall_time`.
    Evals,
    /// `step, benchmark, task_id, trial, score, reason, data`: every task of the benchmark
    /// evaluations.
    EvalTasks,
}

impl std::str::FromStr for ExportTable {
    type Err = String;

    fn from_str(word: &str) -> Result<Self, String> {
        match word {
            "metrics" => Ok(ExportTable::Metrics),
            "events" => Ok(ExportTable::Events),
            "evals" => Ok(ExportTable::Evals),
            "eval-tasks" => Ok(ExportTable::EvalTasks),
            other => Err(format!(
                "unknown table {other:?}; use metrics, events, evals or eval-tasks"
            )),
        }
    }
}

/// Rows read back from an export.
#[derive(Debug, Clone, PartialEq)]
pub enum Imported {
    /// Metric rows.
    Metrics(Vec<MetricRow>),
    /// Log lines.
    Events(Vec<EventRow>),
    /// Benchmark scores.
    Evals(Vec<EvalRow>),
    /// Benchmark task records.
    EvalTasks(Vec<EvalTaskRow>),
}

impl Imported {
    /// The rows as a batch for `run`, ready for [`super::Store::write`].
    pub fn into_batch(self, run: RunId) -> Batch {
        let mut batch = Batch::new(run);
        match self {
            Imported::Metrics(rows) => batch.metrics = rows,
            Imported::Events(rows) => batch.events = rows,
            Imported::Evals(rows) => batch.evals = rows,
            Imported::EvalTasks(rows) => batch.eval_tasks = rows,
        }
        batch
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            Imported::Metrics(rows) => rows.len(),
            Imported::Events(rows) => rows.len(),
            Imported::Evals(rows) => rows.len(),
            Imported::EvalTasks(rows) => rows.len(),
        }
    }

    /// Whether no rows were read.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An event as one CSV record: the structured fields as JSON text.
#[derive(Debug, Serialize, Deserialize)]
struct EventCsv {
    wall_time: f64,
    level: String,
    step: Option<u64>,
    message: String,
    fields: String,
}

/// A benchmark task record as one CSV record: the record as JSON text.
#[derive(Debug, Serialize, Deserialize)]
struct EvalTaskCsv {
    step: u64,
    benchmark: String,
    task_id: String,
    trial: u64,
    score: Option<f64>,
    reason: String,
    data: String,
}

/// Writes one table of a run to `out`; returns the number of rows written.
pub fn export_rows(
    view: &View<'_>,
    run: RunId,
    table: ExportTable,
    format: ExportFormat,
    out: &mut dyn Write,
    sink_name: &str,
) -> Result<usize> {
    match table {
        ExportTable::Metrics => write_rows(&view.metrics(run)?, format, out, sink_name),
        ExportTable::Evals => write_rows(&view.eval_results(run)?, format, out, sink_name),
        ExportTable::EvalTasks => {
            let tasks = view.eval_tasks(run, None)?;
            match format {
                ExportFormat::Jsonl => write_rows(&tasks, format, out, sink_name),
                ExportFormat::Csv => {
                    let rows: Vec<EvalTaskCsv> = tasks
                        .into_iter()
                        .map(|t| EvalTaskCsv {
                            step: t.step,
                            benchmark: t.benchmark,
                            task_id: t.task_id,
                            trial: t.trial,
                            score: t.score,
                            reason: t.reason,
                            data: t.data.to_string(),
                        })
                        .collect();
                    write_rows(&rows, format, out, sink_name)
                }
            }
        }
        ExportTable::Events => {
            let events = view.events(run)?;
            match format {
                ExportFormat::Jsonl => write_rows(&events, format, out, sink_name),
                ExportFormat::Csv => {
                    let rows: Vec<EventCsv> = events
                        .into_iter()
                        .map(|e| EventCsv {
                            wall_time: e.wall_time,
                            level: e.level,
                            step: e.step,
                            message: e.message,
                            fields: e.fields.to_string(),
                        })
                        .collect();
                    write_rows(&rows, format, out, sink_name)
                }
            }
        }
    }
}

/// Reads rows exported by [`export_rows`]; `source_name` names the input in errors.
pub fn import_rows(
    table: ExportTable,
    format: ExportFormat,
    input: &mut dyn Read,
    source_name: &str,
) -> Result<Imported> {
    Ok(match table {
        ExportTable::Metrics => Imported::Metrics(read_rows(format, input, source_name)?),
        ExportTable::Evals => Imported::Evals(read_rows(format, input, source_name)?),
        ExportTable::EvalTasks => match format {
            ExportFormat::Jsonl => Imported::EvalTasks(read_rows(format, input, source_name)?),
            ExportFormat::Csv => {
                let rows: Vec<EvalTaskCsv> = read_rows(format, input, source_name)?;
                let mut tasks = Vec::with_capacity(rows.len());
                for (idx, row) in rows.into_iter().enumerate() {
                    let data = serde_json::from_str(&row.data).map_err(|err| Error::Data {
                        source_name: format!("{source_name}, record {}", idx + 1),
                        message: format!("`data` is not JSON: {err}"),
                    })?;
                    tasks.push(EvalTaskRow {
                        step: row.step,
                        benchmark: row.benchmark,
                        task_id: row.task_id,
                        trial: row.trial,
                        score: row.score,
                        reason: row.reason,
                        data,
                    });
                }
                Imported::EvalTasks(tasks)
            }
        },
        ExportTable::Events => match format {
            ExportFormat::Jsonl => Imported::Events(read_rows(format, input, source_name)?),
            ExportFormat::Csv => {
                let rows: Vec<EventCsv> = read_rows(format, input, source_name)?;
                let mut events = Vec::with_capacity(rows.len());
                for (idx, row) in rows.into_iter().enumerate() {
                    let fields = serde_json::from_str(&row.fields).map_err(|err| Error::Data {
                        source_name: format!("{source_name}, record {}", idx + 1),
                        message: format!("`fields` is not JSON: {err}"),
                    })?;
                    events.push(EventRow {
                        wall_time: row.wall_time,
                        level: row.level,
                        step: row.step,
                        message: row.message,
                        fields,
                    });
                }
                Imported::Events(events)
            }
        },
    })
}

fn write_rows<T: Serialize>(
    rows: &[T],
    format: ExportFormat,
    out: &mut dyn Write,
    sink_name: &str,
) -> Result<usize> {
    let fail = |message: String| Error::Data {
        source_name: sink_name.to_string(),
        message,
    };
    match format {
        ExportFormat::Csv => {
            let mut writer = csv::Writer::from_writer(out);
            for row in rows {
                writer
                    .serialize(row)
                    .map_err(|err| fail(format!("cannot write CSV: {err}")))?;
            }
            writer
                .flush()
                .map_err(|err| fail(format!("cannot write: {err}")))?;
        }
        ExportFormat::Jsonl => {
            for row in rows {
                serde_json::to_writer(&mut *out, row)
                    .map_err(|err| fail(format!("cannot write JSON: {err}")))?;
                out.write_all(b"\n")
                    .map_err(|err| fail(format!("cannot write: {err}")))?;
            }
            out.flush()
                .map_err(|err| fail(format!("cannot write: {err}")))?;
        }
    }
    Ok(rows.len())
}

fn read_rows<T: DeserializeOwned>(
    format: ExportFormat,
    input: &mut dyn Read,
    source_name: &str,
) -> Result<Vec<T>> {
    let mut rows = Vec::new();
    match format {
        ExportFormat::Csv => {
            let mut reader = csv::Reader::from_reader(input);
            for (idx, record) in reader.deserialize().enumerate() {
                let row = record.map_err(|err| Error::Data {
                    source_name: format!("{source_name}, record {}", idx + 1),
                    message: err.to_string(),
                })?;
                rows.push(row);
            }
        }
        ExportFormat::Jsonl => {
            for (idx, line) in BufReader::new(input).lines().enumerate() {
                let at = || format!("{source_name}, line {}", idx + 1);
                let line = line.map_err(|err| Error::Data {
                    source_name: at(),
                    message: err.to_string(),
                })?;
                if line.trim().is_empty() {
                    continue;
                }
                let row = serde_json::from_str(&line).map_err(|err| Error::Data {
                    source_name: at(),
                    message: err.to_string(),
                })?;
                rows.push(row);
            }
        }
    }
    Ok(rows)
}
