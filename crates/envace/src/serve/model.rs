//! The model a server decodes with: a GGUF file on its quantised weights (or dequantised), a
//! Hugging Face folder or a run's checkpoint as a policy, with its tokenizer, chat template and
//! stop tokens.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use serde_json::Value;

use super::request::{ApiError, parse_chat_call, render_prompt};
use crate::chat::ChatTemplate;
use crate::error::{Error, Result};
use crate::model::{Generated, Gguf, Policy, QuantizedLlama, Sampling, TransformerConfig};
use crate::store::Store;
use crate::tokenize::{self, Tokenizer};

/// Tokens that end an assistant turn in the chat formats we know, used as stop tokens when the
/// vocabulary has them.
const END_OF_TURN_TOKENS: [&str; 4] = ["<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>"];

/// The weights a server decodes with.
pub(super) enum Weights {
    /// A policy on `f32`/`bf16` tensors, decoded in batches.
    Dense(Box<Policy>),
    /// A GGUF Llama kept in its quantisation, decoded one row at a time.
    Quantized(QuantizedLlama),
    /// The weights on a GPU through wgpu (a GGUF's Q4_1 / Q8_0 projections kept quantised),
    /// decoded in batches.
    #[cfg(feature = "wgpu")]
    Gpu(Box<crate::model::wgpu::GpuModel>),
}

impl Weights {
    /// Decodes `prompts` as [`Policy::generate`] does (row `r` draws from the stream of
    /// `(seed, r)`), handing each new token to `on_token(row, token)` as it is picked.
    pub(super) fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        max_new_tokens: usize,
        stop_tokens: &[u32],
        sampling: &Sampling,
        on_token: &mut (dyn FnMut(usize, u32) + Send),
    ) -> Result<Vec<Generated>> {
        match self {
            Weights::Dense(policy) => {
                policy.generate_streaming(prompts, max_new_tokens, stop_tokens, sampling, on_token)
            }
            Weights::Quantized(model) => prompts
                .iter()
                .enumerate()
                .map(|(row, prompt)| {
                    model.generate_streaming(
                        prompt,
                        max_new_tokens,
                        stop_tokens,
                        sampling,
                        row as u64,
                        &mut |token| on_token(row, token),
                    )
                })
                .collect(),
            #[cfg(feature = "wgpu")]
            Weights::Gpu(model) => crate::model::wgpu::generate_streaming(
                model,
                prompts,
                max_new_tokens,
                stop_tokens,
                sampling,
                on_token,
            ),
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
            #[cfg(feature = "wgpu")]
            Weights::Gpu(model) => format!("weights on wgpu: {}", model.gpu().describe()),
        }
    }
}

/// A policy with its tokenizer and chat template, ready to serve.
pub struct LoadedModel {
    pub(super) name: String,
    pub(super) source: PathBuf,
    pub(super) weights: Weights,
    pub(super) tokenizer: Tokenizer,
    pub(super) template: ChatTemplate,
    pub(super) template_knows_tools: bool,
    pub(super) stop_tokens: Vec<u32>,
    pub(super) max_context_tokens: usize,
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
        let named_gguf = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        let magic = first_bytes(path)?;
        if named_gguf && magic != *b"GGUF" {
            let found = if magic.is_empty() {
                "it is empty".to_owned()
            } else {
                format!(
                    "it starts with {:?}, not GGUF's magic \"GGUF\" (damaged, or another format renamed)",
                    String::from_utf8_lossy(&magic)
                )
            };
            return Err(Error::Serve {
                what,
                message: format!("not a GGUF file: {found}"),
            });
        }
        if magic != *b"GGUF" {
            return Err(Error::Serve {
                what,
                message: "unsupported model format: expected a .gguf file or a Hugging Face folder (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)".to_owned(),
            });
        }
        let gguf = Gguf::open(path)?;
        let config = gguf.transformer_config()?;
        let weights = if keep_quantized {
            Weights::Quantized(gguf.load_quantized(device)?)
        } else {
            Weights::Dense(Box::new(gguf.load_policy(device, dtype)?))
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
            (template, template_knows_tools),
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
            Weights::Dense(Box::new(policy)),
            tokenizer,
            (template, template_knows_tools),
            eos.as_deref(),
        ))
    }

    /// The latest checkpoint of `run` (an id, or the newest run with that name) in `store`; a
    /// relative checkpoint path is taken from the store file's folder.
    pub fn from_run(store: &Store, run: &str) -> Result<Self> {
        Self::from_run_at(store, run, None)
    }

    /// The checkpoint of `run` at `step` (its latest when `None`), as [`LoadedModel::from_run`].
    pub fn from_run_at(store: &Store, run: &str, step: Option<u64>) -> Result<Self> {
        let view = store.view();
        let record = view.find_run(run)?;
        let checkpoints = view.checkpoints(record.id)?;
        let chosen = match step {
            None => checkpoints.last(),
            Some(step) => checkpoints.iter().find(|c| c.step == step),
        };
        let Some(latest) = chosen else {
            let saved: Vec<String> = checkpoints.iter().map(|c| c.step.to_string()).collect();
            return Err(Error::Serve {
                what: format!("run {run:?}"),
                message: match step {
                    None => format!(
                        "run {} ({}) has no checkpoint yet; `envace runs show {}` lists what it saved",
                        record.id, record.name, record.id
                    ),
                    Some(step) if saved.is_empty() => format!(
                        "run {} ({}) has no checkpoint, so none at step {step}",
                        record.id, record.name
                    ),
                    Some(step) => format!(
                        "run {} ({}) has no checkpoint at step {step}; its checkpoints are at steps {}",
                        record.id,
                        record.name,
                        saved.join(", ")
                    ),
                },
            });
        };
        let mut path = PathBuf::from(&latest.path);
        if path.is_relative()
            && let Some(dir) = store.path().parent()
        {
            path = dir.join(path);
        }
        let name = format!("{}/step-{}", record.name, latest.step);
        // A training checkpoint: the policy in `model/`, the tokenizer beside it, and the chat
        // template of the run's model source (what its rollouts were rendered with).
        if path.join("model").is_dir() && path.join("state.json").is_file() {
            let config = crate::config::parse(
                &record.config_toml,
                &format!("the config of run {}", record.id),
            )?;
            let (policy, tokenizer, template) =
                crate::model::checkpoint::load(&path, &config, &Device::Cpu, DType::F32)?;
            let model_config = policy.config().clone();
            let knows_tools = template.mentions_tools();
            return Ok(Self::assemble(
                name,
                &path,
                &model_config,
                Weights::Dense(Box::new(policy)),
                tokenizer,
                (template, knows_tools),
                None,
            ));
        }
        let model = Self::from_path(&path)?;
        Ok(model.with_name(name))
    }

    fn assemble(
        name: String,
        source: &Path,
        config: &TransformerConfig,
        weights: Weights,
        tokenizer: Tokenizer,
        (template, template_knows_tools): (ChatTemplate, bool),
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
            #[cfg(feature = "wgpu")]
            Weights::Gpu(model) => {
                let gpu_error = |e: envace_gpu::Error| Error::Wgpu {
                    context: "the next-token logits".to_owned(),
                    message: e.to_string(),
                };
                let session = model.start(&[prompt.to_vec()], 1).map_err(gpu_error)?;
                model.logits(&session).map_err(gpu_error)
            }
        }
    }

    /// The same model with its weights moved to `gpu` (wgpu): a policy's tensors as f32, a
    /// GGUF's Q4_1 / Q8_0 projections as they are in the file (whatever `from_path` or
    /// `from_path_dequantized` loaded). Generation then runs there, in batches.
    #[cfg(feature = "wgpu")]
    pub fn onto_gpu(mut self, gpu: std::sync::Arc<crate::model::wgpu::Gpu>) -> Result<Self> {
        // Rotary angles for every position a request can reach.
        let positions = self.max_context_tokens.max(1);
        let model = match &self.weights {
            Weights::Dense(policy) => policy.to_gpu(gpu, positions)?,
            Weights::Quantized(_) => Gguf::open(&self.source)?.load_gpu(gpu, positions)?,
            Weights::Gpu(_) => return Ok(self),
        };
        self.weights = Weights::Gpu(Box::new(model));
        Ok(self)
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

/// Up to the first four bytes of the file at `path` (a GGUF file's magic).
fn first_bytes(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut magic = Vec::with_capacity(4);
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    file.take(4)
        .read_to_end(&mut magic)
        .map_err(|e| Error::io(path, e))?;
    Ok(magic)
}
