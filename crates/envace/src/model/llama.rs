//! Llama's `config.json` dialect (SmolLM2 is a Llama): what it reads and writes (grouped-query
//! attention without q/k norm, RoPE with optional Llama 3 frequency scaling, RMSNorm, SwiGLU,
//! tied or untied embeddings), so real checkpoints load unchanged; its layer is the shared one
//! in `decoder.rs`.

use serde_json::{Map, Value, json};

use super::{HfConfig, RopeScaling, TransformerConfig};
use crate::config::Architecture;

/// Reads a Llama `config.json` (already known to say `"model_type": "llama"`).
pub(crate) fn config_from_hf(hf: &HfConfig<'_>) -> crate::Result<TransformerConfig> {
    hf.expect_str_or("hidden_act", "silu")?;
    hf.expect_bool_or("attention_bias", false)?;
    hf.expect_bool_or("mlp_bias", false)?;
    if hf.usize_or("pretraining_tp", 1)? != 1 {
        return Err(hf.error("pretraining_tp", "only pretraining_tp = 1 is implemented"));
    }
    let rope_scaling = if hf.is_null("rope_scaling") {
        None
    } else {
        let scaling = hf.object("rope_scaling")?;
        let rope_type = match scaling.opt_str("rope_type")? {
            Some(rope_type) => rope_type,
            None => scaling.str_or("type", "default")?,
        };
        match rope_type.as_str() {
            "default" => None,
            "llama3" => Some(RopeScaling {
                factor: scaling.f64("factor")?,
                low_freq_factor: scaling.f64("low_freq_factor")?,
                high_freq_factor: scaling.f64("high_freq_factor")?,
                original_max_position_embeddings: scaling
                    .usize("original_max_position_embeddings")?,
            }),
            other => {
                return Err(hf.error(
                    "rope_scaling",
                    &format!("rope_type {other:?} is not implemented; use \"llama3\" or none"),
                ));
            }
        }
    };
    let hidden_size = hf.usize("hidden_size")?;
    let n_heads = hf.usize("num_attention_heads")?;
    Ok(TransformerConfig {
        architecture: Architecture::Llama,
        vocab_size: hf.usize("vocab_size")?,
        hidden_size,
        intermediate_size: hf.usize("intermediate_size")?,
        n_layers: hf.usize("num_hidden_layers")?,
        n_heads,
        n_kv_heads: hf.usize_or("num_key_value_heads", n_heads)?,
        head_dim: hf.usize_or("head_dim", hidden_size / n_heads.max(1))?,
        max_position_embeddings: hf.usize_or("max_position_embeddings", 2048)?,
        rope_theta: hf.f64_or("rope_theta", 10_000.0)?,
        rope_scaling,
        rms_norm_eps: hf.f64_or("rms_norm_eps", 1e-6)?,
        tie_word_embeddings: hf.bool_or("tie_word_embeddings", false)?,
        initializer_range: hf.f64_or("initializer_range", 0.02)?,
        bos_token_id: hf.opt_u32("bos_token_id")?,
        eos_token_ids: hf.u32_list("eos_token_id")?,
    })
}

/// The Llama fields of `config.json`, as `transformers` writes them.
pub(crate) fn config_to_hf(cfg: &TransformerConfig) -> Map<String, Value> {
    let value = json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
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
        "mlp_bias": false,
        "pretraining_tp": 1,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling.as_ref().map(|s| json!({
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position_embeddings,
        })),
        "rms_norm_eps": cfg.rms_norm_eps,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "initializer_range": cfg.initializer_range,
    });
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}
