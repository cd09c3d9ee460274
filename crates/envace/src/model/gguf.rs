//! GGUF checkpoints (llama.cpp's format; SmolLM2-135M-Instruct ships as one): the model config,
//! tokenizer and chat template from the metadata, the weights dequantized into a trainable
//! [`Policy`], or kept quantized for fast inference ([`QuantizedLlama`]: our own Q4_1 / Q8_0
//! kernels on the CPU, candle-transformers' `quantized_llama` elsewhere).
//!
//! llama.cpp's converter stores `attn_q` / `attn_k` rows permuted for its interleaved RoPE;
//! [`Gguf::load_policy`] undoes that, so the policy uses the Hugging Face (rotate-half) layout
//! and saves as a checkpoint `transformers` loads.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;

use super::qllama::{QLayer, QLlama};
use super::quant::{QKind, QMatrix};
use super::{Generated, Policy, Sampling, TransformerConfig};
use crate::config::Architecture;
use crate::error::{Error, Result};
use crate::tokenize::{self, Tokenizer};

/// An opened GGUF file: its metadata and tensor directory (the tensors stay on disk until
/// loaded).
#[derive(Debug)]
pub struct Gguf {
    path: PathBuf,
    content: Content,
}

impl Gguf {
    /// Reads the header of the GGUF file at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let mut reader = open_reader(path)?;
        Self::read_from(&mut reader, path)
    }

    /// Reads a GGUF header from `reader`, which holds the file at `path` (named in errors).
    pub fn read_from<R: std::io::Read + std::io::Seek>(
        reader: &mut R,
        path: &Path,
    ) -> Result<Self> {
        let content = Content::read(reader).map_err(|e| Error::Weights {
            path: path.to_path_buf(),
            message: format!("not a readable GGUF file: {e}"),
        })?;
        Ok(Gguf {
            path: path.to_path_buf(),
            content,
        })
    }

    /// The file this was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's metadata and tensor directory.
    #[cfg(feature = "wgpu")]
    pub(crate) fn content(&self) -> &Content {
        &self.content
    }

    /// `general.architecture`, e.g. `llama`.
    pub fn architecture(&self) -> Result<String> {
        Ok(self.string("general.architecture")?.to_owned())
    }

    /// The model described by the `llama.*` metadata (the only architecture read so far).
    pub fn transformer_config(&self) -> Result<TransformerConfig> {
        let arch = self.architecture()?;
        if arch != "llama" {
            return Err(self.error(
                "general.architecture",
                &format!("{arch:?} is not supported; only \"llama\" GGUF files load"),
            ));
        }
        let usize_of = |key: &str| -> Result<usize> {
            let value = self.value(key)?;
            integer(value)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| self.error(key, &format!("{value:?} is not a count")))
        };
        let f64_or = |key: &str, default: f64| -> Result<f64> {
            match self.content.metadata.get(key) {
                None => Ok(default),
                Some(value) => number(value)
                    .ok_or_else(|| self.error(key, &format!("{value:?} is not a number"))),
            }
        };
        let hidden_size = usize_of("llama.embedding_length")?;
        let n_heads = usize_of("llama.attention.head_count")?;
        let n_kv_heads = match self.content.metadata.get("llama.attention.head_count_kv") {
            Some(_) => usize_of("llama.attention.head_count_kv")?,
            None => n_heads,
        };
        let head_dim = match self.content.metadata.get("llama.rope.dimension_count") {
            Some(_) => usize_of("llama.rope.dimension_count")?,
            None => hidden_size / n_heads.max(1),
        };
        let vocab_size = match self.content.metadata.get("llama.vocab_size") {
            Some(_) => usize_of("llama.vocab_size")?,
            None => self.strings("tokenizer.ggml.tokens")?.len(),
        };
        let optional_u32 = |key: &str| -> Result<Option<u32>> {
            match self.content.metadata.get(key) {
                None => Ok(None),
                Some(value) => integer(value)
                    .and_then(|v| u32::try_from(v).ok())
                    .map(Some)
                    .ok_or_else(|| self.error(key, &format!("{value:?} is not a token id"))),
            }
        };
        let eps = f64_or("llama.attention.layer_norm_rms_epsilon", 1e-5)?;
        Ok(TransformerConfig {
            architecture: Architecture::Llama,
            vocab_size,
            hidden_size,
            intermediate_size: usize_of("llama.feed_forward_length")?,
            n_layers: usize_of("llama.block_count")?,
            n_heads,
            n_kv_heads,
            head_dim,
            max_position_embeddings: match self.content.metadata.get("llama.context_length") {
                Some(_) => usize_of("llama.context_length")?,
                None => 2048,
            },
            rope_theta: f64_or("llama.rope.freq_base", 10_000.0)?,
            rope_scaling: None,
            // GGUF stores the epsilon as f32; round it back to the decimal it was written from
            // (9.99999974e-6 is 1e-5), as the Hugging Face config holds.
            rms_norm_eps: format!("{:e}", eps as f32).parse().unwrap_or(eps),
            tie_word_embeddings: !self.content.tensor_infos.contains_key("output.weight"),
            initializer_range: 0.02,
            bos_token_id: optional_u32("tokenizer.ggml.bos_token_id")?,
            eos_token_ids: optional_u32("tokenizer.ggml.eos_token_id")?
                .into_iter()
                .collect(),
        })
    }

    /// The tokenizer rebuilt from `tokenizer.ggml.*` (GPT-2-style byte-level BPE only).
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        let model = self.string("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(self.error(
                "tokenizer.ggml.model",
                &format!(
                    "{model:?} is not supported; only \"gpt2\" (byte-level BPE) tokenizers load"
                ),
            ));
        }
        let tokens = self.strings("tokenizer.ggml.tokens")?;
        let merges = self.strings("tokenizer.ggml.merges")?;
        let token_types = match self.content.metadata.get("tokenizer.ggml.token_type") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| integer(v).and_then(|v| i32::try_from(v).ok()))
                .collect::<Option<Vec<i32>>>()
                .ok_or_else(|| self.error("tokenizer.ggml.token_type", "holds a non-integer"))?,
            Some(_) => {
                return Err(self.error("tokenizer.ggml.token_type", "is not an array"));
            }
        };
        tokenize::from_gguf_vocab(
            &tokens,
            &merges,
            &token_types,
            &self.path.display().to_string(),
        )
    }

    /// The Jinja chat template (`tokenizer.chat_template`), when the file has one.
    pub fn chat_template(&self) -> Option<String> {
        self.content
            .metadata
            .get("tokenizer.chat_template")
            .and_then(|v| v.to_string().ok())
            .cloned()
    }

    /// The text of the token whose id the metadata `id_key` holds, e.g.
    /// `tokenizer.ggml.eos_token_id` → `<|im_end|>`.
    pub fn special_token(&self, id_key: &str) -> Option<String> {
        let id = usize::try_from(integer(self.content.metadata.get(id_key)?)?).ok()?;
        match self.content.metadata.get("tokenizer.ggml.tokens")? {
            Value::Array(tokens) => match tokens.get(id)? {
                Value::String(token) => Some(token.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// The weights dequantized to `dtype` on `device` as a trainable policy, with `attn_q` and
    /// `attn_k` un-permuted to the Hugging Face layout.
    pub fn load_policy(&self, device: &Device, dtype: DType) -> Result<Policy> {
        let cfg = self.transformer_config()?;
        let mut reader = open_reader(&self.path)?;
        let mut tensors = HashMap::new();
        for name in self.content.tensor_infos.keys() {
            let Some(hf_name) = hf_name(name) else {
                tracing::debug!(tensor = %name, "ignoring a GGUF tensor with no Hugging Face name");
                continue;
            };
            let weights_error = |message: String| Error::Weights {
                path: self.path.clone(),
                message: format!("tensor {name}: {message}"),
            };
            let tensor = self
                .content
                .tensor(&mut reader, name, &Device::Cpu)
                .and_then(|q| q.dequantize(&Device::Cpu))
                .map_err(|e| weights_error(e.to_string()))?;
            let tensor = if name.ends_with(".attn_q.weight") {
                unpermute_rope_rows(&tensor, cfg.n_heads)
            } else if name.ends_with(".attn_k.weight") {
                unpermute_rope_rows(&tensor, cfg.n_kv_heads)
            } else {
                Ok(tensor)
            }
            .map_err(|e| weights_error(e.to_string()))?;
            tensors.insert(hf_name, tensor);
        }
        Policy::from_tensors(cfg, tensors, device, dtype, &self.path)
    }

    /// The weights kept quantized, for inference. On the CPU, when every projection is Q4_1
    /// or Q8_0, our own kernels run them (see `qllama.rs`); otherwise candle-transformers'
    /// `quantized_llama` does ([`Gguf::load_quantized_candle`]).
    pub fn load_quantized(&self, device: &Device) -> Result<QuantizedLlama> {
        if device.is_cpu()
            && let Some(native) = self.load_native()?
        {
            return Ok(QuantizedLlama {
                backend: Backend::Native(Box::new(native)),
                device: device.clone(),
                vocab_size: self.transformer_config()?.vocab_size,
                cached: Vec::new(),
                canonical: 0,
            });
        }
        self.load_quantized_candle(device)
    }

    /// The weights kept quantized, run by candle-transformers' `quantized_llama` (any device,
    /// any quantisation); the reference our own kernels are compared with.
    pub fn load_quantized_candle(&self, device: &Device) -> Result<QuantizedLlama> {
        let cfg = self.transformer_config()?;
        let mut reader = open_reader(&self.path)?;
        // `from_gguf` consumes the header, so read it again (it is small).
        let content = Content::read(&mut reader).map_err(|e| Error::Weights {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        let weights =
            ModelWeights::from_gguf(content, &mut reader, device).map_err(|e| Error::Weights {
                path: self.path.clone(),
                message: e.to_string(),
            })?;
        Ok(QuantizedLlama {
            backend: Backend::Candle(Box::new(weights)),
            device: device.clone(),
            vocab_size: cfg.vocab_size,
            cached: Vec::new(),
            canonical: 0,
        })
    }

    /// The model on our own quantised kernels, or `None` when a projection or the embedding is
    /// in a quantisation they do not cover.
    fn load_native(&self) -> Result<Option<QLlama>> {
        let cfg = self.transformer_config()?;
        if cfg.rope_scaling.is_some() {
            return Ok(None);
        }
        let mut reader = open_reader(&self.path)?;
        let weights_error = |name: &str, message: String| Error::Weights {
            path: self.path.clone(),
            message: format!("tensor {name}: {message}"),
        };
        let mut read = |name: &str| {
            self.content
                .tensor(&mut reader, name, &Device::Cpu)
                .map_err(|e| weights_error(name, e.to_string()))
        };
        let mut matrix = |name: &str| -> Result<Option<QMatrix>> {
            let tensor = read(name)?;
            let kind = match tensor.dtype() {
                GgmlDType::Q4_1 => QKind::Q4_1,
                GgmlDType::Q8_0 => QKind::Q8_0,
                _ => return Ok(None),
            };
            let (rows, cols) = tensor
                .shape()
                .dims2()
                .map_err(|e| weights_error(name, e.to_string()))?;
            let bytes = tensor
                .data()
                .map_err(|e| weights_error(name, e.to_string()))?;
            QMatrix::from_gguf_bytes(kind, rows, cols, &bytes)
                .map(Some)
                .map_err(|e| weights_error(name, e))
        };
        let Some(embed) = matrix("token_embd.weight")? else {
            return Ok(None);
        };
        let head = if self.content.tensor_infos.contains_key("output.weight") {
            match matrix("output.weight")? {
                Some(head) => Some(head),
                None => return Ok(None),
            }
        } else {
            None
        };
        let mut projections = Vec::new();
        for idx in 0..cfg.n_layers {
            let mut layer = Vec::new();
            for part in [
                "attn_q",
                "attn_k",
                "attn_v",
                "attn_output",
                "ffn_gate",
                "ffn_up",
                "ffn_down",
            ] {
                match matrix(&format!("blk.{idx}.{part}.weight"))? {
                    Some(m) => layer.push(m),
                    None => return Ok(None),
                }
            }
            projections.push(layer);
        }
        let vector = |name: &str| -> Result<Vec<f32>> {
            let mut reader = open_reader(&self.path)?;
            self.content
                .tensor(&mut reader, name, &Device::Cpu)
                .and_then(|q| q.dequantize(&Device::Cpu))
                .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
                .map_err(|e| weights_error(name, e.to_string()))
        };
        let mut layers = Vec::new();
        for (idx, parts) in projections.into_iter().enumerate() {
            let [q, k, v, o, gate, up, down] = <[QMatrix; 7]>::try_from(parts)
                .map_err(|_| weights_error(&format!("blk.{idx}"), "missing projections".into()))?;
            let stack = |name: &str, parts: &[QMatrix]| {
                QMatrix::stack(parts).map_err(|e| weights_error(&format!("blk.{idx}.{name}"), e))
            };
            layers.push(QLayer {
                attn_norm: vector(&format!("blk.{idx}.attn_norm.weight"))?,
                qkv: stack("attn_q/k/v", &[q, k, v])?,
                attn_output: o,
                ffn_norm: vector(&format!("blk.{idx}.ffn_norm.weight"))?,
                gate_up: stack("ffn_gate/up", &[gate, up])?,
                ffn_down: down,
            });
        }
        let final_norm = vector("output_norm.weight")?;
        QLlama::new(&cfg, embed, head, final_norm, layers)
            .map(Some)
            .map_err(|e| Error::Weights {
                path: self.path.clone(),
                message: e,
            })
    }

    fn value(&self, key: &str) -> Result<&Value> {
        self.content
            .metadata
            .get(key)
            .ok_or_else(|| self.error(key, "is missing"))
    }

    fn string(&self, key: &str) -> Result<&str> {
        match self.value(key)? {
            Value::String(text) => Ok(text),
            other => Err(self.error(key, &format!("{:?} is not a string", other.value_type()))),
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<String>> {
        let not_strings = || self.error(key, "is not an array of strings");
        match self.value(key)? {
            Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    Value::String(text) => Ok(text.clone()),
                    _ => Err(not_strings()),
                })
                .collect(),
            _ => Err(not_strings()),
        }
    }

    fn error(&self, key: &str, message: &str) -> Error {
        Error::ModelConfig {
            source_name: format!("{}, metadata {key}", self.path.display()),
            message: message.to_owned(),
        }
    }
}

/// A GGUF integer of any width.
fn integer(value: &Value) -> Option<i128> {
    Some(match *value {
        Value::U8(v) => v.into(),
        Value::I8(v) => v.into(),
        Value::U16(v) => v.into(),
        Value::I16(v) => v.into(),
        Value::U32(v) => v.into(),
        Value::I32(v) => v.into(),
        Value::U64(v) => v.into(),
        Value::I64(v) => v.into(),
        _ => return None,
    })
}

/// A GGUF number of any type.
fn number(value: &Value) -> Option<f64> {
    match *value {
        Value::F32(v) => Some(v.into()),
        Value::F64(v) => Some(v),
        _ => integer(value).map(|v| v as f64),
    }
}

fn open_reader(path: &Path) -> Result<BufReader<File>> {
    File::open(path)
        .map(BufReader::new)
        .map_err(|e| Error::io(path, e))
}

/// The Hugging Face name of a llama.cpp tensor name, or `None` for tensors the policy does not
/// use (e.g. `rope_freqs.weight`).
pub fn hf_name(gguf_name: &str) -> Option<String> {
    let fixed = match gguf_name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some(name.to_owned());
    }
    let rest = gguf_name.strip_prefix("blk.")?;
    let (idx, part) = rest.split_once('.')?;
    let idx: usize = idx.parse().ok()?;
    let hf_part = match part {
        "attn_norm.weight" => "input_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        _ => return None,
    };
    Some(format!("model.layers.{idx}.{hf_part}"))
}

/// Undoes llama.cpp's permutation of a q/k projection `(n_heads * head_dim, in)`: within each
/// head, GGUF interleaves the rows of the two rotary halves (`r0, r_half, r1, r_half+1, ...`);
/// Hugging Face keeps the halves apart.
pub fn unpermute_rope_rows(weight: &Tensor, n_heads: usize) -> candle_core::Result<Tensor> {
    let (rows, cols) = weight.dims2()?;
    if n_heads == 0 || rows % (2 * n_heads) != 0 {
        candle_core::bail!("{rows} rows do not split into {n_heads} heads of two rotary halves");
    }
    let half = rows / n_heads / 2;
    weight
        .reshape((n_heads, half, 2, cols))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((rows, cols))
}

/// A Llama kept in its GGUF quantization: inference only, one sequence at a time, with its own
/// KV cache. See [`Gguf::load_quantized`] for which implementation runs it.
pub struct QuantizedLlama {
    backend: Backend,
    device: Device,
    vocab_size: usize,
    /// The tokens whose keys and values the cache holds, in order (native backend only): a
    /// prompt that starts with them runs only its new tokens.
    cached: Vec<u32>,
    /// How many leading cached positions a prompt pass computed in whole aligned chunks (see
    /// [`PROMPT_CHUNK`]): only those are reused, so a reply never depends on what ran before.
    canonical: usize,
}

/// Prompt positions per pass of the native backend's prompt, aligned to multiples of it. A
/// position's keys and values then come out bit for bit the same whether its chunk ran as part
/// of a longer prompt or after a cached prefix (a pass of a different length would sum in a
/// different order), so a seeded request repeats exactly whatever the cache held.
pub const PROMPT_CHUNK: usize = 256;

/// Who runs a [`QuantizedLlama`].
enum Backend {
    /// Our own kernels (CPU).
    Native(Box<QLlama>),
    /// candle-transformers' `quantized_llama`.
    Candle(Box<ModelWeights>),
}

impl std::fmt::Debug for QuantizedLlama {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantizedLlama")
            .field("backend", &self.backend_name())
            .field("device", &self.device)
            .field("vocab_size", &self.vocab_size)
            .finish_non_exhaustive()
    }
}

impl QuantizedLlama {
    /// Logits `(vocab,)` (f32) of the last of `tokens`, which continue the `past` tokens already
    /// in the cache (`past = 0` starts afresh).
    pub fn forward(&mut self, tokens: &[u32], past: usize) -> Result<Vec<f32>> {
        let context = "quantized llama forward";
        match &mut self.backend {
            Backend::Native(model) => match model.forward(tokens, past) {
                Ok(logits) => {
                    self.cached.truncate(past);
                    self.cached.extend_from_slice(tokens);
                    self.canonical = self.canonical.min(past);
                    Ok(logits)
                }
                Err(message) => {
                    self.cached.clear();
                    self.canonical = 0;
                    Err(Error::Data {
                        source_name: context.to_owned(),
                        message,
                    })
                }
            },
            Backend::Candle(weights) => {
                let input = Tensor::new(tokens, &self.device)
                    .and_then(|t| t.unsqueeze(0))
                    .map_err(|e| Error::candle(context, e))?;
                weights
                    .forward(&input, past)
                    .and_then(|t| t.squeeze(0)?.to_dtype(DType::F32)?.to_vec1::<f32>())
                    .map_err(|e| Error::candle(context, e))
            }
        }
    }

    /// Which implementation runs the model, e.g. `native Avx2` or `candle quantized_llama`.
    pub fn backend_name(&self) -> String {
        match &self.backend {
            Backend::Native(model) => format!("native {:?}", model.kernel()),
            Backend::Candle(_) => "candle quantized_llama".to_owned(),
        }
    }

    /// Greedy decoding of one prompt, up to `max_new_tokens`; stops after one of
    /// `stop_tokens` (which is kept).
    pub fn generate_greedy(
        &mut self,
        prompt: &[u32],
        max_new_tokens: usize,
        stop_tokens: &[u32],
    ) -> Result<Vec<u32>> {
        let generated =
            self.generate(prompt, max_new_tokens, stop_tokens, &Sampling::greedy(), 0)?;
        Ok(generated.tokens)
    }

    /// Decodes one prompt with `sampling` as row `row` of a batch would be by
    /// [`Policy::generate`] (the same random stream), up to `max_new_tokens`; stops after one
    /// of `stop_tokens` (which is kept). Each token comes with its log-probability at
    /// temperature 1, untruncated.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_new_tokens: usize,
        stop_tokens: &[u32],
        sampling: &Sampling,
        row: u64,
    ) -> Result<Generated> {
        self.generate_streaming(
            prompt,
            max_new_tokens,
            stop_tokens,
            sampling,
            row,
            &mut |_| {},
        )
    }

    /// [`QuantizedLlama::generate`], handing each new token to `on_token` as soon as it is
    /// picked (a streaming server's hook); the tokens passed are exactly those returned.
    pub fn generate_streaming(
        &mut self,
        prompt: &[u32],
        max_new_tokens: usize,
        stop_tokens: &[u32],
        sampling: &Sampling,
        row: u64,
        on_token: &mut (dyn FnMut(u32) + Send),
    ) -> Result<Generated> {
        if prompt.is_empty() {
            return Err(Error::Data {
                source_name: "quantized generate".to_owned(),
                message: "the prompt is empty; start it with at least one token".to_owned(),
            });
        }
        if max_new_tokens == 0 {
            return Ok(Generated::default());
        }
        // The decode loop runs on a rayon worker with the other workers kept looking for work
        // (see `with_workers_awake`).
        let device = self.device.clone();
        super::cpu::with_workers_awake(&device, || {
            let mut rng = sampling.row_rng(row);
            let mut out = Generated::default();
            // A prompt that continues what the cache holds (the next turn of a conversation,
            // another request with the same system prompt) runs only its tokens after the
            // shared prefix, from the last whole chunk boundary within it; the prompt always
            // runs in chunks aligned to multiples of PROMPT_CHUNK, cold or warm alike.
            let native = matches!(self.backend, Backend::Native(_));
            let shared = self
                .cached
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count()
                .min(self.canonical)
                .min(prompt.len() - 1);
            let mut start = if native {
                shared / PROMPT_CHUNK * PROMPT_CHUNK
            } else {
                0
            };
            let mut logits = Vec::new();
            while start < prompt.len() {
                let end = if native {
                    ((start / PROMPT_CHUNK + 1) * PROMPT_CHUNK).min(prompt.len())
                } else {
                    prompt.len()
                };
                logits = self.forward(&prompt[start..end], start)?;
                start = end;
            }
            self.canonical = prompt.len() / PROMPT_CHUNK * PROMPT_CHUNK;
            let mut past = prompt.len();
            loop {
                let (token, logprob) = sampling.pick(&logits, &mut rng);
                out.tokens.push(token);
                out.logprobs.push(logprob);
                on_token(token);
                if out.tokens.len() == max_new_tokens || stop_tokens.contains(&token) {
                    return Ok(out);
                }
                logits = self.forward(&[token], past)?;
                past += 1;
            }
        })
    }

    /// Rows of the output head.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
}

/// Index of the largest value (the first on ties; NaN never wins).
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (idx, &v) in values.iter().enumerate() {
        if v > values[best] || values[best].is_nan() {
            best = idx;
        }
    }
    best as u32
}
