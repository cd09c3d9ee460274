//! Building blocks the architectures share: RMSNorm, RoPE, masked grouped-query attention,
//! SwiGLU and the per-layer key/value cache, each in a training and a generation flavour.
//!
//! The training flavour is built only from candle ops whose backward pass works on every
//! backend (see `shared/STACK.md`): `rms_norm_slow`, a rotate-half RoPE from `narrow`/`cat`/`mul`,
//! `where_cond` masking and `ops::softmax`. The generation flavour runs on detached weights and
//! may use the fused kernels (`ops::rms_norm`, `rotary_emb::rope`, `softmax_last_dim`), which
//! have no backward pass.

use candle_core::{D, Result, Tensor};

/// Which flavour of the ops a forward pass uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Differentiable ops only; no cache.
    Train,
    /// Fused ops and a key/value cache; weights are detached.
    Generate,
}

/// What every layer of one forward pass shares: the mode, the rotary tables for the positions
/// being computed and which keys each query may see.
#[derive(Debug)]
pub(crate) struct Step {
    pub mode: Mode,
    /// Train: `(b, 1, l, head_dim)`, halves repeated. Generate: `(b, l, head_dim / 2)`.
    pub cos: Tensor,
    /// Same layout as `cos`.
    pub sin: Tensor,
    /// `(b, 1, l, t)`, 1 where query `i` may attend to key `j`, as `u8`.
    pub allowed: Tensor,
}

/// `x @ w.T` for a Hugging Face `(out, in)` weight, over any number of leading dimensions.
pub(crate) fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let dims = x.dims();
    let n_in = dims[dims.len() - 1];
    let n_rows = x.elem_count() / n_in;
    let y = x.reshape((n_rows, n_in))?.matmul(&w.t()?)?;
    let mut out_dims = dims.to_vec();
    let last = out_dims.len() - 1;
    out_dims[last] = w.dim(0)?;
    y.reshape(out_dims)
}

/// RMSNorm over the last dimension, scaled by `w`.
pub(crate) fn rms_norm(x: &Tensor, w: &Tensor, eps: f64, mode: Mode) -> Result<Tensor> {
    match mode {
        Mode::Train => candle_nn::ops::rms_norm_slow(x, w, eps as f32),
        Mode::Generate => candle_nn::ops::rms_norm(&x.contiguous()?, w, eps as f32),
    }
}

/// Rotary position embedding (rotate-half layout, as in Hugging Face) of `x: (b, h, l, d)`.
pub(crate) fn rope(x: &Tensor, step: &Step) -> Result<Tensor> {
    match step.mode {
        Mode::Train => {
            let half = x.dim(D::Minus1)? / 2;
            let x1 = x.narrow(D::Minus1, 0, half)?;
            let x2 = x.narrow(D::Minus1, half, half)?;
            let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
            x.broadcast_mul(&step.cos)? + rotated.broadcast_mul(&step.sin)?
        }
        Mode::Generate => candle_nn::rotary_emb::rope(&x.contiguous()?, &step.cos, &step.sin),
    }
}

/// SwiGLU feed-forward: `down(silu(gate(x)) * up(x))`.
pub(crate) fn swiglu(x: &Tensor, gate: &Tensor, up: &Tensor, down: &Tensor) -> Result<Tensor> {
    let h = (linear(x, gate)?.silu()? * linear(x, up)?)?;
    linear(&h, down)
}

/// Repeats each key/value head `n_rep` times so that `(b, kv_heads, t, d)` lines up with the
/// query heads: query head `i` reads key/value head `i / n_rep`.
fn repeat_kv(x: &Tensor, n_rep: usize) -> Result<Tensor> {
    if n_rep == 1 {
        return Ok(x.clone());
    }
    let (b, n_kv, t, d) = x.dims4()?;
    let copies = vec![x; n_rep];
    Tensor::cat(&copies, 2)?.reshape((b, n_kv * n_rep, t, d))
}

/// The keys and values one layer has seen so far, `(b, kv_heads, t, head_dim)` each.
#[derive(Debug, Clone, Default)]
pub(crate) struct LayerKv {
    kv: Option<(Tensor, Tensor)>,
}

impl LayerKv {
    fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (k, v) = match &self.kv {
            None => (k.contiguous()?, v.contiguous()?),
            Some((k_past, v_past)) => (
                Tensor::cat(&[k_past, k], 2)?.contiguous()?,
                Tensor::cat(&[v_past, v], 2)?.contiguous()?,
            ),
        };
        self.kv = Some((k.clone(), v.clone()));
        Ok((k, v))
    }
}

/// Scaled dot-product attention of `q: (b, h, l, d)` over `k, v: (b, kv_heads, l, d)` (plus the
/// cached keys and values when `kv` is given), masked by `step.allowed`; returns `(b, l, h * d)`.
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    step: &Step,
    kv: Option<&mut LayerKv>,
) -> Result<Tensor> {
    let (b, n_heads, l, head_dim) = q.dims4()?;
    let n_kv_heads = k.dim(1)?;
    let (k, v) = match kv {
        Some(cache) => cache.append(k, v)?,
        None => (k.clone(), v.clone()),
    };
    let k = repeat_kv(&k, n_heads / n_kv_heads)?;
    let v = repeat_kv(&v, n_heads / n_kv_heads)?;
    let scale = 1.0 / (head_dim as f64).sqrt();
    let scores = (q.contiguous()?.matmul(&k.t()?)? * scale)?;
    let allowed = step.allowed.broadcast_as(scores.shape())?;
    let neg_inf = Tensor::new(f32::NEG_INFINITY, scores.device())?
        .to_dtype(scores.dtype())?
        .broadcast_as(scores.shape())?;
    let scores = allowed.where_cond(&scores, &neg_inf)?;
    let probs = match step.mode {
        Mode::Train => candle_nn::ops::softmax(&scores, D::Minus1)?,
        Mode::Generate => candle_nn::ops::softmax_last_dim(&scores)?,
    };
    probs
        .matmul(&v.contiguous()?)?
        .transpose(1, 2)?
        .reshape((b, l, n_heads * head_dim))
}
