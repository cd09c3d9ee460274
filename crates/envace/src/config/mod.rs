//! The experiment config: one TOML file describes a whole experiment.
//!
//! The Rust types below are the single source of truth. The JSON Schema that the studio's form
//! editor reads is generated from them ([`json_schema`]), and [`parse`] validates a file against
//! that same schema before the cross-field rules run, so every error names the TOML path and
//! its line:column, and all of them are reported at once. Defaults follow the reference run of
//! the EnvACE paper (Qwen3-8B, lr 1e-6, 16 prompts × group 4, KL k3 at 1e-4, up to 30 turns)
//! wherever that makes sense; the model defaults to a tiny one so a config runs anywhere.
//!
//! Secrets never live in the file: endpoints name the environment variable that holds the key
//! (`api_key_env`), and a literal `api_key` is rejected.

pub mod edit;
mod presets;
mod validate;

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use presets::{PRESETS, Preset, preset, preset_names};
pub use validate::{ConfigErrors, ConfigIssue, json_schema, json_schema_value, parse, parse_file};

/// A config enum's name as its TOML spells it (`rehearse`, `role_wise`, `cpu`), unquoted; empty
/// for a value that is not a plain word.
pub fn word<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The arm of each run `(id, parsed config)`: runs whose configs are equal once `[run].seed`
/// and `[run].name` are set aside (they differ only in seed) share the smallest id among
/// them; a run whose config did not parse is an arm of its own. The studio's compare view and
/// the monitor group seeds by it.
pub fn seed_arms<Id: Copy + Ord>(runs: &[(Id, Option<ExperimentConfig>)]) -> Vec<Id> {
    let bare: Vec<Option<ExperimentConfig>> = runs
        .iter()
        .map(|(_, config)| {
            config.clone().map(|mut config| {
                config.run.seed = 0;
                config.run.name = String::new();
                config
            })
        })
        .collect();
    runs.iter()
        .zip(&bare)
        .map(|((id, _), mine)| match mine {
            None => *id,
            Some(mine) => runs
                .iter()
                .zip(&bare)
                .filter(|(_, other)| other.as_ref() == Some(mine))
                .map(|((other, _), _)| *other)
                .min()
                .unwrap_or(*id),
        })
        .collect()
}

/// A whole experiment: what to train, on what, how, and how to evaluate it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "EnvACE experiment")]
pub struct ExperimentConfig {
    /// The run's name, seed and checkpointing.
    pub run: RunConfig,
    /// Which policy model to train: a tiny one from scratch, a Hugging Face folder or a GGUF file.
    #[serde(default)]
    pub model: ModelConfig,
    /// Where the model runs.
    #[serde(default)]
    pub backend: BackendConfig,
    /// The environments, the tasks and how tool calls are answered.
    #[serde(default)]
    pub env: EnvConfig,
    /// Who decides whether a task was solved.
    #[serde(default)]
    pub judge: JudgeConfig,
    /// Supervised warm start on oracle trajectories, before RL.
    #[serde(default)]
    pub sft: SftConfig,
    /// Role-wise GRPO.
    #[serde(default)]
    pub rl: RlConfig,
    /// Test-time private rehearsal before each committed action.
    #[serde(default)]
    pub rehearsal: RehearsalConfig,
    /// Benchmarks run during and after training.
    #[serde(default)]
    pub eval: EvalConfig,
    /// Start from another run's checkpoint instead of new or pretrained weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<InitConfig>,
}

/// `[init]`: the policy starts from a checkpoint of another run (its weights, tokenizer and
/// few-shot response cache), e.g. every RL arm of a comparison from the same SFT checkpoint.
/// `[model]` then only names the architecture family the checkpoint must have been trained
/// with; its sizes are the checkpoint's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InitConfig {
    /// The run: its id or its name (the newest run with that name).
    #[schemars(length(min = 1))]
    pub run: String,
    /// The step of the checkpoint; the run's latest checkpoint when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
    /// The run store holding that run; the store this run is written to when absent. A
    /// relative path resolves against the config file's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<PathBuf>,
}

/// `[run]`: identity and bookkeeping of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Name shown in the run list; letters, digits, `.`, `_` and `-`, up to 64 characters.
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"))]
    pub name: String,
    /// Free-text note about what this experiment tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Seed for every random choice: task sampling, initialisation, sampling, mixing.
    #[serde(default)]
    pub seed: u64,
    /// Save a checkpoint every this many optimizer steps (and always when a run stops).
    #[serde(default = "defaults::checkpoint_interval_steps")]
    #[schemars(range(min = 1))]
    pub checkpoint_interval_steps: u32,
    /// Keep only the newest this many checkpoints of the run on disk: older ones are deleted
    /// as new ones land (a tiny model's checkpoint with its optimizer state is about 50 MB).
    /// 0 keeps every checkpoint.
    #[serde(default = "defaults::keep_checkpoints")]
    pub keep_checkpoints: u32,
}

/// Where the policy's weights come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelSource {
    /// A small model built from `[model.tiny]` and trained from scratch, with its own BPE tokenizer.
    #[default]
    Tiny,
    /// A Hugging Face folder: config.json, *.safetensors, tokenizer.json, tokenizer_config.json.
    Hf,
    /// A single GGUF file.
    Gguf,
}

/// How GGUF weights are held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GgufWeights {
    /// Dequantised to the backend dtype: trainable.
    #[default]
    Dequantize,
    /// Kept quantised: fast and small, inference only.
    Quantized,
}

/// Model architecture family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Architecture {
    /// Qwen3: q/k norm, GQA, RoPE, RMSNorm, SwiGLU.
    #[default]
    Qwen3,
    /// Llama (covers SmolLM2).
    Llama,
}

/// `[model]`: the policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Where the weights come from.
    #[serde(default)]
    pub source: ModelSource,
    /// The Hugging Face folder (`hf`) or GGUF file (`gguf`); relative paths resolve against the
    /// config file's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// For `gguf`: dequantise for training or keep quantised for inference only.
    #[serde(default)]
    pub gguf_weights: GgufWeights,
    /// Architecture and sizes of a `tiny` model.
    #[serde(default)]
    pub tiny: TinyModelConfig,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            source: ModelSource::Tiny,
            path: None,
            gguf_weights: GgufWeights::Dequantize,
            tiny: TinyModelConfig::default(),
        }
    }
}

/// `[model.tiny]`: a small model trained from scratch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TinyModelConfig {
    /// Architecture family.
    #[serde(default)]
    pub architecture: Architecture,
    /// Width of the residual stream.
    #[serde(default = "defaults::hidden_size")]
    #[schemars(range(min = 8, max = 8192))]
    pub hidden_size: u32,
    /// Number of transformer blocks.
    #[serde(default = "defaults::n_layers")]
    #[schemars(range(min = 1, max = 128))]
    pub n_layers: u32,
    /// Attention heads; must divide `hidden_size`.
    #[serde(default = "defaults::n_heads")]
    #[schemars(range(min = 1, max = 128))]
    pub n_heads: u32,
    /// Key/value heads (grouped-query attention); must divide `n_heads`.
    #[serde(default = "defaults::n_kv_heads")]
    #[schemars(range(min = 1, max = 128))]
    pub n_kv_heads: u32,
    /// Width of the SwiGLU feed-forward layer.
    #[serde(default = "defaults::intermediate_size")]
    #[schemars(range(min = 8, max = 65536))]
    pub intermediate_size: u32,
    /// Tokenizer vocabulary size; the BPE tokenizer is trained on the task corpus to this size.
    #[serde(default = "defaults::vocab_size")]
    #[schemars(range(min = 300, max = 262144))]
    pub vocab_size: u32,
    /// Longest sequence (prompt + response) the model handles, in tokens.
    #[serde(default = "defaults::max_position_embeddings")]
    #[schemars(range(min = 64, max = 1048576))]
    pub max_position_embeddings: u32,
    /// RoPE base frequency.
    #[serde(default = "defaults::rope_theta")]
    #[schemars(range(min = 1.0))]
    pub rope_theta: f64,
    /// Share the input embedding with the output head.
    #[serde(default = "defaults::yes")]
    pub tie_embeddings: bool,
    /// Tokenize every digit alone (as SmolLM2 does). Off, the trained BPE may merge digits, so a
    /// number is one or a few tokens and copying it from the request takes fewer steps.
    #[serde(default = "defaults::yes")]
    pub split_digits: bool,
}

impl Default for TinyModelConfig {
    fn default() -> Self {
        TinyModelConfig {
            architecture: Architecture::Qwen3,
            hidden_size: defaults::hidden_size(),
            n_layers: defaults::n_layers(),
            n_heads: defaults::n_heads(),
            n_kv_heads: defaults::n_kv_heads(),
            intermediate_size: defaults::intermediate_size(),
            vocab_size: defaults::vocab_size(),
            max_position_embeddings: defaults::max_position_embeddings(),
            rope_theta: defaults::rope_theta(),
            tie_embeddings: true,
            split_digits: true,
        }
    }
}

/// Compute device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Device {
    /// CUDA when compiled in and present, else CPU.
    #[default]
    Auto,
    /// The CPU.
    Cpu,
    /// An NVIDIA GPU (needs a build with the `cuda` feature).
    Cuda,
    /// wgpu compute (Vulkan, Metal, DX12) for rehearsal: training stays on the CPU and RL's
    /// rehearsed responses generate on wgpu, as `rehearse_generation = "wgpu"` places them.
    Wgpu,
}

/// Floating-point type of weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// 32-bit float.
    #[default]
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half precision.
    F16,
}

/// `[backend]`: where the model runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// Compute device.
    #[serde(default)]
    pub device: Device,
    /// Weights and activations dtype.
    #[serde(default)]
    pub dtype: Dtype,
    /// Which CUDA device to use when there are several.
    #[serde(default)]
    pub cuda_device_index: u32,
    /// CPU threads for the model; 0 uses every core.
    #[serde(default)]
    #[schemars(range(max = 1024))]
    pub n_threads: u32,
    /// Where RL rollouts generate the acting turns.
    #[serde(default)]
    pub act_generation: GenerationPlacement,
    /// Where RL rollouts generate the rehearsed tool responses.
    #[serde(default)]
    pub rehearse_generation: GenerationPlacement,
    /// For `wgpu` placements: part of the adapter's name, to pick one among several; empty
    /// takes the best (a discrete GPU before an integrated one, a CPU adapter last).
    #[serde(default)]
    pub wgpu_adapter: String,
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            device: Device::Auto,
            dtype: Dtype::F32,
            cuda_device_index: 0,
            n_threads: 0,
            act_generation: GenerationPlacement::Model,
            rehearse_generation: GenerationPlacement::Model,
            wgpu_adapter: String::new(),
        }
    }
}

impl BackendConfig {
    /// Whether any role generates through wgpu.
    pub fn uses_wgpu(&self) -> bool {
        self.act_placement() == GenerationPlacement::Wgpu
            || self.rehearse_placement() == GenerationPlacement::Wgpu
    }

    /// Where RL generates the acting turns.
    pub fn act_placement(&self) -> GenerationPlacement {
        self.act_generation
    }

    /// Where RL generates the rehearsed responses: `rehearse_generation`, or wgpu when the
    /// device is `wgpu`.
    pub fn rehearse_placement(&self) -> GenerationPlacement {
        if self.device == Device::Wgpu {
            GenerationPlacement::Wgpu
        } else {
            self.rehearse_generation
        }
    }
}

/// Where one role's generation runs during RL rollouts; training always runs on `device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GenerationPlacement {
    /// With the model on `device` (candle, or our CPU kernels).
    #[default]
    Model,
    /// On a GPU through wgpu (Vulkan, Metal or DX12; lavapipe on a machine without one), with
    /// the policy's weights copied there and refreshed after every optimizer step.
    Wgpu,
}

/// A built-in environment domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Domain {
    /// τ²-bench retail: orders, exchanges, returns, user look-ups.
    Retail,
    /// τ²-bench airline: reservations, flights, baggage, cancellations.
    Airline,
    /// Stateless BFCL-style functions: single, multiple and parallel calls.
    Functions,
}

/// Where training tasks come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskSource {
    /// Procedurally generated tasks with rule-judged checklists, seeded and reproducible.
    #[default]
    Generated,
    /// The τ²-bench task files in `data_dir`.
    Tau2,
}

/// A split of the task set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskSplit {
    /// Training tasks.
    #[default]
    Train,
    /// Validation tasks (disjoint from train and test).
    Validation,
    /// Held-out test tasks.
    Test,
}

/// How a tool call made during training gets its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolResponseMode {
    /// The real environment executes every call.
    Real,
    /// World rehearsal: the policy itself plays the environment.
    #[default]
    Rehearse,
    /// An external simulator behind an OpenAI-compatible endpoint (`[env.external]`).
    External,
    /// Rehearse with probability `mix_ratio`, else the real environment.
    Mixed,
}

/// Where the few-shot examples of rehearse prompts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FewShotSource {
    /// Real responses of the SFT corpus (offline data), fixed once SFT has built them: the
    /// real environment never reaches a rehearse prompt during RL (as in the reference).
    #[default]
    Offline,
    /// Also every real response seen during RL (real calls and fidelity replays).
    Live,
}

/// How much of the tools' descriptions the prompts carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolPrompt {
    /// Every tool's JSON schema in the system turn (through the chat template) and the called
    /// tool's schema in rehearse prompts: what pretrained models expect.
    #[default]
    Schemas,
    /// One line of tool names instead of schemas: short prompts for tiny models trained from
    /// scratch, which learn the tools from the oracle and cannot read schemas.
    Names,
}

/// `[env]`: environments, tasks and tool responses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvConfig {
    /// Domains tasks are drawn from.
    #[serde(default = "defaults::domains")]
    #[schemars(length(min = 1), extend("uniqueItems" = true))]
    pub domains: Vec<Domain>,
    /// Generated tasks or the τ²-bench task files.
    #[serde(default)]
    pub task_source: TaskSource,
    /// Folder with the τ²-bench domain data (`retail/`, `airline/`, each with db.json,
    /// tasks.json, policy.md, split_tasks.json); relative paths resolve against the config file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// Split the training rollouts draw from.
    #[serde(default)]
    pub task_split: TaskSplit,
    /// Difficulty of generated tasks, from one-call look-ups (1) to multi-step writes with checks (5).
    #[serde(default = "defaults::difficulty")]
    #[schemars(range(min = 1, max = 5))]
    pub difficulty: u32,
    /// Most assistant turns in one episode.
    #[serde(default = "defaults::max_turns")]
    #[schemars(range(min = 1, max = 256))]
    pub max_turns: u32,
    /// Most tool calls the policy may make in one turn.
    #[serde(default = "defaults::max_parallel_calls")]
    #[schemars(range(min = 1, max = 64))]
    pub max_parallel_calls: u32,
    /// How tool calls are answered during training.
    #[serde(default)]
    pub tool_response_mode: ToolResponseMode,
    /// In `mixed` mode, the probability that a call is rehearsed rather than executed.
    #[serde(default = "defaults::mix_ratio")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub mix_ratio: f64,
    /// Real responses of the same tool shown to the rehearse role as examples.
    #[serde(default = "defaults::n_few_shot")]
    #[schemars(range(max = 16))]
    pub n_few_shot: u32,
    /// Tool schemas or only tool names in the act and rehearse prompts.
    #[serde(default)]
    pub tool_prompt: ToolPrompt,
    /// Where rehearse prompts' few-shot examples come from: the SFT corpus only (`offline`)
    /// or also the real responses seen during RL (`live`). Fidelity is measured either way.
    #[serde(default)]
    pub few_shot_source: FewShotSource,
    /// Generated task families to draw from (e.g. `["fn_arithmetic", "fn_units_named"]`,
    /// `envace config families` lists them); empty draws every family `difficulty` allows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("uniqueItems" = true))]
    pub families: Vec<String>,
    /// The external simulator, required when `tool_response_mode = "external"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<EndpointConfig>,
    /// MCP servers that are the real environment of a domain: every real tool call of an
    /// episode (rollouts, fidelity replays, evaluations) goes to the server instead of the
    /// built-in domain, while tasks, their oracles and the rule judge stay built-in. A stdio
    /// server's command runs only after the user has confirmed its exact command line once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServerConfig>,
}

/// `[[env.mcp_servers]]`: an MCP server answering one domain's tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The domain whose tools the server offers (it must list every one of them).
    pub domain: Domain,
    /// A stdio server: the program and its arguments, run in the job's working directory
    /// after the user confirms this exact command line (once; a changed line asks again).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("items" = {"type": "string", "minLength": 1}))]
    pub command: Vec<String>,
    /// A streamable-HTTP server instead of a command, e.g. `http://127.0.0.1:8931/mcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^https?://[^\s/]+"))]
    pub url: Option<String>,
    /// Seconds to wait for the server to start and for each tool call.
    #[serde(default = "defaults::mcp_timeout_secs")]
    #[schemars(range(min = 0.1, max = 3600.0))]
    pub timeout_secs: f64,
}

impl EnvConfig {
    /// Whether an `[[env.mcp_servers]]` entry starts a local command (stdio), which must be
    /// confirmed before a job spawns it (see `trust`).
    pub fn has_stdio_mcp_server(&self) -> bool {
        self.mcp_servers.iter().any(|s| !s.command.is_empty())
    }
}

impl Default for EnvConfig {
    fn default() -> Self {
        EnvConfig {
            domains: defaults::domains(),
            task_source: TaskSource::Generated,
            data_dir: None,
            task_split: TaskSplit::Train,
            difficulty: defaults::difficulty(),
            max_turns: defaults::max_turns(),
            max_parallel_calls: defaults::max_parallel_calls(),
            tool_response_mode: ToolResponseMode::Rehearse,
            mix_ratio: defaults::mix_ratio(),
            n_few_shot: defaults::n_few_shot(),
            tool_prompt: ToolPrompt::default(),
            few_shot_source: FewShotSource::default(),
            families: Vec::new(),
            external: None,
            mcp_servers: Vec::new(),
        }
    }
}

/// An OpenAI-compatible chat-completions endpoint (vLLM, SGLang, Ollama, llama.cpp server, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// Base URL, e.g. `http://127.0.0.1:8000/v1`.
    #[schemars(pattern(r"^https?://[^\s/]+"))]
    pub url: String,
    /// Model name sent in each request.
    #[schemars(length(min = 1))]
    pub model: String,
    /// Name of the environment variable holding the API key (the key itself never goes in the file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^[A-Za-z_][A-Za-z0-9_]*$"))]
    pub api_key_env: Option<String>,
    /// Seconds to wait for one response.
    #[serde(default = "defaults::timeout_secs")]
    #[schemars(range(min = 0.1, max = 3600.0))]
    pub timeout_secs: f64,
    /// Retries after a failed call, with exponential backoff.
    #[serde(default = "defaults::max_retries")]
    #[schemars(range(max = 20))]
    pub max_retries: u32,
    /// Most requests in flight at once.
    #[serde(default = "defaults::max_concurrency")]
    #[schemars(range(min = 1, max = 1024))]
    pub max_concurrency: u32,
}

/// Which judge scores checklists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JudgeKind {
    /// Rules: required calls and arguments, facts communicated, final state.
    #[default]
    Rule,
    /// An LLM behind an OpenAI-compatible endpoint, returning a strict JSON verdict.
    Llm,
}

/// `[judge]`: who decides each checklist standard.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JudgeConfig {
    /// Rule judge or LLM judge.
    #[serde(default)]
    pub kind: JudgeKind,
    /// The LLM judge's endpoint, required when `kind = "llm"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<EndpointConfig>,
}

/// `[sft]`: supervised warm start on oracle trajectories.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SftConfig {
    /// Run the warm start before RL.
    #[serde(default)]
    pub enabled: bool,
    /// Optimizer steps.
    #[serde(default = "defaults::sft_n_steps")]
    #[schemars(range(min = 1))]
    pub n_steps: u32,
    /// Oracle trajectories to generate for training.
    #[serde(default = "defaults::sft_n_tasks")]
    #[schemars(range(min = 1))]
    pub n_tasks: u32,
    /// Peak learning rate.
    #[serde(default = "defaults::sft_lr")]
    #[schemars(range(max = 1.0), extend("exclusiveMinimum" = 0.0))]
    pub lr: f64,
    /// Sequences per optimizer step.
    #[serde(default = "defaults::sft_batch_size")]
    #[schemars(range(min = 1))]
    pub batch_size: u32,
    /// Sequences per forward/backward pass; must divide `batch_size`.
    #[serde(default = "defaults::sft_micro_batch_size")]
    #[schemars(range(min = 1))]
    pub micro_batch_size: u32,
    /// Which roles learn: `act` learns the oracle's turns, `rehearse` learns to reproduce real
    /// tool responses.
    #[serde(default = "defaults::both_roles")]
    #[schemars(length(min = 1), extend("uniqueItems" = true))]
    pub roles: Vec<PolicyRole>,
    /// Schedule after the warm-up (the first 5% of steps): `constant`, or `cosine` decay to
    /// `lr × min_lr_ratio` at the last step.
    #[serde(default)]
    pub lr_schedule: LrSchedule,
    /// With `cosine`, the final learning rate as a fraction of `lr`.
    #[serde(default = "defaults::sft_min_lr_ratio")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_lr_ratio: f64,
    /// With both roles trained, the fraction of each batch's sequences that are rehearse
    /// samples (the rest are act samples). Unset, batches follow the samples' own mix (about
    /// one rehearse sample per tool call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub rehearse_share: Option<f64>,
    /// Linear warm-up steps; the first 5% of `n_steps` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_steps: Option<u32>,
    /// Fraction of tasks whose act sample is also trained with a rehearsal memory before the
    /// request (imagined attempts: the oracle's own and deliberately wrong calls with their
    /// real errors), so that the policy learns to act on one at test time.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub memory_share: f64,
    /// Generated task families of the SFT corpus; empty takes `[env].families`. A narrower
    /// list leaves the other families to RL alone, learnt from reward with no demonstration
    /// (e.g. single calls here, multi-call tasks in RL and in the held-out evaluation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("uniqueItems" = true))]
    pub families: Vec<String>,
}

impl Default for SftConfig {
    fn default() -> Self {
        SftConfig {
            enabled: false,
            n_steps: defaults::sft_n_steps(),
            n_tasks: defaults::sft_n_tasks(),
            lr: defaults::sft_lr(),
            batch_size: defaults::sft_batch_size(),
            micro_batch_size: defaults::sft_micro_batch_size(),
            roles: defaults::both_roles(),
            lr_schedule: LrSchedule::default(),
            min_lr_ratio: defaults::sft_min_lr_ratio(),
            rehearse_share: None,
            warmup_steps: None,
            memory_share: 0.0,
            families: Vec::new(),
        }
    }
}

/// One of the policy's two roles.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum PolicyRole {
    /// Emits assistant turns and tool calls.
    Act,
    /// Plays the environment: predicts each tool's response.
    Rehearse,
}

impl PolicyRole {
    /// Both roles, act first.
    pub const BOTH: [PolicyRole; 2] = [PolicyRole::Act, PolicyRole::Rehearse];
}

/// How GRPO advantages are baselined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AdvantageBaseline {
    /// Mean over the same prompt and role (EnvACE).
    #[default]
    RoleWise,
    /// Mean over the same prompt, both roles pooled (plain GRPO).
    Pooled,
}

/// What GRPO's advantages are computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RlReward {
    /// The episode's score: the share of checklist standards met (partial credit).
    #[default]
    Score,
    /// 1 when the episode succeeded (score 1), else 0: near misses earn nothing, so a group
    /// whose rollouts all fail carries no advantage (and dynamic sampling drops it).
    Success,
}

impl RlReward {
    /// The training reward of an episode scored `score`.
    pub fn of(self, score: f64) -> f64 {
        match self {
            RlReward::Score => score,
            // The held-out evaluation's success threshold (`eval::heldout::is_success`).
            RlReward::Success => f64::from(u8::from(score >= 1.0 - 1e-9)),
        }
    }
}

/// Which reward each role's samples of an episode train with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RlCredit {
    /// Both roles get the episode's score (DESIGN.md §1, as published).
    #[default]
    Episode,
    /// Each role is judged on its own work, a departure from the paper: the act role by the
    /// better of the episode's score and the episode judged with its final answer read against
    /// the tool responses it was shown (a faithful report of a wrong rehearsed result counts as
    /// right, and so does the real result the act role worked out itself), the rehearse role
    /// by each response's fidelity to the real environment's answer for the same call (value
    /// accuracy; exact match under `reward = "success"`). Episodes answered by the real
    /// environment score the same either way.
    Role,
}

/// KL estimator against the frozen reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KlType {
    /// k1: log-ratio.
    K1,
    /// k2: half squared log-ratio.
    K2,
    /// k3: low-variance `exp(-x) - 1 + x` (the reference run).
    #[default]
    K3,
    /// No KL term.
    None,
}

/// Learning-rate schedule after warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LrSchedule {
    /// Constant after warm-up (the reference run).
    #[default]
    Constant,
    /// Cosine decay to `lr × min_lr_ratio`.
    Cosine,
}

/// `[rl]`: role-wise GRPO.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RlConfig {
    /// Optimizer steps; 0 skips RL.
    #[serde(default = "defaults::rl_n_steps")]
    pub n_steps: u32,
    /// Prompts per optimizer step.
    #[serde(default = "defaults::rl_batch_size")]
    #[schemars(range(min = 1))]
    pub batch_size: u32,
    /// Rollouts per prompt.
    #[serde(default = "defaults::group_size")]
    #[schemars(range(min = 2, max = 256))]
    pub group_size: u32,
    /// Trajectories per forward/backward pass; must divide `batch_size × group_size`.
    #[serde(default = "defaults::rl_micro_batch_size")]
    #[schemars(range(min = 1))]
    pub micro_batch_size: u32,
    /// What advantages are computed from: the episode's score (partial credit) or its
    /// success alone. Held-out evaluation and the stored rewards are always the score.
    #[serde(default)]
    pub reward: RlReward,
    /// Which reward each role trains with: the episode's (both roles), or each role's own
    /// (act judged against what it was shown, rehearse by fidelity).
    #[serde(default)]
    pub credit: RlCredit,
    /// Advantage baseline: per (prompt, role), or per prompt.
    #[serde(default)]
    pub advantage_baseline: AdvantageBaseline,
    /// Divide advantages by the group's standard deviation (the reference run does not: Dr.GRPO).
    #[serde(default)]
    pub divide_by_std: bool,
    /// PPO clip below 1: ratios under `1 - clip_ratio_low` are clipped.
    #[serde(default = "defaults::clip_ratio")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub clip_ratio_low: f64,
    /// PPO clip above 1: ratios over `1 + clip_ratio_high` are clipped.
    #[serde(default = "defaults::clip_ratio")]
    #[schemars(range(min = 0.0, max = 10.0))]
    pub clip_ratio_high: f64,
    /// KL estimator against the frozen reference.
    #[serde(default)]
    pub kl_type: KlType,
    /// KL coefficient.
    #[serde(default = "defaults::kl_coef")]
    #[schemars(range(min = 0.0, max = 10.0))]
    pub kl_coef: f64,
    /// Entropy bonus coefficient.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub entropy_coef: f64,
    /// Peak learning rate.
    #[serde(default = "defaults::rl_lr")]
    #[schemars(range(max = 1.0), extend("exclusiveMinimum" = 0.0))]
    pub lr: f64,
    /// Schedule after warm-up.
    #[serde(default)]
    pub lr_schedule: LrSchedule,
    /// Linear warm-up steps; at most `n_steps`.
    #[serde(default)]
    pub warmup_steps: u32,
    /// With `cosine`, the final learning rate as a fraction of `lr`.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_lr_ratio: f64,
    /// AdamW weight decay.
    #[serde(default = "defaults::weight_decay")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub weight_decay: f64,
    /// Clip the global gradient norm to this value.
    #[serde(default = "defaults::grad_clip")]
    #[schemars(range(max = 1e6), extend("exclusiveMinimum" = 0.0))]
    pub grad_clip: f64,
    /// Sampling temperature for rollouts.
    #[serde(default = "defaults::temperature")]
    #[schemars(range(max = 5.0), extend("exclusiveMinimum" = 0.0))]
    pub temperature: f64,
    /// Nucleus sampling threshold for rollouts.
    #[serde(default = "defaults::top_p")]
    #[schemars(range(max = 1.0), extend("exclusiveMinimum" = 0.0))]
    pub top_p: f64,
    /// Longest prompt, in tokens (left-truncated beyond).
    #[serde(default = "defaults::max_prompt_tokens")]
    #[schemars(range(min = 16))]
    pub max_prompt_tokens: u32,
    /// Longest generation, in tokens: one assistant turn or one rehearsed tool response.
    #[serde(default = "defaults::max_response_tokens")]
    #[schemars(range(min = 16))]
    pub max_response_tokens: u32,
    /// Roles whose tokens are not trained (e.g. `["act"]` for the caller-frozen variant).
    #[serde(default)]
    #[schemars(extend("uniqueItems" = true))]
    pub frozen_roles: Vec<PolicyRole>,
    /// Keep SFT's AdamW moments for RL (weight decay switched to `weight_decay`) instead of
    /// starting RL with fresh ones; with `[init]`, the checkpoint's moments when it has them.
    #[serde(default)]
    pub carry_optimizer: bool,
    /// Dynamic sampling (a departure from the paper, after DAPO): a group whose rewards are
    /// all equal carries no advantage, so it is dropped and the next prompts of the pool are
    /// rolled out until `batch_size` groups carry a signal or every prompt of the pool was
    /// tried in this step, or `max_sampling_rounds` rounds of rollouts were run.
    #[serde(default)]
    pub dynamic_sampling: bool,
    /// Under dynamic sampling, at most this many rounds of rollouts per step before the
    /// memory round of `memory_share` (which comes on top): a step whose groups rarely carry a
    /// signal then trains on the groups it found (fewer than `batch_size`) instead of rolling
    /// out round after round; `rl/rollout_rounds` and `rl/dropped_groups` show when it binds.
    #[serde(default = "defaults::max_sampling_rounds")]
    #[schemars(range(min = 1))]
    pub max_sampling_rounds: u32,
    /// Fraction of each step's groups rolled out a second time with a rehearsal memory of the
    /// first rollouts (their own group for the baseline), so that RL also
    /// trains acting on a memory.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub memory_share: f64,
    /// Tasks in the RL pool that steps draw their prompts from; absent, 16 × `batch_size`
    /// (at least 64). A pool the steps revisit often can be memorised: success on it rises
    /// while held-out success does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub n_tasks: Option<u32>,
}

impl RlConfig {
    /// The RL pool's size: `n_tasks`, else 16 × `batch_size` (at least 64).
    pub fn pool_size(&self) -> usize {
        self.n_tasks
            .map_or((self.batch_size as usize * 16).max(64), |n| n as usize)
    }
}

impl Default for RlConfig {
    fn default() -> Self {
        RlConfig {
            n_steps: defaults::rl_n_steps(),
            batch_size: defaults::rl_batch_size(),
            group_size: defaults::group_size(),
            micro_batch_size: defaults::rl_micro_batch_size(),
            advantage_baseline: AdvantageBaseline::RoleWise,
            divide_by_std: false,
            clip_ratio_low: defaults::clip_ratio(),
            clip_ratio_high: defaults::clip_ratio(),
            kl_type: KlType::K3,
            kl_coef: defaults::kl_coef(),
            entropy_coef: 0.0,
            lr: defaults::rl_lr(),
            lr_schedule: LrSchedule::Constant,
            warmup_steps: 0,
            min_lr_ratio: 0.0,
            weight_decay: defaults::weight_decay(),
            grad_clip: defaults::grad_clip(),
            temperature: defaults::temperature(),
            top_p: defaults::top_p(),
            max_prompt_tokens: defaults::max_prompt_tokens(),
            max_response_tokens: defaults::max_response_tokens(),
            frozen_roles: Vec::new(),
            carry_optimizer: false,
            dynamic_sampling: false,
            max_sampling_rounds: defaults::max_sampling_rounds(),
            reward: RlReward::Score,
            credit: RlCredit::Episode,
            memory_share: 0.0,
            n_tasks: None,
        }
    }
}

/// Test-time private rehearsal mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RehearsalMode {
    /// Act directly.
    #[default]
    Off,
    /// N independent imagined attempts.
    Parallel,
    /// N attempts, each seeing the earlier ones and revising.
    Sequential,
}

/// `[rehearsal]`: private rehearsal at test time. Before its one committed attempt at a
/// held-out task the policy rehearses imagined attempts (it acts and plays the tools itself;
/// nothing is executed), condenses them into a memory, and then acts for real with that
/// memory in the act prompt (`memory_position`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RehearsalConfig {
    /// How held-out evaluations rehearse: off (act directly), parallel or sequential. (The
    /// held-out generated tasks rehearse; the benchmark runners are not built yet.)
    #[serde(default)]
    pub mode: RehearsalMode,
    /// Imagined attempts before the committed attempt at a task.
    #[serde(default = "defaults::rehearsal_budget")]
    #[schemars(range(min = 1, max = 64))]
    pub budget: u32,
    /// Longest condensed rehearsal memory, in tokens; it must leave room for the request in
    /// the act prompt (`rl.max_prompt_tokens`). N attempts share it equally; an attempt whose
    /// whole line does not fit its share is shown without its calls' arguments.
    #[serde(default = "defaults::max_memory_tokens")]
    #[schemars(range(min = 16))]
    pub max_memory_tokens: u32,
    /// Budgets of the rehearsal-budget curves: after the last step the held-out tasks are
    /// evaluated once per budget and style (parallel and sequential), next to the plain
    /// evaluation (budget 0). Empty: no curves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("uniqueItems" = true))]
    pub budget_curve: Vec<u32>,
    /// Evaluate the rehearsal-budget curves on only the first this many held-out tasks (all
    /// when absent): each point costs N imagined attempts per task. With fewer tasks than the
    /// plain evaluation, the curves get their own N = 0 point on the same tasks
    /// (`rehearsal/<style>/0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub curve_max_tasks: Option<u32>,
    /// Where a memory goes in the act prompt, in training (`memory_share`) and at test time:
    /// just before the request (the request stays next to the turn that acts on it; a long
    /// context keeps the system turn and loses the memory first, then the request) or just
    /// after it (the system turn and the request are always kept).
    #[serde(default)]
    pub memory_position: MemoryPosition,
}

impl Default for RehearsalConfig {
    fn default() -> Self {
        RehearsalConfig {
            mode: RehearsalMode::Off,
            budget: defaults::rehearsal_budget(),
            max_memory_tokens: defaults::max_memory_tokens(),
            budget_curve: Vec::new(),
            curve_max_tasks: None,
            memory_position: MemoryPosition::default(),
        }
    }
}

/// Where a rehearsal memory goes in the act prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemoryPosition {
    /// A user turn just before the request.
    #[default]
    BeforeRequest,
    /// A user turn just after the request.
    AfterRequest,
}

/// A benchmark the studio evaluates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Benchmark {
    /// Held-out generated tasks (test split), rule-judged; needs no data folder.
    GeneratedTest,
    /// BFCL-v4 simple (Python, Java, JavaScript), AST checking.
    BfclSimple,
    /// BFCL-v4 multiple.
    BfclMultiple,
    /// BFCL-v4 parallel.
    BfclParallel,
    /// BFCL-v4 parallel multiple.
    BfclParallelMultiple,
    /// BFCL-v4 irrelevance.
    BfclIrrelevance,
    /// BFCL-v4 multi-turn base.
    BfclMultiTurn,
    /// τ²-bench retail: DB-state and communicate rewards, pass^k.
    Tau2Retail,
    /// τ²-bench airline.
    Tau2Airline,
    /// VitaBench delivery, rubric judge.
    VitabenchDelivery,
}

impl Benchmark {
    /// Whether the benchmark reads files from `eval.data_dir`.
    pub fn needs_data_dir(self) -> bool {
        !matches!(self, Benchmark::GeneratedTest)
    }
}

/// `[eval]`: benchmarks during and after training.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvalConfig {
    /// Benchmarks to run.
    #[serde(default = "defaults::benchmarks")]
    #[schemars(extend("uniqueItems" = true))]
    pub benchmarks: Vec<Benchmark>,
    /// Evaluate every this many RL steps, and always after the last one; 0 evaluates only
    /// after the last one.
    #[serde(default = "defaults::eval_interval_steps")]
    pub interval_steps: u32,
    /// Evaluate on the held-out tasks every this many SFT steps too (at the start of the
    /// step, like RL's evaluations, so the curve shows SFT's progress); 0: SFT is evaluated
    /// only where RL starts.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sft_interval_steps: u32,
    /// Trials per held-out task: above 1, besides the greedy attempt each task is attempted
    /// this many times sampled at `[rl].temperature`, and pass@k is reported for k = 1, 2, 4,
    /// 8 up to `n_trials` (pass^k for the τ²-bench runner).
    #[serde(default = "defaults::n_trials")]
    #[schemars(range(min = 1, max = 64))]
    pub n_trials: u32,
    /// Evaluate at most this many tasks per benchmark (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tasks: Option<u32>,
    /// Folder with the benchmark data (`bfcl/`, `tau2-bench/`, `vitabench/`); relative paths
    /// resolve against the config file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
}

/// Whether an optional count is left at 0 (it is then not written out).
fn is_zero(value: &u32) -> bool {
    *value == 0
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            benchmarks: defaults::benchmarks(),
            interval_steps: defaults::eval_interval_steps(),
            sft_interval_steps: 0,
            n_trials: defaults::n_trials(),
            max_tasks: None,
            data_dir: None,
        }
    }
}

impl ExperimentConfig {
    /// Makes every relative path absolute against `base` (the config file's folder).
    pub fn resolve_paths(&mut self, base: &Path) {
        let init_store = self.init.as_mut().and_then(|init| init.store.as_mut());
        for path in [
            self.model.path.as_mut(),
            self.env.data_dir.as_mut(),
            self.eval.data_dir.as_mut(),
            init_store,
        ]
        .into_iter()
        .flatten()
        {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
    }

    /// The config as TOML text, every default written out.
    pub fn to_toml(&self) -> Result<String, crate::Error> {
        toml::to_string_pretty(self).map_err(|err| crate::Error::Data {
            source_name: format!("config of run {:?}", self.run.name),
            message: format!("cannot write as TOML: {err}"),
        })
    }
}

/// Default values, one function per field so serde and `Default` share them.
mod defaults {
    use super::{Benchmark, Domain, PolicyRole};

    pub fn yes() -> bool {
        true
    }
    pub fn checkpoint_interval_steps() -> u32 {
        50
    }
    pub fn keep_checkpoints() -> u32 {
        3
    }
    pub fn hidden_size() -> u32 {
        256
    }
    pub fn n_layers() -> u32 {
        4
    }
    pub fn n_heads() -> u32 {
        4
    }
    pub fn n_kv_heads() -> u32 {
        2
    }
    pub fn intermediate_size() -> u32 {
        768
    }
    pub fn vocab_size() -> u32 {
        4096
    }
    pub fn max_position_embeddings() -> u32 {
        16384
    }
    pub fn rope_theta() -> f64 {
        1_000_000.0
    }
    pub fn domains() -> Vec<Domain> {
        vec![Domain::Retail, Domain::Airline]
    }
    pub fn difficulty() -> u32 {
        2
    }
    pub fn max_turns() -> u32 {
        30
    }
    pub fn max_parallel_calls() -> u32 {
        4
    }
    pub fn mix_ratio() -> f64 {
        0.5
    }
    pub fn n_few_shot() -> u32 {
        2
    }
    pub fn timeout_secs() -> f64 {
        60.0
    }
    pub fn mcp_timeout_secs() -> f64 {
        30.0
    }
    pub fn max_retries() -> u32 {
        3
    }
    pub fn max_concurrency() -> u32 {
        8
    }
    pub fn sft_n_steps() -> u32 {
        200
    }
    pub fn sft_n_tasks() -> u32 {
        2000
    }
    pub fn sft_lr() -> f64 {
        1e-5
    }
    pub fn sft_min_lr_ratio() -> f64 {
        0.1
    }
    pub fn sft_batch_size() -> u32 {
        16
    }
    pub fn sft_micro_batch_size() -> u32 {
        4
    }
    pub fn both_roles() -> Vec<PolicyRole> {
        PolicyRole::BOTH.to_vec()
    }
    pub fn rl_n_steps() -> u32 {
        200
    }
    pub fn rl_batch_size() -> u32 {
        16
    }
    pub fn group_size() -> u32 {
        4
    }
    pub fn rl_micro_batch_size() -> u32 {
        8
    }
    pub fn clip_ratio() -> f64 {
        0.2
    }
    pub fn kl_coef() -> f64 {
        1e-4
    }
    pub fn rl_lr() -> f64 {
        1e-6
    }
    pub fn weight_decay() -> f64 {
        0.01
    }
    pub fn grad_clip() -> f64 {
        1.0
    }
    pub fn temperature() -> f64 {
        1.0
    }
    pub fn top_p() -> f64 {
        1.0
    }
    pub fn max_sampling_rounds() -> u32 {
        16
    }
    pub fn max_prompt_tokens() -> u32 {
        4096
    }
    pub fn max_response_tokens() -> u32 {
        8192
    }
    pub fn rehearsal_budget() -> u32 {
        4
    }
    pub fn max_memory_tokens() -> u32 {
        1024
    }
    pub fn benchmarks() -> Vec<Benchmark> {
        vec![Benchmark::GeneratedTest]
    }
    pub fn eval_interval_steps() -> u32 {
        50
    }
    pub fn n_trials() -> u32 {
        1
    }
}
