//! The typed contract between the studio's Rust host and its web front end.
//!
//! Every type that crosses the bridge is declared here once (all of them flow from Rust to the
//! front end, so they only serialize); `ui/src/bindings.ts` is generated
//! from these declarations and the commands (see `tests/bindings.rs`).

use serde::{Deserialize, Serialize};
use specta::Type;

/// A preset experiment the editor can start from.
#[derive(Debug, Clone, Serialize, Type)]
pub struct PresetInfo {
    /// Name, e.g. `quickstart`.
    pub name: String,
    /// One line on what it is for.
    pub summary: String,
}

/// One problem in a config, located for the editor.
#[derive(Debug, Clone, PartialEq, Serialize, Type)]
pub struct FieldIssue {
    /// Dotted TOML path (`rl.lr`, `env.domains[1]`); empty for syntax errors.
    pub path: String,
    /// 1-based line in the TOML text.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// What is wrong.
    pub message: String,
}

/// The engine's verdict on a config text.
#[derive(Debug, Clone, Serialize, Type)]
pub struct ConfigCheck {
    /// Every problem, in file order; empty when valid.
    pub issues: Vec<FieldIssue>,
    /// The TOML's values as JSON (what the form shows); `null` when the TOML does not parse.
    pub values: serde_json::Value,
}

/// A config open in the editor.
#[derive(Debug, Clone, Serialize, Type)]
pub struct Document {
    /// The TOML text.
    pub toml: String,
    /// The file it is saved to, if any.
    pub path: Option<String>,
    /// The preset it started from, for the diff view.
    pub preset: Option<String>,
    /// The validator's verdict on `toml`.
    pub check: ConfigCheck,
}

/// One line of a diff between two config texts.
#[derive(Debug, Clone, PartialEq, Serialize, Type)]
pub struct DiffLine {
    /// `same`, `added` or `removed`.
    pub kind: String,
    /// The line's text.
    pub text: String,
}

/// A run in the store, for the run list.
#[derive(Debug, Clone, Serialize, Type)]
pub struct RunInfo {
    /// Store id.
    pub id: i32,
    /// Name from its config.
    pub name: String,
    /// `created`, `running`, `paused`, `stopped`, `finished` or `failed`.
    pub status: String,
    /// Creation time, Unix seconds.
    pub created_at: f64,
    /// Highest step with a metric.
    pub last_step: Option<u32>,
    /// What its config sets that the views need; `None` when the stored config no longer
    /// parses.
    pub setup: Option<RunSetup>,
    /// Its arm: the smallest id among the runs whose configs equal its own once `[run].seed`
    /// and `[run].name` are set aside (runs that differ only in seed share one); its own id
    /// when its config no longer parses.
    pub arm: i32,
    /// The cluster run folder it was imported from (`envace import verl`); `None` for a run
    /// trained here.
    pub imported_from: Option<String>,
}

/// A few settings of a run's config, for the views that group or judge runs by them.
#[derive(Debug, Clone, PartialEq, Serialize, Type)]
pub struct RunSetup {
    /// `[run].seed`, as text (a u64 may not fit a JavaScript number).
    pub seed: String,
    /// `[env].tool_response_mode`: `real`, `rehearse`, `external` or `mixed`.
    pub tool_response_mode: String,
    /// `[judge].kind`: `rule` or `llm`.
    pub judge: String,
}

/// A stdio MCP server a config starts whose command line the user has not confirmed yet.
#[derive(Debug, Clone, PartialEq, Serialize, Type)]
pub struct PendingMcpServer {
    /// Where the config names it, e.g. `env.mcp_servers[0]`.
    pub field: String,
    /// The domain it answers.
    pub domain: String,
    /// The program and its arguments, exactly as they will run.
    pub argv: Vec<String>,
    /// The same as one shell-quoted line, for the user to read.
    pub command_line: String,
}

/// An engine failure as the front end shows it: what failed, and the file or field at fault.
#[derive(Debug, Clone, Serialize, Type)]
pub struct StudioError {
    /// What failed, in a few words (`Cannot save the config`).
    pub what: String,
    /// The engine's message, naming the file, field or value.
    pub detail: String,
    /// The file concerned, if any.
    pub file: Option<String>,
    /// The config field concerned, if any (dotted TOML path).
    pub field: Option<String>,
}

impl StudioError {
    /// An error with no file or field.
    pub fn new(what: impl Into<String>, detail: impl ToString) -> Self {
        StudioError {
            what: what.into(),
            detail: detail.to_string(),
            file: None,
            field: None,
        }
    }

    /// From an engine error, picking out the file or field it names.
    pub fn from_engine(what: impl Into<String>, err: &envace::Error) -> Self {
        let mut out = StudioError::new(what, err);
        match err {
            envace::Error::Io { path, .. }
            | envace::Error::Store { path, .. }
            | envace::Error::StoreFormat { path, .. } => {
                out.file = Some(path.display().to_string());
            }
            envace::Error::ConfigEdit { path, .. } => out.field = Some(path.clone()),
            envace::Error::Config(errors) => {
                out.file = Some(errors.source_name.clone());
                out.field = errors.issues.first().map(|issue| issue.path.clone());
            }
            _ => {}
        }
        out
    }
}

/// A config text after an edit, with the validator's verdict.
#[derive(Debug, Clone, Serialize, Type)]
pub struct Edit {
    /// The new TOML text.
    pub toml: String,
    /// The validator's verdict on it.
    pub check: ConfigCheck,
}

/// What the training job reports, forwarded from the engine's controller as it happens.
///
/// Emitted to the window as the `training-event` event; metric values that are not finite
/// arrive as `null`.
#[derive(Debug, Clone, Serialize, Type, tauri_specta::Event)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TrainingEvent {
    /// The job's run exists in the store.
    Started {
        /// The run.
        run: i32,
        /// Whether it continues from a checkpoint.
        resumed: bool,
    },
    /// A phase begins.
    Phase {
        /// `sft` or `rl`.
        phase: String,
        /// First step of the phase (over the whole job).
        first_step: u32,
        /// Steps in the phase.
        n_steps: u32,
    },
    /// A step finished.
    Step {
        /// The run.
        run: i32,
        /// `sft` or `rl`.
        phase: String,
        /// The step (over the whole job).
        step: u32,
        /// Total steps of the job.
        total_steps: u32,
        /// The step's metrics by key (`act/reward`, `sft/loss`, …).
        metrics: std::collections::BTreeMap<String, Option<f64>>,
        /// Trained tokens per second in this step.
        tokens_per_sec: Option<f64>,
        /// Estimated seconds to the end of the job.
        eta_secs: Option<f64>,
        /// When the host relayed the step, in seconds since the Unix epoch (as stored rows'
        /// `wall_time`).
        wall_time: f64,
    },
    /// A log line.
    Log {
        /// `info`, `warn` or `error`.
        level: String,
        /// The line.
        message: String,
    },
    /// A held-out evaluation finished; its rows are in the store (`run_evals`).
    Eval {
        /// The run.
        run: i32,
        /// The step it evaluates the policy after.
        step: u32,
        /// The benchmark, e.g. `generated_test`.
        benchmark: String,
        /// Its figures (`score`, `success`); `null` where not finite.
        metrics: std::collections::BTreeMap<String, Option<f64>>,
    },
    /// A checkpoint was written.
    Checkpoint {
        /// Last completed step.
        step: u32,
        /// Its folder.
        path: String,
    },
    /// The job is paused between steps.
    Paused,
    /// The job goes on after a pause.
    Resumed,
    /// The job ended.
    Finished {
        /// The run.
        run: i32,
        /// `finished`, `stopped` or `failed`.
        status: String,
        /// For a failure: what failed, naming the file, field or value.
        error: Option<StudioError>,
    },
}

/// A finite number, or `None` (NaN and infinities do not survive JSON).
pub fn finite(value: f64) -> Option<f64> {
    value.is_finite().then_some(value)
}

impl TrainingEvent {
    /// The studio's form of an engine event of `run`.
    pub fn from_engine(run: i32, event: envace::controller::Event) -> Self {
        use envace::controller::Event;
        match event {
            Event::Started { run, resumed } => TrainingEvent::Started {
                run: i32::try_from(run).unwrap_or(i32::MAX),
                resumed,
            },
            Event::Phase {
                phase,
                first_step,
                n_steps,
            } => TrainingEvent::Phase {
                phase: phase.as_str().to_owned(),
                first_step,
                n_steps,
            },
            Event::Step {
                phase,
                step,
                total_steps,
                metrics,
                tokens_per_sec,
                eta_secs,
            } => TrainingEvent::Step {
                run,
                phase: phase.as_str().to_owned(),
                step,
                total_steps,
                metrics: metrics.into_iter().map(|(k, v)| (k, finite(v))).collect(),
                tokens_per_sec: finite(tokens_per_sec),
                eta_secs: finite(eta_secs),
                wall_time: envace::store::now_secs(),
            },
            Event::Log { level, message } => TrainingEvent::Log { level, message },
            Event::Eval {
                step,
                benchmark,
                metrics,
                ..
            } => TrainingEvent::Eval {
                run,
                step,
                benchmark,
                metrics: metrics.into_iter().map(|(k, v)| (k, finite(v))).collect(),
            },
            Event::Checkpoint { step, path } => TrainingEvent::Checkpoint { step, path },
            Event::Paused => TrainingEvent::Paused,
            Event::Resumed => TrainingEvent::Resumed,
            Event::Finished { status, message } => TrainingEvent::Finished {
                run,
                status,
                error: message.map(|detail| StudioError::new("Training failed", detail)),
            },
        }
    }
}

/// One metric of a run over its steps.
#[derive(Debug, Clone, PartialEq, Serialize, Type)]
pub struct MetricSeries {
    /// Metric key, e.g. `act/reward`.
    pub key: String,
    /// Steps, ascending.
    pub steps: Vec<u32>,
    /// One value per step; `null` where it was not finite.
    pub values: Vec<Option<f64>>,
    /// When each value was recorded, in seconds since the Unix epoch (the wall-time axis).
    pub wall_times: Vec<f64>,
}

/// Every metric a run recorded, for charts.
#[derive(Debug, Clone, Serialize, Type)]
pub struct RunMetrics {
    /// The run.
    pub run: i32,
    /// Its name.
    pub name: String,
    /// One series per metric key, sorted by key.
    pub series: Vec<MetricSeries>,
}

/// Fidelity of a rehearsed response against the real one.
#[derive(Debug, Clone, Serialize, Type)]
pub struct FidelityScores {
    /// The rehearsed answer parsed as JSON.
    pub valid_json: bool,
    /// Same outcome (the same error code, or both successes).
    pub outcome_agrees: bool,
    /// F1 of the key-path sets.
    pub key_f1: f64,
    /// Fraction of real leaf values matched.
    pub value_accuracy: f64,
    /// Equal JSON.
    pub exact_match: bool,
}

/// One tool call of a turn and how it was answered.
#[derive(Debug, Clone, Serialize, Type)]
pub struct CallView {
    /// Position in the turn.
    pub call_idx: u32,
    /// Tool name; `None` for a malformed call block.
    pub name: Option<String>,
    /// Arguments, or the raw block of a malformed call.
    pub arguments: serde_json::Value,
    /// Who answered: `real`, `rehearse`, `external` or `limit`.
    pub source: String,
    /// The answer the acting policy saw.
    pub response: serde_json::Value,
    /// The real environment's answer to the same call in the same state, for non-real answers.
    pub real: Option<serde_json::Value>,
    /// What the simulator wrote, for rehearsed and external answers.
    pub simulator_text: Option<String>,
    /// Fidelity of `response` against `real`.
    pub scores: Option<FidelityScores>,
}

/// One assistant turn.
#[derive(Debug, Clone, Serialize, Type)]
pub struct TurnView {
    /// Turn index, from 0.
    pub turn_idx: u32,
    /// The generated text.
    pub text: String,
    /// Whether generation stopped at a stop token.
    pub finished: bool,
    /// The calls and their answers.
    pub calls: Vec<CallView>,
}

/// One chat message of the acting conversation.
#[derive(Debug, Clone, Serialize, Type)]
pub struct MessageView {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text exactly as the model saw it.
    pub content: String,
}

/// One recorded episode, for the episode viewer.
#[derive(Debug, Clone, Serialize, Type)]
pub struct EpisodeView {
    /// Training step it was sampled at.
    pub step: u32,
    /// Index in its batch.
    pub episode_idx: u32,
    /// The task.
    pub task_id: String,
    /// Its GRPO group: the episodes of the step with the same prompt (memory groups end in
    /// `#memory`).
    pub group: String,
    /// How tool calls were answered (`real`, `rehearse`, `external`, `mixed`).
    pub mode: String,
    /// The judge's score; `None` when masked.
    pub reward: Option<f64>,
    /// Why it is left out of training, if it is.
    pub mask_reason: Option<String>,
    /// Why it ended, in words.
    pub end: String,
    /// The acting conversation.
    pub messages: Vec<MessageView>,
    /// The assistant turns with their calls.
    pub turns: Vec<TurnView>,
}

/// The episodes of one step of a run.
#[derive(Debug, Clone, Serialize, Type)]
pub struct EpisodePage {
    /// Every step of the run that recorded episodes, ascending.
    pub steps: Vec<u32>,
    /// The step shown (the one asked for, else the latest); `None` when the run has none.
    pub step: Option<u32>,
    /// Its episodes.
    pub episodes: Vec<EpisodeView>,
}

/// What a connection check of an endpoint (LLM judge, external simulator) found.
#[derive(Debug, Clone, Serialize, Type)]
pub struct EndpointCheck {
    /// The endpoint answered a one-token chat completion with its model.
    pub ok: bool,
    /// The URL of the chat completion, or of the request that failed.
    pub url: String,
    /// The model ids the endpoint lists (`GET {url}/models`); empty when it lists none.
    pub models: Vec<String>,
    /// Whether the configured model is among `models`; `None` when none are listed.
    pub model_listed: Option<bool>,
    /// Why the model list could not be read (the chat may work all the same).
    pub models_error: Option<String>,
    /// Milliseconds the one-token chat completion took, when it succeeded.
    pub latency_ms: Option<f64>,
    /// One line for the person: what answered and how fast, or what failed, naming the URL
    /// and the HTTP status.
    pub summary: String,
}

/// What the editor's "Check device" found for the config's `[backend]`.
#[derive(Debug, Clone, Serialize, Type)]
pub struct DeviceCheck {
    /// Every device the config asks for opened.
    pub ok: bool,
    /// Where training runs, in words; `None` when that device does not open.
    pub training: Option<String>,
    /// The wgpu adapter generation will use (name, type and backend), when a role is placed on
    /// wgpu and an adapter opened.
    pub adapter: Option<String>,
    /// One line for the person: where training and each role's generation run, or what failed.
    pub summary: String,
}

/// What a config field's Browse button asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "snake_case")]
pub enum PathPick {
    /// A folder: a Hugging Face model folder, a data folder.
    Folder,
    /// A GGUF model file.
    GgufFile,
}

/// One benchmark metric of a run over its evaluated checkpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Type)]
pub struct EvalSeries {
    /// Benchmark, e.g. `tau2_retail` or `generated_test`.
    pub benchmark: String,
    /// Category within it (`all` for the whole benchmark).
    pub category: String,
    /// Metric, e.g. `pass^1`, `accuracy`, `score`.
    pub metric: String,
    /// Steps of the evaluated weights, ascending.
    pub steps: Vec<u32>,
    /// One value per step; `null` where it was not finite.
    pub values: Vec<Option<f64>>,
    /// Tasks each value was computed over.
    pub n_tasks: Vec<u32>,
}

/// One task of a benchmark evaluation at a checkpoint (the store's `eval_tasks`).
#[derive(Debug, Clone, PartialEq, Serialize, Type)]
pub struct EvalTaskView {
    /// The benchmark's task id.
    pub task_id: String,
    /// 0-based trial.
    pub trial: u32,
    /// 1 or 0 for a checker's verdict, the reward of a conversation; `null` when masked.
    pub score: Option<f64>,
    /// Why it scored so (empty for full marks).
    pub reason: String,
    /// The whole record as JSON text: the prompt or conversation, the model's calls, the
    /// expected calls or the reward's components.
    pub record: String,
}

/// Every benchmark result a run recorded (the store's `eval_results`), for its charts.
#[derive(Debug, Clone, Serialize, Type)]
pub struct RunEvals {
    /// The run.
    pub run: i32,
    /// One series per (benchmark, category, metric), sorted by them.
    pub series: Vec<EvalSeries>,
}

/// One rollout of a GRPO group with the advantage each role got in training.
#[derive(Debug, Clone, Serialize, Type)]
pub struct GroupMemberView {
    /// The advantage of its act sample; `None` when it has none (or is masked).
    pub act_advantage: Option<f64>,
    /// The mean advantage of its rehearse samples; `None` when it has none (or is masked).
    pub rehearse_advantage: Option<f64>,
    /// The episode itself.
    pub episode: EpisodeView,
}

/// One GRPO group of a step: its rollouts side by side, as the step's loss saw them.
#[derive(Debug, Clone, Serialize, Type)]
pub struct GroupView {
    /// The run.
    pub run: i32,
    /// The step.
    pub step: u32,
    /// The group (the task id; memory groups end in `#memory`).
    pub group: String,
    /// `[rl].advantage_baseline`: `role_wise` or `pooled`.
    pub baseline: String,
    /// `[rl].divide_by_std`.
    pub divide_by_std: bool,
    /// The rollouts, in episode order.
    pub members: Vec<GroupMemberView>,
}

/// What "Export for cluster…" did: the launcher folder written for the reference verl
/// trainer, or why not (settings to provide, a folder that is not empty).
#[derive(Debug, Clone, PartialEq, Serialize, Type)]
pub struct VerlExport {
    /// Whether the folder was written.
    pub written: bool,
    /// The folder.
    pub out_dir: String,
    /// The files written, relative to the folder.
    pub files: Vec<String>,
    /// Settings with no equivalent in the reference, one sentence each.
    pub warnings: Vec<String>,
    /// Training tasks converted.
    pub n_train: u32,
    /// Validation tasks converted.
    pub n_validation: u32,
    /// Hydra overrides `run.sh` passes.
    pub n_overrides: u32,
    /// The settings (keys of `VERL_SET_KEYS`) the engine asked for: missing from the config,
    /// or given with a value it refused.
    pub missing: Vec<String>,
    /// The folder holds files and overwriting them was not confirmed.
    pub not_empty: bool,
    /// The engine's message when nothing was written.
    pub problem: Option<String>,
}

/// What "Import cluster run…" added to the run store.
#[derive(Debug, Clone, PartialEq, Serialize, Type)]
pub struct VerlImport {
    /// The run the folder is stored as.
    pub run: i32,
    /// Its name.
    pub name: String,
    /// The folder read (as stored in the run).
    pub source: String,
    /// Whether this import created the run (a first import).
    pub created: bool,
    /// Trajectories added.
    pub trajectories: u32,
    /// Metric rows added.
    pub metrics: u32,
    /// Lines not imported, each `file:line: reason`.
    pub skipped: Vec<String>,
}
