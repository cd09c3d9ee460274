//! The monitor's data: every run of a store with its metric series and latest log line, kept
//! up to date by reading only the rows committed since the last read (by row id, each read one
//! snapshot of the store, so a writer is never blocked and nothing is read twice).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use envace::config::ExperimentConfig;
use envace::store::{
    EvalRow, EventRow, FidelityRow, RunId, RunStatus, RunSummary, Store, TrajectoryRow,
};

/// Rows read per query; a poll reads until it has caught up.
const CHUNK: usize = 50_000;

/// One recorded value of a metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Optimizer step.
    pub step: f64,
    /// Seconds since the run's first metric row.
    pub secs: f64,
    /// The value (NaN kept).
    pub value: f64,
}

/// One run as the monitor holds it.
#[derive(Debug, Clone)]
pub struct RunData {
    /// Name, status and last step, as the store lists it.
    pub summary: RunSummary,
    /// Metric key -> its points in the order they were written.
    pub series: BTreeMap<String, Vec<Point>>,
    /// The latest log line, if any.
    pub last_event: Option<EventRow>,
    /// Metric rows held.
    pub n_rows: u64,
    /// Its held-out and benchmark scores, by step (read again whenever the run's rows change,
    /// since an evaluation of a checkpoint may replace earlier scores).
    pub evals: Vec<EvalRow>,
    /// Its config, parsed once; `None` when the stored text no longer parses.
    pub config: Option<ExperimentConfig>,
    evals_read_at: f64,
    /// Wall time of the run's first metric row (the wall-time axis starts there).
    first_wall: Option<f64>,
    last_metric_id: i64,
    last_event_id: i64,
}

impl RunData {
    fn new(summary: RunSummary) -> Self {
        RunData {
            summary,
            series: BTreeMap::new(),
            last_event: None,
            n_rows: 0,
            evals: Vec::new(),
            config: None,
            evals_read_at: f64::NAN,
            first_wall: None,
            last_metric_id: 0,
            last_event_id: 0,
        }
    }

    /// Forgets every row read (a resume removed some, and their ids may come back).
    fn reset(&mut self) {
        let summary = self.summary.clone();
        let config = self.config.take();
        *self = RunData::new(summary);
        self.config = config;
    }

    /// Whether the run is training or evaluating now.
    pub fn is_live(&self) -> bool {
        self.summary.status == RunStatus::Running
    }

    /// `#id name`, as the run list and the legends name it.
    pub fn title(&self) -> String {
        format!("#{} {}", self.summary.id, self.summary.name)
    }
}

/// What one poll read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Metric rows read.
    pub metric_rows: u64,
    /// Log lines read.
    pub event_rows: u64,
    /// Runs read again from their start because a resume removed rows.
    pub reloaded_runs: u64,
}

/// A run store followed as it grows.
#[derive(Debug)]
pub struct Follower {
    store: Store,
    runs: BTreeMap<RunId, RunData>,
}

impl Follower {
    /// Opens the store at `path` (it must exist: the monitor never creates one) and reads
    /// everything in it.
    pub fn open(path: &Path) -> envace::Result<Self> {
        if !path.is_file() {
            return Err(envace::Error::Data {
                source_name: path.display().to_string(),
                message: "no run store here; pass --store FILE (a store `envace train` wrote) or set ENVACE_HOME".to_owned(),
            });
        }
        let mut follower = Follower {
            store: Store::open(path)?,
            runs: BTreeMap::new(),
        };
        follower.poll()?;
        Ok(follower)
    }

    /// The store's file.
    pub fn path(&self) -> PathBuf {
        self.store.path().to_path_buf()
    }

    /// Every run, by id.
    pub fn runs(&self) -> &BTreeMap<RunId, RunData> {
        &self.runs
    }

    /// One run.
    pub fn run(&self, id: RunId) -> Option<&RunData> {
        self.runs.get(&id)
    }

    /// A run's episodes and rehearsed-vs-real pairs, from one snapshot (read when the episode
    /// browser opens, not on every poll). The trajectories' message data is dropped.
    pub fn episodes(
        &mut self,
        run: RunId,
    ) -> envace::Result<(Vec<TrajectoryRow>, Vec<FidelityRow>)> {
        self.store.read(|view| {
            let mut trajectories = view.trajectories(run)?;
            for t in &mut trajectories {
                t.data = serde_json::Value::Null;
            }
            Ok((trajectories, view.fidelity_pairs(run)?))
        })
    }

    /// Reads what was committed since the last poll: new runs, status changes, metric rows and
    /// log lines, all from one snapshot of the store.
    pub fn poll(&mut self) -> envace::Result<PollStats> {
        let runs = &mut self.runs;
        self.store.read(|view| {
            let mut stats = PollStats::default();
            let summaries = view.runs()?;
            // A run deleted from the store leaves the monitor too.
            runs.retain(|id, _| summaries.iter().any(|s| s.id == *id));
            for summary in summaries {
                let run = match runs.entry(summary.id) {
                    std::collections::btree_map::Entry::Occupied(held) => held.into_mut(),
                    std::collections::btree_map::Entry::Vacant(slot) => {
                        let mut run = RunData::new(summary.clone());
                        let record = view.find_run(&summary.id.to_string())?;
                        run.config = envace::config::parse(
                            &record.config_toml,
                            &format!("the config of run {}", summary.id),
                        )
                        .ok();
                        slot.insert(run)
                    }
                };
                if run.summary.resumes != summary.resumes {
                    // A resume removed the rows after its checkpoint and their ids may be
                    // used again: read the run again from its start.
                    run.summary = summary;
                    run.reset();
                    stats.reloaded_runs += 1;
                } else {
                    run.summary = summary;
                }
                let id = run.summary.id;
                let mut events = Vec::new();
                loop {
                    let chunk = view.events_after(id, run.last_event_id, CHUNK)?;
                    let n = chunk.len();
                    events.extend(chunk);
                    if let Some((last, _)) = events.last() {
                        run.last_event_id = *last;
                    }
                    if n < CHUNK {
                        break;
                    }
                }
                if run.evals_read_at.to_bits() != run.summary.updated_at.to_bits() {
                    run.evals = view.eval_results(id)?;
                    run.evals_read_at = run.summary.updated_at;
                }
                stats.event_rows += events.len() as u64;
                if let Some((_, event)) = events.pop() {
                    run.last_event = Some(event);
                }
                loop {
                    let chunk = view.metrics_after(id, run.last_metric_id, CHUNK)?;
                    let n = chunk.len();
                    for (row_id, row) in chunk {
                        let first = *run.first_wall.get_or_insert(row.wall_time);
                        run.series.entry(row.key).or_default().push(Point {
                            step: row.step as f64,
                            secs: row.wall_time - first,
                            value: row.value,
                        });
                        run.last_metric_id = row_id;
                        run.n_rows += 1;
                        stats.metric_rows += 1;
                    }
                    if n < CHUNK {
                        break;
                    }
                }
            }
            Ok(stats)
        })
    }
}
