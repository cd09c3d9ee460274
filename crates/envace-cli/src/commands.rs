//! What each `envace` subcommand does, over the engine library.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Result, bail};
use envace::config;
use envace::store::{self, ExportFormat, ExportTable, Store};

use envace::controller::{JobPool, job_pool};

use crate::{Cli, Command, ConfigCommand, FormatArg, PoolArg, RunsCommand, TableArg};

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Config(command) => config_command(command),
        Command::Runs(command) => {
            let path = store_or_default(cli.store)?;
            runs_command(command, &path)
        }
        Command::Env(command) => crate::env_commands::env_command(command),
        Command::Eval(args) => match args.command {
            Some(command) => crate::eval_command::score(command),
            None => {
                let wants_store = args.run.is_some() || args.record_as.is_some();
                let store = match (wants_store, cli.store) {
                    (false, _) => None,
                    (true, Some(path)) => Some(path),
                    (true, None) => Some(store::default_path()?),
                };
                crate::eval_command::evaluate(&args, store.as_deref())
            }
        },
        Command::Train {
            config,
            resume,
            monitor,
        } => {
            let path = store_or_default(cli.store)?;
            crate::train_command::train(&config, resume.as_deref(), &path, monitor)
        }
        Command::Export(crate::ExportCommand::Verl {
            config,
            out,
            sets,
            force,
        }) => crate::verl_commands::export_verl(&config, &out, &sets, force),
        Command::Import(crate::ImportCommand::Verl { dir }) => {
            let path = store_or_default(cli.store)?;
            crate::verl_commands::import_verl(&dir, &path)
        }
        Command::Monitor { runs } => {
            let path = store_or_default(cli.store)?;
            crate::monitor_command::monitor(&path, &runs)
        }
        Command::ServeEnv {
            domain,
            stdio,
            http,
            data,
        } => crate::env_commands::serve_env(domain, stdio, http, data.as_deref()),
        Command::ServeModel {
            model,
            run,
            addr,
            max_batch,
            default_max_tokens,
            dequantize,
            device,
            adapter,
            api_key_env,
        } => crate::serve_commands::serve_model(crate::serve_commands::ServeArgs {
            model: model.as_deref(),
            run: run.as_deref(),
            store_path: cli.store.as_deref(),
            addr,
            max_batch,
            default_max_tokens,
            dequantize,
            device,
            adapter: adapter.as_deref(),
            api_key_env: api_key_env.as_deref(),
        }),
    }
}

/// The store `--store` names, else the default one (`$ENVACE_HOME` or the data directory).
fn store_or_default(store: Option<std::path::PathBuf>) -> Result<std::path::PathBuf> {
    match store {
        Some(path) => Ok(path),
        None => Ok(store::default_path()?),
    }
}

fn config_command(command: ConfigCommand) -> Result<ExitCode> {
    match command {
        ConfigCommand::Validate { files } => {
            let mut n_bad = 0;
            for file in &files {
                match config::parse_file(file) {
                    Ok(config) => out!("ok: {} (run {:?})", file.display(), config.run.name),
                    Err(err) => {
                        n_bad += 1;
                        eprintln!("{err}");
                    }
                }
            }
            if n_bad > 0 {
                eprintln!("{n_bad} of {} config files are invalid", files.len());
                return Ok(ExitCode::FAILURE);
            }
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Schema { out, force } => {
            let text = serde_json::to_string_pretty(config::json_schema())? + "\n";
            emit(out.as_deref(), force, text.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Init { preset, out, force } => {
            let preset = config::preset(&preset)?;
            emit(out.as_deref(), force, preset.toml.as_bytes())?;
            if let Some(out) = out {
                eprintln!(
                    "wrote preset {:?} to {}; check it with `envace config validate {}`",
                    preset.name,
                    out.display(),
                    out.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Tasks {
            config: file,
            pool,
            limit,
            out,
            force,
        } => {
            let experiment = config::parse_file(&file)?;
            let pool = match pool {
                PoolArg::Sft => JobPool::Sft,
                PoolArg::Rl => JobPool::Rl,
                PoolArg::HeldOut => JobPool::HeldOut,
            };
            let sources = envace::rl::session::load_sources(&experiment)?;
            let tasks = job_pool(&experiment, &sources, pool)?;
            let mut text = String::new();
            for task in tasks.iter().take(limit.unwrap_or(usize::MAX)) {
                text.push_str(&serde_json::to_string(task.as_ref())?);
                text.push('\n');
            }
            emit(out.as_deref(), force, text.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::ConfirmMcp { config: file, yes } => {
            crate::confirm_mcp::confirm_command(&file, yes)
        }
        ConfigCommand::Presets => {
            for preset in config::PRESETS {
                out!("{:<18} {}", preset.name, preset.summary);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn runs_command(command: RunsCommand, store_path: &Path) -> Result<ExitCode> {
    if !store_path.exists() {
        // Listing an empty store is fine; creating one as a side effect of a read is not.
        if let RunsCommand::List { json } = command {
            if json {
                out!("[]");
            } else {
                eprintln!(
                    "no runs yet: the store {} does not exist",
                    store_path.display()
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        bail!(
            "the run store {} does not exist; pass --store FILE or set ENVACE_HOME",
            store_path.display()
        );
    }
    let store = Store::open(store_path)?;
    let view = store.view();
    match command {
        RunsCommand::List { json } => {
            let runs = view.runs()?;
            if json {
                out!("{}", serde_json::to_string_pretty(&runs)?);
            } else if runs.is_empty() {
                eprintln!("no runs yet in {}", store_path.display());
            } else {
                out!(
                    "{:>5}  {:<24} {:<9} {:>8}  {:<20} config",
                    "id",
                    "name",
                    "status",
                    "step",
                    "created"
                );
                for run in runs {
                    out!(
                        "{:>5}  {:<24} {:<9} {:>8}  {:<20} {}",
                        run.id,
                        run.name,
                        run.status.as_str(),
                        run.last_step.map_or_else(|| "-".into(), |s| s.to_string()),
                        format_time(run.created_at),
                        &run.config_hash[..12.min(run.config_hash.len())]
                    );
                }
            }
        }
        RunsCommand::Show { run, config, json } => {
            let record = view.find_run(&run)?;
            let latest = view.latest_metrics(record.id)?;
            let evals = view.eval_results(record.id)?;
            let checkpoints = view.checkpoints(record.id)?;
            if json {
                let value = serde_json::json!({
                    "run": record,
                    "latest_metrics": latest,
                    "eval_results": evals,
                    "checkpoints": checkpoints,
                });
                out!("{}", serde_json::to_string_pretty(&value)?);
                return Ok(ExitCode::SUCCESS);
            }
            let mut text = String::new();
            writeln!(text, "run {} {:?}", record.id, record.name)?;
            writeln!(text, "  status   {}", record.status.as_str())?;
            writeln!(text, "  created  {}", format_time(record.created_at))?;
            writeln!(text, "  updated  {}", format_time(record.updated_at))?;
            writeln!(text, "  config   sha256 {}", record.config_hash)?;
            if latest.is_empty() {
                writeln!(text, "  metrics  none yet")?;
            } else {
                writeln!(text, "  latest metrics:")?;
                for m in &latest {
                    writeln!(
                        text,
                        "    {:<32} {:>14}  (step {})",
                        m.key,
                        format_value(m.value),
                        m.step
                    )?;
                }
            }
            if !evals.is_empty() {
                writeln!(text, "  evaluations:")?;
                for e in &evals {
                    writeln!(
                        text,
                        "    step {:>6}  {}/{} {} = {} over {} tasks",
                        e.step,
                        e.benchmark,
                        e.category,
                        e.metric,
                        format_value(e.value),
                        e.n_tasks
                    )?;
                }
            }
            writeln!(text, "  checkpoints: {}", checkpoints.len())?;
            for c in &checkpoints {
                writeln!(
                    text,
                    "    step {:>6}  {}  ({} bytes)",
                    c.step, c.path, c.bytes
                )?;
            }
            if config {
                writeln!(text, "\n{}", record.config_toml)?;
            }
            std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes())?;
        }
        RunsCommand::Rehearse {
            run,
            budgets,
            max_memory_tokens,
            episodes,
        } => {
            return crate::train_command::rehearse(
                &run,
                &budgets,
                max_memory_tokens,
                episodes.as_deref(),
                store_path,
            );
        }
        RunsCommand::Export {
            run,
            format,
            table,
            out,
            force,
        } => {
            let record = view.find_run(&run)?;
            let format = match format {
                FormatArg::Csv => ExportFormat::Csv,
                FormatArg::Jsonl => ExportFormat::Jsonl,
            };
            let table = match table {
                TableArg::Metrics => ExportTable::Metrics,
                TableArg::Events => ExportTable::Events,
                TableArg::Evals => ExportTable::Evals,
                TableArg::EvalTasks => ExportTable::EvalTasks,
            };
            let sink_name = out.as_ref().map_or_else(
                || "standard output".to_string(),
                |p| p.display().to_string(),
            );
            let spinner = indicatif::ProgressBar::new_spinner()
                .with_message(format!("exporting run {} to {sink_name}", record.id));
            spinner.enable_steady_tick(Duration::from_millis(120));
            let mut bytes = Vec::new();
            let n_rows =
                store::export_rows(&view, record.id, table, format, &mut bytes, &sink_name)?;
            spinner.finish_and_clear();
            emit(out.as_deref(), force, &bytes)?;
            if out.is_some() {
                eprintln!("exported {n_rows} rows of run {} to {sink_name}", record.id);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to standard output, or to `out` through a temporary file and a rename, so an
/// existing file is replaced whole or not at all (and only with `force`).
pub(crate) fn emit(out: Option<&Path>, force: bool, bytes: &[u8]) -> Result<()> {
    let Some(out) = out else {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(bytes)?;
        stdout.flush()?;
        return Ok(());
    };
    if out.exists() && !force {
        bail!(
            "{} already exists; pass --force to replace it",
            out.display()
        );
    }
    envace::fsutil::write_atomically(out, bytes)?;
    Ok(())
}

fn format_time(unix_secs: f64) -> String {
    let time = UNIX_EPOCH + Duration::from_secs_f64(unix_secs.max(0.0));
    humantime::format_rfc3339_seconds(time).to_string()
}

fn format_value(value: f64) -> String {
    if value.is_finite() && value != 0.0 && (value.abs() < 1e-3 || value.abs() >= 1e6) {
        format!("{value:.4e}")
    } else if value.is_finite() {
        format!("{value:.6}")
    } else {
        format!("{value}")
    }
}
