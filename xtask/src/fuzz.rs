//! `cargo xtask fuzz TARGET|all [--secs N]`: AFL++ through cargo-afl (stable Rust) on the
//! engine's fuzz targets (`envace::fuzzing`), from the committed seeds in `fuzz/corpus/TARGET/`;
//! each crash found is copied into `fuzz/regressions/TARGET/`, which the engine's tests replay.
//! Prints one JSON line (executions, executions per second, crashes and hangs per target) and
//! writes it to `target/bench/fuzz.json`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

/// The cargo-afl release installed when there is none (its AFL++ is built with it).
const CARGO_AFL: &str = "0.18.2";
/// Seconds per target when `--secs` is not given.
const DEFAULT_SECS: u64 = 60;

/// The targets, as `envace::fuzzing::TARGETS` names them.
const TARGETS: [&str; 6] = [
    "tool_call",
    "rehearse",
    "config",
    "gguf_header",
    "bfcl_line",
    "request",
];

fn parse_args(args: &[String]) -> Result<(Vec<&'static str>, u64)> {
    let mut targets = Vec::new();
    let mut secs = DEFAULT_SECS;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--secs" => {
                let value = rest.next().context("--secs needs a number of seconds")?;
                secs =
                    value.parse().ok().filter(|&s| s > 0).with_context(|| {
                        format!("--secs {value:?} is not a positive whole number")
                    })?;
            }
            "all" => targets.extend(TARGETS),
            name => match TARGETS.iter().find(|t| **t == name) {
                Some(target) => targets.push(*target),
                None => bail!(
                    "no fuzz target {name:?}; the targets are {} (or all)",
                    TARGETS.join(", ")
                ),
            },
        }
    }
    if targets.is_empty() {
        bail!(
            "usage: cargo xtask fuzz TARGET|all [--secs N]; the targets are {}",
            TARGETS.join(", ")
        );
    }
    Ok((targets, secs))
}

/// cargo-afl, installed and its AFL++ built, when it is not there yet.
fn ensure_cargo_afl() -> Result<()> {
    let installed = Command::new("cargo")
        .args(["afl", "--version"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !installed {
        eprintln!("xtask: $ cargo install cargo-afl --locked --version {CARGO_AFL}");
        let status = Command::new("cargo")
            .args(["install", "cargo-afl", "--locked", "--version", CARGO_AFL])
            .status()
            .context("cannot run cargo install")?;
        if !status.success() {
            bail!("installing cargo-afl {CARGO_AFL} failed ({status})");
        }
    }
    // Builds AFL++ and its runtime for this rustc once; says so and fails when already built.
    let out = Command::new("cargo")
        .args(["afl", "config", "--build"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .context("cannot run cargo afl config")?;
    let said = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && !said.contains("already built") {
        bail!("`cargo afl config --build` failed: {said}");
    }
    Ok(())
}

/// `fuzzer_stats` as key → value.
fn read_stats(path: &Path) -> Result<Map<String, Value>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("AFL++ wrote no {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| {
            let v = v.trim();
            let value = v
                .parse::<u64>()
                .map(Value::from)
                .or_else(|_| v.parse::<f64>().map(Value::from))
                .unwrap_or_else(|_| Value::from(v));
            (k.trim().to_owned(), value)
        })
        .collect())
}

/// FNV-1a of `data`, for the names of saved crashes.
fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Copies each crash of one run into `fuzz/regressions/TARGET/` (named by content, so a crash
/// found twice is kept once); returns the files that are new.
fn keep_crashes(crashes: &Path, regressions: &Path) -> Result<Vec<PathBuf>> {
    let mut kept = Vec::new();
    let Ok(entries) = std::fs::read_dir(crashes) else {
        return Ok(kept);
    };
    for entry in entries {
        let path = entry?.path();
        if !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("id:"))
        {
            continue;
        }
        let data =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        std::fs::create_dir_all(regressions)
            .with_context(|| format!("cannot create {}", regressions.display()))?;
        let to = regressions.join(format!("crash-{:016x}", fnv(&data)));
        if !to.exists() {
            std::fs::write(&to, &data).with_context(|| format!("cannot write {}", to.display()))?;
            kept.push(to);
        }
    }
    Ok(kept)
}

/// The command.
pub fn fuzz(root: &Path, args: &[String]) -> Result<()> {
    let (targets, secs) = parse_args(args)?;
    ensure_cargo_afl()?;
    let target_dir = root.join("target").join("fuzz");
    eprintln!("xtask: $ cargo afl build --release (in fuzz/, into target/fuzz)");
    let status = Command::new("cargo")
        .args(["afl", "build", "--release", "--locked"])
        .current_dir(root.join("fuzz"))
        .env("CARGO_TARGET_DIR", &target_dir)
        .status()
        .context("cannot run cargo afl build")?;
    if !status.success() {
        bail!("building the fuzz harness failed ({status})");
    }
    let harness = target_dir.join("release").join("envace-fuzz");
    let start = Instant::now();
    let mut figures = Map::new();
    let mut new_crashes = Vec::new();
    for target in &targets {
        let out = root.join("target").join("fuzz-out").join(target);
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out)
            .with_context(|| format!("cannot create {}", out.display()))?;
        let log = out.join("afl.log");
        eprintln!(
            "xtask: fuzzing {target} for {secs} s (log: {})",
            log.display()
        );
        let status = Command::new("cargo")
            .args(["afl", "fuzz", "-i"])
            .arg(root.join("fuzz").join("corpus").join(target))
            .arg("-o")
            .arg(&out)
            .args(["-V", &secs.to_string(), "--"])
            .arg(&harness)
            .arg(target)
            .env("AFL_NO_UI", "1")
            .env("AFL_SKIP_CPUFREQ", "1")
            .env("AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES", "1")
            .env("AFL_NO_AFFINITY", "1")
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::options().append(true).open(&log)?)
            .status()
            .context("cannot run cargo afl fuzz")?;
        if !status.success() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            bail!(
                "AFL++ on {target} failed ({status}):\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        let stats = read_stats(&out.join("default").join("fuzzer_stats"))?;
        let kept = keep_crashes(
            &out.join("default").join("crashes"),
            &root.join("fuzz").join("regressions").join(target),
        )?;
        let stat = |key: &str| stats.get(key).cloned().unwrap_or(Value::Null);
        figures.insert(
            (*target).to_owned(),
            json!({
                "execs": stat("execs_done"),
                "execs_per_sec": stat("execs_per_sec"),
                "run_time_secs": stat("run_time"),
                "corpus": stat("corpus_count"),
                "edges_found": stat("edges_found"),
                "crashes": stat("saved_crashes"),
                "hangs": stat("saved_hangs"),
                "new_regression_files": kept.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            }),
        );
        new_crashes.extend(kept);
    }
    let result = json!({
        "bench": "fuzz",
        "figures": {
            "cpu": crate::bench_science::cpu(),
            "afl": format!("AFL++ through cargo-afl {CARGO_AFL}"),
            "secs_per_target": secs,
            "wall_secs": start.elapsed().as_secs_f64(),
            "targets": figures,
        },
        "ratios": {},
    });
    crate::bench_runs::write_result(root, "fuzz", &result)?;
    if !new_crashes.is_empty() {
        bail!(
            "{} new crash(es) saved under fuzz/regressions/ ({}): fix them; \
             `cargo test -p envace --test engine fuzz_corpus` replays them",
            new_crashes.len(),
            new_crashes
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}
