//! The load part of `cargo xtask bench serve`: 32 concurrent clients send a bounded mix of valid
//! and malformed requests to `envace serve-model` for a fixed time while one more client sends
//! its body a byte a second; requests/s, latency percentiles, batch sizes and memory, against
//! one client at a time on the same server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};

/// Concurrent clients.
pub const N_CLIENTS: usize = 32;
/// How long the clients send, in seconds.
pub const LOAD_SECS: u64 = 50;
/// How long one client alone sends before the load, in seconds (the baseline).
pub const ALONE_SECS: u64 = 12;
/// New tokens a valid request asks for.
pub const MAX_TOKENS: u64 = 16;
/// One request in `MALFORMED_EVERY` of each client is malformed.
const MALFORMED_EVERY: usize = 4;
/// The slow client's body: a valid request, sent one byte a second (45 s, inside the load and
/// the server's 60 s allowance for a body).
const SLOW_BODY: &str = r#"{"messages":[{"role":"user","content":"hi"}]}"#;

/// A malformed request: its name, the raw bytes, and the status it must get.
fn malformed(kind: usize, host: &str) -> (&'static str, Vec<u8>, u16) {
    let post = |path: &str, body: &str| -> Vec<u8> {
        format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    match kind % 6 {
        0 => (
            "invalid JSON",
            post("/v1/chat/completions", r#"{"messages": [{"role": "#),
            400,
        ),
        1 => (
            "messages not a list",
            post("/v1/chat/completions", r#"{"messages": "hi"}"#),
            400,
        ),
        2 => (
            "temperature not a number",
            post(
                "/v1/chat/completions",
                r#"{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}"#,
            ),
            400,
        ),
        3 => (
            "unknown route",
            post("/v1/embeddings", r#"{"input": "hi"}"#),
            404,
        ),
        4 => (
            "wrong method",
            format!(
                "GET /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            )
            .into_bytes(),
            405,
        ),
        _ => ("not HTTP", b"HELLO THERE\r\n\r\n".to_vec(), 400),
    }
}

/// A valid greedy request of [`MAX_TOKENS`], its prompt varied by `k`.
fn valid(k: usize, host: &str) -> Vec<u8> {
    let body = json!({
        "messages": [{"role": "user", "content": format!("Name one thing about the number {k}.")}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    })
    .to_string();
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sends `raw` on a fresh connection and reads the whole answer: its status (0 when the
/// server closed without one) or the transport error.
fn exchange(host: &str, raw: &[u8]) -> std::result::Result<(u16, String), String> {
    let mut stream = TcpStream::connect(host).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(600)))
        .map_err(|e| e.to_string())?;
    stream.write_all(raw).map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    Ok(parse_answer(&answer))
}

fn parse_answer(answer: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// What one request saw.
struct Outcome {
    valid: bool,
    kind: &'static str,
    expected: u16,
    status: std::result::Result<u16, String>,
    secs: f64,
    /// When it ended, in seconds from the start of the load.
    ended: f64,
}

/// Resident and peak memory of process `pid`, in MB (`/proc/PID/status`).
fn memory_mb(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Valid requests from one client, one after another, for `secs`: requests per second.
fn one_client(host: &str, secs: u64) -> Result<f64> {
    let start = Instant::now();
    let mut n = 0usize;
    while start.elapsed() < Duration::from_secs(secs) {
        let (status, text) = exchange(host, &valid(n, host)).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(status == 200, "a lone valid request got {status}: {text}");
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// The slow client: headers at once, then the body a byte a second. Its status, seconds, and
/// when its body started and ended (seconds from the start of the load).
fn slow_client(host: &str, load_start: Instant) -> Value {
    let run = || -> std::result::Result<(u16, f64, f64, f64), String> {
        let mut stream = TcpStream::connect(host).map_err(|e| format!("connect: {e}"))?;
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            SLOW_BODY.len()
        );
        stream
            .write_all(head.as_bytes())
            .map_err(|e| format!("send: {e}"))?;
        let started = load_start.elapsed().as_secs_f64();
        let begun = Instant::now();
        for byte in SLOW_BODY.as_bytes() {
            std::thread::sleep(Duration::from_secs(1));
            stream
                .write_all(std::slice::from_ref(byte))
                .map_err(|e| format!("send: {e}"))?;
        }
        let body_done = load_start.elapsed().as_secs_f64();
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .map_err(|e| format!("read: {e}"))?;
        Ok((
            parse_answer(&answer).0,
            begun.elapsed().as_secs_f64(),
            started,
            body_done,
        ))
    };
    match run() {
        Ok((status, secs, started, body_done)) => json!({
            "status": status,
            "secs": secs,
            "body_bytes": SLOW_BODY.len(),
            "body_started_at": started,
            "body_done_at": body_done,
        }),
        Err(err) => json!({"error": err}),
    }
}

/// Runs the load against the server at `host` (process `pid`): figures, and whether every
/// valid request succeeded, every malformed one got its 4xx and the slow client its answer.
pub fn measure(host: &str, pid: u32) -> Result<(Value, bool)> {
    // Warm-up, then the baseline: one client at a time.
    exchange(host, &valid(0, host)).map_err(anyhow::Error::msg)?;
    eprintln!("xtask: one client, {ALONE_SECS} s");
    let alone_rps = one_client(host, ALONE_SECS)?;
    let health = || -> Result<Value> {
        let raw = format!("GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let (_, text) = exchange(host, raw.as_bytes()).map_err(anyhow::Error::msg)?;
        let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
        serde_json::from_str(body).with_context(|| format!("/health answered {text:?}"))
    };
    let before = health()?;
    let (rss_start, _) = memory_mb(pid);

    eprintln!("xtask: {N_CLIENTS} clients and a slow one, {LOAD_SECS} s");
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let slow = {
        let host = host.to_owned();
        std::thread::spawn(move || slow_client(&host, start))
    };
    let clients: Vec<_> = (0..N_CLIENTS)
        .map(|client| {
            let host = host.to_owned();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut outcomes = Vec::new();
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let is_valid = !(i + client).is_multiple_of(MALFORMED_EVERY);
                    let (kind, raw, expected) = if is_valid {
                        ("valid", valid(client * 1000 + i, &host), 200)
                    } else {
                        malformed(i / MALFORMED_EVERY + client, &host)
                    };
                    let t0 = Instant::now();
                    let status = exchange(&host, &raw).map(|(status, _)| status);
                    outcomes.push(Outcome {
                        valid: is_valid,
                        kind,
                        expected,
                        status,
                        secs: t0.elapsed().as_secs_f64(),
                        ended: start.elapsed().as_secs_f64(),
                    });
                    i += 1;
                }
                outcomes
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(LOAD_SECS));
    stop.store(true, Ordering::Relaxed);
    let mut outcomes = Vec::new();
    for client in clients {
        outcomes.extend(
            client
                .join()
                .map_err(|_| anyhow::anyhow!("a client panicked"))?,
        );
    }
    let window = start.elapsed().as_secs_f64();
    let slow = slow
        .join()
        .map_err(|_| anyhow::anyhow!("the slow client panicked"))?;
    let (rss_end, rss_peak) = memory_mb(pid);
    let after = health()?;

    let mut latencies: Vec<f64> = outcomes
        .iter()
        .filter(|o| o.valid && o.status.as_ref().is_ok_and(|s| *s == 200))
        .map(|o| o.secs)
        .collect();
    latencies.sort_by(f64::total_cmp);
    let n_valid = outcomes.iter().filter(|o| o.valid).count();
    let n_malformed = outcomes.len() - n_valid;
    let wrong: Vec<String> = outcomes
        .iter()
        .filter(|o| o.status.as_ref().map_or(true, |s| *s != o.expected))
        .take(10)
        .map(|o| format!("{}: expected {}, got {:?}", o.kind, o.expected, o.status))
        .collect();
    let n_wrong = outcomes
        .iter()
        .filter(|o| o.status.as_ref().map_or(true, |s| *s != o.expected))
        .count();
    let valid_failed = outcomes
        .iter()
        .filter(|o| o.valid && o.status.as_ref().map_or(true, |s| *s != 200))
        .count();
    let stat = |v: &Value, key: &str| v["stats"][key].as_u64().unwrap_or(0);
    let n_batches = stat(&after, "n_batches") - stat(&before, "n_batches");
    let n_generated = stat(&after, "n_requests") - stat(&before, "n_requests");
    let slow_started = slow["body_started_at"].as_f64().unwrap_or(0.0);
    let slow_done = slow["body_done_at"].as_f64().unwrap_or(0.0);
    let served_meanwhile = outcomes
        .iter()
        .filter(|o| o.valid && o.ended > slow_started && o.ended < slow_done)
        .count();
    let rps = latencies.len() as f64 / window;
    let ok = valid_failed == 0 && n_wrong == 0 && slow["status"] == 200;
    let figures = json!({
        "clients": N_CLIENTS,
        "window_secs": window,
        "valid_max_tokens": MAX_TOKENS,
        "malformed_share": format!("1 in {MALFORMED_EVERY}"),
        "requests_valid": n_valid,
        "requests_malformed": n_malformed,
        "valid_failed": valid_failed,
        "answers_not_as_expected": n_wrong,
        "answers_not_as_expected_first": wrong,
        "valid_requests_per_sec": rps,
        "one_client_valid_requests_per_sec": alone_rps,
        "latency_p50_secs": percentile(&latencies, 0.5),
        "latency_p99_secs": percentile(&latencies, 0.99),
        "latency_max_secs": latencies.last().copied().unwrap_or(0.0),
        "batches": n_batches,
        "mean_batch": if n_batches == 0 { 0.0 } else { n_generated as f64 / n_batches as f64 },
        "max_batch_seen": stat(&after, "max_batch_seen"),
        "rss_mb_start": rss_start,
        "rss_mb_end": rss_end,
        "rss_mb_peak": rss_peak,
        "slow_client": slow,
        "valid_answered_while_slow_body_in_flight": served_meanwhile,
    });
    Ok((figures, ok))
}
