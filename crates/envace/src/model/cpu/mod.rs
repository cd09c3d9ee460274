//! The model's CPU kernels: the training ops with a real backward (`train_ops`, and the linear
//! layer and the attention each as one graph node in `linear` and `attention`), the
//! decode-only ops (`decode_ops`), the quantised and f32 SIMD primitives (`quant`), strided
//! matrix products for attention over packed buffers (`strided`), and the
//! helpers they share: reading candle's CPU storage, splitting rows over rayon's pool, and the
//! vector sigmoid and SiLU gating that training and both decode paths use.
//!
//! Which execution path runs which of them is tabled at the top of `model/mod.rs`.
//!
//! [`applies`] tells callers whether a tensor can take these kernels (f32 on the CPU).

pub(crate) mod attention;
pub(crate) mod columns;
pub(crate) mod decode_ops;
pub(crate) mod linear;
pub mod quant;
pub(crate) mod strided;
pub(crate) mod train_ops;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Layout, Result, Shape, Storage, Tensor, bail};
use rayon::prelude::*;

use quant::exp_shifted_f32;

/// Whether the fused kernels can run on `x` (f32 on the CPU).
pub(crate) fn applies(x: &Tensor) -> bool {
    x.device().is_cpu() && x.dtype() == DType::F32
}

/// The contiguous f32 elements of one custom-op argument.
pub(crate) fn f32s<'a>(storage: &'a CpuStorage, layout: &Layout, op: &str) -> Result<&'a [f32]> {
    let CpuStorage::F32(data) = storage else {
        bail!("{op}: expects f32 input, got {:?}", storage.dtype())
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => bail!("{op}: expects a contiguous input"),
    }
}

/// The f32 values of a tensor's storage on the CPU.
pub(crate) fn cpu_f32s<'a>(storage: &'a Storage, layout: &Layout, what: &str) -> Result<&'a [f32]> {
    match storage {
        Storage::Cpu(cpu) => f32s(cpu, layout, what),
        _ => bail!("{what}: expects tensors on the CPU"),
    }
}

/// Elements per rayon task, at least.
pub(crate) const CHUNK: usize = 16_384;

/// Rows per rayon task, so that each task handles at least [`CHUNK`] elements.
pub(crate) fn min_rows(row_len: usize) -> usize {
    (CHUNK / row_len.max(1)).max(1)
}

/// Fills `out` row by row (`row_len` elements each) with `f(row index, row)`, rows in parallel
/// (on the calling thread when there is too little work to share).
pub(crate) fn for_rows(
    out: &mut [f32],
    row_len: usize,
    f: impl Fn(usize, &mut [f32]) + Sync + Send,
) {
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

/// Values per call of the vector exponential in [`sigmoids`]'s callers: a stack buffer's worth.
pub(crate) const SIGMOID_BLOCK: usize = 256;

/// `out[i] = 1 / (1 + exp(−a[i]))`, the exponentials by the vector kernel
/// ([`exp_shifted_f32`]; `f32::exp` per value was a tenth of a decode step).
pub(crate) fn sigmoids(a: &[f32], out: &mut [f32]) {
    exp_shifted_f32(a, 0.0, -1.0, out);
    for o in out.iter_mut() {
        *o = 1.0 / (1.0 + *o);
    }
}

/// `out = silu(gate) × up = gate · sigmoid(gate) · up`, elementwise over slices of one length.
pub(crate) fn silu_mul_into(gate: &[f32], up: &[f32], out: &mut [f32]) {
    let mut s = [0f32; SIGMOID_BLOCK];
    for ((o, a), b) in out
        .chunks_mut(SIGMOID_BLOCK)
        .zip(gate.chunks(SIGMOID_BLOCK))
        .zip(up.chunks(SIGMOID_BLOCK))
    {
        let s = &mut s[..o.len()];
        sigmoids(a, s);
        for (((o, &a), &b), &s) in o.iter_mut().zip(a).zip(b).zip(s.iter()) {
            *o = a * s * b;
        }
    }
}

/// Runs `f` (a generation loop) on a rayon worker while the pool's other workers keep looking
/// for work, until it returns.
///
/// Each decode step shares out a dozen small products, attention and sampling, each a few tens
/// of microseconds. From a worker inside the pool a product's halves are pushed onto its own
/// queue rather than handed over from outside and waited for (SmolLM2 Q4_1 decoding went from
/// 124 to 167 tokens/s on two threads for that alone). But an idle worker goes to sleep after a
/// few rounds of looking, and waking it is a futex call and a reschedule that costs about as
/// much as the product: the tiny model's batch-16 decode spent about a sixth of its time in the
/// kernel's scheduler, and its products ran 1.2× faster on two threads than on one. So for as
/// long as `f` runs, every other worker runs a job that takes whatever work appears
/// ([`rayon::yield_now`]) and spins in between; products then run 1.6× faster on two threads.
/// The spinning stops when `f` returns or panics. The same holds for a training step's many
/// small ops. On a GPU (`device` not the CPU) `f` runs as it is, with no spinning.
pub(crate) fn with_workers_awake<R: Send>(
    device: &candle_core::Device,
    f: impl FnOnce() -> R + Send,
) -> R {
    use std::sync::atomic::{AtomicBool, Ordering};
    if !device.is_cpu() {
        return f();
    }

    /// Sets the flag when dropped, so that the spinning jobs end even if `f` panics.
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }

    let stop = AtomicBool::new(false);
    rayon::scope(|scope| {
        for _ in 1..rayon::current_num_threads() {
            scope.spawn(|_| {
                while !stop.load(Ordering::Acquire) {
                    if rayon::yield_now() != Some(rayon::Yield::Executed) {
                        std::hint::spin_loop();
                    }
                }
            });
        }
        let _stop = Stop(&stop);
        f()
    })
}

pub(crate) fn last_dim(shape: &Shape, op: &str) -> Result<usize> {
    match shape.dims().last() {
        Some(&n) if n > 0 => Ok(n),
        _ => bail!("{op}: expects a non-empty last dimension, got {shape:?}"),
    }
}

/// Helpers of the kernels' tests: deterministic inputs, and a check of a fused op against
/// its composition from candle's ops, forward and backward.
#[cfg(test)]
pub(crate) mod testing {
    use candle_core::{Device, Tensor, Var};

    /// Deterministic pseudo-random values in [-2, 2).
    pub(crate) fn values(n: usize, seed: u64) -> Vec<f32> {
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

    pub(crate) fn var(shape: &[usize], seed: u64) -> Var {
        let n = shape.iter().product();
        Var::from_tensor(&Tensor::from_vec(values(n, seed), shape, &Device::Cpu).unwrap()).unwrap()
    }

    pub(crate) fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
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
    pub(crate) fn check(
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_sigmoid_and_silu_gating_match_the_scalar_formulas() {
        // Lengths around the vector width and the stack block, and values from far below to
        // far above the exponential's range.
        for n in [1, 15, 16, 17, 255, 256, 257, 600] {
            let a: Vec<f32> = (0..n)
                .map(|i| (i as f32 * 0.731).sin() * 120.0 - (i % 3) as f32)
                .collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).cos() * 2.0).collect();
            let mut s = vec![0f32; n];
            sigmoids(&a, &mut s);
            let mut gated = vec![0f32; n];
            silu_mul_into(&a, &b, &mut gated);
            for i in 0..n {
                let expected = 1.0 / (1.0 + f64::from(-a[i]).exp());
                assert!(
                    (f64::from(s[i]) - expected).abs() <= 1e-6 * expected.max(1e-30) + 1e-38,
                    "sigmoid({}) = {} not {expected}",
                    a[i],
                    s[i]
                );
                let expected = f64::from(a[i]) * expected * f64::from(b[i]);
                assert!(
                    (f64::from(gated[i]) - expected).abs() <= 1e-5 * expected.abs().max(1e-6),
                    "silu({}) · {} = {} not {expected}",
                    a[i],
                    b[i],
                    gated[i]
                );
            }
        }
        // Infinities saturate; a NaN gate gives a NaN output.
        let mut s = [0f32; 2];
        sigmoids(&[f32::INFINITY, f32::NEG_INFINITY], &mut s);
        assert_eq!(s[0], 1.0);
        assert!(s[1] < 1e-30, "{}", s[1]);
        let mut gated = [0f32; 1];
        silu_mul_into(&[f32::NAN], &[1.0], &mut gated);
        assert!(gated[0].is_nan());
    }
}
