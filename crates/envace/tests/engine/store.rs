//! Run store tests: consistent reads during writes, crash safety under SIGKILL, migrations of an
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.
//! old file, atomic batches, and export/import round trips.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use envace::Error;
use envace::store::{
    self, Batch, EvalRow, EvalTaskRow, EventRow, ExportFormat, ExportTable, Imported, MetricRow,
    RunId, RunStatus, RunWriter, SCHEMA_VERSION, Store, TrajectoryRow,
};
use serde_json::json;

const KEYS_PER_STEP: usize = 10;

fn step_batch(run: RunId, step: u64, n_keys: usize) -> Batch {
    let mut batch = Batch::new(run);
    for k in 0..n_keys {
        batch.metrics.push(MetricRow {
            step,
            key: format!("key{k:02}"),
            value: step as f64 + k as f64 / 100.0,
            wall_time: store::now_secs(),
        });
    }
    batch
}

/// Checks that `rows` hold whole batches only: steps 0..n, each with `n_keys` keys.
fn assert_whole_batches(rows: &[MetricRow], n_keys: usize) -> u64 {
    assert_eq!(rows.len() % n_keys, 0, "a partial batch is visible");
    let n_steps = (rows.len() / n_keys) as u64;
    for (idx, row) in rows.iter().enumerate() {
        assert_eq!(
            row.step,
            (idx / n_keys) as u64,
            "steps out of order or missing"
        );
        assert_eq!(row.key, format!("key{:02}", idx % n_keys));
    }
    n_steps
}

#[test]
fn a_reader_sees_consistent_snapshots_while_a_writer_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let store = Store::open(&path).unwrap();
    let run = store
        .create_run("concurrent", "[run]\nname = \"concurrent\"\n")
        .unwrap();
    drop(store);

    const N_BATCHES: u64 = 200;
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let path = path.clone();
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut store = Store::open(&path).unwrap();
            for step in 0..N_BATCHES {
                store.write(&step_batch(run, step, KEYS_PER_STEP)).unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
            done.store(true, Ordering::SeqCst);
        })
    };

    let mut reader = Store::open(&path).unwrap();
    let mut seen_counts = Vec::new();
    loop {
        let finished = done.load(Ordering::SeqCst);
        let count = reader
            .read(|view| {
                let before = view.count_metrics(run)?;
                let rows = view.metrics(run)?;
                assert_eq!(rows.len() as u64, before);
                assert_whole_batches(&rows, KEYS_PER_STEP);
                // The writer keeps committing while this transaction is open; the snapshot holds.
                std::thread::sleep(Duration::from_millis(3));
                assert_eq!(
                    view.count_metrics(run)?,
                    before,
                    "snapshot changed mid-read"
                );
                Ok(before)
            })
            .unwrap();
        if let Some(&last) = seen_counts.last() {
            assert!(count >= last, "committed rows disappeared");
        }
        seen_counts.push(count);
        if finished {
            break;
        }
    }
    writer.join().unwrap();
    assert_eq!(
        *seen_counts.last().unwrap(),
        N_BATCHES * KEYS_PER_STEP as u64
    );
    seen_counts.dedup();
    assert!(
        seen_counts.len() >= 3,
        "the reader never overlapped the writer: {seen_counts:?}"
    );
}

const CHILD_ENV: &str = "ENVACE_TEST_STORE_WRITER";

/// The name libtest gives test `name` of this module (its path without the binary's name), for
/// running that one test again in a child process.
fn test_path(name: &str) -> String {
    let module = module_path!().split_once("::").map_or("", |(_, rest)| rest);
    if module.is_empty() {
        name.to_owned()
    } else {
        format!("{module}::{name}")
    }
}
const ROWS_PER_BATCH: usize = 100;

/// Runs as the parent test, or (with `CHILD_ENV` set) as the writer process the parent kills.
#[test]
fn committed_batches_survive_a_sigkilled_writer() {
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        let mut store = Store::open(Path::new(&path)).unwrap();
        let run = store
            .create_run("killed", "[run]\nname = \"killed\"\n")
            .unwrap();
        store.set_run_status(run, RunStatus::Running).unwrap();
        // Bounded: the parent kills it long before the end.
        for step in 0..100_000u64 {
            store.write(&step_batch(run, step, ROWS_PER_BATCH)).unwrap();
            println!("committed {step}");
        }
        std::process::exit(0);
    }

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &test_path("committed_batches_survive_a_sigkilled_writer"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut last_committed = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(step) = line.strip_prefix("committed ") {
            last_committed = Some(step.parse::<u64>().unwrap());
            if last_committed >= Some(40) {
                child.kill().unwrap(); // SIGKILL on Unix: no destructor, no flush.
                break;
            }
        }
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "the writer was not killed");
    let last_committed = last_committed.expect("the writer committed nothing");

    let store = Store::open(&path).unwrap();
    store.check_integrity().unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let runs = store.view().runs().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Running);
    let rows = store.view().metrics(runs[0].id).unwrap();
    let n_steps = assert_whole_batches(&rows, ROWS_PER_BATCH);
    assert!(
        n_steps > last_committed,
        "step {last_committed} was reported committed but only {n_steps} steps survived"
    );
}

#[test]
fn migrations_upgrade_a_version_1_store_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store/store-v1.sqlite");
    std::fs::copy(&fixture, &path).unwrap();

    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    store.check_integrity().unwrap();

    // Everything version 1 held is still there.
    let runs = store.view().runs().unwrap();
    let names: Vec<&str> = runs.iter().map(|run| run.name.as_str()).collect();
    assert_eq!(names, ["second", "old-run"]);
    let old = store.view().find_run("old-run").unwrap();
    assert_eq!(old.status, RunStatus::Finished);
    assert_eq!(old.config_toml, "[run]\nname = \"old-run\"\nseed = 1\n");
    let metrics = store.view().metrics(old.id).unwrap();
    assert_eq!(metrics.len(), 6);
    assert_eq!(metrics[3].value, 0.3);
    assert!(metrics[5].value.is_nan(), "NULL reads back as NaN");
    let events = store.view().events(old.id).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].message, "loss is NaN at step 5");
    assert_eq!(
        events[1].fields,
        json!({}),
        "new column filled with its default"
    );
    assert_eq!(events[1].step, None);

    // And the tables of version 2 work.
    let mut batch = Batch::new(old.id);
    batch.trajectories.push(TrajectoryRow {
        step: 6,
        episode_idx: 0,
        task_id: "retail-lookup-1".into(),
        reward: Some(1.0),
        masked: false,
        mask_reason: None,
        data: json!({"messages": []}),
    });
    store.write(&batch).unwrap();
    assert_eq!(
        store.view().trajectories(old.id).unwrap(),
        batch.trajectories
    );

    // Opening again is a no-op.
    drop(store);
    let again = Store::open(&path).unwrap();
    assert_eq!(again.view().metrics(old.id).unwrap().len(), 6);
}

#[test]
fn a_store_from_a_newer_version_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.sqlite");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE mystery (x); PRAGMA user_version = 99;")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = Store::open(&path).unwrap_err();
    // Not a byte changed: not even the journal mode in the header (an older build must not
    // touch a newer build's file).
    assert!(
        std::fs::read(&path).unwrap() == before,
        "the file was written"
    );
    assert!(matches!(err, Error::StoreFormat { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("future.sqlite"), "{message}");
    assert!(message.contains("schema version 99"), "{message}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 99);
}

#[test]
fn a_failing_batch_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("runs.sqlite")).unwrap();
    let run = store.create_run("atomic", "").unwrap();
    let trajectory = TrajectoryRow {
        step: 0,
        episode_idx: 0,
        task_id: "t".into(),
        reward: None,
        masked: true,
        mask_reason: Some("judge timed out".into()),
        data: json!({}),
    };
    let mut batch = step_batch(run, 0, 5);
    // Two episodes with the same (step, episode_idx) violate a unique key.
    batch.trajectories = vec![trajectory.clone(), trajectory];
    let err = store.write(&batch).unwrap_err();
    assert!(err.to_string().contains("runs.sqlite"), "{err}");
    assert_eq!(store.view().count_metrics(run).unwrap(), 0);
    assert!(store.view().trajectories(run).unwrap().is_empty());
}

#[test]
fn run_writer_commits_every_max_rows_and_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let store = Store::open(&path).unwrap();
    let run = store.create_run("writer", "").unwrap();
    let mut writer = RunWriter::new(store, run, 4);
    for step in 0..3 {
        writer
            .metric(step, "loss", 1.0 / (step + 1) as f64)
            .unwrap();
    }
    let reader = Store::open(&path).unwrap();
    assert_eq!(
        reader.view().count_metrics(run).unwrap(),
        0,
        "flushed too early"
    );
    writer.event("info", Some(2), "step 2 done").unwrap();
    assert_eq!(reader.view().count_metrics(run).unwrap(), 3);
    assert_eq!(reader.view().events(run).unwrap().len(), 1);
    writer.metric(3, "loss", 0.25).unwrap();
    assert_eq!(writer.pending().len(), 1);
    drop(writer);
    assert_eq!(reader.view().count_metrics(run).unwrap(), 4);
}

fn sample_run(store: &mut Store) -> RunId {
    let run = store
        .create_run("export", "[run]\nname = \"export\"\n")
        .unwrap();
    let mut batch = Batch::new(run);
    let values = [
        0.1 + 0.2,
        -0.0,
        1e-300,
        f64::MAX,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        42.0,
    ];
    for (idx, value) in values.iter().enumerate() {
        batch.metrics.push(MetricRow {
            step: idx as u64 / 2,
            key: if idx % 2 == 0 {
                "act/reward_mean"
            } else {
                "kl, \"quoted\""
            }
            .into(),
            value: *value,
            wall_time: 1_764_400_000.123_456_7 + idx as f64,
        });
    }
    batch.events.push(EventRow {
        wall_time: 1_764_400_000.5,
        level: "info".into(),
        step: None,
        message: "started, with a comma\nand a newline".into(),
        fields: json!({}),
    });
    batch.events.push(EventRow {
        wall_time: 1_764_400_001.5,
        level: "warn".into(),
        step: Some(3),
        message: "judge retry".into(),
        fields: json!({"attempt": 2, "endpoint": "http://127.0.0.1:8001/v1", "nested": [1, {"a": null}]}),
    });
    batch.evals.push(EvalRow {
        step: 3,
        benchmark: "tau2_retail".into(),
        category: "all".into(),
        metric: "pass^1".into(),
        value: 0.375,
        n_tasks: 40,
        wall_time: 1_764_400_002.0,
    });
    batch.evals.push(EvalRow {
        step: 3,
        benchmark: "bfcl_simple".into(),
        category: "python".into(),
        metric: "accuracy".into(),
        value: f64::NAN,
        n_tasks: 0,
        wall_time: 1_764_400_003.0,
    });
    batch.eval_tasks.push(EvalTaskRow {
        step: 3,
        benchmark: "tau2_retail".into(),
        task_id: "7".into(),
        trial: 1,
        score: None,
        reason: "masked: the judge failed, with a comma\nand a newline".into(),
        data: json!({"messages": [{"role": "user", "content": "hi \"there\""}], "reward": null}),
    });
    batch.eval_tasks.push(EvalTaskRow {
        step: 3,
        benchmark: "bfcl_simple_python".into(),
        task_id: "simple_python_0".into(),
        trial: 0,
        score: Some(1.0),
        reason: String::new(),
        data: json!({"result": [{"f": {"x": 1.5}}]}),
    });
    store.write(&batch).unwrap();
    run
}

/// Rows compared with NaN equal to NaN.
fn canonical(imported: &Imported) -> String {
    let fix = |v: f64| {
        if v.is_nan() {
            "NaN".to_string()
        } else {
            format!("{v:?}")
        }
    };
    match imported {
        Imported::Metrics(rows) => rows
            .iter()
            .map(|r| format!("{}|{}|{}|{:?}", r.step, r.key, fix(r.value), r.wall_time))
            .collect::<Vec<_>>()
            .join("\n"),
        Imported::Events(rows) => format!("{rows:?}"),
        Imported::EvalTasks(rows) => format!("{rows:?}"),
        Imported::Evals(rows) => rows
            .iter()
            .map(|r| {
                format!(
                    "{}|{}|{}|{}|{}|{}|{:?}",
                    r.step,
                    r.benchmark,
                    r.category,
                    r.metric,
                    fix(r.value),
                    r.n_tasks,
                    r.wall_time
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[test]
fn exports_round_trip_to_the_stored_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("runs.sqlite")).unwrap();
    let run = sample_run(&mut store);
    let stored = |store: &Store, table| {
        let view = store.view();
        match table {
            ExportTable::Metrics => Imported::Metrics(view.metrics(run).unwrap()),
            ExportTable::Events => Imported::Events(view.events(run).unwrap()),
            ExportTable::Evals => Imported::Evals(view.eval_results(run).unwrap()),
            ExportTable::EvalTasks => Imported::EvalTasks(view.eval_tasks(run, None).unwrap()),
        }
    };
    for table in [
        ExportTable::Metrics,
        ExportTable::Events,
        ExportTable::Evals,
        ExportTable::EvalTasks,
    ] {
        for format in [ExportFormat::Csv, ExportFormat::Jsonl] {
            let mut bytes = Vec::new();
            let n =
                store::export_rows(&store.view(), run, table, format, &mut bytes, "mem").unwrap();
            let expected = stored(&store, table);
            assert_eq!(n, expected.len());
            let imported = store::import_rows(table, format, &mut bytes.as_slice(), "mem").unwrap();
            assert_eq!(
                canonical(&imported),
                canonical(&expected),
                "{table:?} as {format:?}:\n{}",
                String::from_utf8_lossy(&bytes)
            );

            // Writing the imported rows into a new run and exporting again gives the same bytes.
            let copy = store.create_run("copy", "").unwrap();
            store.write(&imported.into_batch(copy)).unwrap();
            let mut again = Vec::new();
            store::export_rows(&store.view(), copy, table, format, &mut again, "mem").unwrap();
            assert_eq!(
                String::from_utf8(again).unwrap(),
                String::from_utf8(bytes).unwrap()
            );
        }
    }
}

#[test]
fn evaluating_a_checkpoint_again_replaces_its_scores_and_task_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("runs.sqlite")).unwrap();
    let run = store.create_run("eval", "").unwrap();
    let evaluation = |step: u64, benchmark: &str, accuracy: f64, tasks: &[&str]| {
        let mut batch = Batch::new(run);
        batch.evals.push(EvalRow {
            step,
            benchmark: benchmark.into(),
            category: "all".into(),
            metric: "accuracy".into(),
            value: accuracy,
            n_tasks: tasks.len() as u64,
            wall_time: 1.0,
        });
        for task in tasks {
            batch.eval_tasks.push(EvalTaskRow {
                step,
                benchmark: benchmark.into(),
                task_id: (*task).into(),
                trial: 0,
                score: Some(accuracy),
                reason: String::new(),
                data: json!({}),
            });
        }
        batch
    };
    store
        .write_evaluation(&evaluation(4, "bfcl_multiple", 0.5, &["a", "b", "c"]))
        .unwrap();
    store
        .write_evaluation(&evaluation(4, "bfcl_parallel", 0.25, &["p"]))
        .unwrap();
    store
        .write_evaluation(&evaluation(8, "bfcl_multiple", 0.75, &["a"]))
        .unwrap();
    // The same benchmark at the same step again: only its own rows are replaced.
    store
        .write_evaluation(&evaluation(4, "bfcl_multiple", 1.0, &["a", "b"]))
        .unwrap();
    let view = store.view();
    let scores: Vec<(u64, String, f64)> = view
        .eval_results(run)
        .unwrap()
        .into_iter()
        .map(|r| (r.step, r.benchmark, r.value))
        .collect();
    assert_eq!(
        scores,
        vec![
            (4, "bfcl_parallel".into(), 0.25),
            (4, "bfcl_multiple".into(), 1.0),
            (8, "bfcl_multiple".into(), 0.75)
        ]
    );
    let tasks: Vec<(u64, String)> = view
        .eval_tasks(run, Some("bfcl_multiple"))
        .unwrap()
        .into_iter()
        .map(|t| (t.step, t.task_id))
        .collect();
    assert_eq!(
        tasks,
        vec![(4, "a".into()), (4, "b".into()), (8, "a".into())]
    );
    assert_eq!(view.eval_tasks(run, None).unwrap().len(), 4);
}

#[test]
fn a_malformed_import_names_the_record() {
    let csv = "step,key,value,wall_time\n0,loss,0.5,1.0\n1,loss,not-a-number,2.0\n";
    let err = store::import_rows(
        ExportTable::Metrics,
        ExportFormat::Csv,
        &mut csv.as_bytes(),
        "metrics.csv",
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with("metrics.csv, record 2: "),
        "{err}"
    );
    let jsonl = "{\"step\":0,\"key\":\"loss\",\"value\":0.5,\"wall_time\":1.0}\n{\"step\":1}\n";
    let err = store::import_rows(
        ExportTable::Metrics,
        ExportFormat::Jsonl,
        &mut jsonl.as_bytes(),
        "metrics.jsonl",
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with("metrics.jsonl, line 2: "),
        "{err}"
    );
}

#[test]
fn runs_are_found_by_id_or_newest_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("runs.sqlite")).unwrap();
    let first = store.create_run("same", "a").unwrap();
    let second = store.create_run("same", "b").unwrap();
    let view = store.view();
    assert_eq!(view.find_run("same").unwrap().id, second);
    assert_eq!(view.find_run(&first.to_string()).unwrap().id, first);
    assert_eq!(
        view.find_run("same").unwrap().config_hash,
        store::config_hash("b")
    );
    let err = view.find_run("missing").unwrap_err();
    assert_eq!(
        err.to_string(),
        "no run matches \"missing\"; `envace runs list` shows the runs in this store"
    );
    store.set_run_status(first, RunStatus::Stopped).unwrap();
    assert_eq!(view.find_run("1").unwrap().status, RunStatus::Stopped);
    assert!(
        store
            .set_run_status(RunId(999), RunStatus::Running)
            .is_err()
    );
}

#[test]
fn config_hash_is_sha256() {
    // Known answer: sha256 of the empty string.
    assert_eq!(
        store::config_hash(""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}
