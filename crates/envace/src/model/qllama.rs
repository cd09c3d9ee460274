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
                (self.n_heads, self.n_kv_heads, d),
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
                for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                    *o = g / (1.0 + (-g).exp()) * u;
                }
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

/// Causal attention of the `l` new queries (rows of `qkv`, whose first `n_heads · head_dim`
/// values are the query) over the cached keys and values; query `i` sits at `past + i`.
fn attention(
    qkv: &[f32],
    keys: &[f32],
    values: &[f32],
    (n_heads, n_kv_heads, head_dim): (usize, usize, usize),
    past: usize,
    out: &mut [f32],
) {
    let q_width = n_heads * head_dim;
    let kv_width = n_kv_heads * head_dim;
    let row_width = q_width + 2 * kv_width;
    let group = n_heads / n_kv_heads.max(1);
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut scores = Vec::new();
    for (i, (row, out_row)) in qkv
        .chunks_exact(row_width)
        .zip(out.chunks_exact_mut(q_width))
        .enumerate()
    {
        let n_keys = past + i + 1;
        for head in 0..n_heads {
            let kv_head = head / group.max(1);
            let q = &row[head * head_dim..(head + 1) * head_dim];
            scores.clear();
            let mut max = f32::NEG_INFINITY;
            for t in 0..n_keys {
                let k = &keys[t * kv_width + kv_head * head_dim..][..head_dim];
                let s = q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale;
                max = max.max(s);
                scores.push(s);
            }
            let mut total = 0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                total += *s;
            }
            let o = &mut out_row[head * head_dim..(head + 1) * head_dim];
            o.fill(0.0);
            for (t, &p) in scores.iter().enumerate() {
                let v = &values[t * kv_width + kv_head * head_dim..][..head_dim];
                let w = p / total;
                o.iter_mut().zip(v).for_each(|(o, &v)| *o += w * v);
            }
        }
    }
}
