//! `envace serve-model` as the real binary: it prints the bound URL, answers `/v1/models` over
//! HTTP, stops cleanly on SIGINT (Ctrl-C), and refuses bad arguments with a clear message.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_envace");

/// A plain HTTP/1.1 GET; the status line and the body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("the server accepts connections");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("the request is sent");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("the response is read");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("a response has headers and a body");
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

/// Starts `envace serve-model` on SmolLM2's GGUF with `extra` arguments; the child and the
/// address it printed once the model was loaded.
fn start_smollm2(extra: &[&str]) -> (std::process::Child, String) {
    let gguf = envace::model::smollm2_gguf().unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(BIN)
        .args(["serve-model", "--model"])
        .arg(&gguf)
        .args(["--addr", "127.0.0.1:0", "--max-batch", "4"])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the server prints its URL once the model is loaded");
    assert!(
        line.starts_with("serving SmolLM2-135M-Instruct.Q4_1 at http://127.0.0.1:"),
        "{line}"
    );
    let url = line.rsplit(' ').next().expect("the URL ends the line");
    let addr = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/v1"))
        .expect("the URL is http://ADDR/v1");
    assert!(!addr.ends_with(":0"), "the real port is printed: {addr}");
    (child, addr.to_owned())
}

/// Sends SIGINT (Ctrl-C, as a terminal does) and returns what the server wrote to stderr.
fn interrupt(child: std::process::Child) -> String {
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let output = child.wait_with_output().expect("the server exits");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{:?}\n{stderr}", output.status);
    stderr
}

#[test]
fn serve_model_on_wgpu_answers_a_chat_completion_from_the_gpu() {
    let (child, addr) = start_smollm2(&["--device", "wgpu"]);
    let body = r#"{"model": "smollm2", "temperature": 0, "max_tokens": 12, "messages": [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]}"#;
    let mut stream = TcpStream::connect(&addr).expect("the server accepts connections");
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("the request is sent");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("the response is read");
    let (head, reply) = response.split_once("\r\n\r\n").expect("headers and a body");
    assert!(head.starts_with("HTTP/1.1 200"), "{response}");
    let reply: serde_json::Value = serde_json::from_str(reply).expect("the body is JSON");
    let content = reply["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(content.contains("Paris"), "{reply}");
    let stderr = interrupt(child);
    // The adapter is named, and the Q4_1 weights went up as they are.
    assert!(stderr.contains("generating on wgpu: "), "{stderr}");
    assert!(stderr.contains("(weights on wgpu: "), "{stderr}");
}

#[test]
fn serve_model_prints_its_url_answers_models_and_stops_on_ctrl_c() {
    let (child, addr) = start_smollm2(&[]);
    let addr = addr.as_str();

    let (status, body) = get(addr, "/v1/models");
    assert!(status.contains(" 200 "), "{status}\n{body}");
    let models: serde_json::Value = serde_json::from_str(&body).expect("the body is JSON");
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "SmolLM2-135M-Instruct.Q4_1");
    let (status, _) = get(addr, "/health");
    assert!(status.contains(" 200 "), "{status}");

    // Ctrl-C: SIGINT, as a terminal sends it.
    let stderr = interrupt(child);
    assert!(stderr.contains("Ctrl-C stops"), "{stderr}");
    // A GGUF is served on its quantised weights, by our own kernels on the CPU.
    assert!(
        stderr.contains("(quantised GGUF weights on native "),
        "{stderr}"
    );
    assert!(stderr.trim_end().ends_with("stopped"), "{stderr}");
    assert!(
        TcpStream::connect(addr).is_err(),
        "nothing listens after the stop"
    );
}

#[test]
fn serve_model_refuses_bad_arguments_with_a_clear_message() {
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let text_file = tmp.path().join("weights.bin");
    std::fs::write(&text_file, "not a model").expect("a file writes");
    let run = |args: &[&str]| {
        let output = Command::new(BIN)
            .args(args)
            .env("ENVACE_HOME", tmp.path())
            .env_remove("RUST_LOG")
            .output()
            .expect("the binary runs");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let missing = tmp.path().join("missing.gguf");
    let (code, stderr) = run(&["serve-model", "--model", &missing.display().to_string()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "missing.gguf: no such file or folder; pass a .gguf file or a Hugging Face model folder"
        ),
        "{stderr}"
    );
    let (code, stderr) = run(&["serve-model", "--model", &text_file.display().to_string()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("unsupported model format"), "{stderr}");
    let (code, stderr) = run(&["serve-model", "--model", "x.gguf", "--addr", "nowhere"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("expected HOST:PORT such as 127.0.0.1:8000"),
        "{stderr}"
    );
    let (code, stderr) = run(&["serve-model", "--model", "x.gguf", "--run", "r"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    let (code, stderr) = run(&["serve-model"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--model <PATH>"), "{stderr}");
    // Beyond loopback without a key, or a key variable that is not set: refused before the
    // model (missing here) is looked at.
    let (code, stderr) = run(&["serve-model", "--model", "x.gguf", "--addr", "0.0.0.0:8000"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("error: address 0.0.0.0:8000: serving beyond this machine needs an API key, or anyone who reaches it can use the model: give one (`--api-key-env NAME`"),
        "{stderr}"
    );
    let (code, stderr) = run(&[
        "serve-model",
        "--model",
        "x.gguf",
        "--api-key-env",
        "ENVACE_TEST_KEY_NOBODY_SETS",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("error: --api-key-env ENVACE_TEST_KEY_NOBODY_SETS: the environment variable ENVACE_TEST_KEY_NOBODY_SETS is not set"),
        "{stderr}"
    );
    let (code, stderr) = run(&["serve-model", "--model", "x.gguf", "--adapter", "llvmpipe"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--adapter picks a wgpu adapter: pass it with --device wgpu"),
        "{stderr}"
    );
    // The adapter is opened before the model loads: a missing one is refused at once, with
    // the backends tried (x.gguf does not exist, and that is not what the error is about).
    let (code, stderr) = run(&[
        "serve-model",
        "--model",
        "x.gguf",
        "--device",
        "wgpu",
        "--adapter",
        "no such adapter",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("no such adapter") && stderr.contains("vulkan"),
        "{stderr}"
    );
    assert!(!stderr.contains("x.gguf"), "{stderr}");
    let (code, stderr) = run(&["serve-model", "--run", "latest"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("does not exist; pass --store FILE"),
        "{stderr}"
    );
}
