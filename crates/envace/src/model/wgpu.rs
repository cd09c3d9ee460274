//! The wgpu path: a policy's or a GGUF's weights on any GPU wgpu reaches (`envace-gpu`), for
//! generation while training stays on candle.
//!
//! The GPU model is described by the same Hugging Face names as the [`Policy`]; a policy's
//! tensors go up as f32, a GGUF's Q4_1 / Q8_0 projections stay quantised (their q/k rows put
//! back in the Hugging Face rotary layout, which for whole rows of blocks is a reordering), and
//! after an optimizer step [`refresh`] writes over the uploaded copies of the tensors named.

use std::sync::Arc;

use candle_core::quantized::GgmlDType;
use candle_core::{DType, Device};
use envace_gpu::{Dims, HostTensor};
pub use envace_gpu::{Gpu, GpuModel, Session};

use super::gguf::{Gguf, hf_name};
use super::{Generated, Policy, Sampling, TransformerConfig};
use crate::config::Architecture;
use crate::error::{Error, Result};

fn wgpu_error(context: &str) -> impl Fn(envace_gpu::Error) -> Error + '_ {
    move |e| Error::Wgpu {
        context: context.to_owned(),
        message: e.to_string(),
    }
}

/// Opens the GPU wgpu picks (`adapter`: part of an adapter's name, to choose among several);
/// the error names every backend tried.
pub fn open_gpu(adapter: Option<&str>) -> Result<Arc<Gpu>> {
    Gpu::open(adapter)
        .map(Arc::new)
        .map_err(|e| Error::DeviceUnavailable {
            device: "wgpu".to_owned(),
            message: e.to_string(),
        })
}

/// The GPU model's sizes from a transformer config.
fn dims(cfg: &TransformerConfig) -> Dims {
    Dims {
        vocab: cfg.vocab_size,
        hidden: cfg.hidden_size,
        n_layers: cfg.n_layers,
        n_heads: cfg.n_heads,
        n_kv: cfg.n_kv_heads,
        head_dim: cfg.head_dim,
        inter: cfg.intermediate_size,
        rms_eps: cfg.rms_norm_eps as f32,
        qk_norm: cfg.architecture == Architecture::Qwen3,
        tied: cfg.tie_word_embeddings,
        inv_freq: cfg.inv_freq(),
    }
}

/// The policy's tensor `name` as f32 values on the host.
fn policy_tensor(policy: &Policy, name: &str) -> std::result::Result<HostTensor, String> {
    let var = policy
        .vars()
        .get(name)
        .ok_or_else(|| format!("the policy has no tensor {name}"))?;
    var.as_tensor()
        .to_dtype(DType::F32)
        .and_then(|t| t.to_device(&Device::Cpu))
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .map(HostTensor::F32)
        .map_err(|e| e.to_string())
}

impl Policy {
    /// The policy's weights on `gpu` as f32, with rotary angles for `max_positions` positions.
    pub fn to_gpu(&self, gpu: Arc<Gpu>, max_positions: usize) -> Result<GpuModel> {
        let mut source = |name: &str| policy_tensor(self, name);
        GpuModel::upload(gpu, dims(&self.cfg), max_positions, &mut source)
            .map_err(wgpu_error("uploading the policy"))
    }
}

/// Writes the current values of the policy's tensors `names` over `model`'s copies (all of
/// them when `names` is empty); returns the bytes written.
pub fn refresh(model: &mut GpuModel, policy: &Policy, names: &[&str]) -> Result<u64> {
    let all: Vec<&str> = policy.vars().keys().map(String::as_str).collect();
    let names = if names.is_empty() { &all[..] } else { names };
    let mut source = |name: &str| policy_tensor(policy, name);
    model
        .refresh(names, &mut source)
        .map_err(wgpu_error("refreshing the policy's weights"))
}

/// Generates on the GPU as [`Policy::generate`] does on candle: the same prompts, limits,
/// stop tokens and sampling settings (the draws come from the GPU's own seeded generator, so
/// sampled tokens differ from candle's while following the same distribution).
pub fn generate(
    model: &GpuModel,
    prompts: &[Vec<u32>],
    max_new_tokens: usize,
    stop_tokens: &[u32],
    sampling: &Sampling,
) -> Result<Vec<Generated>> {
    generate_streaming(
        model,
        prompts,
        max_new_tokens,
        stop_tokens,
        sampling,
        &mut |_, _| {},
    )
}

/// [`generate`], handing each new token to `on_token(row, token)` as soon as it is read back.
pub fn generate_streaming(
    model: &GpuModel,
    prompts: &[Vec<u32>],
    max_new_tokens: usize,
    stop_tokens: &[u32],
    sampling: &Sampling,
    on_token: &mut (dyn FnMut(usize, u32) + Send),
) -> Result<Vec<Generated>> {
    super::check_prompts(prompts)?;
    let top_k = u32::try_from(sampling.top_k).unwrap_or(u32::MAX);
    let settings = envace_gpu::Sampling {
        temperature: sampling.temperature as f32,
        top_p: sampling.top_p as f32,
        top_k,
        seed: sampling.seed,
    };
    let out = model
        .generate_streaming(prompts, max_new_tokens, stop_tokens, &settings, on_token)
        .map_err(wgpu_error("generating"))?;
    Ok(out
        .into_iter()
        .map(|(tokens, logprobs)| Generated { tokens, logprobs })
        .collect())
}

/// Llama.cpp's interleaved q/k rows of one projection put back in the Hugging Face layout:
/// whole rows of `row_bytes` moved, so quantised blocks stay as they are.
fn unpermute_rows(bytes: &[u8], n_heads: usize, row_bytes: usize) -> Vec<u8> {
    let rows = bytes.len() / row_bytes.max(1);
    let per_head = rows / n_heads.max(1);
    let half = per_head / 2;
    let mut out = vec![0u8; bytes.len()];
    for head in 0..n_heads {
        for j in 0..2 {
            for i in 0..half {
                let from = head * per_head + 2 * i + j;
                let to = head * per_head + j * half + i;
                out[to * row_bytes..][..row_bytes]
                    .copy_from_slice(&bytes[from * row_bytes..][..row_bytes]);
            }
        }
    }
    out
}

impl Gguf {
    /// The GGUF's weights on `gpu`: Q4_1 and Q8_0 tensors as they are (q/k rows reordered to
    /// the Hugging Face layout), every other tensor dequantised to f32.
    pub fn load_gpu(&self, gpu: Arc<Gpu>, max_positions: usize) -> Result<GpuModel> {
        let cfg = self.transformer_config()?;
        let mut reader = std::io::BufReader::new(
            std::fs::File::open(self.path()).map_err(|e| Error::io(self.path(), e))?,
        );
        let by_hf: std::collections::HashMap<String, String> = self
            .content()
            .tensor_infos
            .keys()
            .filter_map(|name| Some((hf_name(name)?, name.clone())))
            .collect();
        let mut source = |name: &str| -> std::result::Result<HostTensor, String> {
            let gguf_name = by_hf
                .get(name)
                .ok_or_else(|| format!("{} has no tensor for {name}", self.path().display()))?;
            let tensor = self
                .content()
                .tensor(&mut reader, gguf_name, &Device::Cpu)
                .map_err(|e| format!("tensor {gguf_name}: {e}"))?;
            let heads = if gguf_name.ends_with(".attn_q.weight") {
                Some(cfg.n_heads)
            } else if gguf_name.ends_with(".attn_k.weight") {
                Some(cfg.n_kv_heads)
            } else {
                None
            };
            let quantised = match tensor.dtype() {
                GgmlDType::Q4_1 => Some((20, HostTensor::Q4_1 as fn(Vec<u8>) -> HostTensor)),
                GgmlDType::Q8_0 => Some((34, HostTensor::Q8_0 as fn(Vec<u8>) -> HostTensor)),
                _ => None,
            };
            match quantised {
                Some((block_bytes, wrap)) => {
                    let bytes = tensor
                        .data()
                        .map_err(|e| format!("tensor {gguf_name}: {e}"))?;
                    let (_, cols) = tensor
                        .shape()
                        .dims2()
                        .map_err(|e| format!("tensor {gguf_name}: {e}"))?;
                    let row_bytes = cols / 32 * block_bytes;
                    Ok(wrap(match heads {
                        Some(n) => unpermute_rows(&bytes, n, row_bytes),
                        None => bytes.into_owned(),
                    }))
                }
                None => {
                    let dense = tensor
                        .dequantize(&Device::Cpu)
                        .map_err(|e| format!("tensor {gguf_name}: {e}"))?;
                    let dense = match heads {
                        Some(n) => super::gguf::unpermute_rope_rows(&dense, n),
                        None => Ok(dense),
                    }
                    .and_then(|t| t.flatten_all())
                    .and_then(|t| t.to_vec1::<f32>())
                    .map_err(|e| format!("tensor {gguf_name}: {e}"))?;
                    Ok(HostTensor::F32(dense))
                }
            }
        };
        GpuModel::upload(gpu, dims(&cfg), max_positions, &mut source)
            .map_err(wgpu_error("uploading the GGUF"))
    }
}
