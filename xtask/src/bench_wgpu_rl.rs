//! `cargo xtask bench wgpu-rl [--seeds 1,2,3] [--steps N] [--adapter NAME]`: does the
//! quickstart's RL train the same with rehearsal generating on wgpu as on the CPU. The
//! quickstart's SFT once (its own seed), then for each seed two RL runs from that checkpoint,
//! each its own `envace train`: rehearsal generating with the model on the CPU (the peer), and
//! on wgpu (`rehearse_generation = "wgpu"`). Each run's training metrics are averaged over its
//! steps; the two placements are compared by their means over seeds, the difference in
//! standard errors of the difference. Sampled tokens differ between the two (each has its own
//! seeded generator), so agreement means "within sampling noise", not equality.
//!
//! A run that finished with the same config is read back, one that stopped continues from its
//! checkpoint (the `science` benchmark's bookkeeping); `--fresh` starts over.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use toml_edit::{Item, value};

use crate::bench_runs::{read_toml, write_result};
use crate::bench_science::{commit, cpu, init_from_sft, mean_se, set_name, train};

/// RL steps of each run unless `--steps` says otherwise.
const DEFAULT_STEPS: i64 = 5;
const DEFAULT_SEEDS: [u64; 3] = [1, 2, 3];
/// Held-out tasks of each run's one evaluation (after its last step; acting only, so the same
/// on both placements, and kept small).
const EVAL_TASKS: i64 = 50;
/// The training metrics compared, each averaged over a run's steps.
const COMPARED: [&str; 7] = [
    "rl/reward",
    "rl/success",
    "rl/signal_group_fraction",
    "rl/turns",
    "rl/kl",
    "perf/generated_tokens",
    "fidelity/exact_match",
];
/// Agreement: every compared metric's difference within this many standard errors.
const TARGET_MAX_Z: f64 = 3.0;

/// `--steps N`, else [`DEFAULT_STEPS`].
fn parse_steps(args: &[String]) -> Result<i64> {
    match args.iter().position(|a| a == "--steps") {
        None => Ok(DEFAULT_STEPS),
        Some(idx) => {
            let text = args.get(idx + 1).context("--steps needs a number")?;
            match text.parse::<i64>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => bail!("--steps: {text:?} is not a number of steps (1 or more)"),
            }
        }
    }
}

/// Every metric row of run `name`: key -> values over its steps.
fn metrics(envace: &Path, store: &Path, name: &str) -> Result<BTreeMap<String, Vec<f64>>> {
    let out = Command::new(envace)
        .arg("--store")
        .arg(store)
        .args([
            "runs", "export", name, "--format", "jsonl", "--table", "metrics",
        ])
        .output()
        .with_context(|| format!("cannot start {}", envace.display()))?;
    if !out.status.success() {
        bail!(
            "`envace runs export {name}` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut by_key: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let row: Value = serde_json::from_str(line)
            .with_context(|| format!("`envace runs export {name}` printed {line:?}"))?;
        if let (Some(key), Some(v)) = (row["key"].as_str(), row["value"].as_f64()) {
            by_key.entry(key.to_owned()).or_default().push(v);
        }
    }
    Ok(by_key)
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// The benchmark.
pub fn wgpu_rl(root: &Path, args: &[String]) -> Result<()> {
    let seeds = match args.iter().any(|a| a == "--seeds") {
        true => crate::bench_science::parse_seeds(args)?,
        false => DEFAULT_SEEDS.to_vec(),
    };
    if seeds.len() < 2 {
        bail!("--seeds: give at least two seeds, for a standard error");
    }
    let steps = parse_steps(args)?;
    let adapter = match args.iter().position(|a| a == "--adapter") {
        None => None,
        Some(idx) => Some(
            args.get(idx + 1)
                .context("--adapter needs a name (part of the adapter's name)")?
                .clone(),
        ),
    };
    let fresh = args.iter().any(|a| a == "--fresh");
    let config = root.join("assets/configs/quickstart.toml");
    let base = read_toml(&config)?;
    let commit = commit();
    let envace = crate::bench_runs::release_cli(root, crate::bench::Simd::Native)?;
    let dir = root.join("target").join("bench").join("wgpu-rl");
    if fresh && dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let store = dir.join("runs.sqlite");
    let mut retrained = false;

    let mut sft = base.clone();
    set_name(&mut sft, "sft");
    sft["rl"]["n_steps"] = value(0);
    sft["eval"]["max_tasks"] = value(EVAL_TASKS);
    sft["eval"]["sft_interval_steps"] = value(0);
    sft["rehearsal"]["budget_curve"] = Item::None;
    let sft_arm = train(&envace, &dir, "sft", &sft, &store, &mut retrained, &commit)?;

    // placement -> metric -> per-seed means over steps.
    let mut per_seed: BTreeMap<&str, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    let mut rollout_secs: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for &seed in &seeds {
        for placement in ["cpu", "wgpu"] {
            let name = format!("{placement}-seed{seed}");
            let mut doc = base.clone();
            set_name(&mut doc, &name);
            doc["run"]["seed"] = value(seed as i64);
            doc["sft"]["enabled"] = value(false);
            init_from_sft(&mut doc);
            doc["rl"]["n_steps"] = value(steps);
            doc["eval"]["max_tasks"] = value(EVAL_TASKS);
            doc["eval"]["interval_steps"] = value(0);
            doc["rehearsal"]["budget_curve"] = Item::None;
            if placement == "wgpu" {
                doc["backend"]["rehearse_generation"] = value("wgpu");
                if let Some(adapter) = &adapter {
                    doc["backend"]["wgpu_adapter"] = value(adapter.as_str());
                }
            }
            train(&envace, &dir, &name, &doc, &store, &mut retrained, &commit)?;
            let rows = metrics(&envace, &store, &name)?;
            for key in COMPARED {
                if let Some(values) = rows.get(key) {
                    per_seed
                        .entry(placement)
                        .or_default()
                        .entry(key.to_owned())
                        .or_default()
                        .push(mean(values));
                }
            }
            if let Some(values) = rows.get("perf/rollout_secs") {
                rollout_secs
                    .entry(placement)
                    .or_default()
                    .push(mean(values));
            }
        }
    }

    let mut figures = serde_json::Map::new();
    let mut ratios = serde_json::Map::new();
    let mut worst_z: f64 = 0.0;
    for key in COMPARED {
        let (Some(cpu_values), Some(gpu_values)) = (
            per_seed.get("cpu").and_then(|m| m.get(key)),
            per_seed.get("wgpu").and_then(|m| m.get(key)),
        ) else {
            continue;
        };
        let (cpu_mean, cpu_se) = mean_se(cpu_values);
        let (gpu_mean, gpu_se) = mean_se(gpu_values);
        let diff = gpu_mean - cpu_mean;
        let se = (cpu_se.powi(2) + gpu_se.powi(2)).sqrt();
        // Equal means with no spread at all agree exactly.
        let z = if diff == 0.0 { 0.0 } else { diff.abs() / se };
        worst_z = worst_z.max(if z.is_nan() { f64::INFINITY } else { z });
        figures.insert(
            key.to_owned(),
            json!({
                "cpu": {"mean": cpu_mean, "se": cpu_se, "per_seed": cpu_values},
                "wgpu": {"mean": gpu_mean, "se": gpu_se, "per_seed": gpu_values},
                "difference": diff,
                "difference_in_se": z,
            }),
        );
    }
    let secs = |p: &str| mean(rollout_secs.get(p).map_or(&[][..], Vec::as_slice));
    figures.insert(
        "rollout_secs_per_step".to_owned(),
        json!({"cpu": secs("cpu"), "wgpu": secs("wgpu")}),
    );
    ratios.insert(
        "rl_metrics_max_difference_in_se".to_owned(),
        json!({
            "value": worst_z,
            "target": TARGET_MAX_Z,
            "met": worst_z <= TARGET_MAX_Z,
            "note": "wgpu against CPU rehearsal generation: the largest |difference| of a training metric's mean over seeds, in standard errors of the difference (lower is better)",
        }),
    );
    ratios.insert(
        "rollout_secs_cpu_vs_wgpu".to_owned(),
        json!({"value": secs("cpu") / secs("wgpu"), "note": "the CPU path's rollout time over the wgpu path's (higher: wgpu faster); on lavapipe wgpu runs on the same cores"}),
    );
    let result = json!({
        "bench": "wgpu-rl",
        "figures": figures,
        "ratios": ratios,
        "seeds": seeds,
        "rl_steps": steps,
        "sft_held_out": sft_arm.figures(),
        "adapter": adapter,
        "commit": commit,
        "cpu": cpu(),
    });
    write_result(root, "wgpu-rl", &result)
}
