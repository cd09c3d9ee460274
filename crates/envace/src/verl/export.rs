//! `envace export verl`: the launcher folder for the reference's checklist trainer.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::parquet::{Field, write_rows};
use super::{CALLER_AGENT, REFERENCE_COMMIT, SIMULATOR_AGENT};
use crate::chat::{Message, Role, parse_tool_calls};
use crate::config::{
    AdvantageBaseline, Benchmark, Device, Dtype, ExperimentConfig, FewShotSource,
    GenerationPlacement, JudgeKind, KlType, LrSchedule, ModelSource, PolicyRole, RehearsalMode,
    RlCredit, RlReward, ToolPrompt, ToolResponseMode,
};
use crate::error::{Error, Result};
use crate::tasks::{GenSources, GenTask};

/// The settings `--set KEY=VALUE` may give, with what each one is.
pub const SET_KEYS: &[(&str, &str)] = &[
    (
        "model_path",
        "the Hugging Face model folder on the cluster (REFERENCE_MODEL_PATH); needed unless [model].source = \"hf\"",
    ),
    (
        "simulator_model_path",
        "the rehearsing role's initial model folder (SIMULATOR_MODEL_PATH); the same as model_path when absent",
    ),
    (
        "judge_url",
        "the LLM judge's OpenAI-compatible base URL, e.g. http://judge:10001/v1; needed unless [judge].kind = \"llm\"",
    ),
    (
        "judge_model",
        "the LLM judge's model name (LLM_AS_A_JUDGE_NAME); Qwen/Qwen3-30B-A3B when absent",
    ),
    (
        "nnodes",
        "training nodes (trainer_nnodes); 2 when absent, as in the reference",
    ),
    (
        "gpus_per_node",
        "GPUs per node (num_gpus_per_node); 8 when absent, as in the reference",
    ),
];

/// What to export besides the config.
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// `--set KEY=VALUE` settings (keys of [`SET_KEYS`]).
    pub sets: BTreeMap<String, String>,
    /// Replace the files of a folder that is not empty.
    pub force: bool,
}

/// The tasks to convert.
#[derive(Debug, Clone, Copy)]
pub struct ExportInput<'a> {
    /// The training prompts (the RL pool, in order).
    pub train: &'a [Arc<GenTask>],
    /// The validation prompts (the held-out tasks).
    pub validation: &'a [Arc<GenTask>],
    /// Where the τ²-bench domains' tools come from.
    pub sources: &'a GenSources,
}

/// What an export wrote and what it could not carry over.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportReport {
    /// The folder written.
    pub out_dir: PathBuf,
    /// The files written, relative to `out_dir`.
    pub files: Vec<String>,
    /// Settings with no equivalent in the reference, one sentence each.
    pub warnings: Vec<String>,
    /// Every Hydra override key `run.sh` passes (without the `+` prefix).
    pub override_keys: Vec<String>,
    /// Every environment variable `run.sh` reads with a default.
    pub env_vars: Vec<String>,
    /// Rows of `data/train.parquet`.
    pub n_train: usize,
    /// Rows of `data/validation.parquet`.
    pub n_validation: usize,
}

/// The columns of the checklist dataset, as the reference's `ChecklistDataset`
/// (`agent_system/dataset/checklist_dataset.py`) and `MCPChecklistTool`
/// (`agent_system/environments/env_package/checklist/mcp_tool.py`) read them.
pub fn dataset_fields() -> Vec<Field> {
    let short_message = || Field::Group("element", vec![Field::Str("role"), Field::Str("content")]);
    let tool_call = Field::Group(
        "element",
        vec![
            Field::Str("id"),
            Field::Str("type"),
            Field::Group(
                "function",
                vec![Field::Str("name"), Field::Str("arguments")],
            ),
        ],
    );
    let full_message = Field::Group(
        "element",
        vec![
            Field::Str("role"),
            Field::Str("content"),
            Field::List("tool_calls", Box::new(tool_call)),
        ],
    );
    let standard = Field::Group(
        "element",
        vec![
            Field::Str("question"),
            Field::Str("focus_on"),
            Field::Str("pass_condition"),
            Field::List("failure_examples", Box::new(Field::Str("element"))),
            Field::Float("weight"),
            Field::Bool("required_for_next_turn"),
        ],
    );
    let turns = Field::List(
        "element",
        Box::new(Field::List("element", Box::new(standard))),
    );
    vec![
        Field::Str("data_source"),
        Field::Str("ability"),
        Field::List("messages", Box::new(short_message())),
        Field::Group(
            "extra_info",
            vec![
                Field::Int("index"),
                Field::Int("original_index"),
                Field::Str("split"),
                Field::Str("task_id"),
                Field::Str("domain"),
                Field::Str("family"),
                Field::Str("tools"),
                Field::List("messages", Box::new(full_message)),
                Field::Group(
                    "interaction_kwargs",
                    vec![Field::List("checklist_list", Box::new(turns))],
                ),
            ],
        ),
    ]
}

/// A config value printed as Hydra reads it.
fn num(value: f64) -> String {
    if value == value.trunc() && value.abs() < 1e15 {
        format!("{value:.1}")
    } else {
        value.to_string()
    }
}

fn py_bool(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

/// Text inside a double-quoted shell string.
fn sh_quote(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if matches!(c, '"' | '\\' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The settings resolved from the config and `--set`, or every missing one at once.
#[derive(Debug)]
struct Resolved {
    model_path: String,
    simulator_model_path: Option<String>,
    judge_backend: &'static str,
    judge_urls: String,
    judge_model: String,
    judge_key_env: Option<String>,
    judge_timeout: f64,
    judge_retry: u32,
    judge_semaphore: u32,
    nnodes: String,
    gpus_per_node: String,
}

fn resolve(
    config: &ExperimentConfig,
    config_dir: &Path,
    sets: &BTreeMap<String, String>,
) -> Result<Resolved> {
    let mut missing = Vec::new();
    let mut problems = Vec::new();
    for key in sets.keys() {
        if !SET_KEYS.iter().any(|(known, _)| known == key) {
            let known: Vec<&str> = SET_KEYS.iter().map(|(k, _)| *k).collect();
            problems.push(format!(
                "--set {key}: unknown setting (known: {})",
                known.join(", ")
            ));
        }
    }
    let model_path = match (
        sets.get("model_path"),
        config.model.source,
        &config.model.path,
    ) {
        (Some(path), _, _) => path.clone(),
        // A path inside the config's folder stays relative to the folder's copy of it.
        (None, ModelSource::Hf, Some(path)) => match path.strip_prefix(config_dir) {
            Ok(inside) if !config_dir.as_os_str().is_empty() => {
                format!("$HERE/{}", inside.display())
            }
            _ => path.display().to_string(),
        },
        (None, source, _) => {
            let why = match source {
                ModelSource::Tiny => {
                    "[model].source = \"tiny\" (a model trained from scratch) has no verl equivalent"
                }
                ModelSource::Gguf => {
                    "[model].source = \"gguf\": verl loads Hugging Face folders, not GGUF files"
                }
                ModelSource::Hf => "[model].path is not set",
            };
            missing.push(format!(
                "--set model_path=DIR ({why}; the Hugging Face folder on the cluster)"
            ));
            String::new()
        }
    };
    let endpoint = match config.judge.kind {
        JudgeKind::Llm => config.judge.endpoint.as_ref(),
        JudgeKind::Rule => None,
    };
    let judge_url = match (sets.get("judge_url"), endpoint) {
        (Some(url), _) => url.clone(),
        (None, Some(endpoint)) => endpoint.url.clone(),
        (None, None) => {
            missing.push(
                "--set judge_url=URL ([judge].kind = \"rule\": the reference scores checklists with an LLM judge only)"
                    .to_owned(),
            );
            String::new()
        }
    };
    for key in ["nnodes", "gpus_per_node"] {
        if let Some(value) = sets.get(key)
            && value.parse::<u32>().map_or(true, |n| n == 0)
        {
            problems.push(format!(
                "--set {key}={value}: expected a positive whole number"
            ));
        }
    }
    if !missing.is_empty() || !problems.is_empty() {
        let mut message = String::new();
        if !missing.is_empty() {
            message.push_str("the reference launcher needs settings the config lacks: ");
            message.push_str(&missing.join("; "));
        }
        if !problems.is_empty() {
            if !message.is_empty() {
                message.push_str("; ");
            }
            message.push_str(&problems.join("; "));
        }
        return Err(Error::Data {
            source_name: format!("export of run {:?} for verl", config.run.name),
            message,
        });
    }
    let chat_url = format!("{}/chat/completions", judge_url.trim_end_matches('/'));
    Ok(Resolved {
        model_path,
        simulator_model_path: sets.get("simulator_model_path").cloned(),
        judge_backend: if endpoint.and_then(|e| e.api_key_env.as_ref()).is_some() {
            "openai"
        } else {
            "sglang"
        },
        judge_urls: format!("[\"{chat_url}\"]"),
        judge_model: sets
            .get("judge_model")
            .cloned()
            .or_else(|| endpoint.map(|e| e.model.clone()))
            .unwrap_or_else(|| "Qwen/Qwen3-30B-A3B".to_owned()),
        judge_key_env: endpoint.and_then(|e| e.api_key_env.clone()),
        judge_timeout: endpoint.map_or(120.0, |e| e.timeout_secs),
        judge_retry: endpoint.map_or(5, |e| e.max_retries),
        judge_semaphore: endpoint.map_or(500, |e| e.max_concurrency),
        nnodes: sets
            .get("nnodes")
            .cloned()
            .unwrap_or_else(|| "2".to_owned()),
        gpus_per_node: sets
            .get("gpus_per_node")
            .cloned()
            .unwrap_or_else(|| "8".to_owned()),
    })
}

/// The settings of `config` the reference cannot express, one sentence each.
fn warnings(config: &ExperimentConfig, has_model_set: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut warn = |text: String| out.push(text);
    if config.sft.enabled {
        warn(format!(
            "[sft] is enabled ({} steps): the reference launcher runs RL only; run the SFT warm start first (envace train) and point model_path at its checkpoint",
            config.sft.n_steps
        ));
    }
    if config.init.is_some() {
        warn("[init] (start from another run's checkpoint) has no equivalent: pass the checkpoint's Hugging Face folder as model_path".to_owned());
    }
    if config.model.source == ModelSource::Hf && !has_model_set {
        warn("[model].path is used as REFERENCE_MODEL_PATH: it must exist at that path on every node (or set REFERENCE_MODEL_PATH when launching)".to_owned());
    }
    let backend = &config.backend;
    if !matches!(backend.device, Device::Cuda | Device::Auto) || backend.dtype != Dtype::Bf16 {
        warn(format!(
            "[backend] device = {}, dtype = {} has no equivalent: verl trains in bf16 with FSDP on the cluster's CUDA GPUs",
            toml_word(&backend.device),
            toml_word(&backend.dtype)
        ));
    }
    if backend.act_generation == GenerationPlacement::Wgpu
        || backend.rehearse_generation == GenerationPlacement::Wgpu
    {
        warn("[backend] wgpu generation placements have no equivalent: verl generates with sglang on the GPUs".to_owned());
    }
    match config.env.tool_response_mode {
        ToolResponseMode::Real => warn(
            "[env].tool_response_mode = \"real\" has no equivalent (the reference runs no live environment): calls are answered from the dataset's recorded real responses (data/checklist_tools.json), a miss by the Tool Simulator Agent, which is frozen so that only the act role trains".to_owned(),
        ),
        ToolResponseMode::Mixed => warn(format!(
            "[env].tool_response_mode = \"mixed\" (mix_ratio {}) has no equivalent: exported as rehearsal (TOOL_RETURN_MODE=agent); the reference answers calls it has recorded real responses for from data/checklist_tools.json",
            config.env.mix_ratio
        )),
        ToolResponseMode::Rehearse | ToolResponseMode::External => {}
    }
    if config.env.tool_prompt == ToolPrompt::Names {
        warn("[env].tool_prompt = \"names\" has no equivalent: the reference's prompts carry every tool's schema".to_owned());
    }
    warn(format!(
        "[env].n_few_shot = {} and few_shot_source = {:?} have no equivalent: the reference's simulator is shown the recorded responses of the same task",
        config.env.n_few_shot,
        match config.env.few_shot_source {
            FewShotSource::Offline => "offline",
            FewShotSource::Live => "live",
        }
    ));
    if config.judge.kind == JudgeKind::Rule {
        warn("[judge].kind = \"rule\" has no equivalent: the LLM judge at judge_url decides each checklist standard".to_owned());
    }
    let rl = &config.rl;
    warn(format!(
        "[rl].micro_batch_size = {} has no equivalent: verl's micro batches are per GPU (1 per agent, as in the reference)",
        rl.micro_batch_size
    ));
    if rl.reward == RlReward::Success {
        warn("[rl].reward = \"success\" has no equivalent: the reference trains on the checklist score".to_owned());
    }
    if rl.credit == RlCredit::Role {
        warn(
            "[rl].credit = \"role\" has no equivalent: both agents get the episode's score"
                .to_owned(),
        );
    }
    if rl.memory_share > 0.0 {
        warn(format!(
            "[rl].memory_share = {} has no equivalent: the reference trains no acting on a rehearsal memory",
            rl.memory_share
        ));
    }
    if rl.carry_optimizer {
        warn("[rl].carry_optimizer has no equivalent: verl starts a fresh optimizer".to_owned());
    }
    if config.rehearsal.mode != RehearsalMode::Off || !config.rehearsal.budget_curve.is_empty() {
        warn("[rehearsal] (test-time private rehearsal) is not part of the reference's training; evaluate the checkpoints with `envace eval` to get it".to_owned());
    }
    let others: Vec<String> = config
        .eval
        .benchmarks
        .iter()
        .filter(|b| **b != Benchmark::GeneratedTest)
        .map(|b| format!("{b:?}"))
        .collect();
    if !others.is_empty() {
        warn(format!(
            "[eval].benchmarks {} are not run by the reference's trainer (it validates on data/validation.parquet); evaluate its checkpoints with `envace eval`",
            others.join(", ")
        ));
    }
    out
}

/// One Hydra override: the key (with `+` when the reference's config lacks it) and the value
/// as shell text.
type Override = (&'static str, String);

fn overrides(config: &ExperimentConfig, tool_mode: &str, n_train: usize) -> Vec<Override> {
    let rl = &config.rl;
    let two_agents = tool_mode == "agent";
    let per_agent = |value: &str| {
        if two_agents {
            format!("'[{value},{value}]'")
        } else {
            format!("'[{value}]'")
        }
    };
    let rollout_prompt = rl.max_prompt_tokens + rl.max_response_tokens;
    let steps_per_epoch = (n_train / rl.batch_size.max(1) as usize).max(1);
    let epochs = (rl.n_steps as usize).div_ceil(steps_per_epoch).max(1);
    let sampled_val = config.eval.n_trials > 1;
    let (kl_on, kl_type) = match rl.kl_type {
        KlType::K1 => (true, "kl"),
        KlType::K2 => (true, "mse"),
        KlType::K3 => (true, "low_var_kl"),
        KlType::None => (false, "low_var_kl"),
    };
    let mut out: Vec<Override> = vec![
        ("algorithm.adv_estimator", "grpo".into()),
        (
            "algorithm.norm_adv_by_std_in_grpo",
            py_bool(rl.divide_by_std).into(),
        ),
        ("algorithm.use_kl_in_reward", "False".into()),
        (
            "algorithm.group_by_agent_id",
            py_bool(rl.advantage_baseline == AdvantageBaseline::RoleWise).into(),
        ),
        (
            "algorithm.filter_groups.enable",
            py_bool(rl.dynamic_sampling).into(),
        ),
        (
            "algorithm.filter_groups.max_num_gen_batches",
            rl.max_sampling_rounds.to_string(),
        ),
        ("data.train_files", "\"$TRAIN_DATA\"".into()),
        ("data.val_files", "\"$VAL_DATA\"".into()),
        ("data.train_batch_size", rl.batch_size.to_string()),
        ("data.val_batch_size", rl.batch_size.to_string()),
        ("data.max_prompt_length", rl.max_prompt_tokens.to_string()),
        (
            "data.max_response_length",
            rl.max_response_tokens.to_string(),
        ),
        ("data.filter_overlong_prompts", "True".into()),
        ("data.prompt_key", "messages".into()),
        ("data.truncation", "error".into()),
        (
            "+data.rollout_max_prompt_length",
            rollout_prompt.to_string(),
        ),
        ("+data.rollout_truncation", "left".into()),
        (
            "+data.apply_chat_template_kwargs.enable_thinking",
            "True".into(),
        ),
        ("data.return_raw_chat", "True".into()),
        ("data.shuffle", "True".into()),
        (
            "data.custom_cls.path",
            "\"$ENVACE_ROOT/agent_system/dataset/checklist_dataset.py\"".into(),
        ),
        ("data.custom_cls.name", "ChecklistDataset".into()),
        ("+data.max_num_checklist", "1".into()),
        ("reward_model.reward_manager", "checklist".into()),
        ("actor_rollout_ref.model.path", "null".into()),
        ("actor_rollout_ref.actor.optim.lr", "null".into()),
        (
            "+agent.agent_specific_parameters.actor.optim.lr",
            per_agent(&num_e(rl.lr)),
        ),
        (
            "actor_rollout_ref.actor.optim.lr_warmup_steps",
            rl.warmup_steps.to_string(),
        ),
        (
            "actor_rollout_ref.actor.optim.warmup_style",
            match rl.lr_schedule {
                LrSchedule::Constant => "constant",
                LrSchedule::Cosine => "cosine",
            }
            .into(),
        ),
        (
            "actor_rollout_ref.actor.optim.min_lr_ratio",
            num(rl.min_lr_ratio),
        ),
        (
            "actor_rollout_ref.actor.optim.weight_decay",
            num(rl.weight_decay),
        ),
        ("actor_rollout_ref.actor.grad_clip", num(rl.grad_clip)),
        (
            "actor_rollout_ref.actor.clip_ratio_low",
            num(rl.clip_ratio_low),
        ),
        (
            "actor_rollout_ref.actor.clip_ratio_high",
            num(rl.clip_ratio_high),
        ),
        ("actor_rollout_ref.model.use_remove_padding", "True".into()),
        (
            "actor_rollout_ref.actor.use_adaptive_ppo_mini_batch_size",
            "True".into(),
        ),
        ("actor_rollout_ref.actor.ppo_mini_update_num", "1".into()),
        (
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            "null".into(),
        ),
        (
            "+agent.agent_specific_parameters.actor.ppo_micro_batch_size_per_gpu",
            per_agent("1"),
        ),
        ("actor_rollout_ref.actor.use_kl_loss", py_bool(kl_on).into()),
        ("actor_rollout_ref.actor.loss_agg_mode", "token-mean".into()),
        ("actor_rollout_ref.actor.kl_loss_coef", num_e(rl.kl_coef)),
        ("actor_rollout_ref.actor.kl_loss_type", kl_type.into()),
        (
            "actor_rollout_ref.actor.entropy_coeff",
            num(rl.entropy_coef),
        ),
        (
            "actor_rollout_ref.model.enable_gradient_checkpointing",
            "True".into(),
        ),
        (
            "actor_rollout_ref.actor.fsdp_config.param_offload",
            "False".into(),
        ),
        (
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
            "True".into(),
        ),
        (
            "actor_rollout_ref.ref.fsdp_config.param_offload",
            "True".into(),
        ),
        (
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
            "8".into(),
        ),
        (
            "actor_rollout_ref.rollout.tensor_model_parallel_size",
            "1".into(),
        ),
        ("actor_rollout_ref.rollout.name", "sglang".into()),
        (
            "actor_rollout_ref.rollout.gpu_memory_utilization",
            "0.5".into(),
        ),
        ("actor_rollout_ref.rollout.temperature", num(rl.temperature)),
        ("actor_rollout_ref.rollout.top_p", num(rl.top_p)),
        (
            "actor_rollout_ref.rollout.enable_chunked_prefill",
            "True".into(),
        ),
        ("actor_rollout_ref.rollout.enforce_eager", "False".into()),
        (
            "actor_rollout_ref.rollout.free_cache_engine",
            "False".into(),
        ),
        (
            "actor_rollout_ref.rollout.val_kwargs.do_sample",
            py_bool(sampled_val).into(),
        ),
        (
            "actor_rollout_ref.rollout.val_kwargs.temperature",
            if sampled_val {
                num(rl.temperature)
            } else {
                "0".into()
            },
        ),
        ("actor_rollout_ref.rollout.val_kwargs.top_p", num(rl.top_p)),
        (
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
            "8".into(),
        ),
        ("env.env_name", "checklist".into()),
        ("env.seed", config.run.seed.to_string()),
        ("env.max_steps", "200".into()),
        ("env.rollout.n", rl.group_size.to_string()),
        ("env.rollout.val_n", config.eval.n_trials.to_string()),
        (
            "+env.checklist.tool_return_mode",
            "\"$TOOL_RETURN_MODE\"".into(),
        ),
        (
            "+env.checklist.max_assistant_turns",
            config.env.max_turns.to_string(),
        ),
        (
            "+env.checklist.max_user_turns",
            config.env.max_turns.to_string(),
        ),
        (
            "+env.checklist.max_parallel_calls",
            config.env.max_parallel_calls.to_string(),
        ),
        (
            "+env.checklist.dataset_path",
            "\"$TOOL_DATASET_PATH\"".into(),
        ),
        ("+env.checklist.judge_backend", "\"$JUDGE_BACKEND\"".into()),
        ("+env.checklist.sglang_url", "\"$JUDGE_URL_LIST\"".into()),
        (
            "+env.checklist.sglang_model",
            "\"$LLM_AS_A_JUDGE_NAME\"".into(),
        ),
        ("+env.checklist.judge_api_key", "\"$JUDGE_API_KEY\"".into()),
        ("+env.checklist.retry_times", "\"$JUDGE_RETRY\"".into()),
        (
            "+env.checklist.semaphore_size",
            "\"$JUDGE_SEMAPHORE\"".into(),
        ),
        ("+env.checklist.timeout", "\"$JUDGE_TIMEOUT\"".into()),
        ("+env.checklist.temperature", "0.6".into()),
        ("+env.checklist.top_p", "0.8".into()),
        ("+env.checklist.max_new_tokens", "6000".into()),
        ("+env.checklist.max_tokens", "6000".into()),
        ("+env.checklist.tool_temperature", num(rl.temperature)),
        ("+env.checklist.tool_top_p", num(rl.top_p)),
        (
            "+env.checklist.tool_max_new_tokens",
            rl.max_response_tokens.to_string(),
        ),
        (
            "+env.checklist.tool_max_tokens",
            rl.max_response_tokens.to_string(),
        ),
        (
            "+env.checklist.tool_retry_attempts",
            "\"$TOOL_RETRY\"".into(),
        ),
        ("+env.checklist.tool_timeout", "\"$TOOL_TIMEOUT\"".into()),
    ];
    if let Some(external) = config.env.external.as_ref().filter(|_| !two_agents) {
        out.push((
            "+env.checklist.tool_sglang_url",
            "\"[\\\"$TOOL_API_URL\\\"]\"".into(),
        ));
        out.push((
            "+env.checklist.tool_sglang_model",
            "\"$TOOL_API_MODEL\"".into(),
        ));
        out.push(("+env.checklist.tool_api_key", "\"$TOOL_API_KEY\"".into()));
        out.push((
            "+env.checklist.tool_semaphore_size",
            external.max_concurrency.to_string(),
        ));
    } else {
        out.push(("+env.checklist.tool_semaphore_size", "8".into()));
    }
    out.extend([
        ("+env.checklist.use_caller_incremental", "true".into()),
        (
            "+env.checklist.max_model_len",
            (rollout_prompt + rl.max_response_tokens).to_string(),
        ),
        (
            "+env.checklist.max_response_length",
            rl.max_response_tokens.to_string(),
        ),
        ("agent.agent_ids", "\"$AGENT_IDS\"".into()),
        ("agent.model_ids", "\"$MODEL_IDS\"".into()),
        ("agent.model_sharing", py_bool(two_agents).into()),
        ("agent.frozen_agent_ids", "\"$FROZEN_AGENT_IDS\"".into()),
        ("agent.orchestra_type", "checklist".into()),
        ("trainer.critic_warmup", "0".into()),
        ("trainer.logger", "\"['console']\"".into()),
        ("trainer.project_name", "envace-studio".into()),
        ("trainer.experiment_name", "\"$experiment_name\"".into()),
        ("trainer.n_gpus_per_node", "\"$num_gpus_per_node\"".into()),
        ("trainer.nnodes", "\"$trainer_nnodes\"".into()),
        (
            "trainer.save_freq",
            config.run.checkpoint_interval_steps.to_string(),
        ),
        (
            "trainer.test_freq",
            match config.eval.interval_steps {
                0 => "-1".to_owned(),
                n => n.to_string(),
            },
        ),
        ("trainer.val_only", "False".into()),
        ("trainer.val_before_train", "False".into()),
        ("trainer.total_epochs", epochs.to_string()),
        ("trainer.total_training_steps", rl.n_steps.to_string()),
        (
            "trainer.max_actor_ckpt_to_keep",
            match config.run.keep_checkpoints {
                0 => "null".to_owned(),
                n => n.to_string(),
            },
        ),
        ("trainer.default_local_dir", "\"$CKPT_DIR\"".into()),
        ("trainer.rollout_data_dir", "\"$ROLLOUT_DUMP_DIR\"".into()),
    ]);
    out
}

/// A learning rate or coefficient in the reference's short exponent form (`1e-06` → `1e-6`).
fn num_e(value: f64) -> String {
    if value == 0.0 {
        return "0.0".to_owned();
    }
    format!("{value:e}")
}

/// The launcher script.
fn launcher(
    config: &ExperimentConfig,
    config_name: &str,
    resolved: &Resolved,
    n_train: usize,
) -> (String, Vec<String>, Vec<String>) {
    let tool_mode = match config.env.tool_response_mode {
        ToolResponseMode::External if config.env.external.is_some() => "httpx",
        _ => "agent",
    };
    let two_agents = tool_mode == "agent";
    let mut frozen: Vec<&str> = Vec::new();
    if config.rl.frozen_roles.contains(&PolicyRole::Act) {
        frozen.push(CALLER_AGENT);
    }
    if two_agents
        && (config.rl.frozen_roles.contains(&PolicyRole::Rehearse)
            || config.env.tool_response_mode == ToolResponseMode::Real)
    {
        frozen.push(SIMULATOR_AGENT);
    }
    let list = |items: &[&str]| {
        let quoted: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
        format!("[{}]", quoted.join(","))
    };
    let agents: Vec<&str> = if two_agents {
        vec![CALLER_AGENT, SIMULATOR_AGENT]
    } else {
        vec![CALLER_AGENT]
    };
    let overrides = overrides(config, tool_mode, n_train);

    let mut s = String::new();
    let mut env_vars = Vec::new();
    let _ = writeln!(s, "#!/bin/bash");
    let _ = writeln!(
        s,
        "# Launcher for the reference EnvACE trainer (verl on Ray), written by `envace export verl`"
    );
    let _ = writeln!(
        s,
        "# from {config_name} (run {:?}), for github.com/Within-yao/EnvACE at {REFERENCE_COMMIT}.",
        config.run.name
    );
    let _ = writeln!(
        s,
        "# Every variable below can be set in the environment instead; README.md lists what the"
    );
    let _ = writeln!(
        s,
        "# cluster needs. Extra Hydra overrides given as arguments are passed on. Its output goes"
    );
    let _ = writeln!(
        s,
        "# to logs/console.log, which `envace import verl` reads back with rollout_dumps/."
    );
    let _ = writeln!(s, "set -euo pipefail");
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "HERE=\"$(cd \"$(dirname \"${{BASH_SOURCE[0]}}\")\" && pwd)\""
    );
    let _ = writeln!(
        s,
        ": \"${{ENVACE_ROOT:?set ENVACE_ROOT to the reference checkout (github.com/Within-yao/EnvACE)}}\""
    );
    env_vars.push("ENVACE_ROOT".to_owned());
    var(
        &mut s,
        &mut env_vars,
        "ENVACE_PY",
        "\"$(command -v python3)\"",
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "# Models and data (every node must read them at these paths)."
    );
    var(
        &mut s,
        &mut env_vars,
        "REFERENCE_MODEL_PATH",
        &format!(
            "\"{}\"",
            match resolved.model_path.strip_prefix("$HERE/") {
                Some(rest) => format!("$HERE/{}", sh_quote(rest)),
                None => sh_quote(&resolved.model_path),
            }
        ),
    );
    match &resolved.simulator_model_path {
        Some(path) => var(
            &mut s,
            &mut env_vars,
            "SIMULATOR_MODEL_PATH",
            &format!("\"{}\"", sh_quote(path)),
        ),
        None => var(
            &mut s,
            &mut env_vars,
            "SIMULATOR_MODEL_PATH",
            "\"$REFERENCE_MODEL_PATH\"",
        ),
    }
    var(
        &mut s,
        &mut env_vars,
        "TRAIN_DATA",
        "\"$HERE/data/train.parquet\"",
    );
    var(
        &mut s,
        &mut env_vars,
        "VAL_DATA",
        "\"$HERE/data/validation.parquet\"",
    );
    var(
        &mut s,
        &mut env_vars,
        "TOOL_DATASET_PATH",
        "\"$HERE/data/checklist_tools.json\"",
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "# The judge ([judge]).");
    var(
        &mut s,
        &mut env_vars,
        "JUDGE_BACKEND",
        &format!("\"{}\"", resolved.judge_backend),
    );
    var(
        &mut s,
        &mut env_vars,
        "JUDGE_URL_LIST",
        &format!("'{}'", resolved.judge_urls.replace('\'', "")),
    );
    var(
        &mut s,
        &mut env_vars,
        "LLM_AS_A_JUDGE_NAME",
        &format!("\"{}\"", sh_quote(&resolved.judge_model)),
    );
    match &resolved.judge_key_env {
        Some(name) => {
            var(
                &mut s,
                &mut env_vars,
                "JUDGE_API_KEY",
                &format!("\"${{{name}:-}}\""),
            );
            let _ = writeln!(
                s,
                "[ -n \"$JUDGE_API_KEY\" ] || {{ echo \"run.sh: set {name} (or JUDGE_API_KEY) to the judge's API key\" >&2; exit 1; }}"
            );
        }
        None => var(&mut s, &mut env_vars, "JUDGE_API_KEY", "\"\""),
    }
    var(
        &mut s,
        &mut env_vars,
        "JUDGE_TIMEOUT",
        &num_plain(resolved.judge_timeout),
    );
    var(
        &mut s,
        &mut env_vars,
        "JUDGE_RETRY",
        &resolved.judge_retry.to_string(),
    );
    var(
        &mut s,
        &mut env_vars,
        "JUDGE_SEMAPHORE",
        &resolved.judge_semaphore.to_string(),
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "# Tool responses ([env].tool_response_mode).");
    var(
        &mut s,
        &mut env_vars,
        "TOOL_RETURN_MODE",
        &format!("\"{tool_mode}\""),
    );
    let tool_timeout = match (&config.env.external, two_agents) {
        (Some(external), false) => num_plain(external.timeout_secs),
        _ => "\"$JUDGE_TIMEOUT\"".to_owned(),
    };
    var(&mut s, &mut env_vars, "TOOL_TIMEOUT", &tool_timeout);
    let tool_retry = match (&config.env.external, two_agents) {
        (Some(external), false) => external.max_retries.to_string(),
        _ => "5".to_owned(),
    };
    var(&mut s, &mut env_vars, "TOOL_RETRY", &tool_retry);
    if let (Some(external), false) = (&config.env.external, two_agents) {
        let url = format!("{}/chat/completions", external.url.trim_end_matches('/'));
        var(
            &mut s,
            &mut env_vars,
            "TOOL_API_URL",
            &format!("\"{}\"", sh_quote(&url)),
        );
        var(
            &mut s,
            &mut env_vars,
            "TOOL_API_MODEL",
            &format!("\"{}\"", sh_quote(&external.model)),
        );
        let key = external
            .api_key_env
            .as_ref()
            .map_or("\"EMPTY\"".to_owned(), |name| {
                format!("\"${{{name}:-EMPTY}}\"")
            });
        var(&mut s, &mut env_vars, "TOOL_API_KEY", &key);
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "# The cluster and the run's folders.");
    var(&mut s, &mut env_vars, "trainer_nnodes", &resolved.nnodes);
    var(
        &mut s,
        &mut env_vars,
        "num_gpus_per_node",
        &resolved.gpus_per_node,
    );
    var(
        &mut s,
        &mut env_vars,
        "experiment_name",
        &format!("\"{}\"", sh_quote(&config.run.name)),
    );
    var(&mut s, &mut env_vars, "CKPT_DIR", "\"$HERE/checkpoints\"");
    var(
        &mut s,
        &mut env_vars,
        "ROLLOUT_DUMP_DIR",
        "\"$HERE/rollout_dumps\"",
    );
    let _ = write!(s, "export ");
    var(
        &mut s,
        &mut env_vars,
        "SIM_HTTPX_DUMP_DIR",
        "\"$HERE/sim_httpx_dumps\"",
    );
    let _ = writeln!(s, "export ENABLE_CHECKLIST=1");
    env_vars.push("ENABLE_CHECKLIST".to_owned());
    let _ = writeln!(s, "mkdir -p \"$HERE/logs\" \"$SIM_HTTPX_DUMP_DIR\"");
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "# Agents: the act role is the {CALLER_AGENT}, the rehearse role the {SIMULATOR_AGENT}."
    );
    let _ = writeln!(s, "AGENT_IDS='{}'", list(&agents));
    let model_ids = if two_agents {
        "[\\\"$REFERENCE_MODEL_PATH\\\",\\\"$SIMULATOR_MODEL_PATH\\\"]"
    } else {
        "[\\\"$REFERENCE_MODEL_PATH\\\"]"
    };
    let _ = writeln!(s, "MODEL_IDS=\"{model_ids}\"");
    let _ = writeln!(s, "FROZEN_AGENT_IDS='{}'", list(&frozen));
    let _ = writeln!(s);
    let _ = writeln!(s, "\"$ENVACE_PY\" -m verl.trainer.main_ppo \\");
    let mut keys = Vec::new();
    for (key, value) in &overrides {
        let _ = writeln!(s, "    {key}={value} \\");
        keys.push(key.trim_start_matches('+').to_owned());
    }
    let _ = writeln!(s, "    \"$@\" 2>&1 | tee -a \"$HERE/logs/console.log\"");
    (s, keys, env_vars)
}

/// `NAME=${NAME:-DEFAULT}`: a variable the environment may set instead.
fn var(s: &mut String, vars: &mut Vec<String>, name: &str, default: &str) {
    let _ = writeln!(s, "{name}=${{{name}:-{default}}}");
    vars.push(name.to_owned());
}

/// A number as a shell default (`120.0` → `120`).
fn num_plain(value: f64) -> String {
    if value == value.trunc() {
        format!("{}", value as i64)
    } else {
        value.to_string()
    }
}

/// Our conversation as the reference's OpenAI-style messages: assistant tool-call blocks
/// become `tool_calls` with JSON-text arguments.
fn openai_messages(messages: &[Message]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut call_no = 0;
    for message in messages {
        match message.role {
            Role::Assistant => {
                let parsed = parse_tool_calls(&message.content);
                let calls: Vec<Value> = parsed
                    .calls
                    .iter()
                    .filter_map(|call| call.as_ref().ok())
                    .map(|call| {
                        call_no += 1;
                        json!({
                            "id": format!("call_{call_no}"),
                            "type": "function",
                            "function": {
                                "name": call.name,
                                "arguments": Value::Object(call.arguments.clone()).to_string(),
                            },
                        })
                    })
                    .collect();
                let mut entry = json!({"role": "assistant", "content": parsed.content});
                if !calls.is_empty() {
                    entry["tool_calls"] = Value::Array(calls);
                }
                out.push(entry);
            }
            role => out.push(json!({"role": role.as_str(), "content": message.content})),
        }
    }
    out
}

/// One dataset row of `task`.
fn row(task: &GenTask, index: usize, original_index: usize, split: &str, tools: &str) -> Value {
    let all = openai_messages(&task.oracle);
    let first_user = task
        .oracle
        .iter()
        .position(|m| m.role == Role::User)
        .map_or(task.oracle.len(), |at| at + 1);
    let mut prompt: Vec<Value> = task.oracle[..first_user]
        .iter()
        .map(|m| json!({"role": m.role.as_str(), "content": m.content}))
        .collect();
    if prompt.iter().all(|m| m["role"] != "user") {
        prompt.push(json!({"role": "user", "content": task.request}));
    }
    let mut turns: Vec<&crate::tasks::Checklist> = task.checklists.iter().collect();
    turns.sort_by_key(|c| c.turn_idx);
    let checklist: Vec<Value> = turns
        .iter()
        .map(|turn| {
            Value::Array(
                turn.standards
                    .iter()
                    .map(|s| {
                        json!({
                            "question": s.question,
                            "focus_on": s.focus_on,
                            "pass_condition": s.pass_condition,
                            "failure_examples": s.failure_examples,
                            "weight": s.weight,
                            "required_for_next_turn": false,
                        })
                    })
                    .collect(),
            )
        })
        .collect();
    json!({
        "data_source": "checklist",
        "ability": "agent",
        "messages": prompt,
        "extra_info": {
            "index": index,
            "original_index": original_index,
            "split": split,
            "task_id": task.id,
            "domain": domain_name(task),
            "family": task.family,
            "tools": tools,
            "messages": all,
            "interaction_kwargs": {"checklist_list": [checklist]},
        },
    })
}

fn domain_name(task: &GenTask) -> String {
    serde_json::to_value(task.domain)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", task.domain).to_lowercase())
}

fn readme(config: &ExperimentConfig, report: &ExportReport, resolved: &Resolved) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# {} on a Ray cluster (reference verl trainer)\n",
        config.run.name
    );
    let _ = writeln!(
        s,
        "Written by `envace export verl`. `run.sh` launches the reference EnvACE implementation's\n\
         checklist trainer (github.com/Within-yao/EnvACE, commit `{REFERENCE_COMMIT}`) with the\n\
         settings of `envace.toml` mapped onto its Hydra overrides.\n"
    );
    let _ = writeln!(s, "## What the cluster needs\n");
    let _ = writeln!(
        s,
        "1. A Ray cluster that is up (`ray start --head` on one node, `ray start --address=…` on\n   \
         the others): {} node(s) × {} GPU(s) (`trainer_nnodes`, `num_gpus_per_node`).",
        resolved.nnodes, resolved.gpus_per_node
    );
    let _ = writeln!(
        s,
        "2. The reference checkout with its Python environment (verl, sglang, Ray; its\n   \
         `requirements_envace.txt`) on every node; set `ENVACE_ROOT` to the checkout and, if\n   \
         `python3` is not that environment's, `ENVACE_PY` to its interpreter."
    );
    let _ = writeln!(
        s,
        "3. The initial model, a Hugging Face folder readable at `REFERENCE_MODEL_PATH` on every\n   \
         node (now `{}`).",
        resolved.model_path
    );
    let _ = writeln!(
        s,
        "4. The LLM judge serving an OpenAI-compatible API at `JUDGE_URL_LIST` (now\n   \
         `{}`, model `{}`, backend `{}`){}.",
        resolved.judge_urls,
        resolved.judge_model,
        resolved.judge_backend,
        resolved
            .judge_key_env
            .as_ref()
            .map_or(String::new(), |name| format!(
                "; its key in the environment variable `{name}`"
            ))
    );
    let _ = writeln!(
        s,
        "5. This folder on a file system every node reads (or copy `data/` there and set\n   \
         `TRAIN_DATA`, `VAL_DATA`, `TOOL_DATASET_PATH`).\n"
    );
    let _ = writeln!(s, "## Files\n");
    let _ = writeln!(
        s,
        "- `run.sh`: the launcher; `bash run.sh` trains, extra `key=value` arguments are passed to Hydra."
    );
    let _ = writeln!(
        s,
        "- `envace.toml`: the experiment config it was exported from."
    );
    let _ = writeln!(
        s,
        "- `data/train.parquet` ({} tasks), `data/validation.parquet` ({} tasks): the checklist\n  \
         dataset (`messages` prompt, `extra_info` with tools, the whole conversation and the\n  \
         per-turn checklists); `data/checklist_tools.json`: the same rows as JSON, which the\n  \
         reference's tool reads for recorded real responses.",
        report.n_train, report.n_validation
    );
    let _ = writeln!(
        s,
        "- After a run: `checkpoints/`, `rollout_dumps/STEP.jsonl`, `sim_httpx_dumps/`,\n  \
         `logs/console.log`. Bring them home and run `envace import verl <this folder>` (again\n  \
         at any time to follow a live run) to chart the run in the studio.\n"
    );
    let _ = writeln!(s, "## Settings with no equivalent\n");
    if report.warnings.is_empty() {
        let _ = writeln!(s, "None.");
    }
    for warning in &report.warnings {
        let _ = writeln!(s, "- {warning}");
    }
    s
}

/// Writes the launcher folder for `config` (read from `config_path`) into `out_dir`.
pub fn export(
    config: &ExperimentConfig,
    config_path: &Path,
    out_dir: &Path,
    input: ExportInput<'_>,
    options: &ExportOptions,
) -> Result<ExportReport> {
    let config_dir = config_path.parent().unwrap_or(Path::new(""));
    let resolved = resolve(config, config_dir, &options.sets)?;
    let config_text =
        std::fs::read_to_string(config_path).map_err(|err| Error::io(config_path, err))?;
    if out_dir.is_dir() && !options.force {
        let mut entries = std::fs::read_dir(out_dir).map_err(|err| Error::io(out_dir, err))?;
        if entries.next().is_some() {
            return Err(Error::Data {
                source_name: out_dir.display().to_string(),
                message: "the folder is not empty; pass --force to replace its files".to_owned(),
            });
        }
    }
    let data_dir = out_dir.join("data");
    std::fs::create_dir_all(&data_dir).map_err(|err| Error::io(&data_dir, err))?;

    // Tools per domain, as the prompts' schemas.
    let mut tools: BTreeMap<String, String> = BTreeMap::new();
    for task in input.train.iter().chain(input.validation) {
        let name = domain_name(task);
        if let std::collections::btree_map::Entry::Vacant(slot) = tools.entry(name) {
            let env = crate::tasks::fresh_env(task.domain, input.sources)?;
            slot.insert(Value::Array(env.tool_schemas()).to_string());
        }
    }
    let rows_of = |tasks: &[Arc<GenTask>], split: &str, base: usize| -> Vec<Value> {
        tasks
            .iter()
            .enumerate()
            .map(|(idx, task)| {
                let tools = tools.get(&domain_name(task)).map_or("[]", String::as_str);
                row(task, idx, base + idx, split, tools)
            })
            .collect()
    };
    let train = rows_of(input.train, "train", 0);
    let validation = rows_of(input.validation, "validation", input.train.len());
    let fields = dataset_fields();
    write_rows(&data_dir.join("train.parquet"), &fields, &train)?;
    write_rows(&data_dir.join("validation.parquet"), &fields, &validation)?;
    let all: Vec<Value> = train.iter().chain(&validation).cloned().collect();
    let tools_json = serde_json::to_string(&all).map_err(|err| Error::Data {
        source_name: "data/checklist_tools.json".to_owned(),
        message: err.to_string(),
    })?;
    crate::fsutil::write_atomically(
        &data_dir.join("checklist_tools.json"),
        tools_json.as_bytes(),
    )?;

    let config_name = "envace.toml";
    let (script, override_keys, env_vars) =
        launcher(config, config_name, &resolved, input.train.len());
    let mut report = ExportReport {
        out_dir: out_dir.to_path_buf(),
        files: vec![
            "run.sh".to_owned(),
            "README.md".to_owned(),
            config_name.to_owned(),
            "data/train.parquet".to_owned(),
            "data/validation.parquet".to_owned(),
            "data/checklist_tools.json".to_owned(),
        ],
        warnings: warnings(config, options.sets.contains_key("model_path")),
        override_keys,
        env_vars,
        n_train: train.len(),
        n_validation: validation.len(),
    };
    report.warnings.sort();
    let run_sh = out_dir.join("run.sh");
    crate::fsutil::write_atomically(&run_sh, script.as_bytes())?;
    set_executable(&run_sh)?;
    crate::fsutil::write_atomically(&out_dir.join(config_name), config_text.as_bytes())?;
    crate::fsutil::write_atomically(
        &out_dir.join("README.md"),
        readme(config, &report, &resolved).as_bytes(),
    )?;
    Ok(report)
}

#[cfg(unix)]
fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|err| Error::io(path, err))
}

#[cfg(not(unix))]
fn set_executable(_path: &Path) -> Result<()> {
    Ok(())
}

/// A config enum as its TOML text, quoted (`"cpu"`).
fn toml_word<T: serde::Serialize>(value: &T) -> String {
    format!("\"{}\"", crate::config::word(value))
}
