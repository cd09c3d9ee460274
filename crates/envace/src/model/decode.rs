//! Decoding on the CPU in f32 as plain loops over the weights where they lie: one new position
//! per row and step, with its own key/value cache taken over from the prompt's candle pass.
//!
//! A decode step of a small model through candle is about a hundred small ops (norms, reshapes,
//! copies, the rotary tables and masks rebuilt every step), each a dispatch, an allocation and,
//! with two threads, a hand-over. Here a step is the arithmetic: per layer one parallel product
//! for the query, key and value projections together, one for the output projection, one for
//! gate and up together and one for down, and one over rows and key/value heads in which each
//! task norms and rotates its key, caches it and its value, and attends for the query heads
//! that share them; the layer norms and the MLP's activation are loops over the rows.
//! [`super::Policy::generate`] runs the prompt through [`super::Policy::forward_cached`] and
//! every later token here, when the model is f32 on the CPU; elsewhere (CUDA, other dtypes) it
//! stays on candle.

use candle_core::{CpuStorage, DType, Storage, StorageRef, Tensor, TensorId};
use rayon::prelude::*;

use super::cpu::decode_ops::{KeysValues, attend_one, rms_norm_rows, rows_times_weights};
use super::cpu::silu_mul_into;
use super::{KvCache, Policy};

/// Whether [`Policy::generate`] decodes with [`Policy::decode_step`].
pub(crate) fn applies(policy: &Policy) -> bool {
    policy.device.is_cpu() && policy.dtype == DType::F32
}

/// Read locks on the CPU storage of a step's weights, one per tensor (a tied embedding and
/// head share one), each with the range its values occupy.
#[derive(Default)]
struct Locked<'a> {
    guards: Vec<(TensorId, StorageRef<'a>, usize, usize)>,
}

impl<'a> Locked<'a> {
    /// Locks `tensor` (if not already) and returns its index.
    fn lock(&mut self, tensor: &'a Tensor, name: &str) -> candle_core::Result<usize> {
        if let Some(idx) = self.guards.iter().position(|g| g.0 == tensor.id()) {
            return Ok(idx);
        }
        let (guard, layout) = tensor.storage_and_layout();
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("decoding: the {name} weight is not contiguous")
        };
        if !matches!(&*guard, Storage::Cpu(CpuStorage::F32(_))) {
            candle_core::bail!("decoding: the {name} weight is not f32 on the CPU")
        }
        self.guards.push((tensor.id(), guard, start, end));
        Ok(self.guards.len() - 1)
    }

    fn get(&self, idx: usize) -> &[f32] {
        let (_, guard, start, end) = &self.guards[idx];
        match &**guard {
            Storage::Cpu(CpuStorage::F32(values)) => &values[*start..*end],
            _ => &[],
        }
    }
}

/// One layer's weights, as indices into [`Locked`].
struct LayerIdx {
    input_norm: usize,
    q: usize,
    k: usize,
    v: usize,
    o: usize,
    qk_norm: Option<(usize, usize)>,
    post_norm: usize,
    gate: usize,
    up: usize,
    down: usize,
}

/// The keys and values of a batch being decoded, per layer `(b, kv_heads, capacity, head_dim)`,
/// plus each row's padding mask and next position.
#[derive(Debug)]
pub(crate) struct DecodeState {
    b: usize,
    n_kv: usize,
    d: usize,
    capacity: usize,
    len: usize,
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    key_mask: Vec<Vec<u8>>,
    next_pos: Vec<u32>,
    /// The step's working buffers, kept from step to step: every value is written before it
    /// is read, so none is zero-filled again.
    work: Work,
}

/// One decode step's activations for every row (sized on the first step).
#[derive(Debug, Default)]
struct Work {
    cos: Vec<f32>,
    sin: Vec<f32>,
    x: Vec<f32>,
    normed: Vec<f32>,
    qkv: Vec<f32>,
    attended: Vec<f32>,
    projected: Vec<f32>,
    gate_up: Vec<f32>,
    act: Vec<f32>,
}

impl DecodeState {
    /// Takes over what the candle path cached for the prompt, with room for `extra` positions
    /// more before the buffers have to grow.
    pub(crate) fn from_cache(
        policy: &Policy,
        cache: &KvCache,
        extra: usize,
    ) -> candle_core::Result<Self> {
        let cfg = &policy.cfg;
        let (b, n_kv, d, len) = (
            cache.batch_size(),
            cfg.n_kv_heads,
            cfg.head_dim,
            cache.len(),
        );
        let capacity = len + extra.max(1);
        let mut keys = Vec::with_capacity(cache.layers.len());
        let mut values = Vec::with_capacity(cache.layers.len());
        for layer in &cache.layers {
            let Some((k, v)) = layer.filled()? else {
                candle_core::bail!("decoding: the prompt left a layer's cache empty")
            };
            for (cached, out) in [(k, &mut keys), (v, &mut values)] {
                let flat = cached
                    .to_dtype(DType::F32)?
                    .contiguous()?
                    .flatten_all()?
                    .to_vec1::<f32>()?;
                let mut buffer = vec![0f32; b * n_kv * capacity * d];
                for (head, rows) in flat.chunks(len * d).enumerate() {
                    let start = head * capacity * d;
                    buffer[start..start + rows.len()].copy_from_slice(rows);
                }
                out.push(buffer);
            }
        }
        Ok(DecodeState {
            b,
            n_kv,
            d,
            capacity,
            len,
            keys,
            values,
            key_mask: cache.key_mask.clone(),
            next_pos: cache.next_pos.clone(),
            work: Work::default(),
        })
    }

    /// Doubles the room for positions, keeping what is cached.
    fn grow(&mut self) {
        let capacity = (2 * self.capacity).max(self.len + 1);
        let d = self.d;
        for buffer in self.keys.iter_mut().chain(self.values.iter_mut()) {
            let mut grown = vec![0f32; self.b * self.n_kv * capacity * d];
            for (head, old) in buffer.chunks(self.capacity * d).enumerate() {
                grown[head * capacity * d..head * capacity * d + self.len * d]
                    .copy_from_slice(&old[..self.len * d]);
            }
            *buffer = grown;
        }
        self.capacity = capacity;
    }
}

/// Rotate-half rotary embedding of one head in place, `cos` and `sin` half as long.
fn rope_in_place(head: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = cos.len();
    let (first, second) = head.split_at_mut(half);
    for (((a, b), &c), &s) in first.iter_mut().zip(second).zip(cos).zip(sin) {
        let (x1, x2) = (*a, *b);
        *a = x1 * c - x2 * s;
        *b = x1 * s + x2 * c;
    }
}

/// What one task of a decode step's attention reuses from task to task on its thread: a query
/// head, normed and rotated, and the scores of [`attend_one`].
#[derive(Default)]
struct GroupScratch {
    query: Vec<f32>,
    scores: Vec<f32>,
}

impl Policy {
    /// One decode step: feeds `tokens` (one per row) after what `state` holds and writes the
    /// next-token logits into `logits`, `b × vocab` row-major, as [`Policy::forward_cached`]
    /// would (`logits` is resized; the caller passes the previous step's buffer back in).
    pub(crate) fn decode_step(
        &self,
        state: &mut DecodeState,
        tokens: &[u32],
        logits: &mut Vec<f32>,
    ) -> candle_core::Result<()> {
        let cfg = &self.cfg;
        let (b, h, d) = (state.b, cfg.hidden_size, cfg.head_dim);
        let (n_heads, n_kv) = (cfg.n_heads, cfg.n_kv_heads);
        let (q_dim, kv_dim, inter) = (n_heads * d, n_kv * d, cfg.intermediate_size);
        let n_rep = n_heads / n_kv.max(1);
        let eps = cfg.rms_norm_eps as f32;
        let scale = (1.0 / (d as f64).sqrt()) as f32;
        if tokens.len() != b {
            candle_core::bail!("decoding: {} tokens for {b} rows", tokens.len())
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            candle_core::bail!("decoding: token {bad} is outside the vocabulary")
        }

        let mut locked = Locked::default();
        let embed = locked.lock(&self.embed, "embedding")?;
        let norm = locked.lock(&self.norm, "final norm")?;
        let lm_head = locked.lock(&self.lm_head, "head")?;
        // The layers' weights by their Hugging Face names (the query and key norms only where
        // the architecture has them).
        let mut layer_idx = Vec::with_capacity(cfg.n_layers);
        for li in 0..cfg.n_layers {
            let var = |part: &str| self.vars.get(&format!("model.layers.{li}.{part}.weight"));
            let mut lock = |part: &str| match var(part) {
                Some(v) => locked.lock(v.as_tensor(), part),
                None => candle_core::bail!("decoding: layer {li} has no {part} weight"),
            };
            layer_idx.push(LayerIdx {
                input_norm: lock("input_layernorm")?,
                q: lock("self_attn.q_proj")?,
                k: lock("self_attn.k_proj")?,
                v: lock("self_attn.v_proj")?,
                o: lock("self_attn.o_proj")?,
                qk_norm: if super::decoder::has_qk_norm(cfg.architecture) {
                    Some((lock("self_attn.q_norm")?, lock("self_attn.k_norm")?))
                } else {
                    None
                },
                post_norm: lock("post_attention_layernorm")?,
                gate: lock("mlp.gate_proj")?,
                up: lock("mlp.up_proj")?,
                down: lock("mlp.down_proj")?,
            });
        }

        if state.len == state.capacity {
            state.grow();
        }
        let slot = state.len;
        let t = slot + 1;
        // Each row's rotary table for its position, in f32 as the candle path computes it.
        let half = self.inv_freq.len();
        let qkv_width = q_dim + 2 * kv_dim;
        let work = &mut state.work;
        if work.x.len() != b * h {
            // The first step: every buffer at its size (the rows never change).
            *work = Work {
                cos: vec![0f32; b * half],
                sin: vec![0f32; b * half],
                x: vec![0f32; b * h],
                normed: vec![0f32; b * h],
                qkv: vec![0f32; b * qkv_width],
                attended: vec![0f32; b * q_dim],
                projected: vec![0f32; b * h],
                gate_up: vec![0f32; b * 2 * inter],
                act: vec![0f32; b * inter],
            };
        }
        let Work {
            cos,
            sin,
            x,
            normed,
            qkv,
            attended,
            projected,
            gate_up,
            act,
        } = work;
        for row in 0..b {
            let pos = state.next_pos[row] as f32;
            for (j, &freq) in self.inv_freq.iter().enumerate() {
                let angle = pos * freq as f32;
                cos[row * half + j] = angle.cos();
                sin[row * half + j] = angle.sin();
            }
            state.next_pos[row] += 1;
            state.key_mask[row].push(1);
        }

        let embed_w = locked.get(embed);
        for (&token, x) in tokens.iter().zip(x.chunks_mut(h)) {
            let start = token as usize * h;
            x.copy_from_slice(&embed_w[start..start + h]);
        }
        let cap_d = state.capacity * d;
        for (li, idx) in layer_idx.iter().enumerate() {
            rms_norm_rows(x, locked.get(idx.input_norm), eps, normed);
            let qkv_w = [locked.get(idx.q), locked.get(idx.k), locked.get(idx.v)];
            rows_times_weights(normed, b, h, &qkv_w, qkv);
            // Per row and key/value head, in parallel once a task gets enough keys to be worth
            // a hand-over: the head's key (normed and rotated) and value into the cache, then
            // the attention of each query head that shares them, over the row's cache while it
            // is still in this core's cache. `qkv` stays as the product wrote it: the query
            // heads are normed and rotated in a copy.
            let (keys, values) = (&mut state.keys[li], &mut state.values[li]);
            let key_mask = &state.key_mask;
            let qk_norm = idx.qk_norm.map(|(q, k)| (locked.get(q), locked.get(k)));
            let group = |scratch: &mut GroupScratch,
                         task: usize,
                         (key_cache, value_cache, out): (&mut [f32], &mut [f32], &mut [f32])| {
                let (row, kh) = (task / n_kv, task % n_kv);
                let values_row = &qkv[row * qkv_width..(row + 1) * qkv_width];
                let (c, s) = (
                    &cos[row * half..(row + 1) * half],
                    &sin[row * half..(row + 1) * half],
                );
                let at = slot * d;
                let key = &mut key_cache[at..at + d];
                let raw_key = &values_row[q_dim + kh * d..q_dim + (kh + 1) * d];
                match qk_norm {
                    Some((_, k_norm)) => rms_norm_rows(raw_key, k_norm, eps, key),
                    None => key.copy_from_slice(raw_key),
                }
                rope_in_place(key, c, s);
                let v_at = q_dim + kv_dim + kh * d;
                value_cache[at..at + d].copy_from_slice(&values_row[v_at..v_at + d]);
                let cached = KeysValues {
                    k: &key_cache[..t * d],
                    v: &value_cache[..t * d],
                    k_stride: d,
                    v_stride: d,
                };
                for (r, out) in out.chunks_mut(d).enumerate() {
                    let q_at = (kh * n_rep + r) * d;
                    let q = &mut scratch.query;
                    q.resize(d, 0.0);
                    match qk_norm {
                        Some((q_norm, _)) => {
                            rms_norm_rows(&values_row[q_at..q_at + d], q_norm, eps, q)
                        }
                        None => q.copy_from_slice(&values_row[q_at..q_at + d]),
                    }
                    rope_in_place(q, c, s);
                    out.fill(0.0);
                    attend_one(q, &cached, &key_mask[row][..t], scale, &mut scratch.scores, out);
                }
            };
            let min_tasks = (16_384 / (t * d * n_rep).max(1)).max(1);
            if b * n_kv <= min_tasks {
                let mut scratch = GroupScratch::default();
                keys.chunks_mut(cap_d)
                    .zip(values.chunks_mut(cap_d))
                    .zip(attended.chunks_mut(n_rep * d))
                    .map(|((k, v), o)| (k, v, o))
                    .enumerate()
                    .for_each(|(task, parts)| group(&mut scratch, task, parts));
            } else {
                keys.par_chunks_mut(cap_d)
                    .zip(values.par_chunks_mut(cap_d))
                    .zip(attended.par_chunks_mut(n_rep * d))
                    .map(|((k, v), o)| (k, v, o))
                    .enumerate()
                    .with_min_len(min_tasks)
                    .for_each_init(GroupScratch::default, |scratch, (task, parts)| {
                        group(scratch, task, parts)
                    });
            }
            rows_times_weights(attended, b, q_dim, &[locked.get(idx.o)], projected);
            x.iter_mut()
                .zip(projected.iter())
                .for_each(|(x, p)| *x += p);

            rms_norm_rows(x, locked.get(idx.post_norm), eps, normed);
            let gate_up_w = [locked.get(idx.gate), locked.get(idx.up)];
            rows_times_weights(normed, b, h, &gate_up_w, gate_up);
            for (row, out) in gate_up.chunks(2 * inter).zip(act.chunks_mut(inter)) {
                let (gate, up) = row.split_at(inter);
                silu_mul_into(gate, up, out);
            }
            rows_times_weights(act, b, inter, &[locked.get(idx.down)], projected);
            x.iter_mut()
                .zip(projected.iter())
                .for_each(|(x, p)| *x += p);
        }
        state.len += 1;
        rms_norm_rows(x, locked.get(norm), eps, normed);
        // Every logit is written below: a buffer of the right size is reused as it is.
        logits.resize(b * cfg.vocab_size, 0.0);
        rows_times_weights(normed, b, h, &[locked.get(lm_head)], logits);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;
    use crate::config::{Architecture, TinyModelConfig};
    use crate::model::{TransformerConfig, left_pad};

    fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    /// The plain-Rust step gives the candle path's logits, step after step, for both
    /// architectures, tied and untied heads, a left-padded batch, one row, and a cache that has
    /// to grow.
    #[test]
    fn decode_steps_match_the_candle_path() {
        for (architecture, tie_embeddings) in [
            (Architecture::Qwen3, true),
            (Architecture::Qwen3, false),
            (Architecture::Llama, false),
        ] {
            let tiny = TinyModelConfig {
                architecture,
                hidden_size: 96,
                n_layers: 2,
                n_heads: 6,
                n_kv_heads: 2,
                intermediate_size: 200,
                vocab_size: 300,
                tie_embeddings,
                ..TinyModelConfig::default()
            };
            let cfg = TransformerConfig::from_tiny(&tiny).unwrap();
            let policy = Policy::init(cfg, 7, &Device::Cpu, DType::F32).unwrap();
            let all: Vec<Vec<u32>> = vec![
                vec![5, 17, 250, 3, 99, 42, 8],
                vec![1, 2],
                vec![299, 0, 150, 151],
                vec![64],
            ];
            for prompts in [&all[..], &all[..1]] {
                let (ids, mask) = left_pad(prompts, 0, &Device::Cpu).unwrap();
                let mut cache = KvCache::new();
                policy
                    .forward_cached(&ids, Some(&mask), &mut cache)
                    .unwrap();
                // Room for two positions only: the buffers grow twice over six steps.
                let mut state = DecodeState::from_cache(&policy, &cache, 2).unwrap();
                let b = prompts.len();
                // One logits buffer for every step, as generation passes it: it starts short
                // and full of NaN, then holds the step before's logits, so a logit the step
                // failed to write would show.
                let mut ours = vec![f32::NAN; 3];
                for step in 0..6u32 {
                    let tokens: Vec<u32> =
                        (0..b as u32).map(|r| (r * 37 + step * 11) % 300).collect();
                    policy.decode_step(&mut state, &tokens, &mut ours).unwrap();
                    let input = Tensor::from_vec(tokens, (b, 1), &Device::Cpu).unwrap();
                    let reference = policy
                        .forward_cached(&input, None, &mut cache)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1::<f32>()
                        .unwrap();
                    let diff = max_abs_diff(&ours, &reference);
                    assert!(
                        diff < 1e-4,
                        "{architecture:?} (tied {tie_embeddings}), {b} rows, step {step}: {diff}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_token_outside_the_vocabulary_is_an_error() {
        let cfg = TransformerConfig::from_tiny(&TinyModelConfig {
            hidden_size: 32,
            n_layers: 1,
            n_heads: 2,
            n_kv_heads: 1,
            intermediate_size: 64,
            vocab_size: 50,
            ..TinyModelConfig::default()
        })
        .unwrap();
        let policy = Policy::init(cfg, 1, &Device::Cpu, DType::F32).unwrap();
        let (ids, mask) = left_pad(&[vec![1, 2, 3]], 0, &Device::Cpu).unwrap();
        let mut cache = KvCache::new();
        policy
            .forward_cached(&ids, Some(&mask), &mut cache)
            .unwrap();
        let mut state = DecodeState::from_cache(&policy, &cache, 4).unwrap();
        let err = policy
            .decode_step(&mut state, &[50], &mut Vec::new())
            .unwrap_err();
        assert!(err.to_string().contains("token 50"), "{err}");
    }
}
