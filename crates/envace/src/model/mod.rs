//! The policy model: trainable Qwen3 and Llama transformers on candle, with a differentiable
//! training forward, a KV-cached generation path, and Hugging Face weights in and out.
//!
//! One [`Policy`] holds every parameter as a candle [`Var`] under its Hugging Face name
//! (`model.layers.3.self_attn.q_proj.weight`), so a real checkpoint folder loads unchanged and a
//! saved policy loads in `transformers`. The decoder layer is described once (`decoder.rs`:
//! weight names, initialisation, forward), with Qwen3's query/key norms as its one
//! per-architecture difference; each architecture's `config.json` dialect lives in its own file
//! (`qwen3.rs`, `llama.rs`); the ops are in `layers.rs`.
//!
//! Which execution path runs when, and on which kernels (`cpu/` holds ours):
//!
//! | path | runs when | on the CPU in f32 | elsewhere (CUDA, other dtypes) |
//! |---|---|---|---|
//! | training forward, [`Policy::train_token_stats`] (SFT and GRPO losses) / [`Policy::forward_train`] / [`Policy::forward_train_rows`] | the whole sequence through the layers, causal + padding mask, every parameter gets its gradient; the losses take the final norm and the vocabulary head at the trained tokens only | `stack` (all layers one graph node with a hand-chained backward over `cpu::train_ops`, `cpu::linear` with q/k/v and gate/up weights stacked, and `cpu::attention`); the head and the token statistics one node (`cpu::train_ops::head_token_stats`) | candle's composed ops, whose backward works on every backend |
//! | prompt pass, [`Policy::forward_cached`] | the prompt of every generation, into a [`KvCache`]; batched with left padding | candle's fused inference ops, `cpu::decode_ops::small_linear` for few-row products | candle's fused inference ops |
//! | decode step (`decode.rs`) | each new token of [`Policy::generate`] after the prompt | plain loops over the weights, `cpu::decode_ops` and `cpu::quant`'s f32 primitives | [`Policy::forward_cached`] one position at a time |
//! | quantised decode (`qllama.rs`, [`QuantizedLlama`]) | a GGUF served by `serve-model` (also when it is the external simulator) on its quantised weights | `cpu::quant`: Q4_1 / Q8_0 weights times Q8_1 activations | candle's `quantized_llama` |
//! | wgpu (`wgpu.rs`, feature `wgpu`) | a role's generation placed on `wgpu`: the policy's or a GGUF's weights uploaded by name to any GPU wgpu reaches, refreshed after each optimizer step | not used | `envace-gpu`'s WGSL kernels (lavapipe on a machine without a GPU) |
//!
//! The training forward and the prompt pass compute positions from the attention mask (`position = number of real tokens
//! before`), so a left-padded row gives the same logits as the same row alone.

mod assets;
pub mod checkpoint;
pub(crate) mod cpu;
mod decode;
mod decoder;
mod gguf;
mod layers;
mod llama;
mod qllama;
mod qwen3;
mod stack;
#[cfg(feature = "wgpu")]
pub mod wgpu;

pub use cpu::quant;
pub(crate) use cpu::with_workers_awake;

pub use assets::{
    CACHE_DIR_ENV, QWEN3_TOKENIZER_DIR, SMOLLM2_GGUF, cache_dir, cached_file, qwen3_tokenizer_dir,
    smollm2_gguf,
};
pub use gguf::{Gguf, PROMPT_CHUNK, QuantizedLlama, argmax, hf_name, unpermute_rope_rows};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};
use rayon::prelude::*;
use serde_json::{Map, Value};

use crate::config::{self, Architecture, TinyModelConfig};
use crate::error::{Error, Result};
use crate::rng::Rng;
use decoder::DecoderLayer;
use layers::{LayerKv, Mode, Step};

/// Name of the config file in a Hugging Face model folder.
pub const CONFIG_FILE: &str = "config.json";
/// Name of the single weights file a saved policy writes.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// Name of the index of a sharded Hugging Face checkpoint.
pub const WEIGHTS_INDEX_FILE: &str = "model.safetensors.index.json";

/// Sizes and hyper-parameters of a decoder-only transformer, read from a Hugging Face
/// `config.json` or built from a `[model.tiny]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct TransformerConfig {
    /// Architecture family; decides weight names and whether q/k are normalised.
    pub architecture: Architecture,
    /// Rows of the embedding and of the output head.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU feed-forward layer.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub n_layers: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads; divides `n_heads`.
    pub n_kv_heads: usize,
    /// Width of one head (Qwen3 sets it explicitly; Llama uses `hidden_size / n_heads`).
    pub head_dim: usize,
    /// Longest sequence the checkpoint was trained for, in tokens.
    pub max_position_embeddings: usize,
    /// RoPE base frequency.
    pub rope_theta: f64,
    /// Llama 3 RoPE frequency scaling, when the checkpoint uses it.
    pub rope_scaling: Option<RopeScaling>,
    /// Epsilon of every RMSNorm.
    pub rms_norm_eps: f64,
    /// The output head reuses the input embedding.
    pub tie_word_embeddings: bool,
    /// Standard deviation of the normal initialisation of projection and embedding weights.
    pub initializer_range: f64,
    /// Beginning-of-sequence token, when the checkpoint names one.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence tokens named by the checkpoint (possibly none).
    pub eos_token_ids: Vec<u32>,
}

/// Llama 3 RoPE frequency scaling (`"rope_type": "llama3"`).
#[derive(Debug, Clone, PartialEq)]
pub struct RopeScaling {
    /// Divisor of the low frequencies.
    pub factor: f64,
    /// Wavelength threshold (as a fraction of the original context) of the low band.
    pub low_freq_factor: f64,
    /// Wavelength threshold (as a fraction of the original context) of the high band.
    pub high_freq_factor: f64,
    /// Context length the model was pretrained with.
    pub original_max_position_embeddings: usize,
}

impl TransformerConfig {
    /// The model a `[model.tiny]` section describes.
    pub fn from_tiny(tiny: &TinyModelConfig) -> Result<Self> {
        let n_heads = tiny.n_heads as usize;
        let cfg = TransformerConfig {
            architecture: tiny.architecture,
            vocab_size: tiny.vocab_size as usize,
            hidden_size: tiny.hidden_size as usize,
            intermediate_size: tiny.intermediate_size as usize,
            n_layers: tiny.n_layers as usize,
            n_heads,
            n_kv_heads: tiny.n_kv_heads as usize,
            head_dim: tiny.hidden_size as usize / n_heads.max(1),
            max_position_embeddings: tiny.max_position_embeddings as usize,
            rope_theta: tiny.rope_theta,
            rope_scaling: None,
            rms_norm_eps: 1e-6,
            tie_word_embeddings: tiny.tie_embeddings,
            initializer_range: 0.02,
            bos_token_id: None,
            eos_token_ids: Vec::new(),
        };
        cfg.validate("[model.tiny]")?;
        Ok(cfg)
    }

    /// Reads a Hugging Face `config.json`.
    pub fn from_hf_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_hf_json(&text, &path.display().to_string())
    }

    /// Parses the text of a Hugging Face `config.json`; `source_name` names it in errors.
    pub fn from_hf_json(text: &str, source_name: &str) -> Result<Self> {
        let value: Value = serde_json::from_str(text).map_err(|e| Error::ModelConfig {
            source_name: source_name.to_owned(),
            message: format!("not valid JSON: {e}"),
        })?;
        let Value::Object(map) = &value else {
            return Err(Error::ModelConfig {
                source_name: source_name.to_owned(),
                message: "expected a JSON object".to_owned(),
            });
        };
        let hf = HfConfig {
            map,
            source_name,
            prefix: String::new(),
        };
        let model_type = hf.str_or("model_type", "")?;
        let cfg = match model_type.as_str() {
            "qwen3" => qwen3::config_from_hf(&hf)?,
            "llama" => llama::config_from_hf(&hf)?,
            other => {
                return Err(hf.error(
                    "model_type",
                    &format!("{other:?} is not supported; the supported model types are \"qwen3\" and \"llama\""),
                ));
            }
        };
        cfg.validate(source_name)?;
        Ok(cfg)
    }

    /// The `config.json` that `transformers` (and this module) can load, for weights of `dtype`.
    pub fn to_hf_json(&self, dtype: DType) -> Value {
        let mut map = match self.architecture {
            Architecture::Qwen3 => qwen3::config_to_hf(self),
            Architecture::Llama => llama::config_to_hf(self),
        };
        let torch_dtype = match dtype {
            DType::BF16 => "bfloat16",
            DType::F16 => "float16",
            DType::F64 => "float64",
            _ => "float32",
        };
        map.insert("torch_dtype".to_owned(), Value::from(torch_dtype));
        if let Some(bos) = self.bos_token_id {
            map.insert("bos_token_id".to_owned(), Value::from(bos));
        }
        match self.eos_token_ids.as_slice() {
            [] => {}
            [eos] => {
                map.insert("eos_token_id".to_owned(), Value::from(*eos));
            }
            many => {
                map.insert("eos_token_id".to_owned(), Value::from(many.to_vec()));
            }
        }
        Value::Object(map)
    }

    /// Checks the sizes fit together.
    fn validate(&self, source_name: &str) -> Result<()> {
        let fail = |message: String| {
            Err(Error::ModelConfig {
                source_name: source_name.to_owned(),
                message,
            })
        };
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.n_layers),
            ("num_attention_heads", self.n_heads),
            ("num_key_value_heads", self.n_kv_heads),
            ("head_dim", self.head_dim),
        ];
        for (name, size) in sizes {
            if size == 0 {
                return fail(format!("{name} must be at least 1"));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return fail(format!(
                "num_key_value_heads ({}) must divide num_attention_heads ({})",
                self.n_kv_heads, self.n_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return fail(format!(
                "head_dim ({}) must be even for RoPE",
                self.head_dim
            ));
        }
        Ok(())
    }

    /// RoPE inverse frequencies, one per pair of head dimensions.
    fn inv_freq(&self) -> Vec<f64> {
        let dim = self.head_dim as f64;
        (0..self.head_dim / 2)
            .map(|i| 1.0 / self.rope_theta.powf(2.0 * i as f64 / dim))
            .map(|freq| match &self.rope_scaling {
                None => freq,
                Some(s) => {
                    let original = s.original_max_position_embeddings as f64;
                    let low_freq_wavelen = original / s.low_freq_factor;
                    let high_freq_wavelen = original / s.high_freq_factor;
                    let wavelen = 2.0 * std::f64::consts::PI / freq;
                    if wavelen < high_freq_wavelen {
                        freq
                    } else if wavelen > low_freq_wavelen {
                        freq / s.factor
                    } else {
                        let smooth = (original / wavelen - s.low_freq_factor)
                            / (s.high_freq_factor - s.low_freq_factor);
                        (1.0 - smooth) * freq / s.factor + smooth * freq
                    }
                }
            })
            .collect()
    }
}

/// Typed reads of a `config.json` object, with errors naming the file and the field.
#[derive(Debug)]
pub(crate) struct HfConfig<'a> {
    map: &'a Map<String, Value>,
    source_name: &'a str,
    /// Path of this object inside the file, e.g. `rope_scaling.`.
    prefix: String,
}

impl HfConfig<'_> {
    pub(crate) fn error(&self, field: &str, message: &str) -> Error {
        Error::ModelConfig {
            source_name: format!("{}, field {}{field}", self.source_name, self.prefix),
            message: message.to_owned(),
        }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub(crate) fn is_null(&self, key: &str) -> bool {
        self.get(key).is_none()
    }

    pub(crate) fn usize(&self, key: &str) -> Result<usize> {
        match self.get(key) {
            None => Err(self.error(key, "missing")),
            Some(v) => v.as_u64().map(|n| n as usize).ok_or_else(|| {
                self.error(key, &format!("expected a non-negative integer, found {v}"))
            }),
        }
    }

    pub(crate) fn usize_or(&self, key: &str, default: usize) -> Result<usize> {
        if self.is_null(key) {
            Ok(default)
        } else {
            self.usize(key)
        }
    }

    pub(crate) fn f64(&self, key: &str) -> Result<f64> {
        match self.get(key) {
            None => Err(self.error(key, "missing")),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| self.error(key, &format!("expected a number, found {v}"))),
        }
    }

    pub(crate) fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        if self.is_null(key) {
            Ok(default)
        } else {
            self.f64(key)
        }
    }

    pub(crate) fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.error(key, &format!("expected true or false, found {v}"))),
        }
    }

    pub(crate) fn opt_str(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.error(key, &format!("expected a string, found {v}"))),
        }
    }

    pub(crate) fn str_or(&self, key: &str, default: &str) -> Result<String> {
        Ok(self.opt_str(key)?.unwrap_or_else(|| default.to_owned()))
    }

    pub(crate) fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| self.error(key, &format!("expected a token id, found {v}"))),
        }
    }

    /// A token id or a list of them (`eos_token_id`); missing means none.
    pub(crate) fn u32_list(&self, key: &str) -> Result<Vec<u32>> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| self.error(key, &format!("expected token ids, found {v}")))
                })
                .collect(),
            Some(_) => Ok(self.opt_u32(key)?.into_iter().collect()),
        }
    }

    /// A nested object, e.g. `rope_scaling`.
    pub(crate) fn object(&self, key: &str) -> Result<HfConfig<'_>> {
        match self.get(key) {
            Some(Value::Object(map)) => Ok(HfConfig {
                map,
                source_name: self.source_name,
                prefix: format!("{}{key}.", self.prefix),
            }),
            Some(v) => Err(self.error(key, &format!("expected an object, found {v}"))),
            None => Err(self.error(key, "missing")),
        }
    }

    /// Fails unless the field is absent or equals `expected` (a feature we do not implement).
    pub(crate) fn expect_str_or(&self, key: &str, expected: &str) -> Result<()> {
        let found = self.str_or(key, expected)?;
        if found == expected {
            Ok(())
        } else {
            Err(self.error(
                key,
                &format!("{found:?} is not implemented; only {expected:?} is"),
            ))
        }
    }

    /// Fails unless the field is absent or equals `expected` (a feature we do not implement).
    pub(crate) fn expect_bool_or(&self, key: &str, expected: bool) -> Result<()> {
        if self.bool_or(key, expected)? == expected {
            Ok(())
        } else {
            Err(self.error(
                key,
                &format!("{} is not implemented; only {expected} is", !expected),
            ))
        }
    }
}

/// The fields of `config.json` every supported architecture reads the same way, for
/// `architecture` with its own default context length and RoPE scaling already read.
pub(crate) fn decoder_config_from_hf(
    hf: &HfConfig<'_>,
    architecture: Architecture,
    default_max_positions: usize,
    rope_scaling: Option<RopeScaling>,
) -> Result<TransformerConfig> {
    hf.expect_str_or("hidden_act", "silu")?;
    hf.expect_bool_or("attention_bias", false)?;
    let hidden_size = hf.usize("hidden_size")?;
    let n_heads = hf.usize("num_attention_heads")?;
    Ok(TransformerConfig {
        architecture,
        vocab_size: hf.usize("vocab_size")?,
        hidden_size,
        intermediate_size: hf.usize("intermediate_size")?,
        n_layers: hf.usize("num_hidden_layers")?,
        n_heads,
        n_kv_heads: hf.usize_or("num_key_value_heads", n_heads)?,
        head_dim: hf.usize_or("head_dim", hidden_size / n_heads.max(1))?,
        max_position_embeddings: hf.usize_or("max_position_embeddings", default_max_positions)?,
        rope_theta: hf.f64_or("rope_theta", 10_000.0)?,
        rope_scaling,
        rms_norm_eps: hf.f64_or("rms_norm_eps", 1e-6)?,
        tie_word_embeddings: hf.bool_or("tie_word_embeddings", false)?,
        initializer_range: hf.f64_or("initializer_range", 0.02)?,
        bos_token_id: hf.opt_u32("bos_token_id")?,
        eos_token_ids: hf.u32_list("eos_token_id")?,
    })
}

/// An architecture's `config.json` fields as `transformers` writes them, in its order: the
/// shared fields, with the architecture's own after `attention_dropout` (`after_attention`)
/// and after `max_position_embeddings` (`after_positions`).
pub(crate) fn decoder_config_to_hf(
    cfg: &TransformerConfig,
    (class, model_type): (&str, &str),
    after_attention: Vec<(&str, Value)>,
    after_positions: Vec<(&str, Value)>,
    rope_scaling: Value,
) -> Map<String, Value> {
    let mut map = Map::new();
    let mut put = |key: &str, value: Value| {
        map.insert(key.to_owned(), value);
    };
    put("architectures", serde_json::json!([class]));
    put("model_type", model_type.into());
    put("vocab_size", cfg.vocab_size.into());
    put("hidden_size", cfg.hidden_size.into());
    put("intermediate_size", cfg.intermediate_size.into());
    put("num_hidden_layers", cfg.n_layers.into());
    put("num_attention_heads", cfg.n_heads.into());
    put("num_key_value_heads", cfg.n_kv_heads.into());
    put("head_dim", cfg.head_dim.into());
    put("hidden_act", "silu".into());
    put("attention_bias", false.into());
    put("attention_dropout", 0.0.into());
    for (key, value) in after_attention {
        put(key, value);
    }
    put(
        "max_position_embeddings",
        cfg.max_position_embeddings.into(),
    );
    for (key, value) in after_positions {
        put(key, value);
    }
    put("rope_theta", cfg.rope_theta.into());
    put("rope_scaling", rope_scaling);
    put("rms_norm_eps", cfg.rms_norm_eps.into());
    put("tie_word_embeddings", cfg.tie_word_embeddings.into());
    put("initializer_range", cfg.initializer_range.into());
    map
}

/// How a parameter starts in a freshly initialised model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParamInit {
    /// Normal with standard deviation `initializer_range` (projections, embedding, head).
    Normal,
    /// All ones (RMSNorm scales).
    Ones,
}

/// One trainable tensor: its Hugging Face name, shape and initialisation.
#[derive(Debug, Clone)]
pub(crate) struct ParamSpec {
    name: String,
    shape: Vec<usize>,
    init: ParamInit,
}

impl ParamSpec {
    pub(crate) fn new(name: String, shape: &[usize], init: ParamInit) -> Self {
        ParamSpec {
            name,
            shape: shape.to_vec(),
            init,
        }
    }
}

/// Every trainable tensor of a model with this config, in a fixed order.
fn param_specs(cfg: &TransformerConfig) -> Vec<ParamSpec> {
    let (v, h) = (cfg.vocab_size, cfg.hidden_size);
    let mut specs = vec![ParamSpec::new(
        "model.embed_tokens.weight".to_owned(),
        &[v, h],
        ParamInit::Normal,
    )];
    for idx in 0..cfg.n_layers {
        specs.extend(decoder::layer_params(cfg, idx));
    }
    specs.push(ParamSpec::new(
        "model.norm.weight".to_owned(),
        &[h],
        ParamInit::Ones,
    ));
    if !cfg.tie_word_embeddings {
        specs.push(ParamSpec::new(
            "lm_head.weight".to_owned(),
            &[v, h],
            ParamInit::Normal,
        ));
    }
    specs
}

/// The candle device a `[backend]` device setting means. `auto` is CUDA when this build has the
/// `cuda` feature and a GPU opens, else the CPU; `wgpu` trains on the CPU (wgpu serves only
/// rehearsal inference); `cuda` in a build without the feature is
/// [`Error::BackendNotCompiled`].
pub fn resolve_device(device: config::Device, cuda_index: u32) -> Result<Device> {
    match device {
        config::Device::Cpu | config::Device::Wgpu => Ok(Device::Cpu),
        config::Device::Cuda => open_cuda(cuda_index),
        config::Device::Auto => Ok(open_cuda(cuda_index).unwrap_or(Device::Cpu)),
    }
}

#[cfg(feature = "cuda")]
fn open_cuda(cuda_index: u32) -> Result<Device> {
    Device::new_cuda(cuda_index as usize).map_err(|e| Error::DeviceUnavailable {
        device: format!("cuda:{cuda_index}"),
        // candle appends a backtrace on the lines after its message when RUST_BACKTRACE is
        // set; the reason is the first line.
        message: e.to_string().lines().next().unwrap_or_default().to_owned(),
    })
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(_cuda_index: u32) -> Result<Device> {
    Err(Error::BackendNotCompiled {
        backend: "cuda",
        feature: "cuda",
    })
}

/// The candle dtype of a `[backend]` dtype setting.
pub fn candle_dtype(dtype: config::Dtype) -> DType {
    match dtype {
        config::Dtype::F32 => DType::F32,
        config::Dtype::Bf16 => DType::BF16,
        config::Dtype::F16 => DType::F16,
    }
}

/// Pads token sequences on the LEFT with `pad_id` into `(ids, mask)`, both `(n, longest)`:
/// `ids` as `u32`, `mask` as `u8` with 1 on real tokens.
pub fn left_pad(rows: &[Vec<u32>], pad_id: u32, device: &Device) -> Result<(Tensor, Tensor)> {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(rows.len() * width);
    let mut mask = Vec::with_capacity(rows.len() * width);
    for row in rows {
        let n_pad = width - row.len();
        ids.extend(std::iter::repeat_n(pad_id, n_pad).chain(row.iter().copied()));
        mask.extend(std::iter::repeat_n(0u8, n_pad).chain(std::iter::repeat_n(1u8, row.len())));
    }
    let shape = (rows.len(), width);
    let ids = Tensor::from_vec(ids, shape, device).map_err(|e| Error::candle("left_pad", e))?;
    let mask = Tensor::from_vec(mask, shape, device).map_err(|e| Error::candle("left_pad", e))?;
    Ok((ids, mask))
}

/// The keys and values a batch has seen, per layer, plus each row's padding mask and next
/// position. Start with [`KvCache::new`] (or `default`); [`Policy::forward_cached`] fills it.
/// It is written in place: use [`KvCache::fork`] to branch from a shared prefix.
#[derive(Debug, Default)]
pub struct KvCache {
    layers: Vec<LayerKv>,
    /// `key_mask[row][t]`: 1 where key `t` of `row` is a real token.
    key_mask: Vec<Vec<u8>>,
    /// The position the next real token of each row takes.
    next_pos: Vec<u32>,
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> Self {
        KvCache::default()
    }

    /// Keys cached per row (padding included).
    pub fn len(&self) -> usize {
        self.key_mask.first().map_or(0, Vec::len)
    }

    /// Whether nothing has been cached yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows in the batch this cache belongs to (0 before the first forward).
    pub fn batch_size(&self) -> usize {
        self.key_mask.len()
    }

    /// An independent copy, to continue two ways from the same prefix.
    pub fn fork(&self) -> Result<KvCache> {
        let layers = self
            .layers
            .iter()
            .map(LayerKv::deep_copy)
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(|e| Error::candle("forking the KV cache", e))?;
        Ok(KvCache {
            layers,
            key_mask: self.key_mask.clone(),
            next_pos: self.next_pos.clone(),
        })
    }

    /// The cache of a batch whose row `r` continues this cache's row `rows[r]` (a row may be
    /// taken several times): its own copy of the keys, values, padding and positions.
    fn select_rows(&self, rows: &[usize]) -> Result<KvCache> {
        let context = "copying prompt rows of the KV cache";
        if let Some(&bad) = rows.iter().find(|&&row| row >= self.batch_size()) {
            return Err(Error::candle(
                context,
                candle_core::Error::Msg(format!(
                    "row {bad} asked of a cache of {} rows",
                    self.batch_size()
                )),
            ));
        }
        let device = self
            .layers
            .iter()
            .find_map(LayerKv::device)
            .unwrap_or(Device::Cpu);
        let index: Vec<u32> = rows.iter().map(|&row| row as u32).collect();
        let index =
            Tensor::from_vec(index, rows.len(), &device).map_err(|e| Error::candle(context, e))?;
        let layers = self
            .layers
            .iter()
            .map(|layer| layer.select_rows(&index))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(|e| Error::candle(context, e))?;
        Ok(KvCache {
            layers,
            key_mask: rows.iter().map(|&row| self.key_mask[row].clone()).collect(),
            next_pos: rows.iter().map(|&row| self.next_pos[row]).collect(),
        })
    }
}

/// The distinct prompts of a batch in the order they first occur, and for each row the index
/// of its prompt among them.
fn distinct_prompts(prompts: &[Vec<u32>]) -> (Vec<Vec<u32>>, Vec<usize>) {
    let mut first: HashMap<&[u32], usize> = HashMap::new();
    let mut distinct = Vec::new();
    let row_of = prompts
        .iter()
        .map(|prompt| {
            *first.entry(prompt.as_slice()).or_insert_with(|| {
                distinct.push(prompt.clone());
                distinct.len() - 1
            })
        })
        .collect();
    (distinct, row_of)
}

/// Refuses an empty prompt (every generation path needs a last token to continue from).
pub(crate) fn check_prompts(prompts: &[Vec<u32>]) -> Result<()> {
    match prompts.iter().position(Vec::is_empty) {
        Some(idx) => Err(Error::Data {
            source_name: format!("generate, prompt {idx}"),
            message: "the prompt is empty; start it with at least one token".to_owned(),
        }),
        None => Ok(()),
    }
}

/// How [`Policy::generate`] picks each next token.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// Softmax temperature; 0 picks the most likely token (greedy).
    pub temperature: f64,
    /// Nucleus sampling: keep the most likely tokens whose probabilities sum to at least this.
    pub top_p: f64,
    /// Keep only the `top_k` most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Seed; row `r` of a call draws from its own stream derived from `(seed, r)`.
    pub seed: u64,
}

impl Sampling {
    /// Always the most likely token.
    pub fn greedy() -> Self {
        Sampling {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: 0,
        }
    }

    /// The random stream of row `row` of one generation call (every decoder draws the same).
    fn row_rng(&self, row: u64) -> Rng {
        Rng::new(self.seed ^ row.wrapping_mul(0xd1b5_4a32_d192_ed03))
    }

    /// The next token of one row and its log-probability at temperature 1.
    fn pick(&self, logits: &[f32], rng: &mut Rng) -> (u32, f32) {
        let value = |idx: usize| {
            let v = f64::from(logits[idx]);
            if v.is_nan() { f64::NEG_INFINITY } else { v }
        };
        // The first most likely token (NaN never compares greater).
        let (mut argmax, mut max) = (0, f32::NEG_INFINITY);
        for (idx, &v) in logits.iter().enumerate() {
            if v > max {
                (argmax, max) = (idx, v);
            }
        }
        if max.is_infinite() {
            // Nothing to normalise against: the row is data, not a distribution.
            return (argmax as u32, f32::NAN);
        }
        // The softmax numerators at temperature 1, vectorised; their sum gives the
        // log-normaliser every returned log-probability uses.
        let mut numerators = vec![0f32; logits.len()];
        let total = quant::exp_shifted_f32(logits, max, 1.0, &mut numerators);
        let log_sum = f64::from(max) + total.ln();
        let whole = (self.top_k == 0 || self.top_k >= logits.len()) && self.top_p >= 1.0;
        let token = if self.temperature <= 0.0 || self.top_k == 1 {
            argmax
        } else if whole {
            // The whole distribution (RL rollouts' default): walked in vocabulary order, no sort.
            // The same distribution as the sorted walk below, one uniform draw per token.
            let total = if self.temperature == 1.0 {
                total
            } else {
                let scale = (1.0 / self.temperature) as f32;
                quant::exp_shifted_f32(logits, max, scale, &mut numerators)
            };
            let mut target = rng.uniform() * total;
            let mut choice = argmax;
            for (idx, &weight) in numerators.iter().enumerate() {
                if weight > 0.0 {
                    choice = idx;
                    let weight = f64::from(weight);
                    if target <= weight {
                        break;
                    }
                    target -= weight;
                }
            }
            choice
        } else {
            let mut order: Vec<usize> = (0..logits.len()).collect();
            order.sort_by(|&a, &b| value(b).total_cmp(&value(a)));
            if self.top_k > 0 {
                order.truncate(self.top_k);
            }
            let weights: Vec<f64> = order
                .iter()
                .map(|&idx| ((value(idx) - f64::from(max)) / self.temperature).exp())
                .collect();
            let total: f64 = weights.iter().sum();
            let mut kept = 0;
            let mut mass = 0.0;
            while kept < order.len() && (kept == 0 || mass < self.top_p * total) {
                mass += weights[kept];
                kept += 1;
            }
            let mut target = rng.uniform() * mass;
            let mut choice = order[kept - 1];
            for (&idx, &weight) in order.iter().zip(&weights).take(kept) {
                if target <= weight {
                    choice = idx;
                    break;
                }
                target -= weight;
            }
            choice
        };
        (token as u32, (value(token) - log_sum) as f32)
    }
}

/// What [`Policy::generate`] produced for one prompt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Generated {
    /// The new tokens, a stop token included.
    pub tokens: Vec<u32>,
    /// The log-probability of each new token under the policy (temperature 1, untruncated).
    pub logprobs: Vec<f32>,
}

/// A trainable decoder-only transformer (Qwen3 or Llama) with its parameters. A clone shares
/// the parameters (an optimizer step shows in both); [`Policy::deep_copy`] does not.
#[derive(Debug, Clone)]
pub struct Policy {
    cfg: TransformerConfig,
    device: Device,
    dtype: DType,
    vars: BTreeMap<String, Var>,
    embed: Tensor,
    layers: Vec<DecoderLayer>,
    norm: Tensor,
    lm_head: Tensor,
    inv_freq: Vec<f64>,
}

/// A tiny untrained Llama (hidden size 32, one layer, seed 7) with a BPE tokenizer of 320
/// tokens trained on `corpus`, saved as a Hugging Face folder (`config.json`,
/// `model.safetensors`, `tokenizer.json`; no `tokenizer_config.json`, so a server falls back to
/// EnvACE's ChatML template): a model folder that loads in a moment, for tests and demos of
/// anything that reads one.
pub fn save_tiny_llama_folder(dir: &Path, corpus: &str) -> Result<()> {
    let tokenizer = crate::tokenize::train_bpe(std::iter::repeat_n(corpus, 8), 320)?;
    let tiny = TinyModelConfig {
        architecture: Architecture::Llama,
        hidden_size: 32,
        n_layers: 1,
        n_heads: 2,
        n_kv_heads: 1,
        intermediate_size: 48,
        vocab_size: u32::try_from(tokenizer.get_vocab_size(true)).unwrap_or(u32::MAX),
        max_position_embeddings: 1024,
        rope_theta: 10_000.0,
        tie_embeddings: true,
        split_digits: true,
    };
    let cfg = TransformerConfig::from_tiny(&tiny)?;
    Policy::init(cfg, 7, &Device::Cpu, DType::F32)?.save(dir)?;
    crate::tokenize::save(&tokenizer, &dir.join(crate::tokenize::TOKENIZER_FILE))
}

impl Policy {
    /// A freshly initialised model: projections and embeddings normal with standard deviation
    /// `initializer_range`, norms at one. The same seed gives the same weights on every device.
    pub fn init(cfg: TransformerConfig, seed: u64, device: &Device, dtype: DType) -> Result<Self> {
        cfg.validate("model config")?;
        let mut tensors = HashMap::new();
        for spec in param_specs(&cfg) {
            let n: usize = spec.shape.iter().product();
            let values: Vec<f64> = match spec.init {
                ParamInit::Ones => vec![1.0; n],
                ParamInit::Normal => {
                    let mut rng = Rng::new(seed ^ fnv1a(&spec.name));
                    (0..n)
                        .map(|_| rng.normal() * cfg.initializer_range)
                        .collect()
                }
            };
            let tensor = Tensor::from_vec(values, spec.shape.as_slice(), device)
                .map_err(|e| Error::candle(format!("initialising {}", spec.name), e))?;
            tensors.insert(spec.name, tensor);
        }
        Self::from_tensors(
            cfg,
            tensors,
            device,
            dtype,
            Path::new("<initialised weights>"),
        )
    }

    /// A model from named tensors in the Hugging Face layout; `source` names where they came
    /// from in errors. Missing or misshapen tensors are errors; unknown ones are ignored (a tied
    /// checkpoint may still carry `lm_head.weight`).
    pub fn from_tensors(
        cfg: TransformerConfig,
        mut tensors: HashMap<String, Tensor>,
        device: &Device,
        dtype: DType,
        source: &Path,
    ) -> Result<Self> {
        cfg.validate(&source.display().to_string())?;
        let weights_error = |message: String| Error::Weights {
            path: source.to_path_buf(),
            message,
        };
        let mut vars = BTreeMap::new();
        for spec in param_specs(&cfg) {
            let tensor = tensors
                .remove(&spec.name)
                .ok_or_else(|| weights_error(format!("tensor {} is missing", spec.name)))?;
            if tensor.dims() != spec.shape.as_slice() {
                return Err(weights_error(format!(
                    "tensor {} has shape {:?}; the config needs {:?}",
                    spec.name,
                    tensor.dims(),
                    spec.shape
                )));
            }
            let var = tensor
                .to_dtype(dtype)
                .and_then(|t| t.to_device(device))
                .and_then(|t| Var::from_tensor(&t))
                .map_err(|e| Error::candle(format!("loading {}", spec.name), e))?;
            vars.insert(spec.name, var);
        }
        for name in tensors.keys() {
            tracing::debug!(tensor = %name, source = %source.display(), "ignoring an unused tensor");
        }
        Self::from_vars(cfg, vars, device, dtype)
    }

    fn from_vars(
        cfg: TransformerConfig,
        vars: BTreeMap<String, Var>,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        let get = |name: &str| -> Result<Tensor> {
            vars.get(name)
                .map(|v| v.as_tensor().clone())
                .ok_or_else(|| Error::Weights {
                    path: PathBuf::from("<model>"),
                    message: format!("tensor {name} is missing"),
                })
        };
        let embed = get("model.embed_tokens.weight")?;
        let layers = (0..cfg.n_layers)
            .map(|idx| DecoderLayer::new(&cfg, idx, &get))
            .collect::<Result<Vec<_>>>()?;
        let norm = get("model.norm.weight")?;
        let lm_head = if cfg.tie_word_embeddings {
            embed.clone()
        } else {
            get("lm_head.weight")?
        };
        let inv_freq = cfg.inv_freq();
        Ok(Policy {
            cfg,
            device: device.clone(),
            dtype,
            vars,
            embed,
            layers,
            norm,
            lm_head,
            inv_freq,
        })
    }

    /// Loads a Hugging Face model folder: `config.json` plus `model.safetensors`, or the shards
    /// listed in `model.safetensors.index.json`. Weights are converted to `dtype`.
    pub fn load(dir: &Path, device: &Device, dtype: DType) -> Result<Self> {
        let cfg = TransformerConfig::from_hf_file(&dir.join(CONFIG_FILE))?;
        let mut tensors = HashMap::new();
        for file in weight_files(dir)? {
            let loaded =
                candle_core::safetensors::load(&file, device).map_err(|e| Error::Weights {
                    path: file.clone(),
                    message: e.to_string(),
                })?;
            tensors.extend(loaded);
        }
        Self::from_tensors(cfg, tensors, device, dtype, dir)
    }

    /// Saves `config.json` and `model.safetensors` (Hugging Face layout, tied head omitted)
    /// into `dir`, creating it.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let config_path = dir.join(CONFIG_FILE);
        let mut text =
            serde_json::to_string_pretty(&self.cfg.to_hf_json(self.dtype)).map_err(|e| {
                Error::ModelConfig {
                    source_name: config_path.display().to_string(),
                    message: e.to_string(),
                }
            })?;
        text.push('\n');
        std::fs::write(&config_path, text).map_err(|e| Error::io(&config_path, e))?;
        let weights_path = dir.join(WEIGHTS_FILE);
        let tensors = self
            .vars
            .iter()
            .map(|(name, var)| {
                var.as_detached_tensor()
                    .to_device(&Device::Cpu)
                    .and_then(|t| t.contiguous())
                    .map(|t| (name.clone(), t))
            })
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(|e| Error::candle("saving weights", e))?;
        let metadata = HashMap::from([("format".to_owned(), "pt".to_owned())]);
        safetensors::serialize_to_file(tensors, Some(metadata), &weights_path).map_err(|e| {
            Error::Weights {
                path: weights_path.clone(),
                message: e.to_string(),
            }
        })
    }

    /// The model's sizes and hyper-parameters.
    pub fn config(&self) -> &TransformerConfig {
        &self.cfg
    }

    /// Qwen3 or Llama.
    pub fn architecture(&self) -> Architecture {
        self.cfg.architecture
    }

    /// Where the weights live.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The weights' dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Every trainable parameter under its Hugging Face name.
    pub fn vars(&self) -> &BTreeMap<String, Var> {
        &self.vars
    }

    /// The trainable parameters, for an optimizer.
    pub fn trainable_vars(&self) -> Vec<Var> {
        self.vars.values().cloned().collect()
    }

    /// Number of trainable scalars.
    pub fn n_params(&self) -> usize {
        self.vars.values().map(|v| v.elem_count()).sum()
    }

    /// An independent copy of the weights (e.g. the frozen reference policy of the KL term).
    pub fn deep_copy(&self) -> Result<Self> {
        let vars = self
            .vars
            .iter()
            .map(|(name, var)| {
                let copy = var.as_detached_tensor().copy()?;
                Ok((name.clone(), Var::from_tensor(&copy)?))
            })
            .collect::<candle_core::Result<BTreeMap<_, _>>>()
            .map_err(|e| Error::candle("copying the policy", e))?;
        Self::from_vars(self.cfg.clone(), vars, &self.device, self.dtype)
    }

    /// The names of trainable parameters that `grads` holds no gradient for, or an all-zero or
    /// non-finite one. Empty when every parameter is being trained.
    pub fn params_without_gradient(&self, grads: &GradStore) -> Result<Vec<String>> {
        let mut missing = Vec::new();
        for (name, var) in &self.vars {
            let ok = match grads.get(var.as_tensor()) {
                None => false,
                Some(grad) => {
                    let abs_sum = grad
                        .abs()
                        .and_then(|g| g.to_dtype(DType::F64))
                        .and_then(|g| g.sum_all())
                        .and_then(|g| g.to_scalar::<f64>())
                        .map_err(|e| Error::candle(format!("reading the gradient of {name}"), e))?;
                    abs_sum.is_finite() && abs_sum > 0.0
                }
            };
            if !ok {
                missing.push(name.clone());
            }
        }
        Ok(missing)
    }

    /// Logits `(b, l, vocab)` for every position of `input_ids: (b, l)`, differentiable with
    /// respect to every parameter. `attention_mask: (b, l)` (1 = real token, 0 = padding, left
    /// or right) defaults to all ones; padded positions get finite logits that mean nothing.
    pub fn forward_train(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        self.train_forward(input_ids, attention_mask, None)
    }

    /// Logits `(n, vocab)` of the `n` positions `rows: (n,)` u32 (flat indices into the
    /// `b × l` positions of `input_ids`), through the same differentiable forward as
    /// [`Policy::forward_train`]: every layer runs over every position, but the final norm and
    /// the vocabulary head only over the rows asked for (training reads the logits of its
    /// trained tokens only, a fraction of a conversation).
    pub fn forward_train_rows(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        rows: &Tensor,
    ) -> Result<Tensor> {
        self.train_forward(input_ids, attention_mask, Some(rows))
    }

    /// The training forward of [`Policy::forward_train`] (`rows` absent) and
    /// [`Policy::forward_train_rows`].
    fn train_forward(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        rows: Option<&Tensor>,
    ) -> Result<Tensor> {
        let context = format!("{:?} training forward", self.cfg.architecture);
        let (b, l) = input_ids.dims2().map_err(|e| Error::candle(&context, e))?;
        let mask = read_mask(attention_mask, b, l).map_err(|e| Error::candle(&context, e))?;
        let positions = train_positions(&mask, l);
        self.run(
            Mode::Train,
            input_ids,
            positions,
            Visible::Causal(mask),
            0,
            None,
            rows,
        )
        .and_then(|x| self.head(&x))
        .map_err(|e| Error::candle(&context, e))
    }

    /// The vocabulary head over final hidden states (the final norm applied).
    fn head(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        layers::linear(x, &self.lm_head)
    }

    /// The log-probability of `targets: (n,)` u32 and the entropy of the next-token
    /// distribution, each `(n,)`, at the `n` positions `rows` names (flat indices into the
    /// `b × l` positions of `input_ids`, or all of them in order when `rows` is absent),
    /// differentiable with respect to every parameter: what [`target_logprobs_and_entropy`]
    /// gives for the logits of [`Policy::forward_train_rows`], in one pass. On the CPU in f32
    /// the vocabulary head and the statistics are one graph node, so that no `(n, vocab)`
    /// gradient is zero-filled and added to in the backward. `entropy_grad` says whether the
    /// caller's loss differentiates the entropy: when it does not, that node's backward is
    /// cheaper (see `cpu::train_ops::head_token_stats`); the gradients are the same either way.
    pub fn train_token_stats(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        rows: Option<&Tensor>,
        targets: &Tensor,
        entropy_grad: bool,
    ) -> Result<(Tensor, Tensor)> {
        let context = format!("{:?} training token statistics", self.cfg.architecture);
        let (b, l) = input_ids.dims2().map_err(|e| Error::candle(&context, e))?;
        let mask = read_mask(attention_mask, b, l).map_err(|e| Error::candle(&context, e))?;
        let positions = train_positions(&mask, l);
        self.token_stats(
            input_ids,
            positions,
            Visible::Causal(mask),
            rows,
            targets,
            entropy_grad,
        )
        .map_err(|e| Error::candle(&context, e))
    }

    /// [`Policy::train_token_stats`] over rows the caller laid out: `positions` (`b × l`)
    /// gives each token's position (its rotary angle) and `allowed` (`b × l × l`, row-major)
    /// which keys each query attends to, 1 where query `i` of a row sees key `j`. Every query
    /// must see itself. One row can hold several sequences that begin with the same tokens,
    /// the shared tokens once: each sequence's own tokens see the shared ones and the own ones
    /// before them, at the positions they have in the sequence.
    pub fn train_token_stats_laid_out(
        &self,
        input_ids: &Tensor,
        positions: Vec<u32>,
        allowed: Vec<u8>,
        rows: &Tensor,
        targets: &Tensor,
        entropy_grad: bool,
    ) -> Result<(Tensor, Tensor)> {
        let context = format!("{:?} training token statistics", self.cfg.architecture);
        let (b, l) = input_ids.dims2().map_err(|e| Error::candle(&context, e))?;
        if positions.len() != b * l || allowed.len() != b * l * l {
            return Err(Error::candle(
                &context,
                candle_core::Error::Msg(format!(
                    "the input is ({b}, {l}), so {} positions and {} mask entries are needed; \
                     got {} and {}",
                    b * l,
                    b * l * l,
                    positions.len(),
                    allowed.len()
                )),
            ));
        }
        if let Some(query) = (0..b * l).find(|&q| allowed[q * l + q % l] == 0) {
            return Err(Error::candle(
                &context,
                candle_core::Error::Msg(format!(
                    "query {} of row {} does not see itself",
                    query % l,
                    query / l
                )),
            ));
        }
        self.token_stats(
            input_ids,
            positions,
            Visible::Given(allowed),
            Some(rows),
            targets,
            entropy_grad,
        )
        .map_err(|e| Error::candle(&context, e))
    }

    /// The body of [`Policy::train_token_stats`] and [`Policy::train_token_stats_laid_out`].
    fn token_stats(
        &self,
        input_ids: &Tensor,
        positions: Vec<u32>,
        visible: Visible,
        rows: Option<&Tensor>,
        targets: &Tensor,
        entropy_grad: bool,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let x = self.run(Mode::Train, input_ids, positions, visible, 0, None, rows)?;
        let x = x.reshape(((), self.cfg.hidden_size))?;
        if cpu::applies(&x) && cpu::applies(&self.lm_head) {
            let stats = cpu::train_ops::head_token_stats(&x, &self.lm_head, targets, entropy_grad)?;
            let column = |k: usize| stats.narrow(1, k, 1)?.squeeze(1)?.contiguous();
            return Ok((column(0)?, column(1)?));
        }
        let logits = self.head(&x)?.to_dtype(DType::F32)?.unsqueeze(0)?;
        let (logp, entropy) = target_logprobs_and_entropy(&logits, &targets.unsqueeze(0)?)?;
        Ok((logp.squeeze(0)?, entropy.squeeze(0)?))
    }

    /// Generation step: runs `input_ids: (b, l)` after whatever `cache` holds and returns the
    /// logits `(b, vocab)` of the last position, as `f32`. For a prompt, left-pad it (see
    /// [`left_pad`]) and pass the mask; for each next token, pass `(b, 1)` and no mask. No
    /// autograd graph is kept.
    pub fn forward_cached(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let context = format!("{:?} cached forward", self.cfg.architecture);
        let (b, l) = input_ids.dims2().map_err(|e| Error::candle(&context, e))?;
        let mask = read_mask(attention_mask, b, l).map_err(|e| Error::candle(&context, e))?;
        if cache.key_mask.is_empty() {
            cache.layers = (0..self.cfg.n_layers).map(|_| LayerKv::default()).collect();
            cache.key_mask = vec![Vec::new(); b];
            cache.next_pos = vec![0; b];
        } else if cache.batch_size() != b {
            return Err(Error::candle(
                &context,
                candle_core::Error::Msg(format!(
                    "the cache holds {} rows but the input has {b}",
                    cache.batch_size()
                )),
            ));
        }
        let past = cache.len();
        let mut positions = Vec::with_capacity(b * l);
        for (row, row_mask) in mask.chunks(l.max(1)).enumerate() {
            for &real in row_mask {
                positions.push(cache.next_pos[row]);
                cache.next_pos[row] += u32::from(real != 0);
                cache.key_mask[row].push(real);
            }
        }
        let key_mask: Vec<u8> = cache.key_mask.concat();
        self.run(
            Mode::Generate,
            input_ids,
            positions,
            Visible::Causal(key_mask),
            past,
            Some(&mut cache.layers),
            None,
        )
        .and_then(|x| layers::linear(&x, &self.lm_head.detach()))
        .and_then(|logits| logits.squeeze(1)?.to_dtype(DType::F32))
        .map_err(|e| Error::candle(&context, e))
    }

    /// The next-token logits (`f32`, one per vocabulary entry) after one `prompt`, from a
    /// fresh cache.
    pub fn next_token_logits(&self, prompt: &[u32]) -> Result<Vec<f32>> {
        if prompt.is_empty() {
            return Err(Error::Data {
                source_name: "next-token logits".to_owned(),
                message: "the prompt is empty; start it with at least one token".to_owned(),
            });
        }
        let context = "next-token logits";
        let ids = Tensor::new(prompt, &self.device)
            .and_then(|t| t.unsqueeze(0))
            .map_err(|e| Error::candle(context, e))?;
        self.forward_cached(&ids, None, &mut KvCache::new())?
            .flatten_all()
            .and_then(|l| l.to_vec1::<f32>())
            .map_err(|e| Error::candle(context, e))
    }

    /// Greedy decoding of a batch of prompts (left-padded together), up to `max_new_tokens`
    /// each; a row stops after emitting one of `stop_tokens` (which is kept).
    pub fn generate_greedy(
        &self,
        prompts: &[Vec<u32>],
        max_new_tokens: usize,
        stop_tokens: &[u32],
    ) -> Result<Vec<Vec<u32>>> {
        let generated = self.generate(prompts, max_new_tokens, stop_tokens, &Sampling::greedy())?;
        Ok(generated.into_iter().map(|g| g.tokens).collect())
    }

    /// Decodes a batch of prompts (left-padded together) with `sampling`, up to
    /// `max_new_tokens` each; a row stops after emitting one of `stop_tokens` (which is kept).
    /// Each token comes with its log-probability under the policy itself (temperature 1, no
    /// truncation), the quantity a policy-gradient update compares against.
    pub fn generate(
        &self,
        prompts: &[Vec<u32>],
        max_new_tokens: usize,
        stop_tokens: &[u32],
        sampling: &Sampling,
    ) -> Result<Vec<Generated>> {
        self.generate_streaming(
            prompts,
            max_new_tokens,
            stop_tokens,
            sampling,
            &mut |_, _| {},
        )
    }

    /// [`Policy::generate`], handing each new token to `on_token(row, token)` as soon as it is
    /// picked (a streaming server's hook); the tokens passed are exactly those returned.
    pub fn generate_streaming(
        &self,
        prompts: &[Vec<u32>],
        max_new_tokens: usize,
        stop_tokens: &[u32],
        sampling: &Sampling,
        on_token: &mut (dyn FnMut(usize, u32) + Send),
    ) -> Result<Vec<Generated>> {
        check_prompts(prompts)?;
        let b = prompts.len();
        if b == 0 || max_new_tokens == 0 {
            return Ok(vec![Generated::default(); b]);
        }
        // The decode loop runs on a rayon worker with the other workers kept looking for work
        // (see `with_workers_awake`).
        cpu::with_workers_awake(&self.device, || {
            self.generate_here(prompts, max_new_tokens, stop_tokens, sampling, on_token)
        })
    }

    fn generate_here(
        &self,
        prompts: &[Vec<u32>],
        max_new_tokens: usize,
        stop_tokens: &[u32],
        sampling: &Sampling,
        on_token: &mut (dyn FnMut(usize, u32) + Send),
    ) -> Result<Vec<Generated>> {
        let b = prompts.len();
        let mut out = vec![Generated::default(); b];
        let mut rngs: Vec<Rng> = (0..b as u64).map(|row| sampling.row_rng(row)).collect();
        // Rows with the same prompt (a GRPO group's completions) share one prompt pass: the
        // distinct prompts run once, then their keys, values and last logits are copied out to
        // every row that asked for them. Each row still samples from its own random stream.
        let (distinct, row_of) = distinct_prompts(prompts);
        let (ids, mask) = left_pad(&distinct, 0, &self.device)?;
        let mut cache = KvCache::new();
        let decoding = |e| Error::candle("decoding", e);
        let prompt_logits = self.forward_cached(&ids, Some(&mask), &mut cache)?;
        let vocab = prompt_logits.dim(1).map_err(decoding)?;
        let distinct_logits = prompt_logits
            .flatten_all()
            .and_then(|l| l.to_vec1::<f32>())
            .map_err(decoding)?;
        let mut logits = if distinct.len() < b {
            cache = cache.select_rows(&row_of)?;
            row_of
                .iter()
                .flat_map(|&prompt| &distinct_logits[prompt * vocab..(prompt + 1) * vocab])
                .copied()
                .collect()
        } else {
            distinct_logits
        };
        // On the CPU in f32 every later token goes through the plain-Rust step.
        let mut state = if decode::applies(self) {
            Some(decode::DecodeState::from_cache(self, &cache, max_new_tokens).map_err(decoding)?)
        } else {
            None
        };
        let mut done = vec![false; b];
        for step_idx in 0..max_new_tokens {
            let rows: Vec<&[f32]> = logits.chunks(vocab.max(1)).collect();
            // Rows pick in parallel: each has its own random stream, and a pick reads the
            // whole vocabulary (its log-normaliser at least). One row runs inline.
            let picks: Vec<(u32, f32)> = rows
                .par_iter()
                .zip(rngs.par_iter_mut())
                .map(|(row_logits, rng)| sampling.pick(row_logits, rng))
                .collect();
            let mut next = Vec::with_capacity(b);
            for (row, &(token, logprob)) in picks.iter().enumerate() {
                next.push(token);
                if !done[row] {
                    out[row].tokens.push(token);
                    out[row].logprobs.push(logprob);
                    on_token(row, token);
                    done[row] = stop_tokens.contains(&token);
                }
            }
            if step_idx + 1 == max_new_tokens || done.iter().all(|&d| d) {
                break;
            }
            match &mut state {
                // The previous step's logits buffer, picked from above, takes the new ones.
                Some(state) => self
                    .decode_step(state, &next, &mut logits)
                    .map_err(decoding)?,
                None => {
                    let ids = Tensor::from_vec(next, (b, 1), &self.device).map_err(decoding)?;
                    logits = self
                        .forward_cached(&ids, None, &mut cache)?
                        .flatten_all()
                        .and_then(|l| l.to_vec1::<f32>())
                        .map_err(decoding)?;
                }
            }
        }
        Ok(out)
    }

    /// Embedding → layers → final norm, for the positions given; the caller applies the
    /// vocabulary head. Returns all positions in training mode (or, with `rows`, those flat
    /// positions as `(n, hidden)`) and the last one (`(b, 1, hidden)`) in generation mode.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        mode: Mode,
        input_ids: &Tensor,
        positions: Vec<u32>,
        visible: Visible,
        past: usize,
        cache: Option<&mut Vec<LayerKv>>,
        rows: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let (b, l) = input_ids.dims2()?;
        let step = self.step(mode, positions, visible, past, (b, l))?;
        let detached;
        let (embed, layers, norm) = match mode {
            Mode::Train => (self.embed.clone(), &self.layers, self.norm.clone()),
            Mode::Generate => {
                detached = self
                    .layers
                    .iter()
                    .map(DecoderLayer::detached)
                    .collect::<Vec<_>>();
                (self.embed.detach(), &detached, self.norm.detach())
            }
        };
        let ids = input_ids.to_device(&self.device)?.flatten_all()?;
        let mut x = embed
            .index_select(&ids, 0)?
            .reshape((b, l, self.cfg.hidden_size))?;
        match cache {
            Some(kvs) => {
                for (layer, kv) in layers.iter().zip(kvs.iter_mut()) {
                    x = layer.forward(&x, &step, Some(kv))?;
                }
            }
            // Training on the CPU in f32: the layers as one graph node with its own backward.
            None if mode == Mode::Train && cpu::applies(&x) => {
                x = stack::forward(&x, layers, &step)?;
            }
            None => {
                for layer in layers {
                    x = layer.forward(&x, &step, None)?;
                }
            }
        }
        if mode == Mode::Generate {
            x = x.narrow(1, l - 1, 1)?;
        } else if let Some(rows) = rows {
            x = x
                .reshape((b * l, self.cfg.hidden_size))?
                .index_select(&rows.to_device(&self.device)?, 0)?;
        }
        layers::rms_norm(&x, &norm, self.cfg.rms_norm_eps, mode)
    }

    /// The rotary tables and attention mask of one forward pass, built on the device:
    /// `positions` holds the position of each of the `b * l` new tokens, `key_mask` says which
    /// of the `b * (past + l)` keys are real tokens.
    fn step(
        &self,
        mode: Mode,
        positions: Vec<u32>,
        visible: Visible,
        past: usize,
        (b, l): (usize, usize),
    ) -> candle_core::Result<Step> {
        let dev = &self.device;
        let half = self.inv_freq.len();
        // Angles in f32 as the reference implementations compute them (f64 for f64 models).
        let table_dtype = if self.dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let pos = Tensor::from_vec(positions, (b * l, 1), dev)?.to_dtype(table_dtype)?;
        let inv_freq =
            Tensor::from_vec(self.inv_freq.clone(), (1, half), dev)?.to_dtype(table_dtype)?;
        let angles = pos.broadcast_mul(&inv_freq)?;
        let angles = match mode {
            // The rotate-half layout repeats the halves; the fused kernel wants them once.
            Mode::Train => Tensor::cat(&[&angles, &angles], 1)?.reshape((b, 1, l, 2 * half))?,
            Mode::Generate => angles.reshape((b, l, half))?,
        };
        let cos = angles.cos()?.to_dtype(self.dtype)?;
        let sin = angles.sin()?.to_dtype(self.dtype)?;

        let allowed = match visible {
            // Query i (absolute index past + i) sees real keys up to itself, and always
            // itself, so that a padding query has a finite softmax.
            Visible::Causal(key_mask) => {
                let t = past + l;
                let key_real = Tensor::from_vec(key_mask, (b, 1, 1, t), dev)?;
                let key_idx = Tensor::arange(0u32, t as u32, dev)?.reshape((1, t))?;
                let query_idx = Tensor::arange(past as u32, t as u32, dev)?.reshape((l, 1))?;
                let causal = key_idx.broadcast_le(&query_idx)?;
                let itself = key_idx.broadcast_eq(&query_idx)?;
                causal
                    .broadcast_mul(&key_real)?
                    .broadcast_maximum(&itself)?
            }
            Visible::Given(allowed) => Tensor::from_vec(allowed, (b, 1, l, l), dev)?,
        };
        let decode_allowed = if mode == Mode::Generate && l == 1 && dev.is_cpu() {
            Some(allowed.flatten_all()?.to_vec1::<u8>()?)
        } else {
            None
        };
        Ok(Step {
            mode,
            cos,
            sin,
            allowed,
            decode_allowed,
        })
    }
}

/// The log-probability of each target token and the entropy of each next-token distribution,
/// both `(b, l)`, from `logits: (b, l, vocab)` and `targets: (b, l)` u32; differentiable through
/// both. On the CPU in f32 one fused pass each way (no `(b, l, vocab)` log-softmax is kept);
/// elsewhere log-softmax, gather and `−Σ p log p` composed.
pub fn target_logprobs_and_entropy(
    logits: &Tensor,
    targets: &Tensor,
) -> candle_core::Result<(Tensor, Tensor)> {
    let (b, l, vocab) = logits.dims3()?;
    if cpu::applies(logits) {
        let stats =
            cpu::train_ops::token_stats(&logits.reshape((b * l, vocab))?, &targets.flatten_all()?)?;
        let column = |k: usize| stats.narrow(1, k, 1)?.reshape((b, l));
        return Ok((column(0)?, column(1)?));
    }
    let logp = candle_nn::ops::log_softmax(logits, candle_core::D::Minus1)?;
    let picked = logp.gather(&targets.unsqueeze(2)?, 2)?.squeeze(2)?;
    let entropy = (logp.exp()? * &logp)?.sum(candle_core::D::Minus1)?.neg()?;
    Ok((picked, entropy))
}

/// Which keys each query of a forward attends to.
enum Visible {
    /// The real keys (`b × (past + l)`, 1 = real) up to the query itself, and always itself.
    Causal(Vec<u8>),
    /// Exactly those marked in `b × l × l` (query-major), for a forward with no cache.
    Given(Vec<u8>),
}

/// The position of each of the `b × l` tokens of a training batch: the count of real tokens
/// before it in its row (`mask` as [`read_mask`] gives it, rows of `l`).
fn train_positions(mask: &[u8], l: usize) -> Vec<u32> {
    let mut positions = Vec::with_capacity(mask.len());
    for row_mask in mask.chunks(l.max(1)) {
        let mut n_real = 0u32;
        for &real in row_mask {
            positions.push(n_real);
            n_real += u32::from(real != 0);
        }
    }
    positions
}

/// The attention mask as `b * l` bytes (1 = real token); all ones when absent.
fn read_mask(mask: Option<&Tensor>, b: usize, l: usize) -> candle_core::Result<Vec<u8>> {
    match mask {
        None => Ok(vec![1; b * l]),
        Some(mask) => {
            if mask.dims() != [b, l] {
                candle_core::bail!(
                    "attention_mask has shape {:?}; input_ids has ({b}, {l})",
                    mask.dims()
                );
            }
            let values = mask.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            Ok(values.into_iter().map(|v| u8::from(v != 0.0)).collect())
        }
    }
}

/// The files holding the weights of a Hugging Face folder.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index_path = dir.join(WEIGHTS_INDEX_FILE);
    if index_path.is_file() {
        let text = std::fs::read_to_string(&index_path).map_err(|e| Error::io(&index_path, e))?;
        let index: Value = serde_json::from_str(&text).map_err(|e| Error::Weights {
            path: index_path.clone(),
            message: format!("not valid JSON: {e}"),
        })?;
        let Some(Value::Object(weight_map)) = index.get("weight_map") else {
            return Err(Error::Weights {
                path: index_path,
                message: "no \"weight_map\" object".to_owned(),
            });
        };
        let mut files: Vec<PathBuf> = Vec::new();
        for (tensor, file) in weight_map {
            let Some(file) = file.as_str() else {
                return Err(Error::Weights {
                    path: index_path,
                    message: format!("weight_map entry {tensor:?} is not a file name"),
                });
            };
            let path = dir.join(file);
            if !files.contains(&path) {
                files.push(path);
            }
        }
        return Ok(files);
    }
    let single = dir.join(WEIGHTS_FILE);
    if single.is_file() {
        return Ok(vec![single]);
    }
    Err(Error::Weights {
        path: dir.to_path_buf(),
        message: format!("neither {WEIGHTS_FILE} nor {WEIGHTS_INDEX_FILE} is in this folder"),
    })
}

/// FNV-1a hash of a parameter name, so that each tensor draws from its own random stream.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_the_whole_distribution_draws_each_token_at_its_probability() {
        // A NaN and an impossible token must never come out.
        let logits = [2.0f32, 0.5, f32::NAN, -1.0, f32::NEG_INFINITY, 1.0];
        for temperature in [1.0, 0.5] {
            let weights: Vec<f64> = logits
                .iter()
                .map(|&v| {
                    let v = if v.is_nan() {
                        f64::NEG_INFINITY
                    } else {
                        f64::from(v)
                    };
                    (v / temperature).exp()
                })
                .collect();
            let total: f64 = weights.iter().sum();
            // The unsorted walk (whole distribution) and the sorted one (a nucleus that keeps
            // every token) must both match the softmax.
            for top_p in [1.0, 1.0 - 1e-12] {
                let sampling = Sampling {
                    temperature,
                    top_p,
                    top_k: 0,
                    seed: 0,
                };
                let mut rng = Rng::new(17);
                let n = 200_000;
                let mut counts = [0usize; 6];
                for _ in 0..n {
                    counts[sampling.pick(&logits, &mut rng).0 as usize] += 1;
                }
                assert_eq!(counts[2] + counts[4], 0, "NaN or -inf sampled: {counts:?}");
                for (idx, &count) in counts.iter().enumerate() {
                    let expected = weights[idx] / total;
                    let got = count as f64 / n as f64;
                    assert!(
                        (got - expected).abs() < 0.005,
                        "T = {temperature}, top_p = {top_p}, token {idx}: {got} vs {expected}"
                    );
                }
            }
        }
    }
}
