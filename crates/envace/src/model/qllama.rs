//! Llama decoding on GGUF weights kept in Q4_1 / Q8_0, in plain Rust on the CPU: the quantised
//! products run our own kernels (`cpu/quant.rs`, AVX2 when the CPU has it), everything else
//! (RMSNorm, RoPE, attention over the key/value cache, SwiGLU) is a few loops over `f32`
//! slices, so a decode step has none of a tensor library's per-op overhead.
//!
//! The q/k projections keep llama.cpp's row order, so RoPE rotates adjacent pairs (ggml's
//! "normal" mode), which equals Hugging Face's rotate-half on un-permuted rows. The q, k and v
//! projections are stacked into one matrix, and so are the gate and up projections, so a layer
//! runs four quantised products.

use super::TransformerConfig;
use super::cpu::decode_ops::rms_norm_rows;
use super::cpu::silu_mul_into;
use super::quant::{self, Kernel, Q8Rows, QMatrix};

/// One decoder layer's weights.
#[derive(Debug, Clone)]
pub(crate) struct QLayer {
    pub attn_norm: Vec<f32>,
    /// `attn_q`, `attn_k`, `attn_v` stacked: `(q + 2 · kv, hidden)`.
    pub qkv: QMatrix,
    pub attn_output: QMatrix,
    pub ffn_norm: Vec<f32>,
    /// `ffn_gate` and `ffn_up` stacked: `(2 · intermediate, hidden)`.
    pub gate_up: QMatrix,
    pub ffn_down: QMatrix,
}

/// A Llama on quantised weights, with its key/value cache for one sequence.
#[derive(Debug, Clone)]
pub(crate) struct QLlama {
    hidden: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    intermediate: usize,
    eps: f32,
    /// RoPE inverse frequencies, one per rotated pair.
    inv_freq: Vec<f32>,
    embed: QMatrix,
    /// `None`: the head is the embedding (tied).
    head: Option<QMatrix>,
    final_norm: Vec<f32>,
    layers: Vec<QLayer>,
    /// Per layer, `(keys, values)` of every cached position: `(pos, kv_heads, head_dim)`.
    cache: Vec<(Vec<f32>, Vec<f32>)>,
    kernel: Kernel,
}

impl QLlama {
    /// Assembles the model; `Err` names the tensor whose shape does not fit `cfg`.
    pub(crate) fn new(
        cfg: &TransformerConfig,
        embed: QMatrix,
        head: Option<QMatrix>,
        final_norm: Vec<f32>,
        layers: Vec<QLayer>,
    ) -> Result<Self, String> {
        let (h, d) = (cfg.hidden_size, cfg.head_dim);
        let (q, kv, i) = (cfg.n_heads * d, cfg.n_kv_heads * d, cfg.intermediate_size);
        let check = |name: &str, m: &QMatrix, rows: usize, cols: usize| {
            if (m.n_rows(), m.n_cols()) == (rows, cols) {
                Ok(())
            } else {
                Err(format!(
                    "{name} is ({}, {}), expected ({rows}, {cols})",
                    m.n_rows(),
                    m.n_cols()
                ))
            }
        };
        check("token_embd.weight", &embed, cfg.vocab_size, h)?;
        if let Some(head) = &head {
            check("output.weight", head, cfg.vocab_size, h)?;
        }
        for (idx, layer) in layers.iter().enumerate() {
            let p = format!("blk.{idx}");
            check(&format!("{p}.attn_q/k/v.weight"), &layer.qkv, q + 2 * kv, h)?;
            check(&format!("{p}.attn_output.weight"), &layer.attn_output, h, q)?;
            check(&format!("{p}.ffn_gate/up.weight"), &layer.gate_up, 2 * i, h)?;
            check(&format!("{p}.ffn_down.weight"), &layer.ffn_down, h, i)?;
            if layer.attn_norm.len() != h || layer.ffn_norm.len() != h {
                return Err(format!("{p} norms are not {h} wide"));
            }
        }
        if final_norm.len() != h {
            return Err(format!("output_norm.weight is not {h} wide"));
        }
        let inv_freq = (0..d / 2)
            .map(|j| (1.0 / cfg.rope_theta.powf(2.0 * j as f64 / d as f64)) as f32)
            .collect();
        Ok(QLlama {
            hidden: h,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: d,
            intermediate: i,
            eps: cfg.rms_norm_eps as f32,
            inv_freq,
            embed,
            head,
            final_norm,
            cache: vec![(Vec::new(), Vec::new()); layers.len()],
            layers,
            kernel: quant::best_kernel(),
        })
    }

    /// The kernel the quantised products use.
    pub(crate) fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Logits of the last of `tokens`, which continue the first `past` cached positions
    /// (`past = 0` starts afresh; a smaller `past` than cached rewinds).
    pub(crate) fn forward(&mut self, tokens: &[u32], past: usize) -> Result<Vec<f32>, String> {
        let (h, d) = (self.hidden, self.head_dim);
        let kv_width = self.n_kv_heads * d;
        let q_width = self.n_heads * d;
        let cached = self
            .cache
            .first()
            .map_or(0, |(k, _)| k.len() / kv_width.max(1));
        if past > cached {
            return Err(format!(
                "past = {past} but the cache holds {cached} positions"
            ));
        }
        if tokens.is_empty() {
            return Err("no tokens to run".to_owned());
        }
        let l = tokens.len();
        let vocab = self.embed.n_rows();
        let mut x = vec![0f32; l * h];
        for (row, &token) in x.chunks_exact_mut(h).zip(tokens) {
            if token as usize >= vocab {
                return Err(format!(
                    "token id {token} is outside the vocabulary of {vocab}"
                ));
            }
            self.embed.dequantize_row(token as usize, row);
        }
        let mut normed = vec![0f32; l * h];
        let mut qkv = vec![0f32; l * (q_width + 2 * kv_width)];
        let mut attn = vec![0f32; l * q_width];
        let mut proj = vec![0f32; l * h];
        let mut gate_up = vec![0f32; l * 2 * self.intermediate];
        let mut act = vec![0f32; l * self.intermediate];
        for (layer, (k_cache, v_cache)) in self.layers.iter().zip(self.cache.iter_mut()) {
            rms_norm_rows(&x, &layer.attn_norm, self.eps, &mut normed);
            let xq = Q8Rows::quantize(l, h, &normed);
            quant::matmul(&layer.qkv, &xq, &mut qkv, self.kernel);
            k_cache.truncate(past * kv_width);
            v_cache.truncate(past * kv_width);
            for (i, row) in qkv.chunks_exact_mut(q_width + 2 * kv_width).enumerate() {
                let pos = (past + i) as f32;
                let (q, rest) = row.split_at_mut(q_width);
                let (k, v) = rest.split_at_mut(kv_width);
                rope_pairs(q, d, pos, &self.inv_freq);
                rope_pairs(k, d, pos, &self.inv_freq);
                k_cache.extend_from_slice(k);
                v_cache.extend_from_slice(v);
            }
            attention(
                &qkv,
                k_cache,
                v_cache,
                Heads {
                    n_heads: self.n_heads,
                    n_kv_heads: self.n_kv_heads,
                    head_dim: d,
                },
                past,
                &mut attn,
            );
            let aq = Q8Rows::quantize(l, q_width, &attn);
            quant::matmul(&layer.attn_output, &aq, &mut proj, self.kernel);
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);

            rms_norm_rows(&x, &layer.ffn_norm, self.eps, &mut normed);
            let xq = Q8Rows::quantize(l, h, &normed);
            quant::matmul(&layer.gate_up, &xq, &mut gate_up, self.kernel);
            let n_i = self.intermediate;
            for (row, out) in gate_up.chunks_exact(2 * n_i).zip(act.chunks_exact_mut(n_i)) {
                let (gate, up) = row.split_at(n_i);
                silu_mul_into(gate, up, out);
            }
            let aq = Q8Rows::quantize(l, n_i, &act);
            quant::matmul(&layer.ffn_down, &aq, &mut proj, self.kernel);
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);
        }
        let last = &x[(l - 1) * h..];
        let mut normed_last = vec![0f32; h];
        rms_norm_rows(last, &self.final_norm, self.eps, &mut normed_last);
        let xq = Q8Rows::quantize(1, h, &normed_last);
        let head = self.head.as_ref().unwrap_or(&self.embed);
        let mut logits = vec![0f32; head.n_rows()];
        quant::matmul(head, &xq, &mut logits, self.kernel);
        Ok(logits)
    }
}

/// RoPE on adjacent pairs `(2j, 2j + 1)` of each `head_dim`-wide head of `x`, at `pos`.
fn rope_pairs(x: &mut [f32], head_dim: usize, pos: f32, inv_freq: &[f32]) {
    for head in x.chunks_exact_mut(head_dim) {
        for (pair, &freq) in head.chunks_exact_mut(2).zip(inv_freq) {
            let (sin, cos) = (pos * freq).sin_cos();
            let (a, b) = (pair[0], pair[1]);
            pair[0] = a * cos - b * sin;
            pair[1] = a * sin + b * cos;
        }
    }
}

/// The dot product of two equal-length rows, in eight independent sums so the compiler
/// vectorises it (a single running sum must stay in order and runs one lane at a time).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, a_rest) = a.as_chunks::<8>();
    let (b8, b_rest) = b[..a.len()].as_chunks::<8>();
    for (x, y) in a8.iter().zip(b8) {
        for lane in 0..8 {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    let tail: f32 = a_rest.iter().zip(b_rest).map(|(x, y)| x * y).sum();
    lanes.iter().sum::<f32>() + tail
}

/// The attention heads' layout: query heads, key-value heads and their width. A packed row of
/// the `qkv` buffer holds the queries, then the keys, then the values.
#[derive(Debug, Clone, Copy)]
struct Heads {
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

impl Heads {
    fn q_width(self) -> usize {
        self.n_heads * self.head_dim
    }

    fn kv_width(self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    fn row_width(self) -> usize {
        self.q_width() + 2 * self.kv_width()
    }

    /// The key-value head a query head reads.
    fn kv_head(self, head: usize) -> usize {
        head / (self.n_heads / self.n_kv_heads.max(1)).max(1)
    }

    fn scale(self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }
}

/// Key-value positions times query heads below which one query's heads run on one thread.
const PARALLEL_HEADS_WORK: usize = 16_384;

/// Causal attention of the `l` new queries (rows of `qkv`, whose first `n_heads · head_dim`
/// values are the query) over the cached keys and values; query `i` sits at `past + i`.
/// Several queries (a prompt) go to [`prompt_attention`]; one query over a long cache is shared
/// out over rayon's threads by heads.
fn attention(
    qkv: &[f32],
    keys: &[f32],
    values: &[f32],
    heads: Heads,
    past: usize,
    out: &mut [f32],
) {
    use rayon::prelude::*;
    let Heads {
        n_heads, head_dim, ..
    } = heads;
    let (q_width, kv_width, row_width) = (heads.q_width(), heads.kv_width(), heads.row_width());
    let scale = heads.scale();
    // One head of one query: `q` over the first `n_keys` positions, into `o`.
    let head_out = |q: &[f32], head: usize, n_keys: usize, o: &mut [f32], scores: &mut Vec<f32>| {
        let kv_head = heads.kv_head(head);
        scores.clear();
        let mut max = f32::NEG_INFINITY;
        for t in 0..n_keys {
            let k = &keys[t * kv_width + kv_head * head_dim..][..head_dim];
            let s = dot(q, k) * scale;
            max = max.max(s);
            scores.push(s);
        }
        let mut total = 0f32;
        for s in scores.iter_mut() {
            *s = (*s - max).exp();
            total += *s;
        }
        o.fill(0.0);
        for (t, &p) in scores.iter().enumerate() {
            let v = &values[t * kv_width + kv_head * head_dim..][..head_dim];
            o.iter_mut().zip(v).for_each(|(o, &v)| *o += p * v);
        }
        let inv = 1.0 / total;
        o.iter_mut().for_each(|o| *o *= inv);
    };
    if qkv.len() > row_width {
        prompt_attention(qkv, keys, values, heads, past, out);
        return;
    }
    let rows = qkv
        .chunks_exact(row_width)
        .zip(out.chunks_exact_mut(q_width));
    for (i, (row, out_row)) in rows.enumerate() {
        let n_keys = past + i + 1;
        if n_keys * n_heads >= PARALLEL_HEADS_WORK {
            out_row
                .par_chunks_exact_mut(head_dim)
                .enumerate()
                .for_each_init(Vec::new, |scores, (head, o)| {
                    let q = &row[head * head_dim..(head + 1) * head_dim];
                    head_out(q, head, n_keys, o, scores);
                });
        } else {
            let mut scores = Vec::new();
            for (head, o) in out_row.chunks_exact_mut(head_dim).enumerate() {
                let q = &row[head * head_dim..(head + 1) * head_dim];
                head_out(q, head, n_keys, o, &mut scores);
            }
        }
    }
}

/// Queries per block of [`prompt_attention`].
const QUERY_BLOCK: usize = 64;

/// Causal attention of a prompt's queries, as matrix products: for each head and block of up to
/// [`QUERY_BLOCK`] queries, the scores against every key the block can see (one product), the
/// causal softmax of each row, and the weighted values (another product). Each key is read once
/// per block instead of once per query. Blocks run in parallel on rayon's threads.
fn prompt_attention(
    qkv: &[f32],
    keys: &[f32],
    values: &[f32],
    heads: Heads,
    past: usize,
    out: &mut [f32],
) {
    use super::cpu::strided::{View, product};
    use rayon::prelude::*;
    let Heads {
        n_heads, head_dim, ..
    } = heads;
    let (q_width, kv_width, row_width) = (heads.q_width(), heads.kv_width(), heads.row_width());
    let l = qkv.len() / row_width;
    let scale = heads.scale();
    let blocks: Vec<(usize, usize)> = (0..n_heads)
        .flat_map(|head| (0..l).step_by(QUERY_BLOCK).map(move |start| (head, start)))
        .collect();
    let outputs: Vec<Vec<f32>> = blocks
        .par_iter()
        .map_init(Vec::new, |scores: &mut Vec<f32>, &(head, start)| {
            let rows = QUERY_BLOCK.min(l - start);
            let n_keys = past + start + rows;
            let kv_head = heads.kv_head(head);
            scores.clear();
            scores.resize(rows * n_keys, 0.0);
            let queries = View {
                data: qkv,
                offset: start * row_width + head * head_dim,
                rows,
                cols: head_dim,
                row_stride: row_width,
                col_stride: 1,
            };
            let keys_t = View {
                data: keys,
                offset: kv_head * head_dim,
                rows: head_dim,
                cols: n_keys,
                row_stride: 1,
                col_stride: kv_width,
            };
            product(scores, queries, keys_t, scale);
            for (r, row) in scores.chunks_exact_mut(n_keys).enumerate() {
                let (seen, hidden) = row.split_at_mut(past + start + r + 1);
                let max = seen.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
                let mut total = 0f32;
                for s in seen.iter_mut() {
                    *s = (*s - max).exp();
                    total += *s;
                }
                let inv = 1.0 / total;
                seen.iter_mut().for_each(|s| *s *= inv);
                hidden.fill(0.0);
            }
            let weights = View {
                data: scores,
                offset: 0,
                rows,
                cols: n_keys,
                row_stride: n_keys,
                col_stride: 1,
            };
            let vals = View {
                data: values,
                offset: kv_head * head_dim,
                rows: n_keys,
                cols: head_dim,
                row_stride: kv_width,
                col_stride: 1,
            };
            let mut o = vec![0f32; rows * head_dim];
            product(&mut o, weights, vals, 1.0);
            o
        })
        .collect();
    for (&(head, start), o) in blocks.iter().zip(&outputs) {
        for (r, o_row) in o.chunks_exact(head_dim).enumerate() {
            out[(start + r) * q_width + head * head_dim..][..head_dim].copy_from_slice(o_row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prompt's attention as blocked products equals its queries attended one at a time, with
    /// and without cached positions before it, across block edges and grouped heads.
    #[test]
    fn prompt_attention_matches_one_query_at_a_time() {
        let (n_heads, n_kv_heads, head_dim) = (6, 2, 20);
        let heads = Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        };
        let (q_width, kv_width) = (n_heads * head_dim, n_kv_heads * head_dim);
        let row_width = q_width + 2 * kv_width;
        for (past, l) in [(0, 3), (0, QUERY_BLOCK + 5), (17, 2 * QUERY_BLOCK + 1)] {
            let total = past + l;
            let mut state = 12345u64;
            let mut next = || {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            };
            let keys: Vec<f32> = (0..total * kv_width).map(|_| next() * 4.0).collect();
            let values: Vec<f32> = (0..total * kv_width).map(|_| next()).collect();
            let qkv: Vec<f32> = (0..l * row_width).map(|_| next() * 4.0).collect();
            let mut blocked = vec![0f32; l * q_width];
            attention(&qkv, &keys, &values, heads, past, &mut blocked);
            for i in 0..l {
                let mut one = vec![0f32; q_width];
                attention(
                    &qkv[i * row_width..(i + 1) * row_width],
                    &keys[..(past + i + 1) * kv_width],
                    &values[..(past + i + 1) * kv_width],
                    heads,
                    past + i,
                    &mut one,
                );
                for (a, b) in blocked[i * q_width..(i + 1) * q_width].iter().zip(&one) {
                    assert!((a - b).abs() < 1e-5, "past {past}, query {i}: {a} vs {b}");
                }
            }
        }
    }
}
