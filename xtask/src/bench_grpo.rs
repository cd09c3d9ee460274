//! `cargo xtask bench grpo`: our GRPO step (`envace train`) against TRL's `GRPOTrainer` on the
//! CPU in one run, with the same work per step, then our multi-turn rehearsal step beside it;
//! one JSON object on the last line of stdout and in `target/bench/grpo.json`.
//!
//! The single-turn comparison (what TRL can do): the quickstart's tiny Qwen3 from random
//! initialisation, no SFT, one assistant turn per episode answered by the real environment,
//! `[rl]` batch of 8 prompts × 4 completions of at most 64 tokens at the quickstart's
//! temperature, no dynamic sampling, micro-batches of 8, KL to a frozen reference, AdamW. Our
//! run writes its store; the peer (`bench/trl_grpo.py`, pinned TRL in the benchmark venv) takes
//! the exact prompt token ids of our steps from it, in order, our tokenizer and model sizes, and
//! scores completions with our rule judge's checklist rules from `envace config tasks`. Both
//! sides run the same number of steps; the first of each is a warm-up and is not counted.
//!
//! The multi-turn rehearsal step (TRL has no equivalent): the quickstart's RL step unchanged
//! (up to 4 turns, tool calls answered by the policy rehearsing) except dynamic sampling off, from
//! a short SFT warm start so that the policy calls tools at all.
//!
//! `--simd avx2` runs our side as a CPU without AVX-512 would (the CLI built without the
//! `avx512` feature into `target/bench-avx2`, `ENVACE_SIMD=avx2`), holds PyTorch under TRL to AVX2
//! as well ([`Simd::torch_env`]), and writes `grpo-avx2.json`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use toml_edit::{DocumentMut, value};

use crate::bench::Simd;
use crate::bench_runs::{read_toml, write_result};

/// TRL and what it needs, pinned; torch is the model benchmark's pin.
const TRL: &[&str] = &[
    "trl==1.16.0",
    "transformers==5.24.0",
    "datasets==5.2.0",
    "accelerate==1.16.0",
];
/// Issue #19's target: our GRPO steps per minute against TRL's.
const TARGET_STEPS_PER_MIN_VS_TRL: f64 = 3.0;
/// The target the notes proposed instead (see the ratios' `proposed`).
const PROPOSED_STEPS_PER_MIN_VS_TRL: f64 = 1.5;
/// GRPO steps per side; the first is a warm-up.
const N_STEPS: u32 = 6;
const N_WARMUP: usize = 1;
/// SFT steps before the rehearsal step is measured: enough for the policy to call tools.
const REHEARSAL_SFT_STEPS: i64 = 200;
/// The stop token of our chat template.
const STOP_TOKEN: &str = "<|im_end|>";

/// The RL settings both arms share, from the quickstart with dynamic sampling off and no
/// evaluation or test-time curve worth timing.
fn base(root: &Path, name: &str, n_threads: usize) -> Result<DocumentMut> {
    let mut doc = read_toml(&root.join(crate::bench_science::DEFAULT_CONFIG))?;
    doc["run"]["name"] = value(name);
    doc["run"]["checkpoint_interval_steps"] = value(1000);
    doc["backend"]["n_threads"] = value(n_threads as i64);
    doc["rl"]["n_steps"] = value(i64::from(N_STEPS));
    doc["rl"]["dynamic_sampling"] = value(false);
    doc["rehearsal"]["budget_curve"] = value(toml_edit::Array::new());
    doc["eval"]["interval_steps"] = value(0);
    doc["eval"]["sft_interval_steps"] = value(0);
    doc["eval"]["max_tasks"] = value(8);
    Ok(doc)
}

/// What a training run's RL steps recorded.
struct Ours {
    /// Per RL step: the `perf/*` metrics and `rl/turns`.
    steps: Vec<serde_json::Map<String, Value>>,
    /// The store and run.
    store: PathBuf,
    /// Its last checkpoint folder.
    checkpoint: PathBuf,
    /// The `envace train` process, start to end.
    process_secs: f64,
}

/// Writes `doc` to `dir/config.toml` and trains it into a fresh store `dir/runs.sqlite`;
/// `first_rl_step` is where its RL steps start.
fn train(
    envace: &Path,
    simd: Simd,
    dir: &Path,
    doc: &DocumentMut,
    first_rl_step: u64,
    n_threads: usize,
) -> Result<Ours> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let config = dir.join("config.toml");
    std::fs::write(&config, doc.to_string())
        .with_context(|| format!("cannot write {}", config.display()))?;
    let store = dir.join("runs.sqlite");
    eprintln!(
        "xtask: $ envace --store {} train {}",
        store.display(),
        config.display()
    );
    let started = Instant::now();
    let status = crate::bench::ours_command(envace, simd.env_value())
        .arg("--store")
        .arg(&store)
        .arg("train")
        .arg(&config)
        .env("RAYON_NUM_THREADS", n_threads.to_string())
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("cannot start {}", envace.display()))?;
    let process_secs = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!("training {} failed ({status})", config.display());
    }
    let out = Command::new(envace)
        .arg("--store")
        .arg(&store)
        .args([
            "runs", "export", "1", "--format", "jsonl", "--table", "metrics",
        ])
        .output()
        .with_context(|| format!("cannot start {}", envace.display()))?;
    if !out.status.success() {
        bail!(
            "`envace runs export` failed for {}: {}",
            store.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut steps: Vec<serde_json::Map<String, Value>> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let row: Value = serde_json::from_str(line).context("a metrics row is not JSON")?;
        let (Some(step), Some(key), Some(v)) = (
            row["step"].as_u64(),
            row["key"].as_str(),
            row["value"].as_f64(),
        ) else {
            continue;
        };
        let wanted = [
            "perf/",
            "rl/turns",
            "rl/reward",
            "rl/optimizer_updates",
            "fidelity/n_pairs",
        ]
        .iter()
        .any(|p| key.starts_with(p));
        if step < first_rl_step || !wanted || key == "perf/tokens_per_sec" {
            continue;
        }
        let idx = usize::try_from(step - first_rl_step)?;
        if steps.len() <= idx {
            steps.resize_with(idx + 1, serde_json::Map::new);
        }
        steps[idx].insert(key.to_owned(), json!(v));
    }
    if steps.len() != N_STEPS as usize {
        bail!(
            "{} recorded {} RL steps, expected {N_STEPS}",
            store.display(),
            steps.len()
        );
    }
    let checkpoints = dir.join("checkpoints").join("run-1");
    let checkpoint = std::fs::read_dir(&checkpoints)
        .with_context(|| format!("cannot list {}", checkpoints.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("tokenizer.json").is_file())
        .max()
        .with_context(|| {
            format!(
                "no checkpoint with a tokenizer in {}",
                checkpoints.display()
            )
        })?;
    Ok(Ours {
        steps,
        store,
        checkpoint,
        process_secs,
    })
}

/// A figure of each timed (non-warm-up) step.
fn timed(steps: &[serde_json::Map<String, Value>], key: &str) -> Vec<f64> {
    steps
        .iter()
        .skip(N_WARMUP)
        .filter_map(|s| s.get(key).and_then(Value::as_f64))
        .collect()
}

/// The mean, 0 for none (a float sum of nothing is -0).
fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

/// Steps per minute, generated tokens/s, mean rollout and update seconds of timed steps.
fn summary(step_secs: &[f64], rollout_secs: &[f64], update_secs: &[f64], tokens: &[f64]) -> Value {
    let total: f64 = step_secs.iter().sum();
    json!({
        "steps_per_min": if total > 0.0 { 60.0 * step_secs.len() as f64 / total } else { 0.0 },
        "step_secs": mean(step_secs),
        "rollout_secs": mean(rollout_secs),
        "update_secs": mean(update_secs),
        "generated_tokens_per_step": mean(tokens),
        "generated_tokens_per_sec": tokens.iter().sum::<f64>() / rollout_secs.iter().sum::<f64>().max(1e-9),
        "timed_steps": step_secs.len(),
    })
}

fn ours_summary(ours: &Ours) -> Value {
    let mut out = summary(
        &timed(&ours.steps, "perf/step_time_secs"),
        &timed(&ours.steps, "perf/rollout_secs"),
        &timed(&ours.steps, "perf/update_secs"),
        &timed(&ours.steps, "perf/generated_tokens"),
    );
    let peak = ours
        .steps
        .iter()
        .filter_map(|s| s.get("perf/peak_rss_mib").and_then(Value::as_f64))
        .fold(0.0, f64::max);
    if let Value::Object(map) = &mut out {
        map.insert("peak_rss_mib".into(), json!(peak));
        map.insert(
            "turns_per_episode".into(),
            json!(mean(&timed(&ours.steps, "rl/turns"))),
        );
        map.insert(
            "rehearsed_calls_per_step".into(),
            json!(mean(&timed(&ours.steps, "fidelity/n_pairs"))),
        );
        map.insert("process_secs".into(), json!(ours.process_secs));
        let updates = ours
            .steps
            .last()
            .and_then(|s| s.get("rl/optimizer_updates"))
            .cloned();
        map.insert("optimizer_updates".into(), json!(updates));
        map.insert("per_step".into(), json!(ours.steps));
    }
    out
}

/// The benchmark venv's Python with TRL installed at the pinned versions, beside the model
/// benchmark's torch (kept at its pin while TRL's requirements are resolved).
fn ensure_trl_venv(venv: &Path) -> Result<PathBuf> {
    crate::bench::ensure_torch_venv(venv)?;
    crate::bench::ensure_pinned(
        venv,
        TRL,
        &[crate::bench::TORCH],
        "import trl, transformers, datasets, accelerate; print(trl.__version__, \
         transformers.__version__, datasets.__version__, accelerate.__version__)",
    )
}

/// `cargo xtask bench grpo [--simd avx2]`.
pub fn grpo(root: &Path, simd: Simd) -> Result<()> {
    let n_threads = crate::bench::bench_threads()?;
    let python = ensure_trl_venv(&root.join("target").join("bench").join("venv"))?;
    let envace = crate::bench_runs::release_cli(root, simd)?;
    let dir = root.join("target").join("bench").join(match simd {
        Simd::Native => "grpo",
        Simd::Avx2 => "grpo-avx2",
    });
    let load_start = crate::bench::load_avg();

    // Single turn, real environment, random initialisation: the work TRL can do too.
    let mut doc = base(root, "grpo-single-turn", n_threads)?;
    doc["sft"]["enabled"] = value(false);
    doc["env"]["max_turns"] = value(1);
    doc["env"]["tool_response_mode"] = value("real");
    // Settings the quickstart leaves to the engine's defaults are written out, so that both
    // sides read every value from this one config.
    for (key, default) in [("weight_decay", 0.01), ("top_p", 1.0)] {
        if doc["rl"].get(key).is_none() {
            doc["rl"][key] = value(default);
        }
    }
    let single_dir = dir.join("single-turn");
    let single = train(&envace, simd, &single_dir, &doc, 0, n_threads)?;
    let tasks = single_dir.join("tasks.jsonl");
    let status = Command::new(&envace)
        .args(["config", "tasks"])
        .arg(single_dir.join("config.toml"))
        .args(["--pool", "rl", "--out"])
        .arg(&tasks)
        .status()
        .with_context(|| format!("cannot start {}", envace.display()))?;
    if !status.success() {
        bail!("`envace config tasks` failed ({status})");
    }
    let rl = &doc["rl"];
    let number = |key: &str| -> Result<f64> {
        rl[key]
            .as_float()
            .or_else(|| rl[key].as_integer().map(|n| n as f64))
            .with_context(|| format!("the quickstart has no [rl].{key}"))
    };
    let integer = |key: &str| -> Result<i64> {
        rl[key]
            .as_integer()
            .with_context(|| format!("the quickstart has no whole number [rl].{key}"))
    };
    let peer_cfg = json!({
        "store": single.store,
        "run_id": 1,
        "tasks": tasks,
        "tokenizer": single.checkpoint.join("tokenizer.json"),
        "model_config_dir": single.checkpoint.join("model"),
        "stop_token": STOP_TOKEN,
        "n_threads": n_threads,
        "seed": doc["run"]["seed"]
            .as_integer()
            .context("the quickstart has no whole number [run].seed")?,
        "n_steps": N_STEPS,
        "batch_size": integer("batch_size")?,
        "group_size": integer("group_size")?,
        "micro_batch_size": integer("micro_batch_size")?,
        "max_completion_length": integer("max_response_tokens")?,
        "temperature": number("temperature")?,
        "top_p": number("top_p")?,
        "lr": number("lr")?,
        "kl_coef": number("kl_coef")?,
        "clip_ratio": number("clip_ratio_high")?,
        "weight_decay": number("weight_decay")?,
        "grad_clip": number("grad_clip")?,
    });
    eprintln!("xtask: measuring TRL's GRPOTrainer ({n_threads} threads)");
    let script = root.join("xtask").join("bench").join("trl_grpo.py");
    let trl = crate::bench::run_json(
        Command::new(&python)
            .arg(&script)
            .arg(peer_cfg.to_string())
            .envs(simd.torch_env().iter().copied()),
        "xtask/bench/trl_grpo.py",
    )?;
    let trl_steps: Vec<serde_json::Map<String, Value>> = trl["steps"]
        .as_array()
        .context("trl_grpo.py printed no steps")?
        .iter()
        .filter_map(|s| s.as_object().cloned())
        .collect();
    if trl_steps.len() != N_STEPS as usize {
        bail!("TRL ran {} steps, expected {N_STEPS}", trl_steps.len());
    }
    let mut trl_summary = summary(
        &timed(&trl_steps, "step_secs"),
        &timed(&trl_steps, "rollout_secs"),
        &timed(&trl_steps, "update_secs"),
        &timed(&trl_steps, "generated_tokens"),
    );
    if let Value::Object(map) = &mut trl_summary {
        for key in [
            "peak_rss_mib",
            "optimizer_updates",
            "activation_checkpointing",
            "versions",
            "rewards",
            "n_prompts",
            "our_rewards_checked",
            "our_rewards_agreeing",
        ] {
            map.insert(key.into(), trl[key].clone());
        }
        map.insert("per_step".into(), json!(trl_steps));
    }

    // The quickstart's multi-turn rehearsal step after a short SFT.
    let mut doc = base(root, "grpo-rehearsal", n_threads)?;
    doc["sft"]["n_steps"] = value(REHEARSAL_SFT_STEPS);
    let rehearsal = train(
        &envace,
        simd,
        &dir.join("rehearsal"),
        &doc,
        REHEARSAL_SFT_STEPS as u64,
        n_threads,
    )?;
    let load_end = crate::bench::load_avg();

    let ours = ours_summary(&single);
    let ratio = |key: &str| {
        let (a, b) = (
            ours[key].as_f64().unwrap_or(0.0),
            trl_summary[key].as_f64().unwrap_or(0.0),
        );
        if b > 0.0 { a / b } else { f64::NAN }
    };
    let steps_ratio = ratio("steps_per_min");
    let no_rollout_ceiling = match (
        trl_summary["step_secs"].as_f64(),
        ours["update_secs"].as_f64().filter(|secs| *secs > 0.0),
    ) {
        (Some(trl_step), Some(our_update)) => trl_step / our_update,
        _ => f64::NAN,
    };
    let result = json!({
        "bench": "grpo",
        "figures": {
            "cpu": crate::bench_science::cpu(),
            // Our kernel set (`ENVACE_SIMD`) and whether candle's matrix products had their
            // AVX-512 kernels compiled in; TRL runs PyTorch's own dispatch either way.
            "simd": simd.env_value().unwrap_or("native"),
            "gemm_avx512_compiled": simd == Simd::Native,
            // What held PyTorch under TRL to the same kernel set (empty: its own dispatch).
            "trl_env": simd.torch_env().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "n_threads": n_threads,
            "load_avg_start": load_start,
            "load_avg_end": load_end,
            "single_turn": {
                "work": "identical on both sides: the quickstart's tiny Qwen3 from random \
                         initialisation (f32), the same prompt token ids step by step, 8 prompts \
                         x 4 completions of at most 64 tokens sampled at the same temperature, \
                         our rule judge's checklist as the reward, clipped-ratio loss with a KL \
                         term to a frozen reference over micro-batches of 8, one AdamW update \
                         per step; the first step of each side is a warm-up. Ours runs each \
                         prompt once for its group (one prompt pass in the rollout, one packed \
                         row per group in the update); TRL repeats it per completion",
                "ours": ours,
                "trl": trl_summary,
            },
            "multi_turn_rehearsal": {
                "work": "the quickstart's RL step (up to 4 turns, tool calls answered by the \
                         policy rehearsing, 384-token prompts) with dynamic sampling off, after \
                         a 200-step SFT warm start; TRL has no equivalent",
                "ours": ours_summary(&rehearsal),
            },
        },
        "ratios": {
            "steps_per_min_vs_trl": steps_ratio,
            "generated_tokens_per_sec_vs_trl": ratio("generated_tokens_per_sec"),
            "update_secs_trl_over_ours": if ours["update_secs"].as_f64().unwrap_or(0.0) > 0.0 {
                trl_summary["update_secs"].as_f64().unwrap_or(0.0) / ours["update_secs"].as_f64().unwrap_or(1.0)
            } else { f64::NAN },
            "peak_rss_trl_over_ours": trl_summary["peak_rss_mib"].as_f64().unwrap_or(0.0)
                / ours["peak_rss_mib"].as_f64().filter(|m| *m > 0.0).unwrap_or(f64::NAN),
            // The ratio our step would reach if its rollout took no time at all: the ceiling
            // that our update alone sets against TRL's whole step.
            "steps_per_min_vs_trl_with_no_rollout": no_rollout_ceiling,
            "target": {
                "steps_per_min_vs_trl_at_least": TARGET_STEPS_PER_MIN_VS_TRL,
                "met": steps_ratio >= TARGET_STEPS_PER_MIN_VS_TRL,
                "reachable_by_rollout_alone": no_rollout_ceiling >= TARGET_STEPS_PER_MIN_VS_TRL,
            },
            // The target proposed in issue #19's notes, where the ceiling above showed 3× out
            // of reach of any rollout speed-up.
            "proposed": {
                "steps_per_min_vs_trl_at_least": PROPOSED_STEPS_PER_MIN_VS_TRL,
                "met": steps_ratio >= PROPOSED_STEPS_PER_MIN_VS_TRL,
            },
        },
    });
    let file = match simd {
        Simd::Native => "grpo",
        Simd::Avx2 => "grpo-avx2",
    };
    write_result(root, file, &result)
}
