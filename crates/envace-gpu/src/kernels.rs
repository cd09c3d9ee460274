//! One typed call per kernel on a [`Batch`]: the shapes in words, and a check that every
//! buffer holds what those shapes reach before anything is dispatched (a wrong shape is an
//! error naming the kernel and the buffer, never a read past the end on the GPU).

use crate::context::{Batch, Buf};
use crate::{Error, Kernel};

/// How a kernel walks rows of a buffer: `rows` rows of `dim` values, row r starting at
/// `offset + r * stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    /// How many rows.
    pub rows: usize,
    /// Values used per row.
    pub dim: usize,
    /// Values from one row's start to the next.
    pub stride: usize,
    /// Where row 0 starts.
    pub offset: usize,
}

impl Rows {
    /// `rows` contiguous rows of `dim` values.
    pub fn dense(rows: usize, dim: usize) -> Rows {
        Rows {
            rows,
            dim,
            stride: dim,
            offset: 0,
        }
    }

    /// How many values a buffer needs for these rows.
    pub fn extent(&self) -> usize {
        if self.rows == 0 {
            0
        } else {
            self.offset + (self.rows - 1) * self.stride + self.dim
        }
    }
}

/// How a kernel finds attention heads in a buffer of tokens: head h of token t is at
/// `offset + t * stride + h * head_dim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    /// How many tokens.
    pub n_tokens: usize,
    /// Heads per token.
    pub n_heads: usize,
    /// Values per head.
    pub head_dim: usize,
    /// Values from one token's start to the next.
    pub stride: usize,
    /// Where the first head of token 0 starts.
    pub offset: usize,
}

impl Heads {
    /// How many values a buffer needs for these heads.
    pub fn extent(&self) -> usize {
        if self.n_tokens == 0 {
            0
        } else {
            self.offset + (self.n_tokens - 1) * self.stride + self.n_heads * self.head_dim
        }
    }
}

/// How a weight matrix is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// f32 values, row-major.
    F32,
    /// GGUF Q4_1 blocks of 32, five words each (see [`crate::reference::q4_1_words`]).
    Q4_1,
    /// GGUF Q8_0 blocks of 32, padded to nine words each (see [`crate::reference::q8_0_words`]).
    Q8_0,
}

impl WeightFormat {
    /// Words a row of `k` values takes.
    pub fn row_words(self, k: usize) -> usize {
        match self {
            WeightFormat::F32 => k,
            WeightFormat::Q4_1 => k / 32 * 5,
            WeightFormat::Q8_0 => k / 32 * 9,
        }
    }
}

/// A linear layer's weight on the GPU: `n` output rows of `k` inputs.
#[derive(Debug)]
pub struct Weight {
    /// The values or blocks.
    pub buf: Buf,
    /// Output features (rows).
    pub n: usize,
    /// Input features (columns).
    pub k: usize,
    /// How the rows are stored.
    pub format: WeightFormat,
}

/// How [`Batch::sample`] picks tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleParams {
    /// 0 picks the most likely token.
    pub temperature: f32,
    /// Nucleus cut-off; 1 keeps all.
    pub top_p: f32,
    /// Keep the `top_k` most likely; 0 keeps all.
    pub top_k: u32,
    /// The generation's seed.
    pub seed: u64,
    /// The decoding step (a new draw per step).
    pub step: u32,
    /// Row r of this call draws as row `row_base + r` of the generation.
    pub row_base: u32,
}

fn word(value: usize, kernel: Kernel, what: &str) -> Result<u32, Error> {
    u32::try_from(value).map_err(|_| Error::Shape {
        kernel: kernel.file(),
        message: format!("{what} = {value} does not fit in 32 bits"),
    })
}

fn need(kernel: Kernel, buf: &Buf, words: usize) -> Result<(), Error> {
    if buf.words() < words {
        return Err(Error::Shape {
            kernel: kernel.file(),
            message: format!(
                "{} holds {} values, the call reaches {words}",
                buf.name(),
                buf.words()
            ),
        });
    }
    Ok(())
}

fn distinct(kernel: Kernel, written: &Buf, read: &Buf) -> Result<(), Error> {
    if std::ptr::eq(written, read) || written.buffer == read.buffer {
        return Err(Error::Shape {
            kernel: kernel.file(),
            message: format!(
                "{} is both read and written; the kernel needs two buffers",
                written.name()
            ),
        });
    }
    Ok(())
}

fn groups_of(n: usize, size: usize, kernel: Kernel) -> Result<u32, Error> {
    word(n.div_ceil(size), kernel, "workgroups")
}

impl Batch<'_> {
    /// `out[i, :] = table[tokens[i], :]` for `n_tokens` tokens; the ids must be below the
    /// table's rows (the caller's tokenizer guarantees it; the kernel does not check).
    pub fn embed(
        &mut self,
        tokens: &Buf,
        table: &Buf,
        out: &Buf,
        n_tokens: usize,
        hidden: usize,
    ) -> Result<(), Error> {
        let k = Kernel::Embed;
        need(k, tokens, n_tokens)?;
        need(k, out, n_tokens * hidden)?;
        let params = [word(n_tokens, k, "n_tokens")?, word(hidden, k, "hidden")?];
        let groups = [groups_of(hidden, 64, k)?, word(n_tokens, k, "n_tokens")?, 1];
        self.dispatch(k, &params, &[tokens, table, out], groups)
    }

    /// RMSNorm of the rows `src` describes into `dst` (contiguous rows of `src.dim`).
    pub fn rms_norm(
        &mut self,
        src_buf: &Buf,
        src: Rows,
        weight: &Buf,
        dst: &Buf,
        eps: f32,
    ) -> Result<(), Error> {
        let k = Kernel::RmsNorm;
        distinct(k, dst, src_buf)?;
        need(k, src_buf, src.extent())?;
        need(k, weight, src.dim)?;
        need(k, dst, src.rows * src.dim)?;
        let params = [
            word(src.rows, k, "rows")?,
            word(src.dim, k, "dim")?,
            word(src.stride, k, "stride")?,
            word(src.offset, k, "offset")?,
            eps.to_bits(),
        ];
        self.dispatch(
            k,
            &params,
            &[src_buf, weight, dst],
            [word(src.rows, k, "rows")?, 1, 1],
        )
    }

    /// Rotary embedding in place on the heads `x` describes, at `positions` (one per token),
    /// with `cos_sin` holding (cos, sin) pairs per position and frequency
    /// ([`crate::reference::rope_table`]); `norm` applies a per-head RMSNorm first.
    pub fn rope(
        &mut self,
        x_buf: &Buf,
        x: Heads,
        positions: &Buf,
        cos_sin: &Buf,
        norm: Option<(&Buf, f32)>,
    ) -> Result<(), Error> {
        let k = Kernel::Rope;
        if !x.head_dim.is_multiple_of(2) {
            return Err(Error::Shape {
                kernel: k.file(),
                message: format!("head_dim {} is odd", x.head_dim),
            });
        }
        need(k, x_buf, x.extent())?;
        need(k, positions, x.n_tokens)?;
        let (norm_buf, eps) = match norm {
            Some((weight, eps)) => {
                need(k, weight, x.head_dim)?;
                (weight, eps)
            }
            // Bound but unread.
            None => (cos_sin, 0.0),
        };
        let params = [
            word(x.n_tokens, k, "n_tokens")?,
            word(x.n_heads, k, "n_heads")?,
            word(x.head_dim, k, "head_dim")?,
            word(x.stride, k, "stride")?,
            word(x.offset, k, "offset")?,
            u32::from(norm.is_some()),
            eps.to_bits(),
        ];
        let groups = [
            word(x.n_tokens, k, "n_tokens")?,
            word(x.n_heads, k, "n_heads")?,
            1,
        ];
        self.dispatch(k, &params, &[x_buf, positions, cos_sin, norm_buf], groups)
    }

    /// `out[m, n] = x[m, :] · w[n, :]` for the rows `x` describes (`x.dim` must be `w.k`),
    /// written to the rows `out` describes (`out.dim` must be `w.n`).
    pub fn matmul(
        &mut self,
        x_buf: &Buf,
        x: Rows,
        w: &Weight,
        out_buf: &Buf,
        out: Rows,
    ) -> Result<(), Error> {
        let k = match w.format {
            WeightFormat::F32 => Kernel::Matmul,
            WeightFormat::Q4_1 => Kernel::MatmulQ4_1,
            WeightFormat::Q8_0 => Kernel::MatmulQ8_0,
        };
        distinct(k, out_buf, x_buf)?;
        if x.dim != w.k || out.dim != w.n || x.rows != out.rows {
            return Err(Error::Shape {
                kernel: k.file(),
                message: format!(
                    "{} rows of {} times a {} x {} weight into {} rows of {}",
                    x.rows, x.dim, w.n, w.k, out.rows, out.dim
                ),
            });
        }
        if w.format != WeightFormat::F32 && !w.k.is_multiple_of(32) {
            return Err(Error::Shape {
                kernel: k.file(),
                message: format!(
                    "a quantised weight's row length {} is not a multiple of 32",
                    w.k
                ),
            });
        }
        need(k, x_buf, x.extent())?;
        need(k, &w.buf, w.n * w.format.row_words(w.k))?;
        need(k, out_buf, out.extent())?;
        let params = [
            word(x.rows, k, "m")?,
            word(w.n, k, "n")?,
            word(w.k, k, "k")?,
            word(x.stride, k, "x_stride")?,
            word(x.offset, k, "x_offset")?,
            word(out.stride, k, "out_stride")?,
            word(out.offset, k, "out_offset")?,
        ];
        let groups = [groups_of(w.n, 256, k)?, groups_of(x.rows, 4, k)?, 1];
        self.dispatch(k, &params, &[x_buf, &w.buf, out_buf], groups)
    }

    /// Copies the keys (`keys`) and values (`values`, the same layout at another offset) of
    /// new tokens into the caches at `slots` (one per token); token i belongs to batch row
    /// `i / tokens_per_row`, and each cache holds `capacity` slots per row and kv head.
    #[allow(
        clippy::too_many_arguments,
        reason = "two sources, two caches and their shape"
    )]
    pub fn kv_write(
        &mut self,
        src_buf: &Buf,
        keys: Heads,
        v_offset: usize,
        slots: &Buf,
        tokens_per_row: usize,
        capacity: usize,
        k_cache: &Buf,
        v_cache: &Buf,
    ) -> Result<(), Error> {
        let k = Kernel::KvWrite;
        distinct(k, k_cache, src_buf)?;
        distinct(k, v_cache, src_buf)?;
        distinct(k, v_cache, k_cache)?;
        let values = Heads {
            offset: v_offset,
            ..keys
        };
        need(k, src_buf, keys.extent().max(values.extent()))?;
        need(k, slots, keys.n_tokens)?;
        let rows = keys.n_tokens.div_ceil(tokens_per_row.max(1));
        let cache_words = rows * keys.n_heads * capacity * keys.head_dim;
        need(k, k_cache, cache_words)?;
        need(k, v_cache, cache_words)?;
        let params = [
            word(keys.n_tokens, k, "n_tokens")?,
            word(tokens_per_row.max(1), k, "tokens_per_row")?,
            word(keys.n_heads, k, "n_kv")?,
            word(keys.head_dim, k, "head_dim")?,
            word(capacity, k, "capacity")?,
            word(keys.stride, k, "src_stride")?,
            word(keys.offset, k, "k_offset")?,
            word(v_offset, k, "v_offset")?,
        ];
        let groups = [
            groups_of(keys.n_heads * keys.head_dim, 64, k)?,
            word(keys.n_tokens, k, "n_tokens")?,
            1,
        ];
        self.dispatch(k, &params, &[src_buf, slots, k_cache, v_cache], groups)
    }

    /// Attention of the query heads `q` describes over the caches (`n_kv` heads, `capacity`
    /// slots per row), each token at cache slot `slots[i]` seeing the slots up to its own
    /// whose `key_mask` (row x capacity) is 1; output `n_tokens x q.n_heads x head_dim`.
    #[allow(
        clippy::too_many_arguments,
        reason = "queries, two caches, two masks and the output"
    )]
    pub fn attention(
        &mut self,
        q_buf: &Buf,
        q: Heads,
        n_kv: usize,
        tokens_per_row: usize,
        capacity: usize,
        k_cache: &Buf,
        v_cache: &Buf,
        key_mask: &Buf,
        slots: &Buf,
        out: &Buf,
    ) -> Result<(), Error> {
        let k = Kernel::Attention;
        distinct(k, out, q_buf)?;
        if q.head_dim > 256 || n_kv == 0 || !q.n_heads.is_multiple_of(n_kv) {
            return Err(Error::Shape {
                kernel: k.file(),
                message: format!(
                    "{} query heads of {} over {n_kv} kv heads (head_dim at most 256, query \
                     heads a multiple of kv heads)",
                    q.n_heads, q.head_dim
                ),
            });
        }
        let tokens_per_row = tokens_per_row.max(1);
        let rows = q.n_tokens.div_ceil(tokens_per_row);
        need(k, q_buf, q.extent())?;
        need(k, k_cache, rows * n_kv * capacity * q.head_dim)?;
        need(k, v_cache, rows * n_kv * capacity * q.head_dim)?;
        need(k, key_mask, rows * capacity)?;
        need(k, slots, q.n_tokens)?;
        need(k, out, q.n_tokens * q.n_heads * q.head_dim)?;
        let params = [
            word(q.n_tokens, k, "n_tokens")?,
            word(tokens_per_row, k, "tokens_per_row")?,
            word(q.n_heads, k, "n_heads")?,
            word(n_kv, k, "n_kv")?,
            word(q.head_dim, k, "head_dim")?,
            word(capacity, k, "capacity")?,
            word(q.stride, k, "q_stride")?,
            word(q.offset, k, "q_offset")?,
            (1.0 / (q.head_dim as f32).sqrt()).to_bits(),
        ];
        let groups = [
            word(q.n_tokens, k, "n_tokens")?,
            word(q.n_heads, k, "n_heads")?,
            1,
        ];
        self.dispatch(
            k,
            &params,
            &[q_buf, k_cache, v_cache, key_mask, slots, out],
            groups,
        )
    }

    /// The SwiGLU gate of `rows` rows of `gate_up` (gate then up, `2 * inter` each) into `out`.
    pub fn silu_mul(
        &mut self,
        gate_up: &Buf,
        out: &Buf,
        rows: usize,
        inter: usize,
    ) -> Result<(), Error> {
        let k = Kernel::SiluMul;
        distinct(k, out, gate_up)?;
        need(k, gate_up, rows * 2 * inter)?;
        need(k, out, rows * inter)?;
        let params = [word(rows, k, "rows")?, word(inter, k, "inter")?];
        let groups = [groups_of(inter, 64, k)?, word(rows, k, "rows")?, 1];
        self.dispatch(k, &params, &[gate_up, out], groups)
    }

    /// `acc[i] += delta[i]` for the first `n` values.
    pub fn add(&mut self, acc: &Buf, delta: &Buf, n: usize) -> Result<(), Error> {
        let k = Kernel::Add;
        distinct(k, acc, delta)?;
        need(k, acc, n)?;
        need(k, delta, n)?;
        let blocks = n.div_ceil(256);
        let x = blocks.min(65_535);
        let y = blocks.div_ceil(x.max(1));
        let groups = [word(x, k, "workgroups")?, word(y, k, "workgroups")?, 1];
        self.dispatch(k, &[word(n, k, "n")?], &[acc, delta], groups)
    }

    /// Picks a token from each of `rows` rows of `logits` (`vocab` each) into `tokens`, with
    /// its log-probability at temperature 1 into `logprobs`; `scratch` holds rows x vocab
    /// weights.
    #[allow(
        clippy::too_many_arguments,
        reason = "logits, scratch, two outputs and the shape"
    )]
    pub fn sample(
        &mut self,
        logits: &Buf,
        rows: usize,
        vocab: usize,
        scratch: &Buf,
        tokens: &Buf,
        logprobs: &Buf,
        params: SampleParams,
    ) -> Result<(), Error> {
        let k = Kernel::Sample;
        distinct(k, scratch, logits)?;
        need(k, logits, rows * vocab)?;
        need(k, scratch, rows * vocab)?;
        need(k, tokens, rows)?;
        need(k, logprobs, rows)?;
        if vocab == 0 {
            return Err(Error::Shape {
                kernel: k.file(),
                message: "an empty vocabulary".to_string(),
            });
        }
        let words = [
            word(rows, k, "rows")?,
            word(vocab, k, "vocab")?,
            params.temperature.to_bits(),
            params.top_p.to_bits(),
            params.top_k,
            params.seed as u32,
            (params.seed >> 32) as u32,
            params.step,
            params.row_base,
        ];
        self.dispatch(
            k,
            &words,
            &[logits, scratch, tokens, logprobs],
            [word(rows, k, "rows")?, 1, 1],
        )
    }
}
