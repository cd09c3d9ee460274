//! Secrets never leak: an API key that a real job uses (an LLM judge behind `envace serve-model
//! --api-key-env`, which answers 401 without it) is found in no row of the run store, no log
//! line, no checkpoint file and no exported file.
//!
//! The key reaches the job through the environment only. The `envace` command has no second
//! key source: the OS keyring is read only by the desktop studio, which registers it as the
//! engine's `KeySource` (`src-tauri/src/secrets.rs`). A key stored in the keyring is
//! therefore never read by the jobs this test runs; the studio's keyring path is covered by
//! its own test (`src-tauri/src/secrets/leak_tests.rs`), which runs a job with the key only
//! there.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use envace_e2e::leaks::{Secret, scan_store, status_of_get, text};

const BIN: &str = env!("CARGO_BIN_EXE_envace");

/// The same small job as the engine's training tests: 3 SFT and 2 GRPO steps, checkpoints at
/// steps 1, 2 and 4, held-out evaluations.
const TINY_JOB: &str = include_str!("../../../envace/tests/fixtures/train/tiny_job.toml");

/// The environment variable the key travels in, to the server and to the job.
const KEY_VAR: &str = "ENVACE_LEAK_TEST_API_KEY";

/// Every process of the test runs with its home, data, cache, config, state and temporary
/// folders (and `ENVACE_HOME`) inside one temporary folder, so any file one of them writes is
/// among the files scanned.
struct Sandbox {
    root: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let root = tempfile::tempdir().unwrap();
        for sub in ["home", "data", "cache", "config", "state", "tmp", "envace"] {
            std::fs::create_dir_all(root.path().join(sub)).unwrap();
        }
        Sandbox { root }
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.root.path().join(sub)
    }

    /// `envace ARGS` in the sandbox, the key in its environment, logging everything it logs.
    fn envace(&self, secret: &Secret, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .env("ENVACE_HOME", self.path("envace"))
            .env("HOME", self.path("home"))
            .env("XDG_DATA_HOME", self.path("data"))
            .env("XDG_CACHE_HOME", self.path("cache"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("XDG_STATE_HOME", self.path("state"))
            .env("TMPDIR", self.path("tmp"))
            .env(KEY_VAR, &secret.key)
            // The most verbose logging: a request or header logged anywhere would show.
            .env("RUST_LOG", "trace")
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null());
        command
    }

    /// Every file under the sandbox, with its bytes.
    fn files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut files = Vec::new();
        let mut stack = vec![self.root.path().to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                let kind = entry.file_type().unwrap();
                if kind.is_dir() {
                    stack.push(entry.path());
                } else if kind.is_file() {
                    files.push((entry.path(), std::fs::read(entry.path()).unwrap()));
                }
            }
        }
        files.sort();
        files
    }
}

/// A tiny Llama with a trained tokenizer as a Hugging Face folder, its context widened so a
/// judge's prompt and 512 new tokens fit (positions are rotary: no weight depends on it).
fn tiny_judge_model(dir: &Path) {
    let corpus = "<|im_start|>user\nIs the standard met?<|im_end|>\n<|im_start|>assistant\n{\"verdicts\": [{\"index\": 0, \"met\": true}]}<|im_end|>\n";
    envace::model::save_tiny_llama_folder(dir, corpus).unwrap();
    let path = dir.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["max_position_embeddings"] = serde_json::json!(16384);
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

/// `envace serve-model` running as a child; both its streams are read as it writes them (a
/// server logging at trace level fills a pipe nobody reads and stalls).
struct Server {
    child: Child,
    url: String,
    addr: String,
    stdout: std::thread::JoinHandle<String>,
    stderr: std::thread::JoinHandle<String>,
}

/// Starts `envace serve-model` on `model`, asking for the key in `KEY_VAR`, and waits until
/// it prints its URL.
fn start_server(sandbox: &Sandbox, secret: &Secret, model: &Path) -> Server {
    let mut child = sandbox
        .envace(
            secret,
            &[
                "serve-model",
                "--model",
                model.to_str().unwrap(),
                "--addr",
                "127.0.0.1:0",
                "--api-key-env",
                KEY_VAR,
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let mut err = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = err.read_to_end(&mut all);
        text(&all)
    });
    let Ok(line) = rx.recv_timeout(Duration::from_secs(120)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "envace serve-model printed no URL within 120 s: {}",
            stderr.join().unwrap()
        );
    };
    let url = line.rsplit(' ').next().unwrap().to_owned();
    let addr = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/v1"))
        .unwrap_or_else(|| panic!("the server printed {line:?}, not its URL"))
        .to_owned();
    Server {
        child,
        url,
        addr,
        stdout,
        stderr,
    }
}

/// Stops the server as Ctrl-C does; what it wrote to stdout and to stderr.
fn stop_server(mut server: Server) -> (String, String) {
    let sent = Command::new("kill")
        .args(["-INT", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "cannot send SIGINT to the server");
    let status = server.child.wait().unwrap();
    let stdout = server.stdout.join().unwrap();
    let stderr = server.stderr.join().unwrap();
    assert!(
        status.success(),
        "envace serve-model did not stop cleanly ({status}): {}",
        stderr.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
    (stdout, stderr)
}

#[test]
fn an_api_key_a_job_uses_is_in_no_store_row_log_line_checkpoint_or_export() {
    let started = Instant::now();
    let secret = Secret::fresh("sk-envace-leak-");
    // The scanner finds the key whole, and cut into rows of 16 as a hex dump shows it.
    assert!(
        secret
            .found_in(format!("[{}]", secret.key).as_bytes())
            .is_some()
    );
    let rows: Vec<String> = secret
        .key
        .as_bytes()
        .chunks(16)
        .map(|row| format!("TRACE 3a34 3236  {}", text(row)))
        .collect();
    assert!(secret.found_in(rows.join("\n").as_bytes()).is_some());
    assert!(
        secret
            .found_in(b"0123456789abcdef0123456789abcdef")
            .is_none()
    );
    let sandbox = Sandbox::new();
    let model = sandbox.path("judge-model");
    tiny_judge_model(&model);

    // The judge's server: 401 without the key or with another one, 200 with it.
    let server = start_server(&sandbox, &secret, &model);
    // Another key: the last digit changed.
    let (head, last) = secret.key.split_at(secret.key.len() - 1);
    let other = format!("{head}{}", if last == "0" { "1" } else { "0" });
    for (key, expected) in [
        (None, " 401 "),
        (Some(other.as_str()), " 401 "),
        (Some(secret.key.as_str()), " 200 "),
    ] {
        let status = status_of_get(&server.addr, "/v1/models", key);
        assert!(
            status.contains(expected),
            "GET /v1/models with {}: {status}",
            if key.is_some() { "a key" } else { "no key" }
        );
    }

    // The job: the tiny job with its episodes judged by that server.
    let config = sandbox.path("keyed.toml");
    let job = format!(
        "{TINY_JOB}\n[judge]\nkind = \"llm\"\n\n[judge.endpoint]\nurl = \"{}\"\nmodel = \"judge\"\napi_key_env = \"{KEY_VAR}\"\n",
        server.url
    );
    std::fs::write(&config, &job).unwrap();
    let trained = sandbox
        .envace(&secret, &["train", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        trained.status.success(),
        "envace train failed ({}): {}",
        trained.status,
        text(&trained.stderr)
    );
    let (server_stdout, server_stderr) = stop_server(server);

    // Every export of the run, and what reading the run prints.
    let exports = sandbox.path("exports");
    std::fs::create_dir_all(&exports).unwrap();
    let mut logs = vec![
        ("envace train's stdout".to_owned(), trained.stdout),
        ("envace train's stderr".to_owned(), trained.stderr),
        (
            "envace serve-model's stdout".to_owned(),
            server_stdout.into_bytes(),
        ),
        (
            "envace serve-model's stderr".to_owned(),
            server_stderr.into_bytes(),
        ),
    ];
    let mut run = |args: &[&str]| -> Output {
        let output = sandbox.envace(&secret, args).output().unwrap();
        assert!(
            output.status.success(),
            "envace {} failed: {}",
            args.join(" "),
            text(&output.stderr)
        );
        for (stream, bytes) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
            logs.push((
                format!("envace {}'s {stream}", args.join(" ")),
                bytes.clone(),
            ));
        }
        output
    };
    for table in ["metrics", "events", "evals", "eval-tasks"] {
        for format in ["csv", "jsonl"] {
            let out = exports.join(format!("{table}.{format}"));
            run(&[
                "runs",
                "export",
                "1",
                "--format",
                format,
                "--table",
                table,
                "--out",
                out.to_str().unwrap(),
            ]);
        }
    }
    run(&["runs", "list", "--json"]);
    run(&["runs", "show", "1", "--config", "--json"]);
    run(&["runs", "show", "1", "--config"]);

    // Not vacuous: the job wrote rows, checkpoints and exports, and logged at trace level.
    let store = sandbox.path("envace").join("runs.sqlite");
    let files = sandbox.files();
    let under = |dir: &Path| {
        files
            .iter()
            .filter(|(path, _)| path.starts_with(dir))
            .count()
    };
    let checkpoints = sandbox.path("envace").join("checkpoints");
    assert!(
        under(&checkpoints) >= 3,
        "no checkpoint files under {}",
        checkpoints.display()
    );
    // (`envace train` writes no log line into the store: its events table stays empty.)
    for table in ["metrics", "evals"] {
        for format in ["csv", "jsonl"] {
            let path = exports.join(format!("{table}.{format}"));
            assert!(
                std::fs::metadata(&path).unwrap().len() > 0,
                "{} is empty",
                path.display()
            );
        }
    }
    assert!(
        logs[1].1.len() > 10_000,
        "envace train logged {} bytes at trace level",
        logs[1].1.len()
    );

    // The key was used: every RL episode was judged by the server, which answered (200) with
    // text that is not a verdict (the judge is an untrained model), never with an error.
    let db =
        rusqlite::Connection::open_with_flags(&store, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let reasons: Vec<Option<String>> = db
        .prepare("SELECT mask_reason FROM trajectories WHERE step >= 3")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    drop(db);
    assert!(!reasons.is_empty(), "the job stored no RL episode");
    for reason in &reasons {
        let reason = reason.as_deref().unwrap_or("not masked");
        assert!(
            reason.starts_with("judge: LLM judge verdict unreadable"),
            "an RL episode was not judged by the server that wanted the key: {reason}"
        );
    }

    // The key is nowhere: not in a log line, a file (store, checkpoints, exports, anything a
    // process wrote under its home or temporary folder), or a stored value.
    let mut leaks = Vec::new();
    for (name, bytes) in &logs {
        if let Some(found) = secret.found_in(bytes) {
            leaks.push(format!("{name} holds {found}"));
        }
    }
    for (path, bytes) in &files {
        if let Some(found) = secret.found_in(bytes) {
            leaks.push(format!("{} holds {found}", path.display()));
        }
    }
    let (in_store, counts) = scan_store(&store, &secret);
    leaks.extend(in_store);
    for table in [
        "runs",
        "metrics",
        "trajectories",
        "fidelity_pairs",
        "eval_results",
        "checkpoints",
    ] {
        assert!(
            counts.iter().any(|(name, n)| name == table && *n > 0),
            "the store's {table} table is empty: {counts:?}"
        );
    }
    assert!(
        leaks.is_empty(),
        "the API key leaked:\n{}",
        leaks.join("\n")
    );
    eprintln!(
        "scanned {} log streams, {} files and {} tables in {:.1} s",
        logs.len(),
        files.len(),
        counts.len(),
        started.elapsed().as_secs_f64()
    );
}
