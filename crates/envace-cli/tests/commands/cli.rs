//! End-to-end tests of the `envace` binary: exit codes, messages and files, as a person uses it.
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use envace::store::{self, Batch, EvalRow, MetricRow, Store};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `envace` with a private ENVACE_HOME so no test touches the user's store.
fn envace(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_envace"))
        .args(args)
        .env("ENVACE_HOME", home)
        .env_remove("RUST_LOG")
        .current_dir(repo_root())
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

#[test]
fn validate_accepts_every_preset_file() {
    let home = tempfile::tempdir().unwrap();
    let mut args = vec!["config", "validate"];
    let files: Vec<String> = std::fs::read_dir(repo_root().join("assets/configs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| p.strip_prefix(repo_root()).unwrap().display().to_string())
        .collect();
    assert_eq!(files.len(), 4);
    args.extend(files.iter().map(String::as_str));
    let out = envace(home.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out)
            .lines()
            .filter(|l| l.starts_with("ok: "))
            .count(),
        4
    );
}

#[test]
fn validate_reports_every_error_with_file_line_and_path_and_fails() {
    let home = tempfile::tempdir().unwrap();
    let bad = "crates/envace/tests/fixtures/config/invalid/29-several-schema-errors.toml";
    let good = "assets/configs/quickstart.toml";
    let out = envace(home.path(), &["config", "validate", good, bad]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("ok: assets/configs/quickstart.toml"));
    let err = stderr(&out);
    for located in [
        ":8:1: run.seed:",
        ":10:1: backend.dtype:",
        ":12:1: rl.clip_ratio_high:",
        ":13:1: rl.temperature:",
    ] {
        assert!(err.contains(&format!("{bad}{located}")), "{err}");
    }
    assert!(err.contains("1 of 2 config files are invalid"), "{err}");
}

#[test]
fn validate_names_a_missing_file() {
    let home = tempfile::tempdir().unwrap();
    let out = envace(home.path(), &["config", "validate", "nope/missing.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("nope/missing.toml: "),
        "{}",
        stderr(&out)
    );
}

#[test]
fn schema_is_the_generated_json_schema() {
    let home = tempfile::tempdir().unwrap();
    let out = envace(home.path(), &["config", "schema"]);
    assert!(out.status.success());
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, envace::config::json_schema_value());
    assert_eq!(printed["title"], "EnvACE experiment");
}

#[test]
fn init_writes_a_preset_and_never_overwrites_without_force() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("exp.toml");
    let file_arg = file.to_str().unwrap();
    let out = envace(
        home.path(),
        &[
            "config",
            "init",
            "--preset",
            "caller-frozen",
            "--out",
            file_arg,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let preset = envace::config::preset("caller-frozen").unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), preset.toml);

    std::fs::write(&file, "# my edits\n").unwrap();
    let out = envace(home.path(), &["config", "init", "--out", file_arg]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("already exists; pass --force"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "# my edits\n");

    let out = envace(
        home.path(),
        &["config", "init", "--out", file_arg, "--force"],
    );
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        envace::config::preset("quickstart").unwrap().toml
    );
}

#[test]
fn init_with_an_unknown_preset_lists_the_presets() {
    let home = tempfile::tempdir().unwrap();
    let out = envace(home.path(), &["config", "init", "--preset", "gpt5"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim(),
        "error: unknown preset \"gpt5\"; the presets are: quickstart, real-env-baseline, caller-frozen, envace-qwen3-8b"
    );
}

fn populated_store(home: &Path) -> PathBuf {
    let path = home.join(store::STORE_FILE_NAME);
    let mut store = Store::open(&path).unwrap();
    let text = envace::config::preset("quickstart").unwrap().toml;
    let run = store.create_run("quickstart", text).unwrap();
    let mut batch = Batch::new(run);
    for step in 0..3u64 {
        for key in ["act/reward_mean", "rehearse/kl"] {
            batch.metrics.push(MetricRow {
                step,
                key: key.into(),
                value: step as f64 * 0.25,
                wall_time: 1_764_400_000.0 + step as f64,
            });
        }
    }
    batch.evals.push(EvalRow {
        step: 2,
        benchmark: "generated_test".into(),
        category: "all".into(),
        metric: "success".into(),
        value: 0.5,
        n_tasks: 100,
        wall_time: 1_764_400_010.0,
    });
    store.write(&batch).unwrap();
    store
        .create_run("other", "[run]\nname = \"other\"\n")
        .unwrap();
    path
}

#[test]
fn runs_list_reads_the_store_under_envace_home() {
    let home = tempfile::tempdir().unwrap();
    let out = envace(home.path(), &["runs", "list"]);
    assert!(out.status.success());
    assert!(stderr(&out).contains("no runs yet"), "{}", stderr(&out));
    assert!(
        !home.path().join(store::STORE_FILE_NAME).exists(),
        "a read created a store"
    );

    populated_store(home.path());
    let out = envace(home.path(), &["runs", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[1].contains("other") && lines[1].contains("created"),
        "{text}"
    );
    assert!(
        lines[2].contains("quickstart") && lines[2].contains(" 2 "),
        "{text}"
    );

    let out = envace(home.path(), &["runs", "list", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 2);
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // `envace runs list | head -1` after head has exited: the reader is gone before the first
    // line is written. The command ends with success and says nothing (no panic, no error).
    let home = tempfile::tempdir().unwrap();
    populated_store(home.path());
    for args in [
        &["runs", "list"][..],
        &["runs", "show", "quickstart"],
        &["config", "presets"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_envace"))
            .args(args)
            .env("ENVACE_HOME", home.path())
            .env_remove("RUST_LOG")
            .current_dir(repo_root())
            .stdout(writer)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
}

#[test]
fn store_flag_overrides_envace_home() {
    let home = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let path = populated_store(elsewhere.path());
    let out = envace(
        home.path(),
        &["runs", "list", "--store", path.to_str().unwrap()],
    );
    assert!(stdout(&out).contains("quickstart"), "{}", stderr(&out));
}

#[test]
fn runs_show_prints_latest_metrics_and_evaluations() {
    let home = tempfile::tempdir().unwrap();
    populated_store(home.path());
    let out = envace(home.path(), &["runs", "show", "quickstart", "--config"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("run 1 \"quickstart\""), "{text}");
    assert!(text.contains("act/reward_mean"), "{text}");
    assert!(text.contains("0.500000  (step 2)"), "{text}");
    assert!(
        text.contains("generated_test/all success = 0.500000 over 100 tasks"),
        "{text}"
    );
    assert!(text.contains("[rl]"), "the config is printed: {text}");

    let out = envace(home.path(), &["runs", "show", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no run matches \"nope\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn runs_export_round_trips_through_files() {
    let home = tempfile::tempdir().unwrap();
    let path = populated_store(home.path());
    for (format, table) in [
        ("csv", "metrics"),
        ("jsonl", "metrics"),
        ("csv", "evals"),
        ("jsonl", "events"),
    ] {
        let file = home.path().join(format!("{table}.{format}"));
        let out = envace(
            home.path(),
            &[
                "runs",
                "export",
                "1",
                "--format",
                format,
                "--table",
                table,
                "--out",
                file.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let table_kind: store::ExportTable = table.parse().unwrap();
        let format_kind: store::ExportFormat = format.parse().unwrap();
        let imported = store::import_rows(
            table_kind,
            format_kind,
            &mut std::fs::File::open(&file).unwrap(),
            &file.display().to_string(),
        )
        .unwrap();
        let store = Store::open(&path).unwrap();
        let view = store.view();
        let run = view.find_run("1").unwrap().id;
        match imported {
            store::Imported::Metrics(rows) => assert_eq!(rows, view.metrics(run).unwrap()),
            store::Imported::Evals(rows) => assert_eq!(rows, view.eval_results(run).unwrap()),
            store::Imported::Events(rows) => assert_eq!(rows, view.events(run).unwrap()),
            store::Imported::EvalTasks(rows) => {
                assert_eq!(rows, view.eval_tasks(run, None).unwrap())
            }
        }
    }
    // Standard output works too.
    let out = envace(
        home.path(),
        &["runs", "export", "quickstart", "--format", "csv"],
    );
    assert!(
        stdout(&out).starts_with("step,key,value,wall_time\n0,act/reward_mean,0.0,"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_bad_format_is_a_usage_error() {
    let home = tempfile::tempdir().unwrap();
    let out = envace(home.path(), &["runs", "export", "1", "--format", "xml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("invalid value 'xml'"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn config_tasks_writes_the_jobs_own_tasks_in_order_with_their_checklists() {
    use envace::controller::{JobPool, job_pool};
    let home = tempfile::tempdir().unwrap();
    let file = "assets/configs/quickstart.toml";
    let experiment = envace::config::parse_file(&repo_root().join(file)).unwrap();
    let sources = envace::rl::session::load_sources(&experiment).unwrap();
    for (arg, pool) in [("rl", JobPool::Rl), ("held-out", JobPool::HeldOut)] {
        let out = envace(
            home.path(),
            &["config", "tasks", file, "--pool", arg, "--limit", "5"],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let printed: Vec<serde_json::Value> = stdout(&out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let expected = job_pool(&experiment, &sources, pool).unwrap();
        assert_eq!(printed.len(), 5);
        for (line, task) in printed.iter().zip(&expected) {
            assert_eq!(line["id"], task.id.as_str());
            assert_eq!(line["request"], task.request.as_str());
            let standards = line["checklists"][0]["standards"].as_array().unwrap();
            assert_eq!(standards.len(), task.checklists[0].standards.len());
            assert!(standards.iter().all(|s| s["rule"].is_object()), "{line}");
        }
    }
    let rl = envace(home.path(), &["config", "tasks", file, "--limit", "1"]);
    let held_out = envace(
        home.path(),
        &[
            "config", "tasks", file, "--pool", "held-out", "--limit", "1",
        ],
    );
    assert_ne!(stdout(&rl), stdout(&held_out));

    let out = envace(home.path(), &["config", "tasks", "nope/missing.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("nope/missing.toml"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn monitor_without_a_display_says_how_to_get_one_and_train_monitor_refuses_before_training() {
    let home = tempfile::tempdir().unwrap();
    populated_store(home.path());
    let without_display = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_envace"))
            .args(args)
            .env("ENVACE_HOME", home.path())
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("RUST_LOG")
            .current_dir(repo_root())
            .output()
            .unwrap()
    };
    let out = without_display(&["monitor"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("DISPLAY") && err.contains("ssh -X"), "{err}");

    let out = without_display(&["train", "assets/configs/quickstart.toml", "--monitor"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("needs a display"), "{}", stderr(&out));
    // Refused before a run was created.
    let store = Store::open(&home.path().join(store::STORE_FILE_NAME)).unwrap();
    assert_eq!(store.view().runs().unwrap().len(), 2);
}

#[test]
fn monitor_names_a_store_that_does_not_exist() {
    let home = tempfile::tempdir().unwrap();
    let missing = home.path().join("elsewhere.sqlite");
    let out = Command::new(env!("CARGO_BIN_EXE_envace"))
        .arg("--store")
        .arg(&missing)
        .arg("monitor")
        .env("DISPLAY", ":99")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("elsewhere.sqlite") && err.contains("no run store"),
        "{err}"
    );
    assert!(!missing.exists(), "the monitor created a store");
}
