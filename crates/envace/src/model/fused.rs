//! Fused CPU kernels with a real backward pass for the training forward: per-token target
//! log-probability and entropy over the vocabulary, scaled and masked attention
//! softmax, RMSNorm, rotate-half RoPE and SiLU-gating; and two without (generation only):
//! attention of single decode positions over the KV cache, and products of a few rows with a
//! weight matrix read in place (no packing); and AdamW's update written into the parameter
//! and its moments in place.
//!
//! candle builds these from several elementwise ops, each of which allocates, writes and (in
//! backward) reads a whole tensor again; fused, each is one pass forward and one pass backward,
//! split over rows on rayon's pool. They are candle custom ops, so autograd sees them as single
//! nodes whose `bwd` returns the exact gradient (tests compare both passes with the composed
//! ops). Only f32 tensors on the CPU take this path; [`applies`] tells callers when to fall
//! back to the composed ops (CUDA, other dtypes).

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor, bail,
};
use rayon::prelude::*;

/// Whether the fused kernels can run on `x` (f32 on the CPU).
pub(crate) fn applies(x: &Tensor) -> bool {
    x.device().is_cpu() && x.dtype() == DType::F32
}

/// The contiguous f32 elements of one custom-op argument.
fn f32s<'a>(storage: &'a CpuStorage, layout: &Layout, op: &str) -> Result<&'a [f32]> {
    let CpuStorage::F32(data) = storage else {
        bail!("{op}: expects f32 input, got {:?}", storage.dtype())
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => bail!("{op}: expects a contiguous input"),
    }
}

/// Elements per rayon task, at least.
const CHUNK: usize = 16_384;

/// Rows per rayon task, so that each task handles at least [`CHUNK`] elements.
fn min_rows(row_len: usize) -> usize {
    (CHUNK / row_len.max(1)).max(1)
}

/// Fills `out` row by row (`row_len` elements each) with `f(row index, row)`, rows in parallel
/// (on the calling thread when there is too little work to share).
fn for_rows(out: &mut [f32], row_len: usize, f: impl Fn(usize, &mut [f32]) + Sync + Send) {
    if out.len() <= CHUNK {
        out.chunks_mut(row_len.max(1))
            .enumerate()
            .for_each(|(r, row)| f(r, row));
        return;
    }
    out.par_chunks_mut(row_len.max(1))
        .enumerate()
        .with_min_len(min_rows(row_len))
        .for_each(|(r, row)| f(r, row));
}

fn last_dim(shape: &Shape, op: &str) -> Result<usize> {
    match shape.dims().last() {
        Some(&n) if n > 0 => Ok(n),
        _ => bail!("{op}: expects a non-empty last dimension, got {shape:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Per-token statistics of the next-token distribution: target log-probability and entropy.

/// For each row of `logits: (n, v)` f32 and `targets: (n,)` u32: `(n, 3)` holding the
/// log-probability of the target token, the entropy of the softmax and the log-normaliser
/// (log Σ exp). One pass over the logits forward and one backward, and no `(n, v)` tensor in
/// the forward: the composed log-softmax, gather and `Σ p log p` write several.
pub(crate) fn token_stats(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let (n, _) = logits.dims2()?;
    if targets.dims() != [n] || targets.dtype() != DType::U32 {
        bail!(
            "fused token statistics: targets are {:?} {:?}, expected [{n}] u32",
            targets.dims(),
            targets.dtype()
        )
    }
    logits
        .contiguous()?
        .apply_op2(&targets.contiguous()?, TokenStats)
}

struct TokenStats;

/// The target ids of a [`TokenStats`] argument, each checked against the vocabulary.
fn target_ids<'a>(storage: &'a CpuStorage, layout: &Layout, vocab: usize) -> Result<&'a [u32]> {
    let CpuStorage::U32(data) = storage else {
        bail!("fused token statistics: targets must be u32")
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        bail!("fused token statistics: targets must be contiguous")
    };
    let ids = &data[start..end];
    if let Some(&bad) = ids.iter().find(|&&t| t as usize >= vocab) {
        bail!("fused token statistics: target id {bad} is outside the vocabulary of {vocab}")
    }
    Ok(ids)
}

impl CustomOp2 for TokenStats {
    fn name(&self) -> &'static str {
        "fused-token-stats"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let z = f32s(s1, l1, self.name())?;
        let (n, v) = l1.shape().dims2()?;
        let targets = target_ids(s2, l2, v)?;
        let mut out = vec![0f32; n * 3];
        // Three outputs per row but `v` logits of work: tasks are sized by the logits.
        out.par_chunks_mut(3)
            .enumerate()
            .with_min_len(min_rows(v))
            .for_each(|(r, o)| {
                let zs = &z[r * v..(r + 1) * v];
                let max = zs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                // Σ e^(z−max) and Σ e^(z−max)·(z−max), in f64 for the entropy's cancellation.
                let (mut sum, mut weighted) = (0f64, 0f64);
                for &zi in zs {
                    let d = zi - max;
                    let e = f64::from(d.exp());
                    sum += e;
                    weighted += e * f64::from(d);
                }
                let log_sum = sum.ln();
                let lse = f64::from(max) + log_sum;
                o[0] = (f64::from(zs[targets[r] as usize]) - lse) as f32;
                // H = −Σ p log p = ln S − Σ e·d / S.
                o[1] = (log_sum - weighted / sum) as f32;
                o[2] = lse as f32;
            });
        Ok((CpuStorage::F32(out), Shape::from((n, 3))))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        targets: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // With p = softmax(z), log p_j = z_j − lse and H the entropy:
        //   d logp_t / d z_j = δ_jt − p_j,   d H / d z_j = −p_j (log p_j + H),   d lse / d z_j = p_j.
        let packed = Tensor::cat(&[grad_res.contiguous()?, res.contiguous()?], 1)?;
        let grad = packed.apply_op3_no_bwd(&logits.contiguous()?, targets, &TokenStatsBackward)?;
        Ok((Some(grad), None))
    }
}

/// The backward pass of [`TokenStats`]: arguments `[grad | stats]: (n, 6)`, the logits and the
/// targets; returns the gradient of the logits.
struct TokenStatsBackward;

impl CustomOp3 for TokenStatsBackward {
    fn name(&self) -> &'static str {
        "fused-token-stats-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let packed = f32s(s1, l1, self.name())?;
        let z = f32s(s2, l2, self.name())?;
        let (n, v) = l2.shape().dims2()?;
        let targets = target_ids(s3, l3, v)?;
        let mut out = vec![0f32; n * v];
        for_rows(&mut out, v, |r, row| {
            let [g_logp, g_entropy, g_lse, _, entropy, lse] =
                std::array::from_fn(|k| packed[r * 6 + k]);
            let zs = &z[r * v..(r + 1) * v];
            for (o, &zi) in row.iter_mut().zip(zs) {
                let log_p = zi - lse;
                let p = log_p.exp();
                *o = p * (g_lse - g_logp - g_entropy * (log_p + entropy));
            }
            row[targets[r] as usize] += g_logp;
        });
        Ok((CpuStorage::F32(out), Shape::from((n, v))))
    }
}

// ---------------------------------------------------------------------------------------------
// Scaled, masked softmax of attention scores.

/// `softmax(scale × scores)` over the last dimension with disallowed keys removed:
/// `scores: (b, h, l, t)` f32, `allowed: (b, 1, l, t)` u8 (1 = the query may see the key). A
/// row with no allowed key comes out as zeros.
pub(crate) fn masked_softmax(scores: &Tensor, allowed: &Tensor, scale: f64) -> Result<Tensor> {
    let (b, h, l, t) = scores.dims4()?;
    if allowed.dims() != [b, 1, l, t] {
        bail!(
            "fused attention softmax: the mask is {:?}, expected {:?}",
            allowed.dims(),
            [b, 1, l, t]
        )
    }
    scores.contiguous()?.apply_op2(
        &allowed.contiguous()?,
        MaskedSoftmax {
            scale: scale as f32,
            n_heads: h,
            n_queries: l,
        },
    )
}

struct MaskedSoftmax {
    scale: f32,
    n_heads: usize,
    n_queries: usize,
}

impl MaskedSoftmax {
    /// The mask row of score row `r`: the mask has one row per (batch, query), shared by heads.
    fn mask_row(&self, r: usize) -> usize {
        let per_batch = self.n_heads * self.n_queries;
        (r / per_batch) * self.n_queries + r % self.n_queries
    }
}

impl CustomOp2 for MaskedSoftmax {
    fn name(&self) -> &'static str {
        "fused-masked-softmax"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let scores = f32s(s1, l1, self.name())?;
        let CpuStorage::U8(mask) = s2 else {
            bail!("{}: expects a u8 mask, got {:?}", self.name(), s2.dtype())
        };
        let Some((m0, m1)) = l2.contiguous_offsets() else {
            bail!("{}: expects a contiguous mask", self.name())
        };
        let mask = &mask[m0..m1];
        let t = last_dim(l1.shape(), self.name())?;
        let mut out = vec![0f32; scores.len()];
        for_rows(&mut out, t, |r, row| {
            let xs = &scores[r * t..(r + 1) * t];
            let ms = &mask[self.mask_row(r) * t..(self.mask_row(r) + 1) * t];
            let mut max = f32::NEG_INFINITY;
            for (&x, &m) in xs.iter().zip(ms) {
                if m != 0 {
                    max = max.max(x * self.scale);
                }
            }
            if max == f32::NEG_INFINITY {
                return; // no key allowed: zeros
            }
            let mut sum = 0f32;
            for ((o, &x), &m) in row.iter_mut().zip(xs).zip(ms) {
                if m != 0 {
                    *o = (x * self.scale - max).exp();
                    sum += *o;
                }
            }
            let inv = 1.0 / sum;
            for o in row.iter_mut() {
                *o *= inv;
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _scores: &Tensor,
        _allowed: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // d s_i = scale × p_i × (g_i − Σ_j g_j p_j); masked keys have p = 0 and get 0.
        let grad = grad_res
            .contiguous()?
            .apply_op2_no_bwd(&res.contiguous()?, &SoftmaxBackward { scale: self.scale })?;
        Ok((Some(grad), None))
    }
}

/// The backward pass of [`MaskedSoftmax`] with its scale (given the probabilities), row by row
/// with the incoming gradient.
struct SoftmaxBackward {
    scale: f32,
}

impl CustomOp2 for SoftmaxBackward {
    fn name(&self) -> &'static str {
        "fused-softmax-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let g = f32s(s1, l1, self.name())?;
        let y = f32s(s2, l2, self.name())?;
        let n = last_dim(l1.shape(), self.name())?;
        let mut out = vec![0f32; g.len()];
        for_rows(&mut out, n, |r, row| {
            let (gs, ys) = (&g[r * n..(r + 1) * n], &y[r * n..(r + 1) * n]);
            // y = p: d s_i = scale × p_i × (g_i − Σ_j g_j p_j); masked keys have p = 0.
            let dot: f32 = gs.iter().zip(ys).map(|(&gi, &pi)| gi * pi).sum();
            for ((o, &gi), &pi) in row.iter_mut().zip(gs).zip(ys) {
                *o = self.scale * pi * (gi - dot);
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

// ---------------------------------------------------------------------------------------------
// RMSNorm.

/// `x / sqrt(mean(x²) + eps) × w` over the last dimension; `w` has that dimension's size.
pub(crate) fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let n = x.dim(candle_core::D::Minus1)?;
    if w.dims() != [n] {
        bail!(
            "fused RMSNorm: the weight is {:?}, expected [{n}]",
            w.dims()
        )
    }
    x.contiguous()?
        .apply_op2(&w.contiguous()?, RmsNorm { eps: eps as f32 })
}

#[derive(Clone, Copy)]
struct RmsNorm {
    eps: f32,
}

impl RmsNorm {
    fn inv_rms(&self, xs: &[f32]) -> f32 {
        let mean_sq = xs.iter().map(|&v| v * v).sum::<f32>() / xs.len() as f32;
        1.0 / (mean_sq + self.eps).sqrt()
    }
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "fused-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = f32s(s1, l1, self.name())?;
        let w = f32s(s2, l2, self.name())?;
        let n = w.len();
        let mut out = vec![0f32; x.len()];
        for_rows(&mut out, n, |r, row| {
            let xs = &x[r * n..(r + 1) * n];
            let inv = self.inv_rms(xs);
            for ((o, &xi), &wi) in row.iter_mut().zip(xs).zip(w) {
                *o = xi * inv * wi;
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // One pass computes both: rows 0..R of the result are dx, row R is dw.
        let rows = x.elem_count() / w.elem_count();
        let both =
            grad_res
                .contiguous()?
                .apply_op3_no_bwd(x, w, &RmsNormBackward { forward: *self })?;
        let dx = both.narrow(0, 0, rows)?.reshape(x.shape())?;
        let dw = both.narrow(0, rows, 1)?.reshape(w.shape())?;
        Ok((Some(dx), Some(dw)))
    }
}

struct RmsNormBackward {
    forward: RmsNorm,
}

impl CustomOp3 for RmsNormBackward {
    fn name(&self) -> &'static str {
        "fused-rms-norm-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let g = f32s(s1, l1, self.name())?;
        let x = f32s(s2, l2, self.name())?;
        let w = f32s(s3, l3, self.name())?;
        let n = w.len();
        let rows = x.len() / n;
        let mut out = vec![0f32; (rows + 1) * n];
        let (dx, dw_out) = out.split_at_mut(rows * n);
        // dx_i = r (g_i w_i) − x_i r³ / n × Σ_j g_j w_j x_j, with r = 1 / rms(x);
        // dw_i = Σ_rows g_i x_i r.
        let dw = dx
            .par_chunks_mut(n)
            .enumerate()
            .with_min_len(min_rows(n))
            .fold(
                || vec![0f32; n],
                |mut acc, (r, row)| {
                    let (gs, xs) = (&g[r * n..(r + 1) * n], &x[r * n..(r + 1) * n]);
                    let inv = self.forward.inv_rms(xs);
                    let dot: f32 = gs
                        .iter()
                        .zip(xs)
                        .zip(w)
                        .map(|((&gi, &xi), &wi)| gi * wi * xi)
                        .sum();
                    let k = inv * inv * inv * dot / n as f32;
                    for (i, o) in row.iter_mut().enumerate() {
                        *o = inv * gs[i] * w[i] - xs[i] * k;
                        acc[i] += gs[i] * xs[i] * inv;
                    }
                    acc
                },
            )
            .reduce(
                || vec![0f32; n],
                |mut a, b| {
                    for (ai, bi) in a.iter_mut().zip(&b) {
                        *ai += bi;
                    }
                    a
                },
            );
        dw_out.copy_from_slice(&dw);
        Ok((CpuStorage::F32(out), Shape::from((rows + 1, n))))
    }
}

// ---------------------------------------------------------------------------------------------
// Rotate-half RoPE.

/// `x × cos + rotate_half(x) × sin` for `x: (b, h, l, d)` and tables `cos, sin: (b, 1, l, d)`
/// (the halves repeated), as Hugging Face's rotate-half layout computes it. The tables are
/// constants: they get no gradient.
pub(crate) fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let (b, h, l, d) = x.dims4()?;
    if cos.dims() != [b, 1, l, d] || sin.dims() != [b, 1, l, d] || d % 2 != 0 {
        bail!(
            "fused RoPE: x is {:?}, tables {:?} and {:?}; expected tables [{b}, 1, {l}, {d}] and \
             an even head width",
            x.dims(),
            cos.dims(),
            sin.dims()
        )
    }
    x.contiguous()?.apply_op3(
        &cos.contiguous()?,
        &sin.contiguous()?,
        Rope {
            n_heads: h,
            n_positions: l,
            transpose: false,
        },
    )
}

#[derive(Clone, Copy)]
struct Rope {
    n_heads: usize,
    n_positions: usize,
    /// Apply the transposed rotation (the backward pass).
    transpose: bool,
}

impl CustomOp3 for Rope {
    fn name(&self) -> &'static str {
        "fused-rope"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = f32s(s1, l1, self.name())?;
        let cos = f32s(s2, l2, self.name())?;
        let sin = f32s(s3, l3, self.name())?;
        let d = last_dim(l1.shape(), self.name())?;
        let half = d / 2;
        let per_batch = self.n_heads * self.n_positions;
        let mut out = vec![0f32; x.len()];
        for_rows(&mut out, d, |r, row| {
            let table = ((r / per_batch) * self.n_positions + r % self.n_positions) * d;
            let (c, s) = (&cos[table..table + d], &sin[table..table + d]);
            let xs = &x[r * d..(r + 1) * d];
            if self.transpose {
                // The adjoint of y = x c + rot(x) s, rot(x) = (−x₂, x₁):
                // dx₁ = g₁ c₁ + g₂ s₂, dx₂ = g₂ c₂ − g₁ s₁.
                for i in 0..half {
                    row[i] = xs[i] * c[i] + xs[i + half] * s[i + half];
                    row[i + half] = xs[i + half] * c[i + half] - xs[i] * s[i];
                }
            } else {
                for i in 0..half {
                    row[i] = xs[i] * c[i] - xs[i + half] * s[i];
                    row[i + half] = xs[i + half] * c[i + half] + xs[i] * s[i + half];
                }
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad_res.contiguous()?.apply_op3_no_bwd(
            cos,
            sin,
            &Rope {
                transpose: !self.transpose,
                ..*self
            },
        )?;
        Ok((Some(grad), None, None))
    }
}

// ---------------------------------------------------------------------------------------------
// SiLU gating (the SwiGLU product).

/// `silu(gate) × up`, elementwise, for tensors of one shape.
pub(crate) fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if gate.dims() != up.dims() {
        bail!(
            "fused SiLU gating: gate is {:?} but up is {:?}",
            gate.dims(),
            up.dims()
        )
    }
    gate.contiguous()?.apply_op2(&up.contiguous()?, SiluMul)
}

struct SiluMul;

fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

impl CustomOp2 for SiluMul {
    fn name(&self) -> &'static str {
        "fused-silu-mul"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let a = f32s(s1, l1, self.name())?;
        let b = f32s(s2, l2, self.name())?;
        let mut out = vec![0f32; a.len()];
        for_rows(&mut out, CHUNK, |c, chunk| {
            let start = c * CHUNK;
            for (i, o) in chunk.iter_mut().enumerate() {
                let (ai, bi) = (a[start + i], b[start + i]);
                *o = ai * sigmoid(ai) * bi;
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        gate: &Tensor,
        up: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // One pass computes both: the first half of the result is d gate, the second d up.
        let n = gate.elem_count();
        let both = grad_res
            .contiguous()?
            .apply_op3_no_bwd(gate, up, &SiluMulBackward)?;
        let d_gate = both.narrow(0, 0, n)?.reshape(gate.shape())?;
        let d_up = both.narrow(0, n, n)?.reshape(up.shape())?;
        Ok((Some(d_gate), Some(d_up)))
    }
}

struct SiluMulBackward;

impl CustomOp3 for SiluMulBackward {
    fn name(&self) -> &'static str {
        "fused-silu-mul-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let g = f32s(s1, l1, self.name())?;
        let a = f32s(s2, l2, self.name())?;
        let b = f32s(s3, l3, self.name())?;
        let n = a.len();
        let mut out = vec![0f32; 2 * n];
        let (d_gate, d_up) = out.split_at_mut(n);
        d_gate
            .par_chunks_mut(CHUNK)
            .zip(d_up.par_chunks_mut(CHUNK))
            .enumerate()
            .for_each(|(c, (dg, du))| {
                let start = c * CHUNK;
                for i in 0..dg.len() {
                    let (gi, ai, bi) = (g[start + i], a[start + i], b[start + i]);
                    let s = sigmoid(ai);
                    // silu'(a) = s (1 + a (1 − s)).
                    dg[i] = gi * bi * s * (1.0 + ai * (1.0 - s));
                    du[i] = gi * ai * s;
                }
            });
        Ok((CpuStorage::F32(out), Shape::from(2 * n)))
    }
}

// ---------------------------------------------------------------------------------------------
// Attention of one new position per row over the key/value cache (generation only).

/// Grouped-query attention of `q: (b, h, 1, d)` over `k, v: (b, kv_heads, t, d)` (any strides
/// with a contiguous last dimension, such as views of the cache buffers), keys masked by
/// `allowed`: `b × t` bytes, 1 where the row may see the key; returns `(b, 1, h * d)`. One pass per (row, head) instead of two
/// batched matmuls of `b × kv_heads` tiny products each, whose per-call cost grows with the
/// batch. No backward: decoding only.
pub(crate) fn decode_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    allowed: &[u8],
    scale: f64,
) -> Result<Tensor> {
    let (b, h, l, d) = q.dims4()?;
    let (kb, n_kv, t, kd) = k.dims4()?;
    if l != 1 || kb != b || kd != d || v.dims() != k.dims() || n_kv == 0 || h % n_kv != 0 {
        bail!(
            "fused decode attention: q {:?}, k {:?}, v {:?} do not fit one position per row",
            q.dims(),
            k.dims(),
            v.dims()
        )
    }
    if allowed.len() != b * t {
        bail!(
            "fused decode attention: the mask has {} bytes, expected {b} rows × {t} keys",
            allowed.len()
        )
    }
    let op = DecodeAttention {
        allowed,
        n_heads: h,
        n_kv_heads: n_kv,
        scale: scale as f32,
    };
    q.contiguous()?
        .apply_op3_no_bwd(k, v, &op)?
        .reshape((b, 1, h * d))
}

struct DecodeAttention<'a> {
    allowed: &'a [u8],
    n_heads: usize,
    n_kv_heads: usize,
    scale: f32,
}

/// A 4-d f32 view with arbitrary strides but a contiguous last dimension.
struct View4<'a> {
    data: &'a [f32],
    offset: usize,
    strides: [usize; 4],
    last: usize,
}

impl<'a> View4<'a> {
    fn new(storage: &'a CpuStorage, layout: &Layout, op: &str) -> Result<Self> {
        let CpuStorage::F32(data) = storage else {
            bail!("{op}: expects f32 input, got {:?}", storage.dtype())
        };
        let (dims, stride) = (layout.dims(), layout.stride());
        if dims.len() != 4 || (dims[3] > 1 && stride[3] != 1) {
            bail!("{op}: expects a 4-d input with a contiguous last dimension")
        }
        Ok(View4 {
            data,
            offset: layout.start_offset(),
            strides: [stride[0], stride[1], stride[2], 1],
            last: dims[3],
        })
    }

    /// A function giving, for `(i, j)`, the values from `[i, j, 0, 0]` to the end of
    /// `[i, j, n - 1, ..]`: `n` rows of `last` values every `strides[2]` values.
    fn rows(&self, n: usize) -> Result<impl Fn(usize, usize) -> &'a [f32] + '_> {
        if n > 1 && self.strides[2] < self.last {
            bail!("fused decode attention: rows of the cache overlap")
        }
        Ok(move |i: usize, j: usize| {
            let start = self.offset + i * self.strides[0] + j * self.strides[1];
            let len = n.saturating_sub(1) * self.strides[2] + self.last;
            &self.data[start..start + len]
        })
    }
}

use super::quant::{axpy_strided_f32, dot_f32 as dot, dot4_f32, dot4x4_f32, dots_strided_f32};

/// The cached keys and values one query head attends over: `n` rows each, `k_stride` and
/// `v_stride` values apart.
pub(crate) struct KeysValues<'a> {
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub k_stride: usize,
    pub v_stride: usize,
}

/// One query head's attention over the cached keys `allowed` lets it see (one byte per key):
/// `out += softmax(scale · q · kᵀ) · v`; `out` stays as it is when no key is allowed.
pub(crate) fn attend_one(
    q: &[f32],
    keys: &KeysValues<'_>,
    allowed: &[u8],
    scale: f32,
    out: &mut [f32],
) {
    // Every cached key's score, then −∞ for those the mask excludes.
    let mut scores = vec![0f32; allowed.len()];
    dots_strided_f32(q, keys.k, keys.k_stride, &mut scores);
    let mut max = f32::NEG_INFINITY;
    for (score, &allowed) in scores.iter_mut().zip(allowed) {
        if allowed != 0 {
            *score *= scale;
            max = max.max(*score);
        } else {
            *score = f32::NEG_INFINITY;
        }
    }
    if max == f32::NEG_INFINITY {
        return;
    }
    let mut sum = 0f32;
    for score in scores.iter_mut() {
        *score = if *score == f32::NEG_INFINITY {
            0.0
        } else {
            (*score - max).exp()
        };
        sum += *score;
    }
    for p in scores.iter_mut() {
        *p /= sum;
    }
    axpy_strided_f32(out, &scores, keys.v, keys.v_stride);
}

impl CustomOp3 for DecodeAttention<'_> {
    fn name(&self) -> &'static str {
        "fused-decode-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let q = f32s(s1, l1, self.name())?;
        let (k, v) = (
            View4::new(s2, l2, self.name())?,
            View4::new(s3, l3, self.name())?,
        );
        let d = k.last;
        let t = l2.dims()[2];
        let n_rep = self.n_heads / self.n_kv_heads;
        let b = q.len() / (self.n_heads * d);
        let mut out = vec![0f32; q.len()];
        let (k_rows, v_rows) = (k.rows(t)?, v.rows(t)?);
        let attend = |row: usize, o: &mut [f32]| {
            let (bi, hi) = (row / self.n_heads, row % self.n_heads);
            let kv_head = hi / n_rep;
            let keys = KeysValues {
                k: k_rows(bi, kv_head),
                v: v_rows(bi, kv_head),
                k_stride: k.strides[2],
                v_stride: v.strides[2],
            };
            let mask = &self.allowed[bi * t..(bi + 1) * t];
            attend_one(&q[row * d..(row + 1) * d], &keys, mask, self.scale, o);
        };
        // Rows in parallel once each task gets enough keys to be worth a hand-over.
        let min_rows = (CHUNK / (t * d).max(1)).max(1);
        if b * self.n_heads <= min_rows {
            out.chunks_mut(d)
                .enumerate()
                .for_each(|(r, o)| attend(r, o));
        } else {
            out.par_chunks_mut(d)
                .enumerate()
                .with_min_len(min_rows)
                .for_each(|(r, o)| attend(r, o));
        }
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

// ---------------------------------------------------------------------------------------------
// `x · wᵀ` for a few rows (generation only).

/// Rows at most for which [`small_linear`] beats the packed matmul: the `gemm` crate repacks the
/// whole weight matrix on every call, which costs more than the product itself for a handful
/// of decode rows.
pub(crate) const SMALL_ROWS: usize = 32;

/// Multiply-adds per rayon task of [`small_linear`], at least.
const PARALLEL_MACS: usize = 1 << 17;

/// `x (n, k) · wᵀ` for a Hugging Face weight `w: (out, k)`, each output a dot product of a row
/// of `x` with a row of `w` read in place. No backward: decoding only.
pub(crate) fn small_linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (n, k) = x.dims2()?;
    let (out, wk) = w.dims2()?;
    if k != wk {
        bail!(
            "fused small linear: x is {:?} but w is {:?}",
            x.dims(),
            w.dims()
        )
    }
    x.contiguous()?
        .apply_op2_no_bwd(&w.contiguous()?, &SmallLinear { n, k, out })
}

struct SmallLinear {
    n: usize,
    k: usize,
    out: usize,
}

impl CustomOp2 for SmallLinear {
    fn name(&self) -> &'static str {
        "fused-small-linear"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = f32s(s1, l1, self.name())?;
        let w = f32s(s2, l2, self.name())?;
        let (n, k) = (self.n, self.k);
        let mut result = vec![0f32; n * self.out];
        rows_times_weights(x, n, k, &[w], &mut result);
        Ok((CpuStorage::F32(result), Shape::from((n, self.out))))
    }
}

/// `out (n, Σ outᵢ) = x (n, k) · [w₀; w₁; …]ᵀ` for row-major weights `wᵢ: (outᵢ, k)`, read in
/// place: the products of several weights that take the same input (a layer's query, key and
/// value projections) in one parallel pass, their columns side by side in each output row.
///
/// Blocks of 16 output columns (never straddling two weights) run in parallel. Each block's
/// results are laid out row by row (`n × 16`), so that putting them in place afterwards copies
/// a cache line per row and block. Within a block, groups of four weight rows against four
/// input rows make 4 × 4 tiles; leftover weight rows and inputs take narrower products, and a
/// single input row takes sixteen weight rows per reduction.
pub(crate) fn rows_times_weights(x: &[f32], n: usize, k: usize, ws: &[&[f32]], out: &mut [f32]) {
    const BLOCK: usize = 16;
    let total: usize = ws.iter().map(|w| w.len() / k.max(1)).sum();
    assert!(
        x.len() >= n * k && out.len() == n * total,
        "rows_times_weights: {} inputs, {} outputs for {n} rows of {k} and {total} columns",
        x.len(),
        out.len()
    );
    // (weight, its first row in the block, width, first output column).
    let mut blocks = Vec::new();
    let mut column = 0;
    for (wi, w) in ws.iter().enumerate() {
        let rows = w.len() / k.max(1);
        for start in (0..rows).step_by(BLOCK) {
            let width = (rows - start).min(BLOCK);
            blocks.push((wi, start, width, column + start));
        }
        column += rows;
    }
    let row = |r: usize| &x[r * k..(r + 1) * k];
    let product = |&(wi, start, width, _): &(usize, usize, usize, usize), cols: &mut [f32]| {
        let w = ws[wi];
        let weight = |o: usize| &w[o * k..(o + 1) * k];
        if n == 1 {
            dots_strided_f32(
                row(0),
                &w[start * k..(start + width) * k],
                k,
                &mut cols[..width],
            );
            return;
        }
        let mut a0 = 0;
        while a0 < width {
            let n_w = (width - a0).min(4);
            let o0 = start + a0;
            let mut r = 0;
            while r + 4 <= n {
                let xs = [row(r), row(r + 1), row(r + 2), row(r + 3)];
                if n_w == 4 {
                    let tile = dot4x4_f32(std::array::from_fn(|a| weight(o0 + a)), xs);
                    for (a, four) in tile.iter().enumerate() {
                        for (rr, &v) in four.iter().enumerate() {
                            cols[(r + rr) * BLOCK + a0 + a] = v;
                        }
                    }
                } else {
                    for a in 0..n_w {
                        let four = dot4_f32(weight(o0 + a), xs);
                        for (rr, &v) in four.iter().enumerate() {
                            cols[(r + rr) * BLOCK + a0 + a] = v;
                        }
                    }
                }
                r += 4;
            }
            for a in 0..n_w {
                for rr in r..n {
                    cols[rr * BLOCK + a0 + a] = dot(row(rr), weight(o0 + a));
                }
            }
            a0 += n_w;
        }
    };
    // A hand-over to rayon's other threads may wake one: only products of about a hundred
    // thousand multiply-adds are worth it. (Generation runs on a pool worker, so a hand-over
    // is a push onto its own queue; from outside the pool it cost tens of microseconds, and
    // the threshold was 2^20.)
    let mut results = vec![0f32; blocks.len() * n * BLOCK];
    let min_blocks = (PARALLEL_MACS / (BLOCK * n * k).max(1)).max(1);
    if blocks.len() <= min_blocks {
        results
            .chunks_mut(n * BLOCK)
            .zip(&blocks)
            .for_each(|(cols, block)| product(block, cols));
    } else {
        results
            .par_chunks_mut(n * BLOCK)
            .zip(&blocks)
            .with_min_len(min_blocks)
            .for_each(|(cols, block)| product(block, cols));
    }
    for (r, out_row) in out.chunks_mut(total.max(1)).enumerate().take(n) {
        for (cols, &(_, _, width, column)) in results.chunks(n * BLOCK).zip(&blocks) {
            out_row[column..column + width].copy_from_slice(&cols[r * BLOCK..r * BLOCK + width]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// AdamW in place (no backward: an optimizer step).

/// The constants of one AdamW step on one parameter (see `rl::AdamW::step`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdamWStep {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub lr: f32,
    pub weight_decay: f32,
    /// `1 − β1^t` and `1 − β2^t`.
    pub correction1: f32,
    pub correction2: f32,
    /// Multiplies the raw gradient (loss scaling and clipping).
    pub grad_factor: f32,
}

/// Whether [`adamw_in_place`] can update `theta` with these moments and gradient: all f32,
/// contiguous, on the CPU, of one shape.
pub(crate) fn adamw_applies(
    theta: &Tensor,
    first: &Tensor,
    second: &Tensor,
    grad: &Tensor,
) -> bool {
    [theta, first, second, grad]
        .iter()
        .all(|t| applies(t) && t.is_contiguous() && t.shape() == theta.shape())
}

/// One AdamW step written into `theta`, `first` and `second` (no new tensors): the moments
/// take the scaled gradient, then `θ ← θ (1 − lr λ) − lr m̂ / (√v̂ + ε)`. Callers check
/// [`adamw_applies`] first.
pub(crate) fn adamw_in_place(
    theta: &Tensor,
    first: &Tensor,
    second: &Tensor,
    grad: &Tensor,
    step: AdamWStep,
) -> Result<()> {
    first.inplace_op2(
        grad,
        &Moment {
            decay: step.beta1,
            factor: step.grad_factor,
            square: false,
        },
    )?;
    second.inplace_op2(
        grad,
        &Moment {
            decay: step.beta2,
            factor: step.grad_factor,
            square: true,
        },
    )?;
    theta.inplace_op3(first, second, &ParamUpdate(step))
}

/// `Σ g²` of an f32 tensor on the CPU, accumulated in f64 (the gradient norm before clipping).
pub(crate) fn sum_squares(g: &Tensor) -> Result<f64> {
    g.contiguous()?
        .apply_op1_no_bwd(&SumSquares)?
        .to_scalar::<f64>()
}

/// Elements per rayon task of the optimizer's passes.
const OPT_CHUNK: usize = 1 << 16;

/// The mutable f32 elements of an in-place argument.
fn f32s_mut<'a>(storage: &'a mut CpuStorage, layout: &Layout, op: &str) -> Result<&'a mut [f32]> {
    let CpuStorage::F32(data) = storage else {
        bail!("{op}: expects f32, got {:?}", storage.dtype())
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&mut data[start..end]),
        None => bail!("{op}: expects a contiguous tensor"),
    }
}

/// A moment estimate updated in place: `m ← β m + (1 − β) (f g)` (or `(f g)²`).
struct Moment {
    decay: f32,
    factor: f32,
    square: bool,
}

impl candle_core::InplaceOp2 for Moment {
    fn name(&self) -> &'static str {
        "fused-adamw-moment"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let m = f32s_mut(s1, l1, self.name())?;
        let g = f32s(s2, l2, self.name())?;
        if m.len() != g.len() {
            bail!(
                "{}: {} moments for {} gradients",
                self.name(),
                m.len(),
                g.len()
            )
        }
        let keep = 1.0 - self.decay;
        m.par_chunks_mut(OPT_CHUNK)
            .zip(g.par_chunks(OPT_CHUNK))
            .for_each(|(m, g)| {
                for (m, &g) in m.iter_mut().zip(g) {
                    let g = self.factor * g;
                    let x = if self.square { g * g } else { g };
                    *m = self.decay * *m + keep * x;
                }
            });
        Ok(())
    }
}

/// The parameter update of [`adamw_in_place`], given the updated moments.
struct ParamUpdate(AdamWStep);

impl candle_core::InplaceOp3 for ParamUpdate {
    fn name(&self) -> &'static str {
        "fused-adamw-update"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<()> {
        let theta = f32s_mut(s1, l1, self.name())?;
        let (m, v) = (f32s(s2, l2, self.name())?, f32s(s3, l3, self.name())?);
        if m.len() != theta.len() || v.len() != theta.len() {
            bail!("{}: moments and parameter differ in size", self.name())
        }
        let s = self.0;
        let decay = 1.0 - s.lr * s.weight_decay;
        theta
            .par_chunks_mut(OPT_CHUNK)
            .zip(m.par_chunks(OPT_CHUNK).zip(v.par_chunks(OPT_CHUNK)))
            .for_each(|(theta, (m, v))| {
                for ((t, &m), &v) in theta.iter_mut().zip(m).zip(v) {
                    let update = (m / s.correction1) / ((v / s.correction2).sqrt() + s.eps);
                    *t = *t * decay - update * s.lr;
                }
            });
        Ok(())
    }
}

struct SumSquares;

impl CustomOp1 for SumSquares {
    fn name(&self) -> &'static str {
        "fused-sum-squares"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let g = f32s(storage, layout, self.name())?;
        let total: f64 = g
            .par_chunks(OPT_CHUNK)
            .map(|c| c.iter().map(|&x| f64::from(x * x)).sum::<f64>())
            .sum();
        Ok((CpuStorage::F64(vec![total]), Shape::from(())))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{D, Device, Var};

    use super::*;

    /// Deterministic pseudo-random values in [-2, 2).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % 4_000) as f32 / 1_000.0 - 2.0
            })
            .collect()
    }

    fn var(shape: &[usize], seed: u64) -> Var {
        let n = shape.iter().product();
        Var::from_tensor(&Tensor::from_vec(values(n, seed), shape, &Device::Cpu).unwrap()).unwrap()
    }

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    /// Runs `fused` and `composed` on the same inputs, backpropagates the same random weighting
    /// of the output through both, and checks that the outputs and every input's gradient agree.
    fn check(
        inputs: &[Var],
        fused: impl Fn(&[Tensor]) -> Tensor,
        composed: impl Fn(&[Tensor]) -> Tensor,
        tol: f32,
    ) {
        let tensors: Vec<Tensor> = inputs.iter().map(|v| v.as_tensor().clone()).collect();
        let (y_fused, y_composed) = (fused(&tensors), composed(&tensors));
        assert_eq!(y_fused.dims(), y_composed.dims());
        let diff = max_abs_diff(&y_fused, &y_composed);
        assert!(diff < tol, "outputs differ by {diff}");
        let weight = Tensor::from_vec(
            values(y_fused.elem_count(), 99),
            y_fused.shape(),
            &Device::Cpu,
        )
        .unwrap();
        let g_fused = (&y_fused * &weight)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let g_composed = (&y_composed * &weight)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        for (i, input) in inputs.iter().enumerate() {
            let a = g_fused.get(input.as_tensor()).expect("fused gradient");
            let b = g_composed
                .get(input.as_tensor())
                .expect("composed gradient");
            let diff = max_abs_diff(a, b);
            assert!(diff < tol, "input {i}: gradients differ by {diff}");
        }
    }

    #[test]
    fn token_stats_match_log_softmax_gather_and_entropy_forward_and_backward() {
        let (n, v) = (7, 41);
        let targets: Vec<u32> = (0..n as u32).map(|r| (r * 13 + 5) % v as u32).collect();
        let targets = Tensor::from_vec(targets, n, &Device::Cpu).unwrap();
        // Larger logits than `values` gives, so some rows are peaked and some flat.
        let logits = var(&[n, v], 3);
        let scaled = Var::from_tensor(&(logits.as_tensor() * 6.0).unwrap()).unwrap();
        check(
            &[scaled],
            |t| token_stats(&t[0], &targets).unwrap(),
            |t| {
                let logp = candle_nn::ops::log_softmax(&t[0], D::Minus1).unwrap();
                let picked = logp.gather(&targets.unsqueeze(1).unwrap(), 1).unwrap();
                let entropy = (logp.exp().unwrap() * &logp)
                    .unwrap()
                    .sum_keepdim(1)
                    .unwrap()
                    .neg()
                    .unwrap();
                let lse = (t[0].narrow(1, 0, 1).unwrap() - logp.narrow(1, 0, 1).unwrap()).unwrap();
                Tensor::cat(&[picked, entropy, lse], 1).unwrap()
            },
            1e-5,
        );
    }

    #[test]
    fn token_stats_name_a_target_outside_the_vocabulary() {
        let logits = Tensor::zeros((2, 5), DType::F32, &Device::Cpu).unwrap();
        let targets = Tensor::new(&[1u32, 5], &Device::Cpu).unwrap();
        let err = token_stats(&logits, &targets).unwrap_err().to_string();
        assert!(
            err.contains("target id 5") && err.contains("vocabulary of 5"),
            "{err}"
        );
    }

    #[test]
    fn adamw_in_place_matches_the_composed_update_over_several_steps() {
        let shape = [5, 37];
        let theta = var(&shape, 11).as_tensor().copy().unwrap();
        let zeros = || Tensor::zeros(&shape, DType::F32, &Device::Cpu).unwrap();
        let (first, second) = (zeros(), zeros());
        let (mut theta_ref, mut m_ref, mut v_ref) = (theta.copy().unwrap(), zeros(), zeros());
        let (beta1, beta2, eps, lr, wd, factor) = (0.9, 0.999, 1e-8, 1e-2, 0.1, 0.7);
        for t in 1..=3 {
            let g = var(&shape, 20 + t).as_tensor().copy().unwrap();
            let (c1, c2) = (1.0 - 0.9f64.powi(t as i32), 1.0 - 0.999f64.powi(t as i32));
            let step = AdamWStep {
                beta1: beta1 as f32,
                beta2: beta2 as f32,
                eps: eps as f32,
                lr: lr as f32,
                weight_decay: wd as f32,
                correction1: c1 as f32,
                correction2: c2 as f32,
                grad_factor: factor as f32,
            };
            assert!(adamw_applies(&theta, &first, &second, &g));
            adamw_in_place(&theta, &first, &second, &g, step).unwrap();
            let g = (g * factor).unwrap();
            m_ref = ((&m_ref * beta1).unwrap() + (&g * (1.0 - beta1)).unwrap()).unwrap();
            v_ref =
                ((&v_ref * beta2).unwrap() + (g.sqr().unwrap() * (1.0 - beta2)).unwrap()).unwrap();
            let update = ((&m_ref / c1).unwrap()
                / ((&v_ref / c2).unwrap().sqrt().unwrap() + eps).unwrap())
            .unwrap();
            theta_ref = ((&theta_ref * (1.0 - lr * wd)).unwrap() - (update * lr).unwrap()).unwrap();
            for (name, a, b) in [
                ("first moment", &first, &m_ref),
                ("second moment", &second, &v_ref),
                ("parameter", &theta, &theta_ref),
            ] {
                let diff = max_abs_diff(a, b);
                assert!(diff < 1e-6, "step {t}: {name} differs by {diff}");
            }
        }
        let total = sum_squares(&theta).unwrap();
        let expected: f32 = theta.sqr().unwrap().sum_all().unwrap().to_scalar().unwrap();
        assert!((total - f64::from(expected)).abs() < 1e-4 * total.max(1.0));
    }

    #[test]
    fn masked_softmax_matches_where_cond_then_softmax() {
        let (b, h, l) = (2, 3, 6);
        // Causal, and the first two keys of batch row 1 are padding (but a query sees itself).
        let mut mask = vec![0u8; b * l * l];
        for bi in 0..b {
            for i in 0..l {
                for j in 0..=i {
                    let padding = bi == 1 && j < 2 && j != i;
                    mask[(bi * l + i) * l + j] = u8::from(!padding);
                }
            }
        }
        let allowed = Tensor::from_vec(mask, (b, 1, l, l), &Device::Cpu).unwrap();
        let scale = 0.37;
        check(
            &[var(&[b, h, l, l], 2)],
            |t| masked_softmax(&t[0], &allowed, scale).unwrap(),
            |t| {
                let scores = (&t[0] * scale).unwrap();
                let neg_inf = Tensor::new(f32::NEG_INFINITY, &Device::Cpu)
                    .unwrap()
                    .broadcast_as(scores.shape())
                    .unwrap();
                let masked = allowed
                    .broadcast_as(scores.shape())
                    .unwrap()
                    .where_cond(&scores, &neg_inf)
                    .unwrap();
                candle_nn::ops::softmax(&masked, D::Minus1).unwrap()
            },
            1e-5,
        );
    }

    #[test]
    fn a_query_that_sees_no_key_gets_zeros_not_nan() {
        let scores = Tensor::ones((1, 1, 2, 2), DType::F32, &Device::Cpu).unwrap();
        let allowed = Tensor::from_vec(vec![0u8, 0, 1, 1], (1, 1, 2, 2), &Device::Cpu).unwrap();
        let probs = masked_softmax(&scores, &allowed, 1.0).unwrap();
        let got: Vec<f32> = probs.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(got, vec![0.0, 0.0, 0.5, 0.5]);
    }

    #[test]
    fn rms_norm_matches_rms_norm_slow_forward_and_backward() {
        check(
            &[var(&[4, 3, 16], 3), var(&[16], 4)],
            |t| rms_norm(&t[0], &t[1], 1e-6).unwrap(),
            |t| candle_nn::ops::rms_norm_slow(&t[0], &t[1], 1e-6).unwrap(),
            1e-4,
        );
    }

    #[test]
    fn rope_matches_the_rotate_half_composition_forward_and_backward() {
        let (b, h, l, d) = (2, 3, 5, 8);
        let cos = Tensor::from_vec(values(b * l * d, 5), (b, 1, l, d), &Device::Cpu).unwrap();
        let sin = Tensor::from_vec(values(b * l * d, 6), (b, 1, l, d), &Device::Cpu).unwrap();
        check(
            &[var(&[b, h, l, d], 7)],
            |t| rope(&t[0], &cos, &sin).unwrap(),
            |t| {
                let x = &t[0];
                let x1 = x.narrow(D::Minus1, 0, d / 2).unwrap();
                let x2 = x.narrow(D::Minus1, d / 2, d / 2).unwrap();
                let rotated = Tensor::cat(&[&x2.neg().unwrap(), &x1], D::Minus1).unwrap();
                (x.broadcast_mul(&cos).unwrap() + rotated.broadcast_mul(&sin).unwrap()).unwrap()
            },
            1e-5,
        );
    }

    #[test]
    fn silu_mul_matches_silu_times_up_forward_and_backward() {
        // More elements than one parallel chunk, so the chunk offsets are exercised.
        let shape = [3, CHUNK / 2 + 5];
        check(
            &[var(&shape, 8), var(&shape, 9)],
            |t| silu_mul(&t[0], &t[1]).unwrap(),
            |t| (t[0].silu().unwrap() * &t[1]).unwrap(),
            1e-4,
        );
    }

    #[test]
    fn decode_attention_matches_matmul_attention_over_a_cache_view() {
        let (b, h, n_kv, t, d, cap) = (3, 4, 2, 5, 8, 7);
        let q = Tensor::from_vec(values(b * h * d, 11), (b, h, 1, d), &Device::Cpu).unwrap();
        // Keys and values as views of larger cache buffers (the first t of cap positions).
        let buffer = |seed| {
            Tensor::from_vec(
                values(b * n_kv * cap * d, seed),
                (b, n_kv, cap, d),
                &Device::Cpu,
            )
            .unwrap()
        };
        let (k, v) = (
            buffer(12).narrow(2, 0, t).unwrap(),
            buffer(13).narrow(2, 0, t).unwrap(),
        );
        // Row 1 cannot see its first two keys (left padding).
        let mut mask = vec![1u8; b * t];
        mask[t] = 0;
        mask[t + 1] = 0;
        let allowed = Tensor::from_vec(mask, (b, 1, 1, t), &Device::Cpu).unwrap();
        let scale = 0.3;
        let mask = allowed.flatten_all().unwrap().to_vec1::<u8>().unwrap();
        let fused = decode_attention(&q, &k, &v, &mask, scale).unwrap();
        let n_rep = h / n_kv;
        let qg = q.reshape((b, n_kv, n_rep, d)).unwrap();
        let scores = (qg.matmul(&k.contiguous().unwrap().t().unwrap()).unwrap() * scale)
            .unwrap()
            .reshape((b, h, 1, t))
            .unwrap();
        let probs = masked_softmax(&scores, &allowed, 1.0).unwrap();
        let expected = probs
            .reshape((b, n_kv, n_rep, t))
            .unwrap()
            .matmul(&v.contiguous().unwrap())
            .unwrap()
            .reshape((b, 1, h * d))
            .unwrap();
        assert_eq!(fused.dims(), [b, 1, h * d]);
        let diff = max_abs_diff(&fused, &expected);
        assert!(diff < 1e-5, "decode attention differs by {diff}");
    }

    #[test]
    fn small_linear_matches_matmul_with_the_transposed_weight() {
        // Inputs and weight rows in whole groups of four and with leftovers; a width of 40 is
        // two 16-wide vectors and a tail of 8.
        for (n, out) in [(1, 300), (3, 301), (8, 300), (17, 302)] {
            let x = Tensor::from_vec(values(n * 40, 14), (n, 40), &Device::Cpu).unwrap();
            let w = Tensor::from_vec(values(out * 40, 15), (out, 40), &Device::Cpu).unwrap();
            let fused = small_linear(&x, &w).unwrap();
            let expected = x.matmul(&w.t().unwrap()).unwrap();
            assert_eq!(fused.dims(), [n, out]);
            let diff = max_abs_diff(&fused, &expected);
            assert!(diff < 1e-4, "{n} rows, {out} outputs: differs by {diff}");
        }
    }

    #[test]
    fn inputs_in_other_layouts_are_refused_or_made_contiguous() {
        let x = var(&[4, 6], 10);
        // A transposed (strided) input is made contiguous first.
        let t = x.as_tensor().t().unwrap();
        let targets = Tensor::new(&[0u32, 1, 2, 3, 0, 1], &Device::Cpu).unwrap();
        let fused = token_stats(&t, &targets).unwrap().narrow(1, 0, 1).unwrap();
        let composed = candle_nn::ops::log_softmax(&t, D::Minus1)
            .unwrap()
            .gather(&targets.unsqueeze(1).unwrap(), 1)
            .unwrap();
        assert!(max_abs_diff(&fused, &composed) < 1e-5);
        let w = Tensor::ones(5, DType::F32, &Device::Cpu).unwrap();
        let err = rms_norm(x.as_tensor(), &w, 1e-6).unwrap_err().to_string();
        assert!(
            err.contains("fused RMSNorm") && err.contains("[6]"),
            "{err}"
        );
    }
}
