//! `envace env call|replay` and `envace serve-env` (stdio and HTTP), run as the real binary.
#![allow(clippy::unwrap_used)] // Test code may unwrap: a panic here is the test failing.

use std::path::{Path, PathBuf};
use std::process::Command;

use envace::config::Domain;
use envace::env::tau2::{DomainKind, Tau2Domain};
use envace::env::{Environment, render_outcome};
use envace::mcp::{McpEnvironment, McpOptions, McpServer, domain_factory};
use expect_test::{Expect, expect};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_envace");

fn data_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/benchmarks/tau2-bench");
    assert!(
        root.join("retail/db.json").is_file(),
        "τ²-bench data is missing under {}",
        root.display()
    );
    root
}

fn check_call(args: &[&str], expect: Expect) {
    let out = Command::new(BIN).args(args).output().unwrap();
    let text = format!(
        "exit {}\n{}",
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout)
    );
    expect.assert_eq(&text);
}

#[test]
fn env_call_prints_what_the_agent_sees() {
    check_call(
        &[
            "env",
            "call",
            "functions",
            "add",
            "--args",
            r#"{"a": 1, "b": 2}"#,
        ],
        expect![[r#"
            exit 0
            {"result": 3}
        "#]],
    );
    check_call(
        &["env", "call", "functions", "nope"],
        expect![[r#"
            exit 1
            Error: tool "nope" is not available; the tools are: add, subtract, multiply, power, convert_length, convert_temperature, reverse_string, count_vowels, to_uppercase, days_between, add_days, day_of_week
        "#]],
    );
    let data = data_root().display().to_string();
    check_call(
        &[
            "env",
            "call",
            "retail",
            "find_user_id_by_email",
            "--args",
            r#"{"email": "noah.brown7922@example.com"}"#,
            "--data",
            &data,
        ],
        expect![[r#"
            exit 0
            noah_brown_6181
        "#]],
    );
}

#[test]
fn env_replay_prints_the_gold_state_hash_and_dumps_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("state.json");
    let out = Command::new(BIN)
        .args(["env", "replay", "retail", "--data"])
        .arg(data_root())
        .args(["--task", "0", "--dump-state"])
        .arg(&dump)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let domain = Tau2Domain::load(DomainKind::Retail, data_root().join("retail")).unwrap();
    let want = domain.gold_hash(domain.task("0").unwrap());
    assert_eq!(stdout.lines().last().unwrap(), format!("state_hash {want}"));
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    assert_eq!(state["users"].as_object().unwrap().len(), 500);
    // An existing dump is not replaced without --force.
    let again = Command::new(BIN)
        .args(["env", "replay", "retail", "--data"])
        .arg(data_root())
        .args(["--task", "0", "--dump-state"])
        .arg(&dump)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("pass --force"));
}

/// The same calls through the served binary and in process give the same rendered text.
fn compare(
    remote: &mut McpEnvironment,
    local: &mut dyn Environment,
    calls: &[(&str, serde_json::Value)],
) {
    assert_eq!(remote.tools().len(), local.tools().len());
    for (name, args) in calls {
        assert_eq!(
            render_outcome(&remote.call(name, args)),
            render_outcome(&local.call(name, args)),
            "{name} {args}"
        );
    }
}

#[test]
fn serve_env_stdio_answers_like_the_library() {
    let data = data_root().display().to_string();
    let server = McpServer::Command {
        program: BIN.to_owned(),
        args: vec![
            "serve-env".into(),
            "retail".into(),
            "--stdio".into(),
            "--data".into(),
            data,
        ],
        env: Vec::new(),
    };
    let mut remote = McpEnvironment::connect(server, McpOptions::default()).unwrap();
    let mut local = domain_factory(Domain::Retail, Some(&data_root()))
        .unwrap()
        .make();
    compare(
        &mut remote,
        local.as_mut(),
        &[
            (
                "find_user_id_by_email",
                json!({"email": "noah.brown7922@example.com"}),
            ),
            ("get_user_details", json!({"user_id": "noah_brown_6181"})),
            ("get_order_details", json!({"order_id": "#W7678072"})),
            (
                "cancel_pending_order",
                json!({"order_id": "#W7678072", "reason": "no longer needed"}),
            ),
            ("get_order_details", json!({"order_id": "#W7678072"})),
            ("get_order_details", json!({"order_id": 7})),
        ],
    );
}

#[test]
fn serve_env_http_answers_like_the_library() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(BIN)
        .args([
            "serve-env",
            "functions",
            "--http",
            &format!("127.0.0.1:{port}"),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let options = McpOptions {
        max_attempts: 20,
        backoff_initial_ms: 50,
        ..McpOptions::default()
    };
    let connected = McpEnvironment::connect(
        McpServer::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
        },
        options,
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut remote = connected.unwrap();
        let mut local = domain_factory(Domain::Functions, None).unwrap().make();
        compare(
            &mut remote,
            local.as_mut(),
            &[
                ("add", json!({"a": 2, "b": 40})),
                ("day_of_week", json!({"date": "2024-05-15"})),
                (
                    "convert_temperature",
                    json!({"value": 100, "from_unit": "C", "to_unit": "K"}),
                ),
                ("power", json!({"base": 2, "exponent": 99})),
            ],
        );
    }));
    child.kill().unwrap();
    child.wait().unwrap();
    result.unwrap();
}
