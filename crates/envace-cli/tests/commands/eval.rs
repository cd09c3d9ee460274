//! `envace eval` as the real binary: BFCL tasks on SmolLM2 end to end, another system's outputs
//! scored with `eval score bfcl`, and bad input named.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
fn eval_runs_bfcl_tasks_on_a_model_and_writes_every_tasks_record() {
    let gguf = envace::model::smollm2_gguf().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let data = data();
    let out = run(&[
        "eval",
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
        ("tau2:retail", "cannot be evaluated yet"),
        ("bfcl:multi_turn_base", "stateful backends"),
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
