//! `envace serve-model`: our own policy behind an OpenAI-compatible HTTP endpoint, so that a
//! trained checkpoint can play the judge, the external simulator, or be evaluated by any tool
//! that speaks the chat-completions API.
//!
//! Routes: `POST /v1/chat/completions`, `GET /v1/models`, `GET /health`. With an API key
//! (`ServeOptions::api_key`) every route but `/health` needs `Authorization: Bearer KEY` and
//! answers 401 without it; an address beyond loopback is refused without one.
//!
//! - The conversation is rendered with the model's own chat template. A template that knows
//!   tools receives the tools and the tool calls as Hugging Face passes them; a template that
//!   does not (SmolLM2's) gets them folded into the messages it can render: the tools as a
//!   `# Tools` section of the system turn, each call as a `<tool_call>` block of the assistant
//!   turn, tool responses as `<tool_response>` blocks of a user turn.
//! - The reply's `<tool_call>` blocks become `tool_calls` (`finish_reason: "tool_calls"`), the
//!   text outside them the `content` (`null` when empty). A malformed block stays in the
//!   content as text: a bad model output is data, never a server error.
//! - A GGUF file is served on its quantised weights (our own Q4_1 / Q8_0 kernels on the CPU,
//!   candle's `quantized_llama` elsewhere), the fastest path we have; `--dequantize` serves it
//!   as f32 weights instead. A Hugging Face folder or run checkpoint is served as a policy.
//! - Requests are queued to one model worker thread that generates, with left padding, for
//!   every waiting request that samples alike (greedy requests always batch together), up to
//!   `max_batch` at once (quantised weights decode the batch's rows one after another). A
//!   request's `seed` makes it reproducible when it runs alone; in a batch, row `r` draws from
//!   the stream of `(seed, r)`.
//!
//! Files: `model.rs` loads what is served, `worker.rs` decodes queued jobs, `request.rs` checks
//! a request and renders its prompt, `reply.rs` splits the generated text into the reply's
//! parts, `stream.rs` sends a reply as events; this file holds the server's lifecycle and routes.
//! - `stream: true` answers with server-sent events (`chat.completion.chunk` objects, then
//!   `data: [DONE]`): content as it is generated, tool calls whole at the end (`stream.rs`).
//! - Bad requests get a 400 with an OpenAI-style `{"error": {"message", "type", "param"}}`
//!   naming the field. Not supported, with a 400 that says so: `n` other than 1,
//!   `logprobs: true`, `tool_choice` other than `"auto"` / `"none"`. `response_format` is
//!   accepted and not enforced. Unknown fields are ignored, as vLLM does.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Map, Value, json};

use crate::chat::ChatTemplate;
use crate::error::{Error, Result};
use crate::model::Sampling;
use crate::openai::ToolCallOut;
use crate::tokenize::{self, Tokenizer};

pub use model::LoadedModel;
use reply::finish_turn;
use request::{ApiError, parse_chat_call, render_prompt};
use stream::{EventBody, StreamedCall, stream_reply};
use worker::{Job, run_worker};

/// The body of every response: one JSON document, or a stream of server-sent events.
type ServeBody = UnsyncBoxBody<Bytes, Infallible>;

mod model;
mod reply;
mod request;
mod stream;

/// OpenAI-format `messages` (a JSON array) as chat messages, read as the server reads a request:
/// field by field, `developer` as `system`, a call's arguments as a JSON text or an object. An
/// error names the field (`messages[2].tool_calls[0].function.name: …`).
pub fn openai_messages(
    messages: &serde_json::Value,
) -> std::result::Result<Vec<crate::openai::ChatMsg>, String> {
    request::parse_messages(Some(messages)).map_err(|e| match e.param {
        Some(param) => format!("{param}: {}", e.message),
        None => e.message,
    })
}
mod worker;

/// How the server batches and bounds requests.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeOptions {
    /// Most requests generated together.
    pub max_batch: usize,
    /// New tokens when a request sets no `max_tokens` (always bounded by the context).
    pub default_max_tokens: usize,
    /// How long the worker waits after a first request for others to join its batch.
    pub batch_window: Duration,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// How long a client may take to send a request's headers, and then its body; a slower one
    /// gets no answer (headers) or a 408 (body), so idle connections cannot pile up.
    pub read_timeout: Duration,
    /// The key a request must send as `Authorization: Bearer KEY` (every route but `/health`);
    /// without one the server answers anyone, and may only listen on loopback.
    pub api_key: Option<String>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_batch: 8,
            default_max_tokens: 512,
            batch_window: Duration::from_millis(5),
            max_body_bytes: 16 << 20,
            read_timeout: Duration::from_secs(60),
            api_key: None,
        }
    }
}

/// Counters of a running server, as `/health` shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ServeStats {
    /// Chat completions answered (including failed generations).
    pub n_requests: u64,
    /// Calls of the model's batched generation.
    pub n_batches: u64,
    /// The largest batch generated so far.
    pub max_batch_seen: u64,
    /// Tokens generated, summed over requests.
    pub n_generated_tokens: u64,
}

#[derive(Debug, Default)]
struct Counters {
    n_requests: AtomicU64,
    n_batches: AtomicU64,
    max_batch_seen: AtomicU64,
    n_generated_tokens: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> ServeStats {
        ServeStats {
            n_requests: self.n_requests.load(Ordering::Relaxed),
            n_batches: self.n_batches.load(Ordering::Relaxed),
            max_batch_seen: self.max_batch_seen.load(Ordering::Relaxed),
            n_generated_tokens: self.n_generated_tokens.load(Ordering::Relaxed),
        }
    }
}

/// Stops a running server from another thread (e.g. a Ctrl-C handler).
#[derive(Debug, Clone)]
pub struct Stopper(Arc<tokio::sync::watch::Sender<bool>>);

impl Stopper {
    /// Asks the server to stop accepting and close its connections.
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

/// A running model server; stops on [`ModelServer::shutdown`], on [`Stopper::stop`], or when
/// dropped.
#[derive(Debug)]
pub struct ModelServer {
    addr: SocketAddr,
    model_name: String,
    stop: Stopper,
    counters: Arc<Counters>,
    thread: Option<std::thread::JoinHandle<()>>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl ModelServer {
    /// The address it listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL of the API, `http://ADDR/v1` (what an `EndpointConfig.url` holds).
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The model name it serves.
    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    /// Its counters now.
    pub fn stats(&self) -> ServeStats {
        self.counters.snapshot()
    }

    /// A handle that stops the server from elsewhere.
    pub fn stopper(&self) -> Stopper {
        self.stop.clone()
    }

    /// Stops accepting, closes every connection (a request in flight gets no reply), and waits
    /// for the model worker to finish the batch it is generating.
    pub fn shutdown(mut self) {
        self.stop.stop();
        self.join();
    }

    /// Blocks until the server is stopped through a [`Stopper`], then waits as
    /// [`ModelServer::shutdown`] does.
    pub fn wait(mut self) {
        self.join();
    }

    fn join(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop.stop();
        // The worker is not waited for here: it ends on its own after its current batch.
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the HTTP handlers share.
struct State {
    model_name: String,
    created: u64,
    tokenizer: Tokenizer,
    template: ChatTemplate,
    template_knows_tools: bool,
    stop_tokens: Vec<u32>,
    max_context_tokens: usize,
    options: ServeOptions,
    jobs: mpsc::Sender<Job>,
    counters: Arc<Counters>,
}

/// Refuses an address beyond loopback without an API key (anyone who reaches it could use the
/// model), and an empty key: what [`serve`] checks first, for callers that check before loading.
pub fn check_access(addr: SocketAddr, options: &ServeOptions) -> Result<()> {
    let what = format!("address {addr}");
    if !addr.ip().is_loopback() && options.api_key.is_none() {
        return Err(Error::Serve {
            what,
            message: "serving beyond this machine needs an API key, or anyone who reaches it can \
                      use the model: give one (`--api-key-env NAME`, the key in that environment \
                      variable), or listen on 127.0.0.1"
                .to_owned(),
        });
    }
    if options.api_key.as_deref().is_some_and(str::is_empty) {
        return Err(Error::Serve {
            what,
            message: "the API key is empty".to_owned(),
        });
    }
    Ok(())
}

/// Serves `model` at `addr` (port 0 picks a free one) until shut down. An address that is not
/// loopback serves the network, and is refused unless `options` has an API key.
pub fn serve(model: LoadedModel, addr: SocketAddr, options: &ServeOptions) -> Result<ModelServer> {
    let what = format!("address {addr}");
    check_access(addr, options)?;
    if options.max_batch == 0 {
        return Err(Error::Serve {
            what: "max_batch".to_owned(),
            message: "0 would never generate; use at least 1".to_owned(),
        });
    }
    let listener = std::net::TcpListener::bind(addr).map_err(|err| Error::Serve {
        what: what.clone(),
        message: format!("cannot listen: {err}"),
    })?;
    let local = listener.local_addr().map_err(|err| Error::Serve {
        what: what.clone(),
        message: err.to_string(),
    })?;
    listener.set_nonblocking(true).map_err(|err| Error::Serve {
        what: what.clone(),
        message: err.to_string(),
    })?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|err| Error::Serve {
            what: what.clone(),
            message: format!("cannot start the async runtime: {err}"),
        })?;

    let counters = Arc::new(Counters::default());
    let (jobs, queue) = mpsc::channel::<Job>();
    let LoadedModel {
        name,
        mut weights,
        tokenizer,
        template,
        template_knows_tools,
        stop_tokens,
        max_context_tokens,
        ..
    } = model;
    let worker = {
        let stop_tokens = stop_tokens.clone();
        let counters = Arc::clone(&counters);
        let max_batch = options.max_batch;
        let window = options.batch_window;
        std::thread::Builder::new()
            .name("envace-model-worker".to_owned())
            .spawn(move || {
                run_worker(
                    &mut weights,
                    &stop_tokens,
                    &queue,
                    max_batch,
                    window,
                    &counters,
                );
            })
            .map_err(|err| Error::Serve {
                what: what.clone(),
                message: format!("cannot start the model worker: {err}"),
            })?
    };
    let state = Arc::new(State {
        model_name: name.clone(),
        created: unix_secs(),
        tokenizer,
        template,
        template_knows_tools,
        stop_tokens,
        max_context_tokens,
        options: options.clone(),
        jobs,
        counters: Arc::clone(&counters),
    });
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let thread = std::thread::Builder::new()
        .name("envace-serve-model".to_owned())
        .spawn(move || {
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                loop {
                    tokio::select! {
                        _ = stop_rx.wait_for(|stopped| *stopped) => break,
                        accepted = listener.accept() => {
                            let Ok((stream, _)) = accepted else { continue };
                            let state = Arc::clone(&state);
                            let read_timeout = state.options.read_timeout;
                            tokio::spawn(async move {
                                let service = hyper::service::service_fn(move |req| {
                                    let state = Arc::clone(&state);
                                    async move { Ok::<_, Infallible>(route(&state, req).await) }
                                });
                                let io = hyper_util::rt::TokioIo::new(stream);
                                let _ = hyper::server::conn::http1::Builder::new()
                                    .timer(hyper_util::rt::TokioTimer::new())
                                    .header_read_timeout(read_timeout)
                                    .serve_connection(io, service)
                                    .await;
                            });
                        }
                    }
                }
            });
            // Dropping the runtime's tasks closes every connection and every handle on the
            // job queue, so the worker ends after its current batch.
            rt.shutdown_timeout(Duration::from_secs(1));
        })
        .map_err(|err| Error::Serve {
            what,
            message: format!("cannot start the server thread: {err}"),
        })?;
    Ok(ModelServer {
        addr: local,
        model_name: name,
        stop: Stopper(Arc::new(stop_tx)),
        counters,
        thread: Some(thread),
        worker: Some(worker),
    })
}

fn json_response(status: StatusCode, value: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// Whether `req` carries the server's API key (always, when it has none).
fn authorised(state: &State, req: &Request<Incoming>) -> bool {
    let Some(key) = &state.options.api_key else {
        return true;
    };
    let sent = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or("");
    // Compared in time that does not depend on where the first difference lies.
    sent.len() == key.len()
        && sent
            .bytes()
            .zip(key.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

async fn route(state: &Arc<State>, req: Request<Incoming>) -> Response<ServeBody> {
    if req.uri().path().trim_end_matches('/') == "/v1/chat/completions"
        && req.method() == Method::POST
        && authorised(state, &req)
    {
        return match chat_completion(state, req).await {
            Ok(Answer::Whole(value)) => {
                json_response(StatusCode::OK, &value).map(BodyExt::boxed_unsync)
            }
            Ok(Answer::Events(body)) => {
                let mut response = Response::new(body.boxed_unsync());
                let headers = response.headers_mut();
                headers.insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("text/event-stream"),
                );
                headers.insert(
                    hyper::header::CACHE_CONTROL,
                    hyper::header::HeaderValue::from_static("no-cache"),
                );
                response
            }
            Err(err) => err.response().map(BodyExt::boxed_unsync),
        };
    }
    route_other(state, req).await.map(BodyExt::boxed_unsync)
}

/// Every route but a chat completion, with its one JSON answer.
async fn route_other(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let method = req.method().clone();
    if path != "/health" && !authorised(state, &req) {
        let mut response = ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "this server needs an API key: send it as `Authorization: Bearer KEY`"
                .to_owned(),
            kind: "invalid_request_error",
            param: None,
        }
        .response();
        response.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer"),
        );
        return response;
    }
    match (path.as_str(), method) {
        ("/health", Method::GET) => {
            let stats = state.counters.snapshot();
            json_response(
                StatusCode::OK,
                &json!({"status": "ok", "model": state.model_name, "stats": stats}),
            )
        }
        ("/v1/models", Method::GET) => json_response(
            StatusCode::OK,
            &json!({"object": "list", "data": [{
                "id": state.model_name,
                "object": "model",
                "created": state.created,
                "owned_by": "envace",
            }]}),
        ),
        ("/health" | "/v1/models" | "/v1/chat/completions", method) => ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: format!("{method} is not allowed on {path}"),
            kind: "invalid_request_error",
            param: None,
        }
        .response(),
        _ => ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "no route {path}; this server has POST /v1/chat/completions, GET /v1/models and GET /health"
            ),
            kind: "invalid_request_error",
            param: None,
        }
        .response(),
    }
}

/// A chat completion's answer: one JSON reply, or (`stream: true`) events as they come.
enum Answer {
    Whole(Value),
    Events(EventBody),
}

async fn chat_completion(
    state: &Arc<State>,
    req: Request<Incoming>,
) -> std::result::Result<Answer, ApiError> {
    let limit = state.options.max_body_bytes;
    let wait = state.options.read_timeout;
    let read = tokio::time::timeout(wait, Limited::new(req.into_body(), limit).collect());
    let Ok(read) = read.await else {
        return Err(ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "the request body did not arrive within {} s",
                wait.as_secs_f64()
            ),
            kind: "invalid_request_error",
            param: None,
        });
    };
    let bytes = match read {
        Ok(collected) => collected.to_bytes(),
        Err(err) => {
            if err
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return Err(ApiError {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    message: format!("the request body is larger than {limit} bytes"),
                    kind: "invalid_request_error",
                    param: None,
                });
            }
            return Err(ApiError::body(format!(
                "the request body could not be read: {err}"
            )));
        }
    };
    let body: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::body(format!("the request body is not valid JSON: {e}")))?;
    let call = parse_chat_call(&body)?;
    let prompt_text = render_prompt(&state.template, state.template_knows_tools, &call)?;
    let prompt = tokenize::encode(&state.tokenizer, &prompt_text)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    if prompt.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "the conversation renders to no tokens",
        ));
    }
    let room = state.max_context_tokens.saturating_sub(prompt.len());
    if room == 0 {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "the prompt is {} tokens; the model's context holds {} (prompt and reply together)",
                prompt.len(),
                state.max_context_tokens
            ),
        ));
    }
    let max_new_tokens = call
        .max_tokens
        .unwrap_or(state.options.default_max_tokens)
        .min(room)
        .max(1);
    let sampling = Sampling {
        temperature: call.temperature,
        top_p: call.top_p,
        top_k: 0,
        seed: call.seed.unwrap_or_else(fresh_u64),
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    let n_prompt = prompt.len();
    let (token_tx, tokens) = if call.stream {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        (Some(sender), Some(receiver))
    } else {
        (None, None)
    };
    state
        .jobs
        .send(Job {
            prompt,
            max_new_tokens,
            sampling,
            reply,
            tokens: token_tx,
        })
        .map_err(|_| worker_gone())?;
    if let Some(tokens) = tokens {
        let (out, events) = tokio::sync::mpsc::unbounded_channel();
        let streamed = StreamedCall {
            n_prompt,
            max_new_tokens,
            stop: call.stop,
            include_usage: call.include_usage,
        };
        tokio::spawn(stream_reply(
            Arc::clone(state),
            streamed,
            tokens,
            answer,
            out,
        ));
        return Ok(Answer::Events(EventBody(events)));
    }
    let outcome = answer.await.map_err(|_| worker_gone())?;
    state.counters.n_requests.fetch_add(1, Ordering::Relaxed);
    let generated = outcome.map_err(|message| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("generation failed: {message}"),
        kind: "server_error",
        param: None,
    })?;
    state
        .counters
        .n_generated_tokens
        .fetch_add(generated.tokens.len() as u64, Ordering::Relaxed);
    let turn = finish_turn(state, &generated.tokens, max_new_tokens, &call.stop).map_err(|e| {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: e.to_string(),
            kind: "server_error",
            param: None,
        }
    })?;
    let n_completion = generated.tokens.len();
    let mut message = Map::new();
    message.insert("role".to_owned(), Value::from("assistant"));
    message.insert(
        "content".to_owned(),
        if turn.content.is_empty() {
            Value::Null
        } else {
            Value::from(turn.content)
        },
    );
    if !turn.tool_calls.is_empty() {
        let calls = turn.tool_calls.iter().map(ToolCallOut::to_json).collect();
        message.insert("tool_calls".to_owned(), Value::Array(calls));
    }
    Ok(Answer::Whole(json!({
        "id": format!("chatcmpl-{:016x}", fresh_u64()),
        "object": "chat.completion",
        "created": unix_secs(),
        "model": state.model_name,
        "choices": [{
            "index": 0,
            "message": Value::Object(message),
            "logprobs": Value::Null,
            "finish_reason": turn.finish_reason,
        }],
        "usage": {
            "prompt_tokens": n_prompt,
            "completion_tokens": n_completion,
            "total_tokens": n_prompt + n_completion,
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
    })))
}

fn worker_gone() -> ApiError {
    ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: "the model worker has stopped; the server is shutting down".to_owned(),
        kind: "server_error",
        param: None,
    }
}

/// A chat-completions request body checked as the server checks it and rendered into its
/// prompt with `template` (the fuzzing entry point of the request parser): the prompt, or the
/// 400's message.
pub fn check_request_body(
    body: &[u8],
    template: &ChatTemplate,
    template_knows_tools: bool,
) -> std::result::Result<String, String> {
    let body: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the request body is not valid JSON: {e}"))?;
    let call = parse_chat_call(&body).map_err(|e| e.message)?;
    render_prompt(template, template_knows_tools, &call).map_err(|e| e.message)
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A fresh pseudo-random number: the clock and a counter through SplitMix64, for ids and for
/// the seeds of unseeded requests.
fn fresh_u64() -> u64 {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed) as u64;
    crate::rng::Rng::new(nanos.wrapping_add(counter.wrapping_mul(0x9e37_79b9_7f4a_7c15))).next_u64()
}

#[cfg(test)]
mod tests {
    use super::reply::{Turn, split_turn};
    use super::request::{fold_tools, parse_messages};
    use super::*;
    use expect_test::expect;

    fn shape(turn: &Turn) -> String {
        let calls: Vec<String> = turn
            .tool_calls
            .iter()
            .map(|c| format!("{:?}({:?})", c.name, c.arguments))
            .collect();
        format!(
            "content={:?} calls=[{}] finish={}",
            turn.content,
            calls.join(", "),
            turn.finish_reason
        )
    }

    #[test]
    fn replies_split_into_content_and_tool_calls() {
        let cases = [
            ("Paris is the capital of France.", true),
            ("Paris is the capital", false),
            (
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                true,
            ),
            (
                "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": 1}}\n</tool_call>",
                true,
            ),
            (
                "Before <tool_call>{not json}</tool_call> middle <tool_call>{\"name\": \"ok\", \"arguments\": {}}</tool_call> after",
                true,
            ),
            ("<tool_call>{\"name\": \"cut", false),
        ];
        let lines: Vec<String> = cases
            .iter()
            .map(|(text, stopped)| shape(&split_turn(text, *stopped)))
            .collect();
        expect![[r#"
            content="Paris is the capital of France." calls=[] finish=stop
            content="Paris is the capital" calls=[] finish=length
            content="" calls=["get_weather"("{\"city\":\"Paris\"}")] finish=tool_calls
            content="Let me check." calls=["a"("{}"), "b"("{\"x\":1}")] finish=tool_calls
            content="Before <tool_call>{not json}</tool_call> middle  after" calls=["ok"("{}")] finish=tool_calls
            content="<tool_call>{\"name\": \"cut" calls=[] finish=length"#]]
        .assert_eq(&lines.join("\n"));
    }

    fn check_request(body: Value) -> String {
        match parse_chat_call(&body) {
            Ok(call) => format!(
                "ok: {} messages, {} tools, t={} top_p={} max={:?} stop={:?} seed={:?}{}",
                call.messages.len(),
                call.tools.len(),
                call.temperature,
                call.top_p,
                call.max_tokens,
                call.stop,
                call.seed,
                if call.stream {
                    format!(" stream=true usage={}", call.include_usage)
                } else {
                    String::new()
                }
            ),
            Err(err) => format!("{} {:?}: {}", err.status.as_u16(), err.param, err.message),
        }
    }

    #[test]
    fn bad_requests_name_the_field() {
        let user = json!([{"role": "user", "content": "hi"}]);
        let lines = [
            check_request(
                json!({"messages": user, "temperature": 0, "max_tokens": 8, "stop": "\n", "seed": 3}),
            ),
            check_request(
                json!({"messages": user, "max_completion_tokens": 4, "max_tokens": 9, "n": 1, "stream": false}),
            ),
            check_request(json!({"messages": []})),
            check_request(json!({"model": "m"})),
            check_request(json!({"messages": [{"role": "robot", "content": "hi"}]})),
            check_request(json!({"messages": [{"role": "user", "content": 3}]})),
            check_request(
                json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            ),
            check_request(json!({"messages": user, "temperature": "hot"})),
            check_request(json!({"messages": user, "temperature": 3})),
            check_request(json!({"messages": user, "max_tokens": 0})),
            check_request(json!({"messages": user, "n": 2})),
            check_request(json!({"messages": user, "stream": true})),
            check_request(json!({"messages": user, "stream": "yes"})),
            check_request(json!({"messages": user, "stream_options": {"include_usage": true}})),
            check_request(
                json!({"messages": user, "stream": true, "stream_options": {"include_usage": 1}}),
            ),
            check_request(json!({"messages": user, "stop": [1]})),
            check_request(
                json!({"messages": user, "tools": [{"type": "function", "function": {"description": "x"}}]}),
            ),
            check_request(json!({"messages": user, "tool_choice": "required"})),
            check_request(
                json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]}),
            ),
            check_request(json!([1, 2])),
        ];
        expect![[r#"
            ok: 1 messages, 0 tools, t=0 top_p=1 max=Some(8) stop=["\n"] seed=Some(3)
            ok: 1 messages, 0 tools, t=1 top_p=1 max=Some(4) stop=[] seed=None
            400 Some("messages"): must hold at least one message
            400 Some("messages"): is required
            400 Some("messages[0].role"): "robot" is not a role; use system, developer, user, assistant or tool
            400 Some("messages[0].content"): must be a string or a list of text parts, not 3
            400 Some("messages[0].content[0]"): only text parts ({"type": "text", "text": ...}) are supported, not image_url
            400 Some("temperature"): must be a number from 0 to 2, not "hot"
            400 Some("temperature"): must be a number from 0 to 2, not 3
            400 Some("max_tokens"): must be a whole number of at least 1, not 0
            400 Some("n"): n = 2 is not supported; this server returns one choice (n = 1)
            ok: 1 messages, 0 tools, t=1 top_p=1 max=None stop=[] seed=None stream=true usage=false
            400 Some("stream"): must be true or false, not "yes"
            400 Some("stream_options"): stream_options are only allowed with stream: true
            400 Some("stream_options.include_usage"): must be true or false, not 1
            400 Some("stop[0]"): must be a string, not 1
            400 Some("tools[0].function.name"): must be a non-empty string
            400 Some("tool_choice"): "required" is not supported; use "auto" or "none"
            400 Some("messages[0].tool_calls[0].function.arguments"): must be a string holding a JSON object, not "{oops"
            400 None: the request body must be a JSON object"#]]
        .assert_eq(&lines.join("\n"));
    }

    #[test]
    fn tools_fold_into_turns_a_plain_template_renders() {
        let messages = parse_messages(Some(&json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"temp_c\": 21}"},
            {"role": "tool", "tool_call_id": "c2", "content": "{\"temp_c\": 25}"},
            {"role": "assistant", "content": "Paris 21 °C, Rome 25 °C."}
        ])))
        .expect("a valid conversation");
        let tools = vec![
            json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}),
        ];
        let folded = fold_tools(&messages, &tools);
        expect![[r#"
            [
              {
                "role": "system",
                "content": "Be brief.\n\n# Tools\n\nTo call a tool, write <tool_call>\n{\"name\": <tool-name>, \"arguments\": <arguments-object>}\n</tool_call>, one block per call.\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\"}}}\n</tools>"
              },
              {
                "role": "user",
                "content": "Weather in Paris and Rome?"
              },
              {
                "role": "assistant",
                "content": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"
              },
              {
                "role": "user",
                "content": "<tool_response>\n{\"temp_c\": 21}\n</tool_response>\n<tool_response>\n{\"temp_c\": 25}\n</tool_response>"
              },
              {
                "role": "assistant",
                "content": "Paris 21 °C, Rome 25 °C."
              }
            ]"#]]
        .assert_eq(&serde_json::to_string_pretty(&folded).expect("JSON prints"));
    }

    #[test]
    fn requests_read_into_the_clients_wire_type_and_back() {
        // Arguments sent as a JSON text or as an object read alike; the template form has
        // them as an object, and a tool message keeps its call id and name.
        let as_text = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}
        ]});
        let mut as_object = as_text.clone();
        as_object["tool_calls"][0]["function"]["arguments"] = json!({"x": 1});
        let tool = json!({"role": "tool", "tool_call_id": "c1", "name": "f", "content": "2"});
        let read = parse_messages(Some(&json!([as_text, as_object, tool]))).expect("valid");
        assert_eq!(
            read[0].tool_calls[0].arguments_object(),
            read[1].tool_calls[0].arguments_object()
        );
        assert_eq!(
            read[0].to_template_json(),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
            ]})
        );
        assert_eq!(read[1].to_template_json(), read[0].to_template_json());
        assert_eq!(
            read[2].to_template_json(),
            json!({"role": "tool", "content": "2", "tool_call_id": "c1", "name": "f"})
        );
        // The client writes the same message back in OpenAI's request form.
        assert_eq!(read[2].to_json(), tool);
    }
}
