//! The studio's commands: thin calls from the front end into the engine.
//!
//! Each command does one engine call and turns its result into contract types; none holds
//! training or validation logic of its own.

use std::path::{Path, PathBuf};

use envace::config;
use envace::store::Store;
use tauri::State;
use tauri_plugin_dialog::DialogExt;

use crate::StudioState;
use crate::contract::{
    CallView, ConfigCheck, DeviceCheck, DiffLine, Document, Edit, EndpointCheck, EpisodePage,
    EpisodeView, EvalSeries, EvalTaskView, FidelityScores, FieldIssue, GroupMemberView, GroupView,
    MessageView, MetricSeries, PathPick, PendingMcpServer, PresetInfo, RunEvals, RunInfo,
    RunMetrics, RunSetup, StudioError, TurnView, finite,
};
use crate::training::Training;
use envace::controller::{Command, JobSpec};
use envace::rollout::{EndReason, EpisodeRecord, ResponseSource};
use envace::store::RunId;

/// Name the editor's text goes by in engine messages when it has no file.
const UNSAVED: &str = "unsaved config";

/// Validates `toml` with the engine's own validator.
pub fn check(toml: &str) -> ConfigCheck {
    let values = toml::from_str::<serde_json::Value>(toml).unwrap_or(serde_json::Value::Null);
    let issues = match config::parse(toml, UNSAVED) {
        Ok(_) => Vec::new(),
        Err(errors) => errors
            .issues
            .into_iter()
            .map(|issue| FieldIssue {
                path: issue.path,
                line: u32::try_from(issue.line).unwrap_or(u32::MAX),
                column: u32::try_from(issue.column).unwrap_or(u32::MAX),
                message: issue.message,
            })
            .collect(),
    };
    ConfigCheck { issues, values }
}

fn document(toml: String, path: Option<&Path>, preset: Option<&str>) -> Document {
    let check = check(&toml);
    Document {
        toml,
        path: path.map(|p| p.display().to_string()),
        preset: preset.map(str::to_string),
        check,
    }
}

/// The presets, default first.
#[tauri::command]
#[specta::specta]
pub fn presets() -> Vec<PresetInfo> {
    config::PRESETS
        .iter()
        .map(|preset| PresetInfo {
            name: preset.name.to_string(),
            summary: preset.summary.to_string(),
        })
        .collect()
}

/// The config's JSON Schema, which the form is generated from.
#[tauri::command]
#[specta::specta]
pub fn config_schema() -> serde_json::Value {
    config::json_schema().clone()
}

/// Validates a config text.
#[tauri::command]
#[specta::specta]
pub fn check_config(toml: String) -> ConfigCheck {
    check(&toml)
}

/// What the editor opens at start: the `--config` file, or the quickstart preset (to be saved
/// to `--config` when that file does not exist yet).
#[tauri::command]
#[specta::specta]
pub fn initial_document(state: State<'_, StudioState>) -> Result<Document, StudioError> {
    let default = config::PRESETS[0];
    match &state.config_path {
        Some(path) if path.exists() => read_document(path),
        Some(path) => Ok(document(
            default.toml.to_string(),
            Some(path),
            Some(default.name),
        )),
        None => Ok(document(default.toml.to_string(), None, Some(default.name))),
    }
}

fn read_document(path: &Path) -> Result<Document, StudioError> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        StudioError::from_engine("Cannot open the config", &envace::Error::io(path, err))
    })?;
    let preset = config::PRESETS
        .iter()
        .find(|preset| preset.toml == text)
        .map(|preset| preset.name);
    Ok(document(text, Some(path), preset))
}

/// Replaces the editor's text with a preset, keeping the file it saves to.
#[tauri::command]
#[specta::specta]
pub fn open_preset(name: String, path: Option<String>) -> Result<Document, StudioError> {
    let preset = config::preset(&name)
        .map_err(|err| StudioError::from_engine("Cannot open the preset", &err))?;
    Ok(document(
        preset.toml.to_string(),
        path.as_deref().map(Path::new),
        Some(preset.name),
    ))
}

/// Sets one field (a TOML path) to a value, keeping the text's comments and layout.
#[tauri::command]
#[specta::specta]
pub fn set_field(
    toml: String,
    path: Vec<String>,
    value: serde_json::Value,
) -> Result<Edit, StudioError> {
    let keys: Vec<&str> = path.iter().map(String::as_str).collect();
    let toml = config::edit::set_value(&toml, &keys, &value)
        .map_err(|err| StudioError::from_engine("Cannot change the field", &err))?;
    let check = check(&toml);
    Ok(Edit { toml, check })
}

/// Removes one field, so its default applies.
#[tauri::command]
#[specta::specta]
pub fn remove_field(toml: String, path: Vec<String>) -> Result<Edit, StudioError> {
    let keys: Vec<&str> = path.iter().map(String::as_str).collect();
    let toml = config::edit::remove_value(&toml, &keys)
        .map_err(|err| StudioError::from_engine("Cannot remove the field", &err))?;
    let check = check(&toml);
    Ok(Edit { toml, check })
}

/// Saves the text to `path`, or asks where (Save As) when there is none. Returns the path
/// written, or `None` when the person cancelled. The file is replaced whole or not at all.
#[tauri::command]
#[specta::specta]
pub async fn save_config(
    app: tauri::AppHandle,
    toml: String,
    path: Option<String>,
) -> Result<Option<String>, StudioError> {
    let target = match path {
        Some(path) => PathBuf::from(path),
        None => {
            let picked = app
                .dialog()
                .file()
                .add_filter("Experiment config", &["toml"])
                .set_file_name("experiment.toml")
                .blocking_save_file();
            match picked.and_then(|file| file.into_path().ok()) {
                Some(path) => path,
                None => return Ok(None),
            }
        }
    };
    envace::fsutil::write_atomically(&target, toml.as_bytes())
        .map_err(|err| StudioError::from_engine("Cannot save the config", &err))?;
    Ok(Some(target.display().to_string()))
}

/// Asks for a config file and opens it; `None` when the person cancelled.
#[tauri::command]
#[specta::specta]
pub async fn open_config(app: tauri::AppHandle) -> Result<Option<Document>, StudioError> {
    let picked = app
        .dialog()
        .file()
        .add_filter("Experiment config", &["toml"])
        .blocking_pick_file();
    match picked.and_then(|file| file.into_path().ok()) {
        Some(path) => read_document(&path).map(Some),
        None => Ok(None),
    }
}

/// Line diff from `old` to `new`.
fn diff_lines(old: &str, new: &str) -> Vec<DiffLine> {
    let diff = similar::TextDiff::from_lines(old, new);
    diff.iter_all_changes()
        .map(|change| DiffLine {
            kind: match change.tag() {
                similar::ChangeTag::Equal => "same",
                similar::ChangeTag::Insert => "added",
                similar::ChangeTag::Delete => "removed",
            }
            .to_string(),
            text: change.value().trim_end_matches('\n').to_string(),
        })
        .collect()
}

/// Line diff of `toml` against a preset.
#[tauri::command]
#[specta::specta]
pub fn diff_against_preset(toml: String, preset: String) -> Result<Vec<DiffLine>, StudioError> {
    let preset = config::preset(&preset)
        .map_err(|err| StudioError::from_engine("Cannot diff against the preset", &err))?;
    Ok(diff_lines(preset.toml, &toml))
}

/// The runs in the store, newest first.
#[tauri::command]
#[specta::specta]
pub fn list_runs(state: State<'_, StudioState>) -> Result<Vec<RunInfo>, StudioError> {
    if !state.store_path.exists() {
        return Ok(Vec::new());
    }
    let store = Store::open(&state.store_path)
        .map_err(|err| StudioError::from_engine("Cannot open the run store", &err))?;
    let view = store.view();
    let runs = view
        .runs()
        .map_err(|err| StudioError::from_engine("Cannot list the runs", &err))?;
    let mut configs = Vec::with_capacity(runs.len());
    // Runs with the same config text (the same hash) parse once.
    let mut parsed = std::collections::HashMap::<String, Option<config::ExperimentConfig>>::new();
    for run in &runs {
        let id = i32::try_from(run.id.0).unwrap_or(i32::MAX);
        let config = match parsed.get(&run.config_hash) {
            Some(config) => config.clone(),
            None => {
                let record = view.find_run(&run.id.0.to_string()).map_err(|err| {
                    StudioError::from_engine(format!("Cannot read the config of run {id}"), &err)
                })?;
                // A config written by an older build may no longer parse: the run is listed
                // all the same, in an arm of its own and without its settings.
                let config =
                    config::parse(&record.config_toml, &format!("the config of run {id}")).ok();
                parsed.insert(run.config_hash.clone(), config.clone());
                config
            }
        };
        configs.push((id, config));
    }
    let arms = config::seed_arms(&configs);
    let mut imported = Vec::with_capacity(runs.len());
    for run in &runs {
        imported.push(store.imported_from(run.id).map_err(|err| {
            StudioError::from_engine(format!("Cannot read run {}", run.id.0), &err)
        })?);
    }
    Ok(runs
        .into_iter()
        .zip(configs)
        .zip(arms)
        .zip(imported)
        .map(|(((run, (id, config)), arm), imported_from)| RunInfo {
            id,
            name: run.name,
            status: run.status.as_str().to_string(),
            created_at: run.created_at,
            last_step: run.last_step.map(|s| u32::try_from(s).unwrap_or(u32::MAX)),
            setup: config.as_ref().map(run_setup),
            arm,
            imported_from,
        })
        .collect())
}

/// The settings of a run the views group or judge it by.
fn run_setup(config: &config::ExperimentConfig) -> RunSetup {
    RunSetup {
        seed: config.run.seed.to_string(),
        tool_response_mode: config::word(&config.env.tool_response_mode),
        judge: config::word(&config.judge.kind),
    }
}

fn run_id(run: i32) -> RunId {
    RunId(i64::from(run))
}

fn open_store(state: &StudioState, what: &str) -> Result<Store, StudioError> {
    Store::open(&state.store_path).map_err(|err| StudioError::from_engine(what, &err))
}

/// The stdio MCP servers `toml` starts whose exact command lines are not confirmed yet; the
/// training view shows them and asks before it starts the job.
#[tauri::command]
#[specta::specta]
pub fn pending_mcp_servers(toml: String) -> Result<Vec<PendingMcpServer>, StudioError> {
    let config = config::parse(&toml, UNSAVED).map_err(|errors| {
        StudioError::from_engine("Cannot read the config", &envace::Error::Config(errors))
    })?;
    if !config.env.has_stdio_mcp_server() {
        return Ok(Vec::new());
    }
    let path = envace::trust::default_path()
        .map_err(|err| StudioError::from_engine("Cannot find the confirmations", &err))?;
    let pending = envace::trust::pending(&config, &path)
        .map_err(|err| StudioError::from_engine("Cannot read the confirmations", &err))?;
    Ok(pending
        .into_iter()
        .map(|p| PendingMcpServer {
            field: p.field,
            domain: p.domain,
            argv: p.argv,
            command_line: p.command_line,
        })
        .collect())
}

/// Records that the user confirmed running `argv` as an MCP server (shared with `envace
/// config confirm-mcp`).
#[tauri::command]
#[specta::specta]
pub fn confirm_mcp_server(argv: Vec<String>) -> Result<(), StudioError> {
    let path = envace::trust::default_path()
        .map_err(|err| StudioError::from_engine("Cannot find the confirmations", &err))?;
    envace::trust::confirm(&path, &argv)
        .map_err(|err| StudioError::from_engine("Cannot record the confirmation", &err))
}

/// Starts training `toml` on the engine's controller (or continues `resume_run` from its latest
/// checkpoint); progress arrives as `training-event` events. Returns the run.
#[tauri::command]
#[specta::specta]
pub async fn start_training(
    app: tauri::AppHandle,
    state: State<'_, StudioState>,
    training: State<'_, Training>,
    toml: String,
    resume_run: Option<i32>,
) -> Result<i32, StudioError> {
    let source = state
        .config_path
        .as_ref()
        .map_or_else(|| UNSAVED.to_owned(), |path| path.display().to_string());
    let config = config::parse(&toml, &source).map_err(|errors| {
        StudioError::from_engine("Cannot start training", &envace::Error::Config(errors))
    })?;
    training.start(
        app,
        JobSpec {
            config,
            config_toml: toml,
            store_path: state.store_path.clone(),
            resume: resume_run.map(run_id),
        },
    )
}

/// Pauses the training job after its current step.
#[tauri::command]
#[specta::specta]
pub fn pause_training(training: State<'_, Training>) -> Result<i32, StudioError> {
    training.send(Command::Pause, "Cannot pause training")
}

/// Lets a paused training job go on.
#[tauri::command]
#[specta::specta]
pub fn resume_training(training: State<'_, Training>) -> Result<i32, StudioError> {
    training.send(Command::Resume, "Cannot resume training")
}

/// Stops the training job after its current step, with a checkpoint to continue from.
#[tauri::command]
#[specta::specta]
pub fn stop_training(training: State<'_, Training>) -> Result<i32, StudioError> {
    training.send(Command::Stop, "Cannot stop training")
}

/// The run being trained, if any (for a window that opens while a job runs).
#[tauri::command]
#[specta::specta]
pub fn active_training(training: State<'_, Training>) -> Option<i32> {
    training.running()
}

/// Every metric of a run as series over steps, for its charts.
#[tauri::command]
#[specta::specta]
pub async fn run_metrics(
    state: State<'_, StudioState>,
    run: i32,
) -> Result<RunMetrics, StudioError> {
    let what = format!("Cannot read the metrics of run {run}");
    let store = open_store(&state, &what)?;
    let view = store.view();
    let record = view
        .find_run(&run.to_string())
        .map_err(|err| StudioError::from_engine(&what, &err))?;
    let rows = view
        .metrics(run_id(run))
        .map_err(|err| StudioError::from_engine(&what, &err))?;
    let mut series = std::collections::BTreeMap::<String, MetricSeries>::new();
    for row in rows {
        let step = u32::try_from(row.step).unwrap_or(u32::MAX);
        let entry = series
            .entry(row.key.clone())
            .or_insert_with(|| MetricSeries {
                key: row.key,
                steps: Vec::new(),
                values: Vec::new(),
                wall_times: Vec::new(),
            });
        // A step recorded twice (a resumed job repeats it) keeps its newest value.
        if entry.steps.last() == Some(&step) {
            entry.values.pop();
            entry.steps.pop();
            entry.wall_times.pop();
        }
        entry.steps.push(step);
        entry.values.push(finite(row.value));
        entry.wall_times.push(row.wall_time);
    }
    Ok(RunMetrics {
        run,
        name: record.name,
        series: series.into_values().collect(),
    })
}

/// Groups benchmark rows into one series per (benchmark, category, metric); a step recorded
/// twice (a resumed job evaluates it again) keeps its newest value.
pub fn eval_series(rows: Vec<envace::store::EvalRow>) -> Vec<EvalSeries> {
    let mut series = std::collections::BTreeMap::<(String, String, String), EvalSeries>::new();
    let mut rows = rows;
    rows.sort_by(|a, b| {
        a.step
            .cmp(&b.step)
            .then(a.wall_time.total_cmp(&b.wall_time))
    });
    for row in rows {
        let step = u32::try_from(row.step).unwrap_or(u32::MAX);
        let key = (
            row.benchmark.clone(),
            row.category.clone(),
            row.metric.clone(),
        );
        let entry = series.entry(key).or_insert_with(|| EvalSeries {
            benchmark: row.benchmark,
            category: row.category,
            metric: row.metric,
            steps: Vec::new(),
            values: Vec::new(),
            n_tasks: Vec::new(),
        });
        if entry.steps.last() == Some(&step) {
            entry.steps.pop();
            entry.values.pop();
            entry.n_tasks.pop();
        }
        entry.steps.push(step);
        entry.values.push(finite(row.value));
        entry
            .n_tasks
            .push(u32::try_from(row.n_tasks).unwrap_or(u32::MAX));
    }
    series.into_values().collect()
}

/// Every benchmark result of a run, per benchmark, category and metric over steps.
#[tauri::command]
#[specta::specta]
pub async fn run_evals(state: State<'_, StudioState>, run: i32) -> Result<RunEvals, StudioError> {
    let what = format!("Cannot read the benchmark results of run {run}");
    let store = open_store(&state, &what)?;
    let view = store.view();
    view.find_run(&run.to_string())
        .map_err(|err| StudioError::from_engine(&what, &err))?;
    let rows = view
        .eval_results(run_id(run))
        .map_err(|err| StudioError::from_engine(&what, &err))?;
    Ok(RunEvals {
        run,
        series: eval_series(rows),
    })
}

/// The task records of one benchmark of a run at one checkpoint, in the order they ran.
#[tauri::command]
#[specta::specta]
pub async fn run_eval_tasks(
    state: State<'_, StudioState>,
    run: i32,
    benchmark: String,
    step: u32,
) -> Result<Vec<EvalTaskView>, StudioError> {
    let what = format!("Cannot read the {benchmark} tasks of run {run}");
    let store = open_store(&state, &what)?;
    let view = store.view();
    view.find_run(&run.to_string())
        .map_err(|err| StudioError::from_engine(&what, &err))?;
    let rows = view
        .eval_tasks(run_id(run), Some(&benchmark))
        .map_err(|err| StudioError::from_engine(&what, &err))?;
    Ok(rows
        .into_iter()
        .filter(|row| row.step == u64::from(step))
        .map(|row| EvalTaskView {
            task_id: row.task_id,
            trial: u32::try_from(row.trial).unwrap_or(u32::MAX),
            score: row.score.filter(|v| v.is_finite()),
            reason: row.reason,
            record: row.data.to_string(),
        })
        .collect())
}

/// A run's config text as it was started.
#[tauri::command]
#[specta::specta]
pub fn run_config(state: State<'_, StudioState>, run: i32) -> Result<String, StudioError> {
    config_of(&state, run)
}

fn config_of(state: &StudioState, run: i32) -> Result<String, StudioError> {
    let what = format!("Cannot read the config of run {run}");
    let store = open_store(state, &what)?;
    let record = store
        .view()
        .find_run(&run.to_string())
        .map_err(|err| StudioError::from_engine(&what, &err))?;
    Ok(record.config_toml)
}

/// Line diff between the configs of two runs.
#[tauri::command]
#[specta::specta]
pub async fn diff_runs(
    state: State<'_, StudioState>,
    left: i32,
    right: i32,
) -> Result<Vec<DiffLine>, StudioError> {
    let old = config_of(&state, left)?;
    let new = config_of(&state, right)?;
    Ok(diff_lines(&old, &new))
}

fn end_text(end: &EndReason) -> String {
    match end {
        EndReason::FinalAnswer => "final answer".to_owned(),
        EndReason::MaxTurns => "turn limit".to_owned(),
        EndReason::ErrorToolCall { code } => format!("unreadable tool response ({code})"),
        EndReason::TemplateNotIncremental => {
            "the chat template does not render incrementally".to_owned()
        }
        EndReason::Fault { reason } => format!("environment fault: {reason}"),
    }
}

fn source_text(source: ResponseSource) -> &'static str {
    match source {
        ResponseSource::Real => "real",
        ResponseSource::Rehearse => "rehearse",
        ResponseSource::External => "external",
        ResponseSource::Limit => "limit",
    }
}

fn episode_view(step: u64, episode: EpisodeRecord) -> EpisodeView {
    let to_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    EpisodeView {
        step: u32::try_from(step).unwrap_or(u32::MAX),
        episode_idx: to_u32(episode.episode_idx),
        task_id: episode.task_id,
        group: episode.group,
        mode: episode.mode,
        reward: episode.reward.and_then(finite),
        mask_reason: episode.mask_reason,
        end: end_text(&episode.end),
        messages: episode
            .messages
            .into_iter()
            .map(|m| MessageView {
                role: m.role.as_str().to_owned(),
                content: m.content,
            })
            .collect(),
        turns: episode
            .turns
            .into_iter()
            .map(|turn| TurnView {
                turn_idx: to_u32(turn.turn_idx),
                text: turn.text,
                finished: turn.finished,
                calls: turn
                    .calls
                    .into_iter()
                    .map(|call| CallView {
                        call_idx: to_u32(call.call_idx),
                        name: call.name,
                        arguments: call
                            .arguments
                            .or(call.raw.map(serde_json::Value::String))
                            .unwrap_or(serde_json::Value::Null),
                        source: source_text(call.source).to_owned(),
                        response: call.response,
                        real: call.real,
                        simulator_text: call.simulator_text,
                        scores: call.scores.map(|s| FidelityScores {
                            valid_json: s.valid_json,
                            outcome_agrees: s.outcome_agrees,
                            key_f1: s.key_f1,
                            value_accuracy: s.value_accuracy,
                            exact_match: s.exact_match,
                        }),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The episodes a run recorded at `step` (default: its latest step with episodes).
#[tauri::command]
#[specta::specta]
pub async fn run_episodes(
    state: State<'_, StudioState>,
    run: i32,
    step: Option<u32>,
) -> Result<EpisodePage, StudioError> {
    let what = format!("Cannot read the episodes of run {run}");
    let store = open_store(&state, &what)?;
    let view = store.view();
    view.find_run(&run.to_string())
        .map_err(|err| StudioError::from_engine(&what, &err))?;
    let episodes = envace::rollout::load_episodes(&view, run_id(run))
        .map_err(|err| StudioError::from_engine(&what, &err))?;
    let mut steps: Vec<u32> = episodes
        .iter()
        .map(|(s, _)| u32::try_from(*s).unwrap_or(u32::MAX))
        .collect();
    steps.dedup();
    let shown = step.or_else(|| steps.last().copied());
    if let Some(asked) = step
        && !steps.contains(&asked)
    {
        return Err(StudioError::new(
            what,
            format!("run {run} recorded no episodes at step {asked}"),
        ));
    }
    let episodes = episodes
        .into_iter()
        .filter(|(s, _)| shown.is_some_and(|shown| u64::from(shown) == *s))
        .map(|(s, episode)| episode_view(s, episode))
        .collect();
    Ok(EpisodePage {
        steps,
        step: shown,
        episodes,
    })
}

/// One GRPO group of `run` at `step`: its rollouts with their rewards and the advantage each
/// role got, computed by the engine exactly as training did under the run's `[rl]` settings.
#[tauri::command]
#[specta::specta]
pub async fn run_group(
    state: State<'_, StudioState>,
    run: i32,
    step: u32,
    group: String,
) -> Result<GroupView, StudioError> {
    let what = format!("Cannot open GRPO group {group} of run {run} at step {step}");
    let store = open_store(&state, &what)?;
    let view = store.view();
    let record = view
        .find_run(&run.to_string())
        .map_err(|err| StudioError::from_engine(&what, &err))?;
    let config = config::parse(&record.config_toml, &format!("the config of run {run}"))
        .map_err(|errors| StudioError::from_engine(&what, &envace::Error::Config(errors)))?;
    let episodes: Vec<EpisodeRecord> = envace::rollout::load_episodes(&view, run_id(run))
        .map_err(|err| StudioError::from_engine(&what, &err))?
        .into_iter()
        .filter(|(s, _)| *s == u64::from(step))
        .map(|(_, episode)| episode)
        .collect();
    let members = envace::rl::grpo::group_members(&episodes, &group, &config.rl);
    if members.is_empty() {
        return Err(StudioError::new(
            what,
            format!("run {run} recorded no episode of group {group} at step {step}"),
        ));
    }
    let mut by_idx: std::collections::HashMap<usize, EpisodeRecord> = episodes
        .into_iter()
        .filter(|e| e.group == group)
        .map(|e| (e.episode_idx, e))
        .collect();
    let members = members
        .into_iter()
        .filter_map(|member| {
            let episode = by_idx.remove(&member.episode_idx)?;
            Some(GroupMemberView {
                act_advantage: member.act_advantage.and_then(finite),
                rehearse_advantage: member.rehearse_advantage.and_then(finite),
                episode: episode_view(u64::from(step), episode),
            })
        })
        .collect();
    Ok(GroupView {
        run,
        step,
        group,
        baseline: config::word(&config.rl.advantage_baseline),
        divide_by_std: config.rl.divide_by_std,
        members,
    })
}

/// Saves a chart image (PNG, base64) to `path`, or asks where when there is none. Returns the
/// path written, or `None` when the person cancelled.
#[tauri::command]
#[specta::specta]
pub async fn save_png(
    app: tauri::AppHandle,
    png_base64: String,
    name: String,
    path: Option<String>,
) -> Result<Option<String>, StudioError> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(png_base64.as_bytes())
        .map_err(|err| {
            StudioError::new(
                "Cannot save the chart",
                format!("the image of {name} is not base64: {err}"),
            )
        })?;
    if !bytes.starts_with(b"\x89PNG") {
        return Err(StudioError::new(
            "Cannot save the chart",
            format!("the image of {name} is not a PNG"),
        ));
    }
    save_chart_file(&app, &name, ("PNG image", "png"), &bytes, path)
}

/// Saves a chart drawn as SVG text to `path`, or asks where when there is none. Returns the
/// path written, or `None` when the person cancelled.
#[tauri::command]
#[specta::specta]
pub async fn save_svg(
    app: tauri::AppHandle,
    svg: String,
    name: String,
    path: Option<String>,
) -> Result<Option<String>, StudioError> {
    let body = svg.trim_start();
    let body = match body.strip_prefix("<?xml") {
        Some(rest) => rest
            .split_once("?>")
            .map_or("", |(_, after)| after.trim_start()),
        None => body,
    };
    if !body.starts_with("<svg") {
        return Err(StudioError::new(
            "Cannot save the chart",
            format!("the drawing of {name} is not an SVG document"),
        ));
    }
    save_chart_file(&app, &name, ("SVG image", "svg"), svg.as_bytes(), path)
}

/// Writes a chart file atomically to `path`, or where the save dialog (filtered to `kind`:
/// description and extension) says; `None` when the person cancelled.
fn save_chart_file(
    app: &tauri::AppHandle,
    name: &str,
    (description, extension): (&str, &str),
    bytes: &[u8],
    path: Option<String>,
) -> Result<Option<String>, StudioError> {
    let target = match path {
        Some(path) => PathBuf::from(path),
        None => {
            let picked = app
                .dialog()
                .file()
                .add_filter(description, &[extension])
                .set_file_name(format!("{name}.{extension}"))
                .blocking_save_file();
            match picked.and_then(|file| file.into_path().ok()) {
                Some(path) => path,
                None => return Ok(None),
            }
        }
    };
    envace::fsutil::write_atomically(&target, bytes)
        .map_err(|err| StudioError::from_engine("Cannot save the chart", &err))?;
    Ok(Some(target.display().to_string()))
}

/// Checks the endpoint at `path` of the config text (`["judge", "endpoint"]`,
/// `["env", "external"]`): its model list and a one-token chat completion, with the engine's
/// OpenAI client. A failure of the endpoint is a result (`ok: false`), not an error.
#[tauri::command]
#[specta::specta]
pub async fn check_endpoint(toml: String, path: Vec<String>) -> Result<EndpointCheck, StudioError> {
    let endpoint = crate::endpoint_check::endpoint_at(&toml, &path)?;
    let at = path.join(".");
    tauri::async_runtime::spawn_blocking(move || crate::endpoint_check::check(endpoint, &at))
        .await
        .map_err(|err| StudioError::new("Cannot check the connection", err))?
}

/// Checks where the config's training runs and which GPU adapter its wgpu generation would use,
/// opening them as a job does at its start.
#[tauri::command]
#[specta::specta]
pub async fn check_device(toml: String) -> Result<DeviceCheck, StudioError> {
    tauri::async_runtime::spawn_blocking(move || crate::device_check::check(&toml))
        .await
        .map_err(|err| StudioError::new("Cannot check the device", err))?
}

/// Asks for a file or folder for the config field `field` (a dotted TOML path, shown in the
/// dialog's title), starting beside `current` when it names an existing place, else in the
/// config file's folder. Returns the path picked, or `None` when the person cancelled.
#[tauri::command]
#[specta::specta]
pub async fn pick_path(
    app: tauri::AppHandle,
    state: State<'_, StudioState>,
    pick: PathPick,
    field: String,
    current: Option<String>,
) -> Result<Option<String>, StudioError> {
    let mut dialog = app.dialog().file();
    let current = current.map(PathBuf::from).filter(|p| p.exists());
    let start = current
        .and_then(|p| {
            if p.is_dir() {
                Some(p)
            } else {
                p.parent().map(Path::to_path_buf)
            }
        })
        .or_else(|| {
            let folder = state.config_path.as_deref()?.parent()?;
            folder.is_dir().then(|| folder.to_path_buf())
        });
    if let Some(dir) = start {
        dialog = dialog.set_directory(dir);
    }
    let picked = match pick {
        PathPick::Folder => dialog
            .set_title(format!("Choose a folder for {field}"))
            .blocking_pick_folder(),
        PathPick::GgufFile => dialog
            .set_title(format!("Choose a GGUF file for {field}"))
            .add_filter("GGUF model", &["gguf"])
            .blocking_pick_file(),
    };
    Ok(picked
        .and_then(|file| file.into_path().ok())
        .map(|path| path.display().to_string()))
}

/// Stores an API key in the OS keyring under `name`, the environment variable an endpoint's
/// `api_key_env` names; the key never goes into the config.
#[tauri::command]
#[specta::specta]
pub async fn store_api_key(name: String, key: String) -> Result<(), StudioError> {
    tauri::async_runtime::spawn_blocking(move || crate::secrets::store(&name, &key))
        .await
        .map_err(|err| StudioError::new("Cannot store the API key", err))?
}

/// Removes the API key stored under `name`; `false` when none was stored.
#[tauri::command]
#[specta::specta]
pub async fn forget_api_key(name: String) -> Result<bool, StudioError> {
    tauri::async_runtime::spawn_blocking(move || crate::secrets::forget(&name))
        .await
        .map_err(|err| StudioError::new("Cannot remove the API key", err))?
}

#[cfg(test)]
mod tests {
    use envace::store::EvalRow;

    use super::eval_series;

    fn row(step: u64, benchmark: &str, category: &str, metric: &str, value: f64) -> EvalRow {
        EvalRow {
            step,
            benchmark: benchmark.to_owned(),
            category: category.to_owned(),
            metric: metric.to_owned(),
            value,
            n_tasks: 10,
            wall_time: step as f64,
        }
    }

    #[test]
    fn eval_rows_become_one_series_per_benchmark_category_and_metric() {
        let series = eval_series(vec![
            row(4, "bfcl", "simple", "accuracy", 0.5),
            row(2, "bfcl", "simple", "accuracy", 0.25),
            row(2, "tau2_retail", "all", "pass^1", f64::NAN),
            row(4, "bfcl", "simple", "accuracy", 0.75),
            row(2, "bfcl", "multiple", "accuracy", 0.1),
        ]);
        let got: Vec<_> = series
            .iter()
            .map(|s| {
                (
                    format!("{}/{}/{}", s.benchmark, s.category, s.metric),
                    s.steps.clone(),
                    s.values.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "bfcl/multiple/accuracy".to_owned(),
                    vec![2],
                    vec![Some(0.1)]
                ),
                // Step 4 was recorded twice: the newer value stays.
                (
                    "bfcl/simple/accuracy".to_owned(),
                    vec![2, 4],
                    vec![Some(0.25), Some(0.75)]
                ),
                ("tau2_retail/all/pass^1".to_owned(), vec![2], vec![None]),
            ]
        );
    }
}

/// The steps of a run's checkpoints, ascending (what an evaluation can load).
#[tauri::command]
#[specta::specta]
pub async fn run_checkpoints(
    state: State<'_, StudioState>,
    run: i32,
) -> Result<Vec<u32>, StudioError> {
    let what = format!("Cannot read the checkpoints of run {run}");
    let store = open_store(&state, &what)?;
    let rows = store
        .view()
        .checkpoints(run_id(run))
        .map_err(|err| StudioError::from_engine(&what, &err))?;
    Ok(rows
        .into_iter()
        .map(|row| u32::try_from(row.step).unwrap_or(u32::MAX))
        .collect())
}

/// Starts `envace eval` on a run's checkpoint or a model file; progress arrives as
/// `eval-event` events, and the scores are stored in the studio's store when it is done.
#[tauri::command]
#[specta::specta]
pub async fn start_eval(
    app: tauri::AppHandle,
    state: State<'_, StudioState>,
    evaluation: State<'_, crate::evaluation::Evaluation>,
    request: crate::evaluation::EvalRequest,
) -> Result<(), StudioError> {
    evaluation.start(app, &request, &state.store_path)
}

/// Stops the running evaluation (nothing of it is stored); whether one ran.
#[tauri::command]
#[specta::specta]
pub fn stop_eval(evaluation: State<'_, crate::evaluation::Evaluation>) -> bool {
    evaluation.stop()
}

/// Whether an evaluation runs (for a window that opens while one does).
#[tauri::command]
#[specta::specta]
pub fn active_eval(evaluation: State<'_, crate::evaluation::Evaluation>) -> bool {
    evaluation.running()
}
