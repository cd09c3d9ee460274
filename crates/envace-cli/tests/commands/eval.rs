//! `envace eval` as the real binary: BFCL tasks on SmolLM2 end to end, a run's checkpoint
//! evaluated with its scores and task records stored, τ²-bench conversations with
//! `serve-model` as the user simulator, another system's outputs scored with `eval score bfcl`,
//! and bad input named.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_envace");

fn data() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/benchmarks");
    assert!(
        root.join("bfcl/BFCL_v4_parallel.json").is_file(),
        "BFCL data is missing under {}",
        root.display()
    );
    root
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn score_bfcl_prints_each_tasks_verdict_and_the_accuracy() {
    let dir = tempfile::tempdir().unwrap();
    let outputs = dir.path().join("outputs.jsonl");
    // parallel_0's two calls in the other order (right: parallel calls match in any order),
    // and parallel_1 with one call missing.
    std::fs::write(
        &outputs,
        concat!(
            r#"{"id": "parallel_0", "result": [{"spotify.play": {"artist": "Maroon 5", "duration": 15}}, {"spotify.play": {"artist": "Taylor Swift", "duration": 20}}]}"#,
            "\n",
            r#"{"id": "parallel_1", "result": [{"calculate_em_force": {"b_field": 5, "area": 2, "d_time": 4}}]}"#,
            "\n"
        ),
    )
    .unwrap();
    let data = data();
    let out = run(&[
        "eval",
        "score",
        "bfcl",
        "--data",
        data.to_str().unwrap(),
        "--category",
        "parallel",
        "--outputs",
        outputs.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{}", stdout, text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "parallel_0\tok", "{stdout}");
    assert_eq!(
        lines[1],
        "parallel_1\twrong\tparallel_function_checker_no_order:wrong_count: Wrong number of functions."
    );
    assert!(
        lines[2].starts_with("parallel_2\twrong\toutput:missing"),
        "{stdout}"
    );
    assert_eq!(
        lines.last().copied(),
        Some(
            "parallel: accuracy 0.0050 ± 0.0050 (1 of 200 right; 198 without an output, scored wrong)"
        )
    );

    // A line that is not JSON is named by file and line; nothing is scored.
    std::fs::write(
        &outputs,
        "{\"id\": \"parallel_0\", \"result\": []}\n{\"id\": \n",
    )
    .unwrap();
    let out = run(&[
        "eval",
        "score",
        "bfcl",
        "--data",
        data.to_str().unwrap(),
        "--category",
        "parallel",
        "--outputs",
        outputs.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("outputs.jsonl:2: not a JSON object"),
        "{stderr}"
    );
}

#[test]
fn score_bfcl_multi_turn_runs_each_turns_calls_on_the_backends() {
    let dir = tempfile::tempdir().unwrap();
    let outputs = dir.path().join("multi.jsonl");
    // multi_turn_base_1 as BFCL expects it (a turn a list of steps, a step a list of calls,
    // written as Python or decoded), and multi_turn_base_3 with its second turn's copies missing.
    std::fs::write(
        &outputs,
        concat!(
            r#"{"id": "multi_turn_base_1", "result": [[["ls(a=True)"]], [[{"cd": {"folder": "workspace"}}, {"mv": {"source": "log.txt", "destination": "archive"}}], "Moved."], [["cd(folder='archive')", "grep(file_name='log.txt',pattern='Error')"]], [["tail(file_name='log.txt',lines=20)"]]]}"#,
            "\n",
            r#"{"id": "multi_turn_base_3", "result": [[["find(path='.',name='test')"]], [["cd(folder='projects')"]]]}"#,
            "\n"
        ),
    )
    .unwrap();
    let data = data();
    let out = run(&[
        "eval",
        "score",
        "bfcl",
        "--data",
        data.to_str().unwrap(),
        "--category",
        "multi_turn_base",
        "--outputs",
        outputs.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{}", stdout, text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[1], "multi_turn_base_1\tok", "{stdout}");
    assert!(
        lines[3].starts_with("multi_turn_base_3\twrong\tmulti_turn:instance_state_mismatch: turn 1: GorillaFileSystem"),
        "{stdout}"
    );
    assert_eq!(
        lines.last().copied(),
        Some(
            "multi_turn_base: accuracy 0.0050 ± 0.0050 (1 of 200 right; 198 without an output, scored wrong)"
        )
    );
}

#[test]
fn eval_runs_bfcl_tasks_on_a_model_and_writes_every_tasks_record() {
    let gguf = envace::model::smollm2_gguf().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let data = data();
    let store = dir.path().join("runs.sqlite");
    let out = run(&[
        "--store",
        store.to_str().unwrap(),
        "eval",
        "--record-as",
        "smollm2",
        "--model",
        gguf.to_str().unwrap(),
        "--bench",
        "bfcl:simple_python,bfcl:irrelevance",
        "--data",
        data.to_str().unwrap(),
        "--limit",
        "3",
        "--max-tokens",
        "96",
        "--out",
        records.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{}", stdout, text(&out.stderr));
    assert!(stdout.contains("bfcl:simple_python: accuracy "), "{stdout}");
    assert!(stdout.contains("bfcl:irrelevance: accuracy "), "{stdout}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&records)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6, "3 tasks of each category");
    for line in &lines {
        assert!(
            line["id"].is_string() && line["valid"].is_boolean(),
            "{line}"
        );
        assert_eq!(line["messages"][0]["role"], "user", "{line}");
        // A wrong task says why; a right one does not.
        assert_eq!(
            line["valid"].as_bool().unwrap(),
            line["reason"] == "",
            "{line}"
        );
    }
    // The scores and records are stored as an evaluation run at step 0, which the studio lists.
    let tasks_of = |benchmark: &str| {
        let store = envace::store::Store::open(&store).unwrap();
        let view = store.view();
        let runs = view.runs().unwrap();
        assert_eq!(runs.len(), 1, "one evaluation run");
        assert_eq!(runs[0].name, "smollm2");
        assert_eq!(runs[0].status.as_str(), "finished");
        let evals = view.eval_results(runs[0].id).unwrap();
        assert!(evals.iter().all(|e| e.step == 0), "{evals:?}");
        view.eval_tasks(runs[0].id, Some(benchmark)).unwrap().len()
    };
    assert_eq!(tasks_of("bfcl_simple_python"), 3);
    assert_eq!(tasks_of("bfcl_irrelevance"), 3);
    // Recording again under that name reuses the run and replaces only what was evaluated.
    let again = run(&[
        "--store",
        store.to_str().unwrap(),
        "eval",
        "--record-as",
        "smollm2",
        "--model",
        gguf.to_str().unwrap(),
        "--bench",
        "bfcl:simple_python",
        "--data",
        data.to_str().unwrap(),
        "--limit",
        "1",
        "--max-tokens",
        "32",
    ]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(tasks_of("bfcl_simple_python"), 1);
    assert_eq!(tasks_of("bfcl_irrelevance"), 3);

    // The file is never overwritten without --force.
    let again = run(&[
        "eval",
        "--model",
        gguf.to_str().unwrap(),
        "--bench",
        "bfcl:simple_python",
        "--data",
        data.to_str().unwrap(),
        "--limit",
        "1",
        "--out",
        records.to_str().unwrap(),
    ]);
    assert!(!again.status.success());
    assert!(text(&again.stderr).contains("already exists; pass --force"));
}

#[test]
fn eval_names_a_benchmark_it_cannot_run_before_loading_anything() {
    let data = data();
    for (bench, says) in [
        ("vitabench:delivery", "cannot be evaluated yet"),
        ("tau2:telecom", "unknown τ²-bench domain"),
        ("vita:instore", "domain is not rebuilt; vita:delivery is"),
        (
            "vita:delivery",
            "need a user simulator: pass --user-endpoint",
        ),
        (
            "tau2:airline",
            "need a user simulator: pass --user-endpoint",
        ),
        (
            "bfcl:multi_turn_long_context",
            "only multi_turn_base is rebuilt",
        ),
        ("bfcl:simple_cobol", "unknown BFCL category"),
        ("simple_python", "give BENCHMARK:CATEGORY"),
    ] {
        let out = run(&[
            "eval",
            "--model",
            "/nonexistent.gguf",
            "--bench",
            bench,
            "--data",
            data.to_str().unwrap(),
        ]);
        assert!(!out.status.success(), "{bench}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(says), "{bench}: {stderr}");
    }
}

/// The same small job as the engine's training tests (3 SFT and 2 GRPO steps).
const TINY_JOB: &str = include_str!("../../../envace/tests/fixtures/train/tiny_job.toml");

#[test]
fn eval_of_a_run_stores_its_scores_and_every_tasks_record_at_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    std::fs::write(&config, TINY_JOB).unwrap();
    let store = dir.path().join("runs.sqlite");
    let store_arg = store.to_str().unwrap();
    let trained = run(&["--store", store_arg, "train", config.to_str().unwrap()]);
    assert!(trained.status.success(), "{}", text(&trained.stderr));
    let data = data();
    let evaluate = || {
        run(&[
            "--store",
            store_arg,
            "eval",
            "--run",
            "1",
            "--bench",
            "bfcl:simple_python",
            "--data",
            data.to_str().unwrap(),
            "--limit",
            "2",
            "--max-tokens",
            "8",
        ])
    };
    for _ in 0..2 {
        let out = evaluate();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("stored the scores and 2 task records with run 1 at step 4"),
            "{}",
            text(&out.stderr)
        );
    }
    // Evaluating the checkpoint again replaced its rows instead of adding to them.
    let store = envace::store::Store::open(&store).unwrap();
    let view = store.view();
    let run_id = view.find_run("1").unwrap().id;
    let scores: Vec<(u64, String, String)> = view
        .eval_results(run_id)
        .unwrap()
        .into_iter()
        .filter(|r| r.benchmark.starts_with("bfcl"))
        .map(|r| (r.step, r.benchmark, r.metric))
        .collect();
    assert_eq!(
        scores,
        vec![
            (4, "bfcl_simple_python".into(), "accuracy".into()),
            (4, "bfcl_simple_python".into(), "accuracy_se".into())
        ]
    );
    let tasks = view.eval_tasks(run_id, Some("bfcl_simple_python")).unwrap();
    let ids: Vec<&str> = tasks.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(ids, ["simple_python_0", "simple_python_1"]);
    for task in &tasks {
        assert_eq!(task.step, 4);
        assert_eq!(task.data["messages"][0]["role"], "user", "{:?}", task.data);
        assert_eq!(task.score == Some(1.0), task.reason.is_empty(), "{task:?}");
    }
    // An earlier checkpoint by RUN@STEP, stored at its own step; a step without a checkpoint
    // is refused, naming the steps there are.
    let at_two = run(&[
        "--store",
        store_arg,
        "eval",
        "--run",
        "1@2",
        "--bench",
        "bfcl:simple_python",
        "--data",
        data.to_str().unwrap(),
        "--limit",
        "1",
        "--max-tokens",
        "8",
    ]);
    assert!(at_two.status.success(), "{}", text(&at_two.stderr));
    assert!(
        text(&at_two.stderr).contains("task records with run 1 at step 2"),
        "{}",
        text(&at_two.stderr)
    );
    let at_three = run(&[
        "--store",
        store_arg,
        "eval",
        "--run",
        "tiny-job@3",
        "--bench",
        "bfcl:simple_python",
        "--data",
        data.to_str().unwrap(),
    ]);
    assert!(!at_three.status.success());
    assert!(
        text(&at_three.stderr)
            .contains("has no checkpoint at step 3; its checkpoints are at steps 1, 2, 4"),
        "{}",
        text(&at_three.stderr)
    );

    // The records export like any other table.
    let exported = run(&[
        "--store",
        store_arg,
        "runs",
        "export",
        "1",
        "--table",
        "eval-tasks",
        "--format",
        "csv",
    ]);
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    let csv = text(&exported.stdout);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "step,benchmark,task_id,trial,score,reason,data");
    assert!(
        lines[1].starts_with("2,bfcl_simple_python,simple_python_0,0,")
            && lines[2].starts_with("4,bfcl_simple_python,simple_python_0,0,"),
        "{csv}"
    );
}

/// `envace serve-model` on SmolLM2 as a child process, and the URL it prints.
fn serve_model() -> (std::process::Child, String) {
    let gguf = envace::model::smollm2_gguf().unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(BIN)
        .args(["serve-model", "--model"])
        .arg(&gguf)
        .args(["--addr", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(120)).unwrap();
    let url = line.rsplit(' ').next().unwrap().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    (child, url)
}

#[test]
fn tau2_conversations_run_with_serve_model_as_the_user_simulator() {
    let (mut user, url) = serve_model();
    let gguf = envace::model::smollm2_gguf().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let data = data();
    let out = run(&[
        "eval",
        "--model",
        gguf.to_str().unwrap(),
        "--bench",
        "tau2:airline",
        "--data",
        data.to_str().unwrap(),
        "--user-endpoint",
        &url,
        "--limit",
        "2",
        "--max-steps",
        "5",
        "--max-tokens",
        "24",
        "--out",
        records.to_str().unwrap(),
    ]);
    let _ = user.kill();
    let _ = user.wait();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("tau2:airline: pass^1 ") && stdout.contains("over 2 of 2 tasks × 1 trials"),
        "{stdout}"
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&records)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = lines
        .iter()
        .map(|l| l["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["0", "1"]);
    for line in &lines {
        assert_eq!(line["benchmark"], "tau2");
        let messages = line["messages"].as_array().unwrap();
        assert_eq!(messages[0]["content"], "Hi! How can I help you today?");
        // Both sides spoke: the simulator's opening, then the agent's answer.
        assert_eq!(messages[1]["role"], "user", "{line}");
        assert_eq!(messages[2]["role"], "assistant", "{line}");
        assert!(messages.len() <= 5, "{line}");
        assert!(line["reward"].is_number(), "{line}");
        assert!(line["termination"]["kind"].is_string(), "{line}");
    }
}

#[test]
fn vita_conversations_run_with_serve_model_as_user_and_judge_and_are_stored() {
    let (mut user, url) = serve_model();
    let gguf = envace::model::smollm2_gguf().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let store = dir.path().join("runs.sqlite");
    let data = data();
    let out = run(&[
        "--store",
        store.to_str().unwrap(),
        "eval",
        "--record-as",
        "smollm2",
        "--model",
        gguf.to_str().unwrap(),
        "--bench",
        "vita:delivery",
        "--data",
        data.to_str().unwrap(),
        "--user-endpoint",
        &url,
        "--judge-endpoint",
        &url,
        "--limit",
        "1",
        "--max-steps",
        "3",
        "--max-tokens",
        "16",
        "--out",
        records.to_str().unwrap(),
    ]);
    let _ = user.kill();
    let _ = user.wait();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("vita:delivery: Avg@1 ") && stdout.contains("over 1 of 1 tasks × 1 trials"),
        "{stdout}"
    );
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&records).unwrap().trim()).unwrap();
    assert_eq!(line["benchmark"], "vita");
    assert_eq!(line["task_id"], "10711001");
    let messages = line["messages"].as_array().unwrap();
    assert_eq!(messages[0]["content"], "Hello, how can I help you?");
    assert_eq!(messages[1]["role"], "user", "{line}");
    // Three messages reach the step limit: scored 0 without asking the judge.
    assert_eq!(line["termination"]["kind"], "max_steps", "{line}");
    assert_eq!(line["reward"], 0.0);
    let csv = run(&[
        "--store",
        store.to_str().unwrap(),
        "runs",
        "export",
        "smollm2",
        "--table",
        "eval-tasks",
        "--format",
        "csv",
    ]);
    assert!(csv.status.success(), "{}", text(&csv.stderr));
    let csv = text(&csv.stdout);
    assert!(csv.contains("0,vita_delivery,10711001,0,0"), "{csv}");
}

fn tool_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../envace/tests/fixtures/toolmetrics")
        .join(name)
}

#[test]
fn score_tools_prints_each_samples_comparison_and_the_grouped_metrics() {
    let data = tool_fixture("finance.jsonl");
    let outputs = tool_fixture("predictions.jsonl");
    let out = run(&[
        "eval",
        "score",
        "tools",
        "--data",
        data.to_str().unwrap(),
        "--outputs",
        outputs.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("s1\texact\tF1 1.0000"), "{stdout}");
    assert!(stdout.contains("s3\tdiffers\tF1 0.6667"), "{stdout}");
    assert!(
        stdout.contains(": F1 0.6933 (P 0.7000, R 0.9333) macro, F1 0.8000 (P 0.7500, R 0.8571) micro, exact 0.2000, 5 samples"),
        "{stdout}"
    );
    assert!(
        stdout.contains("    scenario stock_query: F1 0.6000"),
        "{stdout}"
    );
    assert!(
        stdout.contains("    difficulty hard: F1 0.9000"),
        "{stdout}"
    );

    let json = run(&[
        "eval",
        "score",
        "tools",
        "--data",
        data.to_str().unwrap(),
        "--outputs",
        outputs.to_str().unwrap(),
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["overall"]["n_samples"], 5);
    assert_eq!(report["by_difficulty"]["easy"]["n_samples"], 3);

    let bad = run(&[
        "eval",
        "score",
        "tools",
        "--data",
        outputs.to_str().unwrap(),
        "--outputs",
        outputs.to_str().unwrap(),
    ]);
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("`messages` is required"),
        "{}",
        text(&bad.stderr)
    );
}

#[test]
fn eval_runs_a_tool_call_dataset_on_a_model_and_stores_the_grouped_metrics() {
    let gguf = envace::model::smollm2_gguf().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let data = tool_fixture("");
    let out = run(&[
        "--store",
        store.to_str().unwrap(),
        "eval",
        "--record-as",
        "smollm2",
        "--model",
        gguf.to_str().unwrap(),
        "--bench",
        "tools:finance",
        "--data",
        data.to_str().unwrap(),
        "--max-tokens",
        "24",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("tools:finance: F1 "), "{stdout}");
    assert!(
        stdout.contains("    scenario fund_analysis: F1 "),
        "{stdout}"
    );
    let exported = run(&[
        "--store",
        store.to_str().unwrap(),
        "runs",
        "export",
        "smollm2",
        "--table",
        "evals",
        "--format",
        "csv",
    ]);
    let csv = text(&exported.stdout);
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    for row in [
        "tools_finance,all,f1_macro,",
        "tools_finance,scenario:stock_query,exact_match,",
        "tools_finance,difficulty:hard,f1_micro,",
    ] {
        assert!(csv.contains(row), "{row}: {csv}");
    }
    let missing = run(&[
        "eval",
        "--model",
        "/nonexistent.gguf",
        "--bench",
        "tools:nothing_here",
        "--data",
        data.to_str().unwrap(),
    ]);
    assert!(!missing.status.success());
    assert!(
        text(&missing.stderr).contains("no dataset file; looked for"),
        "{}",
        text(&missing.stderr)
    );
}

#[test]
fn prompt_mode_refuses_the_java_and_javascript_categories_before_loading_anything() {
    let data = data();
    let out = run(&[
        "eval",
        "--model",
        "/nonexistent.gguf",
        "--bench",
        "bfcl:simple_python,bfcl:simple_java",
        "--prompting",
        "--data",
        data.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("bfcl:simple_java expects Java or JavaScript arguments"),
        "{stderr}"
    );
}

#[test]
fn tau2_options_are_checked_before_any_model_is_loaded() {
    let data = data();
    for (args, says) in [
        (
            vec!["--user-endpoint", "self", "--split", "holdout"],
            "--split \"holdout\"",
        ),
        (
            vec!["--user-endpoint", "self", "--trials", "0"],
            "--trials 0",
        ),
        (
            vec!["--user-endpoint", "self", "--max-steps", "2"],
            "--max-steps 2",
        ),
        (
            vec!["--user-endpoint", "self", "--rehearsal", "greedy:2"],
            "--rehearsal \"greedy:2\": the style \"greedy\" is not parallel or sequential",
        ),
        (
            vec!["--user-endpoint", "self", "--rehearsal", "parallel:0"],
            "N must be a whole number from 1",
        ),
        (
            vec![
                "--user-endpoint",
                "self",
                "--rehearsal",
                "parallel:2",
                "--bench",
                "bfcl:simple_python",
            ],
            "--rehearsal: bfcl:simple_python has no environment to rehearse against",
        ),
    ] {
        let mut all = vec![
            "eval",
            "--model",
            "/nonexistent.gguf",
            "--bench",
            "tau2:retail",
            "--data",
            data.to_str().unwrap(),
        ];
        all.extend(args);
        let out = run(&all);
        assert!(!out.status.success(), "{all:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(says), "{all:?}: {stderr}");
        assert!(!stderr.contains("nonexistent"), "{stderr}");
    }
}
