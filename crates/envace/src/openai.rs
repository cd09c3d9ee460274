//! A blocking client of OpenAI-compatible chat-completions endpoints (vLLM, SGLang, Ollama,
//! llama.cpp's server, `envace serve-model`), for the LLM judge and the external simulator, and
//! the chat wire types ([`ChatMsg`], [`ToolCallOut`]) that our server (`serve`) reads requests
//! into and writes replies from.
//!
//! The client is made for plain worker threads, not async code: [`ChatClient::complete`]
//! blocks until a reply or a failure. Every failure comes back as data ([`EndpointFailure`]),
//! never as a panic, so a caller can mask the trajectory it concerns instead of scoring it.
//!
//! - Each attempt has its own time limit (`timeout_secs`, from sending the request to reading
//!   the whole reply): a server that sends its headers and then stalls or trickles its body
//!   forever times out like one that never answers, and the failure names the status it sent.
//!   A reply's body is read up to [`MAX_REPLY_BYTES`]; a longer one is a malformed reply.
//! - Timeouts, transport errors (refused or dropped connections), 429 and 5xx are retried up to
//!   `max_retries` times with exponential backoff (a `Retry-After` header in seconds is
//!   honoured, up to the longest backoff); other 4xx answers and malformed replies are not
//!   retried, because asking again gets the same answer.
//! - At most `max_concurrency` requests are in flight at once across all clones of a client
//!   (a counting semaphore held only while a request is on the wire, not during backoff).
//! - Plain `http://` only: the build has no TLS. Bearer authentication when `api_key_env`
//!   names a variable; when that variable is not set, the key comes from the process's
//!   [`KeySource`] (the studio's OS keyring), if one is registered.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::chat::Role;
use crate::config::EndpointConfig;
use crate::error::{Error, Result};

/// Wait before the first retry; doubled after each further failure.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// Longest wait between two attempts (also the cap on a server's `Retry-After`).
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Most bytes of a reply's body that are read (a chat completion is a few kilobytes; a server
/// that sends more is refused rather than held in memory). ureq's own default.
pub const MAX_REPLY_BYTES: u64 = 10 * 1024 * 1024;
/// Most bytes of an error body kept in [`EndpointFailure::Http`].
const BODY_EXCERPT_CHARS: usize = 300;

/// One chat message, in the OpenAI request format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMsg {
    /// Who sends it.
    pub role: Role,
    /// The text (may be empty for an assistant turn that only calls tools).
    pub content: String,
    /// Tool calls of an assistant turn.
    pub tool_calls: Vec<ToolCallOut>,
    /// The call a `tool` message answers.
    pub tool_call_id: Option<String>,
    /// The tool's name on a `tool` message, when the sender gives it.
    pub name: Option<String>,
}

impl ChatMsg {
    /// A system instruction.
    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(Role::System, content)
    }

    /// A user turn.
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, content)
    }

    /// An assistant turn with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::plain(Role::Assistant, content)
    }

    /// An assistant turn that calls tools (its text may be empty).
    pub fn assistant_calls(content: impl Into<String>, tool_calls: Vec<ToolCallOut>) -> Self {
        ChatMsg {
            tool_calls,
            ..Self::plain(Role::Assistant, content)
        }
    }

    /// A tool's response to the call with id `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMsg {
            tool_call_id: Some(tool_call_id.into()),
            ..Self::plain(Role::Tool, content)
        }
    }

    /// A message of `role` with text only.
    pub fn plain(role: Role, content: impl Into<String>) -> Self {
        ChatMsg {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    /// The message as the request body carries it.
    pub fn to_json(&self) -> Value {
        let mut msg = Map::new();
        msg.insert("role".to_owned(), Value::from(self.role.as_str()));
        let content = if self.content.is_empty() && !self.tool_calls.is_empty() {
            Value::Null
        } else {
            Value::from(self.content.clone())
        };
        msg.insert("content".to_owned(), content);
        if !self.tool_calls.is_empty() {
            let calls = self.tool_calls.iter().map(ToolCallOut::to_json).collect();
            msg.insert("tool_calls".to_owned(), Value::Array(calls));
        }
        if let Some(id) = &self.tool_call_id {
            msg.insert("tool_call_id".to_owned(), Value::from(id.clone()));
        }
        if let Some(name) = &self.name {
            msg.insert("name".to_owned(), Value::from(name.clone()));
        }
        Value::Object(msg)
    }

    /// The message in the form Hugging Face chat templates read: `content` always a string,
    /// each tool call's `arguments` an object (an id only when the call has one).
    pub fn to_template_json(&self) -> Value {
        let mut msg = Map::new();
        msg.insert("role".to_owned(), Value::from(self.role.as_str()));
        msg.insert("content".to_owned(), Value::from(self.content.clone()));
        if !self.tool_calls.is_empty() {
            let calls = self
                .tool_calls
                .iter()
                .map(|call| {
                    let mut out = Map::new();
                    if !call.id.is_empty() {
                        out.insert("id".to_owned(), Value::from(call.id.clone()));
                    }
                    out.insert("type".to_owned(), Value::from("function"));
                    out.insert(
                        "function".to_owned(),
                        json!({"name": call.name, "arguments": call.arguments_object()}),
                    );
                    Value::Object(out)
                })
                .collect();
            msg.insert("tool_calls".to_owned(), Value::Array(calls));
        }
        for (key, value) in [("tool_call_id", &self.tool_call_id), ("name", &self.name)] {
            if let Some(value) = value {
                msg.insert(key.to_owned(), Value::from(value.clone()));
            }
        }
        Value::Object(msg)
    }
}

/// A tool call as OpenAI sends it: the arguments are a JSON *string*.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolCallOut {
    /// The call's id, echoed by the `tool` message that answers it.
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments, a JSON text (normally an object), exactly as the endpoint sent it.
    pub arguments: String,
}

impl ToolCallOut {
    /// `{"id", "type": "function", "function": {"name", "arguments"}}`.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }

    /// The arguments as a JSON object (empty when the text is not one).
    pub fn arguments_object(&self) -> Map<String, Value> {
        match serde_json::from_str(&self.arguments) {
            Ok(Value::Object(args)) => args,
            _ => Map::new(),
        }
    }
}

/// One chat-completions request; the model name comes from the client's config.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<ChatMsg>,
    /// Tools the model may call: OpenAI tool objects (`{"type": "function", "function":
    /// {...}}`) or bare function schemas (`{"name", "description", "parameters"}`), which are
    /// wrapped.
    pub tools: Vec<Value>,
    /// Sampling temperature; the endpoint's default when absent.
    pub temperature: Option<f64>,
    /// Most tokens to generate.
    pub max_tokens: Option<u32>,
    /// Texts that end the generation.
    pub stop: Vec<String>,
    /// Sampling seed, for endpoints that honour it.
    pub seed: Option<u64>,
    /// Ask for a JSON object (`response_format: {"type": "json_object"}`).
    pub response_format_json: bool,
}

impl ChatRequest {
    /// A request with these messages and every option at the endpoint's default.
    pub fn new(messages: Vec<ChatMsg>) -> Self {
        ChatRequest {
            messages,
            ..ChatRequest::default()
        }
    }

    /// The JSON body for `model`.
    pub fn to_json(&self, model: &str) -> Value {
        let mut body = Map::new();
        body.insert("model".to_owned(), Value::from(model));
        body.insert(
            "messages".to_owned(),
            Value::Array(self.messages.iter().map(ChatMsg::to_json).collect()),
        );
        if !self.tools.is_empty() {
            let tools = self.tools.iter().map(tool_object).collect();
            body.insert("tools".to_owned(), Value::Array(tools));
        }
        if let Some(t) = self.temperature {
            body.insert("temperature".to_owned(), Value::from(t));
        }
        if let Some(n) = self.max_tokens {
            body.insert("max_tokens".to_owned(), Value::from(n));
        }
        if !self.stop.is_empty() {
            body.insert("stop".to_owned(), Value::from(self.stop.clone()));
        }
        if let Some(seed) = self.seed {
            body.insert("seed".to_owned(), Value::from(seed));
        }
        if self.response_format_json {
            body.insert("response_format".to_owned(), json!({"type": "json_object"}));
        }
        Value::Object(body)
    }
}

/// A tool in the request format: a full tool object is kept, a bare function schema wrapped.
fn tool_object(tool: &Value) -> Value {
    if tool.get("type").is_some() && tool.get("function").is_some() {
        tool.clone()
    } else {
        json!({"type": "function", "function": tool})
    }
}

/// The first choice of a reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChatReply {
    /// The text (empty when the endpoint sent `null`).
    pub content: String,
    /// The tool calls, in order.
    pub tool_calls: Vec<ToolCallOut>,
    /// `stop`, `length`, `tool_calls`, … (empty when the endpoint sent none).
    pub finish_reason: String,
    /// Prompt tokens the endpoint counted (0 when it sent no usage).
    pub prompt_tokens: u64,
    /// Generated tokens the endpoint counted (0 when it sent no usage).
    pub completion_tokens: u64,
    /// HTTP attempts it took, the successful one included.
    pub attempts: u32,
}

/// Why a request failed after all its attempts; recorded with the trajectory it masks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EndpointFailure {
    /// No complete reply within `timeout_secs` (on the last attempt).
    Timeout {
        /// The URL posted to.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The per-attempt limit.
        timeout_secs: f64,
        /// The status of a reply whose headers came but whose body did not end in time (a
        /// server that stalls or trickles its body forever); `None` when no headers came.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
    },
    /// The endpoint answered with an error status (on the last attempt).
    Http {
        /// The URL posted to.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The HTTP status.
        status: u16,
        /// The start of the response body, on one line.
        body_excerpt: String,
    },
    /// The connection could not be made or broke (refused, reset, closed mid-reply).
    Transport {
        /// The URL posted to.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// What the connection did.
        message: String,
    },
    /// A 2xx reply that is not what was asked for, a chat completion or a model list (not
    /// JSON, no choices, wrong field types).
    BadResponse {
        /// The URL posted to.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// What is wrong with it, naming the field.
        message: String,
    },
}

impl EndpointFailure {
    /// Attempts made before giving up.
    pub fn attempts(&self) -> u32 {
        match self {
            EndpointFailure::Timeout { attempts, .. }
            | EndpointFailure::Http { attempts, .. }
            | EndpointFailure::Transport { attempts, .. }
            | EndpointFailure::BadResponse { attempts, .. } => *attempts,
        }
    }

    /// The URL posted to.
    pub fn url(&self) -> &str {
        match self {
            EndpointFailure::Timeout { url, .. }
            | EndpointFailure::Http { url, .. }
            | EndpointFailure::Transport { url, .. }
            | EndpointFailure::BadResponse { url, .. } => url,
        }
    }

    /// Whether asking again may succeed: timeouts, transport errors, 429 and 5xx.
    pub fn is_retryable(&self) -> bool {
        match self {
            EndpointFailure::Timeout { .. } | EndpointFailure::Transport { .. } => true,
            EndpointFailure::Http { status, .. } => *status == 429 || *status >= 500,
            EndpointFailure::BadResponse { .. } => false,
        }
    }

    fn set_attempts(&mut self, n: u32) {
        match self {
            EndpointFailure::Timeout { attempts, .. }
            | EndpointFailure::Http { attempts, .. }
            | EndpointFailure::Transport { attempts, .. }
            | EndpointFailure::BadResponse { attempts, .. } => *attempts = n,
        }
    }
}

impl fmt::Display for EndpointFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tries = |n: u32| if n == 1 { "attempt" } else { "attempts" };
        match self {
            EndpointFailure::Timeout {
                url,
                attempts,
                timeout_secs,
                status: None,
            } => write!(
                f,
                "{url}: no reply within {timeout_secs} s ({attempts} {})",
                tries(*attempts)
            ),
            EndpointFailure::Timeout {
                url,
                attempts,
                timeout_secs,
                status: Some(status),
            } => write!(
                f,
                "{url}: the reply (HTTP {status}) began but its body did not end within {timeout_secs} s ({attempts} {})",
                tries(*attempts)
            ),
            EndpointFailure::Http {
                url,
                attempts,
                status,
                body_excerpt,
            } => write!(
                f,
                "{url}: HTTP {status} ({attempts} {}): {body_excerpt}",
                tries(*attempts)
            ),
            EndpointFailure::Transport {
                url,
                attempts,
                message,
            } => write!(
                f,
                "{url}: connection failed ({attempts} {}): {message}",
                tries(*attempts)
            ),
            EndpointFailure::BadResponse {
                url,
                attempts,
                message,
            } => write!(
                f,
                "{url}: unexpected reply ({attempts} {}): {message}",
                tries(*attempts)
            ),
        }
    }
}

impl std::error::Error for EndpointFailure {}

/// A counting semaphore shared by the clones of a client.
#[derive(Debug)]
struct Limit {
    in_flight: Mutex<u32>,
    freed: Condvar,
    max: u32,
}

impl Limit {
    fn acquire(self: &Arc<Self>) -> Permit {
        let mut n = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *n >= self.max {
            n = self.freed.wait(n).unwrap_or_else(PoisonError::into_inner);
        }
        *n += 1;
        Permit(Arc::clone(self))
    }
}

/// One request's place in the limit; released on drop.
struct Permit(Arc<Limit>);

impl Drop for Permit {
    fn drop(&mut self) {
        let mut n = self
            .0
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *n = n.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

/// Where API keys come from when the environment variable an endpoint's `api_key_env` names
/// is not set: the desktop studio registers the OS keyring. The environment always wins.
pub trait KeySource: Send + Sync {
    /// Names the source in messages, e.g. `the OS keyring`.
    fn name(&self) -> &str;
    /// The key stored under `var`, or why there is none.
    fn key(&self, var: &str) -> std::result::Result<String, String>;
}

static KEY_SOURCE: std::sync::OnceLock<Box<dyn KeySource>> = std::sync::OnceLock::new();

/// Registers the process's one [`KeySource`]; returns `false` (and drops `source`) when one is
/// registered already.
pub fn set_key_source(source: Box<dyn KeySource>) -> bool {
    KEY_SOURCE.set(source).is_ok()
}

/// A blocking OpenAI-compatible chat-completions client. Cloning is cheap; clones share the
/// connection pool and the limit of requests in flight.
#[derive(Clone)]
pub struct ChatClient {
    endpoint: String,
    models_url: String,
    model: String,
    api_key: Option<String>,
    timeout: Duration,
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    agent: ureq::Agent,
    limit: Arc<Limit>,
}

impl fmt::Debug for ChatClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The API key is never printed.
        f.debug_struct("ChatClient")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("max_concurrency", &self.limit.max)
            .finish_non_exhaustive()
    }
}

impl ChatClient {
    /// A client of the endpoint `cfg` describes. Fails when `api_key_env` names a variable
    /// that is not set, when the URL is not plain `http://`, or when a limit is out of range.
    pub fn new(cfg: &EndpointConfig) -> Result<Self> {
        let base = cfg.url.trim_end_matches('/');
        if base.starts_with("https://") {
            return Err(Error::Endpoint {
                field: "url".to_owned(),
                message: format!(
                    "{:?} needs TLS, which this build does not include; serve the endpoint over plain http:// (e.g. behind a local proxy)",
                    cfg.url
                ),
            });
        }
        let host = base.strip_prefix("http://").unwrap_or_default();
        if host.is_empty() || host.starts_with('/') {
            return Err(Error::Endpoint {
                field: "url".to_owned(),
                message: format!(
                    "{:?} is not an http:// URL with a host, e.g. \"http://127.0.0.1:8000/v1\"",
                    cfg.url
                ),
            });
        }
        if !(cfg.timeout_secs.is_finite() && cfg.timeout_secs > 0.0) {
            return Err(Error::Endpoint {
                field: "timeout_secs".to_owned(),
                message: format!("{} is not a positive number of seconds", cfg.timeout_secs),
            });
        }
        if cfg.max_concurrency == 0 {
            return Err(Error::Endpoint {
                field: "max_concurrency".to_owned(),
                message: "0 would never send a request; use at least 1".to_owned(),
            });
        }
        let api_key = match &cfg.api_key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(key) if !key.trim().is_empty() => Some(key.trim().to_owned()),
                Ok(_) => {
                    return Err(Error::Endpoint {
                        field: "api_key_env".to_owned(),
                        message: format!(
                            "the environment variable {var} is empty; set it to the API key of {}",
                            cfg.url
                        ),
                    });
                }
                Err(_) => match KEY_SOURCE.get() {
                    None => {
                        return Err(Error::Endpoint {
                            field: "api_key_env".to_owned(),
                            message: format!(
                                "the environment variable {var} is not set; export it with the API key of {}",
                                cfg.url
                            ),
                        });
                    }
                    Some(source) => match source.key(var) {
                        Ok(key) if !key.trim().is_empty() => Some(key.trim().to_owned()),
                        Ok(_) => {
                            return Err(Error::Endpoint {
                                field: "api_key_env".to_owned(),
                                message: format!(
                                    "the environment variable {var} is not set and {} holds an empty key under that name",
                                    source.name()
                                ),
                            });
                        }
                        Err(why) => {
                            return Err(Error::Endpoint {
                                field: "api_key_env".to_owned(),
                                message: format!(
                                    "the environment variable {var} is not set and {} has no key under that name ({why}); export it or store the API key of {}",
                                    source.name(),
                                    cfg.url
                                ),
                            });
                        }
                    },
                },
            },
        };
        let timeout = Duration::from_secs_f64(cfg.timeout_secs);
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(timeout))
                .user_agent(concat!("envace/", env!("CARGO_PKG_VERSION")))
                .build(),
        );
        Ok(ChatClient {
            endpoint: format!("{base}/chat/completions"),
            models_url: format!("{base}/models"),
            model: cfg.model.clone(),
            api_key,
            timeout,
            max_retries: cfg.max_retries,
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            agent,
            limit: Arc::new(Limit {
                in_flight: Mutex::new(0),
                freed: Condvar::new(),
                max: cfg.max_concurrency,
            }),
        })
    }

    /// The same client with another backoff: `initial` before the first retry, doubled after
    /// each failure, never more than `max`.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }

    /// The URL requests are posted to, `{url}/chat/completions`.
    pub fn endpoint_url(&self) -> &str {
        &self.endpoint
    }

    /// The model name sent with each request.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The model ids the endpoint lists (`GET {url}/models`, answered by OpenAI-compatible
    /// servers as `{"data": [{"id": …}, …]}`), in one attempt with the per-attempt time
    /// limit and no retry: what a connection check shows.
    pub fn list_models(&self) -> std::result::Result<Vec<String>, EndpointFailure> {
        let url = &self.models_url;
        let mut request = self.agent.get(url);
        if let Some(key) = &self.api_key {
            request = request.header("Authorization", &format!("Bearer {key}"));
        }
        let transport = |e| {
            let mut failure = self.transport_failure(url, e);
            failure.set_attempts(1);
            failure
        };
        let _permit = self.limit.acquire();
        let response = request.call().map_err(transport)?;
        let status = response.status().as_u16();
        let text = self
            .read_body(url, status, response.into_body())
            .map_err(|mut failure| {
                failure.set_attempts(1);
                failure
            })?;
        if !(200..300).contains(&status) {
            return Err(EndpointFailure::Http {
                url: url.clone(),
                attempts: 1,
                status,
                body_excerpt: excerpt(&text),
            });
        }
        let bad = |message: String| EndpointFailure::BadResponse {
            url: url.clone(),
            attempts: 1,
            message,
        };
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| bad(format!("the body is not JSON ({e}): {}", excerpt(&text))))?;
        let data = value
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("no data array in {}", excerpt(&text))))?;
        data.iter()
            .enumerate()
            .map(|(idx, model)| {
                model
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| bad(format!("data[{idx}].id is missing or not a string")))
            })
            .collect()
    }

    /// Sends `req`, retrying as the module doc says; the first choice of the reply, or why
    /// there is none.
    pub fn complete(&self, req: &ChatRequest) -> std::result::Result<ChatReply, EndpointFailure> {
        let body = req.to_json(&self.model);
        let mut backoff = self.initial_backoff;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let outcome = {
                let _permit = self.limit.acquire();
                self.attempt(&body)
            };
            match outcome {
                Ok(mut reply) => {
                    reply.attempts = attempts;
                    return Ok(reply);
                }
                Err((mut failure, retry_after)) => {
                    failure.set_attempts(attempts);
                    if !failure.is_retryable() || attempts > self.max_retries {
                        return Err(failure);
                    }
                    let wait = retry_after.unwrap_or(backoff).min(self.max_backoff);
                    tracing::debug!(url = %self.endpoint, attempts, ?wait, reason = %failure, "retrying");
                    std::thread::sleep(wait);
                    backoff = (backoff * 2).min(self.max_backoff);
                }
            }
        }
    }

    /// One HTTP exchange; on failure also the server's `Retry-After`, when it sent one.
    fn attempt(
        &self,
        body: &Value,
    ) -> std::result::Result<ChatReply, (EndpointFailure, Option<Duration>)> {
        let mut request = self.agent.post(&self.endpoint);
        if let Some(key) = &self.api_key {
            request = request.header("Authorization", &format!("Bearer {key}"));
        }
        let response = request
            .send_json(body)
            .map_err(|e| (self.transport_failure(&self.endpoint, e), None))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|secs| secs.is_finite() && *secs >= 0.0)
            .map(Duration::from_secs_f64);
        let text = self
            .read_body(&self.endpoint, status, response.into_body())
            .map_err(|failure| (failure, None))?;
        if !(200..300).contains(&status) {
            return Err((
                EndpointFailure::Http {
                    url: self.endpoint.clone(),
                    attempts: 0,
                    status,
                    body_excerpt: excerpt(&text),
                },
                retry_after,
            ));
        }
        parse_reply(&text).map_err(|message| {
            (
                EndpointFailure::BadResponse {
                    url: self.endpoint.clone(),
                    attempts: 0,
                    message,
                },
                None,
            )
        })
    }

    /// A reply's whole body as text, read within what is left of the attempt's time limit and
    /// never more than [`MAX_REPLY_BYTES`]: a body that never ends is a timeout that names its
    /// status, a longer one a bad response (asking again would get the same).
    fn read_body(
        &self,
        url: &str,
        status: u16,
        mut body: ureq::Body,
    ) -> std::result::Result<String, EndpointFailure> {
        match body.with_config().limit(MAX_REPLY_BYTES).read_to_string() {
            Ok(text) => Ok(text),
            Err(ureq::Error::BodyExceedsLimit(limit)) => Err(EndpointFailure::BadResponse {
                url: url.to_owned(),
                attempts: 0,
                message: format!(
                    "the body (HTTP {status}) is longer than {} MiB, the most a reply may be",
                    limit / (1024 * 1024)
                ),
            }),
            Err(error) => {
                let mut failure = self.transport_failure(url, error);
                if let EndpointFailure::Timeout { status: at, .. } = &mut failure {
                    *at = Some(status);
                }
                Err(failure)
            }
        }
    }

    fn transport_failure(&self, url: &str, error: ureq::Error) -> EndpointFailure {
        let timed_out = match &error {
            ureq::Error::Timeout(_) => true,
            ureq::Error::Io(io) => matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ),
            _ => false,
        };
        if timed_out {
            EndpointFailure::Timeout {
                url: url.to_owned(),
                attempts: 0,
                timeout_secs: self.timeout.as_secs_f64(),
                status: None,
            }
        } else {
            EndpointFailure::Transport {
                url: url.to_owned(),
                attempts: 0,
                message: error.to_string(),
            }
        }
    }
}

/// The start of a body, on one line.
fn excerpt(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= BODY_EXCERPT_CHARS {
        one_line
    } else {
        let cut: String = one_line.chars().take(BODY_EXCERPT_CHARS).collect();
        format!("{cut}…")
    }
}

/// The first choice of a chat-completion body, or what is wrong with it (naming the field).
pub fn parse_reply(text: &str) -> std::result::Result<ChatReply, String> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| format!("the body is not JSON ({e}): {}", excerpt(text)))?;
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| format!("no choices[0] in {}", excerpt(text)))?;
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or("choices[0].message is missing or not an object")?;
    let content = match message.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => {
            return Err(format!(
                "choices[0].message.content is {other}, not a string"
            ));
        }
    };
    let mut tool_calls = Vec::new();
    match message.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(calls)) => {
            for (idx, call) in calls.iter().enumerate() {
                let field = |name: &str| format!("choices[0].message.tool_calls[{idx}].{name}");
                let function = call
                    .get("function")
                    .ok_or_else(|| format!("{} is missing", field("function")))?;
                let name = function
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        format!("{} is missing or not a string", field("function.name"))
                    })?;
                let arguments = match function.get("arguments") {
                    Some(Value::String(text)) => text.clone(),
                    // Some servers send the object itself; keep the OpenAI form, a JSON text.
                    Some(object @ Value::Object(_)) => object.to_string(),
                    None | Some(Value::Null) => "{}".to_owned(),
                    Some(other) => {
                        return Err(format!(
                            "{} is {other}, not a JSON string",
                            field("function.arguments")
                        ));
                    }
                };
                tool_calls.push(ToolCallOut {
                    id: call
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    name: name.to_owned(),
                    arguments,
                });
            }
        }
        Some(other) => {
            return Err(format!(
                "choices[0].message.tool_calls is {other}, not an array"
            ));
        }
    }
    let usage = |key: &str| {
        value
            .get("usage")
            .and_then(|u| u.get(key))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Ok(ChatReply {
        content,
        tool_calls,
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        prompt_tokens: usage("prompt_tokens"),
        completion_tokens: usage("completion_tokens"),
        attempts: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    fn config(url: &str) -> EndpointConfig {
        EndpointConfig {
            url: url.to_owned(),
            model: "m".to_owned(),
            api_key_env: None,
            timeout_secs: 5.0,
            max_retries: 2,
            max_concurrency: 4,
        }
    }

    #[test]
    fn request_body_has_the_openai_shape() {
        let mut req = ChatRequest::new(vec![
            ChatMsg::system("Be brief."),
            ChatMsg::user("Weather in Paris?"),
            ChatMsg::assistant_calls(
                "",
                vec![ToolCallOut {
                    id: "call_1".to_owned(),
                    name: "get_weather".to_owned(),
                    arguments: r#"{"city": "Paris"}"#.to_owned(),
                }],
            ),
            ChatMsg::tool("call_1", r#"{"temp_c": 21}"#),
        ]);
        req.tools = vec![json!({"name": "get_weather", "parameters": {"type": "object"}})];
        req.temperature = Some(0.0);
        req.max_tokens = Some(16);
        req.stop = vec!["\n\n".to_owned()];
        req.seed = Some(7);
        req.response_format_json = true;
        expect![[r#"
            {
              "model": "judge",
              "messages": [
                {
                  "role": "system",
                  "content": "Be brief."
                },
                {
                  "role": "user",
                  "content": "Weather in Paris?"
                },
                {
                  "role": "assistant",
                  "content": null,
                  "tool_calls": [
                    {
                      "id": "call_1",
                      "type": "function",
                      "function": {
                        "name": "get_weather",
                        "arguments": "{\"city\": \"Paris\"}"
                      }
                    }
                  ]
                },
                {
                  "role": "tool",
                  "content": "{\"temp_c\": 21}",
                  "tool_call_id": "call_1"
                }
              ],
              "tools": [
                {
                  "type": "function",
                  "function": {
                    "name": "get_weather",
                    "parameters": {
                      "type": "object"
                    }
                  }
                }
              ],
              "temperature": 0.0,
              "max_tokens": 16,
              "stop": [
                "\n\n"
              ],
              "seed": 7,
              "response_format": {
                "type": "json_object"
              }
            }"#]]
        .assert_eq(
            &serde_json::to_string_pretty(&req.to_json("judge")).expect("a JSON value prints"),
        );
    }

    #[test]
    fn replies_parse_or_name_the_bad_field() {
        let check = |body: &str| match parse_reply(body) {
            Ok(reply) => format!("{reply:?}"),
            Err(message) => format!("error: {message}"),
        };
        let lines = [
            check(
                r#"{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#,
            ),
            check(
                r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"a":1}}}]},"finish_reason":"tool_calls"}]}"#,
            ),
            check(r#"{"choices":[]}"#),
            check(r#"{"choices":[{"message":{"content":3}}]}"#),
            check(r#"{"choices":[{"message":{"tool_calls":[{"function":{}}]}}]}"#),
            check("<html>bad gateway</html>"),
        ];
        expect![[r#"
            ChatReply { content: "hi", tool_calls: [], finish_reason: "stop", prompt_tokens: 5, completion_tokens: 1, attempts: 0 }
            ChatReply { content: "", tool_calls: [ToolCallOut { id: "c", name: "f", arguments: "{\"a\":1}" }], finish_reason: "tool_calls", prompt_tokens: 0, completion_tokens: 0, attempts: 0 }
            error: no choices[0] in {"choices":[]}
            error: choices[0].message.content is 3, not a string
            error: choices[0].message.tool_calls[0].function.name is missing or not a string
            error: the body is not JSON (expected value at line 1 column 1): <html>bad gateway</html>"#]]
        .assert_eq(&lines.join("\n"));
    }

    #[test]
    fn configuration_errors_name_the_field() {
        let errors = [
            ChatClient::new(&config("https://api.example.com/v1")),
            ChatClient::new(&config("ftp://x")),
            ChatClient::new(&EndpointConfig {
                api_key_env: Some("ENVACE_TEST_KEY_THAT_IS_NOT_SET".to_owned()),
                ..config("http://127.0.0.1:9/v1")
            }),
            ChatClient::new(&EndpointConfig {
                max_concurrency: 0,
                ..config("http://127.0.0.1:9/v1")
            }),
        ]
        .into_iter()
        .map(|r| match r {
            Ok(_) => "ok".to_owned(),
            Err(e) => e.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
        expect![[r#"
            endpoint url: "https://api.example.com/v1" needs TLS, which this build does not include; serve the endpoint over plain http:// (e.g. behind a local proxy)
            endpoint url: "ftp://x" is not an http:// URL with a host, e.g. "http://127.0.0.1:8000/v1"
            endpoint api_key_env: the environment variable ENVACE_TEST_KEY_THAT_IS_NOT_SET is not set; export it with the API key of http://127.0.0.1:9/v1
            endpoint max_concurrency: 0 would never send a request; use at least 1"#]]
        .assert_eq(&errors);
    }

    #[test]
    fn failures_print_one_line_and_serialize_with_their_kind() {
        let failure = EndpointFailure::Http {
            url: "http://h/v1/chat/completions".to_owned(),
            attempts: 3,
            status: 503,
            body_excerpt: "overloaded".to_owned(),
        };
        expect!["http://h/v1/chat/completions: HTTP 503 (3 attempts): overloaded"]
            .assert_eq(&failure.to_string());
        expect![[r#"{"kind":"http","url":"http://h/v1/chat/completions","attempts":3,"status":503,"body_excerpt":"overloaded"}"#]]
            .assert_eq(&serde_json::to_string(&failure).expect("a failure serializes"));
        assert!(failure.is_retryable());
        let back: EndpointFailure =
            serde_json::from_str(&serde_json::to_string(&failure).expect("a failure serializes"))
                .expect("a failure deserializes");
        assert_eq!(back, failure);
    }

    #[test]
    fn a_client_is_shared_across_worker_threads() {
        fn shareable<T: Clone + Send + Sync + 'static>() {}
        shareable::<ChatClient>();
        shareable::<EndpointFailure>();
    }
}
