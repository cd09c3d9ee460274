//! Each kernel's computation as plain loops on the CPU, in the kernels' own layouts, for the
//! parity tests; plus the host-side preparation the kernels expect (GGUF blocks as words, the
//! rotary table) and the sampling kernel's random numbers.

use crate::{Heads, Rows, SampleParams};

/// `out[i, :] = table[tokens[i], :]`.
pub fn embed(tokens: &[u32], table: &[f32], hidden: usize) -> Vec<f32> {
    tokens
        .iter()
        .flat_map(|&t| table[t as usize * hidden..][..hidden].iter().copied())
        .collect()
}

/// RMSNorm of the rows `src` describes, contiguous out.
pub fn rms_norm(src_values: &[f32], src: Rows, weight: &[f32], eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(src.rows * src.dim);
    for r in 0..src.rows {
        let row = &src_values[src.offset + r * src.stride..][..src.dim];
        let mean = row
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            / src.dim as f64;
        let scale = 1.0 / (mean + f64::from(eps)).sqrt();
        out.extend(
            row.iter()
                .zip(weight)
                .map(|(&v, &w)| (f64::from(v) * scale) as f32 * w),
        );
    }
    out
}

/// The (cos, sin) of `position * inv_freq[i]` for positions `0..n_positions`, as pairs laid out
/// position-major: what [`crate::Batch::rope`] reads. The angles are f32 products, as the
/// engine's CPU path computes them, so that both rotate by the same amounts.
pub fn rope_table(inv_freq: &[f64], n_positions: usize) -> Vec<f32> {
    let mut table = Vec::with_capacity(n_positions * inv_freq.len() * 2);
    for pos in 0..n_positions {
        for &freq in inv_freq {
            let angle = pos as f32 * freq as f32;
            table.push(angle.cos());
            table.push(angle.sin());
        }
    }
    table
}

/// Rotary embedding in place (rotate-half layout), after a per-head RMSNorm when `norm` is
/// given; `table` is [`rope_table`]'s.
pub fn rope(
    x_values: &mut [f32],
    x: Heads,
    positions: &[u32],
    table: &[f32],
    norm: Option<(&[f32], f32)>,
) {
    let half = x.head_dim / 2;
    for t in 0..x.n_tokens {
        for h in 0..x.n_heads {
            let head = &mut x_values[x.offset + t * x.stride + h * x.head_dim..][..x.head_dim];
            if let Some((weight, eps)) = norm {
                let mean =
                    head.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / x.head_dim as f64;
                let scale = 1.0 / (mean + f64::from(eps)).sqrt();
                for (v, &w) in head.iter_mut().zip(weight) {
                    *v = (f64::from(*v) * scale) as f32 * w;
                }
            }
            let pos = positions[t] as usize;
            for i in 0..half {
                let (cos, sin) = (table[2 * (pos * half + i)], table[2 * (pos * half + i) + 1]);
                let (a, b) = (head[i], head[i + half]);
                head[i] = a * cos - b * sin;
                head[i + half] = b * cos + a * sin;
            }
        }
    }
}

/// `out[m, n] = x[m, :] · w[n, :]` (w is `n x k`, row-major) into the rows `out` describes.
pub fn matmul(x_values: &[f32], x: Rows, w: &[f32], n: usize, out_values: &mut [f32], out: Rows) {
    let k = x.dim;
    for m in 0..x.rows {
        let row = &x_values[x.offset + m * x.stride..][..k];
        for j in 0..n {
            let dot: f64 = row
                .iter()
                .zip(&w[j * k..][..k])
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            out_values[out.offset + m * out.stride + j] = dot as f32;
        }
    }
}

/// GGUF Q4_1 blocks (20 bytes each: f16 d, f16 m, 16 bytes of nibbles) as the kernel's words.
pub fn q4_1_words(blocks: &[u8]) -> Vec<u32> {
    blocks
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// GGUF Q8_0 blocks (34 bytes each: f16 d, 32 signed bytes) as the kernel's words: each block
/// padded to 36 bytes after its scale, so that the quantised bytes start on a word.
pub fn q8_0_words(blocks: &[u8]) -> Vec<u32> {
    let mut words = Vec::with_capacity(blocks.len() / 34 * 9);
    for block in blocks.chunks_exact(34) {
        words.push(u32::from(u16::from_le_bytes([block[0], block[1]])));
        words.extend(
            block[2..]
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
    }
    words
}

/// The values of GGUF Q4_1 blocks.
pub fn dequant_q4_1(blocks: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(blocks.len() / 20 * 32);
    for block in blocks.chunks_exact(20) {
        let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
        let m = half::f16::from_le_bytes([block[2], block[3]]).to_f32();
        let qs = &block[4..];
        out.extend(qs.iter().map(|&q| d * f32::from(q & 0xf) + m));
        out.extend(qs.iter().map(|&q| d * f32::from(q >> 4) + m));
    }
    out
}

/// The values of GGUF Q8_0 blocks.
pub fn dequant_q8_0(blocks: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(blocks.len() / 34 * 32);
    for block in blocks.chunks_exact(34) {
        let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
        out.extend(block[2..].iter().map(|&q| d * f32::from(q as i8)));
    }
    out
}

/// The kernel's cache index of (batch row, kv head, slot).
fn cache_at(row: usize, head: usize, slot: usize, n_kv: usize, capacity: usize, d: usize) -> usize {
    ((row * n_kv + head) * capacity + slot) * d
}

/// Writes the keys and values of new tokens into the caches at `slots`.
#[allow(
    clippy::too_many_arguments,
    reason = "the kernel's arguments, as slices"
)]
pub fn kv_write(
    src: &[f32],
    keys: Heads,
    v_offset: usize,
    slots: &[u32],
    tokens_per_row: usize,
    capacity: usize,
    k_cache: &mut [f32],
    v_cache: &mut [f32],
) {
    let d = keys.head_dim;
    for (t, &slot) in slots.iter().enumerate().take(keys.n_tokens) {
        let row = t / tokens_per_row;
        for h in 0..keys.n_heads {
            let dst = cache_at(row, h, slot as usize, keys.n_heads, capacity, d);
            let at = t * keys.stride + h * d;
            k_cache[dst..dst + d].copy_from_slice(&src[at + keys.offset..][..d]);
            v_cache[dst..dst + d].copy_from_slice(&src[at + v_offset..][..d]);
        }
    }
}

/// Attention of each query head over the cache slots up to its own with `key_mask` 1, and always
/// its own (a padding query still has a finite softmax, as on the engine's CPU path).
#[allow(
    clippy::too_many_arguments,
    reason = "the kernel's arguments, as slices"
)]
pub fn attention(
    q_values: &[f32],
    q: Heads,
    n_kv: usize,
    tokens_per_row: usize,
    capacity: usize,
    k_cache: &[f32],
    v_cache: &[f32],
    key_mask: &[u32],
    slots: &[u32],
) -> Vec<f32> {
    let d = q.head_dim;
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0f32; q.n_tokens * q.n_heads * d];
    for t in 0..q.n_tokens {
        let row = t / tokens_per_row;
        for h in 0..q.n_heads {
            let kv = h / (q.n_heads / n_kv);
            let query = &q_values[t * q.stride + q.offset + h * d..][..d];
            let visible: Vec<usize> = (0..=slots[t] as usize)
                .filter(|&s| s == slots[t] as usize || key_mask[row * capacity + s] != 0)
                .collect();
            let scores: Vec<f64> = visible
                .iter()
                .map(|&s| {
                    let key = &k_cache[cache_at(row, kv, s, n_kv, capacity, d)..][..d];
                    query
                        .iter()
                        .zip(key)
                        .map(|(&a, &b)| f64::from(a) * f64::from(b))
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|&s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let dst = &mut out[(t * q.n_heads + h) * d..][..d];
            for (&s, &w) in visible.iter().zip(&weights) {
                let value = &v_cache[cache_at(row, kv, s, n_kv, capacity, d)..][..d];
                for (o, &v) in dst.iter_mut().zip(value) {
                    *o += (w / total * f64::from(v)) as f32;
                }
            }
        }
    }
    out
}

/// The SwiGLU gate: `silu(gate) * up` per row of `gate_up` (gate then up).
pub fn silu_mul(gate_up: &[f32], rows: usize, inter: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * inter);
    for r in 0..rows {
        let row = &gate_up[r * 2 * inter..][..2 * inter];
        out.extend((0..inter).map(|i| {
            let g = row[i];
            g / (1.0 + (-g).exp()) * row[inter + i]
        }));
    }
    out
}

/// One round of the PCG output hash, as `shaders/lib/rng.wgsl` computes it.
fn pcg_hash(input: u32) -> u32 {
    let state = input.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
    let word = ((state >> ((state >> 28) + 4)) ^ state).wrapping_mul(277_803_737);
    (word >> 22) ^ word
}

/// The sampling kernel's uniform draw in [0, 1) for (seed, row, step).
pub fn uniform(seed: u64, row: u32, step: u32) -> f32 {
    let mut h = pcg_hash(seed as u32 ^ pcg_hash((seed >> 32) as u32));
    h = pcg_hash(h ^ pcg_hash(row.wrapping_add(0x9e37_79b9)));
    h = pcg_hash(h ^ pcg_hash(step.wrapping_add(0x7f4a_7c15)));
    (h >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// A token a draw may pick: its id and the kept mass before and after it.
pub type KeptToken = (u32, f64, f64);

/// What the sampling kernel decides for one row, computed with sorts and f64 sums.
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    /// The token.
    pub token: u32,
    /// Its log-probability at temperature 1 (NaN for a row that is not a distribution).
    pub logprob: f32,
    /// For a draw: the draw's target in the kept mass, and each kept token with the kept mass
    /// before and after it in vocabulary order.
    pub draw: Option<(f64, Vec<KeptToken>)>,
}

/// The sampling kernel's decision for row `row` of a call (`logits` is that row).
pub fn sample(logits: &[f32], params: SampleParams, row: u32) -> Pick {
    let value = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v };
    let (mut argmax, mut max) = (0usize, f32::NEG_INFINITY);
    for (i, &v) in logits.iter().enumerate() {
        if value(v) > max {
            (argmax, max) = (i, value(v));
        }
    }
    if max.is_infinite() {
        return Pick {
            token: argmax as u32,
            logprob: f32::NAN,
            draw: None,
        };
    }
    let total: f64 = logits
        .iter()
        .map(|&v| f64::from(value(v) - max).exp())
        .sum();
    let log_sum = f64::from(max) + total.ln();
    let logprob = |t: usize| (f64::from(value(logits[t])) - log_sum) as f32;
    if params.temperature <= 0.0 || params.top_k == 1 {
        return Pick {
            token: argmax as u32,
            logprob: logprob(argmax),
            draw: None,
        };
    }
    let weights: Vec<f32> = logits
        .iter()
        .map(|&v| ((value(v) - max) / params.temperature).exp())
        .collect();
    let mut sorted = weights.clone();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let mut tau = 0f32;
    if params.top_k > 0 && (params.top_k as usize) < weights.len() {
        tau = sorted[params.top_k as usize - 1];
    }
    if params.top_p < 1.0 {
        let kept: Vec<f32> = sorted.iter().copied().filter(|&w| w >= tau).collect();
        let target = f64::from(params.top_p) * kept.iter().map(|&w| f64::from(w)).sum::<f64>();
        let mut mass = 0.0;
        for &w in &kept {
            mass += f64::from(w);
            tau = w;
            if mass >= target {
                break;
            }
        }
    }
    let mut cumulative = 0.0;
    let mut kept = Vec::new();
    for (i, &w) in weights.iter().enumerate() {
        if w >= tau && w > 0.0 {
            kept.push((i as u32, cumulative, cumulative + f64::from(w)));
            cumulative += f64::from(w);
        }
    }
    let target = f64::from(uniform(params.seed, params.row_base + row, params.step)) * cumulative;
    let token = kept
        .iter()
        .find(|&&(_, _, after)| target <= after)
        .or(kept.last())
        .map_or(argmax as u32, |&(t, _, _)| t);
    Pick {
        token,
        logprob: logprob(token as usize),
        draw: Some((target, kept)),
    }
}
