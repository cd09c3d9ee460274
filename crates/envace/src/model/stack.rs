//! The training forward's decoder layers on the CPU in f32 as one autograd node, whose backward
//! is written out layer by layer instead of walked node by node by candle.
//!
//! candle's backward gives every graph node's input a freshly zeroed gradient and adds the
//! node's share into it (`GradStore::or_insert`, then `add`), single-threaded. Even with each
//! layer in nine fused nodes (`cpu::linear`, `cpu::attention`, `cpu::train_ops`), a profile of
//! the tiny model's training step (`model_bench --only train`, `perf record`, AMD EPYC Zen 4,
//! 2 threads) showed that zero-fill and add, with the page faults of their fresh buffers, as
//! the work one thread did while the other waited: about a twelfth of the samples each way.
//!
//! Here [`forward`] runs every layer on detached weights, keeping each layer's activations (a
//! [`LayerTape`]: what candle's graph would have kept), and enters the graph as one node over
//! the embeddings. Its backward chains the fused ops' own backward functions through the
//! layers in reverse, adding the two residual branches once per layer. The weights' gradients
//! reach candle through a chain of one-value nodes ([`Attach`]), one per weight, that the
//! layers' node depends on: candle's topological order runs the layers' backward first, which
//! leaves each weight's gradient in a shared slot, and then each attaching node, which hands
//! its weight's gradient to candle as an ordinary input gradient. So the result is an ordinary
//! [`candle_core::backprop::GradStore`] for every caller, and nothing but the weights and the
//! embeddings is zero-filled.

use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor, bail};

use super::cpu::attention::{self, Attention};
use rayon::prelude::*;

use super::cpu::{CHUNK, cpu_f32s, f32s, linear, train_ops};
use super::decoder::DecoderLayer;
use super::layers::Step;

/// The weights' gradients between the layers' backward and the attaching nodes, one slot per
/// weight in [`DecoderLayer::weights`] order, layer after layer.
type Slots = Arc<Mutex<Vec<Option<Tensor>>>>;

/// `x: (b, l, hidden)` through every layer (`layers` as the policy holds them: their weights
/// may track gradients), returning `(b, l, hidden)` as one graph node.
pub(crate) fn forward(x: &Tensor, layers: &[DecoderLayer], step: &Step) -> Result<Tensor> {
    let Some(first) = layers.first() else {
        return Ok(x.clone());
    };
    let attention = Attention::new(
        &step.cos,
        &step.sin,
        &step.allowed,
        first.n_heads,
        first.n_kv_heads,
        first.head_dim,
        1.0 / (first.head_dim as f64).sqrt(),
    )?;
    let detached: Vec<DecoderLayer> = layers.iter().map(DecoderLayer::detached).collect();
    let mut tapes = Vec::with_capacity(layers.len());
    let mut h = x.detach().contiguous()?;
    for layer in &detached {
        let (out, tape) = layer.forward_taped(&h, &attention)?;
        tapes.push(tape);
        h = out;
    }
    let out = h.flatten_all()?.to_vec1::<f32>()?;

    // The chain of attaching nodes, from a single value that tracks nothing.
    let weights: Vec<Tensor> = layers.iter().flat_map(DecoderLayer::weights).collect();
    let slots: Slots = Arc::new(Mutex::new(vec![None; weights.len()]));
    let mut link = Tensor::zeros(1, DType::F32, x.device())?;
    for (slot, weight) in weights.iter().enumerate() {
        link = link.apply_op2(
            weight,
            Attach {
                slots: slots.clone(),
                slot,
            },
        )?;
    }
    x.contiguous()?.apply_op2(
        &link,
        Layers {
            layers: detached,
            attention,
            tapes,
            out: Mutex::new(Some(out)),
            slots,
        },
    )
}

/// What one layer's forward keeps for its backward.
struct LayerTape {
    /// The layer's input.
    x: Tensor,
    /// `input_layernorm(x)`.
    h1: Tensor,
    /// The query, key and value weights stacked.
    qkv_w: Tensor,
    /// The packed projections, before Qwen3's query/key norms.
    qkv: Tensor,
    /// After them (Qwen3 only).
    normed: Option<Tensor>,
    /// The attention's output.
    attn: Tensor,
    /// `x` plus the attention block.
    x2: Tensor,
    /// `post_attention_layernorm(x2)`.
    h2: Tensor,
    /// The gate and up weights stacked.
    gate_up_w: Tensor,
    /// The packed gate and up projections.
    gate_up: Tensor,
    /// `silu(gate) × up`.
    act: Tensor,
}

impl DecoderLayer {
    /// The trainable tensors, in the order of the layer's gradients from
    /// [`DecoderLayer::backward_taped`].
    fn weights(&self) -> Vec<Tensor> {
        let mut w = vec![
            self.input_layernorm.clone(),
            self.q_proj.clone(),
            self.k_proj.clone(),
            self.v_proj.clone(),
            self.o_proj.clone(),
        ];
        if let Some((q_norm, k_norm)) = &self.qk_norm {
            w.extend([q_norm.clone(), k_norm.clone()]);
        }
        w.extend([
            self.post_attention_layernorm.clone(),
            self.gate_proj.clone(),
            self.up_proj.clone(),
            self.down_proj.clone(),
        ]);
        w
    }

    /// The layer's forward on detached weights, the same function as `DecoderLayer::forward`
    /// in training mode, keeping what the backward reads.
    fn forward_taped(&self, x: &Tensor, attention: &Attention) -> Result<(Tensor, LayerTape)> {
        let h1 = train_ops::rms_norm(x, &self.input_layernorm, self.eps)?;
        let qkv_w = Tensor::cat(&[&self.q_proj, &self.k_proj, &self.v_proj], 0)?;
        let qkv = linear::linear(&h1, &qkv_w)?;
        let normed = match &self.qk_norm {
            Some((q_norm, k_norm)) => Some(attention::qk_norm(
                &qkv,
                q_norm,
                k_norm,
                self.n_heads,
                self.n_kv_heads,
                self.eps,
            )?),
            None => None,
        };
        let attn = attention.forward(normed.as_ref().unwrap_or(&qkv))?;
        let x2 = add(x, &linear::linear(&attn, &self.o_proj)?)?;
        let h2 = train_ops::rms_norm(&x2, &self.post_attention_layernorm, self.eps)?;
        let gate_up_w = Tensor::cat(&[&self.gate_proj, &self.up_proj], 0)?;
        let gate_up = linear::linear(&h2, &gate_up_w)?;
        let act = train_ops::silu_mul_packed(&gate_up)?;
        let out = add(&x2, &linear::linear(&act, &self.down_proj)?)?;
        let tape = LayerTape {
            x: x.clone(),
            h1,
            qkv_w,
            qkv,
            normed,
            attn,
            x2,
            h2,
            gate_up_w,
            gate_up,
            act,
        };
        Ok((out, tape))
    }

    /// The gradient of the layer's input and of its weights (in [`DecoderLayer::weights`]
    /// order) given the gradient `grad` of its output.
    fn backward_taped(
        &self,
        tape: &LayerTape,
        grad: &Tensor,
        attention: &Attention,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let (d_act, d_down) = linear::linear_grads(&tape.act, &self.down_proj, grad)?;
        let d_gate_up = train_ops::silu_mul_packed_grad(&tape.gate_up, &d_act)?;
        let (d_h2, d_gate_up_w) = linear::linear_grads(&tape.h2, &tape.gate_up_w, &d_gate_up)?;
        let (d_x2_norm, d_post) =
            train_ops::rms_norm_grads(&tape.x2, &self.post_attention_layernorm, self.eps, &d_h2)?;
        // The residual: the layer's output gradient, plus the feed-forward branch's.
        let d_x2 = add(grad, &d_x2_norm)?;
        let (d_attn, d_o) = linear::linear_grads(&tape.attn, &self.o_proj, &d_x2)?;
        let d_qkv_in = attention.grad_qkv(tape.normed.as_ref().unwrap_or(&tape.qkv), &d_attn)?;
        let (d_qkv, d_norms) = match &self.qk_norm {
            Some((q_norm, k_norm)) => {
                let (d_qkv, d_q, d_k) = attention::qk_norm_grads(
                    &tape.qkv,
                    q_norm,
                    k_norm,
                    (self.n_heads, self.n_kv_heads),
                    self.eps,
                    &d_qkv_in,
                )?;
                (d_qkv, Some((d_q, d_k)))
            }
            None => (d_qkv_in, None),
        };
        let (d_h1, d_qkv_w) = linear::linear_grads(&tape.h1, &tape.qkv_w, &d_qkv)?;
        let (d_x_norm, d_input) =
            train_ops::rms_norm_grads(&tape.x, &self.input_layernorm, self.eps, &d_h1)?;
        let d_x = add(&d_x2, &d_x_norm)?;

        let (q_rows, kv_rows) = (self.q_proj.dim(0)?, self.k_proj.dim(0)?);
        let gate_rows = self.gate_proj.dim(0)?;
        let mut grads = vec![
            d_input,
            d_qkv_w.narrow(0, 0, q_rows)?,
            d_qkv_w.narrow(0, q_rows, kv_rows)?,
            d_qkv_w.narrow(0, q_rows + kv_rows, kv_rows)?,
            d_o,
        ];
        if let Some((d_q, d_k)) = d_norms {
            grads.extend([d_q, d_k]);
        }
        grads.extend([
            d_post,
            d_gate_up_w.narrow(0, 0, gate_rows)?,
            d_gate_up_w.narrow(0, gate_rows, gate_rows)?,
            d_down,
        ]);
        Ok((d_x, grads))
    }
}

/// The layers' graph node: the embeddings and the end of the attaching chain in, the last
/// layer's output out.
struct Layers {
    /// The layers on detached weights.
    layers: Vec<DecoderLayer>,
    attention: Attention,
    tapes: Vec<LayerTape>,
    /// The output, computed before the node was made; the node's forward hands it over.
    out: Mutex<Option<Vec<f32>>>,
    slots: Slots,
}

impl CustomOp2 for Layers {
    fn name(&self) -> &'static str {
        "decoder-layers"
    }

    fn cpu_fwd(
        &self,
        _s1: &CpuStorage,
        l1: &Layout,
        _s2: &CpuStorage,
        _l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let out = self.out.lock().map_err(|_| poisoned())?.take();
        match out {
            Some(out) if out.len() == l1.shape().elem_count() => {
                Ok((CpuStorage::F32(out), l1.shape().clone()))
            }
            _ => bail!("{}: the layers' output was already taken", self.name()),
        }
    }

    fn bwd(
        &self,
        _x: &Tensor,
        link: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let mut grad = grad_res.detach().contiguous()?;
        let mut end = self.slots.lock().map_err(|_| poisoned())?.len();
        for (layer, tape) in self.layers.iter().zip(&self.tapes).rev() {
            let (d_x, weights) = layer.backward_taped(tape, &grad, &self.attention)?;
            let start = end - weights.len();
            let mut slots = self.slots.lock().map_err(|_| poisoned())?;
            for (slot, g) in slots[start..end].iter_mut().zip(weights) {
                *slot = Some(g);
            }
            end = start;
            grad = d_x;
        }
        Ok((Some(grad), Some(link.zeros_like()?)))
    }
}

/// One attaching node: passes its one-value input through, and hands candle the gradient of
/// `weight` that the layers' backward left in its slot.
struct Attach {
    slots: Slots,
    slot: usize,
}

impl CustomOp2 for Attach {
    fn name(&self) -> &'static str {
        "decoder-layers-attach"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        _s2: &CpuStorage,
        _l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let link = f32s(s1, l1, self.name())?;
        Ok((CpuStorage::F32(link.to_vec()), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _link: &Tensor,
        weight: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = self.slots.lock().map_err(|_| poisoned())?[self.slot].take();
        match grad {
            Some(grad) if grad.dims() == weight.dims() => Ok((Some(grad_res.clone()), Some(grad))),
            Some(grad) => bail!(
                "{}: weight {} has shape {:?} but its gradient {:?}",
                self.name(),
                self.slot,
                weight.dims(),
                grad.dims()
            ),
            None => bail!(
                "{}: the layers' backward left no gradient for weight {}",
                self.name(),
                self.slot
            ),
        }
    }
}

/// `a + b` for two tensors of one shape, on rayon's pool (candle's add runs on the calling
/// thread, while the pool's other worker waits).
fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if a.dims() != b.dims() {
        bail!("decoder layers: adding {:?} to {:?}", b.dims(), a.dims())
    }
    let (a, b) = (a.contiguous()?, b.contiguous()?);
    let mut sum = Vec::new();
    {
        let (a_s, a_l) = a.storage_and_layout();
        let (b_s, b_l) = b.storage_and_layout();
        let xs = cpu_f32s(&a_s, a_l, "decoder layers' residual")?;
        let ys = cpu_f32s(&b_s, b_l, "decoder layers' residual")?;
        xs.par_iter()
            .zip(ys.par_iter())
            .with_min_len(CHUNK)
            .map(|(x, y)| x + y)
            .collect_into_vec(&mut sum);
    }
    Tensor::from_vec(sum, a.shape(), a.device())
}

fn poisoned() -> candle_core::Error {
    candle_core::Error::Msg("decoder layers: a thread panicked while holding the gradients".into())
}
