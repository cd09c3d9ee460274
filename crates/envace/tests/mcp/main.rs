//! MCP both ways: our MCP server (stdio and streamable HTTP) gives byte-identical results to
//! in-process calls, a killed or hung server masks the episode with the reason, and a
//! third-party npm server is driven as an environment.
//!
//! This binary has no libtest harness: run with `ENVACE_TEST_MCP_SERVE=DOMAIN` it is itself a
//! stdio MCP server (the tests spawn it that way); otherwise it runs every test in turn.
#![allow(clippy::unwrap_used)] // Test code may unwrap: a panic here is the test failing.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use envace::chat::ToolCall;
use envace::config::{Domain, TaskSplit};
use envace::env::functions::FunctionsEnv;
use envace::env::tau2::{DomainKind, Tau2Domain};
use envace::env::{
    EnvFault, Environment, EpisodeScore, ErrorCode, ToolOutcome, ToolSpec, render_outcome,
};
use envace::mcp::{
    EnvFactory, McpEnvironment, McpOptions, McpServer, domain_factory, serve_http, serve_stdio,
};
use envace::tasks::{GenConfig, GenSources, generate, parse_tool_calls};
use serde_json::{Value, json};

fn data_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/benchmarks/tau2-bench");
    assert!(
        root.join("retail/db.json").is_file(),
        "τ²-bench data is missing under {}",
        root.display()
    );
    root
}

/// The functions domain, except that `add` never answers (a hung server).
#[derive(Debug, Clone)]
struct HangingEnv(FunctionsEnv);

impl Environment for HangingEnv {
    fn name(&self) -> &str {
        "hanging"
    }
    fn tools(&self) -> &[ToolSpec] {
        self.0.tools()
    }
    fn reset(&mut self, seed: u64) {
        self.0.reset(seed);
    }
    fn call(&mut self, name: &str, arguments: &Value) -> ToolOutcome {
        if name == "add" {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
        self.0.call(name, arguments)
    }
    fn state_hash(&self) -> String {
        self.0.state_hash()
    }
    fn box_clone(&self) -> Box<dyn Environment> {
        Box::new(self.clone())
    }
}

fn child_serve(mode: &str) {
    let factory = match mode {
        "retail" => domain_factory(Domain::Retail, Some(&data_root())).unwrap(),
        "airline" => domain_factory(Domain::Airline, Some(&data_root().join("airline"))).unwrap(),
        "functions" => domain_factory(Domain::Functions, None).unwrap(),
        "hang" => {
            let env = HangingEnv(FunctionsEnv::new().unwrap());
            EnvFactory::new(move || Box::new(env.clone()))
        }
        other => panic!("unknown serve mode {other}"),
    };
    serve_stdio(&factory).unwrap();
}

fn stdio_server(mode: &str) -> McpServer {
    McpServer::Command {
        program: std::env::current_exe().unwrap().display().to_string(),
        args: Vec::new(),
        env: vec![("ENVACE_TEST_MCP_SERVE".to_owned(), mode.to_owned())],
    }
}

fn sources() -> GenSources {
    GenSources {
        retail: Some(Tau2Domain::load(DomainKind::Retail, data_root().join("retail")).unwrap()),
        airline: Some(Tau2Domain::load(DomainKind::Airline, data_root().join("airline")).unwrap()),
    }
}

/// A scripted trajectory: the oracle calls of generated tasks (every difficulty, writes
/// included) and a few invalid calls, all in one session.
fn script(domain: Domain, sources: &GenSources) -> Vec<ToolCall> {
    let mut calls = Vec::new();
    for difficulty in 1..=5 {
        let config = GenConfig {
            seed: 99,
            split: TaskSplit::Test,
            difficulty,
            n_tasks: 6,
            families: Vec::new(),
        };
        for task in generate(domain, sources, &config).unwrap() {
            for message in &task.oracle {
                calls.extend(
                    parse_tool_calls(&message.content)
                        .into_iter()
                        .map(Result::unwrap),
                );
            }
        }
    }
    calls.push(ToolCall::new("no_such_tool", vec![]));
    let first = calls[0].clone();
    calls.push(ToolCall::new(&first.name, vec![("unexpected", json!(1))]));
    calls
}

fn same_tools(a: &dyn Environment, b: &dyn Environment) {
    let names = |env: &dyn Environment| {
        env.tools()
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    t.description.clone(),
                    t.parameters.clone(),
                    t.mutates_state,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(names(a), names(b));
}

fn compare(
    domain: Domain,
    remote: &mut McpEnvironment,
    local: &mut dyn Environment,
    calls: &[ToolCall],
) -> usize {
    same_tools(remote, local);
    for (idx, call) in calls.iter().enumerate() {
        let want = local.call(&call.name, &call.arguments_value());
        let got = remote.call(&call.name, &call.arguments_value());
        assert_eq!(
            render_outcome(&got),
            render_outcome(&want),
            "{domain:?} call {idx}: {}",
            call.to_block()
        );
        assert_eq!(got.is_failure(), want.is_failure());
        if let (ToolOutcome::Failure(a), ToolOutcome::Failure(b)) = (&got, &want) {
            assert_eq!(a.code, b.code, "{domain:?} call {idx}");
        }
    }
    assert_eq!(remote.fault(), None);
    calls.len()
}

fn local_env(domain: Domain, sources: &GenSources) -> Box<dyn Environment> {
    envace::tasks::fresh_env(domain, sources).unwrap()
}

fn stdio_results_equal_in_process_results(sources: &GenSources) {
    for (domain, mode) in [
        (Domain::Functions, "functions"),
        (Domain::Retail, "retail"),
        (Domain::Airline, "airline"),
    ] {
        let mut remote =
            McpEnvironment::connect(stdio_server(mode), McpOptions::default()).unwrap();
        let calls = script(domain, sources);
        let n = compare(
            domain,
            &mut remote,
            local_env(domain, sources).as_mut(),
            &calls,
        );
        eprintln!("  stdio {mode}: {n} calls byte-identical");
    }
}

fn http_results_equal_in_process_results(sources: &GenSources) {
    for domain in [Domain::Functions, Domain::Retail, Domain::Airline] {
        let shared = match domain {
            Domain::Retail => sources.retail.clone(),
            Domain::Airline => sources.airline.clone(),
            Domain::Functions => None,
        };
        let factory = match shared {
            Some(loaded) => EnvFactory::new(move || Box::new(loaded.env(0))),
            None => domain_factory(Domain::Functions, None).unwrap(),
        };
        let server = serve_http("127.0.0.1:0".parse().unwrap(), &factory).unwrap();
        assert!(server.local_addr().ip().is_loopback());
        let mut remote =
            McpEnvironment::connect(McpServer::Http { url: server.url() }, McpOptions::default())
                .unwrap();
        let calls = script(domain, sources);
        let n = compare(
            domain,
            &mut remote,
            local_env(domain, sources).as_mut(),
            &calls,
        );
        // A second session starts from the initial state again.
        let mut second =
            McpEnvironment::connect(McpServer::Http { url: server.url() }, McpOptions::default())
                .unwrap();
        let n2 = compare(
            domain,
            &mut second,
            local_env(domain, sources).as_mut(),
            &calls,
        );
        assert_eq!(n, n2);
        drop(remote);
        drop(second);
        server.shutdown();
        eprintln!("  http {domain:?}: {n} calls byte-identical, twice (one state per session)");
    }
}

fn a_killed_server_masks_the_episode() {
    let mut env =
        McpEnvironment::connect(stdio_server("functions"), McpOptions::default()).unwrap();
    assert!(!env.call("add", &json!({"a": 1, "b": 2})).is_failure());
    let pid = env.server_pid().unwrap();
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    std::thread::sleep(std::time::Duration::from_millis(200));
    let outcome = env.call("add", &json!({"a": 1, "b": 2}));
    let ToolOutcome::Failure(failure) = &outcome else {
        panic!("a call to a killed server succeeded: {outcome:?}")
    };
    assert_eq!(failure.code, ErrorCode::EnvironmentFault);
    let fault = env.fault().unwrap();
    assert!(matches!(fault, EnvFault::Disconnected { .. }), "{fault:?}");
    match EpisodeScore::new(1.0, &env) {
        EpisodeScore::Masked { reason } => assert!(
            reason
                .to_string()
                .contains("is gone: the connection closed during add"),
            "{reason}"
        ),
        other => panic!("not masked: {other:?}"),
    }
    // Later calls keep failing with the same reason, without touching the transport.
    assert!(env.call("multiply", &json!({"a": 1, "b": 2})).is_failure());
    // Reset reconnects: a fresh server process, no fault.
    env.reset(0);
    assert_eq!(env.fault(), None);
    assert_eq!(
        render_outcome(&env.call("add", &json!({"a": 1, "b": 2}))),
        r#"{"result": 3}"#
    );
}

fn a_hung_server_times_out_with_retries_and_masks_the_episode() {
    let options = McpOptions {
        call_timeout_secs: 0.3,
        max_attempts: 2,
        backoff_initial_ms: 10,
        ..McpOptions::default()
    };
    let mut env = McpEnvironment::connect(stdio_server("hang"), options).unwrap();
    let pid = env.server_pid().unwrap();
    assert!(!env.call("multiply", &json!({"a": 2, "b": 2})).is_failure());
    let start = Instant::now();
    let outcome = env.call("add", &json!({"a": 1, "b": 2}));
    let elapsed = start.elapsed().as_secs_f64();
    assert!(outcome.is_failure());
    assert!(
        (0.6..5.0).contains(&elapsed),
        "two attempts of 0.3 s took {elapsed} s"
    );
    let EpisodeScore::Masked { reason } = EpisodeScore::new(1.0, &env) else {
        panic!("not masked")
    };
    assert!(
        matches!(&reason, EnvFault::Timeout { tool, attempts: 2, .. } if tool == "add"),
        "{reason:?}"
    );
    // The hung server was killed, not left behind.
    let pid = pid.to_string();
    let alive = std::process::Command::new("kill")
        .args(["-0", &pid])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(!alive, "the hung server (pid {pid}) is still running");
}

fn only_loopback_addresses_are_served() {
    let factory = domain_factory(Domain::Functions, None).unwrap();
    let err = serve_http("0.0.0.0:0".parse().unwrap(), &factory).unwrap_err();
    assert_eq!(
        err.to_string(),
        "MCP HTTP server on 0.0.0.0:0: only loopback addresses (127.0.0.1, ::1) are served: the endpoint has no authentication"
    );
}

/// A session ended by the client with `DELETE /mcp` gets 200 (what MCP clients, the Python SDK's
/// among them, take as ended) and is gone afterwards; a DELETE without a session id is refused.
fn a_deleted_session_ends_with_200() {
    let factory = domain_factory(Domain::Functions, None).unwrap();
    let server = serve_http("127.0.0.1:0".parse().unwrap(), &factory).unwrap();
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build(),
    );
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "envace-test", "version": "0"}}
    });
    let post = |body: &serde_json::Value, session: Option<&str>| {
        let mut request = agent
            .post(&server.url())
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-06-18");
        if let Some(session) = session {
            request = request.header("Mcp-Session-Id", session);
        }
        request.send(body.to_string()).unwrap()
    };
    let opened = post(&initialize, None);
    assert_eq!(opened.status().as_u16(), 200);
    let session = opened
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("the server names the session")
        .to_owned();
    let delete = |session: Option<&str>| {
        let mut request = agent
            .delete(&server.url())
            .header("MCP-Protocol-Version", "2025-06-18");
        if let Some(session) = session {
            request = request.header("Mcp-Session-Id", session);
        }
        request.call().unwrap().status().as_u16()
    };
    assert_eq!(delete(Some(&session)), 200, "the session ends");
    let list = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    assert_eq!(
        post(&list, Some(&session)).status().as_u16(),
        404,
        "the ended session is gone"
    );
    assert!(delete(None) >= 400, "a DELETE names its session");
}

fn an_unreachable_server_is_an_error_naming_it() {
    let options = McpOptions {
        connect_timeout_secs: 2.0,
        max_attempts: 2,
        backoff_initial_ms: 10,
        ..McpOptions::default()
    };
    let err = McpEnvironment::connect(
        McpServer::Http {
            url: "http://127.0.0.1:9/mcp".to_owned(),
        },
        options,
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("MCP http://127.0.0.1:9/mcp: ") && text.ends_with("(after 2 attempt(s))"),
        "{text}"
    );
}

/// The pinned third-party server (installed by the project setup).
const NPM_PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";

fn npm_server_everything() -> PathBuf {
    let cache = std::env::var_os("ENVACE_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/envace-cache"));
    let entry =
        cache.join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "the third-party MCP server is not installed: {} is missing. Install it with\n  npm install --prefix \"$ENVACE_CACHE_DIR/npm\" {NPM_PACKAGE}\n(ENVACE_CACHE_DIR defaults to <repo root>/target/envace-cache)",
        entry.display()
    );
    entry
}

fn a_third_party_npm_server_is_an_environment() {
    let entry = npm_server_everything();
    let server = McpServer::Command {
        program: "node".to_owned(),
        args: vec![entry.display().to_string(), "stdio".to_owned()],
        env: Vec::new(),
    };
    let mut env = McpEnvironment::connect(server, McpOptions::default()).unwrap();
    let names: Vec<String> = env.tools().iter().map(|t| t.name.clone()).collect();
    assert!(
        names.iter().any(|n| n == "echo") && names.iter().any(|n| n == "get-sum"),
        "{names:?}"
    );
    assert!(!env.mutates_state("echo"), "echo is annotated read-only");
    assert_eq!(
        render_outcome(&env.call("echo", &json!({"message": "rehearse"}))),
        "Echo: rehearse"
    );
    assert_eq!(
        render_outcome(&env.call("get-sum", &json!({"a": 2, "b": 40}))),
        "The sum of 2 and 40 is 42."
    );
    let invalid = env.call("echo", &json!({"message": 7}));
    let ToolOutcome::Failure(failure) = invalid else {
        panic!("a wrong type passed")
    };
    assert_eq!(failure.code, ErrorCode::InvalidParameters);
    assert!(
        failure.message.starts_with("argument `message` of echo:"),
        "{}",
        failure.message
    );
    assert_eq!(env.fault(), None);
    eprintln!("  {NPM_PACKAGE}: {} tools listed", names.len());
}

/// A named test of this harness-less binary.
type NamedTest<'a> = (&'a str, Box<dyn Fn() + 'a>);

fn main() {
    if let Ok(mode) = std::env::var("ENVACE_TEST_MCP_SERVE") {
        child_serve(&mode);
        return;
    }
    let start = Instant::now();
    let loaded = sources();
    let tests: Vec<NamedTest<'_>> = vec![
        (
            "stdio_results_equal_in_process_results",
            Box::new(|| stdio_results_equal_in_process_results(&loaded)),
        ),
        (
            "http_results_equal_in_process_results",
            Box::new(|| http_results_equal_in_process_results(&loaded)),
        ),
        (
            "a_killed_server_masks_the_episode",
            Box::new(a_killed_server_masks_the_episode),
        ),
        (
            "a_hung_server_times_out_with_retries_and_masks_the_episode",
            Box::new(a_hung_server_times_out_with_retries_and_masks_the_episode),
        ),
        (
            "an_unreachable_server_is_an_error_naming_it",
            Box::new(an_unreachable_server_is_an_error_naming_it),
        ),
        (
            "a_deleted_session_ends_with_200",
            Box::new(a_deleted_session_ends_with_200),
        ),
        (
            "only_loopback_addresses_are_served",
            Box::new(only_loopback_addresses_are_served),
        ),
        (
            "a_third_party_npm_server_is_an_environment",
            Box::new(a_third_party_npm_server_is_an_environment),
        ),
    ];
    // `--list` (IDEs, nextest) gets the names in libtest's format and runs nothing.
    if std::env::args().any(|a| a == "--list") {
        for (name, _) in &tests {
            println!("{name}: test");
        }
        return;
    }
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let mut n_run = 0;
    for (name, test) in &tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let t = Instant::now();
        test();
        n_run += 1;
        eprintln!("test {name} ... ok ({:.2} s)", t.elapsed().as_secs_f64());
    }
    eprintln!(
        "{n_run} MCP tests passed in {:.2} s",
        start.elapsed().as_secs_f64()
    );
}
