//! `envace train` end to end: a run killed with SIGKILL after a checkpoint and resumed with
//! `--resume` gives the same metrics afterwards as an uninterrupted run, and the store loses
//! no committed row; `envace runs rehearse` stores a trained run's rehearsal-budget curve.
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use envace::store::{MetricRow, RunStatus, Store};

/// The same small job as the engine's training tests: 3 SFT and 2 GRPO steps, checkpoints at
/// steps 1, 2 and 4.
const TINY_JOB: &str = include_str!("../../envace/tests/fixtures/train/tiny_job.toml");

fn train(store: &Path, config: &Path, resume: bool) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_envace"));
    command
        .arg("--store")
        .arg(store)
        .arg("train")
        .arg(config)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if resume {
        command.args(["--resume", "1"]);
    }
    command
}

fn metric_rows(store: &Path) -> Vec<MetricRow> {
    let store = Store::open(store).unwrap();
    store.view().metrics(envace::store::RunId(1)).unwrap()
}

fn values(rows: &[MetricRow]) -> BTreeMap<(u64, String), Vec<f64>> {
    let mut out: BTreeMap<(u64, String), Vec<f64>> = BTreeMap::new();
    for row in rows.iter().filter(|r| !r.key.starts_with("perf/")) {
        out.entry((row.step, row.key.clone()))
            .or_default()
            .push(row.value);
    }
    out
}

#[test]
fn a_run_killed_after_a_checkpoint_resumes_to_the_same_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    std::fs::write(&config, TINY_JOB).unwrap();

    let whole = dir.path().join("whole/runs.sqlite");
    let status = train(&whole, &config, false).status().unwrap();
    assert!(status.success());
    let expected = values(&metric_rows(&whole));

    let killed = dir.path().join("killed/runs.sqlite");
    let mut child = train(&killed, &config, false).spawn().unwrap();
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "no checkpoint within 10 minutes"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it could be killed"
        );
        let has_checkpoint = killed.exists()
            && Store::open(&killed)
                .and_then(|s| s.view().checkpoints(envace::store::RunId(1)))
                .is_ok_and(|c| !c.is_empty());
        if has_checkpoint {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before_resume = metric_rows(&killed);
    {
        let store = Store::open(&killed).unwrap();
        store.check_integrity().unwrap();
        let run = store.view().find_run("1").unwrap();
        assert_eq!(
            run.status,
            RunStatus::Running,
            "a killed run is left as it was"
        );
    }

    let status = train(&killed, &config, true).status().unwrap();
    assert!(status.success());
    let after = metric_rows(&killed);
    // Nothing committed before the kill is lost.
    for row in &before_resume {
        assert!(
            after
                .iter()
                .any(|r| r.step == row.step && r.key == row.key && r.wall_time == row.wall_time),
            "lost {row:?}"
        );
    }
    // Every value, written before the kill or after the resume, equals the uninterrupted run's.
    let got = values(&after);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (key, values) in &got {
        let want = expected[key][0];
        assert!(
            values
                .iter()
                .all(|v| *v == want || (v.is_nan() && want.is_nan())),
            "{key:?}: {values:?} vs {want}"
        );
    }
    let store = Store::open(&killed).unwrap();
    assert_eq!(
        store.view().find_run("1").unwrap().status,
        RunStatus::Finished
    );
}

#[test]
fn runs_rehearse_stores_the_budget_curve_of_a_trained_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    std::fs::write(&config, TINY_JOB).unwrap();
    let store = dir.path().join("runs.sqlite");
    assert!(train(&store, &config, false).status().unwrap().success());
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
            .flat_map(|c| ["score", "success"].map(|m| (5, format!("rehearsal/{c}"), m.to_owned())))
            .collect();
    assert_eq!(curve, expected);
}
