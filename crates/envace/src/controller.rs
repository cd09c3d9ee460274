//! The training controller: runs a job (SFT then role-wise GRPO) on a worker thread, takes
//! start / pause / resume / stop commands, and reports progress as events on a channel, for
//! the CLI, the studio and the monitor alike.
//!
//! Stopping finishes the current step, writes a checkpoint and marks the run `stopped`;
//! [`Controller::start`] with `resume: Some(run)` continues it from its latest checkpoint.
//! Pausing blocks the worker between steps (the run is marked `paused`) until resume or stop.
//!
//! A resume touches the store only once the checkpoint has loaded: one transaction then
//! removes every row written after the checkpoint (by a process killed between checkpoints)
//! and marks the run running, so the replay writes those steps again exactly once. A resume
//! that fails before that leaves the store as it was.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;

use crate::config::{ExperimentConfig, TaskSplit};
use crate::error::{Error, Result};
pub use crate::rl::hooks::{Event, Flow, Hooks, NoHooks};
use crate::rl::session::{Phase, Session, load_sources, sft_task_pool, task_pool};
use crate::rl::{grpo, sft};
use crate::store::{RunId, RunStatus, RunWriter, Store};
use crate::tasks::GenTask;

/// A command to the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Pause between steps.
    Pause,
    /// Continue after a pause.
    Resume,
    /// Checkpoint and end.
    Stop,
}

struct ChannelHooks {
    commands: Receiver<Command>,
    events: Sender<Event>,
    store_path: PathBuf,
    run: RunId,
}

impl ChannelHooks {
    fn set_status(&self, status: RunStatus) {
        if let Ok(store) = Store::open(&self.store_path) {
            let _ = store.set_run_status(self.run, status);
        }
    }
}

impl Hooks for ChannelHooks {
    fn poll(&mut self) -> Flow {
        loop {
            match self.commands.try_recv() {
                Ok(Command::Stop) => return Flow::Stop,
                Ok(Command::Resume) => {}
                Ok(Command::Pause) => {
                    self.set_status(RunStatus::Paused);
                    self.emit(Event::Paused);
                    loop {
                        match self.commands.recv() {
                            Ok(Command::Resume) => break,
                            Ok(Command::Stop) | Err(_) => return Flow::Stop,
                            Ok(Command::Pause) => {}
                        }
                    }
                    self.set_status(RunStatus::Running);
                    self.emit(Event::Resumed);
                }
                Err(TryRecvError::Empty) => return Flow::Continue,
                // The controller is gone: nobody can stop us, so finish the job.
                Err(TryRecvError::Disconnected) => return Flow::Continue,
            }
        }
    }

    fn emit(&mut self, event: Event) {
        let _ = self.events.send(event);
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The experiment.
    pub config: ExperimentConfig,
    /// Its TOML text, stored with the run.
    pub config_toml: String,
    /// The run store file.
    pub store_path: PathBuf,
    /// Continue this run from its latest checkpoint instead of creating one.
    pub resume: Option<RunId>,
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    /// Every step ran.
    Finished,
    /// Stopped on request, after a checkpoint.
    Stopped,
}

/// A running job.
#[derive(Debug)]
pub struct Controller {
    run: RunId,
    commands: Sender<Command>,
    events: Receiver<Event>,
    worker: Option<JoinHandle<Result<JobOutcome>>>,
}

impl Controller {
    /// Creates (or reopens) the run and starts the job on a worker thread; fails without
    /// writing anything when the experiment names an unconfirmed stdio MCP server.
    pub fn start(spec: JobSpec) -> Result<Controller> {
        // An unconfirmed MCP command is refused before the store is touched.
        crate::trust::check_default(&spec.config)?;
        let store = Store::open(&spec.store_path)?;
        let run = match spec.resume {
            Some(run) => {
                check_resumable(&store, run)?;
                run
            }
            None => {
                let run = store.create_run(&spec.config.run.name, &spec.config_toml)?;
                store.set_run_status(run, RunStatus::Running)?;
                run
            }
        };
        drop(store);
        let (command_tx, command_rx) = mpsc::channel();
        let (event_tx, event_rx) = mpsc::channel();
        let hooks = ChannelHooks {
            commands: command_rx,
            events: event_tx,
            store_path: spec.store_path.clone(),
            run,
        };
        let worker = std::thread::Builder::new()
            .name(format!("envace-train-{}", run.0))
            .spawn(move || run_job(spec, run, hooks))
            .map_err(|e| Error::Data {
                source_name: "training controller".to_owned(),
                message: format!("could not start the worker thread: {e}"),
            })?;
        Ok(Controller {
            run,
            commands: command_tx,
            events: event_rx,
            worker: Some(worker),
        })
    }

    /// The run being trained.
    pub fn run(&self) -> RunId {
        self.run
    }

    /// The event stream.
    pub fn events(&self) -> &Receiver<Event> {
        &self.events
    }

    /// Pauses between steps.
    pub fn pause(&self) {
        let _ = self.commands.send(Command::Pause);
    }

    /// Resumes after a pause.
    pub fn resume(&self) {
        let _ = self.commands.send(Command::Resume);
    }

    /// Asks the job to checkpoint and stop after the current step.
    pub fn stop(&self) {
        let _ = self.commands.send(Command::Stop);
    }

    /// A sender of commands, for another thread (e.g. a Ctrl-C handler).
    pub fn commands(&self) -> Sender<Command> {
        self.commands.clone()
    }

    /// Waits for the job to end.
    pub fn wait(mut self) -> Result<JobOutcome> {
        match self.worker.take() {
            Some(worker) => worker.join().unwrap_or_else(|_| {
                Err(Error::Data {
                    source_name: "training worker".to_owned(),
                    message: "panicked".to_owned(),
                })
            }),
            None => Ok(JobOutcome::Finished),
        }
    }
}

/// Refuses to resume a run that does not exist, has finished or has no checkpoint.
fn check_resumable(store: &Store, run: RunId) -> Result<()> {
    let record = store.view().find_run(&run.0.to_string())?;
    if record.id != run {
        return Err(Error::RunNotFound(run.0.to_string()));
    }
    let refuse = |message: &str| Error::Data {
        source_name: format!("run {}", run.0),
        message: message.to_owned(),
    };
    if record.status == RunStatus::Finished {
        return Err(refuse("has finished: there is nothing to resume"));
    }
    if store.view().checkpoints(run)?.is_empty() {
        return Err(refuse(
            "has no checkpoint to resume from; start it again instead",
        ));
    }
    Ok(())
}

fn run_job(spec: JobSpec, run: RunId, mut hooks: ChannelHooks) -> Result<JobOutcome> {
    hooks.emit(Event::Started {
        run: run.0,
        resumed: spec.resume.is_some(),
    });
    let result = match open_session(&spec, run, &mut hooks) {
        Ok((mut session, sft_tasks)) => run_session(&mut session, &sft_tasks, &mut hooks),
        Err(err) if spec.resume.is_some() => {
            // The resume never took effect: the run and its rows stay exactly as they were.
            hooks.emit(Event::Finished {
                status: RunStatus::Failed.as_str().to_owned(),
                message: Some(err.to_string()),
            });
            return Err(err);
        }
        Err(err) => Err(err),
    };
    let (status, message) = match &result {
        Ok(JobOutcome::Finished) => (RunStatus::Finished, None),
        Ok(JobOutcome::Stopped) => (RunStatus::Stopped, None),
        Err(e) => (RunStatus::Failed, Some(e.to_string())),
    };
    if let Some(message) = &message
        && let Ok(store) = Store::open(&spec.store_path)
    {
        let mut writer = RunWriter::new(store, run, 1);
        let _ = writer.event("error", None, message);
    }
    hooks.set_status(status);
    hooks.emit(Event::Finished {
        status: status.as_str().to_owned(),
        message,
    });
    result
}

/// One of the task pools a job draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobPool {
    /// The SFT corpus: `[sft].n_tasks` tasks of `[env].task_split`.
    Sft,
    /// The RL prompts: `[rl].n_tasks` (else 16 × `[rl].batch_size`, at least 64) tasks of
    /// `[env].task_split`, taken in order, `[rl].batch_size` per step.
    Rl,
    /// The held-out tasks evaluations score: `[eval].max_tasks` (100 when unset) of the test
    /// split.
    HeldOut,
}

/// The tasks of `pool` exactly as a job with `config` generates them (same sizes, seeds and
/// order), so that tools outside the job (`envace config tasks`, the GRPO benchmark's peer)
/// see the job's own tasks.
pub fn job_pool(
    config: &ExperimentConfig,
    sources: &crate::tasks::GenSources,
    pool: JobPool,
) -> Result<Vec<Arc<GenTask>>> {
    let seed = config.run.seed;
    match pool {
        JobPool::Sft => sft_task_pool(config, sources, config.sft.n_tasks as usize, seed),
        JobPool::Rl => task_pool(
            config,
            sources,
            config.env.task_split,
            config.rl.pool_size(),
            seed.wrapping_add(1),
        ),
        JobPool::HeldOut => task_pool(
            config,
            sources,
            TaskSplit::Test,
            config.eval.max_tasks.unwrap_or(100) as usize,
            seed.wrapping_add(2),
        ),
    }
}

/// The held-out tasks a run evaluates on ([`JobPool::HeldOut`]).
fn held_out_tasks(
    config: &ExperimentConfig,
    sources: &crate::tasks::GenSources,
) -> Result<Vec<Arc<GenTask>>> {
    job_pool(config, sources, JobPool::HeldOut)
}

/// Evaluates the rehearsal-budget curve of `run`'s latest checkpoint under `config` (the run's
/// own config, perhaps with other `[rehearsal]` settings) on the run's held-out tasks, and
/// stores it as the curve after training is stored; returns the step evaluated. When the run
/// has no held-out evaluation at that step (it was stopped between evaluations), that
/// checkpoint's plain evaluation is stored first, so the curve has its N = 0 point.
pub fn rehearsal_curve(
    config: &ExperimentConfig,
    store_path: &Path,
    run: RunId,
    hooks: &mut dyn Hooks,
) -> Result<u32> {
    let store = Store::open(store_path)?;
    let writer = RunWriter::new(store, run, 256);
    let sources = load_sources(config)?;
    let mut session = Session::resume(config.clone(), run, writer, sources)?;
    let test_tasks = held_out_tasks(config, &session.sources)?;
    let step = session.next_step;
    let evaluated = session
        .writer
        .store()
        .view()
        .eval_results(run)?
        .iter()
        .any(|row| row.step == u64::from(step) && row.category == "all");
    if !evaluated && !test_tasks.is_empty() {
        crate::rl::evaluation::held_out_eval(&mut session, &test_tasks, step, hooks)?;
    }
    crate::rl::evaluation::budget_curve(&mut session, &test_tasks, step, hooks)?;
    session.writer.flush()?;
    Ok(step)
}

/// Runs (or continues) a whole job with the given hooks: SFT when enabled, then RL.
pub fn train(spec: &JobSpec, run: RunId, hooks: &mut dyn Hooks) -> Result<JobOutcome> {
    let (mut session, sft_tasks) = open_session(spec, run, hooks)?;
    run_session(&mut session, &sft_tasks, hooks)
}

/// Creates the job's session, or reopens it at its latest checkpoint and takes the run over
/// (the store's rows after the checkpoint removed, the run marked running). Returns it with
/// the SFT task pool.
fn open_session(
    spec: &JobSpec,
    run: RunId,
    hooks: &mut dyn Hooks,
) -> Result<(Session, Vec<Arc<GenTask>>)> {
    let config = spec.config.clone();
    let store = Store::open(&spec.store_path)?;
    let writer = RunWriter::new(store, run, 256);
    hooks.emit(Event::Log {
        level: "info".to_owned(),
        message: "loading data and building the task pools".to_owned(),
    });
    let sources = load_sources(&config)?;
    let sft_tasks = job_pool(&config, &sources, JobPool::Sft)?;
    let session = match spec.resume {
        Some(run) => {
            let mut session = Session::resume(config, run, writer, sources)?;
            let removed = session.take_over()?;
            hooks.emit(Event::Log {
                level: "info".to_owned(),
                message: format!(
                    "resuming from the checkpoint at step {} ({removed} rows written after it removed)",
                    session.resumed_from.unwrap_or_default()
                ),
            });
            session
        }
        None => Session::create(config, run, writer, &sft_tasks, sources)?,
    };
    hooks.emit(Event::Log {
        level: "info".to_owned(),
        message: format!(
            "model: {} parameters; starting at step {}",
            session.policy.n_params(),
            session.next_step
        ),
    });
    Ok((session, sft_tasks))
}

/// Runs an opened session to the end of its job (or until stopped).
fn run_session(
    session: &mut Session,
    sft_tasks: &[Arc<GenTask>],
    hooks: &mut dyn Hooks,
) -> Result<JobOutcome> {
    let config = session.config.clone();
    let test_tasks = held_out_tasks(&config, &session.sources)?;
    if session.phase == Phase::Sft
        && sft::train(session, sft_tasks, &test_tasks, hooks)? == Flow::Stop
    {
        return Ok(JobOutcome::Stopped);
    }
    if session.phase == Phase::Rl {
        let rl_tasks = job_pool(&config, &session.sources, JobPool::Rl)?;
        if grpo::train(session, &rl_tasks, &test_tasks, hooks)? == Flow::Stop {
            return Ok(JobOutcome::Stopped);
        }
        if !config.rehearsal.budget_curve.is_empty() && !test_tasks.is_empty() {
            let last_step = session.next_step;
            if crate::rl::evaluation::budget_curve(session, &test_tasks, last_step, hooks)?
                == Flow::Stop
            {
                return Ok(JobOutcome::Stopped);
            }
        }
    }
    session.writer.flush()?;
    Ok(JobOutcome::Finished)
}
