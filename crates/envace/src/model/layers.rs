//! Building blocks the architectures share: RMSNorm, RoPE, masked grouped-query attention,
//! SwiGLU and the per-layer key/value cache, each in a training and a generation flavour.
//!
//! The training flavour needs a backward pass, which candle's own fused kernels lack (see
//! `shared/STACK.md`). On the CPU in f32 it uses our fused kernels with a real backward
//! ([`super::cpu::train_ops`]); elsewhere it is composed from ops whose backward works on every backend:
//! `rms_norm_slow`, a rotate-half RoPE from `narrow`/`cat`/`mul`, `where_cond` masking and
//! `ops::softmax`. The generation flavour runs on detached weights and uses candle's fused
//! kernels (`ops::rms_norm`, `rotary_emb::rope`, `softmax_last_dim`).

use candle_core::{D, Device, Result, Tensor};

use super::cpu::{self, decode_ops, train_ops};

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
    /// The same mask as `b × t` host bytes when decoding one position per row on the CPU, read
    /// once for every layer's [`decode_ops::decode_attention`].
    pub decode_allowed: Option<Vec<u8>>,
}

/// `x @ w.T` for a Hugging Face `(out, in)` weight, over any number of leading dimensions.
/// A few rows (but not one) without gradient, as batched decoding has, take the in-place
/// product of [`decode_ops::small_linear`]; training on the CPU takes [`cpu::linear`], one
/// graph node instead of four.
pub(crate) fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let tracked = x.track_op() || w.track_op();
    if tracked && cpu::applies(x) && cpu::applies(w) {
        return cpu::linear::linear(x, w);
    }
    let dims = x.dims();
    let n_in = dims[dims.len() - 1];
    let n_rows = x.elem_count() / n_in;
    let x2 = x.reshape((n_rows, n_in))?;
    // One row is a matrix-vector product, which the matmul does without packing.
    let y = if (2..=decode_ops::SMALL_ROWS).contains(&n_rows) && cpu::applies(x) && !tracked {
        decode_ops::small_linear(&x2, w)?
    } else {
        x2.matmul(&w.t()?)?
    };
    let mut out_dims = dims.to_vec();
    let last = out_dims.len() - 1;
    out_dims[last] = w.dim(0)?;
    y.reshape(out_dims)
}

/// RMSNorm over the last dimension, scaled by `w`.
pub(crate) fn rms_norm(x: &Tensor, w: &Tensor, eps: f64, mode: Mode) -> Result<Tensor> {
    match mode {
        Mode::Train if cpu::applies(x) => train_ops::rms_norm(x, w, eps),
        Mode::Train => candle_nn::ops::rms_norm_slow(x, w, eps as f32),
        Mode::Generate => candle_nn::ops::rms_norm(&x.contiguous()?, w, eps as f32),
    }
}

/// Rotary position embedding (rotate-half layout, as in Hugging Face) of `x: (b, h, l, d)`.
pub(crate) fn rope(x: &Tensor, step: &Step) -> Result<Tensor> {
    match step.mode {
        Mode::Train if cpu::applies(x) => train_ops::rope(x, &step.cos, &step.sin),
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
    let (gate, up) = (linear(x, gate)?, linear(x, up)?);
    let h = if cpu::applies(&gate) {
        train_ops::silu_mul(&gate, &up)?
    } else {
        (gate.silu()? * up)?
    };
    linear(&h, down)
}

/// The keys and values one layer has seen so far: `(b, kv_heads, capacity, head_dim)` buffers
/// of which the first `len` positions are filled. They grow by doubling, so a decode step
/// writes only its new position instead of copying the whole cache.
#[derive(Debug, Default)]
pub(crate) struct LayerKv {
    buffers: Option<(Tensor, Tensor)>,
    len: usize,
}

impl LayerKv {
    /// Appends `k, v: (b, kv_heads, l, d)` and returns views of everything cached so far.
    fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, n_kv, l, d) = k.dims4()?;
        let needed = self.len + l;
        let capacity = self.buffers.as_ref().map_or(0, |(k, _)| k.dims()[2]);
        if needed > capacity {
            let new_capacity = needed.max(2 * capacity).max(64);
            let k_new = Tensor::zeros((b, n_kv, new_capacity, d), k.dtype(), k.device())?;
            let v_new = Tensor::zeros((b, n_kv, new_capacity, d), v.dtype(), v.device())?;
            if let Some((k_old, v_old)) = &self.buffers {
                k_new.slice_set(&k_old.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
                v_new.slice_set(&v_old.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
            }
            self.buffers = Some((k_new, v_new));
        }
        let Some((k_buf, v_buf)) = &self.buffers else {
            candle_core::bail!("the key/value cache has no buffers")
        };
        k_buf.slice_set(&k.contiguous()?, 2, self.len)?;
        v_buf.slice_set(&v.contiguous()?, 2, self.len)?;
        self.len = needed;
        Ok((k_buf.narrow(2, 0, needed)?, v_buf.narrow(2, 0, needed)?))
    }

    /// Views of the keys and values cached so far, `(b, kv_heads, len, d)` each; `None` before
    /// the first append.
    pub(crate) fn filled(&self) -> Result<Option<(Tensor, Tensor)>> {
        match &self.buffers {
            None => Ok(None),
            Some((k, v)) => Ok(Some((k.narrow(2, 0, self.len)?, v.narrow(2, 0, self.len)?))),
        }
    }

    /// The device of the buffers; `None` before the first append.
    pub(crate) fn device(&self) -> Option<Device> {
        self.buffers.as_ref().map(|(k, _)| k.device().clone())
    }

    /// A cache of the rows `index: (n,)` u32 names (in that order, repeats allowed), the
    /// filled positions only, in buffers of its own.
    pub(crate) fn select_rows(&self, index: &Tensor) -> Result<LayerKv> {
        let buffers = match self.filled()? {
            None => None,
            Some((k, v)) => Some((
                k.contiguous()?.index_select(index, 0)?,
                v.contiguous()?.index_select(index, 0)?,
            )),
        };
        Ok(LayerKv {
            buffers,
            len: self.len,
        })
    }

    /// An independent copy (the buffers are written in place, so clones must not share them).
    pub(crate) fn deep_copy(&self) -> Result<LayerKv> {
        let buffers = match &self.buffers {
            None => None,
            Some((k, v)) => Some((k.copy()?, v.copy()?)),
        };
        Ok(LayerKv {
            buffers,
            len: self.len,
        })
    }
}

/// Scaled dot-product attention of `q: (b, h, l, d)` over `k, v: (b, kv_heads, l, d)` (plus the
/// cached keys and values when `kv` is given), masked by `step.allowed`; returns `(b, l, h * d)`.
///
/// Grouped-query attention without copying keys and values per query head: the `h / kv_heads`
/// query heads that share a key/value head are stacked along the sequence axis, so one batched
/// matmul per key/value head serves them all.
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    step: &Step,
    kv: Option<&mut LayerKv>,
) -> Result<Tensor> {
    let (b, n_heads, l, head_dim) = q.dims4()?;
    let n_kv_heads = k.dim(1)?;
    let n_rep = n_heads / n_kv_heads;
    let scale = 1.0 / (head_dim as f64).sqrt();
    let (k, v) = match kv {
        // One new position per row (decoding): one fused pass over the cache.
        Some(cache) if cpu::applies(q) && step.decode_allowed.is_some() => {
            let (k, v) = cache.append(k, v)?;
            let allowed = step.decode_allowed.as_deref().unwrap_or_default();
            return decode_ops::decode_attention(q, &k, &v, allowed, scale);
        }
        Some(cache) => cache.append(k, v)?,
        // Views of the cache buffers are laid out as matmul wants; a fresh `v` is a transpose.
        None => (k.clone(), v.contiguous()?),
    };
    let t = k.dim(2)?;
    let q = q
        .contiguous()?
        .reshape((b, n_kv_heads, n_rep * l, head_dim))?;
    let scores = q.matmul(&k.t()?)?.reshape((b, n_heads, l, t))?;
    let probs = if step.mode == Mode::Train && cpu::applies(&scores) {
        train_ops::masked_softmax(&scores, &step.allowed, scale)?
    } else {
        masked_softmax(&(scores * scale)?, step)?
    };
    probs
        .reshape((b, n_kv_heads, n_rep * l, t))?
        .matmul(&v)?
        .reshape((b, n_heads, l, head_dim))?
        .transpose(1, 2)?
        .reshape((b, l, n_heads * head_dim))
}

/// `softmax(scores)` with the keys `step.allowed` excludes set to −∞, composed from candle ops.
fn masked_softmax(scores: &Tensor, step: &Step) -> Result<Tensor> {
    let allowed = step.allowed.broadcast_as(scores.shape())?;
    let neg_inf = Tensor::new(f32::NEG_INFINITY, scores.device())?
        .to_dtype(scores.dtype())?
        .broadcast_as(scores.shape())?;
    let scores = allowed.where_cond(scores, &neg_inf)?;
    match step.mode {
        Mode::Train => candle_nn::ops::softmax(&scores, D::Minus1),
        Mode::Generate => candle_nn::ops::softmax_last_dim(&scores),
    }
}
