//! `cargo xtask chaos [--kills N] [--seed S]`: the crash loop of
//! `crates/envace-cli/tests/commands/resume.rs` with more kills and a fresh seed — `envace train`
//! killed with SIGKILL at N points drawn from the seed (in SFT and RL, inside store transactions,
//! at every stage of a checkpoint write, between checkpoints, at random moments), resumed after
//! each — and the full-disk test beside it; prints the loop's report as one JSON line and writes
//! it to `target/bench/chaos.json`.

use std::path::Path;
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// Kills when `--kills` is not given.
const DEFAULT_KILLS: u64 = 20;

fn flag(args: &[String], name: &str) -> Result<Option<u64>> {
    let Some(at) = args.iter().position(|a| a == name) else {
        return Ok(None);
    };
    let value = args
        .get(at + 1)
        .with_context(|| format!("{name} needs a number"))?;
    let parsed = match value.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => value.parse(),
    };
    parsed
        .map(Some)
        .with_context(|| format!("{name} {value:?} is not a whole number"))
}

/// The command.
pub fn chaos(root: &Path, args: &[String]) -> Result<()> {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--kills" | "--seed" => {
                rest.next();
            }
            other => bail!("unknown chaos argument {other:?}; use --kills N and --seed S"),
        }
    }
    let kills = flag(args, "--kills")?.unwrap_or(DEFAULT_KILLS);
    if kills < 6 {
        bail!("--kills {kills}: use at least 6, so that every kind of point is reached");
    }
    let seed = match flag(args, "--seed")? {
        Some(seed) => seed,
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    };
    let out_dir = root.join("target").join("bench");
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let report_path = out_dir.join("chaos-loop.json");
    let _ = std::fs::remove_file(&report_path);
    eprintln!(
        "xtask: the crash loop with {kills} kills, seed {seed:#x} (rerun it with --seed {seed:#x})"
    );
    let start = Instant::now();
    let status = Command::new(env!("CARGO"))
        .args([
            "test",
            "--locked",
            "-p",
            "envace-cli",
            "--test",
            "commands",
            "--",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
            "resume::a_run_killed_at_many_points_resumes_to_the_rows_of_an_uninterrupted_run",
            "resume::a_full_disk_during_a_checkpoint_stops_the_run_and_keeps_the_previous_one",
        ])
        .env("ENVACE_CHAOS_KILLS", kills.to_string())
        .env("ENVACE_CHAOS_SEED", format!("{seed:#x}"))
        .env("ENVACE_CHAOS_REPORT", &report_path)
        .status()
        .context("cannot run cargo test")?;
    if !status.success() {
        bail!(
            "the crash loop failed ({status}) with seed {seed:#x}: rerun `cargo xtask chaos --kills {kills} --seed {seed:#x}`"
        );
    }
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(&report_path)
            .with_context(|| format!("the test wrote no report at {}", report_path.display()))?,
    )
    .with_context(|| format!("{} is not JSON", report_path.display()))?;
    let result = json!({
        "bench": "chaos",
        "figures": {
            "cpu": crate::bench_science::cpu(),
            "secs": start.elapsed().as_secs_f64(),
            "loop": report,
            "full_disk": "the checkpoint of step 5 failed on a full disk with its message, the \
                          checkpoint of step 2 stayed whole and named by the store, no half \
                          checkpoint was left, and the run resumed and finished once there was room",
        },
        "ratios": {
            "kills_survived": {
                "value": report["kills"],
                "target": kills,
                "met": report["kills"].as_u64() >= Some(kills),
            },
        },
    });
    crate::bench_runs::write_result(root, "chaos", &result)
}
