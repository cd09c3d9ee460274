//! `cargo xtask bench serve`: how fast `envace serve-model` answers on the SmolLM2 GGUF over
//! HTTP, on its quantised weights and with `--dequantize`, beside the in-process quantised
//! decode of the same file (`model_bench --only q4-decode`) in the same run: the server has to
//! run the fastest path, not just reach it from a benchmark. Then the same server under load
//! (`bench_serve_load.rs`): many clients, malformed requests among them, and a slow one.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::bench::{
    bench_threads, gguf_cache_dir, load_avg, number, ratio, run_json, smollm2_gguf,
};

/// New tokens per timed request (and per in-process decode).
const N_NEW: u64 = 128;
/// Timed requests per server.
const REPEATS: usize = 3;
/// The request: one that SmolLM2 answers at length, so that few replies stop before `N_NEW`.
const PROMPT: &str = "Write a short story about a lighthouse keeper.";
/// Target: the served quantised rate against the in-process one (HTTP, the chat template's
/// longer prompt and the server's batching loop cost a little; the f32 path runs at about
/// half the quantised rate, so a server on it misses this by far).
const TARGET_SERVED_VS_IN_PROCESS: f64 = 0.8;

/// A running server, stopped when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `envace serve-model` on `gguf` on a free port and waits for its startup line.
fn start_server(envace: &Path, gguf: &Path, dequantize: bool, n_threads: usize) -> Result<Server> {
    start_server_with(envace, gguf, dequantize, n_threads, &[])
}

/// [`start_server`] with more `serve-model` arguments.
fn start_server_with(
    envace: &Path,
    gguf: &Path,
    dequantize: bool,
    n_threads: usize,
    extra: &[&str],
) -> Result<Server> {
    let mut command = Command::new(envace);
    command
        .args(["serve-model", "--model"])
        .arg(gguf)
        .args(["--addr", "127.0.0.1:0"])
        .env("RAYON_NUM_THREADS", n_threads.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if dequantize {
        command.arg("--dequantize");
    }
    command.args(extra);
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start {}", envace.display()))?;
    let stderr = child.stderr.take().context("the server's stderr")?;
    let (send, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let mut server = Server {
        child,
        url: String::new(),
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    while server.url.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                // "loaded in 0.4 s (…); POST http://ADDR/v1/chat/completions, …"
                if let Some(url) = line
                    .split_whitespace()
                    .find(|w| w.ends_with("/chat/completions,"))
                {
                    server.url = url.trim_end_matches(',').to_owned();
                }
                seen.push(line);
            }
            Err(_) => bail!(
                "serve-model did not say it was ready within 120 s; it wrote:\n{}",
                seen.join("\n")
            ),
        }
    }
    eprintln!("xtask: {}", seen.last().map_or("", String::as_str));
    Ok(server)
}

/// One greedy request of `max_tokens`: (completion tokens, seconds).
fn request(agent: &ureq::Agent, url: &str, max_tokens: u64) -> Result<(u64, f64)> {
    let body = json!({
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
    });
    let start = Instant::now();
    let text = agent
        .post(url)
        .send_json(&body)
        .with_context(|| format!("POST {url}"))?
        .into_body()
        .read_to_string()
        .with_context(|| format!("reading the reply of {url}"))?;
    let secs = start.elapsed().as_secs_f64();
    let reply: Value =
        serde_json::from_str(&text).with_context(|| format!("{url} answered {text:?}"))?;
    let tokens = reply["usage"]["completion_tokens"]
        .as_u64()
        .with_context(|| format!("{url} answered without usage.completion_tokens: {text}"))?;
    Ok((tokens, secs))
}

/// A warm-up request, then [`REPEATS`] timed ones on a fresh server; its fastest request
/// counts.
fn measure_server(envace: &Path, gguf: &Path, dequantize: bool, n_threads: usize) -> Result<Value> {
    let server = start_server(envace, gguf, dequantize, n_threads)?;
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(600)))
            .build(),
    );
    request(&agent, &server.url, 8)?;
    let mut runs = Vec::new();
    for _ in 0..REPEATS {
        let (tokens, secs) = request(&agent, &server.url, N_NEW)?;
        runs.push(json!({
            "completion_tokens": tokens,
            "secs": secs,
            "tokens_per_sec": tokens as f64 / secs.max(1e-9),
        }));
    }
    let best = runs
        .iter()
        .map(|run| run["tokens_per_sec"].as_f64().unwrap_or(0.0))
        .fold(0.0, f64::max);
    drop(server);
    Ok(json!({
        "weights": if dequantize { "dequantised f32" } else { "quantised Q4_1" },
        "tokens_per_sec": best,
        "runs": runs,
    }))
}

/// The benchmark.
pub fn serve(root: &Path) -> Result<()> {
    let n_threads = bench_threads()?;
    let gguf = std::fs::canonicalize(smollm2_gguf()?)
        .context("cannot resolve the path of the SmolLM2 GGUF")?;
    let load_start = load_avg();
    let envace = crate::bench_runs::release_cli(root, crate::bench::Simd::Native)?;
    let model_bench =
        crate::bench_runs::release_example(root, "model_bench", crate::bench::Simd::Native)?;

    eprintln!("xtask: in-process quantised decoding ({n_threads} threads)");
    let in_process = run_json(
        Command::new(&model_bench)
            .args(["--only", "q4-decode", "--decode-tokens", &N_NEW.to_string()])
            .env("RAYON_NUM_THREADS", n_threads.to_string())
            .env("ENVACE_CACHE_DIR", gguf_cache_dir(&gguf)?),
        &format!("{} --only q4-decode", model_bench.display()),
    )?;
    let in_process_tps = number(&in_process, "tokens_per_sec")?;
    // Quantised, dequantised, quantised again: a drift in the machine's load shows as two
    // different quantised figures.
    let mut servers = Vec::new();
    for dequantize in [false, true, false] {
        eprintln!(
            "xtask: serve-model{} ({n_threads} threads)",
            if dequantize { " --dequantize" } else { "" }
        );
        servers.push(measure_server(&envace, &gguf, dequantize, n_threads)?);
    }
    eprintln!("xtask: serve-model under load ({n_threads} threads)");
    // The slow client's request sets no max_tokens: it gets as many as the valid ones ask.
    let max_tokens = crate::bench_serve_load::MAX_TOKENS.to_string();
    let server = start_server_with(
        &envace,
        &gguf,
        false,
        n_threads,
        &["--default-max-tokens", &max_tokens],
    )?;
    let host = server
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let (load, load_ok) = crate::bench_serve_load::measure(&host, server.child.id())?;
    drop(server);
    let served = |idx: usize| servers[idx]["tokens_per_sec"].as_f64().unwrap_or(0.0);
    let served_q4 = served(0).max(served(2));
    let served_f32 = served(1);
    let mut in_process = in_process;
    if let Value::Object(map) = &mut in_process {
        map.remove("tokens");
    }
    let result = json!({
        "bench": "serve",
        "figures": {
            "cpu": crate::bench_science::cpu(),
            "n_threads": n_threads,
            "load_avg_start": load_start,
            "load_avg_end": load_avg(),
            "work": format!(
                "SmolLM2-135M-Instruct Q4_1: serve-model answers {PROMPT:?} greedily with up to \
                 {N_NEW} new tokens over HTTP (a warm-up request, then {REPEATS} timed; the \
                 fastest counts; completion tokens / wall time, prompt pass and HTTP included), \
                 on the quantised weights, dequantised, and quantised again; beside it the \
                 in-process quantised decode of {N_NEW} tokens after a 32-token prompt"
            ),
            "gguf": gguf,
            "served_q4_1_tokens_per_sec": served_q4,
            "served_f32_tokens_per_sec": served_f32,
            "in_process_q4_1_tokens_per_sec": in_process_tps,
            "servers": servers,
            "in_process": in_process,
            "load": load,
        },
        "ratios": {
            "served_q4_1_vs_in_process_q4_1":
                ratio(served_q4, in_process_tps, TARGET_SERVED_VS_IN_PROCESS),
            "served_q4_1_vs_served_f32": ratio(served_q4, served_f32, 1.5),
            // Many clients at once must not answer fewer valid requests per second than one
            // client at a time on the same server.
            "load_vs_one_client": ratio(
                load["valid_requests_per_sec"].as_f64().unwrap_or(0.0),
                load["one_client_valid_requests_per_sec"].as_f64().unwrap_or(0.0),
                1.0,
            ),
        },
    });
    crate::bench_runs::write_result(root, "serve", &result)?;
    if !load_ok {
        bail!(
            "under load, a valid request failed, a malformed one got another answer than its \
             4xx, or the slow client got no answer: see figures.load in target/bench/serve.json"
        );
    }
    Ok(())
}
