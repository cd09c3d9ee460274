//! A decoder-only transformer (Qwen3 or Llama) on the GPU: weights uploaded once by their
//! Hugging Face names and refreshed by name after an optimizer step, a batch's KV cache in GPU
//! buffers, the batched prompt pass and decode step with left padding, and sampling that
//! returns each token's log-probability.
//!
//! The layer is the engine's (`crates/envace/src/model/decoder.rs`): RMSNorm, one fused product
//! for the query, key and value projections, Qwen3's per-head query/key norms, rotary embedding
//! in the rotate-half layout, grouped-query attention, the output projection and the residual,
//! RMSNorm, one fused product for gate and up, SwiGLU, down and the residual. Positions follow
//! the engine's rule (a token's position is the number of real tokens before it in its row), so
//! a left-padded row gives the logits of the same row alone.

use std::sync::Arc;

use crate::context::{Buf, Gpu};
use crate::kernels::{Heads, Rows, SampleParams, Weight, WeightFormat};
use crate::{Error, reference};

/// The sizes of a model, as its `config.json` gives them.
#[derive(Debug, Clone, PartialEq)]
pub struct Dims {
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Decoder layers.
    pub n_layers: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv: usize,
    /// Values per head.
    pub head_dim: usize,
    /// The MLP's intermediate size.
    pub inter: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Qwen3's per-head query and key norms.
    pub qk_norm: bool,
    /// The head shares the embedding's weight.
    pub tied: bool,
    /// RoPE inverse frequencies, one per pair of head dimensions (scaling applied).
    pub inv_freq: Vec<f64>,
}

/// One weight as the host holds it, row-major (`out x in` for a linear layer).
#[derive(Debug, Clone, PartialEq)]
pub enum HostTensor {
    /// f32 values.
    F32(Vec<f32>),
    /// GGUF Q4_1 blocks, as the file stores them.
    Q4_1(Vec<u8>),
    /// GGUF Q8_0 blocks, as the file stores them.
    Q8_0(Vec<u8>),
}

impl HostTensor {
    fn format(&self) -> WeightFormat {
        match self {
            HostTensor::F32(_) => WeightFormat::F32,
            HostTensor::Q4_1(_) => WeightFormat::Q4_1,
            HostTensor::Q8_0(_) => WeightFormat::Q8_0,
        }
    }

    /// The words the kernels read.
    fn words(&self) -> Vec<u32> {
        match self {
            HostTensor::F32(values) => values.iter().map(|v| v.to_bits()).collect(),
            HostTensor::Q4_1(blocks) => reference::q4_1_words(blocks),
            HostTensor::Q8_0(blocks) => reference::q8_0_words(blocks),
        }
    }

    /// How many values it holds.
    fn n_values(&self) -> usize {
        match self {
            HostTensor::F32(values) => values.len(),
            HostTensor::Q4_1(blocks) => blocks.len() / 20 * 32,
            HostTensor::Q8_0(blocks) => blocks.len() / 34 * 32,
        }
    }

    /// Its values as f32 (dequantised).
    fn to_f32(&self) -> Vec<f32> {
        match self {
            HostTensor::F32(values) => values.clone(),
            HostTensor::Q4_1(blocks) => reference::dequant_q4_1(blocks),
            HostTensor::Q8_0(blocks) => reference::dequant_q8_0(blocks),
        }
    }
}

/// Where the model's weights come from: the tensor of a Hugging Face name, or a message.
pub type Source<'a> = dyn FnMut(&str) -> Result<HostTensor, String> + 'a;

/// The names of layer `i`'s tensors, in the order the fused products hold them.
fn layer_name(i: usize, part: &str) -> String {
    format!("model.layers.{i}.{part}.weight")
}

const QKV: [&str; 3] = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"];
const GATE_UP: [&str; 2] = ["mlp.gate_proj", "mlp.up_proj"];

struct Layer {
    input_norm: Buf,
    qkv: Weight,
    qk_norm: Option<(Buf, Buf)>,
    o: Weight,
    post_norm: Buf,
    gate_up: Weight,
    down: Weight,
}

/// A model on the GPU.
pub struct GpuModel {
    gpu: Arc<Gpu>,
    dims: Dims,
    /// The f32 embedding table when the head does not hold it as f32.
    embed: Option<Buf>,
    layers: Vec<Layer>,
    norm: Buf,
    head: Weight,
    /// (cos, sin) per position and frequency, for `rope_positions` positions.
    rope_table: Buf,
    rope_positions: usize,
}

impl std::fmt::Debug for GpuModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuModel")
            .field("gpu", &self.gpu)
            .field("dims", &self.dims)
            .finish()
    }
}

fn weights_error(name: &str, message: impl Into<String>) -> Error {
    Error::Weights {
        name: name.to_string(),
        message: message.into(),
    }
}

/// Fetches `name` and checks it holds `n_values` values.
fn fetch(source: &mut Source<'_>, name: &str, n_values: usize) -> Result<HostTensor, Error> {
    let tensor = source(name).map_err(|message| weights_error(name, message))?;
    if tensor.n_values() != n_values {
        return Err(weights_error(
            name,
            format!(
                "holds {} values, the model's sizes need {n_values}",
                tensor.n_values()
            ),
        ));
    }
    Ok(tensor)
}

/// Uploads the tensors `names` (each `rows x k`) as one weight of their rows stacked.
fn upload_stacked(
    gpu: &Gpu,
    source: &mut Source<'_>,
    names: &[(String, usize)],
    k: usize,
) -> Result<Weight, Error> {
    let mut words = Vec::new();
    let mut format = None;
    for (name, rows) in names {
        let tensor = fetch(source, name, rows * k)?;
        match format {
            None => format = Some(tensor.format()),
            Some(f) if f != tensor.format() => {
                return Err(weights_error(
                    name,
                    format!(
                        "is {:?} where {} is {f:?}; a fused product needs one format",
                        tensor.format(),
                        names[0].0
                    ),
                ));
            }
            Some(_) => {}
        }
        words.extend(tensor.words());
    }
    let n = names.iter().map(|(_, rows)| rows).sum();
    Ok(Weight {
        buf: gpu.upload(&names[0].0, &words)?,
        n,
        k,
        format: format.unwrap_or(WeightFormat::F32),
    })
}

fn upload_f32(gpu: &Gpu, source: &mut Source<'_>, name: &str, n: usize) -> Result<Buf, Error> {
    gpu.upload(name, &fetch(source, name, n)?.to_f32())
}

impl GpuModel {
    /// Uploads a model's weights from `source`, by Hugging Face name; rotary angles are
    /// tabled for `max_positions` positions (more are an error at generation).
    pub fn upload(
        gpu: Arc<Gpu>,
        dims: Dims,
        max_positions: usize,
        source: &mut Source<'_>,
    ) -> Result<GpuModel, Error> {
        let (h, d) = (dims.hidden, dims.head_dim);
        if dims.n_kv == 0
            || !dims.n_heads.is_multiple_of(dims.n_kv)
            || !d.is_multiple_of(2)
            || d > 256
        {
            return Err(weights_error(
                "config",
                format!(
                    "{} heads over {} kv heads of {d} values: the GPU path needs query heads a \
                     multiple of kv heads and an even head size of at most 256",
                    dims.n_heads, dims.n_kv
                ),
            ));
        }
        if dims.inv_freq.len() != d / 2 {
            return Err(weights_error(
                "config",
                format!("{} RoPE frequencies for heads of {d}", dims.inv_freq.len()),
            ));
        }
        let mut layers = Vec::with_capacity(dims.n_layers);
        for i in 0..dims.n_layers {
            let qkv_rows = [dims.n_heads * d, dims.n_kv * d, dims.n_kv * d];
            let qkv_names: Vec<(String, usize)> = QKV
                .iter()
                .zip(qkv_rows)
                .map(|(part, rows)| (layer_name(i, part), rows))
                .collect();
            let gate_up_names: Vec<(String, usize)> = GATE_UP
                .iter()
                .map(|part| (layer_name(i, part), dims.inter))
                .collect();
            let qk_norm = if dims.qk_norm {
                Some((
                    upload_f32(&gpu, source, &layer_name(i, "self_attn.q_norm"), d)?,
                    upload_f32(&gpu, source, &layer_name(i, "self_attn.k_norm"), d)?,
                ))
            } else {
                None
            };
            layers.push(Layer {
                input_norm: upload_f32(&gpu, source, &layer_name(i, "input_layernorm"), h)?,
                qkv: upload_stacked(&gpu, source, &qkv_names, h)?,
                qk_norm,
                o: upload_stacked(
                    &gpu,
                    source,
                    &[(layer_name(i, "self_attn.o_proj"), h)],
                    dims.n_heads * d,
                )?,
                post_norm: upload_f32(&gpu, source, &layer_name(i, "post_attention_layernorm"), h)?,
                gate_up: upload_stacked(&gpu, source, &gate_up_names, h)?,
                down: upload_stacked(
                    &gpu,
                    source,
                    &[(layer_name(i, "mlp.down_proj"), h)],
                    dims.inter,
                )?,
            });
        }
        let norm = upload_f32(&gpu, source, "model.norm.weight", h)?;
        let embed_name = "model.embed_tokens.weight";
        let embed_tensor = fetch(source, embed_name, dims.vocab * h)?;
        let (embed, head) = if dims.tied {
            let head = Weight {
                buf: gpu.upload(embed_name, &embed_tensor.words())?,
                n: dims.vocab,
                k: h,
                format: embed_tensor.format(),
            };
            let embed = match embed_tensor {
                HostTensor::F32(_) => None,
                quantised => Some(gpu.upload(embed_name, &quantised.to_f32())?),
            };
            (embed, head)
        } else {
            let embed = gpu.upload(embed_name, &embed_tensor.to_f32())?;
            drop(embed_tensor);
            let head = upload_stacked(
                &gpu,
                source,
                &[("lm_head.weight".to_string(), dims.vocab)],
                h,
            )?;
            (Some(embed), head)
        };
        let rope_table = gpu.upload(
            "rope table",
            &reference::rope_table(&dims.inv_freq, max_positions),
        )?;
        Ok(GpuModel {
            gpu,
            dims,
            embed,
            layers,
            norm,
            head,
            rope_table,
            rope_positions: max_positions,
        })
    }

    /// The model's sizes.
    pub fn dims(&self) -> &Dims {
        &self.dims
    }

    /// The GPU it runs on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Writes the current values of the tensors `names` from `source` over their uploaded
    /// copies (after an optimizer step: only what changed travels). Returns the bytes written.
    pub fn refresh(&mut self, names: &[&str], source: &mut Source<'_>) -> Result<u64, Error> {
        let (h, d) = (self.dims.hidden, self.dims.head_dim);
        let mut written = 0u64;
        for &name in names {
            // (target buffer, first word, values expected)
            let (buf, first, n_values, format): (&Buf, usize, usize, WeightFormat) = if name
                == "model.norm.weight"
            {
                (&self.norm, 0, h, WeightFormat::F32)
            } else if name == "model.embed_tokens.weight" {
                let tensor = fetch(source, name, self.dims.vocab * h)?;
                if let Some(embed) = &self.embed {
                    let values = tensor.to_f32();
                    self.gpu.write_at(embed, 0, &values)?;
                    written += 4 * values.len() as u64;
                }
                if self.dims.tied {
                    if tensor.format() != self.head.format {
                        return Err(weights_error(
                            name,
                            format!(
                                "is {:?}, uploaded as {:?}",
                                tensor.format(),
                                self.head.format
                            ),
                        ));
                    }
                    let words = tensor.words();
                    self.gpu.write_at(&self.head.buf, 0, &words)?;
                    written += 4 * words.len() as u64;
                }
                continue;
            } else if name == "lm_head.weight" && !self.dims.tied {
                (&self.head.buf, 0, self.dims.vocab * h, self.head.format)
            } else {
                let Some((i, part)) = name
                    .strip_prefix("model.layers.")
                    .and_then(|rest| rest.split_once('.'))
                    .and_then(|(i, part)| {
                        Some((i.parse::<usize>().ok()?, part.strip_suffix(".weight")?))
                    })
                    .filter(|(i, _)| *i < self.layers.len())
                else {
                    return Err(weights_error(name, "is not a weight of this model"));
                };
                let layer = &self.layers[i];
                let (nh, nkv) = (self.dims.n_heads * d, self.dims.n_kv * d);
                match part {
                    "input_layernorm" => (&layer.input_norm, 0, h, WeightFormat::F32),
                    "post_attention_layernorm" => (&layer.post_norm, 0, h, WeightFormat::F32),
                    "self_attn.q_norm" | "self_attn.k_norm" => match &layer.qk_norm {
                        Some((q, k)) => (
                            if part.ends_with("q_norm") { q } else { k },
                            0,
                            d,
                            WeightFormat::F32,
                        ),
                        None => return Err(weights_error(name, "is not a weight of this model")),
                    },
                    "self_attn.q_proj" => (&layer.qkv.buf, 0, nh * h, layer.qkv.format),
                    "self_attn.k_proj" => (
                        &layer.qkv.buf,
                        layer.qkv.format.row_words(h) * nh,
                        nkv * h,
                        layer.qkv.format,
                    ),
                    "self_attn.v_proj" => (
                        &layer.qkv.buf,
                        layer.qkv.format.row_words(h) * (nh + nkv),
                        nkv * h,
                        layer.qkv.format,
                    ),
                    "self_attn.o_proj" => (&layer.o.buf, 0, h * nh, layer.o.format),
                    "mlp.gate_proj" => (
                        &layer.gate_up.buf,
                        0,
                        self.dims.inter * h,
                        layer.gate_up.format,
                    ),
                    "mlp.up_proj" => (
                        &layer.gate_up.buf,
                        layer.gate_up.format.row_words(h) * self.dims.inter,
                        self.dims.inter * h,
                        layer.gate_up.format,
                    ),
                    "mlp.down_proj" => (&layer.down.buf, 0, h * self.dims.inter, layer.down.format),
                    _ => return Err(weights_error(name, "is not a weight of this model")),
                }
            };
            let tensor = fetch(source, name, n_values)?;
            if tensor.format() != format {
                return Err(weights_error(
                    name,
                    format!("is {:?}, uploaded as {format:?}", tensor.format()),
                ));
            }
            let words = tensor.words();
            self.gpu.write_at(buf, first, &words)?;
            written += 4 * words.len() as u64;
        }
        Ok(written)
    }

    /// Runs the prompts (left-padded to one length) through the model into a new session with
    /// room for `room` more positions; the session's logits are each row's last position's.
    pub fn start(&self, prompts: &[Vec<u32>], room: usize) -> Result<Session, Error> {
        let b = prompts.len();
        let l = prompts.iter().map(Vec::len).max().unwrap_or(0);
        if b == 0 || l == 0 || prompts.iter().any(Vec::is_empty) {
            return Err(Error::Shape {
                kernel: "prompt pass",
                message: "every prompt needs at least one token".to_string(),
            });
        }
        if let Some(&bad) = prompts
            .iter()
            .flatten()
            .find(|&&t| t as usize >= self.dims.vocab)
        {
            return Err(Error::Shape {
                kernel: "prompt pass",
                message: format!(
                    "token id {bad} is outside the vocabulary of {}",
                    self.dims.vocab
                ),
            });
        }
        let capacity = l + room.max(1);
        let mut ids = Vec::with_capacity(b * l);
        let mut positions = Vec::with_capacity(b * l);
        let mut key_mask = vec![0u32; b * capacity];
        let mut next_pos = Vec::with_capacity(b);
        for (row, prompt) in prompts.iter().enumerate() {
            let pad = l - prompt.len();
            ids.extend(std::iter::repeat_n(0, pad).chain(prompt.iter().copied()));
            positions.extend(std::iter::repeat_n(0, pad).chain(0..prompt.len() as u32));
            key_mask[row * capacity + pad..row * capacity + l].fill(1);
            next_pos.push(prompt.len() as u32);
        }
        let slots: Vec<u32> = (0..b * l).map(|t| (t % l) as u32).collect();
        let g = &self.gpu;
        let cache_words = b * self.dims.n_kv * capacity * self.dims.head_dim;
        let mut session = Session {
            b,
            capacity,
            // The prompt pass below fills the first l.
            len: 0,
            next_pos,
            key_mask_host: key_mask,
            key_mask: g.zeros("key mask", b * capacity)?,
            caches: (0..self.dims.n_layers)
                .map(|i| {
                    Ok((
                        g.zeros(&format!("layer {i} key cache"), cache_words)?,
                        g.zeros(&format!("layer {i} value cache"), cache_words)?,
                    ))
                })
                .collect::<Result<_, Error>>()?,
            logits: g.zeros("logits", b * self.dims.vocab)?,
            scratch: g.zeros("sampling weights", b * self.dims.vocab)?,
            tokens: g.zeros("sampled tokens", b)?,
            logprobs: g.zeros("sampled log-probabilities", b)?,
        };
        g.write(&session.key_mask, &session.key_mask_host)?;
        self.forward(&mut session, &ids, &positions, &slots, l)?;
        Ok(session)
    }

    /// Feeds one token per row after what the session holds; its logits become the new
    /// position's.
    pub fn step(&self, session: &mut Session, tokens: &[u32]) -> Result<(), Error> {
        let b = session.b;
        if tokens.len() != b {
            return Err(Error::Shape {
                kernel: "decode step",
                message: format!("{} tokens for {b} rows", tokens.len()),
            });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.dims.vocab) {
            return Err(Error::Shape {
                kernel: "decode step",
                message: format!(
                    "token id {bad} is outside the vocabulary of {}",
                    self.dims.vocab
                ),
            });
        }
        if session.len == session.capacity {
            return Err(Error::Shape {
                kernel: "decode step",
                message: format!("the session's {} positions are full", session.capacity),
            });
        }
        let slot = session.len;
        for row in 0..b {
            session.key_mask_host[row * session.capacity + slot] = 1;
        }
        let positions = session.next_pos.clone();
        self.gpu.write(&session.key_mask, &session.key_mask_host)?;
        self.forward(session, tokens, &positions, &vec![slot as u32; b], 1)?;
        for pos in &mut session.next_pos {
            *pos += 1;
        }
        Ok(())
    }

    /// The session's current logits, rows x vocab.
    pub fn logits(&self, session: &Session) -> Result<Vec<f32>, Error> {
        self.gpu.read(&session.logits)
    }

    /// Picks one token per row from the session's logits (draw `step` of the generation) and
    /// returns them with their log-probabilities at temperature 1.
    pub fn sample(
        &self,
        session: &Session,
        sampling: &Sampling,
        step: u32,
    ) -> Result<(Vec<u32>, Vec<f32>), Error> {
        let mut batch = self.gpu.batch();
        batch.sample(
            &session.logits,
            session.b,
            self.dims.vocab,
            &session.scratch,
            &session.tokens,
            &session.logprobs,
            SampleParams {
                temperature: sampling.temperature,
                top_p: sampling.top_p,
                top_k: sampling.top_k,
                seed: sampling.seed,
                step,
                row_base: 0,
            },
        )?;
        self.gpu.submit(batch)?;
        Ok((
            self.gpu.read(&session.tokens)?,
            self.gpu.read(&session.logprobs)?,
        ))
    }

    /// Generates up to `max_new_tokens` per prompt, a row stopping after a stop token (which
    /// it keeps), with each token's log-probability.
    pub fn generate(
        &self,
        prompts: &[Vec<u32>],
        max_new_tokens: usize,
        stop_tokens: &[u32],
        sampling: &Sampling,
    ) -> Result<Vec<Generation>, Error> {
        self.generate_streaming(
            prompts,
            max_new_tokens,
            stop_tokens,
            sampling,
            &mut |_, _| {},
        )
    }

    /// [`GpuModel::generate`], handing each new token to `on_token(row, token)` as soon as
    /// it is read back (a streaming server's hook); the tokens passed are exactly those
    /// returned.
    pub fn generate_streaming(
        &self,
        prompts: &[Vec<u32>],
        max_new_tokens: usize,
        stop_tokens: &[u32],
        sampling: &Sampling,
        on_token: &mut dyn FnMut(usize, u32),
    ) -> Result<Vec<Generation>, Error> {
        let mut out = vec![(Vec::new(), Vec::new()); prompts.len()];
        if prompts.is_empty() || max_new_tokens == 0 {
            return Ok(out);
        }
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
        if longest + max_new_tokens > self.rope_positions {
            return Err(Error::Shape {
                kernel: "generate",
                message: format!(
                    "{longest} prompt tokens and {max_new_tokens} new ones pass the {} positions \
                     the model was uploaded for",
                    self.rope_positions
                ),
            });
        }
        let mut session = self.start(prompts, max_new_tokens)?;
        let mut done = vec![false; prompts.len()];
        for step in 0..max_new_tokens {
            let (tokens, logprobs) = self.sample(&session, sampling, step as u32)?;
            for (row, (&token, &logprob)) in tokens.iter().zip(&logprobs).enumerate() {
                if !done[row] {
                    out[row].0.push(token);
                    out[row].1.push(logprob);
                    on_token(row, token);
                    done[row] = stop_tokens.contains(&token);
                }
            }
            if step + 1 == max_new_tokens || done.iter().all(|&d| d) {
                break;
            }
            self.step(&mut session, &tokens)?;
        }
        Ok(out)
    }

    /// One pass of `ids` (`tokens_per_row` per row, positions and cache slots given) through
    /// the layers, the last position of each row into the session's logits.
    fn forward(
        &self,
        session: &mut Session,
        ids: &[u32],
        positions: &[u32],
        slots: &[u32],
        tokens_per_row: usize,
    ) -> Result<(), Error> {
        let dims = &self.dims;
        let (h, d) = (dims.hidden, dims.head_dim);
        let n = ids.len();
        if let Some(&far) = positions
            .iter()
            .find(|&&p| p as usize >= self.rope_positions)
        {
            return Err(Error::Shape {
                kernel: "rope.wgsl",
                message: format!(
                    "position {far} is past the {} the model was uploaded for",
                    self.rope_positions
                ),
            });
        }
        let g = &self.gpu;
        let qkv_width = (dims.n_heads + 2 * dims.n_kv) * d;
        let ids_buf = g.upload("token ids", ids)?;
        let positions_buf = g.upload("positions", positions)?;
        let slots_buf = g.upload("cache slots", slots)?;
        let hidden = g.zeros("hidden states", n * h)?;
        let normed = g.zeros("normed hidden states", n * h)?;
        let qkv = g.zeros("queries, keys and values", n * qkv_width)?;
        let attended = g.zeros("attention outputs", n * dims.n_heads * d)?;
        let projected = g.zeros("projected outputs", n * h)?;
        let gate_up = g.zeros("gate and up", n * 2 * dims.inter)?;
        let gated = g.zeros("gated", n * dims.inter)?;
        let last = g.zeros("last positions", session.b * h)?;

        let mut batch = g.batch();
        let table = self.embed.as_ref().unwrap_or(&self.head.buf);
        batch.embed(&ids_buf, table, &hidden, n, h)?;
        let q_heads = Heads {
            n_tokens: n,
            n_heads: dims.n_heads,
            head_dim: d,
            stride: qkv_width,
            offset: 0,
        };
        let k_heads = Heads {
            n_heads: dims.n_kv,
            offset: dims.n_heads * d,
            ..q_heads
        };
        let v_offset = (dims.n_heads + dims.n_kv) * d;
        for (layer, (k_cache, v_cache)) in self.layers.iter().zip(&session.caches) {
            batch.rms_norm(
                &hidden,
                Rows::dense(n, h),
                &layer.input_norm,
                &normed,
                dims.rms_eps,
            )?;
            batch.matmul(
                &normed,
                Rows::dense(n, h),
                &layer.qkv,
                &qkv,
                Rows::dense(n, qkv_width),
            )?;
            let (q_norm, k_norm) = match &layer.qk_norm {
                Some((q, k)) => (Some((q, dims.rms_eps)), Some((k, dims.rms_eps))),
                None => (None, None),
            };
            batch.rope(&qkv, q_heads, &positions_buf, &self.rope_table, q_norm)?;
            batch.rope(&qkv, k_heads, &positions_buf, &self.rope_table, k_norm)?;
            batch.kv_write(
                &qkv,
                k_heads,
                v_offset,
                &slots_buf,
                tokens_per_row,
                session.capacity,
                k_cache,
                v_cache,
            )?;
            batch.attention(
                &qkv,
                q_heads,
                dims.n_kv,
                tokens_per_row,
                session.capacity,
                k_cache,
                v_cache,
                &session.key_mask,
                &slots_buf,
                &attended,
            )?;
            batch.matmul(
                &attended,
                Rows::dense(n, dims.n_heads * d),
                &layer.o,
                &projected,
                Rows::dense(n, h),
            )?;
            batch.add(&hidden, &projected, n * h)?;
            batch.rms_norm(
                &hidden,
                Rows::dense(n, h),
                &layer.post_norm,
                &normed,
                dims.rms_eps,
            )?;
            batch.matmul(
                &normed,
                Rows::dense(n, h),
                &layer.gate_up,
                &gate_up,
                Rows::dense(n, 2 * dims.inter),
            )?;
            batch.silu_mul(&gate_up, &gated, n, dims.inter)?;
            batch.matmul(
                &gated,
                Rows::dense(n, dims.inter),
                &layer.down,
                &projected,
                Rows::dense(n, h),
            )?;
            batch.add(&hidden, &projected, n * h)?;
        }
        let last_rows = Rows {
            rows: session.b,
            dim: h,
            stride: tokens_per_row * h,
            offset: (tokens_per_row - 1) * h,
        };
        batch.rms_norm(&hidden, last_rows, &self.norm, &last, dims.rms_eps)?;
        batch.matmul(
            &last,
            Rows::dense(session.b, h),
            &self.head,
            &session.logits,
            Rows::dense(session.b, dims.vocab),
        )?;
        g.submit(batch)?;
        session.len += tokens_per_row;
        Ok(())
    }
}

/// One row's generated tokens and their log-probabilities.
pub type Generation = (Vec<u32>, Vec<f32>);

/// How [`GpuModel::generate`] picks tokens: the engine's sampling settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// 0 is greedy.
    pub temperature: f32,
    /// Nucleus cut-off; 1 keeps all.
    pub top_p: f32,
    /// Keep the most likely `top_k`; 0 keeps all.
    pub top_k: u32,
    /// The generation's seed (row r, step s draw from (seed, r, s)).
    pub seed: u64,
}

/// A batch being decoded: its KV caches and padding mask on the GPU, each row's next position,
/// and the buffers of its latest logits and picks.
pub struct Session {
    b: usize,
    capacity: usize,
    len: usize,
    next_pos: Vec<u32>,
    key_mask_host: Vec<u32>,
    key_mask: Buf,
    caches: Vec<(Buf, Buf)>,
    logits: Buf,
    scratch: Buf,
    tokens: Buf,
    logprobs: Buf,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("b", &self.b)
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl Session {
    /// Rows in the batch.
    pub fn batch_size(&self) -> usize {
        self.b
    }

    /// Positions filled (padding included).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has run yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
