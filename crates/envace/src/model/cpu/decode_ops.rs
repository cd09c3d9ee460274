//! CPU kernels for generation only (no backward): attention of single decode positions over
//! the key/value cache, and products of a few rows with weight matrices read in place (no
//! packing), one or several weights at once.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor, bail};
use rayon::prelude::*;

use super::columns::{ColumnBlock, column_blocks};
use super::quant::{
    TILE, axpy_strided_f32, dot_f32 as dot, dot4_f32, dot4x4_f32, dots_strided_f32,
    exp_shifted_f32, has_tile16, tile16_f32, transpose16_rows,
};
use super::{CHUNK, f32s};

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

/// RMSNorm of rows on the CPU, for the decode paths (dense and quantised): `out = x / rms(x) · w`
/// for each row of `x` (rows as long as `w`), divided as candle's kernel divides.
pub(crate) fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let dim = w.len();
    for (row, out_row) in x.chunks(dim).zip(out.chunks_mut(dim)) {
        let mean_square = row.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        let rms = (mean_square + eps).sqrt();
        for ((o, &v), &g) in out_row.iter_mut().zip(row).zip(w) {
            *o = v / rms * g;
        }
    }
}

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
/// `scratch` holds the scores between the steps (reused across calls, so that a decode step
/// allocates nothing per head); the exponentials are the vector kernel's.
pub(crate) fn attend_one(
    q: &[f32],
    keys: &KeysValues<'_>,
    allowed: &[u8],
    scale: f32,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    let t = allowed.len();
    scratch.clear();
    scratch.resize(2 * t, 0.0);
    let (scores, probs) = scratch.split_at_mut(t);
    // Every cached key's score, then −∞ for those the mask excludes.
    dots_strided_f32(q, keys.k, keys.k_stride, scores);
    let mut max = f32::NEG_INFINITY;
    for (score, &allowed) in scores.iter_mut().zip(allowed) {
        if allowed != 0 {
            max = max.max(*score);
        } else {
            *score = f32::NEG_INFINITY;
        }
    }
    if max == f32::NEG_INFINITY {
        return;
    }
    // exp(scale · (s − max)): the masked keys' −∞ gives 0.
    let sum = exp_shifted_f32(scores, max, scale, probs);
    let inverse = (1.0 / sum) as f32;
    for p in probs.iter_mut() {
        *p *= inverse;
    }
    axpy_strided_f32(out, probs, keys.v, keys.v_stride);
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
        let attend = |scratch: &mut Vec<f32>, row: usize, o: &mut [f32]| {
            let (bi, hi) = (row / self.n_heads, row % self.n_heads);
            let kv_head = hi / n_rep;
            let keys = KeysValues {
                k: k_rows(bi, kv_head),
                v: v_rows(bi, kv_head),
                k_stride: k.strides[2],
                v_stride: v.strides[2],
            };
            let mask = &self.allowed[bi * t..(bi + 1) * t];
            attend_one(
                &q[row * d..(row + 1) * d],
                &keys,
                mask,
                self.scale,
                scratch,
                o,
            );
        };
        // Rows in parallel once each task gets enough keys to be worth a hand-over.
        let min_rows = (CHUNK / (t * d).max(1)).max(1);
        if b * self.n_heads <= min_rows {
            let mut scratch = Vec::new();
            out.chunks_mut(d)
                .enumerate()
                .for_each(|(r, o)| attend(&mut scratch, r, o));
        } else {
            out.par_chunks_mut(d)
                .enumerate()
                .with_min_len(min_rows)
                .for_each_init(Vec::new, |scratch, (r, o)| attend(scratch, r, o));
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
/// Blocks of 16 output columns (never straddling two weights) run in parallel, each writing its
/// own columns of `out` ([`column_blocks`]). Within a block, each whole group of sixteen input
/// rows is one 16 × 16 tile ([`tile16_f32`], on the inputs transposed once per call: sums build
/// up in vector lanes with no reduction at the end); the other rows take 4 × 4 dot-product tiles
/// of four weight rows against four input rows, leftover weight rows and inputs narrower
/// products, and a single input row takes sixteen weight rows per reduction.
pub(crate) fn rows_times_weights(x: &[f32], n: usize, k: usize, ws: &[&[f32]], out: &mut [f32]) {
    // The tile kernel's width.
    const BLOCK: usize = TILE;
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
    // Whole groups of sixteen input rows, transposed for the tile kernel (`k` groups of sixteen
    // values each, one per row).
    // Only where the CPU has a tile kernel (`tile16_f32` is `None` otherwise).
    let n_tiled = if has_tile16() { n / TILE * TILE } else { 0 };
    // From this thread's scratch, written before it is read: zero-filling a fresh buffer (and
    // one for the results, which now go straight to `out`) took about 8% of a batch-16 decode
    // step's profile (`memset`), on the calling thread while the other worker waited.
    let mut scratch = SCRATCH.take();
    let xt = scratch.get(n_tiled * k);
    for (g, xt) in xt.chunks_mut(TILE * k.max(1)).enumerate() {
        transpose16_rows(&x[g * TILE * k..(g + 1) * TILE * k], k, xt);
    }
    let xt = &*xt;
    let product = |&(wi, start, width, _): &(usize, usize, usize, usize),
                   cols: &mut ColumnBlock<'_>| {
        let w = ws[wi];
        let weight = |o: usize| &w[o * k..(o + 1) * k];
        if n == 1 {
            dots_strided_f32(
                row(0),
                &w[start * k..(start + width) * k],
                k,
                cols.row_mut(0),
            );
            return;
        }
        // Full blocks against whole groups of sixteen rows take the 16 × 16 tile (where the CPU
        // has one); the other rows, the dot products below.
        let mut first = 0;
        if width == BLOCK {
            let block = &w[start * k..(start + BLOCK) * k];
            for (g, xt) in xt.chunks(TILE * k.max(1)).enumerate() {
                let Some(tile) = tile16_f32(xt, block, k) else {
                    break;
                };
                for (r, sums) in tile.iter().enumerate() {
                    cols.row_mut(g * TILE + r).copy_from_slice(sums);
                }
                first = (g + 1) * TILE;
            }
        }
        let mut a0 = 0;
        while a0 < width {
            let n_w = (width - a0).min(4);
            let o0 = start + a0;
            let mut r = first;
            while r + 4 <= n {
                let xs = [row(r), row(r + 1), row(r + 2), row(r + 3)];
                if n_w == 4 {
                    let tile = dot4x4_f32(std::array::from_fn(|a| weight(o0 + a)), xs);
                    for (a, four) in tile.iter().enumerate() {
                        for (rr, &v) in four.iter().enumerate() {
                            cols.row_mut(r + rr)[a0 + a] = v;
                        }
                    }
                } else {
                    for a in 0..n_w {
                        let four = dot4_f32(weight(o0 + a), xs);
                        for (rr, &v) in four.iter().enumerate() {
                            cols.row_mut(r + rr)[a0 + a] = v;
                        }
                    }
                }
                r += 4;
            }
            for a in 0..n_w {
                for rr in r..n {
                    cols.row_mut(rr)[a0 + a] = dot(row(rr), weight(o0 + a));
                }
            }
            a0 += n_w;
        }
    };
    let mut outs = column_blocks(
        out,
        n,
        total,
        blocks.iter().map(|&(_, _, width, column)| (column, width)),
    );
    // A hand-over to rayon's other threads may wake one: only products of about a hundred
    // thousand multiply-adds are worth it. (Generation runs on a pool worker, so a hand-over
    // is a push onto its own queue; from outside the pool it cost tens of microseconds, and
    // the threshold was 2^20.)
    let min_blocks = (PARALLEL_MACS / (BLOCK * n * k).max(1)).max(1);
    if blocks.len() <= min_blocks {
        outs.iter_mut()
            .zip(&blocks)
            .for_each(|(cols, block)| product(block, cols));
    } else {
        outs.par_iter_mut()
            .zip(&blocks)
            .with_min_len(min_blocks)
            .for_each(|(cols, block)| product(block, cols));
    }
    SCRATCH.set(scratch);
}

/// The buffer [`rows_times_weights`] reuses from call to call on one thread.
#[derive(Default)]
struct Scratch(Vec<f32>);

impl Scratch {
    /// `len` values, whatever they held before (the caller writes every value it reads).
    fn get(&mut self, len: usize) -> &mut [f32] {
        if self.0.len() < len {
            self.0.resize(len, 0.0);
        }
        &mut self.0[..len]
    }
}

thread_local! {
    /// Taken for the length of a call and put back after it: a call that runs while another
    /// on the same thread waits for rayon (a second generation stolen onto this worker) finds
    /// it empty and allocates its own.
    static SCRATCH: std::cell::Cell<Scratch> = std::cell::Cell::new(Scratch::default());
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::super::testing::{max_abs_diff, values};
    use super::super::train_ops::masked_softmax;
    use super::*;

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
        // Inputs and weight rows in whole groups of four and with leftovers, inputs in whole
        // groups of sixteen (the tile kernel) and with leftovers; a width of 40 is two 16-wide
        // vectors and a tail of 8. The shapes run one after another on this thread, so each
        // product reuses the scratch the one before left (stale values must never show).
        for (n, out) in [(1, 300), (3, 301), (8, 300), (16, 320), (17, 302), (35, 64)] {
            let x = Tensor::from_vec(values(n * 40, 14), (n, 40), &Device::Cpu).unwrap();
            let w = Tensor::from_vec(values(out * 40, 15), (out, 40), &Device::Cpu).unwrap();
            let fused = small_linear(&x, &w).unwrap();
            let expected = x.matmul(&w.t().unwrap()).unwrap();
            assert_eq!(fused.dims(), [n, out]);
            let diff = max_abs_diff(&fused, &expected);
            assert!(diff < 1e-4, "{n} rows, {out} outputs: differs by {diff}");
        }
    }
}
