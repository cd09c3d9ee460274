//! The NEON kernels of aarch64 CPUs (Apple silicon, Graviton, Ampere): the same dot products,
//! decoding-attention loops, softmax exponentials and quantised block products as the AVX2
//! kernels, four lanes wide; callers have checked that the CPU has NEON.
//!
//! Every aarch64 Linux CPU has NEON (Advanced SIMD is part of ARMv8-A), so the kernel set is
//! detected once and chosen through the same `ENVACE_SIMD` switch as on x86-64 (`neon` or
//! `scalar`). The scalar reference in the parent module is what every kernel here is tested
//! against, under `qemu-aarch64` by `cargo xtask check aarch64` on an x86-64 machine.

use std::arch::aarch64::*;

use super::{BLOCK, EXP_COEFFS, EXP_HIGHEST, EXP_LOWEST, LN2_HI, LN2_LO};

/// The four horizontal sums of `a`, `b`, `c` and `d`, as the lanes of one vector (three
/// pairwise adds instead of four separate reductions).
#[inline]
#[target_feature(enable = "neon")]
fn reduce4(a: float32x4_t, b: float32x4_t, c: float32x4_t, d: float32x4_t) -> float32x4_t {
    vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d))
}

/// [`super::dot_f32`] for callers that checked the CPU has NEON.
pub(super) fn dot_f32_checked(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: every caller checked `best_kernel() == Kernel::Neon`; the kernel reads only the
    // first `min(a.len(), b.len())` values of each slice.
    unsafe { dot_f32(a, b) }
}

/// `Σ a[i] · b[i]` over the shorter slice, sixteen at a time in four independent sums.
#[target_feature(enable = "neon")]
fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `i + 4 k + 4 <= n` and both slices hold at least `n` values.
            let (va, vb) = unsafe {
                (
                    vld1q_f32(a.as_ptr().add(i + 4 * k)),
                    vld1q_f32(b.as_ptr().add(i + 4 * k)),
                )
            };
            *acc = vfmaq_f32(*acc, va, vb);
        }
        i += 16;
    }
    while i + 4 <= n {
        // SAFETY: `i + 4 <= n`.
        let (va, vb) = unsafe { (vld1q_f32(a.as_ptr().add(i)), vld1q_f32(b.as_ptr().add(i))) };
        acc[0] = vfmaq_f32(acc[0], va, vb);
        i += 4;
    }
    let mut total = vaddvq_f32(vaddq_f32(
        vaddq_f32(acc[0], acc[1]),
        vaddq_f32(acc[2], acc[3]),
    ));
    for j in i..n {
        total += a[j] * b[j];
    }
    total
}

/// [`super::dot4_f32`] for callers that checked the CPU has NEON.
pub(super) fn dot4_f32_checked(w: &[f32], xs: [&[f32]; 4]) -> [f32; 4] {
    assert!(
        xs.iter().all(|x| x.len() >= w.len()),
        "dot4_f32: an x is shorter than w"
    );
    // SAFETY: every caller checked `best_kernel() == Kernel::Neon`; lengths checked above.
    unsafe { dot4_f32(w, xs) }
}

/// Four dot products of `w` with `xs`, eight values a step: `w` is loaded once for all four.
#[target_feature(enable = "neon")]
fn dot4_f32(w: &[f32], xs: [&[f32]; 4]) -> [f32; 4] {
    let n = w.len();
    let mut acc = [[vdupq_n_f32(0.0); 2]; 4];
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n` and every slice holds at least `n` values (checked by the caller).
        unsafe {
            let w0 = vld1q_f32(w.as_ptr().add(i));
            let w1 = vld1q_f32(w.as_ptr().add(i + 4));
            for (a, x) in acc.iter_mut().zip(&xs) {
                a[0] = vfmaq_f32(a[0], w0, vld1q_f32(x.as_ptr().add(i)));
                a[1] = vfmaq_f32(a[1], w1, vld1q_f32(x.as_ptr().add(i + 4)));
            }
        }
        i += 8;
    }
    let mut out = [0f32; 4];
    for (o, (a, x)) in out.iter_mut().zip(acc.iter().zip(&xs)) {
        *o = vaddvq_f32(vaddq_f32(a[0], a[1]));
        for j in i..n {
            *o += w[j] * x[j];
        }
    }
    out
}

/// [`super::dot4x4_f32`] for callers that checked the CPU has NEON.
pub(super) fn dot4x4_f32_checked(ws: [&[f32]; 4], xs: [&[f32]; 4]) -> [[f32; 4]; 4] {
    let n = ws[0].len();
    assert!(
        ws.iter().chain(&xs).all(|s| s.len() >= n),
        "dot4x4_f32: a row is shorter than the first weight row"
    );
    // SAFETY: the caller checked NEON; every slice holds at least `n` values.
    unsafe { dot4x4_f32(ws, xs, n) }
}

/// The 4 × 4 tile of dot products: sixteen accumulators and eight loads fit NEON's 32
/// registers, so each step does sixteen multiply-adds for eight loads.
#[target_feature(enable = "neon")]
fn dot4x4_f32(ws: [&[f32]; 4], xs: [&[f32]; 4], n: usize) -> [[f32; 4]; 4] {
    let mut acc = [[vdupq_n_f32(0.0); 4]; 4];
    let mut i = 0;
    while i + 4 <= n {
        // SAFETY: `i + 4 <= n` and every slice holds at least `n` values.
        unsafe {
            let x = xs.map(|x| vld1q_f32(x.as_ptr().add(i)));
            for (acc, w) in acc.iter_mut().zip(&ws) {
                let w = vld1q_f32(w.as_ptr().add(i));
                for (a, &x) in acc.iter_mut().zip(&x) {
                    *a = vfmaq_f32(*a, w, x);
                }
            }
        }
        i += 4;
    }
    let mut out = [[0f32; 4]; 4];
    for (a, (out, w)) in out.iter_mut().zip(&ws).enumerate() {
        let [p, q, r, s] = acc[a];
        let mut sums = [0f32; 4];
        // SAFETY: `sums` holds four values.
        unsafe { vst1q_f32(sums.as_mut_ptr(), reduce4(p, q, r, s)) };
        for (b, (o, x)) in out.iter_mut().zip(&xs).enumerate() {
            *o = sums[b] + (i..n).map(|j| w[j] * x[j]).sum::<f32>();
        }
    }
    out
}

/// [`super::dots_strided_f32`]. Safety: NEON is present and `rows` holds `out.len()` rows of
/// `q.len()` values every `stride` values.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dots_strided(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    let d = q.len();
    let full = d / 4 * 4;
    let tail = |j: usize| -> f32 { (full..d).map(|i| q[i] * rows[j * stride + i]).sum() };
    let mut j = 0;
    // Eight keys at a time: each query vector is loaded once for all eight.
    while j + 8 <= out.len() {
        let mut acc = [vdupq_n_f32(0.0); 8];
        let mut i = 0;
        while i < full {
            // SAFETY: `i + 4 <= d`; rows `j..j + 8` hold `d` values each (caller).
            unsafe {
                let qv = vld1q_f32(q.as_ptr().add(i));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let row = rows.as_ptr().add((j + r) * stride + i);
                    *acc = vfmaq_f32(*acc, qv, vld1q_f32(row));
                }
            }
            i += 4;
        }
        let halves = [
            reduce4(acc[0], acc[1], acc[2], acc[3]),
            reduce4(acc[4], acc[5], acc[6], acc[7]),
        ];
        for (h, half) in halves.into_iter().enumerate() {
            // SAFETY: `out[j + 4 h..j + 4 h + 4]` exists.
            unsafe { vst1q_f32(out.as_mut_ptr().add(j + 4 * h), half) };
        }
        if full < d {
            for (r, o) in out[j..j + 8].iter_mut().enumerate() {
                *o += tail(j + r);
            }
        }
        j += 8;
    }
    for (r, o) in out.iter_mut().enumerate().skip(j) {
        *o = dot_f32(q, &rows[r * stride..r * stride + d]);
    }
}

/// [`super::axpy_strided_f32`]. Safety: NEON is present and `rows` holds `weights.len()` rows
/// of `out.len()` values every `stride` values.
#[target_feature(enable = "neon")]
pub(super) unsafe fn axpy_strided(out: &mut [f32], weights: &[f32], rows: &[f32], stride: usize) {
    let d = out.len();
    let mut i = 0;
    // Sixteen vectors (64 values) of the output at a time, held in registers over every row.
    while i < d {
        let width = (d - i).min(64);
        let n_full = width / 4;
        let mut acc = [vdupq_n_f32(0.0); 16];
        for (j, &w) in weights.iter().enumerate() {
            if w == 0.0 {
                continue;
            }
            let wv = vdupq_n_f32(w);
            for (v, acc) in acc.iter_mut().enumerate().take(n_full) {
                // SAFETY: `i + 4 v + 4 <= d` and row `j` holds `d` values (caller).
                unsafe {
                    let row = rows.as_ptr().add(j * stride + i + 4 * v);
                    *acc = vfmaq_f32(*acc, wv, vld1q_f32(row));
                }
            }
            for c in i + 4 * n_full..i + width {
                out[c] += w * rows[j * stride + c];
            }
        }
        for (v, acc) in acc.iter().enumerate().take(n_full) {
            // SAFETY: `i + 4 v + 4 <= d`.
            unsafe {
                let o = out.as_mut_ptr().add(i + 4 * v);
                vst1q_f32(o, vaddq_f32(vld1q_f32(o), *acc));
            }
        }
        i += width;
    }
}

/// [`super::exp_shifted_f32`]. Safety: NEON is present and the lengths match.
#[target_feature(enable = "neon")]
pub(super) unsafe fn exp_shifted(values: &[f32], shift: f32, scale: f32, out: &mut [f32]) -> f64 {
    // exp(x) = 2^k · exp(r), k = round(x / ln 2), r = x − k ln 2 (in two parts), |r| ≤ ln 2 / 2,
    // exp(r) by its Taylor series to r^7; 2^k is built in the exponent field, which the clamp
    // to [-87.3, 88] keeps normal (k in [-126, 127]).
    let (shift_v, scale_v) = (vdupq_n_f32(shift), vdupq_n_f32(scale));
    let (lowest, highest) = (vdupq_n_f32(EXP_LOWEST), vdupq_n_f32(EXP_HIGHEST));
    let mut sums = [vdupq_n_f64(0.0); 2];
    let n = values.len() / 4 * 4;
    let mut i = 0;
    while i < n {
        // SAFETY: `i + 4 <= values.len() == out.len()`.
        let v = unsafe { vld1q_f32(values.as_ptr().add(i)) };
        let x = vmulq_f32(vsubq_f32(v, shift_v), scale_v);
        // NaN and arguments past underflow give 0 (an ordered compare is false for NaN).
        let keep = vcgeq_f32(x, lowest);
        let x = vminq_f32(vmaxq_f32(x, lowest), highest);
        let k = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(std::f32::consts::LOG2_E)));
        let r = vfmsq_f32(x, k, vdupq_n_f32(LN2_HI));
        let r = vfmsq_f32(r, k, vdupq_n_f32(LN2_LO));
        let mut p = vdupq_n_f32(EXP_COEFFS[0]);
        for &c in &EXP_COEFFS[1..] {
            p = vfmaq_f32(vdupq_n_f32(c), p, r);
        }
        let two_k = vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(
            vcvtnq_s32_f32(k),
            vdupq_n_s32(127),
        )));
        let e = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(vmulq_f32(p, two_k)), keep));
        // SAFETY: as above.
        unsafe { vst1q_f32(out.as_mut_ptr().add(i), e) };
        sums[0] = vaddq_f64(sums[0], vcvt_f64_f32(vget_low_f32(e)));
        sums[1] = vaddq_f64(sums[1], vcvt_high_f64_f32(e));
        i += 4;
    }
    vaddvq_f64(vaddq_f64(sums[0], sums[1]))
        + super::exp_shifted_scalar(&values[n..], shift, scale, &mut out[n..])
}

/// `acc` plus the sixteen products of `w` and `x`, widened to i16 and added pairwise into i32
/// lanes: every product of two i8 fits i16, and the pairwise widening add is exact.
#[inline]
#[target_feature(enable = "neon")]
fn add_products(acc: int32x4_t, w: int8x16_t, x: int8x16_t) -> int32x4_t {
    let acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(x)));
    vpadalq_s16(acc, vmull_high_s8(w, x))
}

/// Q4_1 · Q8_1 (see [`super::dot_q4_1_scalar`]).
pub(super) fn dot_q4_1(
    w_codes: &[u8],
    w_scales: &[f32],
    w_mins: &[f32],
    x_codes: &[i8],
    x_scales: &[f32],
    x_sums: &[f32],
) -> f32 {
    let n = w_scales.len();
    super::check_q4_1_blocks(n, w_codes, w_mins, x_codes, x_scales, x_sums);
    // SAFETY: `super::best_kernel` selects this kernel only when the CPU reports NEON, and the
    // lengths were checked above.
    unsafe { dot_q4_1_impl(n, w_codes, w_scales, w_mins, x_codes, x_scales, x_sums) }
}

#[target_feature(enable = "neon")]
fn dot_q4_1_impl(
    n: usize,
    w_codes: &[u8],
    w_scales: &[f32],
    w_mins: &[f32],
    x_codes: &[i8],
    x_scales: &[f32],
    x_sums: &[f32],
) -> f32 {
    let (w_scales, w_mins) = (&w_scales[..n], &w_mins[..n]);
    let (x_scales, x_sums) = (&x_scales[..n], &x_sums[..n]);
    let mut acc = vdupq_n_f32(0.0);
    for b in 0..n {
        // SAFETY: block `b` lies inside both slices (lengths checked by the caller).
        let (packed, x_lo, x_hi) = unsafe {
            (
                vld1q_u8(w_codes.as_ptr().add(b * BLOCK / 2)),
                vld1q_s8(x_codes.as_ptr().add(b * BLOCK)),
                vld1q_s8(x_codes.as_ptr().add(b * BLOCK + 16)),
            )
        };
        // Low nibbles are weights 0..16, high nibbles weights 16..32 (codes 0..15 fit i8).
        let lo = vreinterpretq_s8_u8(vandq_u8(packed, vdupq_n_u8(0x0F)));
        let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(packed));
        let sums = add_products(add_products(vdupq_n_s32(0), lo, x_lo), hi, x_hi);
        acc = vfmaq_f32(
            acc,
            vcvtq_f32_s32(sums),
            vdupq_n_f32(w_scales[b] * x_scales[b]),
        );
    }
    vaddvq_f32(acc) + dot_f32(w_mins, x_sums)
}

/// Q8_0 · Q8_1 (see [`super::dot_q8_0_scalar`]).
pub(super) fn dot_q8_0(w_codes: &[u8], w_scales: &[f32], x_codes: &[i8], x_scales: &[f32]) -> f32 {
    let n = w_scales.len();
    super::check_q8_0_blocks(n, w_codes, x_codes, x_scales);
    // SAFETY: as for `dot_q4_1`.
    unsafe { dot_q8_0_impl(n, w_codes, w_scales, x_codes, x_scales) }
}

#[target_feature(enable = "neon")]
fn dot_q8_0_impl(
    n: usize,
    w_codes: &[u8],
    w_scales: &[f32],
    x_codes: &[i8],
    x_scales: &[f32],
) -> f32 {
    let (w_scales, x_scales) = (&w_scales[..n], &x_scales[..n]);
    let mut acc = vdupq_n_f32(0.0);
    for b in 0..n {
        // SAFETY: block `b` lies inside both slices (lengths checked by the caller).
        let (w0, w1, x0, x1) = unsafe {
            let w = w_codes.as_ptr().add(b * BLOCK).cast::<i8>();
            let x = x_codes.as_ptr().add(b * BLOCK);
            (
                vld1q_s8(w),
                vld1q_s8(w.add(16)),
                vld1q_s8(x),
                vld1q_s8(x.add(16)),
            )
        };
        let sums = add_products(add_products(vdupq_n_s32(0), w0, x0), w1, x1);
        acc = vfmaq_f32(
            acc,
            vcvtq_f32_s32(sums),
            vdupq_n_f32(w_scales[b] * x_scales[b]),
        );
    }
    vaddvq_f32(acc)
}
