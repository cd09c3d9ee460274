//! Qwen3's `config.json` dialect: what it reads and writes (grouped-query attention with
//! per-head q/k RMSNorm, RoPE, RMSNorm, SwiGLU, tied or untied embeddings), so real checkpoints
//! load unchanged; its layer is the shared one in `decoder.rs`.

use serde_json::{Map, Value, json};

use super::{HfConfig, TransformerConfig};
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
