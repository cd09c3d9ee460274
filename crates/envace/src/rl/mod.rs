//! Training of the policy from labelled samples: the pieces SFT ([`sft`]) and role-wise GRPO
//! ([`grpo`]) share — padded batches with per-token loss weights read from the labels,
//! per-token log-probabilities through the differentiable forward, AdamW with a checkpointable
//! state, global-norm gradient clipping and the warm-up + cosine schedule.

mod adamw_cpu;
pub mod evaluation;
pub mod grpo;
pub mod hooks;
mod packing;
pub mod session;
pub mod sft;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};

use crate::config::{LrSchedule, PolicyRole};
use crate::error::{Error, Result};
use crate::model::{Policy, cpu};
use crate::rollout::{GenerationWindow, Label, Sample};

/// One training sequence: tokens with labels, the roles whose sampled tokens are trained, and
/// a per-sequence advantage (1 for SFT).
#[derive(Debug, Clone, PartialEq)]
pub struct TrainItem {
    /// The role of the sequence.
    pub role: PolicyRole,
    /// Token ids.
    pub tokens: Vec<u32>,
    /// One label per token.
    pub labels: Vec<Label>,
    /// The advantage every trained token of the sequence gets.
    pub advantage: f32,
    /// Where the training window may start at the earliest: the first token after the pinned
    /// head that the model saw when it generated the item's responses (prompts are cut at
    /// `max_prompt_tokens`), so that training scores tokens in the context they were sampled in.
    pub start: usize,
    /// Leading tokens (the system turn and the request) kept in front of the window when a
    /// long sequence is cut in the middle, as generation kept them; 0 for a left cut.
    pub pinned: usize,
}

impl TrainItem {
    /// The items of a rollout sample: one per context the policy generated it in, so that every
    /// sampled token is trained on exactly the context it was sampled from. Turns generated in
    /// the same context (the usual case: nothing was cut) share one item; a turn generated after
    /// the conversation was cut gets an item of its own that ends with that turn, in which the
    /// other turns' tokens are context, never trained. A sample without recorded windows is one
    /// item.
    pub fn of_sample(sample: &Sample, advantage: f32) -> Vec<Self> {
        let whole = |start, pinned| TrainItem {
            role: sample.role,
            tokens: sample.tokens.clone(),
            labels: sample.labels.clone(),
            advantage,
            start,
            pinned,
        };
        let mut contexts: Vec<((usize, usize), Vec<&GenerationWindow>)> = Vec::new();
        for window in &sample.windows {
            let key = (window.context_start, window.pinned);
            match contexts.iter_mut().find(|(k, _)| *k == key) {
                Some((_, windows)) => windows.push(window),
                None => contexts.push((key, vec![window])),
            }
        }
        if contexts.len() <= 1 {
            let (start, pinned) = contexts.first().map_or((0, 0), |(key, _)| *key);
            return vec![whole(start, pinned)];
        }
        contexts
            .into_iter()
            .map(|((start, pinned), windows)| {
                let end = windows
                    .iter()
                    .map(|w| w.end)
                    .max()
                    .unwrap_or(0)
                    .min(sample.tokens.len());
                let own = |pos: usize| windows.iter().any(|w| (w.start..w.end).contains(&pos));
                let labels = sample.labels[..end]
                    .iter()
                    .enumerate()
                    .map(|(pos, &label)| {
                        if label.is_sampled() && !own(pos) {
                            Label::Prompt
                        } else {
                            label
                        }
                    })
                    .collect();
                TrainItem {
                    role: sample.role,
                    tokens: sample.tokens[..end].to_vec(),
                    labels,
                    advantage,
                    start,
                    pinned,
                }
            })
            .collect()
    }

    /// Where the kept tail starts and how many head tokens go in front of it: the last
    /// `max_len` tokens (after the pinned head, when there is one), and none before
    /// [`TrainItem::start`].
    fn cut(&self, max_len: usize) -> (usize, usize) {
        let len = self.tokens.len();
        let head = if self.pinned > 0 && self.pinned < max_len {
            self.pinned
        } else {
            0
        };
        let tail = len.saturating_sub(max_len - head).max(self.start).min(len);
        if head > 0 && tail <= head {
            // Nothing between the head and the tail was cut.
            return (self.start.min(len), 0);
        }
        (tail, head)
    }

    /// The number of tokens [`TrainItem::window`] gives.
    pub fn window_len(&self, max_len: usize) -> usize {
        let (tail, head) = self.cut(max_len);
        head + self.tokens.len() - tail
    }

    /// The tokens the model is trained on: the last `max_len` (left truncation, keeping the
    /// pinned head in front), and none before [`TrainItem::start`] but the head.
    pub fn window(&self, max_len: usize) -> (Cow<'_, [u32]>, Cow<'_, [Label]>) {
        let (tail, head) = self.cut(max_len);
        if head == 0 {
            return (
                Cow::Borrowed(&self.tokens[tail..]),
                Cow::Borrowed(&self.labels[tail..]),
            );
        }
        let mut tokens = self.tokens[..head].to_vec();
        tokens.extend_from_slice(&self.tokens[tail..]);
        let mut labels = self.labels[..head].to_vec();
        labels.extend_from_slice(&self.labels[tail..]);
        (Cow::Owned(tokens), Cow::Owned(labels))
    }

    /// Number of trained (sampled) tokens within `max_len`.
    pub fn n_trained(&self, max_len: usize, roles: &[PolicyRole]) -> usize {
        if !roles.contains(&self.role) {
            return 0;
        }
        let (_, labels) = self.window(max_len);
        labels.iter().skip(1).filter(|l| l.is_sampled()).count()
    }
}

/// A right-padded batch: inputs `(b, l)`, next-token targets `(b, l)`, attention mask
/// `(b, l)`, loss weight `(b, l)` (1 on trained target tokens) and advantages `(b, l)`.
#[derive(Debug)]
pub struct PaddedBatch {
    /// Input ids.
    pub input: Tensor,
    /// The token each position predicts.
    pub targets: Tensor,
    /// 1 for real tokens, 0 for padding.
    pub attention: Tensor,
    /// 1 where the target token is trained.
    pub weight: Tensor,
    /// The advantage at each position.
    pub advantage: Tensor,
    /// Trained tokens in the batch.
    pub n_trained: usize,
    /// The flat index (`row × l + position`) of each trained token, `(n_trained,)` u32.
    pub trained_rows: Tensor,
    /// Where rows begin with the same tokens and [`pad_batch_packed`] found that running the
    /// shared tokens once saves work: the layout that does, planned once with the batch.
    shared: Option<SharedPrefixes>,
}

/// The rows of a [`PaddedBatch`] laid out to run their shared first tokens once (`packing`):
/// what `Policy::train_token_stats_laid_out` takes, the ids and trained indices on the batch's
/// device, the positions and the mask on the host (the model uploads them with each forward).
#[derive(Debug)]
struct SharedPrefixes {
    /// Packed token ids, `(n_rows, width)`.
    input: Tensor,
    /// Each packed token's position in its own sequence.
    positions: Vec<u32>,
    /// Which keys each packed query sees, `n_rows × width × width`.
    allowed: Vec<u8>,
    /// The packed flat index of each trained token, `(n_trained,)` u32.
    trained_rows: Tensor,
}

impl PaddedBatch {
    /// Packed rows the batch's rows run as, or `None` where they run as they are.
    pub fn n_packed_rows(&self) -> Option<usize> {
        self.shared
            .as_ref()
            .and_then(|shared| shared.input.dims().first().copied())
    }
}

/// Builds the padded batch of `items`: a position is trained when its target token is
/// sampled (`Act` or `Rehearse`) and the item's role is in `roles`. Every row runs as it is;
/// [`pad_batch_packed`] lets rows that begin alike share those tokens.
pub fn pad_batch(
    items: &[&TrainItem],
    max_len: usize,
    roles: &[PolicyRole],
    device: &Device,
) -> Result<PaddedBatch> {
    pad(items, max_len, roles, device, None)
}

/// [`pad_batch`] for `policy`, with the layout that runs the first tokens that rows share
/// once (a GRPO group's completions of one prompt) where `policy`'s sizes say that saves
/// work; [`token_logprobs`] then runs that layout, for this policy and any other of its
/// architecture (the reference model).
pub fn pad_batch_packed(
    items: &[&TrainItem],
    max_len: usize,
    roles: &[PolicyRole],
    policy: &Policy,
) -> Result<PaddedBatch> {
    let cost = packing::PackCost::of(policy.config());
    pad(items, max_len, roles, policy.device(), Some(cost))
}

/// The body of [`pad_batch`] and [`pad_batch_packed`].
fn pad(
    items: &[&TrainItem],
    max_len: usize,
    roles: &[PolicyRole],
    device: &Device,
    packing: Option<packing::PackCost>,
) -> Result<PaddedBatch> {
    let context = "training batch";
    let fail = |e: candle_core::Error| Error::candle(context, e);
    let width = items
        .iter()
        .map(|item| item.window_len(max_len).saturating_sub(1))
        .max()
        .unwrap_or(0)
        .max(1);
    let b = items.len();
    let mut input = vec![0u32; b * width];
    let mut targets = vec![0u32; b * width];
    let mut attention = vec![0u8; b * width];
    let mut weight = vec![0f32; b * width];
    let mut advantage = vec![0f32; b * width];
    let mut trained_rows = Vec::new();
    let mut lens = Vec::with_capacity(b);
    for (row, item) in items.iter().enumerate() {
        let (tokens, labels) = item.window(max_len);
        let trained_role = roles.contains(&item.role);
        lens.push(tokens.len().saturating_sub(1));
        for pos in 0..tokens.len().saturating_sub(1) {
            let at = row * width + pos;
            input[at] = tokens[pos];
            targets[at] = tokens[pos + 1];
            attention[at] = 1;
            if trained_role && labels[pos + 1].is_sampled() {
                weight[at] = 1.0;
                trained_rows.push(at as u32);
            }
            advantage[at] = item.advantage;
        }
    }
    let n_trained = trained_rows.len();
    let shared = match packing {
        Some(cost) if b > 1 && n_trained > 0 => {
            shared_prefixes(&input, &lens, width, &trained_rows, cost, device).map_err(fail)?
        }
        _ => None,
    };
    Ok(PaddedBatch {
        shared,
        input: Tensor::from_vec(input, (b, width), device).map_err(fail)?,
        targets: Tensor::from_vec(targets, (b, width), device).map_err(fail)?,
        attention: Tensor::from_vec(attention, (b, width), device).map_err(fail)?,
        weight: Tensor::from_vec(weight, (b, width), device).map_err(fail)?,
        advantage: Tensor::from_vec(advantage, (b, width), device).map_err(fail)?,
        n_trained,
        trained_rows: Tensor::from_vec(trained_rows, n_trained, device).map_err(fail)?,
    })
}

/// Log-probability `(b, l)` of each trained target token and the entropy `(b, l)` of the
/// next-token distribution it is drawn from, through the differentiable forward; both are 0
/// at the positions the batch does not train (`weight` 0), whose logits are never computed:
/// the vocabulary head and its softmax run over the trained tokens only. Rows that the batch
/// was planned to run sharing their first tokens ([`pad_batch_packed`]) run that way.
/// `entropy_grad`: whether the caller's loss differentiates the entropy (the backward is
/// cheaper when it does not; see `Policy::train_token_stats`).
pub fn token_logprobs(
    policy: &Policy,
    batch: &PaddedBatch,
    entropy_grad: bool,
) -> Result<(Tensor, Tensor)> {
    let fail = |e: candle_core::Error| Error::candle("token log-probabilities", e);
    let (b, l) = batch.input.dims2().map_err(fail)?;
    let zeros = || Tensor::zeros(b * l, DType::F32, policy.device());
    if batch.n_trained == 0 {
        let zeros = zeros().and_then(|z| z.reshape((b, l))).map_err(fail)?;
        return Ok((zeros.clone(), zeros));
    }
    let rows = &batch.trained_rows;
    let targets = batch
        .targets
        .flatten_all()
        .and_then(|t| t.index_select(rows, 0))
        .map_err(fail)?;
    let (logp, entropy) = match &batch.shared {
        // Rows that share their first tokens run once through them (`packing`).
        Some(shared) => policy.train_token_stats_laid_out(
            &shared.input,
            shared.positions.clone(),
            shared.allowed.clone(),
            &shared.trained_rows,
            &targets,
            entropy_grad,
        )?,
        None => policy.train_token_stats(
            &batch.input,
            Some(&batch.attention),
            Some(rows),
            &targets,
            entropy_grad,
        )?,
    };
    let spread = |values: Tensor| -> candle_core::Result<Tensor> {
        zeros()?.index_add(rows, &values, 0)?.reshape((b, l))
    };
    Ok((spread(logp).map_err(fail)?, spread(entropy).map_err(fail)?))
}

/// The layout of a batch's rows (`input`, rows of `l`, row `r`'s tokens its first `lens[r]`)
/// that runs their shared first tokens once, with the packed flat index of each of
/// `trained_rows`; `None` where no packing saves work.
fn shared_prefixes(
    input: &[u32],
    lens: &[usize],
    l: usize,
    trained_rows: &[u32],
    cost: packing::PackCost,
    device: &Device,
) -> candle_core::Result<Option<SharedPrefixes>> {
    let Some(packed) = packing::pack_shared_prefixes(input, lens, l, cost) else {
        return Ok(None);
    };
    let rows: Vec<u32> = trained_rows
        .iter()
        .map(|&flat| packed.place[flat as usize])
        .collect();
    Ok(Some(SharedPrefixes {
        input: Tensor::from_vec(packed.input, (packed.n_rows, packed.width), device)?,
        positions: packed.positions,
        allowed: packed.allowed,
        trained_rows: Tensor::from_vec(rows, trained_rows.len(), device)?,
    }))
}

/// Adds `grads` of the policy's parameters into `total`.
pub fn accumulate(total: &mut Option<GradStore>, grads: GradStore, policy: &Policy) -> Result<()> {
    match total {
        None => *total = Some(grads),
        Some(acc) => {
            for var in policy.vars().values() {
                if let Some(g) = grads.get(var.as_tensor()) {
                    let sum = match acc.get(var.as_tensor()) {
                        Some(prev) => {
                            (prev + g).map_err(|e| Error::candle("gradient accumulation", e))?
                        }
                        None => g.clone(),
                    };
                    acc.insert(var.as_tensor(), sum);
                }
            }
        }
    }
    Ok(())
}

/// The learning rate at `step` (0-based): linear warm-up over `warmup_steps` to `lr`, then
/// constant or cosine decay to `lr × min_lr_ratio` at `n_steps`.
pub fn learning_rate(
    lr: f64,
    schedule: LrSchedule,
    warmup_steps: u32,
    min_lr_ratio: f64,
    step: u32,
    n_steps: u32,
) -> f64 {
    if step < warmup_steps {
        return lr * f64::from(step + 1) / f64::from(warmup_steps);
    }
    match schedule {
        LrSchedule::Constant => lr,
        LrSchedule::Cosine => {
            let span = n_steps.saturating_sub(warmup_steps).max(1);
            let progress = (f64::from(step - warmup_steps) / f64::from(span)).min(1.0);
            let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
            lr * (min_lr_ratio + (1.0 - min_lr_ratio) * cosine)
        }
    }
}

/// AdamW with decoupled weight decay, whose moments save and load with a checkpoint.
#[derive(Debug)]
pub struct AdamW {
    vars: Vec<(String, Var)>,
    first: Vec<Tensor>,
    second: Vec<Tensor>,
    n_updates: u64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    weight_decay: f64,
}

impl AdamW {
    /// An optimizer over the policy's trainable parameters, moments at zero.
    pub fn new(policy: &Policy, weight_decay: f64) -> Result<Self> {
        let vars: Vec<(String, Var)> = policy
            .vars()
            .iter()
            .map(|(name, var)| (name.clone(), var.clone()))
            .collect();
        let zeros = |v: &Var| v.as_tensor().zeros_like();
        let first = vars
            .iter()
            .map(|(_, v)| zeros(v))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(|e| Error::candle("optimizer", e))?;
        // Separate storage for each moment: the CPU step updates them in place.
        let second = vars
            .iter()
            .map(|(_, v)| zeros(v))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(|e| Error::candle("optimizer", e))?;
        Ok(AdamW {
            vars,
            first,
            second,
            n_updates: 0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
        })
    }

    /// Updates taken so far.
    pub fn n_updates(&self) -> u64 {
        self.n_updates
    }

    /// The decoupled weight decay of each step.
    pub fn weight_decay(&self) -> f64 {
        self.weight_decay
    }

    /// Changes the weight decay (a phase change that keeps the moments).
    pub fn set_weight_decay(&mut self, weight_decay: f64) {
        self.weight_decay = weight_decay;
    }

    /// Clips the gradients to global norm `max_norm` (scaled by `grad_scale` first) and takes
    /// one step at `lr`. Returns the global gradient norm before clipping.
    pub fn step(
        &mut self,
        grads: &GradStore,
        lr: f64,
        max_norm: f64,
        grad_scale: f64,
    ) -> Result<f64> {
        let fail = |e: candle_core::Error| Error::candle("optimizer step", e);
        let grad_of = |var: &Var| grads.get(var.as_tensor());
        let mut squares = 0f64;
        for (_, var) in &self.vars {
            if let Some(g) = grad_of(var) {
                squares += if cpu::applies(g) {
                    adamw_cpu::sum_squares(g).map_err(fail)?
                } else {
                    f64::from(
                        g.to_dtype(DType::F32)
                            .and_then(|g| g.sqr()?.sum_all()?.to_scalar::<f32>())
                            .map_err(fail)?,
                    )
                };
            }
        }
        let norm = squares.sqrt() * grad_scale.abs();
        let clip = if max_norm > 0.0 && norm > max_norm {
            max_norm / (norm + 1e-6)
        } else {
            1.0
        };
        self.n_updates += 1;
        let t = self.n_updates as i32;
        let correction1 = 1.0 - self.beta1.powi(t);
        let correction2 = 1.0 - self.beta2.powi(t);
        let factor = grad_scale * clip;
        for (idx, (_, var)) in self.vars.iter().enumerate() {
            let Some(g) = grad_of(var) else { continue };
            let (first, second) = (&self.first[idx], &self.second[idx]);
            if adamw_cpu::adamw_applies(var.as_tensor(), first, second, g) {
                let step = adamw_cpu::AdamWStep {
                    beta1: self.beta1 as f32,
                    beta2: self.beta2 as f32,
                    eps: self.eps as f32,
                    lr: lr as f32,
                    weight_decay: self.weight_decay as f32,
                    correction1: correction1 as f32,
                    correction2: correction2 as f32,
                    grad_factor: factor as f32,
                };
                adamw_cpu::adamw_in_place(var.as_tensor(), first, second, g, step).map_err(fail)?;
                continue;
            }
            let dtype = var.dtype();
            let g = (g.to_dtype(DType::F32).map_err(fail)? * factor).map_err(fail)?;
            let m = ((first * self.beta1).map_err(fail)?
                + (&g * (1.0 - self.beta1)).map_err(fail)?)
            .map_err(fail)?;
            let v = ((second * self.beta2).map_err(fail)?
                + (g.sqr().map_err(fail)? * (1.0 - self.beta2)).map_err(fail)?)
            .map_err(fail)?;
            let m_hat = (&m / correction1).map_err(fail)?;
            let v_hat = (&v / correction2).map_err(fail)?;
            let update =
                (m_hat / (v_hat.sqrt().map_err(fail)? + self.eps).map_err(fail)?).map_err(fail)?;
            let theta = var.as_tensor().to_dtype(DType::F32).map_err(fail)?;
            let decayed = (&theta * (1.0 - lr * self.weight_decay)).map_err(fail)?;
            let next = (decayed - (update * lr).map_err(fail)?).map_err(fail)?;
            var.set(&next.to_dtype(dtype).map_err(fail)?)
                .map_err(fail)?;
            self.first[idx] = m;
            self.second[idx] = v;
        }
        Ok(norm)
    }

    /// Saves the moments and the update count to `path` (safetensors).
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut tensors: BTreeMap<String, Tensor> = BTreeMap::new();
        for (idx, (name, _)) in self.vars.iter().enumerate() {
            tensors.insert(format!("m.{name}"), self.first[idx].clone());
            tensors.insert(format!("v.{name}"), self.second[idx].clone());
        }
        let count = Tensor::new(&[self.n_updates as f64], &Device::Cpu)
            .map_err(|e| Error::candle("optimizer state", e))?;
        tensors.insert("n_updates".to_owned(), count);
        candle_core::safetensors::save(&tensors.into_iter().collect(), path)
            .map_err(|e| Error::candle(format!("saving {}", path.display()), e))
    }

    /// Loads moments saved by [`AdamW::save`] for the same parameters.
    pub fn load(&mut self, path: &Path) -> Result<()> {
        let device = self
            .vars
            .first()
            .map_or(Device::Cpu, |(_, v)| v.device().clone());
        let context = format!("loading optimizer state {}", path.display());
        let tensors = candle_core::safetensors::load(path, &device)
            .map_err(|e| Error::candle(&context, e))?;
        let get = |key: &str| {
            tensors.get(key).cloned().ok_or_else(|| Error::Weights {
                path: path.to_path_buf(),
                message: format!("has no tensor {key}"),
            })
        };
        for (idx, (name, _)) in self.vars.iter().enumerate() {
            self.first[idx] = get(&format!("m.{name}"))?;
            self.second[idx] = get(&format!("v.{name}"))?;
        }
        let count = get("n_updates")?
            .to_vec1::<f64>()
            .map_err(|e| Error::candle(&context, e))?;
        self.n_updates = count.first().copied().unwrap_or(0.0) as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows 0, 1 and 3 share a 12-token prompt, row 4 its first 8 tokens, row 2 nothing; the
    /// trained positions include shared ones, which several rows then ask of one packed place.
    #[test]
    fn packed_rows_give_the_log_probabilities_and_gradients_of_rows_run_apart() {
        let tiny = crate::config::TinyModelConfig {
            hidden_size: 64,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: 2,
            intermediate_size: 128,
            vocab_size: 97,
            ..crate::config::TinyModelConfig::default()
        };
        let cfg = crate::model::TransformerConfig::from_tiny(&tiny).unwrap();
        let policy = Policy::init(cfg, 5, &Device::Cpu, DType::F32).unwrap();
        let mut rng = crate::rng::Rng::new(9);
        let mut draw =
            |n: usize| -> Vec<u32> { (0..n).map(|_| 1 + (rng.uniform() * 95.0) as u32).collect() };
        let prompt = draw(12);
        let with = |shared: &[u32], own: Vec<u32>| [shared.to_vec(), own].concat();
        let sequences = [
            with(&prompt, draw(5)),
            with(&prompt, draw(7)),
            draw(9),
            with(&prompt, draw(3)),
            with(&prompt[..8], draw(6)),
        ];
        // Positions 6 on are trained (their targets, tokens 7 on, are the policy's), so rows 0,
        // 1 and 3 train positions inside their shared prompt.
        let items: Vec<TrainItem> = sequences
            .iter()
            .map(|seq| TrainItem {
                role: PolicyRole::Act,
                tokens: seq.clone(),
                labels: (0..seq.len())
                    .map(|t| if t < 7 { Label::Prompt } else { Label::Act })
                    .collect(),
                advantage: 1.0,
                start: 0,
                pinned: 0,
            })
            .collect();
        let refs: Vec<&TrainItem> = items.iter().collect();
        let dev = Device::Cpu;
        let roles = [PolicyRole::Act];
        let batch = pad_batch_packed(&refs, 64, &roles, &policy).unwrap();
        let apart = pad_batch(&refs, 64, &roles, &dev).unwrap();
        assert_eq!(apart.n_packed_rows(), None);
        let n_rows = batch.n_packed_rows().expect("the rows are packed");
        assert!(
            (2..=3).contains(&n_rows),
            "rows 0, 1 and 3 in one packed row (row 4 too if it pays), row 2 alone: {n_rows} rows"
        );
        let n_trained = batch.n_trained;
        assert_eq!(n_trained, apart.n_trained);

        // Packed against the rows apart (what `token_logprobs` runs for each batch), gathered
        // alike.
        let rows = &batch.trained_rows;
        let gather = |t: Tensor| t.flatten_all().unwrap().index_select(rows, 0).unwrap();
        let (logp, entropy) = token_logprobs(&policy, &batch, true).unwrap();
        let (logp, entropy) = (gather(logp), gather(entropy));
        let (logp_apart, entropy_apart) = token_logprobs(&policy, &apart, true).unwrap();
        let (logp_apart, entropy_apart) = (gather(logp_apart), gather(entropy_apart));
        let max_diff = |a: &Tensor, b: &Tensor| -> f32 {
            (a - b)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar()
                .unwrap()
        };
        assert!(max_diff(&logp, &logp_apart) < 1e-5);
        assert!(max_diff(&entropy, &entropy_apart) < 1e-5);

        // The same gradient for every parameter from a loss weighting each entry differently.
        let w1: Vec<f32> = (0..n_trained).map(|i| 0.5 + (i % 7) as f32 * 0.3).collect();
        let w2: Vec<f32> = (0..n_trained).map(|i| 0.2 - (i % 5) as f32 * 0.1).collect();
        let w1 = Tensor::from_vec(w1, n_trained, &dev).unwrap();
        let w2 = Tensor::from_vec(w2, n_trained, &dev).unwrap();
        let loss = |lp: &Tensor, ent: &Tensor| {
            ((lp * &w1).unwrap().sum_all().unwrap() + (ent * &w2).unwrap().sum_all().unwrap())
                .unwrap()
        };
        let packed_grads = loss(&logp, &entropy).backward().unwrap();
        let apart_grads = loss(&logp_apart, &entropy_apart).backward().unwrap();
        for (name, var) in policy.vars() {
            let (got, want) = (
                packed_grads.get(var.as_tensor()).unwrap(),
                apart_grads.get(var.as_tensor()).unwrap(),
            );
            let scale = want
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            let diff = max_diff(got, want);
            assert!(diff <= 1e-4 * scale.max(1e-3), "{name}: {diff} of {scale}");
        }
    }

    #[test]
    fn schedule_warms_up_then_decays() {
        let lr = |step| learning_rate(1.0, LrSchedule::Cosine, 4, 0.1, step, 14);
        assert_eq!(lr(0), 0.25);
        assert_eq!(lr(3), 1.0);
        assert_eq!(lr(4), 1.0);
        assert!((lr(9) - 0.55).abs() < 1e-12);
        assert!((lr(14) - 0.1).abs() < 1e-12);
        assert_eq!(
            learning_rate(2.0, LrSchedule::Constant, 0, 0.0, 50, 10),
            2.0
        );
    }

    #[test]
    fn batches_weight_only_sampled_targets_of_trained_roles() {
        let item = TrainItem {
            role: PolicyRole::Act,
            tokens: vec![1, 2, 3, 4, 5, 6],
            labels: vec![
                Label::Prompt,
                Label::Prompt,
                Label::Act,
                Label::Injected,
                Label::Act,
                Label::Act,
            ],
            advantage: 0.5,
            start: 0,
            pinned: 0,
        };
        let rehearse = TrainItem {
            role: PolicyRole::Rehearse,
            tokens: vec![7, 8, 9],
            labels: vec![Label::Prompt, Label::Rehearse, Label::Rehearse],
            advantage: -1.0,
            start: 0,
            pinned: 0,
        };
        let batch = pad_batch(
            &[&item, &rehearse],
            100,
            &[PolicyRole::Act, PolicyRole::Rehearse],
            &Device::Cpu,
        )
        .expect("batch");
        let weight = batch.weight.to_vec2::<f32>().expect("weights");
        assert_eq!(weight[0], [0.0, 1.0, 0.0, 1.0, 1.0]);
        assert_eq!(weight[1], [1.0, 1.0, 0.0, 0.0, 0.0]);
        assert_eq!(batch.n_trained, 5);
        let attention = batch.attention.to_vec2::<u8>().expect("mask");
        assert_eq!(attention[1], [1, 1, 0, 0, 0]);
        let frozen_act = pad_batch(
            &[&item, &rehearse],
            100,
            &[PolicyRole::Rehearse],
            &Device::Cpu,
        )
        .expect("batch");
        assert_eq!(frozen_act.n_trained, 2);
        let truncated = pad_batch(&[&item], 3, &[PolicyRole::Act], &Device::Cpu).expect("batch");
        // The window is tokens 4, 5, 6: targets 5 and 6 are both Act.
        assert_eq!(truncated.weight.to_vec2::<f32>().expect("w")[0], [1.0, 1.0]);
        // A generation that saw the context from token 2 on: tokens 3.. only, even with room.
        let cut = TrainItem { start: 2, ..item };
        assert_eq!(cut.window(100).0.as_ref(), [3, 4, 5, 6]);
        assert_eq!(cut.window(3).0.as_ref(), [4, 5, 6]);
        // A generation that kept tokens 1, 2 in front of 5, 6 (the middle cut): the same here.
        let middle = TrainItem {
            start: 4,
            pinned: 2,
            ..cut.clone()
        };
        assert_eq!(middle.window(100).0.as_ref(), [1, 2, 5, 6]);
        assert_eq!(
            middle.window(100).1.as_ref(),
            [Label::Prompt, Label::Prompt, Label::Act, Label::Act]
        );
        assert_eq!(middle.window_len(100), 4);
        // A tighter budget keeps the head and fewer of the latest tokens.
        assert_eq!(middle.window(3).0.as_ref(), [1, 2, 6]);
        let batch = pad_batch(&[&cut], 100, &[PolicyRole::Act], &Device::Cpu).expect("batch");
        assert_eq!(
            batch.weight.to_vec2::<f32>().expect("w")[0],
            [0.0, 1.0, 1.0]
        );
    }
}
