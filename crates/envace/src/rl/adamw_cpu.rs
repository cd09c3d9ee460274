//! AdamW's update on the CPU, written into the parameter and its moments in place (one pass
//! each instead of candle's allocating elementwise ops), and the gradient's sum of squares for
//! clipping; `AdamW::step` in `rl/mod.rs` uses them for f32 CPU tensors.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor, bail};
use rayon::prelude::*;

use crate::model::cpu::train_ops::sum_squares_f64;
use crate::model::cpu::{applies, f32s};

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
        let total: f64 = g.par_chunks(OPT_CHUNK).map(sum_squares_f64).sum();
        Ok((CpuStorage::F64(vec![total]), Shape::from(())))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device};

    use super::*;
    use crate::model::cpu::testing::{max_abs_diff, var};

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
}
