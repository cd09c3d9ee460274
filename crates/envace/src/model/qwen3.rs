//! Qwen3: grouped-query attention with per-head q/k RMSNorm, RoPE, RMSNorm, SwiGLU, tied or
//! untied embeddings; Hugging Face weight names and `config.json` fields, so real checkpoints
//! load unchanged.

use candle_core::{Result, Tensor};
use serde_json::{Map, Value, json};

use super::layers::{self, LayerKv, Mode, Step};
use super::{HfConfig, ParamInit, ParamSpec, TransformerConfig};
use crate::config::Architecture;

/// Reads a Qwen3 `config.json` (already known to say `"model_type": "qwen3"`).
pub(crate) fn config_from_hf(hf: &HfConfig<'_>) -> crate::Result<TransformerConfig> {
    hf.expect_str_or("hidden_act", "silu")?;
    hf.expect_bool_or("attention_bias", false)?;
    hf.expect_bool_or("use_sliding_window", false)?;
    if !hf.is_null("rope_scaling") {
        return Err(hf.error("rope_scaling", "RoPE scaling is not implemented for qwen3"));
    }
    let hidden_size = hf.usize("hidden_size")?;
    let n_heads = hf.usize("num_attention_heads")?;
    Ok(TransformerConfig {
        architecture: Architecture::Qwen3,
        vocab_size: hf.usize("vocab_size")?,
        hidden_size,
        intermediate_size: hf.usize("intermediate_size")?,
        n_layers: hf.usize("num_hidden_layers")?,
        n_heads,
        n_kv_heads: hf.usize_or("num_key_value_heads", n_heads)?,
        head_dim: hf.usize_or("head_dim", hidden_size / n_heads.max(1))?,
        max_position_embeddings: hf.usize_or("max_position_embeddings", 32768)?,
        rope_theta: hf.f64_or("rope_theta", 10_000.0)?,
        rope_scaling: None,
        rms_norm_eps: hf.f64_or("rms_norm_eps", 1e-6)?,
        tie_word_embeddings: hf.bool_or("tie_word_embeddings", false)?,
        initializer_range: hf.f64_or("initializer_range", 0.02)?,
        bos_token_id: hf.opt_u32("bos_token_id")?,
        eos_token_ids: hf.u32_list("eos_token_id")?,
    })
}

/// The Qwen3 fields of `config.json`, as `transformers` writes them.
pub(crate) fn config_to_hf(cfg: &TransformerConfig) -> Map<String, Value> {
    let value = json!({
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "attention_bias": false,
        "attention_dropout": 0.0,
        "max_position_embeddings": cfg.max_position_embeddings,
        "max_window_layers": cfg.n_layers,
        "use_sliding_window": false,
        "sliding_window": null,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": null,
        "rms_norm_eps": cfg.rms_norm_eps,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "initializer_range": cfg.initializer_range,
    });
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The trainable tensors of decoder layer `idx`, with their Hugging Face names.
pub(crate) fn layer_params(cfg: &TransformerConfig, idx: usize) -> Vec<ParamSpec> {
    let p = format!("model.layers.{idx}");
    let (h, d) = (cfg.hidden_size, cfg.head_dim);
    let (q, kv, i) = (cfg.n_heads * d, cfg.n_kv_heads * d, cfg.intermediate_size);
    vec![
        ParamSpec::new(format!("{p}.input_layernorm.weight"), &[h], ParamInit::Ones),
        ParamSpec::new(
            format!("{p}.self_attn.q_proj.weight"),
            &[q, h],
            ParamInit::Normal,
        ),
        ParamSpec::new(
            format!("{p}.self_attn.k_proj.weight"),
            &[kv, h],
            ParamInit::Normal,
        ),
        ParamSpec::new(
            format!("{p}.self_attn.v_proj.weight"),
            &[kv, h],
            ParamInit::Normal,
        ),
        ParamSpec::new(
            format!("{p}.self_attn.o_proj.weight"),
            &[h, q],
            ParamInit::Normal,
        ),
        ParamSpec::new(
            format!("{p}.self_attn.q_norm.weight"),
            &[d],
            ParamInit::Ones,
        ),
        ParamSpec::new(
            format!("{p}.self_attn.k_norm.weight"),
            &[d],
            ParamInit::Ones,
        ),
        ParamSpec::new(
            format!("{p}.post_attention_layernorm.weight"),
            &[h],
            ParamInit::Ones,
        ),
        ParamSpec::new(
            format!("{p}.mlp.gate_proj.weight"),
            &[i, h],
            ParamInit::Normal,
        ),
        ParamSpec::new(
            format!("{p}.mlp.up_proj.weight"),
            &[i, h],
            ParamInit::Normal,
        ),
        ParamSpec::new(
            format!("{p}.mlp.down_proj.weight"),
            &[h, i],
            ParamInit::Normal,
        ),
    ]
}

/// One Qwen3 decoder layer.
#[derive(Debug, Clone)]
pub(crate) struct Qwen3Layer {
    input_layernorm: Tensor,
    q_proj: Tensor,
    k_proj: Tensor,
    v_proj: Tensor,
    o_proj: Tensor,
    q_norm: Tensor,
    k_norm: Tensor,
    post_attention_layernorm: Tensor,
    gate_proj: Tensor,
    up_proj: Tensor,
    down_proj: Tensor,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    eps: f64,
}

impl Qwen3Layer {
    /// Builds layer `idx` from named parameters.
    pub(crate) fn new(
        cfg: &TransformerConfig,
        idx: usize,
        get: &dyn Fn(&str) -> crate::Result<Tensor>,
    ) -> crate::Result<Self> {
        let p = format!("model.layers.{idx}");
        Ok(Qwen3Layer {
            input_layernorm: get(&format!("{p}.input_layernorm.weight"))?,
            q_proj: get(&format!("{p}.self_attn.q_proj.weight"))?,
            k_proj: get(&format!("{p}.self_attn.k_proj.weight"))?,
            v_proj: get(&format!("{p}.self_attn.v_proj.weight"))?,
            o_proj: get(&format!("{p}.self_attn.o_proj.weight"))?,
            q_norm: get(&format!("{p}.self_attn.q_norm.weight"))?,
            k_norm: get(&format!("{p}.self_attn.k_norm.weight"))?,
            post_attention_layernorm: get(&format!("{p}.post_attention_layernorm.weight"))?,
            gate_proj: get(&format!("{p}.mlp.gate_proj.weight"))?,
            up_proj: get(&format!("{p}.mlp.up_proj.weight"))?,
            down_proj: get(&format!("{p}.mlp.down_proj.weight"))?,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            eps: cfg.rms_norm_eps,
        })
    }

    /// The same layer on weights cut from the autograd graph, for generation.
    pub(crate) fn detached(&self) -> Self {
        Qwen3Layer {
            input_layernorm: self.input_layernorm.detach(),
            q_proj: self.q_proj.detach(),
            k_proj: self.k_proj.detach(),
            v_proj: self.v_proj.detach(),
            o_proj: self.o_proj.detach(),
            q_norm: self.q_norm.detach(),
            k_norm: self.k_norm.detach(),
            post_attention_layernorm: self.post_attention_layernorm.detach(),
            gate_proj: self.gate_proj.detach(),
            up_proj: self.up_proj.detach(),
            down_proj: self.down_proj.detach(),
            ..*self
        }
    }

    /// `x: (b, l, hidden)` → `(b, l, hidden)`.
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        step: &Step,
        kv: Option<&mut LayerKv>,
    ) -> Result<Tensor> {
        let mode: Mode = step.mode;
        let (b, l, _) = x.dims3()?;
        let h = layers::rms_norm(x, &self.input_layernorm, self.eps, mode)?;
        let q = layers::linear(&h, &self.q_proj)?.reshape((b, l, self.n_heads, self.head_dim))?;
        let k =
            layers::linear(&h, &self.k_proj)?.reshape((b, l, self.n_kv_heads, self.head_dim))?;
        let v =
            layers::linear(&h, &self.v_proj)?.reshape((b, l, self.n_kv_heads, self.head_dim))?;
        let q = layers::rms_norm(&q, &self.q_norm, self.eps, mode)?.transpose(1, 2)?;
        let k = layers::rms_norm(&k, &self.k_norm, self.eps, mode)?.transpose(1, 2)?;
        let v = v.transpose(1, 2)?;
        let q = layers::rope(&q, step)?;
        let k = layers::rope(&k, step)?;
        let attn = layers::attention(&q, &k, &v, step, kv)?;
        let x = (x + layers::linear(&attn, &self.o_proj)?)?;
        let h = layers::rms_norm(&x, &self.post_attention_layernorm, self.eps, mode)?;
        x + layers::swiglu(&h, &self.gate_proj, &self.up_proj, &self.down_proj)?
    }
}
