//! MCP both ways (rmcp 3.11): any built-in domain served as an MCP server, and any MCP server
//! used as an [`Environment`].
//!
//! # Serving
//!
//! [`serve_stdio`] serves one environment over stdin/stdout until the client closes it;
//! [`serve_http`] serves streamable HTTP on a loopback address (others are refused) from a background
//! thread, every MCP session with its own fresh environment. `tools/list` gives the domain's
//! tools (schema and description; `readOnlyHint` is set for tools that cannot change the
//! state), `tools/call` runs a tool: the text content is exactly [`render_outcome`] of the
//! outcome; a failure is an `isError` result whose structured content is `{"code", "message"}`,
//! and an object result is also given as structured content.
//!
//! # Using an MCP server
//!
//! [`McpEnvironment`] connects to a server ([`McpServer::Command`] spawns it and talks over its
//! stdio, [`McpServer::Http`] is a streamable-HTTP URL). It validates arguments against the
//! listed schemas exactly as built-in environments do, then calls the tool with a timeout.
//! Transport failures and timeouts of read-only tools are retried with exponential backoff; a
//! state-changing call is never retried (it may have been applied). When the server cannot
//! answer truthfully (it crashed, hung past every attempt, or broke the protocol) the call
//! returns an `ENVIRONMENT_FAULT` failure and [`Environment::fault`] reports an [`EnvFault`]
//! from then on: the rollout turns the episode into [`crate::env::EpisodeScore::Masked`] with the reason,
//! never a zero reward.
//!
//! A server that does not answer `initialize` (it says nothing, writes lines that are not
//! JSON-RPC, or floods a line longer than [`MAX_MESSAGE_BYTES`], which is dropped as it
//! arrives rather than held) fails to connect when `connect_timeout_secs` runs out; the error
//! names the step it was waiting for and what a spawned server wrote on its stdout instead.
//!
//! The remote state is opaque: [`McpEnvironment::state_hash`] hashes the calls made and the
//! responses received, `reset` and `box_clone` open a new session (the server's initial state
//! for servers that keep state per session), not a copy of the current state.
//!
//! Calls block on a runtime owned by the environment: do not call them from inside an async
//! task.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{
    StreamableHttpClientTransport, StreamableHttpServerConfig, StreamableHttpService, Transport,
};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceError, ServiceExt};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::config::{Domain, ExperimentConfig};
use crate::env::functions::FunctionsEnv;
use crate::env::tau2::{DomainKind, Tau2Domain};
use crate::env::{
    EnvFault, Environment, ErrorCode, ToolFailure, ToolOutcome, ToolSet, ToolSpec, render_outcome,
};
use crate::error::{Error, Result};
use crate::tasks::GenSources;

/// The real environments of a job's episodes: the built-in domain, or the MCP server that
/// `[[env.mcp_servers]]` names for it, one new connection per episode (so every episode starts
/// from the server's initial state).
#[derive(Debug, Clone, Default)]
pub struct RealEnvs {
    servers: Vec<(Domain, McpServer, McpOptions)>,
}

impl RealEnvs {
    /// Checks the experiment's servers: a stdio command must be confirmed (see
    /// [`crate::trust`]; unconfirmed ones fail before anything runs), and each server is
    /// reached once and must offer every tool of its built-in domain.
    pub fn open(config: &ExperimentConfig, sources: &GenSources) -> Result<Self> {
        if config.env.mcp_servers.is_empty() {
            return Ok(RealEnvs::default());
        }
        crate::trust::check_default(config)?;
        let mut servers = Vec::with_capacity(config.env.mcp_servers.len());
        for (idx, entry) in config.env.mcp_servers.iter().enumerate() {
            let server = match (McpServer::from_argv(&entry.command), &entry.url) {
                (Some(server), _) => server,
                (None, Some(url)) => McpServer::Http { url: url.clone() },
                (None, None) => {
                    return Err(Error::Mcp {
                        server: format!("env.mcp_servers[{idx}]"),
                        message: "names neither a command nor a url".to_owned(),
                    });
                }
            };
            let options = McpOptions {
                connect_timeout_secs: entry.timeout_secs,
                call_timeout_secs: entry.timeout_secs,
                ..McpOptions::default()
            };
            let remote =
                McpEnvironment::connect(server.clone(), options).map_err(|err| Error::Mcp {
                    server: format!("env.mcp_servers[{idx}] ({server})"),
                    message: err.to_string(),
                })?;
            let builtin = crate::tasks::fresh_env(entry.domain, sources)?;
            let missing: Vec<&str> = builtin
                .tools()
                .iter()
                .map(|spec| spec.name.as_str())
                .filter(|name| remote.tools().iter().all(|t| t.name != *name))
                .collect();
            if !missing.is_empty() {
                return Err(Error::Mcp {
                    server: format!("env.mcp_servers[{idx}] ({server})"),
                    message: format!(
                        "does not offer these tools of the {:?} domain: {}",
                        entry.domain,
                        missing.join(", ")
                    ),
                });
            }
            servers.push((entry.domain, server, options));
        }
        Ok(RealEnvs { servers })
    }

    /// A fresh real environment of `domain` for one episode.
    pub fn make(&self, domain: Domain, sources: &GenSources) -> Result<Box<dyn Environment>> {
        match self.servers.iter().find(|(d, _, _)| *d == domain) {
            Some((_, server, options)) => {
                Ok(Box::new(McpEnvironment::connect(server.clone(), *options)?))
            }
            None => crate::tasks::fresh_env(domain, sources),
        }
    }

    /// Whether any domain is answered by an MCP server.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

/// Makes a fresh environment (one per MCP session).
#[derive(Clone)]
pub struct EnvFactory(Arc<dyn Fn() -> Box<dyn Environment> + Send + Sync>);

impl fmt::Debug for EnvFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EnvFactory")
    }
}

impl EnvFactory {
    /// A factory from a closure.
    pub fn new(make: impl Fn() -> Box<dyn Environment> + Send + Sync + 'static) -> Self {
        EnvFactory(Arc::new(make))
    }

    /// A fresh environment.
    pub fn make(&self) -> Box<dyn Environment> {
        (self.0)()
    }
}

/// A factory for a built-in domain. `data_dir` is the τ²-bench domain folder (holding
/// `db.json`) or the folder above it (holding `retail/` and `airline/`); the functions domain
/// needs none.
pub fn domain_factory(domain: Domain, data_dir: Option<&Path>) -> Result<EnvFactory> {
    let kind = match domain {
        Domain::Functions => {
            let env = FunctionsEnv::new()?;
            return Ok(EnvFactory::new(move || Box::new(env.clone())));
        }
        Domain::Retail => DomainKind::Retail,
        Domain::Airline => DomainKind::Airline,
    };
    let dir = data_dir.ok_or_else(|| Error::Mcp {
        server: format!("built-in {}", kind.as_str()),
        message: "serving a τ²-bench domain needs its data folder (--data DIR)".to_owned(),
    })?;
    let dir = if dir.join("db.json").is_file() {
        dir.to_path_buf()
    } else {
        dir.join(kind.as_str())
    };
    let loaded = Tau2Domain::load(kind, dir)?;
    Ok(EnvFactory::new(move || Box::new(loaded.env(0))))
}

/// The MCP tool of a spec.
fn mcp_tool(spec: &ToolSpec) -> Tool {
    let schema = match &spec.parameters {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    Tool::new(spec.name.clone(), spec.description.clone(), schema)
        .with_annotations(ToolAnnotations::new().read_only(!spec.mutates_state))
}

/// One MCP session's server: its own environment.
#[derive(Clone)]
struct EnvServer {
    env: Arc<Mutex<Box<dyn Environment>>>,
    tools: Arc<Vec<Tool>>,
}

impl EnvServer {
    fn new(env: Box<dyn Environment>) -> Self {
        let tools = env.tools().iter().map(mcp_tool).collect();
        EnvServer {
            env: Arc::new(Mutex::new(env)),
            tools: Arc::new(tools),
        }
    }

    fn run(&self, name: &str, arguments: Option<Map<String, Value>>) -> CallToolResult {
        let arguments = Value::Object(arguments.unwrap_or_default());
        let outcome = match self.env.lock() {
            Ok(mut env) => env.call(name, &arguments),
            Err(_) => ToolOutcome::Failure(ToolFailure::new(
                ErrorCode::EnvironmentFault,
                "the environment panicked in an earlier call",
            )),
        };
        let text = render_outcome(&outcome);
        let mut result = match &outcome {
            ToolOutcome::Success(_) => CallToolResult::success(vec![ContentBlock::text(text)]),
            ToolOutcome::Failure(_) => CallToolResult::error(vec![ContentBlock::text(text)]),
        };
        result.structured_content = match &outcome {
            ToolOutcome::Success(value @ Value::Object(_)) => Some(value.clone()),
            ToolOutcome::Success(_) => None,
            ToolOutcome::Failure(_) => Some(outcome.to_json()),
        };
        result
    }
}

impl ServerHandler for EnvServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        Ok(self.run(&request.name, request.arguments).into())
    }
}

fn runtime(what: &str) -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|err| Error::Mcp {
            server: what.to_owned(),
            message: format!("cannot start the async runtime: {err}"),
        })
}

/// Serves one fresh environment over stdin/stdout; returns when the client disconnects.
pub fn serve_stdio(factory: &EnvFactory) -> Result<()> {
    let server = EnvServer::new(factory.make());
    let rt = runtime("stdio server")?;
    rt.block_on(async move {
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|err| Error::Mcp {
                server: "stdio server".to_owned(),
                message: format!("initialisation failed: {err}"),
            })?;
        running.waiting().await.map_err(|err| Error::Mcp {
            server: "stdio server".to_owned(),
            message: format!("stopped abnormally: {err}"),
        })?;
        Ok(())
    })
}

/// A running streamable-HTTP server; stops on [`HttpServer::shutdown`] or when dropped.
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpServer {
    /// The address it listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP endpoint URL, `http://ADDR/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Stops accepting and waits for the server thread.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    /// Blocks until the server stops (it runs until shut down: this is for `serve-env`).
    pub fn wait(mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    fn stop_now(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Serves streamable HTTP at `addr` (endpoint `/mcp`), each session with a fresh environment.
pub fn serve_http(addr: SocketAddr, factory: &EnvFactory) -> Result<HttpServer> {
    let what = format!("HTTP server on {addr}");
    if !addr.ip().is_loopback() {
        return Err(Error::Mcp {
            server: what,
            message: "only loopback addresses (127.0.0.1, ::1) are served: the endpoint has no authentication".to_owned(),
        });
    }
    let listener = std::net::TcpListener::bind(addr).map_err(|err| Error::Mcp {
        server: what.clone(),
        message: format!("cannot listen: {err}"),
    })?;
    let local = listener.local_addr().map_err(|err| Error::Mcp {
        server: what.clone(),
        message: err.to_string(),
    })?;
    listener.set_nonblocking(true).map_err(|err| Error::Mcp {
        server: what.clone(),
        message: err.to_string(),
    })?;
    let rt = runtime(&what)?;
    let factory = factory.clone();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        rt.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            let config = StreamableHttpServerConfig::default();
            let cancel = config.cancellation_token.clone();
            let service: StreamableHttpService<EnvServer, LocalSessionManager> =
                StreamableHttpService::new(
                    move || Ok(EnvServer::new(factory.make())),
                    Default::default(),
                    config,
                );
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let mcp = service.clone();
                        let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                            let mcp = mcp.clone();
                            async move {
                                let ends_session = request.method() == hyper::Method::DELETE;
                                let mut response = mcp.handle(request).await;
                                // rmcp answers a session's DELETE with 202; the MCP clients
                                // (the Python SDK's among them) take 200 or 204 as "ended" and
                                // log anything else as a failed termination.
                                if ends_session && response.status() == hyper::StatusCode::ACCEPTED {
                                    *response.status_mut() = hyper::StatusCode::OK;
                                }
                                Ok::<_, std::convert::Infallible>(response)
                            }
                        });
                        tokio::spawn(async move {
                            let io = hyper_util::rt::TokioIo::new(stream);
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(io, service)
                                .await;
                        });
                    }
                }
            }
            cancel.cancel();
        });
        rt.shutdown_timeout(Duration::from_secs(1));
    });
    Ok(HttpServer {
        addr: local,
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// Where an MCP server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpServer {
    /// A command to spawn, spoken to over its stdin/stdout.
    Command {
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables.
        env: Vec<(String, String)>,
    },
    /// A streamable-HTTP endpoint URL, e.g. `http://127.0.0.1:8931/mcp`.
    Http {
        /// The URL.
        url: String,
    },
}

impl McpServer {
    /// The command `argv` (program first) as a server spawned with no extra environment, or
    /// `None` when `argv` is empty.
    pub fn from_argv(argv: &[String]) -> Option<McpServer> {
        let (program, args) = argv.split_first()?;
        Some(McpServer::Command {
            program: program.clone(),
            args: args.to_vec(),
            env: Vec::new(),
        })
    }
}

impl fmt::Display for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McpServer::Command { program, args, .. } => {
                write!(f, "`{program}")?;
                for arg in args {
                    write!(f, " {arg}")?;
                }
                f.write_str("`")
            }
            McpServer::Http { url } => f.write_str(url),
        }
    }
}

/// Timeouts, retries and backoff of an [`McpEnvironment`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct McpOptions {
    /// Connecting: spawning or reaching the server, `initialize` and `tools/list`.
    pub connect_timeout_secs: f64,
    /// One `tools/call`.
    pub call_timeout_secs: f64,
    /// Attempts of a connection or of a read-only call (at least 1).
    pub max_attempts: u32,
    /// Wait before the second attempt; doubles with each further one.
    pub backoff_initial_ms: u64,
}

impl Default for McpOptions {
    fn default() -> Self {
        McpOptions {
            connect_timeout_secs: 30.0,
            call_timeout_secs: 30.0,
            max_attempts: 3,
            backoff_initial_ms: 200,
        }
    }
}

type Client = RunningService<RoleClient, ()>;

/// An MCP server used as an [`Environment`] (see the module doc).
pub struct McpEnvironment {
    name: String,
    server: McpServer,
    options: McpOptions,
    runtime: Arc<tokio::runtime::Runtime>,
    client: Option<Client>,
    pid: Option<u32>,
    tools: Arc<ToolSet>,
    fault: Option<EnvFault>,
    log: Sha256,
}

impl fmt::Debug for McpEnvironment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpEnvironment")
            .field("server", &self.server.to_string())
            .field("tools", &self.tools)
            .field("fault", &self.fault)
            .finish_non_exhaustive()
    }
}

fn duration(secs: f64) -> Duration {
    Duration::from_secs_f64(secs.max(0.001))
}

/// Most bytes of one message (one line) a server spawned as a command may write: a longer line
/// is dropped as it arrives, never held whole (rmcp's own limit, which is also its streamable
/// HTTP client's cap on one event). A server that floods its stdout therefore costs the client
/// at most this much memory, and a server that writes nothing but such lines, or lines that are
/// not JSON-RPC, is one that never answers: the connect or call timeout ends the wait, and the
/// error says what it wrote instead ([`StdoutLog`]).
pub const MAX_MESSAGE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// Most characters of a server's first line quoted in an error.
const FIRST_LINE_CHARS: usize = 60;

/// What a server spawned as a command has written on its stdout, counted as it is read, so that
/// a server that never answers `initialize` can be told apart from one that answers something
/// else: nothing at all, lines that are not JSON-RPC (rmcp skips those), or lines longer than
/// [`MAX_MESSAGE_BYTES`] (rmcp drops those).
#[derive(Debug, Default)]
struct StdoutLog {
    bytes: u64,
    /// Lines ended by a newline.
    lines: u64,
    /// The length of the line being read.
    current: u64,
    longest: u64,
    /// The first line's first bytes.
    first: Vec<u8>,
    first_ended: bool,
}

impl StdoutLog {
    fn see(&mut self, data: &[u8]) {
        self.bytes += data.len() as u64;
        for part in data.split_inclusive(|b| *b == b'\n') {
            let ended = part.ends_with(b"\n");
            let text = if ended { &part[..part.len() - 1] } else { part };
            if !self.first_ended {
                let room = (FIRST_LINE_CHARS * 4 + 4).saturating_sub(self.first.len());
                self.first.extend_from_slice(&text[..text.len().min(room)]);
                self.first_ended = ended;
            }
            self.current += text.len() as u64;
            if ended {
                self.lines += 1;
                self.longest = self.longest.max(self.current);
                self.current = 0;
            }
        }
    }

    /// What it wrote, for an error: `it wrote nothing on stdout`, or its lines and bytes, the
    /// first line's start and the longest line when that was too long to be read.
    fn summary(&self) -> String {
        if self.bytes == 0 {
            return "it wrote nothing on stdout".to_owned();
        }
        let lines = self.lines + u64::from(self.current > 0);
        let longest = self.longest.max(self.current);
        let plural = if lines == 1 { "line" } else { "lines" };
        let mut text = format!("it wrote {lines} {plural} ({} bytes) on stdout", self.bytes);
        if longest > MAX_MESSAGE_BYTES as u64 {
            text.push_str(&format!(
                ", the longest line {longest} bytes, over the {} MiB a message may have",
                MAX_MESSAGE_BYTES / (1024 * 1024)
            ));
        } else {
            let first = String::from_utf8_lossy(&self.first);
            let first = first.trim();
            let mut quoted: String = first.chars().take(FIRST_LINE_CHARS).collect();
            if first.chars().count() > FIRST_LINE_CHARS {
                quoted.push('…');
            }
            text.push_str(&format!(", the first: {quoted:?}"));
        }
        text
    }
}

/// A server's stdout, counted into a [`StdoutLog`] as rmcp reads it.
struct Watched<R> {
    inner: R,
    log: Arc<Mutex<StdoutLog>>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<R> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &polled {
            this.log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .see(&buf.filled()[before..]);
        }
        polled
    }
}

/// The stdio transport of a server spawned as a command: rmcp's line transport over the child's
/// stdin and (watched) stdout, owning the child, which is killed when the transport is dropped
/// and given 2 s to exit on its closed stdin when the session ends.
struct ChildTransport {
    child: tokio::process::Child,
    lines: AsyncRwTransport<
        RoleClient,
        Watched<tokio::process::ChildStdout>,
        tokio::process::ChildStdin,
    >,
}

impl ChildTransport {
    fn spawn(
        program: &str,
        args: &[String],
        env: &[(String, String)],
        log: Arc<Mutex<StdoutLog>>,
    ) -> std::io::Result<Self> {
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let mut child = command.spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("the child's stdio is not piped"));
        };
        let stdout = Watched { inner: stdout, log };
        Ok(ChildTransport {
            child,
            lines: AsyncRwTransport::new_client(stdout, stdin)
                .with_max_line_length(MAX_MESSAGE_BYTES),
        })
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = std::result::Result<(), Self::Error>> + Send + 'static {
        self.lines.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.lines.receive()
    }

    async fn close(&mut self) -> std::result::Result<(), Self::Error> {
        self.lines.close().await?;
        if tokio::time::timeout(Duration::from_secs(2), self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        Ok(())
    }
}

/// How far one connection got: the step it is on and, for a spawned server, what it wrote.
#[derive(Debug, Default)]
struct Progress {
    step: Mutex<&'static str>,
    stdout: Option<Arc<Mutex<StdoutLog>>>,
}

impl Progress {
    fn at(&self, step: &'static str) {
        *self
            .step
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = step;
    }

    fn step(&self) -> &'static str {
        *self
            .step
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `message`, and what a spawned server wrote on its stdout.
    fn explain(&self, message: String) -> String {
        match &self.stdout {
            Some(log) => format!(
                "{message}; {}",
                log.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .summary()
            ),
            None => message,
        }
    }
}

/// Connects once: spawns or reaches the server, initialises and lists the tools, noting in
/// `progress` how far it got.
async fn connect_once(
    server: &McpServer,
    progress: &Progress,
) -> std::result::Result<(Client, Option<u32>, Vec<Tool>), String> {
    progress.at("initialize");
    let (client, pid) = match server {
        McpServer::Command { program, args, env } => {
            let log = progress.stdout.clone().unwrap_or_default();
            let transport = ChildTransport::spawn(program, args, env, log)
                .map_err(|err| format!("cannot spawn: {err}"))?;
            let pid = transport.child.id();
            let client = ()
                .serve(transport)
                .await
                .map_err(|err| progress.explain(format!("initialisation failed: {err}")))?;
            (client, pid)
        }
        McpServer::Http { url } => {
            let transport = StreamableHttpClientTransport::from_uri(url.clone());
            let client =
                ().serve(transport)
                    .await
                    .map_err(|err| format!("initialisation failed: {err}"))?;
            (client, None)
        }
    };
    progress.at("tools/list");
    let tools = client
        .list_all_tools()
        .await
        .map_err(|err| format!("tools/list failed: {err}"))?;
    Ok((client, pid, tools))
}

impl McpEnvironment {
    /// Connects to a server, with the options' timeout, attempts and backoff.
    pub fn connect(server: McpServer, options: McpOptions) -> Result<Self> {
        let runtime = Arc::new(runtime(&server.to_string())?);
        let (client, pid, tools) = Self::connect_with(&runtime, &server, &options)?;
        let specs = tools
            .iter()
            .map(|tool| ToolSpec {
                name: tool.name.to_string(),
                description: tool.description.as_deref().unwrap_or("").to_owned(),
                parameters: Value::Object((*tool.input_schema).clone()),
                mutates_state: tool.annotations.as_ref().and_then(|a| a.read_only_hint)
                    != Some(true),
            })
            .collect();
        Ok(McpEnvironment {
            name: format!("mcp {server}"),
            server,
            options,
            runtime,
            client: Some(client),
            pid,
            tools: Arc::new(ToolSet::new(specs)?),
            fault: None,
            log: Sha256::new(),
        })
    }

    fn connect_with(
        runtime: &tokio::runtime::Runtime,
        server: &McpServer,
        options: &McpOptions,
    ) -> Result<(Client, Option<u32>, Vec<Tool>)> {
        let attempts = options.max_attempts.max(1);
        let mut last = String::new();
        for attempt in 0..attempts {
            if attempt > 0 {
                std::thread::sleep(backoff(options, attempt));
            }
            let progress = Progress {
                stdout: matches!(server, McpServer::Command { .. }).then(Default::default),
                ..Progress::default()
            };
            let connected = runtime.block_on(async {
                tokio::time::timeout(
                    duration(options.connect_timeout_secs),
                    connect_once(server, &progress),
                )
                .await
            });
            match connected {
                Ok(Ok(connected)) => return Ok(connected),
                Ok(Err(message)) => last = message,
                Err(_) => {
                    last = progress.explain(format!(
                        "no answer to {} within {} s (connect_timeout_secs)",
                        progress.step(),
                        options.connect_timeout_secs
                    ))
                }
            }
        }
        Err(Error::Mcp {
            server: server.to_string(),
            message: format!("{last} (after {attempts} attempt(s))"),
        })
    }

    /// The server's process id, for a server spawned as a command.
    pub fn server_pid(&self) -> Option<u32> {
        self.pid
    }

    /// The server this environment talks to.
    pub fn server(&self) -> &McpServer {
        &self.server
    }

    fn faulted(&mut self, fault: EnvFault) -> ToolOutcome {
        let message = fault.to_string();
        if matches!(fault, EnvFault::Timeout { .. }) {
            // A hung server is of no further use and must not linger.
            self.kill_server();
        }
        self.fault = Some(fault);
        ToolOutcome::Failure(ToolFailure::new(ErrorCode::EnvironmentFault, message))
    }

    /// Ends the session; a spawned server that does not stop within 2 s is killed.
    fn kill_server(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if let Some(pid) = self.pid.take() {
            // Kill first: a server hung inside a call would not exit on a closed stdin.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
        let _ = self.runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(2), client.cancel()).await
        });
    }

    fn record(&mut self, name: &str, arguments: &Value, outcome: &ToolOutcome) {
        self.log.update(name.as_bytes());
        self.log.update(b"\0");
        self.log.update(arguments.to_string().as_bytes());
        self.log.update(b"\0");
        self.log.update(render_outcome(outcome).as_bytes());
        self.log.update(b"\n");
    }

    fn call_remote(&mut self, name: &str, arguments: &Value) -> ToolOutcome {
        let Some(client) = self.client.as_ref() else {
            return self.faulted(EnvFault::Disconnected {
                server: self.server.to_string(),
                detail: "no session (an earlier reconnect failed)".to_owned(),
            });
        };
        let mut params = CallToolRequestParams::new(name.to_owned());
        if let Value::Object(map) = arguments {
            params = params.with_arguments(map.clone());
        }
        let retry = !self.mutates_state(name);
        let attempts = if retry {
            self.options.max_attempts.max(1)
        } else {
            1
        };
        let timeout = duration(self.options.call_timeout_secs);
        let mut timed_out = false;
        let mut last = String::new();
        for attempt in 0..attempts {
            if attempt > 0 {
                std::thread::sleep(backoff(&self.options, attempt));
            }
            let answer = self.runtime.block_on(async {
                tokio::time::timeout(timeout, client.call_tool(params.clone())).await
            });
            match answer {
                Ok(Ok(result)) => return outcome_of(&result),
                Ok(Err(ServiceError::McpError(err))) => {
                    // The server answered: a protocol-level refusal is the tool's answer.
                    return ToolOutcome::Failure(ToolFailure::new(
                        ErrorCode::ToolError,
                        err.message.to_string(),
                    ));
                }
                Ok(Err(ServiceError::TransportClosed)) => {
                    return self.faulted(EnvFault::Disconnected {
                        server: self.server.to_string(),
                        detail: format!(
                            "the connection closed during {name} (the server exited or crashed)"
                        ),
                    });
                }
                Ok(Err(err)) => {
                    timed_out = false;
                    last = err.to_string();
                }
                Err(_) => {
                    timed_out = true;
                    last = format!("no answer within {} s", self.options.call_timeout_secs);
                }
            }
        }
        let fault = if timed_out {
            EnvFault::Timeout {
                server: self.server.to_string(),
                tool: name.to_owned(),
                timeout_secs: self.options.call_timeout_secs,
                attempts,
            }
        } else {
            EnvFault::Transport {
                server: self.server.to_string(),
                detail: last,
                attempts,
            }
        };
        self.faulted(fault)
    }
}

fn backoff(options: &McpOptions, attempt: u32) -> Duration {
    Duration::from_millis(
        options
            .backoff_initial_ms
            .saturating_mul(1 << (attempt - 1).min(16)),
    )
}

/// The outcome of a `tools/call` result: text content joined; an error's code and message from
/// its structured content when it has them; a success's structured content when it renders to
/// exactly the text (so our own servers round-trip byte for byte).
fn outcome_of(result: &CallToolResult) -> ToolOutcome {
    let text = result
        .content
        .iter()
        .map(|block| match block.as_text() {
            Some(text) => text.text.clone(),
            None => serde_json::to_string(block).unwrap_or_default(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    if result.is_error == Some(true) {
        let structured = result.structured_content.as_ref();
        let code = match structured
            .and_then(|s| s.get("code"))
            .and_then(Value::as_str)
        {
            Some("TOOL_NOT_AVAILABLE") => ErrorCode::ToolNotAvailable,
            Some("INVALID_PARAMETERS") => ErrorCode::InvalidParameters,
            _ => ErrorCode::ToolError,
        };
        let message = structured
            .and_then(|s| s.get("message"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or(text);
        return ToolOutcome::Failure(ToolFailure::new(code, message));
    }
    if let Some(value) = &result.structured_content {
        let candidate = ToolOutcome::Success(value.clone());
        if render_outcome(&candidate) == text {
            return candidate;
        }
    }
    ToolOutcome::Success(Value::String(text))
}

impl Environment for McpEnvironment {
    fn name(&self) -> &str {
        &self.name
    }

    fn tools(&self) -> &[ToolSpec] {
        self.tools.specs()
    }

    fn reset(&mut self, _seed: u64) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(2), client.cancel()).await
            });
        }
        self.log = Sha256::new();
        self.fault = None;
        match Self::connect_with(&self.runtime, &self.server, &self.options) {
            Ok((client, pid, _)) => {
                self.client = Some(client);
                self.pid = pid;
            }
            Err(err) => {
                self.fault = Some(EnvFault::Disconnected {
                    server: self.server.to_string(),
                    detail: format!("reconnecting failed: {err}"),
                });
            }
        }
    }

    fn call(&mut self, name: &str, arguments: &Value) -> ToolOutcome {
        if let Some(fault) = &self.fault {
            return ToolOutcome::Failure(ToolFailure::new(
                ErrorCode::EnvironmentFault,
                fault.to_string(),
            ));
        }
        if let Err(failure) = self.tools.check(name, arguments) {
            let outcome = ToolOutcome::Failure(failure);
            self.record(name, arguments, &outcome);
            return outcome;
        }
        let outcome = self.call_remote(name, arguments);
        self.record(name, arguments, &outcome);
        outcome
    }

    fn state_hash(&self) -> String {
        self.log
            .clone()
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    fn box_clone(&self) -> Box<dyn Environment> {
        let mut copy = McpEnvironment {
            name: self.name.clone(),
            server: self.server.clone(),
            options: self.options,
            runtime: Arc::clone(&self.runtime),
            client: None,
            pid: None,
            tools: Arc::clone(&self.tools),
            fault: None,
            log: Sha256::new(),
        };
        copy.reset(0);
        Box::new(copy)
    }

    fn fault(&self) -> Option<EnvFault> {
        self.fault.clone()
    }
}

impl Drop for McpEnvironment {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let stopped = self.runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(2), client.cancel()).await
        });
        if stopped.is_err()
            && let Some(pid) = self.pid
        {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}
