//! `cargo xtask bench science [--seeds A,B,C] [--config FILE] [--jobs N] [--fresh]`: does world-rehearsal RL train, measured over
//! seeds. For each seed: SFT once (the quickstart's SFT), then three arms from that same
//! checkpoint, each its own `envace train` run — real-environment GRPO, rehearsal GRPO, and an
//! equal-compute control that spends the RL arms' wall time on more SFT — and the test-time
//! rehearsal curves (N = 0, 1, 2, 4, 8; parallel and sequential) on the SFT-only and the
//! rehearsal-GRPO checkpoints. Every arm is evaluated on the same held-out tasks: greedy
//! success and score, per family, and sampled pass@k. Prints means ± standard errors over
//! seeds, the per-seed figures behind them, each target with its verdict, and the CPU.
//!
//! Every config is the quickstart preset (or `--config FILE`, e.g. another task mix) with a few
//! keys changed (named in the JSON), so the benchmark measures what a person who clicks Start
//! gets.
//!
//! It takes hours, so nothing is lost to a stop or a crash: run it again and each arm whose run
//! finished with the same config is read back from the seed's store, one that was stopped or
//! killed after a checkpoint continues from it (`envace train --resume`), and the rest train
//! (`--fresh` starts every seed over). Each arm's invocations are logged in
//! `NAME.segments.json` (start, end, commit): times are summed over them, and the JSON names
//! the commits the arms ran on.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use toml_edit::{DocumentMut, Item, value};

use crate::bench_runs::{read_toml, write_result};

/// Held-out tasks and sampled trials of every evaluation of the benchmark.
const EVAL_TASKS: i64 = 200;
const EVAL_TRIALS: i64 = 8;
/// Test-time rehearsal budgets (N = 0 is the plain evaluation).
const BUDGETS: [i64; 4] = [1, 2, 4, 8];
/// Held-out tasks the test-time curves run on (the first of the evaluation's): each point
/// costs N imagined attempts a task, so that the curves of two checkpoints a seed fit beside
/// its training.
const CURVE_TASKS: i64 = 100;
const DEFAULT_SEEDS: [u64; 3] = [1, 2, 3];

/// The targets.
const TARGET_RL_GAIN: f64 = 0.10;
const TARGET_TEST_TIME_GAIN: f64 = 0.05;
const TARGET_ARM_SECS: f64 = 15.0 * 60.0;
const TARGET_TOTAL_SECS: f64 = 2.0 * 3600.0;

/// One `envace train` run of the benchmark.
pub(crate) struct Arm {
    /// Seconds from the process start to its last plain held-out evaluation, summed over its
    /// invocations when it was resumed.
    train_secs: f64,
    /// The whole process (every invocation), test-time curves included.
    total_secs: f64,
    /// Its `eval_results` rows.
    evals: Vec<Value>,
    /// How many `envace train` invocations it took (more than one when it was resumed).
    invocations: usize,
    /// The commits those invocations ran (`-dirty`: with uncommitted changes).
    commits: Vec<String>,
}

impl Arm {
    /// The value of `metric` in `category` at the run's last evaluated step.
    fn last(&self, category: &str, metric: &str) -> Option<f64> {
        self.evals
            .iter()
            .filter(|e| e.get("category").and_then(Value::as_str) == Some(category))
            .filter(|e| e.get("metric").and_then(Value::as_str) == Some(metric))
            .max_by_key(|e| e.get("step").and_then(Value::as_u64).unwrap_or(0))
            .and_then(|e| e.get("value").and_then(Value::as_f64))
    }

    /// Every figure of the last plain evaluation: `{metric: value}` for `all` and each family.
    pub(crate) fn figures(&self) -> Value {
        let mut out = serde_json::Map::new();
        let last_step = self
            .evals
            .iter()
            .filter(|e| e.get("category").and_then(Value::as_str) == Some("all"))
            .filter_map(|e| e.get("step").and_then(Value::as_u64))
            .max();
        for e in &self.evals {
            let category = e.get("category").and_then(Value::as_str).unwrap_or("");
            if e.get("step").and_then(Value::as_u64) != last_step
                || !(category == "all" || category.starts_with("family/"))
            {
                continue;
            }
            let metric = e.get("metric").and_then(Value::as_str).unwrap_or("");
            let entry = out.entry(category.to_owned()).or_insert_with(|| json!({}));
            entry[metric] = e.get("value").cloned().unwrap_or(Value::Null);
        }
        Value::Object(out)
    }

    /// Success with N imagined attempts in `style` on the curves' tasks; N = 0 is the curves'
    /// own plain point when they ran on fewer tasks than the plain evaluation, else that one.
    fn curve_point(&self, style: &str, n: i64) -> Option<f64> {
        self.last(&format!("rehearsal/{style}/{n}"), "success")
            .or_else(|| (n == 0).then(|| self.last("all", "success")).flatten())
    }

    /// The test-time curve: `{style: {N: success}}`.
    fn curve(&self) -> Value {
        let mut out = json!({});
        for style in ["parallel", "sequential"] {
            let mut points = serde_json::Map::new();
            points.insert("0".to_owned(), json!(self.curve_point(style, 0)));
            for n in BUDGETS {
                points.insert(n.to_string(), json!(self.curve_point(style, n)));
            }
            out[style] = Value::Object(points);
        }
        out
    }
}

/// The preset the benchmark starts from when no `--config` is given.
pub const DEFAULT_CONFIG: &str = "assets/configs/quickstart.toml";

/// The experiment config `path` with the benchmark's evaluation and `seed` (and `threads`
/// compute threads when seeds run side by side).
fn base_config(path: &Path, seed: u64, threads: Option<i64>) -> Result<DocumentMut> {
    let mut doc = read_toml(path)?;
    if let Some(n) = threads {
        doc["backend"]["n_threads"] = value(n);
    }
    doc["run"]["seed"] = value(seed as i64);
    doc["eval"]["max_tasks"] = value(EVAL_TASKS);
    doc["eval"]["n_trials"] = value(EVAL_TRIALS);
    // Evaluate once, after the last step (and after SFT for the SFT run).
    doc["eval"]["interval_steps"] = value(0);
    doc["eval"]["sft_interval_steps"] = value(0);
    doc["rehearsal"]["budget_curve"] = Item::None;
    Ok(doc)
}

pub(crate) fn set_name(doc: &mut DocumentMut, name: &str) {
    doc["run"]["name"] = value(name);
}

pub(crate) fn init_from_sft(doc: &mut DocumentMut) {
    let mut init = toml_edit::Table::new();
    init["run"] = value("sft");
    doc["init"] = Item::Table(init);
}

fn budget_curve(doc: &mut DocumentMut) {
    let mut budgets = toml_edit::Array::new();
    for n in BUDGETS {
        budgets.push(n);
    }
    doc["rehearsal"]["budget_curve"] = value(budgets);
    doc["rehearsal"]["curve_max_tasks"] = value(CURVE_TASKS);
}

/// `envace runs show NAME --json`, or None when the store has no such run.
fn show(envace: &Path, store: &Path, name: &str) -> Result<Option<Value>> {
    if !store.exists() {
        return Ok(None);
    }
    let out = Command::new(envace)
        .arg("--store")
        .arg(store)
        .args(["runs", "show", name, "--json"])
        .output()
        .with_context(|| format!("cannot start {}", envace.display()))?;
    if !out.status.success() {
        return Ok(None);
    }
    serde_json::from_slice(&out.stdout)
        .map(Some)
        .with_context(|| format!("`envace runs show {name} --json` printed no JSON"))
}

/// The checkout's commit, `-dirty` when tracked files differ from it; read just before the
/// release build, it names what the arms' binary is built from.
pub(crate) fn commit() -> String {
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".to_owned(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        );
    let clean = Command::new("git")
        .args(["diff", "--quiet", "HEAD", "--"])
        .status()
        .is_ok_and(|s| s.success());
    if clean { head } else { format!("{head}-dirty") }
}

/// `items` without repeats, in first-seen order.
fn distinct(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// How an arm's run is to be (re)started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// Its run finished with this very config: read it back.
    Reuse,
    /// Its run with this config stopped or was killed after a checkpoint: continue it.
    Resume,
    /// Train it from the start.
    Fresh,
}

/// What to do with an arm whose store entry is `shown` (None: not in the store), given the config
/// text it would run; `fresh` once an earlier arm of the seed was retrained from the start, since
/// the later arms start from its checkpoint.
fn plan(shown: Option<&Value>, config: &str, fresh: bool) -> Plan {
    let Some(shown) = shown.filter(|_| !fresh) else {
        return Plan::Fresh;
    };
    if shown["run"]["config_toml"].as_str() != Some(config) {
        return Plan::Fresh;
    }
    let has_checkpoint = shown["checkpoints"]
        .as_array()
        .is_some_and(|c| !c.is_empty());
    match shown["run"]["status"].as_str() {
        Some("finished") => Plan::Reuse,
        Some("failed") => Plan::Fresh,
        _ if has_checkpoint => Plan::Resume,
        _ => Plan::Fresh,
    }
}

/// The arm's `envace train` invocations so far (`NAME.segments.json`): when each started, on
/// which commit, and when it ended (absent for one that was killed).
fn read_segments(path: &Path) -> Result<Vec<Value>> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .with_context(|| format!("{} is not a JSON list of segments", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn write_segments(path: &Path, segments: &[Value]) -> Result<()> {
    std::fs::write(path, Value::from(segments.to_vec()).to_string())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Seconds the arm's invocations ran, each to its end or, for one that was killed, to its last
/// row in the store (a metric or an evaluation); the last one up to `last_end`.
fn segment_secs(segments: &[Value], row_times: &[f64], last_end: f64) -> f64 {
    let starts: Vec<f64> = segments
        .iter()
        .map(|s| s["start_unix"].as_f64().unwrap_or(f64::NAN))
        .collect();
    let mut secs = 0.0;
    for (idx, seg) in segments.iter().enumerate() {
        let start = starts[idx];
        let end = if idx + 1 == segments.len() {
            last_end
        } else if let Some(end) = seg["end_unix"].as_f64() {
            end
        } else {
            let next = starts[idx + 1];
            row_times
                .iter()
                .copied()
                .filter(|&t| t >= start && t < next)
                .fold(start, f64::max)
        };
        secs += (end - start).max(0.0);
    }
    secs
}

/// Wall times of every metric and evaluation row of run `name`.
fn row_times(envace: &Path, store: &Path, name: &str, shown: &Value) -> Result<Vec<f64>> {
    let out = Command::new(envace)
        .arg("--store")
        .arg(store)
        .args([
            "runs", "export", name, "--format", "jsonl", "--table", "metrics",
        ])
        .output()
        .with_context(|| format!("cannot start {}", envace.display()))?;
    let mut times: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|row| row.get("wall_time").and_then(Value::as_f64))
        .collect();
    times.extend(
        shown["eval_results"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e.get("wall_time").and_then(Value::as_f64)),
    );
    Ok(times)
}

/// Writes `doc` to `dir/name.toml` and trains it into `store`: continues the arm's run when an
/// earlier invocation of the benchmark stopped or was killed in it after a checkpoint, and reads
/// it back when it finished with this very config (`fresh`: retrain it; set here when this arm
/// starts from scratch, so that the arms after it do too). Its times count every invocation.
pub(crate) fn train(
    envace: &Path,
    dir: &Path,
    name: &str,
    doc: &DocumentMut,
    store: &Path,
    fresh: &mut bool,
    commit: &str,
) -> Result<Arm> {
    let config = dir.join(format!("{name}.toml"));
    let text = doc.to_string();
    let segments_path = dir.join(format!("{name}.segments.json"));
    let mut segments = read_segments(&segments_path)?;
    let before = show(envace, store, name)?;
    let plan = plan(before.as_ref(), &text, *fresh);
    let mut last_end = None;
    match plan {
        Plan::Reuse => {
            eprintln!(
                "xtask: {name}: finished with this config in {}; read back",
                store.display()
            );
        }
        Plan::Resume | Plan::Fresh => {
            if plan == Plan::Fresh {
                *fresh = true;
                segments.clear();
            }
            std::fs::write(&config, &text)
                .with_context(|| format!("cannot write {}", config.display()))?;
            let resume: &[&str] = if plan == Plan::Resume {
                &["--resume", name]
            } else {
                &[]
            };
            eprintln!(
                "xtask: $ envace --store {} train {} {}",
                store.display(),
                config.display(),
                resume.join(" ")
            );
            let started_unix = unix_now();
            segments.push(json!({"start_unix": started_unix, "commit": commit}));
            write_segments(&segments_path, &segments)?;
            let status = Command::new(envace)
                .arg("--store")
                .arg(store)
                .arg("train")
                .arg(&config)
                .args(resume)
                .stdout(Stdio::null())
                .status()
                .with_context(|| format!("cannot start {}", envace.display()))?;
            let ended = unix_now();
            if let Some(last) = segments.last_mut() {
                last["end_unix"] = json!(ended);
            }
            write_segments(&segments_path, &segments)?;
            if !status.success() {
                bail!(
                    "training {} did not finish ({status}); run the benchmark again to continue it from its last checkpoint",
                    config.display()
                );
            }
            last_end = Some(ended);
        }
    }
    // A finished run read back is as `runs show` gave it; a trained one is read again.
    let shown = match (plan, before) {
        (Plan::Reuse, Some(shown)) => shown,
        _ => show(envace, store, name)?
            .with_context(|| format!("run {name} is not in {}", store.display()))?,
    };
    let evals = shown
        .get("eval_results")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let times = row_times(envace, store, name, &shown)?;
    // The last invocation ended when its process did (or, read back, at its last row).
    let end = last_end
        .or_else(|| segments.last().and_then(|s| s["end_unix"].as_f64()))
        .unwrap_or_else(|| times.iter().copied().fold(f64::NAN, f64::max));
    let last_plain = evals
        .iter()
        .filter(|e| e.get("category").and_then(Value::as_str) == Some("all"))
        .filter_map(|e| e.get("wall_time").and_then(Value::as_f64))
        .fold(f64::NAN, f64::max);
    let total_secs = segment_secs(&segments, &times, end);
    // Training ends at the last plain held-out evaluation; the test-time curves come after it.
    let train_secs = if last_plain.is_finite() {
        segment_secs(&segments, &times, last_plain.min(end))
    } else {
        total_secs
    };
    let commits = distinct(
        segments
            .iter()
            .filter_map(|s| s["commit"].as_str())
            .map(str::to_owned),
    );
    Ok(Arm {
        train_secs,
        total_secs,
        evals,
        invocations: segments.len(),
        commits,
    })
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The median SFT step time of run `name`, from its `perf/step_time_secs` metrics.
fn sft_step_secs(envace: &Path, store: &Path, name: &str) -> Result<f64> {
    let out = Command::new(envace)
        .arg("--store")
        .arg(store)
        .args([
            "runs", "export", name, "--format", "jsonl", "--table", "metrics",
        ])
        .output()
        .with_context(|| format!("cannot start {}", envace.display()))?;
    let secs: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|row| row.get("key").and_then(Value::as_str) == Some("perf/step_time_secs"))
        .filter_map(|row| row.get("value").and_then(Value::as_f64))
        .collect();
    crate::bench::median(&secs)
        .with_context(|| format!("run {name} has no perf/step_time_secs metrics"))
}

/// Mean and standard error (sample sd / √n) of values; NaN for none.
pub(crate) fn mean_se(values: &[f64]) -> (f64, f64) {
    let n = values.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return (mean, f64::NAN);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean, (var / n as f64).sqrt())
}

fn stat(values: &[f64]) -> Value {
    let (mean, se) = mean_se(values);
    json!({"mean": mean, "se": se, "per_seed": values})
}

/// The CPU this ran on: model name and the vector extensions that matter for our kernels.
pub(crate) fn cpu() -> Value {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = text
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or("unknown", str::trim)
        .to_owned();
    let flags: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("flags"))
        .and_then(|l| l.split(':').nth(1))
        .map(|f| {
            f.split_whitespace()
                .filter(|f| ["avx2", "fma", "avx512f", "avx512bw", "avx512vl"].contains(f))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "model": model,
        "vector_extensions": flags,
        "threads": std::env::var("RAYON_NUM_THREADS").ok(),
    })
}

/// The wall time of seeds taking `seed_secs` each on `jobs` workers that take them in order,
/// each seed going to the worker free first (as `science` runs them).
fn makespan(seed_secs: &[f64], jobs: usize) -> f64 {
    let mut lanes = vec![0.0_f64; jobs.max(1)];
    for &secs in seed_secs {
        let first_free = lanes
            .iter_mut()
            .min_by(|a, b| a.total_cmp(b))
            .expect("at least one lane");
        *first_free += secs;
    }
    lanes.into_iter().fold(0.0, f64::max)
}

/// Compute threads of each arm when `jobs` seeds run side by side: the cores shared out (at
/// least one each); None (the config's own setting) for one seed at a time.
fn arm_threads(jobs: usize) -> Option<i64> {
    (jobs > 1).then(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores / jobs).max(1) as i64
    })
}

/// Parses `--jobs N` (seeds run side by side; default 1).
pub fn parse_jobs(args: &[String]) -> Result<usize> {
    match args.iter().position(|a| a == "--jobs") {
        None => Ok(1),
        Some(idx) => args
            .get(idx + 1)
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n >= 1)
            .context("--jobs needs a number of seeds to run side by side, e.g. --jobs 3"),
    }
}

/// Parses `--seeds A,B,C`.
pub fn parse_seeds(args: &[String]) -> Result<Vec<u64>> {
    match args.iter().position(|a| a == "--seeds") {
        None => Ok(DEFAULT_SEEDS.to_vec()),
        Some(idx) => {
            let list = args
                .get(idx + 1)
                .context("--seeds needs a comma-separated list, e.g. --seeds 1,2,3")?;
            list.split(',')
                .map(|s| {
                    s.trim()
                        .parse::<u64>()
                        .with_context(|| format!("--seeds: {s:?} is not a seed (a whole number)"))
                })
                .collect()
        }
    }
}

/// Parses `--config FILE` (relative to the working directory), else the quickstart preset. The
/// arms' configs are written to the benchmark's folder, so relative paths inside FILE (data,
/// model files) would resolve there: give them as absolute paths.
pub fn parse_config(root: &Path, args: &[String]) -> Result<PathBuf> {
    match args.iter().position(|a| a == "--config") {
        None => Ok(root.join(DEFAULT_CONFIG)),
        Some(idx) => args
            .get(idx + 1)
            .map(PathBuf::from)
            .context("--config needs an experiment config file, e.g. --config mix.toml"),
    }
}

/// One seed's figures (see [`run_seed`]).
struct SeedResult {
    figures: Value,
    /// Held-out greedy success: SFT only, more SFT, real GRPO, rehearsal GRPO.
    success: [f64; 4],
    /// Test-time parallel N = 4 gain on the SFT-only and the rehearsal-GRPO checkpoints.
    test_time_gain: [f64; 2],
    /// SFT plus the rehearsal arm's training, seconds.
    arm_secs: f64,
    commits: Vec<String>,
}

/// For one seed: SFT once, then the two RL arms and more SFT from its checkpoint, each
/// evaluated; `threads` sets `[backend].n_threads` of every arm when seeds run side by side.
fn run_seed(
    envace: &Path,
    bench_dir: &Path,
    config: &Path,
    seed: u64,
    fresh: bool,
    commit: &str,
    threads: Option<i64>,
) -> Result<SeedResult> {
    let dir: PathBuf = bench_dir.join(format!("seed-{seed}"));
    if fresh && dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let store = dir.join("runs.sqlite");
    // Set once an arm trains from scratch: every later arm of the seed starts from its
    // checkpoint, so none of theirs from an earlier invocation can be read back.
    let mut retrained = false;

    // SFT once; its evaluation (and test-time curve) is the SFT-only figure.
    let mut sft = base_config(config, seed, threads)?;
    set_name(&mut sft, "sft");
    sft["rl"]["n_steps"] = value(0);
    budget_curve(&mut sft);
    let sft_arm = train(envace, &dir, "sft", &sft, &store, &mut retrained, commit)?;

    // The two RL arms from the SFT checkpoint.
    let mut rehearse = base_config(config, seed, threads)?;
    set_name(&mut rehearse, "rehearsal-grpo");
    rehearse["sft"]["enabled"] = value(false);
    rehearse["env"]["tool_response_mode"] = value("rehearse");
    init_from_sft(&mut rehearse);
    budget_curve(&mut rehearse);
    let rehearse_arm = train(
        envace,
        &dir,
        "rehearsal-grpo",
        &rehearse,
        &store,
        &mut retrained,
        commit,
    )?;

    let mut real = base_config(config, seed, threads)?;
    set_name(&mut real, "real-grpo");
    real["sft"]["enabled"] = value(false);
    real["env"]["tool_response_mode"] = value("real");
    init_from_sft(&mut real);
    let real_arm = train(
        envace,
        &dir,
        "real-grpo",
        &real,
        &store,
        &mut retrained,
        commit,
    )?;

    // More SFT for as long as the RL arms took, at SFT's final learning rate.
    let step_secs = sft_step_secs(envace, &store, "sft")?;
    let rl_secs = (rehearse_arm.train_secs + real_arm.train_secs) / 2.0;
    let n_more = ((rl_secs / step_secs).round() as i64).max(1);
    let mut more = base_config(config, seed, threads)?;
    set_name(&mut more, "more-sft");
    let final_lr = more["sft"]["lr"].as_float().unwrap_or(1e-3)
        * more["sft"]["min_lr_ratio"].as_float().unwrap_or(1.0);
    more["sft"]["n_steps"] = value(n_more);
    more["sft"]["lr"] = value(final_lr);
    more["sft"]["lr_schedule"] = value("constant");
    more["sft"]["warmup_steps"] = value(0);
    more["rl"]["n_steps"] = value(0);
    init_from_sft(&mut more);
    let more_arm = train(
        envace,
        &dir,
        "more-sft",
        &more,
        &store,
        &mut retrained,
        commit,
    )?;

    let success = |arm: &Arm| arm.last("all", "success").unwrap_or(f64::NAN);
    let gain = |arm: &Arm, n: i64| {
        arm.curve_point("parallel", n).unwrap_or(f64::NAN)
            - arm.curve_point("parallel", 0).unwrap_or(f64::NAN)
    };
    let figures = json!({
        "seed": seed,
        "sft_only": {"held_out": sft_arm.figures(), "test_time": sft_arm.curve(), "wall_secs": sft_arm.train_secs},
        "more_sft": {"held_out": more_arm.figures(), "wall_secs": more_arm.train_secs, "extra_sft_steps": n_more},
        "real_grpo": {"held_out": real_arm.figures(), "wall_secs": real_arm.train_secs},
        "rehearsal_grpo": {"held_out": rehearse_arm.figures(), "test_time": rehearse_arm.curve(), "wall_secs": rehearse_arm.train_secs},
        "sft_plus_rehearsal_grpo_secs": sft_arm.train_secs + rehearse_arm.train_secs,
        "process_secs": sft_arm.total_secs + rehearse_arm.total_secs + real_arm.total_secs + more_arm.total_secs,
        "invocations": {"sft": sft_arm.invocations, "rehearsal_grpo": rehearse_arm.invocations, "real_grpo": real_arm.invocations, "more_sft": more_arm.invocations},
        "commits": {"sft": sft_arm.commits, "rehearsal_grpo": rehearse_arm.commits, "real_grpo": real_arm.commits, "more_sft": more_arm.commits},
    });
    let mut commits = Vec::new();
    for arm in [&sft_arm, &rehearse_arm, &real_arm, &more_arm] {
        commits.extend(arm.commits.iter().cloned());
    }
    eprintln!("xtask: seed {seed}: {figures}");
    Ok(SeedResult {
        figures,
        success: [
            success(&sft_arm),
            success(&more_arm),
            success(&real_arm),
            success(&rehearse_arm),
        ],
        test_time_gain: [gain(&sft_arm, 4), gain(&rehearse_arm, 4)],
        arm_secs: sft_arm.train_secs + rehearse_arm.train_secs,
        commits,
    })
}

/// `cargo xtask bench science [--seeds A,B,C] [--config FILE] [--jobs N] [--fresh]`: continues
/// the arms of an earlier invocation that was stopped or killed (its folder under
/// `target/bench/science`) unless `fresh`; runs `jobs` seeds at a time.
pub fn science(root: &Path, seeds: &[u64], config: &Path, fresh: bool, jobs: usize) -> Result<()> {
    if seeds.is_empty() {
        bail!("--seeds: give at least one seed");
    }
    // Read the config (a missing file or bad TOML fails here) before the release build and
    // hours of training; `envace train` validates each arm's config in full.
    base_config(config, 0, None)?;
    let commit = commit();
    let envace = crate::bench_runs::release_cli(root, crate::bench::Simd::Native)?;
    let bench_dir = root.join("target").join("bench").join("science");
    let started = Instant::now();
    let jobs = jobs.clamp(1, seeds.len());
    let threads = arm_threads(jobs);
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<SeedResult>>>> =
        seeds.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let idx = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&seed) = seeds.get(idx) else { break };
                    let result =
                        run_seed(&envace, &bench_dir, config, seed, fresh, &commit, threads);
                    let failed = result.is_err();
                    *slots[idx].lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
                    if failed {
                        break;
                    }
                }
            });
        }
    });
    let mut per_seed = Vec::new();
    let mut all_commits = Vec::new();
    for (slot, seed) in slots.into_iter().zip(seeds) {
        match slot.into_inner().unwrap_or_else(PoisonError::into_inner) {
            Some(Ok(r)) => {
                all_commits.extend(r.commits);
                per_seed.push((r.figures, r.success, r.test_time_gain, r.arm_secs));
            }
            Some(Err(err)) => return Err(err.context(format!("seed {seed}"))),
            None => bail!("seed {seed} was not run: another seed failed first"),
        }
    }
    // The benchmark's time is its arms' processes, summed over invocations when it was resumed
    // (the time between invocations and the release build are not counted), with seeds that
    // ran side by side overlapping.
    let seed_secs: Vec<f64> = per_seed
        .iter()
        .map(|(f, _, _, _)| f["process_secs"].as_f64().unwrap_or(f64::NAN))
        .collect();
    let total_secs = makespan(&seed_secs, jobs);
    let summed_secs: f64 = seed_secs.iter().sum();
    let invocation_secs = started.elapsed().as_secs_f64();
    let commits = distinct(all_commits);
    if commits.len() > 1 {
        eprintln!(
            "xtask: warning: the arms ran on {} different commits ({}); see per_seed.commits",
            commits.len(),
            commits.join(", ")
        );
    }
    let column = |idx: usize| -> Vec<f64> { per_seed.iter().map(|(_, s, _, _)| s[idx]).collect() };
    let paired = |a: usize, b: usize| -> Vec<f64> {
        per_seed.iter().map(|(_, s, _, _)| s[a] - s[b]).collect()
    };
    let (sft, more, real, rehearse) = (column(0), column(1), column(2), column(3));
    let rl_gain = paired(3, 0);
    let over_more = paired(3, 1);
    let over_real = paired(3, 2);
    let tt_sft: Vec<f64> = per_seed.iter().map(|(_, _, g, _)| g[0]).collect();
    let tt_rl: Vec<f64> = per_seed.iter().map(|(_, _, g, _)| g[1]).collect();
    let tt_diff: Vec<f64> = tt_rl.iter().zip(&tt_sft).map(|(a, b)| a - b).collect();
    let arm_secs: Vec<f64> = per_seed.iter().map(|(_, _, _, s)| *s).collect();
    let (gain_mean, gain_se) = mean_se(&rl_gain);
    let (over_real_mean, over_real_se) = mean_se(&over_real);
    let (tt_mean, _) = mean_se(&tt_rl);
    let (tt_diff_mean, _) = mean_se(&tt_diff);
    let verdict = |met: bool| if met { "met" } else { "not met" };
    let targets = json!({
        "rl_minus_sft_success": {
            "target": format!(">= {TARGET_RL_GAIN} and > 2 standard errors"),
            "value": gain_mean, "se": gain_se,
            "verdict": verdict(gain_mean >= TARGET_RL_GAIN && gain_mean > 2.0 * gain_se),
        },
        "rl_minus_more_sft_success": {
            "target": "> 0",
            "value": mean_se(&over_more).0,
            "verdict": verdict(mean_se(&over_more).0 > 0.0),
        },
        "rehearsal_minus_real_grpo_success": {
            "target": ">= -1 standard error",
            "value": over_real_mean, "se": over_real_se,
            "verdict": verdict(over_real_mean >= -over_real_se.max(0.0)),
        },
        "test_time_parallel_4_gain_on_rehearsal_grpo": {
            "target": format!(">= {TARGET_TEST_TIME_GAIN}, and above the gain on SFT only"),
            "value": tt_mean, "gain_on_sft_only": mean_se(&tt_sft).0,
            "verdict": verdict(tt_mean >= TARGET_TEST_TIME_GAIN && tt_diff_mean > 0.0),
        },
        "sft_plus_rl_arm_secs": {
            "target": format!("<= {TARGET_ARM_SECS}"),
            "value": arm_secs.iter().copied().fold(f64::NAN, f64::max),
            "verdict": verdict(arm_secs.iter().all(|&s| s <= TARGET_ARM_SECS)),
        },
        "benchmark_secs": {
            "target": format!("<= {TARGET_TOTAL_SECS}"),
            "value": total_secs,
            "verdict": verdict(total_secs <= TARGET_TOTAL_SECS),
        },
    });
    let result = json!({
        "bench": "science",
        "figures": {
            "cpu": cpu(),
            "seeds": seeds,
            "held_out_tasks": EVAL_TASKS,
            "curve_tasks": CURVE_TASKS,
            "seeds_side_by_side": jobs,
            "arm_threads": threads,
            "sampled_trials": EVAL_TRIALS,
            "config": format!("{}; every arm evaluates once at its end on the same held-out tasks (eval.max_tasks = 200, n_trials = 8), the test-time curves on the first 100 of them (rehearsal.curve_max_tasks, with their own N = 0); the SFT run sets rl.n_steps = 0; the RL arms set sft.enabled = false, [init] run = \"sft\" and tool_response_mode = rehearse | real; more-SFT sets [init] run = \"sft\", rl.n_steps = 0 and sft.n_steps to the RL arms' mean wall time over the SFT step time, at SFT's final learning rate", config.display()),
            "success": {
                "sft_only": stat(&sft),
                "more_sft": stat(&more),
                "real_grpo": stat(&real),
                "rehearsal_grpo": stat(&rehearse),
            },
            "test_time_parallel_4_gain": {
                "sft_only": stat(&tt_sft),
                "rehearsal_grpo": stat(&tt_rl),
            },
            "per_seed": per_seed.iter().map(|(f, _, _, _)| f.clone()).collect::<Vec<_>>(),
            "total_secs": total_secs,
            "summed_arm_secs": summed_secs,
            "this_invocation_secs": invocation_secs,
            "commits": commits,
        },
        "ratios": {
            "rl_minus_sft": stat(&rl_gain),
            "rl_minus_more_sft": stat(&over_more),
            "rehearsal_minus_real": stat(&over_real),
            "targets": targets,
        },
    });
    write_result(root, "science", &result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(status: &str, config: &str, checkpoints: usize) -> Value {
        json!({
            "run": {"status": status, "config_toml": config},
            "checkpoints": vec![json!({"step": 25}); checkpoints],
        })
    }

    #[test]
    fn an_arm_is_read_back_continued_or_retrained_from_its_store_entry() {
        let cfg = "[run]\nname = \"sft\"\n";
        assert_eq!(plan(None, cfg, false), Plan::Fresh);
        assert_eq!(
            plan(Some(&shown("finished", cfg, 3)), cfg, false),
            Plan::Reuse
        );
        // Killed (still marked running) or stopped after a checkpoint: continue it.
        assert_eq!(
            plan(Some(&shown("running", cfg, 1)), cfg, false),
            Plan::Resume
        );
        assert_eq!(
            plan(Some(&shown("stopped", cfg, 2)), cfg, false),
            Plan::Resume
        );
        // Killed before its first checkpoint, failed, or another config: start over.
        assert_eq!(
            plan(Some(&shown("running", cfg, 0)), cfg, false),
            Plan::Fresh
        );
        assert_eq!(
            plan(Some(&shown("failed", cfg, 2)), cfg, false),
            Plan::Fresh
        );
        assert_eq!(
            plan(Some(&shown("finished", "[run]\n", 3)), cfg, false),
            Plan::Fresh
        );
        // An earlier arm of the seed was retrained: this one's checkpoint is stale.
        assert_eq!(
            plan(Some(&shown("finished", cfg, 3)), cfg, true),
            Plan::Fresh
        );
    }

    #[test]
    fn an_arms_time_sums_its_invocations_up_to_each_ones_last_row() {
        // Invocation 1 was killed: it counts to its last row (t = 130), not to invocation 2's
        // start (t = 500); invocation 2 ended cleanly at 560, invocation 3 runs to `last_end`.
        let segments = vec![
            json!({"start_unix": 100.0, "commit": "a"}),
            json!({"start_unix": 500.0, "end_unix": 560.0, "commit": "a"}),
            json!({"start_unix": 600.0, "commit": "b"}),
        ];
        let rows = [110.0, 130.0, 520.0, 610.0, 640.0];
        assert_eq!(segment_secs(&segments, &rows, 650.0), 30.0 + 60.0 + 50.0);
        // A killed invocation with no row counts nothing.
        assert_eq!(
            segment_secs(
                &[json!({"start_unix": 0.0}), json!({"start_unix": 50.0})],
                &[],
                70.0
            ),
            20.0
        );
    }

    #[test]
    fn seeds_side_by_side_take_the_longest_lane() {
        assert_eq!(makespan(&[10.0, 20.0, 30.0], 1), 60.0);
        assert_eq!(makespan(&[10.0, 20.0, 30.0], 3), 30.0);
        // Two workers: 10 and 20 start together, 30 follows the 10.
        assert_eq!(makespan(&[10.0, 20.0, 30.0], 2), 40.0);
    }

    #[test]
    fn segments_round_trip_through_their_file_and_a_missing_file_is_none() {
        let dir = std::env::temp_dir().join(format!("xtask-segments-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sft.segments.json");
        assert!(read_segments(&path).unwrap().is_empty());
        let segments = vec![json!({"start_unix": 1.5, "end_unix": 2.5, "commit": "abc"})];
        write_segments(&path, &segments).unwrap();
        assert_eq!(read_segments(&path).unwrap(), segments);
        std::fs::write(&path, "not json").unwrap();
        let err = read_segments(&path).unwrap_err().to_string();
        assert!(err.contains("sft.segments.json"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
