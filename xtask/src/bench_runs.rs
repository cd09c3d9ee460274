//! `cargo xtask bench rollout` and `cargo xtask bench quickstart`: the rollout engine's
//! throughput per tool-response mode, and the quickstart's wall time and held-out success for
//! SFT only, real-environment GRPO and rehearsal GRPO on the same budget, each measured in one
//! run and printed as one JSON object (also written to `target/bench/NAME.json`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::bench::Simd;

/// Issue #6's target: rehearsal GRPO's held-out success within 15 minutes.
const TARGET_REHEARSAL_SUCCESS: f64 = 0.6;
const TARGET_WALL_SECS: f64 = 15.0 * 60.0;

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// Builds `selection` (packages and targets) with `cargo build --locked --release`, and returns
/// the folder its binaries land in. [`Simd::Avx2`] builds without the default `avx512`
/// features (candle's matrix products on gemm's AVX2 kernels) into `target/bench-avx2`, so that
/// the two builds do not replace each other.
fn release_build(root: &Path, simd: Simd, selection: &[&str]) -> Result<PathBuf> {
    let mut args = vec!["build", "--locked", "--release"];
    args.extend_from_slice(selection);
    match simd {
        Simd::Native => {
            crate::cargo(&args)?;
            Ok(target_dir(root).join("release"))
        }
        Simd::Avx2 => {
            let dir = root.join("target").join("bench-avx2");
            args.push("--no-default-features");
            crate::cargo_env(&args, &[("CARGO_TARGET_DIR", dir.display().to_string())])?;
            Ok(dir.join("release"))
        }
    }
}

/// Builds the `envace` crate's example `name` in release and returns the path of its binary.
pub(crate) fn release_example(root: &Path, name: &str, simd: Simd) -> Result<PathBuf> {
    let dir = release_build(root, simd, &["--package", "envace", "--example", name])?;
    Ok(dir.join("examples").join(name))
}

/// Builds the `envace` binary in release and returns its path.
pub(crate) fn release_cli(root: &Path, simd: Simd) -> Result<PathBuf> {
    let dir = release_build(root, simd, &["--package", "envace-cli"])?;
    Ok(dir.join("envace"))
}

fn threads() -> String {
    std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .to_string()
    })
}

/// Writes a benchmark's JSON to `target/bench/NAME.json` and prints it as the last stdout line.
pub(crate) fn write_result(root: &Path, name: &str, result: &Value) -> Result<()> {
    let out_dir = root.join("target").join("bench");
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let out_path = out_dir.join(format!("{name}.json"));
    let line = result.to_string();
    std::fs::write(&out_path, format!("{line}\n"))
        .with_context(|| format!("cannot write {}", out_path.display()))?;
    eprintln!("xtask: wrote {}", out_path.display());
    println!("{line}");
    Ok(())
}

/// `cargo xtask bench rollout`: episodes per minute and generated tokens/s with the real
/// environment and with rehearsal, on the quickstart config, in one run.
pub fn rollout(root: &Path) -> Result<()> {
    let bin = release_example(root, "rollout_bench", Simd::Native)?;
    let mut command = Command::new(&bin);
    command
        .args(["--episodes", "16"])
        .env("RAYON_NUM_THREADS", threads());
    let result = last_json_line(&mut command, &bin, "rollout")?;
    write_result(root, "rollout", &result)
}

/// Runs a benchmark binary (stderr passed through) and reads the JSON object on the last line
/// of its stdout; `what` names the benchmark in errors.
pub(crate) fn last_json_line(command: &mut Command, bin: &Path, what: &str) -> Result<Value> {
    let out = command
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    if !out.status.success() {
        bail!("{} failed ({})", bin.display(), out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .with_context(|| format!("the {what} benchmark printed no JSON:\n{stdout}"))
}

/// A training run as the benchmark saw it.
struct Trained {
    /// From the start of `envace train` to its last held-out evaluation (category `all`):
    /// the training budget, without the test-time rehearsal curve that may follow it.
    train_secs: f64,
    /// The whole `envace train` process.
    total_secs: f64,
    /// The run's eval rows.
    evals: Vec<Value>,
}

/// Trains `config` into a fresh store.
fn train(envace: &Path, root: &Path, config: &str, store: &Path) -> Result<Trained> {
    if let Some(dir) = store.parent() {
        if dir.exists() {
            std::fs::remove_dir_all(dir)
                .with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    eprintln!("xtask: $ envace --store {} train {config}", store.display());
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let status = Command::new(envace)
        .arg("--store")
        .arg(store)
        .args(["train", config])
        .current_dir(root)
        .env("RAYON_NUM_THREADS", threads())
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("cannot start {}", envace.display()))?;
    let secs = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!("training {config} failed ({status})");
    }
    let out = Command::new(envace)
        .arg("--store")
        .arg(store)
        .args(["runs", "show", "1", "--json"])
        .output()
        .with_context(|| format!("cannot start {}", envace.display()))?;
    let shown: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("`envace runs show 1 --json` printed no JSON for {config}"))?;
    let evals = shown
        .get("eval_results")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let last_eval = held_out(&evals)
        .last()
        .and_then(|e| e.get("wall_time").and_then(Value::as_f64));
    Ok(Trained {
        train_secs: last_eval.map_or(secs, |t| t - started_unix),
        total_secs: secs,
        evals,
    })
}

/// The plain held-out success rows (category `all`), by step.
fn held_out(evals: &[Value]) -> Vec<&Value> {
    let mut rows: Vec<&Value> = evals
        .iter()
        .filter(|e| e.get("metric").and_then(Value::as_str) == Some("success"))
        .filter(|e| e.get("category").and_then(Value::as_str) == Some("all"))
        .collect();
    rows.sort_by_key(|e| e.get("step").and_then(Value::as_u64).unwrap_or(0));
    rows
}

/// The test-time rehearsal curve of a run: success per `rehearsal/<style>/<N>` category.
fn budget_curve(evals: &[Value]) -> Value {
    let mut curve = serde_json::Map::new();
    for e in evals {
        let category = e
            .get("category")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if let Some(point) = category.strip_prefix("rehearsal/")
            && e.get("metric").and_then(Value::as_str) == Some("success")
        {
            curve.insert(
                point.to_owned(),
                e.get("value").cloned().unwrap_or(Value::Null),
            );
        }
    }
    Value::Object(curve)
}

/// The held-out success of the last evaluation, or with `at_step` of the evaluation after that
/// many steps (the SFT-only figure is the one where RL starts, after any evaluations during
/// SFT).
fn success_at(evals: &[Value], at_step: Option<u64>) -> Option<f64> {
    let rows = held_out(evals);
    let row = match at_step {
        Some(step) => rows
            .into_iter()
            .find(|e| e.get("step").and_then(Value::as_u64) == Some(step)),
        None => rows.last().copied(),
    }?;
    row.get("value").and_then(Value::as_f64)
}

/// An experiment config file as an editable TOML document.
pub(crate) fn read_toml(path: &Path) -> Result<toml_edit::DocumentMut> {
    std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .parse()
        .with_context(|| format!("{} is not TOML", path.display()))
}

/// `[sft].n_steps` of the experiment config `config` (under `root`).
fn sft_steps(root: &Path, config: &str) -> Result<u64> {
    let path = root.join(config);
    let doc = read_toml(&path)?;
    doc["sft"]["n_steps"]
        .as_integer()
        .and_then(|n| u64::try_from(n).ok())
        .with_context(|| format!("{}: no [sft].n_steps", path.display()))
}

/// `cargo xtask bench quickstart`: the quickstart (rehearsal GRPO) and its real-environment
/// baseline, same seed and budget; SFT only is the held-out success both runs measure before
/// their first RL step.
pub fn quickstart(root: &Path) -> Result<()> {
    let envace = release_cli(root, Simd::Native)?;
    let bench_dir = root.join("target").join("bench").join("quickstart");
    let rehearsed = train(
        &envace,
        root,
        "assets/configs/quickstart.toml",
        &bench_dir.join("rehearse").join("runs.sqlite"),
    )?;
    let real_run = train(
        &envace,
        root,
        "assets/configs/real-env-baseline.toml",
        &bench_dir.join("real").join("runs.sqlite"),
    )?;
    let sft_only = success_at(
        &rehearsed.evals,
        Some(sft_steps(root, "assets/configs/quickstart.toml")?),
    );
    let rehearse = success_at(&rehearsed.evals, None);
    let real = success_at(&real_run.evals, None);
    let met = rehearse.is_some_and(|r| r >= TARGET_REHEARSAL_SUCCESS)
        && rehearsed.train_secs <= TARGET_WALL_SECS
        && rehearse.zip(real).is_some_and(|(r, b)| r >= b);
    let figures = |run: &Trained, success: Option<f64>| {
        json!({
            "wall_secs": run.train_secs,
            "process_secs": run.total_secs,
            "held_out_success": success,
            "test_time_rehearsal_success": budget_curve(&run.evals),
            "evals": held_out(&run.evals),
        })
    };
    let result = json!({
        "bench": "quickstart",
        "figures": {
            "threads": threads(),
            "sft_only": {"held_out_success": sft_only},
            "rehearsal_grpo": figures(&rehearsed, rehearse),
            "real_env_grpo": figures(&real_run, real),
        },
        "ratios": {
            "rehearsal_vs_real_success": rehearse.zip(real).map(|(r, b)| if b > 0.0 { r / b } else { f64::NAN }),
            "target": {
                "rehearsal_success_at_least": TARGET_REHEARSAL_SUCCESS,
                "within_secs": TARGET_WALL_SECS,
                "not_below_real": true,
                "met": met,
            },
        },
    });
    write_result(root, "quickstart", &result)
}
