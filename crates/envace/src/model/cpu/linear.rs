//! The training forward's linear layer `x · wᵀ` as one autograd node on the CPU, so that
//! backward spends its time in the two gradient products rather than in graph bookkeeping.
//!
//! Composed from candle ops, a linear layer is four graph nodes: `x` reshaped to rows, `w`
//! transposed, their product, and the product reshaped back. candle's backward gives every
//! node's input a freshly zeroed gradient and adds the node's contribution into it, so each of
//! the three views costs a zeroed allocation and a full add over its tensor. A profile of the
//! tiny model's training step (`model_bench --only train`, `perf record`) put that
//! accumulation at about 15% of the step. Here the forward is one `gemm` call on the inputs'
//! memory (as candle's own matrix product makes it) and the backward returns `grad · w` and
//! `gradᵀ · x` directly.

// `gemm::gemm` takes raw pointers and strides; its one call below checks every length first.
#![allow(unsafe_code)]

use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor, bail};

use rayon::prelude::*;

use super::{cpu_f32s, f32s};

/// `x · wᵀ` for `x: (..., k)` and `w: (n, k)`, f32 on the CPU, returning `(..., n)`; gradients
/// flow to both.
pub(crate) fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op2(&w.contiguous()?, Linear)
}

/// The gradients of [`linear`]'s `x` and `w` given its output's `grad`, for a caller that
/// chains the layers' backward itself.
pub(crate) fn linear_grads(x: &Tensor, w: &Tensor, grad: &Tensor) -> Result<(Tensor, Tensor)> {
    match Linear.bwd(x, w, x, grad)? {
        (Some(dx), Some(dw)) => Ok((dx, dw)),
        _ => bail!("fused-linear: a gradient is missing"),
    }
}

struct Linear;

impl CustomOp2 for Linear {
    fn name(&self) -> &'static str {
        "fused-linear"
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
        let (n, k) = l2.shape().dims2()?;
        let x_dims = l1.shape().dims();
        if x_dims.last() != Some(&k) {
            bail!(
                "{}: the input is {x_dims:?}, the weight ({n}, {k}): their last dimensions differ",
                self.name()
            )
        }
        if k == 0 {
            bail!("{}: the weight ({n}, {k}) has no columns", self.name())
        }
        let m = x.len() / k;
        // out = x · wᵀ, wᵀ read out of `w` through its strides.
        let out = product_by_rows(
            (m, n, k),
            Operand {
                data: x,
                rs: k,
                cs: 1,
            },
            Operand {
                data: w,
                rs: 1,
                cs: k,
            },
        );
        let mut out_dims = x_dims.to_vec();
        if let Some(last) = out_dims.last_mut() {
            *last = n;
        }
        Ok((CpuStorage::F32(out), Shape::from(out_dims)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        const WHAT: &str = "fused-linear backward";
        let (n, k) = w.dims2()?;
        let (x, w, grad) = (x.contiguous()?, w.contiguous()?, grad_res.contiguous()?);
        let m = x.elem_count() / k.max(1);
        if grad.elem_count() != m * n {
            bail!(
                "{WHAT}: the gradient is {:?} for an input {:?} and a weight ({n}, {k})",
                grad.dims(),
                x.dims()
            )
        }
        let (d_x, d_w) = {
            let (x_s, x_l) = x.storage_and_layout();
            let (w_s, w_l) = w.storage_and_layout();
            let (g_s, g_l) = grad.storage_and_layout();
            let (xs, ws) = (cpu_f32s(&x_s, x_l, WHAT)?, cpu_f32s(&w_s, w_l, WHAT)?);
            let gs = cpu_f32s(&g_s, g_l, WHAT)?;
            input_and_weight_grads(gs, xs, ws, (m, n, k))
        };
        Ok((
            Some(Tensor::from_vec(d_x, x.shape(), x.device())?),
            Some(Tensor::from_vec(d_w, (n, k), w.device())?),
        ))
    }
}

/// A matrix read out of a slice through its row stride `rs` and column stride `cs`.
pub(super) struct Operand<'a> {
    pub(super) data: &'a [f32],
    pub(super) rs: usize,
    pub(super) cs: usize,
}

impl Operand<'_> {
    /// Whether every element of a `rows × cols` matrix lies inside the slice.
    fn holds(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// The two gradients of `x · wᵀ` for `x: (m, k)`, `w: (n, k)` and the output's gradient
/// `grad: (m, n)`: `grad · w` for `x` and `gradᵀ · x` for `w`.
pub(super) fn input_and_weight_grads(
    grad: &[f32],
    x: &[f32],
    w: &[f32],
    (m, n, k): (usize, usize, usize),
) -> (Vec<f32>, Vec<f32>) {
    // dx = grad · w: (m, n) by (n, k).
    let d_x = product_by_rows(
        (m, k, n),
        Operand {
            data: grad,
            rs: n,
            cs: 1,
        },
        Operand {
            data: w,
            rs: k,
            cs: 1,
        },
    );
    // dw = gradᵀ · x: (n, m) by (m, k), gradᵀ read out of `grad` through its strides.
    let d_w = product_split(
        (n, k, m),
        Operand {
            data: grad,
            rs: 1,
            cs: n,
        },
        Operand {
            data: x,
            rs: k,
            cs: 1,
        },
    );
    (d_x, d_w)
}

/// The row-major `(m, n)` product of `lhs: (m, k)` and `rhs: (k, n)`, on rayon's pool, in a
/// fresh buffer that `gemm` writes whole (no zero-fill first).
pub(super) fn product((m, n, k): (usize, usize, usize), lhs: Operand, rhs: Operand) -> Vec<f32> {
    let Some(mut out) = output((m, n, k), &lhs, &rhs) else {
        return vec![0f32; m * n];
    };
    let threads = rayon::current_num_threads();
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: `out` has room for the whole result (`output`), written here in one block.
    unsafe {
        gemm_block(
            out.as_mut_ptr(),
            (n, k),
            &lhs,
            &rhs,
            (0..m, 0..n),
            parallelism,
        );
        out.set_len(m * n);
    }
    out
}

/// Output rows or columns per rayon task of [`product_split`], at least.
const MIN_SPLIT: usize = 64;

/// [`product`] with the output split between rayon's threads, each block one single-threaded
/// `gemm` call: for the weight gradient `gradᵀ · x`, where `gemm`'s own split has every thread
/// pack the same blocks of the shared operand and here each packs only its own. On two threads
/// the tiny model's training step was faster with a column split than with `gemm`'s in 29 of
/// 42 alternating rounds (about 2% by the medians).
///
/// The output is split by columns, except by rows where it is taller than wide and `gemm` runs
/// its AVX2 kernels ([`gemm_runs_avx512`] false). Measured on two threads (both halves at
/// once) for the tiny model's weight gradients, 2,048 tokens: with AVX2 the head's (4,096 ×
/// 256) ran at 135-137 GFLOP/s split by columns against 146-175 by rows, the attention
/// projections' (512 × 256) at 164-192 against 169-203, the feed-forward's (1,536 × 256) at
/// 183-185 against 199, while the down projection's (256 × 768) was faster by columns; with
/// AVX-512 the column split was as fast or faster for all five.
pub(super) fn product_split(
    (m, n, k): (usize, usize, usize),
    lhs: Operand,
    rhs: Operand,
) -> Vec<f32> {
    split_product((m, n, k), lhs, rhs, splits_by_rows(m, n))
}

/// [`product`] for the forward `x · wᵀ`, the head's logits and the input gradient
/// `grad · w`: where `gemm` runs its AVX2 kernels, the output's rows are split between rayon's
/// threads, each block one single-threaded `gemm` call that packs all of `rhs` (a weight, small
/// beside the rows' work) for itself. `gemm`'s own split shares that packing between the
/// threads and waits for all of them at each block of it: in a profile of the tiny model's
/// training step on two threads with AVX2 those waits were about 5% of the samples, and with
/// each training step alternating between the two in one process (100 steps, 2,048 tokens each,
/// AMD EPYC Zen 4) the row split's steps were faster in 34 of 50 pairs (median ratio 1.018).
/// With AVX-512 the same comparison came out even (22 of 50, median 0.998), so there `gemm`
/// keeps its own split.
pub(super) fn product_by_rows(
    (m, n, k): (usize, usize, usize),
    lhs: Operand,
    rhs: Operand,
) -> Vec<f32> {
    if gemm_runs_avx512() {
        return product((m, n, k), lhs, rhs);
    }
    split_product((m, n, k), lhs, rhs, true)
}

/// Whether [`product_split`] splits an `(m, n)` output by rows (else by columns).
fn splits_by_rows(m: usize, n: usize) -> bool {
    m > n && !gemm_runs_avx512()
}

/// [`product_split`] split by rows (`by_rows`) or by columns.
fn split_product(
    (m, n, k): (usize, usize, usize),
    lhs: Operand,
    rhs: Operand,
    by_rows: bool,
) -> Vec<f32> {
    let side = if by_rows { m } else { n };
    let parts = rayon::current_num_threads().min(side / MIN_SPLIT);
    if parts < 2 {
        return product((m, n, k), lhs, rhs);
    }
    let Some(mut out) = output((m, n, k), &lhs, &rhs) else {
        return vec![0f32; m * n];
    };
    let width = side.div_ceil(parts);
    let base = SendPtr(out.as_mut_ptr());
    (0..parts).into_par_iter().for_each(|part| {
        let range = part * width..((part + 1) * width).min(side);
        let (rows, columns) = if by_rows {
            (range, 0..n)
        } else {
            (0..m, range)
        };
        // SAFETY: `out` has room for the whole result (`output`); the parts' blocks are
        // disjoint, so no two calls write the same element.
        unsafe {
            gemm_block(
                base.get(),
                (n, k),
                &lhs,
                &rhs,
                (rows, columns),
                gemm::Parallelism::None,
            );
        }
    });
    // SAFETY: the blocks cover every element once, and each call stored every element of its
    // block.
    unsafe { out.set_len(m * n) };
    out
}

/// Whether `gemm` runs its AVX-512 kernels here: built with them (the `avx512` feature) on a
/// CPU that has AVX-512F. It picks its kernels from the CPU alone, so `ENVACE_SIMD` does not
/// change this.
fn gemm_runs_avx512() -> bool {
    #[cfg(all(target_arch = "x86_64", feature = "avx512"))]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(all(target_arch = "x86_64", feature = "avx512")))]
    {
        false
    }
}

/// The output buffer of an `(m, n)` product, empty with room for the result, after checking
/// that the operands hold their shapes; `None` when the product is empty (`k` = 0 included).
fn output((m, n, k): (usize, usize, usize), lhs: &Operand, rhs: &Operand) -> Option<Vec<f32>> {
    assert!(
        lhs.holds(m, k) && rhs.holds(k, n),
        "fused-linear: an operand is shorter than its shape"
    );
    (m != 0 && n != 0 && k != 0).then(|| Vec::with_capacity(m * n))
}

/// Writes the block `rows × columns` of the row-major `(m, n)` product `lhs · rhs` into `out`
/// with one `gemm` call, storing every element of the block without reading it (`read_dst`
/// false).
///
/// Safety: `out` has room for all `m × n` elements, `rows` lies inside `0..m` and `columns`
/// inside `0..n`, the operands hold their shapes ([`output`] checked them), and no other call
/// writes this block at the same time. Only the row length `n` and the depth `k` are passed:
/// the block's ranges give the rest.
unsafe fn gemm_block(
    out: *mut f32,
    (n, k): (usize, usize),
    lhs: &Operand,
    rhs: &Operand,
    (rows, columns): (std::ops::Range<usize>, std::ops::Range<usize>),
    parallelism: gemm::Parallelism,
) {
    // SAFETY: the block starts inside the output and reaches only its own rows and columns
    // (row stride n, column stride 1); the operands' strides reach only elements inside their
    // slices, from the block's first row of `lhs` and first column of `rhs` on.
    unsafe {
        gemm::gemm(
            rows.len(),
            columns.len(),
            k,
            out.add(rows.start * n + columns.start),
            1,
            n as isize,
            false,
            lhs.data.as_ptr().add(rows.start * lhs.rs),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr().add(columns.start * rhs.cs),
            rhs.cs as isize,
            rhs.rs as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// The output pointer that the blocks of [`product_split`] share across threads.
struct SendPtr(*mut f32);

// SAFETY: written through only in disjoint blocks, one per thread.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The pointer (a method, so that a closure captures the whole `Sync` wrapper).
    fn get(&self) -> *mut f32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{check, var};
    use super::*;

    #[test]
    fn linear_matches_reshape_matmul_reshape_forward_and_backward() {
        // Rows of a batch, and a shape whose product spans several gemm blocks.
        for (x_shape, n) in [(vec![2, 3, 5], 7), (vec![4, 33, 64], 96), (vec![1, 16], 3)] {
            let k = *x_shape.last().unwrap();
            check(
                &[var(&x_shape, 21), var(&[n, k], 22)],
                |t| linear(&t[0], &t[1]).unwrap(),
                |t| {
                    let rows = t[0].reshape(((), k)).unwrap();
                    let mut dims = x_shape.clone();
                    *dims.last_mut().unwrap() = n;
                    rows.matmul(&t[1].t().unwrap())
                        .unwrap()
                        .reshape(dims)
                        .unwrap()
                },
                1e-3,
            );
        }
    }

    /// The split weight gradient against the one-call product and a plain triple loop, on
    /// pools of two and three threads: outputs wider than tall, taller than wide (split by rows
    /// where `gemm` runs AVX2) and square, sides that split evenly, ones that do not, one too
    /// small to split, and `gradᵀ` read through its strides as the backward reads it. The
    /// forward's row split ([`product_by_rows`]) is the row split where `gemm` runs AVX2 and the
    /// one call elsewhere.
    #[test]
    fn the_split_product_matches_the_one_call_product() {
        use super::super::testing::values;
        for threads in [2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for (m, n, k) in [
                (96, 128, 40),
                (33, 257, 70),
                (17, 200, 5),
                (8, 100, 9),
                (300, 70, 33),
                (257, 64, 20),
                (130, 130, 9),
                (100, 8, 9),
            ] {
                // `lhs` is `gradᵀ`: `grad` is (k, m) row-major, read column by column.
                let grad = values(k * m, 31);
                let x = values(k * n, 32);
                let lhs = || Operand {
                    data: &grad,
                    rs: 1,
                    cs: m,
                };
                let rhs = || Operand {
                    data: &x,
                    rs: n,
                    cs: 1,
                };
                let (by_rows, by_columns, chosen, whole, rows_chosen) = pool.install(|| {
                    (
                        split_product((m, n, k), lhs(), rhs(), true),
                        split_product((m, n, k), lhs(), rhs(), false),
                        product_split((m, n, k), lhs(), rhs()),
                        product((m, n, k), lhs(), rhs()),
                        product_by_rows((m, n, k), lhs(), rhs()),
                    )
                });
                let expected_rows = if gemm_runs_avx512() { &whole } else { &by_rows };
                assert_eq!(
                    &rows_chosen, expected_rows,
                    "({m}, {n}, {k}): the row split"
                );
                let expected = if splits_by_rows(m, n) {
                    &by_rows
                } else {
                    &by_columns
                };
                assert_eq!(&chosen, expected, "({m}, {n}, {k}): the split chosen");
                for (split, how) in [(&by_rows, "rows"), (&by_columns, "columns")] {
                    assert_eq!(split.len(), m * n);
                    for i in 0..m {
                        for j in 0..n {
                            let exact: f64 = (0..k)
                                .map(|t| f64::from(grad[t * m + i]) * f64::from(x[t * n + j]))
                                .sum();
                            let (a, b) = (split[i * n + j], whole[i * n + j]);
                            assert!(
                                (f64::from(a) - exact).abs() < 1e-3 && (a - b).abs() < 1e-3,
                                "({m}, {n}, {k}) on {threads} threads at ({i}, {j}): split by {how} {a}, \
                             one call {b}, exact {exact}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_weight_of_another_width_is_refused_with_both_shapes() {
        let x = var(&[2, 5], 1);
        let w = var(&[3, 4], 2);
        let err = linear(x.as_tensor(), w.as_tensor())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("fused-linear") && err.contains("[2, 5]") && err.contains("(3, 4)"),
            "{err}"
        );
    }
}
