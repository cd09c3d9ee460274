//! The training forward's attention (RoPE on queries and keys, masked softmax of the scaled
//! scores, the weighted sum of values) as one autograd node on the CPU.
//!
//! Composed from candle ops and our smaller fused ones, one layer's attention is about
//! eighteen graph nodes: transposes to head-major order, a contiguous copy, RoPE twice, the
//! score product, the softmax, the value product and the reshapes between them. candle's
//! backward zero-fills a fresh gradient for every node's input and adds the node's share into
//! it, so each node costs two passes over its tensor on top of its own work, and the
//! `(b, heads, l, l)` scores pass through three such nodes. A profile of the tiny model's
//! training step (`model_bench --only train`, `perf record`) put that zero-fill and add at
//! about a fifth of the step.
//!
//! Here queries, keys and values are read in the linear layers' own `(b, l, heads · d)`
//! order, and the output is written in the order the output projection reads, so there is
//! no transpose at all. Work is shared out over (batch row, key/value head) pairs: the query
//! heads that share a key/value head are stacked, so each pair is three matrix products
//! forward (scores, values) and five backward. The backward recomputes the scores and
//! probabilities instead of keeping them (a product of `l × d` by `d × l` per pair, which
//! costs less than storing and reading back `(b, heads, l, l)` floats).

use candle_core::{CpuStorage, CustomOp1, CustomOp3, Layout, Result, Shape, Tensor, bail};
use rayon::prelude::*;
use std::sync::Arc;

use super::strided::{self, View};
use super::train_ops::{dot, masked_softmax_row, rms_norm_row, rms_norm_row_backward, rope_row};
use super::{cpu_f32s, f32s, for_rows, last_dim};

/// Sizes of one attention call.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    batch: usize,
    len: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

impl Geometry {
    /// Query heads per key/value head.
    fn n_rep(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }

    /// Values per token of the packed projections: queries, then keys, then values.
    fn width(&self) -> usize {
        (self.n_heads + 2 * self.n_kv_heads) * self.head_dim
    }

    /// Where key/value head `kv`'s keys start in a packed row.
    fn key_column(&self, kv: usize) -> usize {
        (self.n_heads + kv) * self.head_dim
    }

    /// Where key/value head `kv`'s values start in a packed row.
    fn value_column(&self, kv: usize) -> usize {
        (self.n_heads + self.n_kv_heads + kv) * self.head_dim
    }

    /// Checks the sizes against a packed tensor of `dims` and the RoPE tables' `(b, 1, l, d)`.
    fn check(&self, what: &str, dims: &[usize], table_dims: &[usize]) -> Result<()> {
        let Geometry {
            batch: b,
            len: l,
            n_heads,
            n_kv_heads,
            head_dim: d,
        } = *self;
        let fits = dims.len() == 3
            && dims == [b, l, self.width()]
            && table_dims == [b, 1, l, d]
            && d % 2 == 0
            && n_kv_heads > 0
            && n_heads % n_kv_heads == 0;
        if !fits {
            bail!(
                "{what}: the packed projections are {dims:?} and the RoPE tables {table_dims:?}; \
                 expected [{b}, {l}, {}] ({n_heads} query heads, then {n_kv_heads} key and \
                 {n_kv_heads} value heads, of width {d}, even, the key/value heads dividing the \
                 query heads) and [{b}, 1, {l}, {d}]",
                self.width()
            )
        }
        Ok(())
    }
}

/// The step's constants as host values: the RoPE tables `(b, l, d)` (halves repeated) and the
/// mask `(b, l, l)` (1 where query `i` may see key `j`).
#[derive(Debug)]
struct Tables {
    cos: Vec<f32>,
    sin: Vec<f32>,
    allowed: Vec<u8>,
    /// For each block of [`QUERY_BLOCK`] queries of each batch row (`b × ⌈l / QUERY_BLOCK⌉`):
    /// one past the last key any of them may see (0 when they see none). Keys past it get no
    /// probability, so the block's products stop there (a causal mask about halves the
    /// attention's work).
    block_extent: Vec<usize>,
}

/// Query rows per block of the attention's products: each block runs over the keys up to the
/// largest extent among its queries.
const QUERY_BLOCK: usize = 32;

/// Attention over the packed projections `qkv: (b, l, (n_heads + 2 · n_kv_heads) · d)` (each
/// token's queries, then keys, then values, as one linear layer over the stacked weights
/// writes them), with RoPE from `cos, sin: (b, 1, l, d)` applied to queries and keys, scores
/// scaled by `scale` and masked by `allowed: (b, 1, l, l)` u8, giving `(b, l, n_heads · d)`.
/// A query that may see no key gets zeros.
///
/// Built once per training forward from the step's tables and shared by every layer:
/// [`Attention::forward`] is the graph node (the gradient flows to `qkv`), and
/// [`Attention::grad_qkv`] its backward, for a caller that chains the layers' backward itself.
#[derive(Clone)]
pub(crate) struct Attention {
    geometry: Geometry,
    /// The RoPE tables' `(b, 1, l, d)`, which the packed input is checked against.
    table_dims: [usize; 4],
    tables: Arc<Tables>,
    scale: f32,
}

impl Attention {
    /// Reads the step's tables and checks them against the sizes.
    pub(crate) fn new(
        cos: &Tensor,
        sin: &Tensor,
        allowed: &Tensor,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        scale: f64,
    ) -> Result<Self> {
        const NAME: &str = "fused attention";
        let (batch, len) = (cos.dim(0)?, cos.dim(2)?);
        let geometry = Geometry {
            batch,
            len,
            n_heads,
            n_kv_heads,
            head_dim,
        };
        let table_dims: [usize; 4] = match cos.dims() {
            &[b, one, l, d] => [b, one, l, d],
            other => bail!("{NAME}: the RoPE tables are {other:?}; expected (b, 1, l, d)"),
        };
        geometry.check(NAME, &[batch, len, geometry.width()], &table_dims)?;
        if sin.dims() != cos.dims() || allowed.dims() != [batch, 1, len, len] {
            bail!(
                "{NAME}: the tables are {:?} and {:?} and the mask {:?}; expected the tables \
                 alike and the mask [{batch}, 1, {len}, {len}]",
                cos.dims(),
                sin.dims(),
                allowed.dims()
            )
        }
        if !scale.is_finite() || scale == 0.0 {
            bail!("{NAME}: the scale must be finite and non-zero, got {scale}")
        }
        let allowed = allowed.flatten_all()?.to_vec1::<u8>()?;
        let block_extent = allowed
            .chunks((len * len).max(1))
            .flat_map(|mask| {
                mask.chunks((QUERY_BLOCK * len).max(1)).map(|block| {
                    let last_seen = |row: &[u8]| row.iter().rposition(|&a| a != 0);
                    let last = block.chunks(len.max(1)).filter_map(last_seen).max();
                    last.map_or(0, |j| j + 1)
                })
            })
            .collect();
        let tables = Tables {
            cos: cos.flatten_all()?.to_vec1::<f32>()?,
            sin: sin.flatten_all()?.to_vec1::<f32>()?,
            allowed,
            block_extent,
        };
        Ok(Attention {
            geometry,
            table_dims,
            tables: Arc::new(tables),
            scale: scale as f32,
        })
    }

    /// The attention of the packed `qkv: (b, l, (n_heads + 2 · n_kv_heads) · d)`, one graph node
    /// when `qkv` tracks its gradient.
    pub(crate) fn forward(&self, qkv: &Tensor) -> Result<Tensor> {
        self.geometry
            .check("fused attention", qkv.dims(), &self.table_dims)?;
        qkv.contiguous()?.apply_op1(self.clone())
    }

    /// The gradient of the packed `qkv` that [`Attention::forward`] read, given its output's
    /// `grad`.
    pub(crate) fn grad_qkv(&self, qkv: &Tensor, grad: &Tensor) -> Result<Tensor> {
        self.geometry
            .check("fused attention backward", qkv.dims(), &self.table_dims)?;
        let grad_qkv = CustomOp1::bwd(self, &qkv.contiguous()?, qkv, grad)?;
        grad_qkv.ok_or_else(|| candle_core::Error::Msg("fused attention: no gradient".into()))
    }
}

/// What one (batch row, key/value head) pair computes on the way to its output and that its
/// backward computes again: the rotated keys `(l, d)`, the rotated queries of its heads stacked
/// `(n_rep · l, d)` and their attention probabilities `(n_rep · l, l)`.
struct Pair {
    keys: Vec<f32>,
    queries: Vec<f32>,
    probs: Vec<f32>,
}

impl Attention {
    /// `out[i] = rope(x[i])` (or its transpose) for the `l` rows of one head of batch row `bi`,
    /// read from `x` at `x_offset` with row stride `x_stride`, into the contiguous `out`.
    fn rope_rows(
        &self,
        bi: usize,
        x: &[f32],
        x_offset: usize,
        x_stride: usize,
        transpose: bool,
        out: &mut [f32],
    ) {
        let d = self.geometry.head_dim;
        for (i, row) in out.chunks_exact_mut(d).enumerate() {
            let table = (bi * self.geometry.len + i) * d;
            let (c, s) = (
                &self.tables.cos[table..table + d],
                &self.tables.sin[table..table + d],
            );
            let xs = &x[x_offset + i * x_stride..x_offset + i * x_stride + d];
            rope_row(xs, c, s, transpose, row);
        }
    }

    /// Rotated keys and queries of pair `(bi, kv)` read from the packed `qkv`, and the
    /// probabilities of its stacked queries.
    fn pair(&self, bi: usize, kv: usize, qkv: &[f32]) -> Pair {
        let g = self.geometry;
        let (l, d, n_rep, width) = (g.len, g.head_dim, g.n_rep(), g.width());
        let row0 = bi * l * width;
        let mut keys = vec![0f32; l * d];
        self.rope_rows(bi, qkv, row0 + g.key_column(kv), width, false, &mut keys);
        let mut queries = vec![0f32; n_rep * l * d];
        for (r, block) in queries.chunks_exact_mut(l * d).enumerate() {
            let head = kv * n_rep + r;
            self.rope_rows(bi, qkv, row0 + head * d, width, false, block);
        }
        // Scores and probabilities only up to each query block's key extent; past it they
        // stay 0.
        let mut probs = vec![0f32; n_rep * l * l];
        for (row0, n, e) in self.query_blocks(bi) {
            strided::product_into(
                &mut probs,
                (row0 * l, l),
                rows_of(&queries, row0, n, d),
                transposed(&keys[..e * d], e, d),
                self.scale,
                false,
            );
        }
        let mut scores = vec![0f32; l];
        for (row_idx, row) in probs.chunks_exact_mut(l).enumerate() {
            let i = row_idx % l;
            let e = self.block_extent(bi, i);
            let mask = &self.tables.allowed[(bi * l + i) * l..(bi * l + i) * l + e];
            scores[..e].copy_from_slice(&row[..e]);
            masked_softmax_row(&scores[..e], mask, 1.0, &mut row[..e]);
        }
        Pair {
            keys,
            queries,
            probs,
        }
    }

    /// The query blocks of a pair's stacked heads for batch row `bi`: the first stacked row,
    /// the number of rows and the key extent of each.
    fn query_blocks(&self, bi: usize) -> Vec<(usize, usize, usize)> {
        let (l, n_rep) = (self.geometry.len, self.geometry.n_rep());
        (0..n_rep)
            .flat_map(|r| {
                (0..l)
                    .step_by(QUERY_BLOCK)
                    .map(move |i0| (r * l + i0, (l - i0).min(QUERY_BLOCK)))
            })
            .map(|(row0, n)| (row0, n, self.block_extent(bi, row0 % l)))
            .collect()
    }

    /// The key extent of the query block holding query `i` of batch row `bi`.
    fn block_extent(&self, bi: usize, i: usize) -> usize {
        let blocks = self.geometry.len.div_ceil(QUERY_BLOCK);
        self.tables.block_extent[bi * blocks + i / QUERY_BLOCK]
    }

    /// The values of pair `(bi, kv)` up to key `e`.
    fn values_to<'a>(&self, qkv: &'a [f32], bi: usize, kv: usize, e: usize) -> View<'a> {
        View {
            rows: e,
            ..self.values(qkv, bi, kv)
        }
    }

    /// The (batch row, key/value head) pairs, in output order.
    fn pairs(&self) -> Vec<(usize, usize)> {
        let Geometry {
            batch, n_kv_heads, ..
        } = self.geometry;
        (0..batch)
            .flat_map(|bi| (0..n_kv_heads).map(move |g| (bi, g)))
            .collect()
    }

    /// The values of key/value head `kv` of batch row `bi`, `(l, d)`, in the packed `qkv`.
    fn values<'a>(&self, qkv: &'a [f32], bi: usize, kv: usize) -> View<'a> {
        let g = self.geometry;
        View {
            data: qkv,
            offset: bi * g.len * g.width() + g.value_column(kv),
            rows: g.len,
            cols: g.head_dim,
            row_stride: g.width(),
            col_stride: 1,
        }
    }

    /// Stacks the `n_rep` heads of pair `(bi, kv)` in the output gradient `(b, l, heads · d)`
    /// head by head into a contiguous `(n_rep · l, d)` buffer.
    fn gather_heads(&self, grad: &[f32], bi: usize, kv: usize) -> Vec<f32> {
        let g = self.geometry;
        let (l, d, n_rep) = (g.len, g.head_dim, g.n_rep());
        let mut out = vec![0f32; n_rep * l * d];
        for (r, block) in out.chunks_exact_mut(l * d).enumerate() {
            let head = kv * n_rep + r;
            for (i, row) in block.chunks_exact_mut(d).enumerate() {
                let start = (bi * l + i) * g.n_heads * d + head * d;
                row.copy_from_slice(&grad[start..start + d]);
            }
        }
        out
    }

    /// Writes the stacked head blocks `(heads · l, d)` of batch row `bi` into `out`, whose
    /// rows are `row_width` long, the first head at column `column`, the next ones after it.
    fn scatter(
        &self,
        out: &mut [f32],
        row_width: usize,
        column: usize,
        bi: usize,
        stacked: &[f32],
    ) {
        let (l, d) = (self.geometry.len, self.geometry.head_dim);
        for (head, block) in stacked.chunks_exact(l * d).enumerate() {
            for (i, row) in block.chunks_exact(d).enumerate() {
                let start = (bi * l + i) * row_width + column + head * d;
                out[start..start + d].copy_from_slice(row);
            }
        }
    }
}

/// `data` as a row-major `rows × cols` view.
fn contiguous(data: &[f32], rows: usize, cols: usize) -> View<'_> {
    View {
        data,
        offset: 0,
        rows,
        cols,
        row_stride: cols,
        col_stride: 1,
    }
}

/// Rows `first..first + rows` of row-major `data` with `cols` columns, as a view.
fn rows_of(data: &[f32], first: usize, rows: usize, cols: usize) -> View<'_> {
    block_of(data, first, rows, cols, cols)
}

/// Columns `..cols` of rows `first..first + rows` of row-major `data` whose rows are
/// `row_len` long, as a view.
fn block_of(data: &[f32], first: usize, rows: usize, cols: usize, row_len: usize) -> View<'_> {
    View {
        data,
        offset: first * row_len,
        rows,
        cols,
        row_stride: row_len,
        col_stride: 1,
    }
}

/// The transpose of row-major `rows × cols` `data`, as a `cols × rows` view.
fn transposed(data: &[f32], rows: usize, cols: usize) -> View<'_> {
    contiguous(data, rows, cols).t()
}

impl CustomOp1 for Attention {
    fn name(&self) -> &'static str {
        "fused-attention"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let qkv = f32s(storage, layout, self.name())?;
        let g = self.geometry;
        let (l, d, n_rep) = (g.len, g.head_dim, g.n_rep());
        let blocks: Vec<Vec<f32>> = self
            .pairs()
            .into_par_iter()
            .map(|(bi, kv)| {
                let pair = self.pair(bi, kv, qkv);
                let mut stacked = vec![0f32; n_rep * l * d];
                for (row0, n, e) in self.query_blocks(bi) {
                    strided::product_into(
                        &mut stacked,
                        (row0 * d, d),
                        block_of(&pair.probs, row0, n, e, l),
                        self.values_to(qkv, bi, kv, e),
                        1.0,
                        false,
                    );
                }
                stacked
            })
            .collect();
        let out_width = g.n_heads * d;
        let mut out = vec![0f32; g.batch * l * out_width];
        for ((bi, kv), stacked) in self.pairs().into_iter().zip(&blocks) {
            self.scatter(&mut out, out_width, kv * n_rep * d, bi, stacked);
        }
        Ok((CpuStorage::F32(out), Shape::from((g.batch, l, out_width))))
    }

    fn bwd(&self, qkv: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let grad = grad_res.contiguous()?;
        let d_qkv = {
            let (q_s, q_l) = qkv.storage_and_layout();
            let (g_s, g_l) = grad.storage_and_layout();
            self.backward(
                cpu_f32s(&q_s, q_l, "fused attention backward")?,
                cpu_f32s(&g_s, g_l, "fused attention backward")?,
            )
        };
        Ok(Some(Tensor::from_vec(d_qkv, qkv.shape(), qkv.device())?))
    }
}

impl Attention {
    /// The gradient of the packed `qkv` given the output's `grad`.
    fn backward(&self, qkv: &[f32], grad: &[f32]) -> Vec<f32> {
        let g = self.geometry;
        let (l, d, n_rep) = (g.len, g.head_dim, g.n_rep());
        let rows = n_rep * l;
        type Blocks = (Vec<f32>, Vec<f32>, Vec<f32>);
        let blocks: Vec<Blocks> = self
            .pairs()
            .into_par_iter()
            .map(|(bi, kv)| {
                let Pair {
                    keys,
                    queries,
                    mut probs,
                } = self.pair(bi, kv, qkv);
                let grad_out = self.gather_heads(grad, bi, kv);
                let blocks = self.query_blocks(bi);
                // dV = Pᵀ dO over the stacked heads, block by block.
                let mut dv = vec![0f32; l * d];
                for &(row0, n, e) in &blocks {
                    strided::product_into(
                        &mut dv,
                        (0, d),
                        block_of(&probs, row0, n, e, l).t(),
                        rows_of(&grad_out, row0, n, d),
                        1.0,
                        true,
                    );
                }
                // dP = dO Vᵀ, then dS = scale · P ∘ (dP − Σ_j dP_j P_j), in place of P.
                let mut dp = vec![0f32; rows * l];
                for &(row0, n, e) in &blocks {
                    strided::product_into(
                        &mut dp,
                        (row0 * l, l),
                        rows_of(&grad_out, row0, n, d),
                        self.values_to(qkv, bi, kv, e).t(),
                        1.0,
                        false,
                    );
                }
                for (row_idx, (p_row, dp_row)) in probs
                    .chunks_exact_mut(l)
                    .zip(dp.chunks_exact(l))
                    .enumerate()
                {
                    let e = self.block_extent(bi, row_idx % l);
                    let (p_row, dp_row) = (&mut p_row[..e], &dp_row[..e]);
                    let dot = dot(p_row, dp_row);
                    for (p, &x) in p_row.iter_mut().zip(dp_row) {
                        *p = self.scale * *p * (x - dot);
                    }
                }
                let ds = probs;
                // dQ (rotated) = dS K, dK (rotated) = dSᵀ Q; then the transposed rotation.
                let mut dq_rot = vec![0f32; rows * d];
                let mut dk_rot = vec![0f32; l * d];
                for &(row0, n, e) in &blocks {
                    strided::product_into(
                        &mut dq_rot,
                        (row0 * d, d),
                        block_of(&ds, row0, n, e, l),
                        contiguous(&keys[..e * d], e, d),
                        1.0,
                        false,
                    );
                    strided::product_into(
                        &mut dk_rot,
                        (0, d),
                        block_of(&ds, row0, n, e, l).t(),
                        rows_of(&queries, row0, n, d),
                        1.0,
                        true,
                    );
                }
                let mut dq = vec![0f32; rows * d];
                for (r, block) in dq.chunks_exact_mut(l * d).enumerate() {
                    self.rope_rows(bi, &dq_rot, r * l * d, d, true, block);
                }
                let mut dk = vec![0f32; l * d];
                self.rope_rows(bi, &dk_rot, 0, d, true, &mut dk);
                (dq, dk, dv)
            })
            .collect();
        let width = g.width();
        let mut d_qkv = vec![0f32; qkv.len()];
        for ((bi, kv), (dq, dk, dv)) in self.pairs().into_iter().zip(&blocks) {
            self.scatter(&mut d_qkv, width, kv * n_rep * d, bi, dq);
            self.scatter(&mut d_qkv, width, g.key_column(kv), bi, dk);
            self.scatter(&mut d_qkv, width, g.value_column(kv), bi, dv);
        }
        d_qkv
    }
}

/// Qwen3's per-head RMSNorm of queries (weight `q_w: (d,)`) and keys (`k_w`) inside the packed
/// projections `qkv: (b, l, (n_heads + 2 · n_kv_heads) · d)`; values pass through unchanged.
/// Gradients flow to `qkv` and both weights.
pub(crate) fn qk_norm(
    qkv: &Tensor,
    q_w: &Tensor,
    k_w: &Tensor,
    n_heads: usize,
    n_kv_heads: usize,
    eps: f64,
) -> Result<Tensor> {
    const NAME: &str = "fused query/key norm";
    let head_dim = q_w.elem_count();
    let width = (n_heads + 2 * n_kv_heads) * head_dim;
    if head_dim == 0 || k_w.elem_count() != head_dim || qkv.dims().last() != Some(&width) {
        bail!(
            "{NAME}: the packed projections are {:?} and the weights {:?} and {:?}; expected \
             weights of one width d and rows of ({n_heads} + 2 × {n_kv_heads}) × d",
            qkv.dims(),
            q_w.dims(),
            k_w.dims()
        )
    }
    qkv.contiguous()?.apply_op3(
        &q_w.contiguous()?,
        &k_w.contiguous()?,
        QkNorm {
            n_heads,
            n_kv_heads,
            head_dim,
            eps: eps as f32,
        },
    )
}

/// The gradients of [`qk_norm`]'s inputs (`qkv`, `q_w`, `k_w`) given its output's `grad`, for a
/// caller that chains the layers' backward itself.
pub(crate) fn qk_norm_grads(
    qkv: &Tensor,
    q_w: &Tensor,
    k_w: &Tensor,
    (n_heads, n_kv_heads): (usize, usize),
    eps: f64,
    grad: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let op = QkNorm {
        n_heads,
        n_kv_heads,
        head_dim: q_w.elem_count(),
        eps: eps as f32,
    };
    let (qkv, q_w, k_w) = (qkv.contiguous()?, q_w.contiguous()?, k_w.contiguous()?);
    match CustomOp3::bwd(&op, &qkv, &q_w, &k_w, &qkv, grad)? {
        (Some(d_qkv), Some(d_q), Some(d_k)) => Ok((d_qkv, d_q, d_k)),
        _ => bail!("fused query/key norm: a gradient is missing"),
    }
}

#[derive(Clone, Copy)]
struct QkNorm {
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    eps: f32,
}

impl QkNorm {
    /// Heads normalised per token: the query heads, then the key heads.
    fn normed_heads(&self) -> usize {
        self.n_heads + self.n_kv_heads
    }

    /// The weight of head `h` of a token: the query weight for query heads, else the key one.
    fn weight<'a>(&self, h: usize, q_w: &'a [f32], k_w: &'a [f32]) -> &'a [f32] {
        if h < self.n_heads { q_w } else { k_w }
    }
}

impl CustomOp3 for QkNorm {
    fn name(&self) -> &'static str {
        "fused-qk-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = f32s(s1, l1, self.name())?;
        let (q_w, k_w) = (f32s(s2, l2, self.name())?, f32s(s3, l3, self.name())?);
        let d = self.head_dim;
        let width = last_dim(l1.shape(), self.name())?;
        let mut out = x.to_vec();
        for_rows(&mut out, width, |r, row| {
            let xs = &x[r * width..(r + 1) * width];
            for h in 0..self.normed_heads() {
                let w = self.weight(h, q_w, k_w);
                rms_norm_row(
                    &xs[h * d..(h + 1) * d],
                    w,
                    self.eps,
                    &mut row[h * d..(h + 1) * d],
                );
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        qkv: &Tensor,
        q_w: &Tensor,
        k_w: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        const WHAT: &str = "fused query/key norm backward";
        let grad = grad_res.contiguous()?;
        let d = self.head_dim;
        let width = qkv.dims().last().copied().unwrap_or(0);
        let (dx, dw) = {
            let (x_s, x_l) = qkv.storage_and_layout();
            let (q_s, q_l) = q_w.storage_and_layout();
            let (k_s, k_l) = k_w.storage_and_layout();
            let (g_s, g_l) = grad.storage_and_layout();
            let x = cpu_f32s(&x_s, x_l, WHAT)?;
            let (qw, kw) = (cpu_f32s(&q_s, q_l, WHAT)?, cpu_f32s(&k_s, k_l, WHAT)?);
            let g = cpu_f32s(&g_s, g_l, WHAT)?;
            // Per head as RMSNorm's backward; values pass the gradient through (dx = g).
            let mut dx = g.to_vec();
            // Fixed blocks of rows, their partial weight gradients summed in block order, so
            // that the sum does not depend on how rayon shares the blocks out.
            let block_rows = super::min_rows(width);
            let partials: Vec<Vec<f32>> = dx
                .par_chunks_mut((width * block_rows).max(1))
                .enumerate()
                .map(|(block, rows)| {
                    let mut acc = vec![0f32; 2 * d];
                    for (i, row) in rows.chunks_exact_mut(width).enumerate() {
                        let r = block * block_rows + i;
                        for h in 0..self.normed_heads() {
                            let at = r * width + h * d..r * width + (h + 1) * d;
                            let acc_w = if h < self.n_heads { 0 } else { d };
                            rms_norm_row_backward(
                                &g[at.clone()],
                                &x[at],
                                self.weight(h, qw, kw),
                                self.eps,
                                &mut row[h * d..(h + 1) * d],
                                &mut acc[acc_w..acc_w + d],
                            );
                        }
                    }
                    acc
                })
                .collect();
            let mut dw = vec![0f32; 2 * d];
            for partial in &partials {
                dw.iter_mut().zip(partial).for_each(|(a, b)| *a += b);
            }
            (dx, dw)
        };
        Ok((
            Some(Tensor::from_vec(dx, qkv.shape(), qkv.device())?),
            Some(Tensor::from_vec(
                dw[..d].to_vec(),
                q_w.shape(),
                q_w.device(),
            )?),
            Some(Tensor::from_vec(
                dw[d..].to_vec(),
                k_w.shape(),
                k_w.device(),
            )?),
        ))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{D, DType, Device, Tensor};

    use super::super::testing::{check, values, var};
    use super::super::train_ops;
    use super::*;

    /// The attention of `qkv` as one graph node, made for one call.
    #[allow(clippy::too_many_arguments)] // The input, the step's three constants, sizes, scale.
    fn attention(
        qkv: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        allowed: &Tensor,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        scale: f64,
    ) -> Result<Tensor> {
        Attention::new(cos, sin, allowed, n_heads, n_kv_heads, head_dim, scale)?.forward(qkv)
    }

    /// Causal, with the first `pad` keys of batch row 1 padding (a query still sees itself).
    fn mask(b: usize, l: usize, pad: usize) -> Tensor {
        let mut mask = vec![0u8; b * l * l];
        for bi in 0..b {
            for i in 0..l {
                for j in 0..=i {
                    let padding = bi == 1 && j < pad && j != i;
                    mask[(bi * l + i) * l + j] = u8::from(!padding);
                }
            }
        }
        Tensor::from_vec(mask, (b, 1, l, l), &Device::Cpu).unwrap()
    }

    /// Queries, keys and values of packed projections, each `(b, l, heads, d)`.
    fn unpack(qkv: &Tensor, (h, n_kv, d): (usize, usize, usize)) -> [Tensor; 3] {
        let (b, l) = (qkv.dim(0).unwrap(), qkv.dim(1).unwrap());
        let part = |start: usize, heads: usize| {
            qkv.narrow(D::Minus1, start * d, heads * d)
                .unwrap()
                .reshape((b, l, heads, d))
                .unwrap()
        };
        [part(0, h), part(h, n_kv), part(h + n_kv, n_kv)]
    }

    /// The composition the decoder uses off the CPU: heads to the front, RoPE, scores,
    /// softmax, values, back to `(b, l, heads · d)`.
    fn composed(
        qkv: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        allowed: &Tensor,
        (h, n_kv, d): (usize, usize, usize),
        scale: f64,
    ) -> Tensor {
        let (b, l) = (qkv.dim(0).unwrap(), qkv.dim(1).unwrap());
        let [q, k, v] = unpack(qkv, (h, n_kv, d)).map(|t| t.transpose(1, 2).unwrap());
        let q = train_ops::rope(&q, cos, sin).unwrap();
        let k = train_ops::rope(&k, cos, sin).unwrap();
        let v = v.contiguous().unwrap();
        let n_rep = h / n_kv;
        let q = q
            .contiguous()
            .unwrap()
            .reshape((b, n_kv, n_rep * l, d))
            .unwrap();
        let scores = q
            .matmul(&k.t().unwrap())
            .unwrap()
            .reshape((b, h, l, l))
            .unwrap();
        let probs = train_ops::masked_softmax(&scores, allowed, scale).unwrap();
        probs
            .reshape((b, n_kv, n_rep * l, l))
            .unwrap()
            .matmul(&v)
            .unwrap()
            .reshape((b, h, l, d))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .reshape((b, l, h * d))
            .unwrap()
    }

    #[test]
    fn fused_attention_matches_the_composed_ops_forward_and_backward() {
        // Grouped heads (4 over 2) and plain ones (3 over 3); a row with padding; odd lengths;
        // a single token; more queries than three blocks of the products, the last one short,
        // with a whole block of padding.
        for (b, l, h, n_kv, d, pad) in [
            (2, 7, 4, 2, 8, 3),
            (2, 5, 3, 3, 6, 1),
            (1, 1, 2, 1, 4, 0),
            (2, 3 * QUERY_BLOCK + 5, 4, 2, 8, QUERY_BLOCK + 6),
        ] {
            let cos = Tensor::from_vec(values(b * l * d, 5), (b, 1, l, d), &Device::Cpu).unwrap();
            let sin = Tensor::from_vec(values(b * l * d, 6), (b, 1, l, d), &Device::Cpu).unwrap();
            let allowed = mask(b, l, pad);
            let scale = 1.0 / (d as f64).sqrt();
            check(
                &[var(&[b, l, (h + 2 * n_kv) * d], 7)],
                |t| attention(&t[0], &cos, &sin, &allowed, h, n_kv, d, scale).unwrap(),
                |t| composed(&t[0], &cos, &sin, &allowed, (h, n_kv, d), scale),
                1e-4,
            );
        }
    }

    #[test]
    fn a_query_that_sees_no_key_gets_zeros_and_no_gradient() {
        let (b, l, d) = (1, 2, 2);
        let cos = Tensor::ones((b, 1, l, d), DType::F32, &Device::Cpu).unwrap();
        let sin = Tensor::zeros((b, 1, l, d), DType::F32, &Device::Cpu).unwrap();
        // Query 0 sees nothing; query 1 sees both keys.
        let allowed = Tensor::from_vec(vec![0u8, 0, 1, 1], (b, 1, l, l), &Device::Cpu).unwrap();
        let qkv = var(&[b, l, 3 * d], 1);
        let out = attention(&qkv, &cos, &sin, &allowed, 1, 1, d, 1.0).unwrap();
        let rows: Vec<Vec<f32>> = out.squeeze(0).unwrap().to_vec2().unwrap();
        assert_eq!(rows[0], vec![0.0, 0.0]);
        assert!(
            rows[1].iter().all(|v| v.is_finite() && *v != 0.0),
            "{rows:?}"
        );
        let grads = out.sum_all().unwrap().backward().unwrap();
        let d_qkv: Vec<Vec<f32>> = grads
            .get(&qkv)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec2()
            .unwrap();
        // Token 0's query gets nothing; its key and value are seen by query 1.
        assert_eq!(&d_qkv[0][..d], &[0.0, 0.0]);
        assert!(d_qkv[0][2 * d..].iter().any(|v| *v != 0.0), "{d_qkv:?}");
    }

    #[test]
    fn shapes_that_do_not_fit_are_refused_with_every_shape() {
        let (b, l, d) = (1, 3, 4);
        let cos = Tensor::ones((b, 1, l, d), DType::F32, &Device::Cpu).unwrap();
        let allowed = mask(b, l, 0);
        // 3 query heads over 2 key/value heads.
        let qkv = var(&[b, l, 7 * d], 1);
        let err = attention(&qkv, &cos, &cos, &allowed, 3, 2, d, 0.5)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("fused attention") && err.contains("[1, 3, 28]"),
            "{err}"
        );
        // Rows of the wrong width for the heads.
        let qkv = var(&[b, l, 5 * d], 1);
        let err = attention(&qkv, &cos, &cos, &allowed, 2, 1, d, 0.5)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("[1, 3, 20]") && err.contains("expected [1, 3, 16]"),
            "{err}"
        );
    }

    #[test]
    fn qk_norm_matches_rms_norm_per_head_and_passes_values_through() {
        let (b, l, h, n_kv, d) = (2, 3, 4, 2, 8);
        check(
            &[
                var(&[b, l, (h + 2 * n_kv) * d], 11),
                var(&[d], 12),
                var(&[d], 13),
            ],
            |t| qk_norm(&t[0], &t[1], &t[2], h, n_kv, 1e-6).unwrap(),
            |t| {
                let [q, k, v] = unpack(&t[0], (h, n_kv, d));
                let q = candle_nn::ops::rms_norm_slow(&q, &t[1], 1e-6).unwrap();
                let k = candle_nn::ops::rms_norm_slow(&k, &t[2], 1e-6).unwrap();
                let flat = |x: Tensor| x.flatten_from(2).unwrap();
                Tensor::cat(&[flat(q), flat(k), flat(v)], D::Minus1).unwrap()
            },
            1e-4,
        );
    }

    #[test]
    fn the_query_key_norm_is_the_same_on_every_run() {
        // More rows than one block, so that several blocks' weight gradients are summed.
        let (b, l, h, n_kv, d) = (4, 300, 2, 1, 16);
        let qkv = var(&[b, l, (h + 2 * n_kv) * d], 21);
        let (qw, kw) = (var(&[d], 22), var(&[d], 23));
        let grads = || {
            let g = qk_norm(&qkv, &qw, &kw, h, n_kv, 1e-6)
                .unwrap()
                .sqr()
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let q: Vec<f32> = g.get(&qw).unwrap().to_vec1().unwrap();
            let k: Vec<f32> = g.get(&kw).unwrap().to_vec1().unwrap();
            (q, k)
        };
        let first = grads();
        for _ in 0..5 {
            assert_eq!(grads(), first);
        }
    }
}
