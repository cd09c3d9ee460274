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

use super::f32s;

/// `x · wᵀ` for `x: (..., k)` and `w: (n, k)`, f32 on the CPU, returning `(..., n)`; gradients
/// flow to both.
pub(crate) fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op2(&w.contiguous()?, Linear)
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
        let mut out = vec![0f32; m * n];
        let threads = rayon::current_num_threads();
        let parallelism = if threads > 1 {
            gemm::Parallelism::Rayon(threads)
        } else {
            gemm::Parallelism::None
        };
        if m > 0 && n > 0 {
            assert!(
                x.len() == m * k && w.len() == n * k && out.len() == m * n,
                "fused-linear: lengths do not match the shapes"
            );
            // SAFETY: `out` is (m, n) row-major, `x` (m, k) row-major and `w` (n, k) row-major,
            // read as the (k, n) matrix wᵀ through its strides (row stride 1, column stride k);
            // every element those strides reach lies inside its slice (lengths asserted above).
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    out.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    x.as_ptr(),
                    1,
                    k as isize,
                    w.as_ptr(),
                    k as isize,
                    1,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    parallelism,
                );
            }
        }
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
        let (n, k) = w.dims2()?;
        // Detached operands: the gradient products must not grow the graph.
        let grad = grad_res.detach().contiguous()?.reshape(((), n))?;
        let x_rows = x.detach().reshape(((), k))?;
        let grad_x = grad.matmul(&w.detach())?.reshape(x.shape())?;
        let grad_w = grad.t()?.matmul(&x_rows)?;
        Ok((Some(grad_x), Some(grad_w)))
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
