//! How a training job talks to whoever runs it: the events it reports ([`Event`]) and the
//! [`Hooks`] it polls between steps for a pause or a stop ([`Flow`]). The controller implements
//! the hooks over channels; tests and tools run a loop with [`NoHooks`].

use std::collections::BTreeMap;

use serde::Serialize;

use super::session::Phase;
use crate::rollout::EpisodeRecord;

/// What the worker reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The job's run exists in the store.
    Started {
        /// The run.
        run: i64,
        /// Whether it continues from a checkpoint.
        resumed: bool,
    },
    /// A phase begins.
    Phase {
        /// SFT or RL (serialised `sft` / `rl`).
        phase: Phase,
        /// First step of the phase (over the whole job).
        first_step: u32,
        /// Steps in the phase.
        n_steps: u32,
    },
    /// A step finished.
    Step {
        /// SFT or RL (serialised `sft` / `rl`).
        phase: Phase,
        /// The step (over the whole job).
        step: u32,
        /// Total steps of the job.
        total_steps: u32,
        /// The step's metrics.
        metrics: BTreeMap<String, f64>,
        /// Trained tokens per second in this step.
        tokens_per_sec: f64,
        /// Estimated seconds to the end of the job.
        eta_secs: f64,
    },
    /// A log line.
    Log {
        /// `info`, `warn` or `error`.
        level: String,
        /// The line.
        message: String,
    },
    /// A held-out evaluation finished (its rows are in the store's `eval_results`).
    Eval {
        /// The step it evaluates the policy after (over the whole job).
        step: u32,
        /// The benchmark, e.g. `generated_test`.
        benchmark: String,
        /// Tasks evaluated.
        n_tasks: usize,
        /// Its figures, e.g. `score` and `success`.
        metrics: BTreeMap<String, f64>,
    },
    /// A checkpoint was written.
    Checkpoint {
        /// Last completed step.
        step: u32,
        /// Its folder.
        path: String,
    },
    /// The worker is paused.
    Paused,
    /// The worker resumed.
    Resumed,
    /// The job ended.
    Finished {
        /// `finished`, `stopped` or `failed`.
        status: String,
        /// For failures, the error.
        message: Option<String>,
    },
}

/// What a training loop should do after polling for commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on with the next step.
    Continue,
    /// Checkpoint and return.
    Stop,
}

/// The training loops' link to the controller: commands in, events out.
pub trait Hooks {
    /// Handles waiting commands (blocking while paused); says whether to go on.
    fn poll(&mut self) -> Flow;
    /// Reports an event.
    fn emit(&mut self, event: Event);
    /// Whether [`Hooks::episodes`] keeps what it is given; when it does, a rehearsal-budget
    /// curve also runs the plain evaluation beside it, so each task's attempts can be compared.
    fn wants_episodes(&self) -> bool {
        false
    }
    /// The committed episodes of one point of a rehearsal-budget curve (`category`
    /// `rehearsal/<style>/<N>`, or `plain` for no imagined attempt), in task order; dropped
    /// unless [`Hooks::wants_episodes`].
    fn episodes(&mut self, _category: &str, _episodes: &[EpisodeRecord]) {}
}

/// Hooks for running a loop without a controller (tests, tools): never stops, drops events.
#[derive(Debug, Default)]
pub struct NoHooks;

impl Hooks for NoHooks {
    fn poll(&mut self) -> Flow {
        Flow::Continue
    }
    fn emit(&mut self, _event: Event) {}
}
