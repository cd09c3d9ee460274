//! The decoder layer of every supported architecture, described once: its tensors by Hugging
//! Face name, their initialisation, and its forward pass in both modes ([`Mode`]). Qwen3 and
//! Llama differ here only by Qwen3's per-head RMSNorm of queries and keys
//! ([`has_qk_norm`]); how each reads and writes `config.json` lives in `qwen3.rs` and
//! `llama.rs`.

use candle_core::{Result, Tensor};

use super::layers::{self, LayerKv, Mode, Step};
use super::{ParamInit, ParamSpec, TransformerConfig};
use crate::config::Architecture;

/// Whether layers of `architecture` normalise each head's queries and keys before RoPE.
pub(crate) fn has_qk_norm(architecture: Architecture) -> bool {
    match architecture {
        Architecture::Qwen3 => true,
        Architecture::Llama => false,
    }
}

/// The trainable tensors of decoder layer `idx`, with their Hugging Face names.
pub(crate) fn layer_params(cfg: &TransformerConfig, idx: usize) -> Vec<ParamSpec> {
    let p = format!("model.layers.{idx}");
    let (h, d) = (cfg.hidden_size, cfg.head_dim);
    let (q, kv, i) = (cfg.n_heads * d, cfg.n_kv_heads * d, cfg.intermediate_size);
    let mut specs = vec![
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
    ];
    // Qwen3's norms sit after the attention's projections, as in its checkpoints.
    if has_qk_norm(cfg.architecture) {
        for name in ["q_norm", "k_norm"] {
            specs.push(ParamSpec::new(
                format!("{p}.self_attn.{name}.weight"),
                &[d],
                ParamInit::Ones,
            ));
        }
    }
    specs.extend([
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
    ]);
    specs
}

/// One decoder layer.
#[derive(Debug, Clone)]
pub(crate) struct DecoderLayer {
    pub(super) input_layernorm: Tensor,
    pub(super) q_proj: Tensor,
    pub(super) k_proj: Tensor,
    pub(super) v_proj: Tensor,
    pub(super) o_proj: Tensor,
    /// Qwen3's per-head query and key norms.
    pub(super) qk_norm: Option<(Tensor, Tensor)>,
    pub(super) post_attention_layernorm: Tensor,
    pub(super) gate_proj: Tensor,
    pub(super) up_proj: Tensor,
    pub(super) down_proj: Tensor,
    pub(super) n_heads: usize,
    pub(super) n_kv_heads: usize,
    pub(super) head_dim: usize,
    pub(super) eps: f64,
}

impl DecoderLayer {
    /// Builds layer `idx` from named parameters.
    pub(crate) fn new(
        cfg: &TransformerConfig,
        idx: usize,
        get: &dyn Fn(&str) -> crate::Result<Tensor>,
    ) -> crate::Result<Self> {
        let p = format!("model.layers.{idx}");
        Ok(DecoderLayer {
            input_layernorm: get(&format!("{p}.input_layernorm.weight"))?,
            q_proj: get(&format!("{p}.self_attn.q_proj.weight"))?,
            k_proj: get(&format!("{p}.self_attn.k_proj.weight"))?,
            v_proj: get(&format!("{p}.self_attn.v_proj.weight"))?,
            o_proj: get(&format!("{p}.self_attn.o_proj.weight"))?,
            qk_norm: if has_qk_norm(cfg.architecture) {
                Some((
                    get(&format!("{p}.self_attn.q_norm.weight"))?,
                    get(&format!("{p}.self_attn.k_norm.weight"))?,
                ))
            } else {
                None
            },
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
        DecoderLayer {
            input_layernorm: self.input_layernorm.detach(),
            q_proj: self.q_proj.detach(),
            k_proj: self.k_proj.detach(),
            v_proj: self.v_proj.detach(),
            o_proj: self.o_proj.detach(),
            qk_norm: self.qk_norm.as_ref().map(|(q, k)| (q.detach(), k.detach())),
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
        let (q, k) = match &self.qk_norm {
            Some((q_norm, k_norm)) => (
                layers::rms_norm(&q, q_norm, self.eps, mode)?,
                layers::rms_norm(&k, k_norm, self.eps, mode)?,
            ),
            None => (q, k),
        };
        let (q, k) = (q.transpose(1, 2)?, k.transpose(1, 2)?);
        let v = v.transpose(1, 2)?;
        let q = layers::rope(&q, step)?;
        let k = layers::rope(&k, step)?;
        let attn = layers::attention(&q, &k, &v, step, kv)?;
        let x = (x + layers::linear(&attn, &self.o_proj)?)?;
        let h = layers::rms_norm(&x, &self.post_attention_layernorm, self.eps, mode)?;
        x + layers::swiglu(&h, &self.gate_proj, &self.up_proj, &self.down_proj)?
    }
}
