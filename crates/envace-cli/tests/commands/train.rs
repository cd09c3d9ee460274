//! `envace runs rehearse` end to end: a run trained by `envace train` gets its
//! rehearsal-budget curve stored with its evaluations, and its committed episodes written on
//! request (kills and resumes: `resume.rs`).
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

    // A call that must succeed: its standard output.
    let rehearse_ok = |args: &[&str]| {
        let out = rehearse(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };

    let stdout = rehearse_ok(&["--budgets", "1,2", "--max-memory-tokens", "64"]);
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

    // With --episodes, every committed episode (and a plain pass's) is written, memory included.
    let file = dir.path().join("episodes.jsonl");
    let file_arg = file.to_str().unwrap();
    let stdout = rehearse_ok(&[
        "--budgets",
        "2",
        "--max-memory-tokens",
        "64",
        "--episodes",
        file_arg,
    ]);
    // The fixture's 2 held-out tasks: the plain pass, then parallel and sequential N = 2.
    assert!(
        stdout.ends_with(&format!("wrote 6 committed episodes to {file_arg}\n")),
        "{stdout}"
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let categories: Vec<&str> = lines
        .iter()
        .map(|l| l["category"].as_str().unwrap())
        .collect();
    assert_eq!(
        categories,
        [
            "plain",
            "plain",
            "rehearsal/parallel/2",
            "rehearsal/parallel/2",
            "rehearsal/sequential/2",
            "rehearsal/sequential/2"
        ]
    );
    for line in &lines {
        assert!(
            line["task_id"].is_string() && line["turns"].is_array(),
            "{line}"
        );
        assert!(
            line.get("samples").is_none(),
            "token samples are left out: {line}"
        );
        let shows_memory = line["messages"].as_array().unwrap().iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("Private rehearsal"))
        });
        assert_eq!(shows_memory, line["category"] != "plain", "{line}");
    }
    // The two passes see the same tasks in the same order.
    assert_eq!(lines[0]["task_id"], lines[2]["task_id"]);

    // An existing file is never overwritten, and nothing runs.
    let out = rehearse(&[
        "--budgets",
        "1",
        "--max-memory-tokens",
        "64",
        "--episodes",
        file_arg,
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("episodes.jsonl") && err.contains("must not exist yet"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 6);
}
