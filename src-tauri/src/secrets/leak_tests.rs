//! Secrets never leak, on the studio's path: an API key stored in a real OS keyring (GNOME
//! Keyring's Secret Service on a private D-Bus session bus) through the editor's
//! `store_api_key` command, and in no environment variable, reaches an LLM judge that
//! answers 401 without it, both in the editor's "Check connection" and in a training job run
//! as the studio runs one (the engine's controller in process, `Keyring` registered as the
//! key source, every event turned into the `TrainingEvent` the window gets); then the key is
//! found in no log line or event, no row of the run store, no checkpoint file and no export.
//!
//! The bus address reaches the keyring client only through the process environment, so the
//! test runs its keyring work in copies of this test binary started with that environment
//! (`ENVACE_LEAK_TEST_ROLE` says which part a copy plays): one stores the key, read from its
//! standard input, the other runs the check and the job, and what they write is scanned.
#![allow(clippy::unwrap_used)] // Test code: a panic here is the test failing, with its message.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use envace_e2e::leaks::{Secret, scan_store, status_of_get, text};

use envace::controller::{Controller, Event, JobOutcome, JobSpec};
use envace::serve::{LoadedModel, ServeOptions, serve};
use envace::store::{ExportFormat, ExportTable, RunId, Store};

use crate::contract::TrainingEvent;

/// This test's path, which a copy of the binary is started with.
const TEST: &str =
    "secrets::leak_tests::a_key_only_in_the_os_keyring_reaches_the_judge_and_leaks_nowhere";

/// Which part a copy of the test binary plays: `store` or `job`.
const ROLE: &str = "ENVACE_LEAK_TEST_ROLE";

/// The temporary folder of the test, for the copies.
const DIR: &str = "ENVACE_LEAK_TEST_DIR";

/// The name the key is stored under: the endpoint's `api_key_env`, set in no environment.
const KEY_VAR: &str = "ENVACE_KEYRING_LEAK_TEST_KEY";

/// The engine's small training job (3 SFT and 2 GRPO steps, checkpoints, held-out
/// evaluations), its episodes judged by the endpoint.
const TINY_JOB: &str = include_str!("../../../crates/envace/tests/fixtures/train/tiny_job.toml");

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

/// This test binary again, playing `role` on the bus at `address`, without the key's
/// variable in its environment; its home and temporary folders inside `dir`.
fn copy(role: &str, dir: &Path, address: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(DIR, dir)
        .env("DBUS_SESSION_BUS_ADDRESS", address)
        .env("HOME", dir.join("home"))
        .env("XDG_DATA_HOME", dir.join("home/data"))
        .env("XDG_CACHE_HOME", dir.join("home/cache"))
        .env("XDG_CONFIG_HOME", dir.join("home/config"))
        .env("XDG_STATE_HOME", dir.join("home/state"))
        .env("TMPDIR", dir.join("tmp"))
        .env_remove(KEY_VAR)
        .env_remove("RUST_BACKTRACE");
    command
}

/// The copy that stores the key it reads from its standard input, through the editor's
/// command.
fn store_the_key() {
    let mut key = String::new();
    std::io::stdin().read_to_string(&mut key).unwrap();
    tauri::async_runtime::block_on(crate::commands::store_api_key(KEY_VAR.to_owned(), key))
        .unwrap_or_else(|err| panic!("cannot store the key: {}: {}", err.what, err.detail));
}

/// The copy that checks the connection and trains as the studio does, printing the check's
/// result and every event as the window would get them.
fn check_and_train(dir: &Path) {
    assert!(std::env::var_os(KEY_VAR).is_none());
    // What `crate::run` does before the window opens.
    assert!(envace::openai::set_key_source(Box::new(
        crate::secrets::Keyring
    )));
    let toml = std::fs::read_to_string(dir.join("keyed.toml")).unwrap();
    let check = tauri::async_runtime::block_on(crate::commands::check_endpoint(
        toml.clone(),
        vec!["judge".to_owned(), "endpoint".to_owned()],
    ))
    .unwrap_or_else(|err| panic!("the connection check failed: {}: {}", err.what, err.detail));
    println!("check: {}", serde_json::to_string(&check).unwrap());
    assert!(check.ok, "the connection check failed: {}", check.summary);
    let config = envace::config::parse(&toml, "keyed.toml").unwrap();
    let controller = Controller::start(JobSpec {
        config,
        config_toml: toml,
        store_path: dir.join("envace/runs.sqlite"),
        resume: None,
    })
    .unwrap();
    let run = i32::try_from(controller.run().0).unwrap();
    while let Ok(event) = controller.events().recv() {
        let finished = matches!(event, Event::Finished { .. });
        let event = TrainingEvent::from_engine(run, event);
        println!("event: {}", serde_json::to_string(&event).unwrap());
        if finished {
            break;
        }
    }
    assert_eq!(controller.wait().unwrap(), JobOutcome::Finished);
}

/// Runs `command`, failing with its output unless it succeeds.
fn succeed(mut command: Command, what: &str, input: Option<&str>) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    if let Some(input) = input {
        stdin.write_all(input.as_bytes()).unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
    output
}

/// Every file under `dir` but those under `skip`, with its bytes.
fn files(dir: &Path, skip: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if path.starts_with(skip) {
                continue;
            } else if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                // A socket or a file removed meanwhile (the keyring's) is not a file here.
                if let Ok(bytes) = std::fs::read(&path) {
                    files.push((path, bytes));
                }
            }
        }
    }
    files.sort();
    files
}

#[test]
fn a_key_only_in_the_os_keyring_reaches_the_judge_and_leaks_nowhere() {
    match std::env::var(ROLE).as_deref() {
        Ok("store") => return store_the_key(),
        Ok("job") => return check_and_train(Path::new(&std::env::var_os(DIR).unwrap())),
        _ => {}
    }
    let started = std::time::Instant::now();
    let secret = Secret::fresh("sk-envace-keyring-leak-");
    let rows: Vec<String> = secret
        .key
        .as_bytes()
        .chunks(16)
        .map(|row| format!("TRACE 3a34 3236  {}", text(row)))
        .collect();
    assert!(secret.found_in(rows.join("\n").as_bytes()).is_some());
    assert!(std::env::var_os(KEY_VAR).is_none());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for sub in ["home", "tmp", "envace", "exports", "keyring"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    // GNOME Keyring keeps its (encrypted) keyring file here: where the key belongs, so the
    // one folder not scanned.
    let keyring_home = dir.join("keyring");
    let (_bus, address) = envace_e2e::leaks::start_keyring(&keyring_home, "envace-leak-test");

    // The judge: our own server, 401 without the key or with another, 200 with it.
    let model = dir.join("judge-model");
    tiny_judge_model(&model);
    let server = serve(
        LoadedModel::from_path(&model).unwrap().with_name("judge"),
        "127.0.0.1:0".parse().unwrap(),
        &ServeOptions {
            api_key: Some(secret.key.clone()),
            ..ServeOptions::default()
        },
    )
    .unwrap();
    let addr = server.local_addr().to_string();
    // Another key: the last digit changed.
    let (head, last) = secret.key.split_at(secret.key.len() - 1);
    let other = format!("{head}{}", if last == "0" { "1" } else { "0" });
    for (key, expected) in [
        (None, " 401 "),
        (Some(other.as_str()), " 401 "),
        (Some(secret.key.as_str()), " 200 "),
    ] {
        let status = status_of_get(&addr, "/v1/models", key);
        assert!(status.contains(expected), "GET /v1/models: {status}");
    }
    std::fs::write(
        dir.join("keyed.toml"),
        format!(
            "{TINY_JOB}\n[judge]\nkind = \"llm\"\n\n[judge.endpoint]\nurl = \"{}\"\nmodel = \"judge\"\napi_key_env = \"{KEY_VAR}\"\n",
            server.url()
        ),
    )
    .unwrap();

    // The key goes into the keyring, then the check and the job find it there.
    let stored = succeed(
        copy("store", dir, &address),
        "storing the key",
        Some(&secret.key),
    );
    let job = succeed(copy("job", dir, &address), "the check and the job", None);
    server.shutdown();
    let job_out = text(&job.stdout);
    assert!(
        job_out.contains("event: {\"kind\":\"finished\""),
        "the job reported no end:\n{job_out}"
    );

    // The key was used: the connection check succeeded (above, in the copy), and every RL
    // episode was judged by the server, which answered (200) with text that is not a verdict
    // (the judge is an untrained model), never with an error.
    let store_path = dir.join("envace/runs.sqlite");
    let db = rusqlite::Connection::open_with_flags(
        &store_path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
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

    // Every export of the run, as `envace runs export` writes them.
    let store = Store::open(&store_path).unwrap();
    for table in [
        ExportTable::Metrics,
        ExportTable::Events,
        ExportTable::Evals,
        ExportTable::EvalTasks,
    ] {
        for format in [ExportFormat::Csv, ExportFormat::Jsonl] {
            let path = dir.join(format!("exports/{table:?}.{format:?}"));
            let mut file = std::fs::File::create(&path).unwrap();
            envace::store::export_rows(
                &store.view(),
                RunId(1),
                table,
                format,
                &mut file,
                &path.display().to_string(),
            )
            .unwrap();
        }
    }
    drop(store);

    // The key is nowhere: not in what the copies printed (events, check, logs at trace level),
    // a file (store, checkpoints, exports, anything under their home or temporary folder) or a
    // stored value.
    let logs = [
        ("the storing copy's stdout", &stored.stdout),
        ("the storing copy's stderr", &stored.stderr),
        ("the job's stdout (check and events)", &job.stdout),
        ("the job's stderr", &job.stderr),
    ];
    let mut leaks = Vec::new();
    for (name, bytes) in logs {
        if let Some(found) = secret.found_in(bytes) {
            leaks.push(format!("{name} holds {found}"));
        }
    }
    let files = files(dir, &keyring_home);
    for (path, bytes) in &files {
        if let Some(found) = secret.found_in(bytes) {
            leaks.push(format!("{} holds {found}", path.display()));
        }
    }
    let (in_store, counts) = scan_store(&store_path, &secret);
    leaks.extend(in_store);
    let checkpoints = dir.join("envace/checkpoints");
    assert!(
        files
            .iter()
            .filter(|(p, _)| p.starts_with(&checkpoints))
            .count()
            >= 3,
        "no checkpoint files under {}",
        checkpoints.display()
    );
    for table in [
        "runs",
        "metrics",
        "trajectories",
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
        "scanned {} files and {} tables in {:.1} s",
        files.len(),
        counts.len(),
        started.elapsed().as_secs_f64()
    );
}
