//! Qwen3's `config.json` dialect: what it reads and writes (grouped-query attention with
//! per-head q/k RMSNorm, RoPE, RMSNorm, SwiGLU, tied or untied embeddings), so real checkpoints
//! load unchanged; its layer is the shared one in `decoder.rs`.

use serde_json::{Map, Value};

use super::{HfConfig, TransformerConfig, decoder_config_from_hf, decoder_config_to_hf};
use crate::config::Architecture;

/// Reads a Qwen3 `config.json` (already known to say `"model_type": "qwen3"`).
pub(crate) fn config_from_hf(hf: &HfConfig<'_>) -> crate::Result<TransformerConfig> {
    hf.expect_bool_or("use_sliding_window", false)?;
    if !hf.is_null("rope_scaling") {
        return Err(hf.error("rope_scaling", "RoPE scaling is not implemented for qwen3"));
    }
    decoder_config_from_hf(hf, Architecture::Qwen3, 32768, None)
}

/// The Qwen3 fields of `config.json`, as `transformers` writes them.
pub(crate) fn config_to_hf(cfg: &TransformerConfig) -> Map<String, Value> {
    let after_positions = vec![
        ("max_window_layers", cfg.n_layers.into()),
        ("use_sliding_window", false.into()),
        ("sliding_window", Value::Null),
    ];
    decoder_config_to_hf(
        cfg,
        ("Qwen3ForCausalLM", "qwen3"),
        Vec::new(),
        after_positions,
        Value::Null,
    )
}
