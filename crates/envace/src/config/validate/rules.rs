//! The cross-field rules a schema cannot express (a phase that trains needs weights it can
//! train, batch sizes that divide, memories that fit the prompt), as dotted paths and messages.

use crate::config::{
    Benchmark, Domain, ExperimentConfig, GgufWeights, JudgeKind, KlType, ModelSource, PolicyRole,
    RehearsalMode, TaskSource, ToolResponseMode,
};

/// The rules that tie fields together, as (dotted path, message) pairs.
pub(super) fn cross_field_issues(config: &ExperimentConfig) -> Vec<(String, String)> {
    let mut issues = Vec::new();
    let mut issue = |path: &str, message: String| issues.push((path.to_string(), message));

    let model = &config.model;
    let rl = &config.rl;
    let sft = &config.sft;
    let trains = sft.enabled || rl.n_steps > 0;

    match model.source {
        ModelSource::Hf | ModelSource::Gguf if model.path.is_none() => issue(
            "model.path",
            format!(
                "model.source = {:?} needs `path`: the {} to load",
                source_name(model.source),
                if model.source == ModelSource::Hf {
                    "Hugging Face folder (config.json, *.safetensors, tokenizer.json)"
                } else {
                    "GGUF file"
                }
            ),
        ),
        ModelSource::Tiny if model.path.is_some() => issue(
            "model.path",
            "a path is set but model.source = \"tiny\" builds a new model; set source = \"hf\" or \"gguf\", or remove path".into(),
        ),
        _ => {}
    }
    if model.source == ModelSource::Gguf && model.gguf_weights == GgufWeights::Quantized && trains {
        issue(
            "model.gguf_weights",
            "quantized GGUF weights cannot be trained; use gguf_weights = \"dequantize\", or set sft.enabled = false and rl.n_steps = 0 for inference only".into(),
        );
    }
    if model.source == ModelSource::Tiny {
        let tiny = &model.tiny;
        if !tiny.hidden_size.is_multiple_of(tiny.n_heads) {
            issue(
                "model.tiny.n_heads",
                format!(
                    "n_heads = {} must divide hidden_size = {}",
                    tiny.n_heads, tiny.hidden_size
                ),
            );
        } else if !(tiny.hidden_size / tiny.n_heads).is_multiple_of(2) {
            issue(
                "model.tiny.n_heads",
                format!(
                    "head size hidden_size / n_heads = {} must be even for rotary embeddings",
                    tiny.hidden_size / tiny.n_heads
                ),
            );
        }
        if !tiny.n_heads.is_multiple_of(tiny.n_kv_heads) {
            issue(
                "model.tiny.n_kv_heads",
                format!(
                    "n_kv_heads = {} must divide n_heads = {}",
                    tiny.n_kv_heads, tiny.n_heads
                ),
            );
        }
        let context = u64::from(rl.max_prompt_tokens) + u64::from(rl.max_response_tokens);
        if context > u64::from(tiny.max_position_embeddings) {
            issue(
                "rl.max_response_tokens",
                format!(
                    "max_prompt_tokens + max_response_tokens = {context} exceeds model.tiny.max_position_embeddings = {}",
                    tiny.max_position_embeddings
                ),
            );
        }
    }

    let env = &config.env;
    if env.task_source == TaskSource::Tau2 {
        if env.data_dir.is_none() {
            issue(
                "env.task_source",
                "task_source = \"tau2\" needs env.data_dir: the τ²-bench folder holding retail/ and airline/".into(),
            );
        }
        if let Some(idx) = env.domains.iter().position(|d| *d == Domain::Functions) {
            issue(
                &format!("env.domains[{idx}]"),
                "τ²-bench has no \"functions\" domain; use task_source = \"generated\" for it"
                    .into(),
            );
        }
    }
    if env.task_source != TaskSource::Generated && !sft.families.is_empty() {
        issue(
            "sft.families",
            "families choose among generated tasks; remove it or set env.task_source = \"generated\""
                .into(),
        );
    }
    if env.task_source != TaskSource::Generated && !env.families.is_empty() {
        issue(
            "env.families",
            "families choose among generated tasks; remove it or set task_source = \"generated\""
                .into(),
        );
    }
    if env.tool_response_mode == ToolResponseMode::External && env.external.is_none() {
        issue(
            "env.tool_response_mode",
            "tool_response_mode = \"external\" needs an [env.external] table with the simulator's url and model".into(),
        );
    }
    for (idx, server) in env.mcp_servers.iter().enumerate() {
        let at = format!("env.mcp_servers[{idx}]");
        match (server.command.is_empty(), &server.url) {
            (true, None) => issue(
                &at,
                "name the server: `command = [\"program\", \"arg\", …]` for a stdio server or `url = \"http://…\"`".into(),
            ),
            (false, Some(_)) => issue(
                &format!("{at}.url"),
                "give either command or url, not both".into(),
            ),
            _ => {}
        }
        if !env.domains.contains(&server.domain) {
            issue(
                &format!("{at}.domain"),
                format!(
                    "\"{}\" is not in env.domains, so no task would use this server",
                    crate::config::word(&server.domain)
                ),
            );
        }
        if env.mcp_servers[..idx]
            .iter()
            .any(|earlier| earlier.domain == server.domain)
        {
            issue(
                &format!("{at}.domain"),
                format!(
                    "\"{}\" already has an MCP server; a domain has at most one",
                    crate::config::word(&server.domain)
                ),
            );
        }
    }
    if config.judge.kind == JudgeKind::Llm && config.judge.endpoint.is_none() {
        issue(
            "judge.kind",
            "kind = \"llm\" needs a [judge.endpoint] table with the judge's url and model".into(),
        );
    }

    if sft.enabled && !sft.batch_size.is_multiple_of(sft.micro_batch_size) {
        issue(
            "sft.micro_batch_size",
            format!(
                "micro_batch_size = {} must divide batch_size = {}",
                sft.micro_batch_size, sft.batch_size
            ),
        );
    }
    if sft.rehearse_share.is_some()
        && !(sft.roles.contains(&PolicyRole::Act) && sft.roles.contains(&PolicyRole::Rehearse))
    {
        issue(
            "sft.rehearse_share",
            "rehearse_share splits each batch between the roles, so sft.roles must list both \"act\" and \"rehearse\"".into(),
        );
    }
    if sft.memory_share > 0.0 && !sft.roles.contains(&PolicyRole::Act) {
        issue(
            "sft.memory_share",
            "memory_share adds act samples with a rehearsal memory, so sft.roles must list \"act\""
                .into(),
        );
    }
    if let Some(warmup) = sft.warmup_steps
        && sft.enabled
        && warmup > sft.n_steps
    {
        issue(
            "sft.warmup_steps",
            format!("warmup_steps = {warmup} exceeds n_steps = {}", sft.n_steps),
        );
    }
    if sft.enabled && model.source == ModelSource::Tiny && env.task_source == TaskSource::Tau2 {
        // Generated tasks carry oracle trajectories; τ²-bench tasks only gold actions.
        issue(
            "sft.enabled",
            "SFT learns from oracle trajectories of generated tasks; set env.task_source = \"generated\" or sft.enabled = false".into(),
        );
    }

    let n_trajectories = u64::from(rl.batch_size) * u64::from(rl.group_size);
    if rl.n_steps > 0 && n_trajectories % u64::from(rl.micro_batch_size) != 0 {
        issue(
            "rl.micro_batch_size",
            format!(
                "micro_batch_size = {} must divide batch_size × group_size = {} × {} = {n_trajectories} trajectories per step",
                rl.micro_batch_size, rl.batch_size, rl.group_size
            ),
        );
    }
    if rl.n_steps > 0 && rl.warmup_steps > rl.n_steps {
        issue(
            "rl.warmup_steps",
            format!(
                "warmup_steps = {} exceeds n_steps = {}",
                rl.warmup_steps, rl.n_steps
            ),
        );
    }
    if rl.kl_type == KlType::None && rl.kl_coef > 0.0 {
        issue(
            "rl.kl_coef",
            format!(
                "kl_coef = {} has no effect with kl_type = \"none\"; set kl_coef = 0 or choose a KL estimator",
                rl.kl_coef
            ),
        );
    }
    let frozen_act = rl.frozen_roles.contains(&PolicyRole::Act);
    let frozen_rehearse = rl.frozen_roles.contains(&PolicyRole::Rehearse);
    if rl.n_steps > 0 && frozen_act && frozen_rehearse {
        issue(
            "rl.frozen_roles",
            "both roles are frozen, so RL would train nothing; unfreeze one or set n_steps = 0"
                .into(),
        );
    } else if rl.n_steps > 0
        && frozen_act
        && matches!(
            env.tool_response_mode,
            ToolResponseMode::Real | ToolResponseMode::External
        )
    {
        issue(
            "rl.frozen_roles",
            format!(
                "the act role is frozen and tool_response_mode = {:?} never samples the rehearse role, so RL would train nothing",
                mode_name(env.tool_response_mode)
            ),
        );
    }

    let eval = &config.eval;
    if eval.data_dir.is_none() {
        for (idx, benchmark) in eval.benchmarks.iter().enumerate() {
            if benchmark.needs_data_dir() {
                issue(
                    &format!("eval.benchmarks[{idx}]"),
                    format!(
                        "{:?} reads benchmark files; set eval.data_dir to the folder holding bfcl/, tau2-bench/ and vitabench/",
                        benchmark_name(*benchmark)
                    ),
                );
            }
        }
    }
    for (idx, &n) in config.rehearsal.budget_curve.iter().enumerate() {
        if !(1..=64).contains(&n) {
            issue(
                &format!("rehearsal.budget_curve[{idx}]"),
                format!("a rehearsal budget is 1 to 64 imagined attempts per task, not {n}"),
            );
        }
    }
    let rehearsal = &config.rehearsal;
    let rehearses = rehearsal.mode != RehearsalMode::Off || !rehearsal.budget_curve.is_empty();
    if rehearses && rehearsal.max_memory_tokens >= rl.max_prompt_tokens {
        issue(
            "rehearsal.max_memory_tokens",
            format!(
                "a memory of up to {} tokens fills the act prompt of rl.max_prompt_tokens = {} tokens, which is cut from the left, leaving no room for the request; make it smaller",
                rehearsal.max_memory_tokens, rl.max_prompt_tokens
            ),
        );
    }
    issues
}

fn source_name(source: ModelSource) -> String {
    crate::config::word(&source)
}

fn mode_name(mode: ToolResponseMode) -> String {
    crate::config::word(&mode)
}

fn benchmark_name(benchmark: Benchmark) -> String {
    crate::config::word(&benchmark)
}
