//! `envace serve-model`: our own policy behind an OpenAI-compatible HTTP endpoint, so that a
//! trained checkpoint can play the judge, the external simulator, or be evaluated by any tool
//! that speaks the chat-completions API.
//!
//! Routes: `POST /v1/chat/completions`, `GET /v1/models`, `GET /health`.
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
//!   `max_batch` at once (quantised weights decode the batch's rows one after another). A request's `seed` makes it reproducible when it runs alone; in a
//!   batch, row `r` draws from the stream of `(seed, r)`.
//! - Bad requests get a 400 with an OpenAI-style `{"error": {"message", "type", "param"}}`
//!   naming the field. Not supported, with a 400 that says so: `n` other than 1, `stream: true`,
//!   `logprobs: true`, `tool_choice` other than `"auto"` / `"none"`. `response_format` is
//!   accepted and not enforced. Unknown fields are ignored, as vLLM does.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use candle_core::{DType, Device};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Map, Value, json};

use crate::chat::{ChatTemplate, ToolCall, parse_tool_calls};
use crate::env::pyjson;
use crate::error::{Error, Result};
use crate::model::{Generated, Gguf, Policy, QuantizedLlama, Sampling, TransformerConfig};
use crate::store::Store;
use crate::tokenize::{self, Tokenizer};

/// Tokens that end an assistant turn in the chat formats we know, used as stop tokens when the
/// vocabulary has them.
const END_OF_TURN_TOKENS: [&str; 4] = ["<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>"];

/// The weights a server decodes with.
enum Weights {
    /// A policy on `f32`/`bf16` tensors, decoded in batches.
    Dense(Policy),
    /// A GGUF Llama kept in its quantisation, decoded one row at a time.
    Quantized(Box<QuantizedLlama>),
}

impl Weights {
    /// Decodes `prompts` as [`Policy::generate`] does (row `r` draws from the stream of
    /// `(seed, r)`).
    fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        max_new_tokens: usize,
        stop_tokens: &[u32],
        sampling: &Sampling,
    ) -> Result<Vec<Generated>> {
        match self {
            Weights::Dense(policy) => {
                policy.generate(prompts, max_new_tokens, stop_tokens, sampling)
            }
            Weights::Quantized(model) => prompts
                .iter()
                .enumerate()
                .map(|(row, prompt)| {
                    model.generate(prompt, max_new_tokens, stop_tokens, sampling, row as u64)
                })
                .collect(),
        }
    }

    fn describe(&self) -> String {
        match self {
            Weights::Dense(policy) => format!(
                "{:?} policy, {} parameters in {:?}",
                policy.architecture(),
                policy.n_params(),
                policy.dtype()
            ),
            Weights::Quantized(model) => {
                format!("quantised GGUF weights on {}", model.backend_name())
            }
        }
    }
}

/// A policy with its tokenizer and chat template, ready to serve.
pub struct LoadedModel {
    name: String,
    source: PathBuf,
    weights: Weights,
    tokenizer: Tokenizer,
    template: ChatTemplate,
    template_knows_tools: bool,
    stop_tokens: Vec<u32>,
    max_context_tokens: usize,
}

impl LoadedModel {
    /// Loads a model on the CPU: a `.gguf` file (weights kept quantised, tokenizer and chat
    /// template from its metadata) or a Hugging Face folder in f32 (`config.json`, safetensors
    /// weights, `tokenizer.json`, and `tokenizer_config.json` for the chat template; without
    /// one, EnvACE's ChatML template is used).
    pub fn from_path(path: &Path) -> Result<Self> {
        Self::from_path_on(path, &Device::Cpu, DType::F32)
    }

    /// [`LoadedModel::from_path`] on `device`, a folder's weights in `dtype`.
    pub fn from_path_on(path: &Path, device: &Device, dtype: DType) -> Result<Self> {
        Self::load(path, device, dtype, true)
    }

    /// [`LoadedModel::from_path`], but a `.gguf` file's weights are dequantised to f32 (slower;
    /// what training sees).
    pub fn from_path_dequantized(path: &Path) -> Result<Self> {
        Self::load(path, &Device::Cpu, DType::F32, false)
    }

    fn load(path: &Path, device: &Device, dtype: DType, keep_quantized: bool) -> Result<Self> {
        let what = path.display().to_string();
        if !path.exists() {
            return Err(Error::Serve {
                what,
                message: "no such file or folder; pass a .gguf file or a Hugging Face model folder"
                    .to_owned(),
            });
        }
        if path.is_dir() {
            return Self::from_hf_dir(path, device, dtype);
        }
        if !is_gguf(path)? {
            return Err(Error::Serve {
                what,
                message: "unsupported model format: expected a .gguf file or a Hugging Face folder (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)".to_owned(),
            });
        }
        let gguf = Gguf::open(path)?;
        let config = gguf.transformer_config()?;
        let weights = if keep_quantized {
            Weights::Quantized(Box::new(gguf.load_quantized(device)?))
        } else {
            Weights::Dense(gguf.load_policy(device, dtype)?)
        };
        let tokenizer = gguf.tokenizer()?;
        let (template, template_knows_tools) = match gguf.chat_template() {
            Some(source) => (ChatTemplate::from_gguf(&gguf)?, knows_tools(&source)),
            None => {
                tracing::warn!(path = %what, "the GGUF has no chat template; using EnvACE's ChatML");
                (ChatTemplate::chatml()?, true)
            }
        };
        let eos = gguf.special_token("tokenizer.ggml.eos_token_id");
        let name = path
            .file_stem()
            .map_or_else(|| what.clone(), |s| s.to_string_lossy().into_owned());
        Ok(Self::assemble(
            name,
            path,
            &config,
            weights,
            tokenizer,
            template,
            template_knows_tools,
            eos.as_deref(),
        ))
    }

    fn from_hf_dir(dir: &Path, device: &Device, dtype: DType) -> Result<Self> {
        for required in [crate::model::CONFIG_FILE, tokenize::TOKENIZER_FILE] {
            if !dir.join(required).is_file() {
                return Err(Error::Serve {
                    what: dir.display().to_string(),
                    message: format!(
                        "this folder has no {required}; a Hugging Face model folder needs config.json, model.safetensors (or an index and shards), tokenizer.json, and tokenizer_config.json for its chat template"
                    ),
                });
            }
        }
        let policy = Policy::load(dir, device, dtype)?;
        let tokenizer = tokenize::load(&dir.join(tokenize::TOKENIZER_FILE))?;
        let config_path = dir.join("tokenizer_config.json");
        let tokenizer_config: Option<Value> = if config_path.is_file() {
            let text =
                std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
            Some(
                serde_json::from_str(&text).map_err(|e| Error::ChatTemplate {
                    source_name: config_path.display().to_string(),
                    message: format!("not valid JSON: {e}"),
                })?,
            )
        } else {
            None
        };
        let template_source = tokenizer_config
            .as_ref()
            .and_then(|c| c.get("chat_template"))
            .map(Value::to_string);
        let (template, template_knows_tools) = match template_source {
            Some(source) => (
                ChatTemplate::from_tokenizer_config(&config_path)?,
                knows_tools(&source),
            ),
            None => {
                tracing::warn!(folder = %dir.display(), "no chat_template in tokenizer_config.json; using EnvACE's ChatML");
                (ChatTemplate::chatml()?, true)
            }
        };
        let eos = tokenizer_config
            .as_ref()
            .and_then(|c| c.get("eos_token"))
            .and_then(|t| match t {
                Value::String(text) => Some(text.clone()),
                Value::Object(added) => added
                    .get("content")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                _ => None,
            });
        let name = dir.file_name().map_or_else(
            || dir.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        let config = policy.config().clone();
        Ok(Self::assemble(
            name,
            dir,
            &config,
            Weights::Dense(policy),
            tokenizer,
            template,
            template_knows_tools,
            eos.as_deref(),
        ))
    }

    /// The latest checkpoint of `run` (an id, or the newest run with that name) in `store`; a
    /// relative checkpoint path is taken from the store file's folder.
    pub fn from_run(store: &Store, run: &str) -> Result<Self> {
        let view = store.view();
        let record = view.find_run(run)?;
        let checkpoints = view.checkpoints(record.id)?;
        let Some(latest) = checkpoints.last() else {
            return Err(Error::Serve {
                what: format!("run {run:?}"),
                message: format!(
                    "run {} ({}) has no checkpoint yet; `envace runs show {}` lists what it saved",
                    record.id, record.name, record.id
                ),
            });
        };
        let mut path = PathBuf::from(&latest.path);
        if path.is_relative()
            && let Some(dir) = store.path().parent()
        {
            path = dir.join(path);
        }
        let model = Self::from_path(&path)?;
        Ok(model.with_name(format!("{}/step-{}", record.name, latest.step)))
    }

    fn assemble(
        name: String,
        source: &Path,
        config: &TransformerConfig,
        weights: Weights,
        tokenizer: Tokenizer,
        template: ChatTemplate,
        template_knows_tools: bool,
        eos_text: Option<&str>,
    ) -> Self {
        let mut stop_tokens = config.eos_token_ids.clone();
        let texts = eos_text.into_iter().chain(END_OF_TURN_TOKENS);
        for text in texts {
            if let Some(id) = tokenizer.token_to_id(text)
                && !stop_tokens.contains(&id)
            {
                stop_tokens.push(id);
            }
        }
        let max_context_tokens = config.max_position_embeddings;
        LoadedModel {
            name,
            source: source.to_path_buf(),
            weights,
            tokenizer,
            template,
            template_knows_tools,
            stop_tokens,
            max_context_tokens,
        }
    }

    /// The name `/v1/models` lists and replies carry.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same model under another name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The file or folder it was loaded from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// Tokens that end a reply.
    pub fn stop_tokens(&self) -> &[u32] {
        &self.stop_tokens
    }

    /// The prompt text the model would see for a chat-completions request `body` (the JSON
    /// the endpoint receives): for checking what a conversation renders to. A bad request is
    /// an error naming the field, as the endpoint's 400 does.
    pub fn render_request(&self, body: &Value) -> Result<String> {
        let to_error = |err: ApiError| Error::Serve {
            what: match &err.param {
                Some(param) => format!("request field {param}"),
                None => "request".to_owned(),
            },
            message: err.message,
        };
        let call = parse_chat_call(body).map_err(to_error)?;
        render_prompt(&self.template, self.template_knows_tools, &call).map_err(to_error)
    }

    /// What decodes: the architecture, size and dtype of a policy, or the kernels that run
    /// quantised weights (e.g. `quantised GGUF weights on native Avx2`).
    pub fn weights(&self) -> String {
        self.weights.describe()
    }

    /// The next-token logits after `prompt` (f32, one per vocabulary entry), from the weights
    /// the server decodes with.
    pub fn next_token_logits(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
        match &mut self.weights {
            Weights::Dense(policy) => policy.next_token_logits(prompt),
            Weights::Quantized(model) => model.forward(prompt, 0),
        }
    }

    /// Whether the chat template renders tools itself (else they are folded into messages).
    pub fn template_knows_tools(&self) -> bool {
        self.template_knows_tools
    }
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The weights are left out: they would print megabytes.
        f.debug_struct("LoadedModel")
            .field("name", &self.name)
            .field("source", &self.source)
            .field("weights", &self.weights.describe())
            .field("template_knows_tools", &self.template_knows_tools)
            .field("stop_tokens", &self.stop_tokens)
            .field("max_context_tokens", &self.max_context_tokens)
            .finish_non_exhaustive()
    }
}

/// Whether a chat template's source refers to tools.
fn knows_tools(template_source: &str) -> bool {
    template_source.contains("tools")
}

fn is_gguf(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    Ok(file.read_exact(&mut magic).is_ok() && &magic == b"GGUF")
}

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
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_batch: 8,
            default_max_tokens: 512,
            batch_window: Duration::from_millis(5),
            max_body_bytes: 16 << 20,
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

/// One generation request on its way to the worker.
struct Job {
    prompt: Vec<u32>,
    max_new_tokens: usize,
    sampling: Sampling,
    reply: tokio::sync::oneshot::Sender<std::result::Result<Generated, String>>,
}

impl Job {
    /// Requests with equal keys can share one batched generation.
    fn batch_key(&self) -> Option<(u64, u64, u64)> {
        if self.sampling.temperature <= 0.0 {
            None
        } else {
            Some((
                self.sampling.temperature.to_bits(),
                self.sampling.top_p.to_bits(),
                self.sampling.seed,
            ))
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

/// Serves `model` at `addr` (port 0 picks a free one) until shut down. Binding an address that
/// is not loopback serves the network: the endpoint has no authentication.
pub fn serve(model: LoadedModel, addr: SocketAddr, options: &ServeOptions) -> Result<ModelServer> {
    let what = format!("address {addr}");
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
    if !local.ip().is_loopback() {
        tracing::warn!(%local, "serving beyond this machine: the endpoint has no authentication");
    }
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
                            tokio::spawn(async move {
                                let service = hyper::service::service_fn(move |req| {
                                    let state = Arc::clone(&state);
                                    async move { Ok::<_, Infallible>(route(&state, req).await) }
                                });
                                let io = hyper_util::rt::TokioIo::new(stream);
                                let _ = hyper::server::conn::http1::Builder::new()
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

/// The model worker: takes waiting jobs, generates for those that sample alike in one batch,
/// answers each, until every sender of the queue is gone.
fn run_worker(
    weights: &mut Weights,
    stop_tokens: &[u32],
    queue: &mpsc::Receiver<Job>,
    max_batch: usize,
    window: Duration,
    counters: &Counters,
) {
    let mut pending: VecDeque<Job> = VecDeque::new();
    loop {
        if pending.is_empty() {
            match queue.recv() {
                Ok(job) => pending.push_back(job),
                Err(_) => return,
            }
            if !window.is_zero() {
                std::thread::sleep(window);
            }
        }
        while let Ok(job) = queue.try_recv() {
            pending.push_back(job);
        }
        // A request whose connection is gone needs no generation.
        pending.retain(|job| !job.reply.is_closed());
        let Some(first) = pending.front() else {
            continue;
        };
        let key = first.batch_key();
        let sampling = first.sampling.clone();
        let mut batch = Vec::new();
        let mut rest = VecDeque::new();
        for job in pending.drain(..) {
            if batch.len() < max_batch && job.batch_key() == key {
                batch.push(job);
            } else {
                rest.push_back(job);
            }
        }
        pending = rest;
        let prompts: Vec<Vec<u32>> = batch.iter().map(|job| job.prompt.clone()).collect();
        let max_new_tokens = batch
            .iter()
            .map(|job| job.max_new_tokens)
            .max()
            .unwrap_or(1);
        counters.n_batches.fetch_add(1, Ordering::Relaxed);
        counters
            .max_batch_seen
            .fetch_max(batch.len() as u64, Ordering::Relaxed);
        tracing::debug!(
            batch = batch.len(),
            max_new_tokens,
            queued = pending.len(),
            "generating"
        );
        // A panic inside the model fails this batch only; the server goes on.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            weights.generate(&prompts, max_new_tokens, stop_tokens, &sampling)
        }));
        let results: Vec<std::result::Result<Generated, String>> = match outcome {
            Ok(Ok(generated)) => generated.into_iter().map(Ok).collect(),
            Ok(Err(err)) => vec![Err(err.to_string()); batch.len()],
            Err(_) => vec![Err("the model panicked while generating".to_owned()); batch.len()],
        };
        for (job, result) in batch.into_iter().zip(results) {
            let result = result.map(|mut generated| {
                generated.tokens.truncate(job.max_new_tokens);
                generated.logprobs.truncate(job.max_new_tokens);
                generated
            });
            // The requester may have gone away meanwhile: nothing to answer then.
            let _ = job.reply.send(result);
        }
    }
}

/// An OpenAI-style error reply.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
    kind: &'static str,
    param: Option<String>,
}

impl ApiError {
    fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()),
        }
    }

    fn body(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
        }
    }

    fn response(&self) -> Response<Full<Bytes>> {
        json_response(
            self.status,
            &json!({"error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": Value::Null,
            }}),
        )
    }
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

async fn route(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let method = req.method().clone();
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
        ("/v1/chat/completions", Method::POST) => match chat_completion(state, req).await {
            Ok(value) => json_response(StatusCode::OK, &value),
            Err(err) => err.response(),
        },
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

/// A validated chat-completions request.
#[derive(Debug)]
struct ChatCall {
    /// Messages in the form Hugging Face templates read.
    messages: Vec<Value>,
    /// OpenAI tool objects.
    tools: Vec<Value>,
    temperature: f64,
    top_p: f64,
    max_tokens: Option<usize>,
    stop: Vec<String>,
    seed: Option<u64>,
}

async fn chat_completion(
    state: &State,
    req: Request<Incoming>,
) -> std::result::Result<Value, ApiError> {
    let limit = state.options.max_body_bytes;
    let bytes = match Limited::new(req.into_body(), limit).collect().await {
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
    state
        .jobs
        .send(Job {
            prompt,
            max_new_tokens,
            sampling,
            reply,
        })
        .map_err(|_| worker_gone())?;
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
        message.insert("tool_calls".to_owned(), Value::Array(turn.tool_calls));
    }
    Ok(json!({
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
    }))
}

/// The prompt text of a request: the conversation through the chat template, tools folded
/// into the turns when the template does not render them.
fn render_prompt(
    template: &ChatTemplate,
    template_knows_tools: bool,
    call: &ChatCall,
) -> std::result::Result<String, ApiError> {
    let (messages, tools) = if template_knows_tools {
        (call.messages.clone(), call.tools.clone())
    } else {
        (fold_tools(&call.messages, &call.tools), Vec::new())
    };
    template.render(&messages, &tools, true).map_err(|e| {
        ApiError::invalid(
            "messages",
            format!("the chat template rejects this conversation: {e}"),
        )
    })
}

fn worker_gone() -> ApiError {
    ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: "the model worker has stopped; the server is shutting down".to_owned(),
        kind: "server_error",
        param: None,
    }
}

/// A reply's message parts.
#[derive(Debug, PartialEq)]
struct Turn {
    content: String,
    tool_calls: Vec<Value>,
    finish_reason: &'static str,
}

/// Decodes the generated tokens into content, tool calls and a finish reason.
fn finish_turn(
    state: &State,
    tokens: &[u32],
    max_new_tokens: usize,
    stop: &[String],
) -> Result<Turn> {
    let ended_by_token = tokens.last().is_some_and(|t| state.stop_tokens.contains(t));
    let text_tokens = if ended_by_token {
        &tokens[..tokens.len() - 1]
    } else {
        tokens
    };
    let text = tokenize::decode(&state.tokenizer, text_tokens)?;
    let cut = stop
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()))
        .min();
    let (text, stopped) = match cut {
        Some(at) => (&text[..at], true),
        None => (
            text.as_str(),
            ended_by_token || tokens.len() < max_new_tokens,
        ),
    };
    Ok(split_turn(text, stopped))
}

/// Splits generated text into content and OpenAI tool calls; malformed blocks stay in the
/// content as they were written.
fn split_turn(text: &str, stopped: bool) -> Turn {
    let parsed = parse_tool_calls(text);
    // Hide each malformed block behind a placeholder that no tag can match, parse again so
    // that only the well-formed blocks are taken out, then put the blocks back.
    let mut masked = String::with_capacity(text.len());
    let mut originals = Vec::new();
    let mut pos = 0;
    for err in parsed.calls.iter().filter_map(|c| c.as_ref().err()) {
        let (start, end) = err.span;
        if start < pos || end > text.len() {
            continue;
        }
        masked.push_str(&text[pos..start]);
        masked.push_str(&format!("\u{E000}{}\u{E001}", originals.len()));
        originals.push(&text[start..end]);
        pos = end;
    }
    masked.push_str(&text[pos..]);
    let reparsed = parse_tool_calls(&masked);
    let mut content = reparsed.content.clone();
    for (idx, original) in originals.iter().enumerate() {
        content = content.replace(&format!("\u{E000}{idx}\u{E001}"), original);
    }
    let tool_calls: Vec<Value> = reparsed
        .valid_calls()
        .map(|call| {
            json!({
                "id": format!("call_{:016x}", fresh_u64()),
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": Value::Object(call.arguments.clone()).to_string(),
                },
            })
        })
        .collect();
    let finish_reason = match (stopped, tool_calls.is_empty()) {
        (false, _) => "length",
        (true, false) => "tool_calls",
        (true, true) => "stop",
    };
    Turn {
        content,
        tool_calls,
        finish_reason,
    }
}

/// Checks a request body and converts its messages to the Hugging Face form.
fn parse_chat_call(body: &Value) -> std::result::Result<ChatCall, ApiError> {
    let Value::Object(body) = body else {
        return Err(ApiError::body("the request body must be a JSON object"));
    };
    if let Some(model) = body.get("model")
        && !model.is_string()
    {
        return Err(ApiError::invalid(
            "model",
            format!("must be a string, not {model}"),
        ));
    }
    if let Some(n) = body.get("n").filter(|v| !v.is_null())
        && n.as_u64() != Some(1)
    {
        return Err(ApiError::invalid(
            "n",
            format!("n = {n} is not supported; this server returns one choice (n = 1)"),
        ));
    }
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        return Err(ApiError::invalid(
            "stream",
            "streaming is not supported; send stream: false (or leave it out) for one JSON reply",
        ));
    }
    if body.get("logprobs").and_then(Value::as_bool) == Some(true) {
        return Err(ApiError::invalid(
            "logprobs",
            "logprobs are not returned by this server; leave logprobs out",
        ));
    }
    let tool_choice_none = match body.get("tool_choice") {
        None | Some(Value::Null) => false,
        Some(Value::String(choice)) if choice == "auto" => false,
        Some(Value::String(choice)) if choice == "none" => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "tool_choice",
                format!("{other} is not supported; use \"auto\" or \"none\""),
            ));
        }
    };
    let temperature = optional_number(body, "temperature", 0.0, 2.0)?.unwrap_or(1.0);
    let top_p = optional_number(body, "top_p", 0.0, 1.0)?.unwrap_or(1.0);
    if top_p <= 0.0 {
        return Err(ApiError::invalid("top_p", "must be greater than 0"));
    }
    let max_tokens = match optional_count(body, "max_completion_tokens")? {
        Some(n) => Some(n),
        None => optional_count(body, "max_tokens")?,
    };
    let stop = match body.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(idx, item)| {
                item.as_str().map(str::to_owned).ok_or_else(|| {
                    ApiError::invalid(
                        format!("stop[{idx}]"),
                        format!("must be a string, not {item}"),
                    )
                })
            })
            .collect::<std::result::Result<_, _>>()?,
        Some(other) => {
            return Err(ApiError::invalid(
                "stop",
                format!("must be a string or a list of strings, not {other}"),
            ));
        }
    };
    let seed = match body.get("seed") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .or_else(|| v.as_i64().map(|s| s as u64))
                .ok_or_else(|| ApiError::invalid("seed", format!("must be an integer, not {v}")))?,
        ),
    };
    if let Some(format) = body.get("response_format").filter(|v| !v.is_null()) {
        let kind = format.get("type").and_then(Value::as_str);
        if !matches!(kind, Some("text" | "json_object" | "json_schema")) {
            return Err(ApiError::invalid(
                "response_format.type",
                format!("must be \"text\", \"json_object\" or \"json_schema\", not {format}"),
            ));
        }
    }
    let tools = if tool_choice_none {
        Vec::new()
    } else {
        parse_tools(body.get("tools"))?
    };
    let messages = parse_messages(body.get("messages"))?;
    Ok(ChatCall {
        messages,
        tools,
        temperature,
        top_p,
        max_tokens,
        stop,
        seed,
    })
}

fn optional_number(
    body: &Map<String, Value>,
    field: &str,
    min: f64,
    max: f64,
) -> std::result::Result<Option<f64>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if (min..=max).contains(&x) => Ok(Some(x)),
            _ => Err(ApiError::invalid(
                field,
                format!("must be a number from {min} to {max}, not {v}"),
            )),
        },
    }
}

fn optional_count(
    body: &Map<String, Value>,
    field: &str,
) -> std::result::Result<Option<usize>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            _ => Err(ApiError::invalid(
                field,
                format!("must be a whole number of at least 1, not {v}"),
            )),
        },
    }
}

fn parse_tools(tools: Option<&Value>) -> std::result::Result<Vec<Value>, ApiError> {
    let items = match tools {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(ApiError::invalid(
                "tools",
                format!("must be a list of tools, not {other}"),
            ));
        }
    };
    for (idx, tool) in items.iter().enumerate() {
        let field = |name: &str| format!("tools[{idx}]{name}");
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            return Err(ApiError::invalid(
                field(".type"),
                "must be \"function\" (the only tool type served)",
            ));
        }
        let Some(function) = tool.get("function").filter(|f| f.is_object()) else {
            return Err(ApiError::invalid(field(".function"), "must be an object"));
        };
        match function.get("name").and_then(Value::as_str) {
            Some(name) if !name.trim().is_empty() => {}
            _ => {
                return Err(ApiError::invalid(
                    field(".function.name"),
                    "must be a non-empty string",
                ));
            }
        }
        if let Some(parameters) = function.get("parameters")
            && !parameters.is_object()
        {
            return Err(ApiError::invalid(
                field(".function.parameters"),
                "must be a JSON Schema object",
            ));
        }
    }
    Ok(items.clone())
}

/// The text of a message's `content`: a string, null, or a list of text parts.
fn content_text(content: Option<&Value>, field: &str) -> std::result::Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (idx, part) in parts.iter().enumerate() {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(piece)) => text.push_str(piece),
                    (kind, _) => {
                        return Err(ApiError::invalid(
                            format!("{field}[{idx}]"),
                            format!(
                                "only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported, not {}",
                                kind.unwrap_or("a part without a type")
                            ),
                        ));
                    }
                }
            }
            Ok(text)
        }
        Some(other) => Err(ApiError::invalid(
            field,
            format!("must be a string or a list of text parts, not {other}"),
        )),
    }
}

fn parse_messages(messages: Option<&Value>) -> std::result::Result<Vec<Value>, ApiError> {
    let items = match messages {
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid(
                "messages",
                "must hold at least one message",
            ));
        }
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("messages", "is required"));
        }
        Some(other) => {
            return Err(ApiError::invalid(
                "messages",
                format!("must be a list of messages, not {other}"),
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (idx, message) in items.iter().enumerate() {
        let field = |name: &str| format!("messages[{idx}]{name}");
        if !message.is_object() {
            return Err(ApiError::invalid(field(""), "must be an object"));
        }
        let role = match message.get("role").and_then(Value::as_str) {
            Some("developer") => "system",
            Some(role @ ("system" | "user" | "assistant" | "tool")) => role,
            Some(other) => {
                return Err(ApiError::invalid(
                    field(".role"),
                    format!(
                        "{other:?} is not a role; use system, developer, user, assistant or tool"
                    ),
                ));
            }
            None => return Err(ApiError::invalid(field(".role"), "is required")),
        };
        let content = content_text(message.get("content"), &field(".content"))?;
        let mut hf = Map::new();
        hf.insert("role".to_owned(), Value::from(role));
        hf.insert("content".to_owned(), Value::from(content));
        if role == "assistant" {
            let calls = match message.get("tool_calls") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(calls)) => calls.clone(),
                Some(other) => {
                    return Err(ApiError::invalid(
                        field(".tool_calls"),
                        format!("must be a list, not {other}"),
                    ));
                }
            };
            let mut hf_calls = Vec::with_capacity(calls.len());
            for (j, call) in calls.iter().enumerate() {
                let call_field = |name: &str| format!("messages[{idx}].tool_calls[{j}]{name}");
                let name = call
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .filter(|n| !n.trim().is_empty())
                    .ok_or_else(|| {
                        ApiError::invalid(
                            call_field(".function.name"),
                            "must be a non-empty string",
                        )
                    })?;
                let arguments = match call.get("function").and_then(|f| f.get("arguments")) {
                    Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                        Ok(Value::Object(args)) => args,
                        _ => {
                            return Err(ApiError::invalid(
                                call_field(".function.arguments"),
                                format!("must be a string holding a JSON object, not {text:?}"),
                            ));
                        }
                    },
                    Some(Value::Object(args)) => args.clone(),
                    None | Some(Value::Null) => Map::new(),
                    Some(other) => {
                        return Err(ApiError::invalid(
                            call_field(".function.arguments"),
                            format!("must be a JSON string, not {other}"),
                        ));
                    }
                };
                let mut hf_call = Map::new();
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    hf_call.insert("id".to_owned(), Value::from(id));
                }
                hf_call.insert("type".to_owned(), Value::from("function"));
                hf_call.insert(
                    "function".to_owned(),
                    json!({"name": name, "arguments": Value::Object(arguments)}),
                );
                hf_calls.push(Value::Object(hf_call));
            }
            if !hf_calls.is_empty() {
                hf.insert("tool_calls".to_owned(), Value::Array(hf_calls));
            }
        }
        if role == "tool" {
            for key in ["tool_call_id", "name"] {
                match message.get(key) {
                    None | Some(Value::Null) => {}
                    Some(Value::String(text)) => {
                        hf.insert(key.to_owned(), Value::from(text.clone()));
                    }
                    Some(other) => {
                        return Err(ApiError::invalid(
                            field(&format!(".{key}")),
                            format!("must be a string, not {other}"),
                        ));
                    }
                }
            }
        }
        out.push(Value::Object(hf));
    }
    Ok(out)
}

/// The messages with tools, tool calls and tool responses written into plain turns, for a
/// template that does not render them (see the module doc).
fn fold_tools(messages: &[Value], tools: &[Value]) -> Vec<Value> {
    let text = |m: &Value| {
        m.get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let role = |m: &Value| {
        m.get("role")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    let mut rest = messages;
    if !tools.is_empty() {
        let mut section = String::from(
            "# Tools\n\nTo call a tool, write <tool_call>\n{\"name\": <tool-name>, \"arguments\": <arguments-object>}\n</tool_call>, one block per call.\n<tools>",
        );
        for tool in tools {
            section.push('\n');
            section.push_str(&pyjson::dumps_with(tool, pyjson::Layout::CHAT));
        }
        section.push_str("\n</tools>");
        let system = match messages.first() {
            Some(first) if role(first) == "system" => {
                rest = &messages[1..];
                format!("{}\n\n{section}", text(first))
            }
            _ => section,
        };
        out.push(json!({"role": "system", "content": system}));
    }
    for message in rest {
        match role(message).as_str() {
            "assistant" => {
                let mut content = text(message);
                let calls = message
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for call in calls {
                    let function = call.get("function").cloned().unwrap_or(Value::Null);
                    let block = ToolCall {
                        name: function
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        arguments: function
                            .get("arguments")
                            .and_then(Value::as_object)
                            .cloned()
                            .unwrap_or_default(),
                    }
                    .to_block();
                    if !content.is_empty() {
                        content.push('\n');
                    }
                    content.push_str(&block);
                }
                out.push(json!({"role": "assistant", "content": content}));
            }
            "tool" => {
                let block = format!("<tool_response>\n{}\n</tool_response>", text(message));
                // Consecutive tool responses share one user turn.
                if let Some(last) = out.last_mut()
                    && last.get("tool_responses").is_some()
                    && let Some(Value::String(content)) = last.get_mut("content")
                {
                    content.push('\n');
                    content.push_str(&block);
                    continue;
                }
                out.push(json!({"role": "user", "content": block, "tool_responses": true}));
            }
            _ => out.push(message.clone()),
        }
    }
    for message in &mut out {
        if let Some(map) = message.as_object_mut() {
            map.remove("tool_responses");
        }
    }
    out
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
    use super::*;
    use expect_test::expect;

    fn shape(turn: &Turn) -> String {
        let calls: Vec<String> = turn
            .tool_calls
            .iter()
            .map(|c| format!("{}({})", c["function"]["name"], c["function"]["arguments"]))
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
                "ok: {} messages, {} tools, t={} top_p={} max={:?} stop={:?} seed={:?}",
                call.messages.len(),
                call.tools.len(),
                call.temperature,
                call.top_p,
                call.max_tokens,
                call.stop,
                call.seed
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
            400 Some("stream"): streaming is not supported; send stream: false (or leave it out) for one JSON reply
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
}
