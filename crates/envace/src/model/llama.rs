//! Llama's `config.json` dialect (SmolLM2 is a Llama): what it reads and writes (grouped-query
//! attention without q/k norm, RoPE with optional Llama 3 frequency scaling, RMSNorm, SwiGLU,
//! tied or untied embeddings), so real checkpoints load unchanged; its layer is the shared one
//! in `decoder.rs`.

use serde_json::{Map, Value, json};

use super::{
    HfConfig, RopeScaling, TransformerConfig, decoder_config_from_hf, decoder_config_to_hf,
};
use crate::config::Architecture;

/// Reads a Llama `config.json` (already known to say `"model_type": "llama"`).
pub(crate) fn config_from_hf(hf: &HfConfig<'_>) -> crate::Result<TransformerConfig> {
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
    decoder_config_from_hf(hf, Architecture::Llama, 2048, rope_scaling)
}

/// The Llama fields of `config.json`, as `transformers` writes them.
pub(crate) fn config_to_hf(cfg: &TransformerConfig) -> Map<String, Value> {
    let rope_scaling = cfg.rope_scaling.as_ref().map_or(Value::Null, |s| {
        json!({
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position_embeddings,
        })
    });
    decoder_config_to_hf(
        cfg,
        ("LlamaForCausalLM", "llama"),
        vec![("mlp_bias", false.into()), ("pretraining_tp", 1.into())],
        Vec::new(),
        rope_scaling,
    )
}
