//! `envace train`: runs an experiment (SFT, then role-wise GRPO) through the engine's training
//! controller, with a progress bar, the latest metrics, and a clean stop on Ctrl-C; and
//! `envace runs rehearse`, the rehearsal-budget curve of a trained run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use envace::config;
use envace::controller::{
    Command as JobCommand, Controller, Event, Flow, Hooks, JobOutcome, JobSpec,
};
use envace::store::{RunId, Store};
use indicatif::{ProgressBar, ProgressStyle};

/// Trains `config_path` (or resumes `resume`), storing the run in `store_path`.
pub fn train(
    config_path: &Path,
    resume: Option<&str>,
    store_path: &Path,
    monitor: bool,
) -> Result<ExitCode> {
    if monitor {
        crate::monitor_command::check_display()?;
    }
    let text = std::fs::read_to_string(config_path)
        .with_context(|| format!("cannot read the config {}", config_path.display()))?;
    let experiment = config::parse(&text, &config_path.display().to_string())
        .map_err(|errors| anyhow::anyhow!("{errors}"))?;
    if resume.is_some() && !store_path.exists() {
        bail!(
            "cannot resume run {}: there is no run store at {} (name the store the run was trained in with --store)",
            resume.unwrap_or_default(),
            store_path.display()
        );
    }
    if let Some(dir) = store_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let resume = match resume {
        Some(query) => {
            let store = Store::open(store_path)?;
            let run = store.view().find_run(query)?;
            if store.view().checkpoints(run.id)?.is_empty() {
                bail!(
                    "run {query} has no checkpoint yet, so it cannot be resumed; start it again with `envace train {}`",
                    config_path.display()
                );
            }
            Some(run.id)
        }
        None => None,
    };
    crate::confirm_mcp::prompt_before_training(&experiment, config_path)?;
    if experiment.backend.n_threads > 0 {
        crate::pin_compute_threads(Some(experiment.backend.n_threads as usize));
    }
    let controller = Controller::start(JobSpec {
        config: experiment,
        config_toml: text,
        store_path: PathBuf::from(store_path),
        resume,
    })?;
    let commands = controller.commands();
    let mut interrupted = 0u32;
    let (signal_tx, signal_rx) = std::sync::mpsc::channel::<()>();
    ctrlc::set_handler(move || {
        let _ = signal_tx.send(());
    })
    .context("cannot install the Ctrl-C handler")?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>4} [{bar:30}] {pos}/{len} steps  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let run = controller.run();
    eprintln!("run {} in {}", run.0, store_path.display());
    if monitor {
        // The window is its own process: closing it leaves training alone, and it stays
        // open on the finished run.
        let child = crate::monitor_command::spawn_beside(store_path, &run.0.to_string())?;
        eprintln!("monitor window opened (process {})", child.id());
    }
    loop {
        if signal_rx.try_recv().is_ok() {
            interrupted += 1;
            if interrupted == 1 {
                bar.println("stopping after this step and writing a checkpoint (Ctrl-C again to quit at once)");
                let _ = commands.send(JobCommand::Stop);
            } else {
                bar.abandon_with_message("quit without a final checkpoint");
                return Ok(ExitCode::from(130));
            }
        }
        match controller.events().recv_timeout(Duration::from_millis(200)) {
            Ok(event) => {
                if report(&bar, &event) {
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let outcome = controller.wait()?;
    bar.finish_and_clear();
    print_latest(store_path, run)?;
    match outcome {
        JobOutcome::Finished => {
            eprintln!("run {} finished", run.0);
            Ok(ExitCode::SUCCESS)
        }
        JobOutcome::Stopped => {
            eprintln!(
                "run {} stopped; continue it with `envace train {} --resume {}`",
                run.0,
                config_path.display(),
                run.0
            );
            Ok(ExitCode::from(130))
        }
    }
}

/// Shows one event; true when the job has ended.
fn report(bar: &ProgressBar, event: &Event) -> bool {
    match event {
        Event::Started { run, resumed } => {
            bar.println(format!(
                "{} run {run}",
                if *resumed { "resuming" } else { "starting" }
            ));
        }
        Event::Phase { phase, .. } => {
            bar.set_prefix(phase.as_str());
        }
        Event::Step {
            phase,
            step,
            total_steps,
            metrics,
            tokens_per_sec,
            eta_secs,
        } => {
            bar.set_length(u64::from(*total_steps));
            bar.set_position(u64::from(step + 1));
            bar.set_prefix(phase.as_str());
            let headline = ["sft/loss", "rl/reward", "fidelity/exact_match", "act/kl"]
                .iter()
                .filter_map(|key| {
                    metrics
                        .get(*key)
                        .map(|v| format!("{}={v:.4}", key.rsplit('/').next().unwrap_or(key)))
                })
                .collect::<Vec<_>>()
                .join(" ");
            bar.set_message(format!(
                "{headline}  {tokens_per_sec:.0} tok/s  eta {:.0}s",
                eta_secs
            ));
        }
        Event::Log { level, message } => bar.println(format!("[{level}] {message}")),
        Event::Eval {
            step,
            benchmark,
            n_tasks,
            metrics,
        } => {
            let figures = metrics
                .iter()
                .map(|(key, value)| format!("{key} {value:.3}"))
                .collect::<Vec<_>>()
                .join(", ");
            bar.println(format!(
                "eval after step {step}: {benchmark} ({n_tasks} tasks) {figures}"
            ));
        }
        Event::Checkpoint { step, path } => {
            bar.println(format!("checkpoint at step {step}: {path}"))
        }
        Event::Paused => bar.println("paused"),
        Event::Resumed => bar.println("resumed"),
        Event::Finished { status, message } => {
            if let Some(message) = message {
                bar.println(format!("{status}: {message}"));
            }
            return true;
        }
    }
    false
}

fn print_latest(store_path: &Path, run: RunId) -> Result<()> {
    let store = Store::open(store_path)?;
    let latest = store.view().latest_metrics(run)?;
    for row in latest
        .iter()
        .filter(|m| !m.key.contains("/fidelity/") && m.key.matches('/').count() <= 1)
    {
        out!("{:<34} {:>12.6}  (step {})", row.key, row.value, row.step);
    }
    Ok(())
}

/// `envace runs rehearse`: the rehearsal-budget curve of a run's latest checkpoint, under the
/// run's own config with the given budgets and memory length.
pub fn rehearse(
    query: &str,
    budgets: &[u32],
    max_memory_tokens: Option<u32>,
    episodes: Option<&Path>,
    store_path: &Path,
) -> Result<ExitCode> {
    let store = Store::open(store_path)?;
    let record = store.view().find_run(query)?;
    if store.view().checkpoints(record.id)?.is_empty() {
        bail!("run {query} has no checkpoint yet, so there is no policy to evaluate");
    }
    drop(store);
    // The options edit the run's config text, which is then validated like a config file.
    let mut text = record.config_toml.clone();
    if !budgets.is_empty() {
        text = config::edit::set_value(&text, &["rehearsal", "budget_curve"], &budgets.into())?;
    }
    if let Some(tokens) = max_memory_tokens {
        text = config::edit::set_value(&text, &["rehearsal", "max_memory_tokens"], &tokens.into())?;
    }
    let source = if budgets.is_empty() && max_memory_tokens.is_none() {
        format!("the config of run {}", record.id)
    } else {
        format!("the config of run {} with the options given", record.id)
    };
    let experiment = config::parse(&text, &source)?;
    if experiment.rehearsal.budget_curve.is_empty() {
        bail!("run {query} has no [rehearsal].budget_curve; pass --budgets, e.g. --budgets 1,2,4");
    }
    if experiment.backend.n_threads > 0 {
        crate::pin_compute_threads(Some(experiment.backend.n_threads as usize));
    }
    // The episodes file is created before minutes of rehearsal, and never over an existing one.
    let episodes = match episodes {
        Some(path) => Some(EpisodeFile {
            writer: std::io::BufWriter::new(
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .with_context(|| {
                        format!(
                            "cannot create the episodes file {} (it must not exist yet)",
                            path.display()
                        )
                    })?,
            ),
            path: path.to_path_buf(),
            lines: 0,
            error: None,
        }),
        None => None,
    };
    let mut printer = CurvePrinter { episodes };
    let step =
        envace::controller::rehearsal_curve(&experiment, store_path, record.id, &mut printer)?;
    out!("stored with run {}'s evaluations at step {step}", record.id);
    if let Some(file) = printer.episodes {
        let path = file.path.display().to_string();
        let lines = file.lines;
        file.finish()
            .with_context(|| format!("the curve is stored, but writing {path} failed"))?;
        out!("wrote {lines} committed episodes to {path}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `runs rehearse --episodes FILE`: one JSON line per committed episode, the plain pass's and
/// each curve point's, with its `category`.
struct EpisodeFile {
    writer: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
    lines: usize,
    /// The first write error (the hooks cannot return one).
    error: Option<std::io::Error>,
}

impl EpisodeFile {
    fn write(&mut self, category: &str, episodes: &[envace::rollout::EpisodeRecord]) {
        use std::io::Write;
        for episode in episodes {
            if self.error.is_some() {
                return;
            }
            // The token-level samples are training data, not something to read: left out.
            let mut line = match serde_json::to_value(episode) {
                Ok(line) => line,
                Err(e) => {
                    self.error = Some(std::io::Error::other(e));
                    return;
                }
            };
            if let Some(fields) = line.as_object_mut() {
                fields.remove("samples");
                fields.insert("category".to_owned(), category.into());
            }
            match writeln!(self.writer, "{line}") {
                Ok(()) => self.lines += 1,
                Err(e) => self.error = Some(e),
            }
        }
    }

    fn finish(mut self) -> std::io::Result<()> {
        use std::io::Write;
        match self.error.take() {
            Some(e) => Err(e),
            None => self.writer.flush(),
        }
    }
}

/// Prints the curve's progress and points as they come, and writes the committed episodes
/// when asked to.
struct CurvePrinter {
    episodes: Option<EpisodeFile>,
}

impl Hooks for CurvePrinter {
    fn poll(&mut self) -> Flow {
        Flow::Continue
    }

    fn wants_episodes(&self) -> bool {
        self.episodes.is_some()
    }

    fn episodes(&mut self, category: &str, episodes: &[envace::rollout::EpisodeRecord]) {
        if let Some(file) = &mut self.episodes {
            file.write(category, episodes);
        }
    }

    fn emit(&mut self, event: Event) {
        match event {
            Event::Log { message, .. } => eprintln!("{message}"),
            Event::Eval { metrics, .. } => {
                let figures: Vec<String> =
                    metrics.iter().map(|(k, v)| format!("{k} {v:.3}")).collect();
                // A closed standard output must not stop the evaluation: the store has it.
                let _ = std::io::Write::write_fmt(
                    &mut std::io::stdout(),
                    format_args!("{}\n", figures.join(", ")),
                );
            }
            _ => {}
        }
    }
}
