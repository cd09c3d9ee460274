//! `envace runs rehearse` end to end: a run trained by `envace train` gets its
//! rehearsal-budget curve stored with its evaluations (kills and resumes: `resume.rs`).
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.

use std::path::Path;
use std::process::{Command, Stdio};

use envace::store::Store;

/// The same small job as the engine's training tests: 3 SFT and 2 GRPO steps, checkpoints at
/// steps 1, 2 and 4.
const TINY_JOB: &str = include_str!("../../../envace/tests/fixtures/train/tiny_job.toml");

fn train(store: &Path, config: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_envace"));
    command
        .arg("--store")
        .arg(store)
        .arg("train")
        .arg(config)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

#[test]
fn runs_rehearse_stores_the_budget_curve_of_a_trained_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    std::fs::write(&config, TINY_JOB).unwrap();
    let store = dir.path().join("runs.sqlite");
    assert!(train(&store, &config).status().unwrap().success());
    let rehearse = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_envace"))
            .arg("--store")
            .arg(&store)
            .args(["runs", "rehearse", "1"])
            .args(args)
            .output()
            .unwrap()
    };

    // The job's config has no curve, and a memory as long as the act prompt is refused.
    let out = rehearse(&[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has no [rehearsal].budget_curve; pass --budgets"),
        "{err}"
    );
    let out = rehearse(&["--budgets", "1", "--max-memory-tokens", "1024"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the config of run 1 with the options given")
            && err.contains("rehearsal.max_memory_tokens"),
        "{err}"
    );

    let out = rehearse(&["--budgets", "1,2", "--max-memory-tokens", "64"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.ends_with("stored with run 1's evaluations at step 5\n"),
        "{stdout}"
    );
    let view = Store::open(&store).unwrap();
    let mut curve: Vec<(u64, String, String)> = view
        .view()
        .eval_results(envace::store::RunId(1))
        .unwrap()
        .into_iter()
        .filter(|r| r.category.starts_with("rehearsal/"))
        .map(|r| (r.step, r.category, r.metric))
        .collect();
    curve.sort();
    let expected: Vec<(u64, String, String)> =
        ["parallel/1", "parallel/2", "sequential/1", "sequential/2"]
            .iter()
            .flat_map(|c| {
                ["score", "score_se", "success", "success_se"]
                    .map(|m| (5, format!("rehearsal/{c}"), m.to_owned()))
            })
            .collect();
    assert_eq!(curve, expected);
}
