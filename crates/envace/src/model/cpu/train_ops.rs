//! Fused CPU kernels with a real backward pass, for the training forward: per-token target
//! log-probability and entropy over the vocabulary, scaled and masked attention softmax,
//! RMSNorm, rotate-half RoPE and SiLU gating.
//!
//! candle builds these from several elementwise ops, each of which allocates, writes and (in
//! backward) reads a whole tensor again; fused, each is one pass forward and one pass backward,
//! split over rows on rayon's pool. They are candle custom ops, so autograd sees them as single
//! nodes whose `bwd` returns the exact gradient (tests compare both passes with the composed
//! ops). Only f32 tensors on the CPU take this path; [`super::applies`] tells callers when to
//! fall back to the composed ops (CUDA, other dtypes).

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor, bail,
};
use rayon::prelude::*;

use std::sync::Mutex;

use super::linear::{Operand, input_and_weight_grads, product_by_rows};
use super::quant::exp_shifted_f32;
use super::{
    CHUNK, SIGMOID_BLOCK, cpu_f32s, f32s, for_rows, last_dim, min_rows, sigmoids, silu_mul_into,
};

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
        Ok((
            CpuStorage::F32(stats_rows(z, targets, v)),
            Shape::from((n, 3)),
        ))
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
        // The logits, turned into their gradient in place.
        let mut out = z.to_vec();
        logits_grads_in_place(&mut out, v, targets, |r| {
            (
                std::array::from_fn(|k| packed[r * 6 + k]),
                std::array::from_fn(|k| packed[r * 6 + 3 + k]),
            )
        });
        Ok((CpuStorage::F32(out), Shape::from((n, v))))
    }
}

/// [`token_stats`] of the rows of `z` (`v` logits each) with their `targets`: `(n, 3)` values.
fn stats_rows(z: &[f32], targets: &[u32], v: usize) -> Vec<f32> {
    let mut out = vec![0f32; targets.len() * 3];
    // Three outputs per row but `v` logits of work: tasks are sized by the logits.
    out.par_chunks_mut(3)
        .enumerate()
        .with_min_len(min_rows(v))
        .for_each_init(
            || vec![0f32; v],
            |e, (r, o)| {
                stats_row(&z[r * v..(r + 1) * v], targets[r] as usize, e, o);
            },
        );
    out
}

/// One row of [`token_stats`]: `out` gets the target's log-probability, the entropy and the
/// log-normaliser of the logits `zs`; `e` is left holding `e^(z − max)`, and their sum is
/// returned.
fn stats_row(zs: &[f32], target: usize, e: &mut [f32], out: &mut [f32]) -> f64 {
    let max = max_of(zs);
    // Σ e^(z−max) and Σ e^(z−max)·(z−max), in f64 for the entropy's cancellation; the
    // exponentials by the vector kernel (the profile's largest scalar cost).
    let sum = exp_shifted_f32(zs, max, 1.0, e);
    let weighted = shifted_weighted_sum(e, zs, max);
    let log_sum = sum.ln();
    let lse = f64::from(max) + log_sum;
    out[0] = (f64::from(zs[target]) - lse) as f32;
    // H = −Σ p log p = ln S − Σ e·d / S.
    out[1] = (log_sum - weighted / sum) as f32;
    out[2] = lse as f32;
    sum
}

/// [`token_stats`]'s backward over the rows of `z` (`v` logits each), in place: each row of
/// logits becomes its gradient, given `row_stats(r)`: the gradients of row `r`'s three
/// statistics and the statistics themselves. With p = softmax(z), log p_j = z_j − lse and H the
/// entropy: d logp_t / d z_j = δ_jt − p_j, d H / d z_j = −p_j (log p_j + H), d lse / d z_j = p_j.
fn logits_grads_in_place(
    z: &mut [f32],
    v: usize,
    targets: &[u32],
    row_stats: impl Fn(usize) -> ([f32; 3], [f32; 3]) + Sync,
) {
    z.par_chunks_mut(v.max(1))
        .enumerate()
        .with_min_len(min_rows(v))
        .for_each_init(
            || vec![0f32; v],
            |p, (r, row)| {
                let ([g_logp, g_entropy, g_lse], [_, entropy, lse]) = row_stats(r);
                // p = e^(z − lse) by the vector kernel, then the row scaled in place.
                exp_shifted_f32(row, lse, 1.0, p);
                for (zi, &pi) in row.iter_mut().zip(p.iter()) {
                    let log_p = *zi - lse;
                    *zi = pi * (g_lse - g_logp - g_entropy * (log_p + entropy));
                }
                row[targets[r] as usize] += g_logp;
            },
        );
}

// ---------------------------------------------------------------------------------------------
// The vocabulary head and the token statistics as one node.

/// [`token_stats`] of the logits `x · wᵀ`, for final hidden rows `x: (n, h)`, the vocabulary
/// head `w: (v, h)` and `targets: (n,)` u32, as one graph node: the `(n, v)` logits are a
/// buffer of the node, never a tensor of the graph. As two nodes, candle's backward zero-fills
/// a `(n, v)` gradient for the logits and adds the statistics' gradient into it, on one thread:
/// for the tiny model's training benchmark, 2,048 rows of 4,096 logits, that is 34 MB written
/// and then 100 MB read and written again every step. Here the logits turn into their gradient
/// in place, and both products of the backward read it from there.
///
/// `entropy_grad` says whether the caller differentiates the entropy. When it does not, the
/// forward keeps the softmax of each row in place of its logits, and the backward scales it
/// (the gradient of the log-probability and the log-normaliser is `p` times one number per row)
/// instead of exponentiating the logits again. An entropy gradient that arrives anyway is still
/// exact: the backward then computes the logits again.
pub(crate) fn head_token_stats(
    x: &Tensor,
    w: &Tensor,
    targets: &Tensor,
    entropy_grad: bool,
) -> Result<Tensor> {
    let (n, h) = x.dims2()?;
    let (_, h_w) = w.dims2()?;
    if h_w != h {
        bail!(
            "fused head and token statistics: the rows are {:?} and the head {:?}; their \
             last dimensions differ",
            x.dims(),
            w.dims()
        )
    }
    if targets.dims() != [n] || targets.dtype() != DType::U32 {
        bail!(
            "fused head and token statistics: targets are {:?} {:?}, expected [{n}] u32",
            targets.dims(),
            targets.dtype()
        )
    }
    x.contiguous()?.apply_op3(
        &w.contiguous()?,
        &targets.contiguous()?,
        HeadStats {
            kept: Mutex::new(None),
            entropy_grad,
        },
    )
}

struct HeadStats {
    /// What the forward kept of its `(n, v)` logits, which the backward turns into their
    /// gradient.
    kept: Mutex<Option<KeptRows>>,
    /// Whether the entropy is differentiated (else the forward keeps probabilities).
    entropy_grad: bool,
}

/// The head's rows as [`HeadStats`]' forward left them.
enum KeptRows {
    Logits(Vec<f32>),
    Probabilities(Vec<f32>),
}

/// [`stats_rows`], each row of logits then replaced by its softmax.
fn stats_rows_to_probabilities(z: &mut [f32], targets: &[u32], v: usize) -> Vec<f32> {
    let mut out = vec![0f32; targets.len() * 3];
    out.par_chunks_mut(3)
        .zip(z.par_chunks_mut(v.max(1)))
        .enumerate()
        .with_min_len(min_rows(v))
        .for_each_init(
            || vec![0f32; v],
            |e, (r, (o, row))| {
                let inv_sum = (1.0 / stats_row(row, targets[r] as usize, e, o)) as f32;
                for (zi, &ei) in row.iter_mut().zip(e.iter()) {
                    *zi = ei * inv_sum;
                }
            },
        );
    out
}

/// The logits `x · wᵀ` of `x: (n, h)` and `w: (v, h)`.
fn head_logits(x: &[f32], w: &[f32], (n, v, h): (usize, usize, usize)) -> Vec<f32> {
    product_by_rows(
        (n, v, h),
        Operand {
            data: x,
            rs: h,
            cs: 1,
        },
        Operand {
            data: w,
            rs: 1,
            cs: h,
        },
    )
}

impl CustomOp3 for HeadStats {
    fn name(&self) -> &'static str {
        "fused-head-token-stats"
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
        let (x, w) = (f32s(s1, l1, self.name())?, f32s(s2, l2, self.name())?);
        let ((n, h), (v, _)) = (l1.shape().dims2()?, l2.shape().dims2()?);
        let targets = target_ids(s3, l3, v)?;
        let mut z = head_logits(x, w, (n, v, h));
        let (out, kept) = if self.entropy_grad {
            (stats_rows(&z, targets, v), KeptRows::Logits(z))
        } else {
            let out = stats_rows_to_probabilities(&mut z, targets, v);
            (out, KeptRows::Probabilities(z))
        };
        *self.kept.lock().map_err(|_| poisoned(self.name()))? = Some(kept);
        Ok((CpuStorage::F32(out), Shape::from((n, 3))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        targets: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        const WHAT: &str = "fused head and token statistics backward";
        let ((n, h), (v, _)) = (x.dims2()?, w.dims2()?);
        let stats = res.flatten_all()?.to_vec1::<f32>()?;
        let grads = grad_res.flatten_all()?.to_vec1::<f32>()?;
        let targets = targets.flatten_all()?.to_vec1::<u32>()?;
        let (x, w) = (x.contiguous()?, w.contiguous()?);
        let (x_s, x_l) = x.storage_and_layout();
        let (w_s, w_l) = w.storage_and_layout();
        let (xs, ws) = (cpu_f32s(&x_s, x_l, WHAT)?, cpu_f32s(&w_s, w_l, WHAT)?);
        // The forward's logits, or the same product again for a second backward.
        if stats.len() != n * 3 || grads.len() != n * 3 || targets.len() != n {
            bail!("{WHAT}: the statistics, their gradient or the targets do not have {n} rows")
        }
        // The forward's probabilities or logits, or the logits again (for a second backward, or
        // an entropy gradient the probabilities cannot give); either way turned into their
        // gradient in place.
        let row3 = |values: &[f32], r: usize| std::array::from_fn(|i| values[r * 3 + i]);
        let no_entropy_grad = (0..n).all(|r| grads[r * 3 + 1] == 0.0);
        let kept = self.kept.lock().map_err(|_| poisoned(WHAT))?.take();
        let dz = match kept {
            Some(KeptRows::Probabilities(mut p)) if p.len() == n * v && no_entropy_grad => {
                probability_grads_in_place(&mut p, v, &targets, |r| row3(&grads, r));
                p
            }
            kept => {
                let mut z = match kept {
                    Some(KeptRows::Logits(z)) if z.len() == n * v => z,
                    _ => head_logits(xs, ws, (n, v, h)),
                };
                logits_grads_in_place(&mut z, v, &targets, |r| (row3(&grads, r), row3(&stats, r)));
                z
            }
        };
        // dx = dz · w and dw = dzᵀ · x.
        let (d_x, d_w) = input_and_weight_grads(&dz, xs, ws, (n, v, h));
        Ok((
            Some(Tensor::from_vec(d_x, (n, h), x.device())?),
            Some(Tensor::from_vec(d_w, (v, h), w.device())?),
            None,
        ))
    }
}

/// [`logits_grads_in_place`] for rows holding their softmax `p` rather than their logits, when
/// the entropy's gradient is zero: `d/dz_j = p_j (g_lse − g_logp)`, plus `g_logp` at the target.
fn probability_grads_in_place(
    p: &mut [f32],
    v: usize,
    targets: &[u32],
    row_grads: impl Fn(usize) -> [f32; 3] + Sync,
) {
    p.par_chunks_mut(v.max(1))
        .enumerate()
        .with_min_len(min_rows(v))
        .for_each(|(r, row)| {
            let [g_logp, _, g_lse] = row_grads(r);
            let scale = g_lse - g_logp;
            for pi in row.iter_mut() {
                *pi *= scale;
            }
            row[targets[r] as usize] += g_logp;
        });
}

fn poisoned(what: &str) -> candle_core::Error {
    candle_core::Error::Msg(format!(
        "{what}: a thread panicked while holding the logits"
    ))
}

// ---------------------------------------------------------------------------------------------
// Scaled, masked softmax of attention scores.

/// `softmax(scale × scores)` over the last dimension with disallowed keys removed:
/// `scores: (b, h, l, t)` f32, `allowed: (b, 1, l, t)` u8 (1 = the query may see the key). A
/// row with no allowed key comes out as zeros. `scale` is finite and non-zero (attention's
/// `1/√d`).
pub(crate) fn masked_softmax(scores: &Tensor, allowed: &Tensor, scale: f64) -> Result<Tensor> {
    let (b, h, l, t) = scores.dims4()?;
    if !scale.is_finite() || scale == 0.0 {
        bail!("fused attention softmax: the scale must be finite and non-zero, got {scale}")
    }
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
            masked_softmax_row(xs, ms, self.scale, row);
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

/// `out = softmax(scale × xs)` over the keys `mask` allows (non-zero), 0 for the others; all
/// zeros when it allows none. `scale` is finite and non-zero.
pub(super) fn masked_softmax_row(xs: &[f32], mask: &[u8], scale: f32, out: &mut [f32]) {
    let max = masked_max(xs, mask, scale);
    if max == f32::NEG_INFINITY {
        out.fill(0.0); // no key allowed: zeros
        return;
    }
    // e^(x·scale − max) for every key by the vector kernel, then masked keys to 0.
    exp_shifted_f32(xs, max / scale, scale, out);
    let sum = zero_masked_and_sum(out, mask);
    let inv = 1.0 / sum;
    out.iter_mut().for_each(|o| *o *= inv);
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
            let dot = dot(gs, ys);
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

/// The gradients of [`rms_norm`]'s `x` and `w` given its output's `grad`, for a caller that
/// chains the layers' backward itself.
pub(crate) fn rms_norm_grads(
    x: &Tensor,
    w: &Tensor,
    eps: f64,
    grad: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let (x, w) = (x.contiguous()?, w.contiguous()?);
    let op = RmsNorm { eps: eps as f32 };
    match op.bwd(&x, &w, &x, grad)? {
        (Some(dx), Some(dw)) => Ok((dx, dw)),
        _ => bail!("fused RMSNorm: a gradient is missing"),
    }
}

#[derive(Clone, Copy)]
struct RmsNorm {
    eps: f32,
}

/// `out = xs / rms(xs) × w`, one row of RMSNorm.
pub(super) fn rms_norm_row(xs: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let inv = inv_rms(xs, eps);
    for ((o, &xi), &wi) in out.iter_mut().zip(xs).zip(w) {
        *o = xi * inv * wi;
    }
}

/// The backward pass of [`rms_norm_row`] for the incoming gradient `gs`: writes `dx` and adds
/// this row's share of the weight gradient into `dw`. With r = 1 / rms(x):
/// dx_i = r (g_i w_i) − x_i r³ / n × Σ_j g_j w_j x_j, dw_i += g_i x_i r.
pub(super) fn rms_norm_row_backward(
    gs: &[f32],
    xs: &[f32],
    w: &[f32],
    eps: f32,
    dx: &mut [f32],
    dw: &mut [f32],
) {
    let inv = inv_rms(xs, eps);
    let dot = triple_dot(gs, w, xs);
    let k = inv * inv * inv * dot / xs.len() as f32;
    for ((((dx, dw), &g), &x), &wi) in dx.iter_mut().zip(dw.iter_mut()).zip(gs).zip(xs).zip(w) {
        *dx = inv * g * wi - x * k;
        *dw += g * x * inv;
    }
}

fn inv_rms(xs: &[f32], eps: f32) -> f32 {
    let mean_sq = sum_squares(xs) / xs.len() as f32;
    1.0 / (mean_sq + eps).sqrt()
}

/// Lanes of the reductions below: eight accumulators instead of one, so that the compiler can
/// vectorise them (a single accumulator is a chain of dependent adds).
const LANES: usize = 8;

/// Σ x².
fn sum_squares(xs: &[f32]) -> f32 {
    let chunks = xs.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().map(|&x| x * x).sum();
    let mut acc = [0f32; LANES];
    for chunk in chunks {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            *a += x * x;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Σ x² with each square rounded to f32 and summed in f64 (the gradient norm's chunks).
pub(crate) fn sum_squares_f64(xs: &[f32]) -> f64 {
    let chunks = xs.chunks_exact(LANES);
    let tail: f64 = chunks.remainder().iter().map(|&x| f64::from(x * x)).sum();
    let mut acc = [0f64; LANES];
    for chunk in chunks {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            *a += f64::from(x * x);
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// Σ a·b over two slices of one length.
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = (ca.remainder().iter().zip(cb.remainder()))
        .map(|(&x, &y)| x * y)
        .sum();
    let mut acc = [0f32; LANES];
    for (xa, xb) in ca.zip(cb) {
        for ((s, &x), &y) in acc.iter_mut().zip(xa).zip(xb) {
            *s += x * y;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The largest value of `xs` (−∞ for none; a NaN only where every value is one).
fn max_of(xs: &[f32]) -> f32 {
    let chunks = xs.chunks_exact(LANES);
    let tail = (chunks.remainder().iter().copied()).fold(f32::NEG_INFINITY, f32::max);
    let mut acc = [f32::NEG_INFINITY; LANES];
    for chunk in chunks {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            *a = a.max(x);
        }
    }
    acc.into_iter().fold(tail, f32::max)
}

/// The largest `x · scale` over the `xs` that `mask` allows (non-zero), −∞ when it allows none.
fn masked_max(xs: &[f32], mask: &[u8], scale: f32) -> f32 {
    let (cx, cm) = (xs.chunks_exact(LANES), mask.chunks_exact(LANES));
    let allowed = |x: f32, m: u8| if m != 0 { x * scale } else { f32::NEG_INFINITY };
    let tail = (cx.remainder().iter().zip(cm.remainder()))
        .map(|(&x, &m)| allowed(x, m))
        .fold(f32::NEG_INFINITY, f32::max);
    let mut acc = [f32::NEG_INFINITY; LANES];
    for (xs, ms) in cx.zip(cm) {
        for ((a, &x), &m) in acc.iter_mut().zip(xs).zip(ms) {
            *a = a.max(allowed(x, m));
        }
    }
    acc.into_iter().fold(tail, f32::max)
}

/// Sets the values of `out` that `mask` does not allow (zero) to 0 and returns the sum of the
/// rest.
fn zero_masked_and_sum(out: &mut [f32], mask: &[u8]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut blocks = out.chunks_exact_mut(LANES);
    let mut masks = mask.chunks_exact(LANES);
    for (os, ms) in (&mut blocks).zip(&mut masks) {
        for ((a, o), &m) in acc.iter_mut().zip(os).zip(ms) {
            if m == 0 {
                *o = 0.0;
            }
            *a += *o;
        }
    }
    let mut tail = 0f32;
    for (o, &m) in blocks.into_remainder().iter_mut().zip(masks.remainder()) {
        if m == 0 {
            *o = 0.0;
        }
        tail += *o;
    }
    acc.iter().sum::<f32>() + tail
}

/// Σ e·(z − shift) in f64, over `e` and `zs` of one length.
fn shifted_weighted_sum(e: &[f32], zs: &[f32], shift: f32) -> f64 {
    let term = |e: f32, z: f32| f64::from(e) * f64::from(z - shift);
    let (ce, cz) = (e.chunks_exact(LANES), zs.chunks_exact(LANES));
    let tail: f64 = (ce.remainder().iter().zip(cz.remainder()))
        .map(|(&e, &z)| term(e, z))
        .sum();
    let mut acc = [0f64; LANES];
    for (es, zs) in ce.zip(cz) {
        for ((a, &e), &z) in acc.iter_mut().zip(es).zip(zs) {
            *a += term(e, z);
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// Σ a·b·c over three slices of one length.
fn triple_dot(a: &[f32], b: &[f32], c: &[f32]) -> f32 {
    let (ca, cb, cc) = (
        a.chunks_exact(LANES),
        b.chunks_exact(LANES),
        c.chunks_exact(LANES),
    );
    let tail: f32 = (ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .zip(cc.remainder()))
    .map(|((&x, &y), &z)| x * y * z)
    .sum();
    let mut acc = [0f32; LANES];
    for ((xa, xb), xc) in ca.zip(cb).zip(cc) {
        for (((s, &x), &y), &z) in acc.iter_mut().zip(xa).zip(xb).zip(xc) {
            *s += x * y * z;
        }
    }
    acc.iter().sum::<f32>() + tail
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
            rms_norm_row(&x[r * n..(r + 1) * n], w, self.eps, row);
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
        // Fixed blocks of rows, their partial weight gradients summed in block order, so that
        // the sum does not depend on how rayon shares the blocks out.
        let block_rows = min_rows(n);
        let partials: Vec<Vec<f32>> = dx
            .par_chunks_mut(n * block_rows)
            .enumerate()
            .map(|(block, rows)| {
                let mut acc = vec![0f32; n];
                for (i, row) in rows.chunks_exact_mut(n).enumerate() {
                    let r = block * block_rows + i;
                    let (gs, xs) = (&g[r * n..(r + 1) * n], &x[r * n..(r + 1) * n]);
                    rms_norm_row_backward(gs, xs, w, self.forward.eps, row, &mut acc);
                }
                acc
            })
            .collect();
        let mut dw = vec![0f32; n];
        for partial in &partials {
            dw.iter_mut().zip(partial).for_each(|(a, b)| *a += b);
        }
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

/// One head's row `xs` rotated by the tables `c`, `s` (rotate-half layout) into `out`, or by the
/// transposed rotation (the backward pass).
pub(super) fn rope_row(xs: &[f32], c: &[f32], s: &[f32], transpose: bool, out: &mut [f32]) {
    let half = xs.len() / 2;
    if transpose {
        // The adjoint of y = x c + rot(x) s, rot(x) = (−x₂, x₁):
        // dx₁ = g₁ c₁ + g₂ s₂, dx₂ = g₂ c₂ − g₁ s₁.
        for i in 0..half {
            out[i] = xs[i] * c[i] + xs[i + half] * s[i + half];
            out[i + half] = xs[i + half] * c[i + half] - xs[i] * s[i];
        }
    } else {
        for i in 0..half {
            out[i] = xs[i] * c[i] - xs[i + half] * s[i];
            out[i + half] = xs[i + half] * c[i + half] + xs[i] * s[i + half];
        }
    }
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
        let per_batch = self.n_heads * self.n_positions;
        let mut out = vec![0f32; x.len()];
        for_rows(&mut out, d, |r, row| {
            let table = ((r / per_batch) * self.n_positions + r % self.n_positions) * d;
            let (c, s) = (&cos[table..table + d], &sin[table..table + d]);
            rope_row(&x[r * d..(r + 1) * d], c, s, self.transpose, row);
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

/// The gradients of [`silu_mul_into`] for an output gradient `g`: `d_gate = g · up · silu'(gate)`
/// with `silu'(a) = s (1 + a (1 − s))`, and `d_up = g · silu(gate)`.
fn silu_mul_backward_into(
    g: &[f32],
    gate: &[f32],
    up: &[f32],
    d_gate: &mut [f32],
    d_up: &mut [f32],
) {
    let mut s = [0f32; SIGMOID_BLOCK];
    for start in (0..gate.len()).step_by(SIGMOID_BLOCK) {
        let end = (start + SIGMOID_BLOCK).min(gate.len());
        let s = &mut s[..end - start];
        sigmoids(&gate[start..end], s);
        for (i, &s) in (start..end).zip(s.iter()) {
            let (gi, a, b) = (g[i], gate[i], up[i]);
            d_gate[i] = gi * b * s * (1.0 + a * (1.0 - s));
            d_up[i] = gi * a * s;
        }
    }
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
            let range = c * CHUNK..c * CHUNK + chunk.len();
            silu_mul_into(&a[range.clone()], &b[range], chunk);
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
                let range = c * CHUNK..c * CHUNK + dg.len();
                silu_mul_backward_into(&g[range.clone()], &a[range.clone()], &b[range], dg, du);
            });
        Ok((CpuStorage::F32(out), Shape::from(2 * n)))
    }
}

/// `silu(gate) × up` over packed rows `gate_up: (..., 2 · n)` (each row's `n` gate values, then
/// its `n` up values, as one linear layer over the stacked gate and up weights writes them),
/// returning `(..., n)`. One graph node where two linear layers and [`silu_mul`] would be three.
pub(crate) fn silu_mul_packed(gate_up: &Tensor) -> Result<Tensor> {
    let width = gate_up.dims().last().copied().unwrap_or(0);
    if width == 0 || width % 2 != 0 {
        bail!(
            "fused SiLU gating: the packed gate and up values are {:?}; expected an even, \
             non-zero last dimension",
            gate_up.dims()
        )
    }
    gate_up.contiguous()?.apply_op1(SiluMulPacked)
}

/// The gradient of [`silu_mul_packed`]'s `gate_up` given its output's `grad`, for a caller that
/// chains the layers' backward itself.
pub(crate) fn silu_mul_packed_grad(gate_up: &Tensor, grad: &Tensor) -> Result<Tensor> {
    match SiluMulPacked.bwd(&gate_up.contiguous()?, gate_up, grad)? {
        Some(d) => Ok(d),
        None => bail!("fused SiLU gating: the gradient is missing"),
    }
}

struct SiluMulPacked;

impl CustomOp1 for SiluMulPacked {
    fn name(&self) -> &'static str {
        "fused-silu-mul-packed"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = f32s(storage, layout, self.name())?;
        let width = last_dim(layout.shape(), self.name())?;
        let n = width / 2;
        let mut out = vec![0f32; x.len() / 2];
        for_rows(&mut out, n, |r, row| {
            let (gate, up) = x[r * width..(r + 1) * width].split_at(n);
            silu_mul_into(gate, up, row);
        });
        let mut dims = layout.shape().dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = n;
        }
        Ok((CpuStorage::F32(out), Shape::from(dims)))
    }

    fn bwd(&self, gate_up: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let grad = grad_res
            .contiguous()?
            .apply_op2_no_bwd(gate_up, &SiluMulPackedBackward)?;
        Ok(Some(grad))
    }
}

/// The backward pass of [`SiluMulPacked`]: `(grad, gate_up)` → the packed gradient of
/// `gate_up`.
struct SiluMulPackedBackward;

impl CustomOp2 for SiluMulPackedBackward {
    fn name(&self) -> &'static str {
        "fused-silu-mul-packed-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let g = f32s(s1, l1, self.name())?;
        let x = f32s(s2, l2, self.name())?;
        let width = last_dim(l2.shape(), self.name())?;
        let n = width / 2;
        if g.len() * 2 != x.len() {
            bail!(
                "{}: the gradient does not match the packed input",
                self.name()
            )
        }
        let mut out = vec![0f32; x.len()];
        for_rows(&mut out, width, |r, row| {
            let (gate, up) = x[r * width..(r + 1) * width].split_at(n);
            let gs = &g[r * n..(r + 1) * n];
            let (d_gate, d_up) = row.split_at_mut(n);
            silu_mul_backward_into(gs, gate, up, d_gate, d_up);
        });
        Ok((CpuStorage::F32(out), l2.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{D, DType, Device, Var};

    use super::super::testing::{check, max_abs_diff, values, var};
    use super::*;

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
    fn the_fused_head_matches_the_head_then_token_stats_forward_and_backward() {
        // More rows and a wider vocabulary than one gemm block, and a second backward (which
        // computes the logits again instead of reusing the forward's buffer). Kept as logits
        // (`entropy_grad`) or as probabilities, whose backward computes the logits again for
        // the entropy's gradient that `check`'s loss asks of every output.
        for (n, h, v) in [(5, 8, 41), (70, 24, 300)] {
            for entropy_grad in [true, false] {
                let targets: Vec<u32> = (0..n as u32).map(|r| (r * 13 + 5) % v as u32).collect();
                let targets = Tensor::from_vec(targets, n, &Device::Cpu).unwrap();
                let inputs = [var(&[n, h], 31), var(&[v, h], 32)];
                check(
                    &inputs,
                    |t| head_token_stats(&t[0], &t[1], &targets, entropy_grad).unwrap(),
                    |t| {
                        let logits = t[0].matmul(&t[1].t().unwrap()).unwrap();
                        token_stats(&logits, &targets).unwrap()
                    },
                    1e-3,
                );
                let (x, w) = (inputs[0].as_tensor(), inputs[1].as_tensor());
                let stats = head_token_stats(x, w, &targets, entropy_grad).unwrap();
                let loss = stats.sum_all().unwrap();
                let (first, second) = (loss.backward().unwrap(), loss.backward().unwrap());
                for input in &inputs {
                    let diff = max_abs_diff(
                        first.get(input.as_tensor()).unwrap(),
                        second.get(input.as_tensor()).unwrap(),
                    );
                    assert!(diff < 1e-5, "a second backward differs by {diff}");
                }
            }
        }
    }

    #[test]
    fn kept_probabilities_give_the_gradients_of_kept_logits_when_the_entropy_is_not_used() {
        // A loss of the log-probabilities and log-normalisers only: the backward scales the
        // kept probabilities instead of exponentiating the logits again.
        let (n, h, v) = (70, 24, 300);
        let targets: Vec<u32> = (0..n as u32).map(|r| (r * 7 + 2) % v as u32).collect();
        let targets = Tensor::from_vec(targets, n, &Device::Cpu).unwrap();
        let inputs = [var(&[n, h], 41), var(&[v, h], 42)];
        let (x, w) = (inputs[0].as_tensor(), inputs[1].as_tensor());
        let weights: Vec<f32> = (0..n).map(|r| 0.3 - r as f32 * 0.02).collect();
        let weights = Tensor::from_vec(weights, n, &Device::Cpu).unwrap();
        let grads = |entropy_grad: bool| {
            let stats = head_token_stats(x, w, &targets, entropy_grad).unwrap();
            let column = |k: usize| stats.narrow(1, k, 1).unwrap().squeeze(1).unwrap();
            let loss = ((column(0) * &weights).unwrap() - (column(2) * 0.5).unwrap())
                .unwrap()
                .sum_all()
                .unwrap();
            (stats.to_vec2::<f32>().unwrap(), loss.backward().unwrap())
        };
        let ((stats_logits, logits), (stats_probs, probs)) = (grads(true), grads(false));
        assert_eq!(stats_logits, stats_probs, "the forward's statistics");
        for input in &inputs {
            let (a, b) = (
                logits.get(input.as_tensor()).unwrap(),
                probs.get(input.as_tensor()).unwrap(),
            );
            let scale = max_abs_diff(a, &a.zeros_like().unwrap());
            let diff = max_abs_diff(a, b);
            assert!(
                scale > 1e-3 && diff < 1e-5 * scale.max(1.0),
                "{diff} of {scale}"
            );
        }
    }

    #[test]
    fn the_fused_head_names_mismatched_sizes_and_targets() {
        let device = Device::Cpu;
        let x = Tensor::zeros((2, 4), DType::F32, &device).unwrap();
        let targets = Tensor::new(&[1u32, 2], &device).unwrap();
        let err = head_token_stats(
            &x,
            &Tensor::zeros((5, 3), DType::F32, &device).unwrap(),
            &targets,
            true,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("[2, 4]") && err.contains("[5, 3]"), "{err}");
        let w = Tensor::zeros((5, 4), DType::F32, &device).unwrap();
        let err = head_token_stats(&x, &w, &Tensor::new(&[1u32, 5], &device).unwrap(), true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("target id 5") && err.contains("vocabulary of 5"),
            "{err}"
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

    /// The lane-by-lane reductions against one accumulator, for lengths below, at and past
    /// a multiple of the lanes, with some keys masked (all of them in one case).
    #[test]
    fn the_lane_reductions_match_plain_loops() {
        for n in [0, 1, 7, 8, 9, 16, 31, 100] {
            let a: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.37)
                .collect();
            let b: Vec<f32> = (0..n)
                .map(|i| ((i * 11 % 17) as f32 - 8.0) * 0.21)
                .collect();
            let mask: Vec<u8> = (0..n).map(|i| u8::from(i % 3 != 1)).collect();
            let close = |x: f64, y: f64| (x - y).abs() <= 1e-5 * (1.0 + y.abs());
            let plain_dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!(
                close(f64::from(dot(&a, &b)), f64::from(plain_dot)),
                "dot, {n}"
            );
            let plain_squares: f64 = a.iter().map(|&x| f64::from(x * x)).sum();
            assert!(close(sum_squares_f64(&a), plain_squares), "squares, {n}");
            let plain_max = a.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max_of(&a), plain_max, "max, {n}");
            let mut plain_masked = f32::NEG_INFINITY;
            for (&x, &m) in a.iter().zip(&mask) {
                if m != 0 {
                    plain_masked = plain_masked.max(x * 0.5);
                }
            }
            assert_eq!(masked_max(&a, &mask, 0.5), plain_masked, "masked max, {n}");
            assert_eq!(
                masked_max(&a, &vec![0; n], 0.5),
                f32::NEG_INFINITY,
                "nothing allowed, {n}"
            );
            let mut zeroed = b.clone();
            let sum = zero_masked_and_sum(&mut zeroed, &mask);
            let plain: Vec<f32> = b
                .iter()
                .zip(&mask)
                .map(|(&x, &m)| if m == 0 { 0.0 } else { x })
                .collect();
            assert_eq!(zeroed, plain, "zeroed, {n}");
            assert!(
                close(f64::from(sum), f64::from(plain.iter().sum::<f32>())),
                "sum, {n}"
            );
            let weighted: f64 = a
                .iter()
                .zip(&b)
                .map(|(&e, &z)| f64::from(e) * f64::from(z - 0.25))
                .sum();
            assert!(
                close(shifted_weighted_sum(&a, &b, 0.25), weighted),
                "weighted, {n}"
            );
        }
        // A NaN among numbers is skipped, as `f32::max` skips it.
        let mut with_nan = vec![1.0f32; 20];
        with_nan[3] = f32::NAN;
        with_nan[12] = 4.0;
        assert_eq!(max_of(&with_nan), 4.0);
    }

    #[test]
    fn the_rms_norm_weight_gradient_is_the_same_on_every_run() {
        // Many blocks of rows, so that rayon may share them out differently each time.
        let (x, w) = (var(&[1200, 256], 41), var(&[256], 42));
        let grad = || -> Vec<f32> {
            let g = rms_norm(&x, &w, 1e-6)
                .unwrap()
                .sqr()
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            g.get(&w).unwrap().to_vec1().unwrap()
        };
        let first = grad();
        for _ in 0..5 {
            assert_eq!(grad(), first);
        }
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
    fn packed_silu_mul_matches_silu_of_the_first_half_times_the_second() {
        // Rows wider than one parallel chunk together, and an odd half width.
        for shape in [vec![2, 3, 2 * 7], vec![CHUNK / 64 + 3, 2 * 33]] {
            let n = shape[shape.len() - 1] / 2;
            check(
                &[var(&shape, 31)],
                |t| silu_mul_packed(&t[0]).unwrap(),
                |t| {
                    let gate = t[0].narrow(D::Minus1, 0, n).unwrap();
                    let up = t[0].narrow(D::Minus1, n, n).unwrap();
                    (gate.silu().unwrap() * up).unwrap()
                },
                1e-5,
            );
        }
        let odd = var(&[2, 5], 1);
        let err = silu_mul_packed(&odd).unwrap_err().to_string();
        assert!(err.contains("[2, 5]") && err.contains("even"), "{err}");
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
