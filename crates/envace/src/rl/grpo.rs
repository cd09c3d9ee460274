//! Role-wise GRPO with world rehearsal (DESIGN.md §1 and §4): the explicit training loop,
//! one step = rollouts → advantages → loss → backward → optimizer step → log → checkpoint.
//!
//! # Configuration (`[rl]`)
//!
//! `n_steps` steps; each takes `batch_size` prompts (tasks) and runs `group_size` episodes of
//! each with the policy acting and tool calls answered as `[env].tool_response_mode` says.
//! Advantages are `A = r − mean(r)` over the samples of the same prompt and role
//! (`advantage_baseline = "role_wise"`) or of the same prompt (`"pooled"`), divided by the
//! group's standard deviation when `divide_by_std`. The loss per trained token is the PPO-clip
//! surrogate with `clip_ratio_low` / `clip_ratio_high`, plus `kl_coef` × the KL estimator
//! `kl_type` against the frozen reference policy, minus `entropy_coef` × the entropy; it is
//! averaged over all trained tokens of the step (token-mean). Micro-batches of
//! `micro_batch_size` sequences accumulate gradients, so memory is bounded by one micro-batch.
//! AdamW with `weight_decay`, global-norm clipping at `grad_clip`, warm-up over
//! `warmup_steps` then `lr_schedule`. Roles in `frozen_roles` are not trained.
//!
//! # How it departs from the paper
//!
//! - One optimizer update per step (verl's single PPO epoch with the whole batch as one
//!   mini-batch): the old policy equals the current one when the loss is computed, so the
//!   ratio is 1 and clipping never binds; the clip bounds still apply if a config grows the
//!   update count later. Old log-probabilities are therefore recomputed by the training
//!   forward, never taken from the sampler.
//! - A group whose prompt and role have a single sample gets advantage 0 (no baseline).
//! - Sequences longer than `max_prompt_tokens + max_response_tokens` are trained on their last
//!   tokens (left truncation), as generation saw them.
//! - Masked episodes (judge or environment failure) contribute no samples.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use candle_core::Tensor;

use crate::config::{AdvantageBaseline, KlType, RehearsalMode, RlConfig, Role};
use crate::controller::{Event, Flow, Hooks};
use crate::error::{Error, Result};
use crate::fidelity::{self, Scores};
use crate::model::{Policy, Sampling};
use crate::rollout::{
    EpisodeRecord, EpisodeSpec, Label, PolicyGenerator, ResponseMode, RolloutSettings, Simulator,
    record_episodes, run_batch,
};
use crate::store::{Batch, EvalRow, now_secs};
use crate::tasks::{self, GenTask};

use super::session::{Phase, Session};
use super::{AdamW, PaddedBatch, TrainItem, accumulate, learning_rate, pad_batch, token_logprobs};

/// Advantages of `(group, role, reward)` rows: each row's reward minus the mean over its
/// baseline set (same group and role, or same group when pooled), divided by that set's
/// sample standard deviation (+1e-6) when `divide_by_std`. A set of one row gives 0.
pub fn advantages(
    rows: &[(&str, Role, f64)],
    baseline: AdvantageBaseline,
    divide_by_std: bool,
) -> Vec<f64> {
    let key = |row: &(&str, Role, f64)| match baseline {
        AdvantageBaseline::RoleWise => (row.0.to_owned(), Some(row.1)),
        AdvantageBaseline::Pooled => (row.0.to_owned(), None),
    };
    let mut sets: BTreeMap<(String, Option<Role>), Vec<f64>> = BTreeMap::new();
    for row in rows {
        sets.entry(key(row)).or_default().push(row.2);
    }
    let stats: BTreeMap<(String, Option<Role>), (f64, f64, usize)> = sets
        .into_iter()
        .map(|(k, rewards)| {
            let n = rewards.len();
            let mean = rewards.iter().sum::<f64>() / n as f64;
            let var = if n > 1 {
                rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1) as f64
            } else {
                0.0
            };
            (k, (mean, var.sqrt(), n))
        })
        .collect();
    rows.iter()
        .map(|row| {
            let (mean, std, n) = stats[&key(row)];
            if n < 2 {
                return 0.0;
            }
            let centred = row.2 - mean;
            if divide_by_std {
                centred / (std + 1e-6)
            } else {
                centred
            }
        })
        .collect()
}

/// The training items of a step's episodes: every sample of every scored episode, with its
/// advantage. Returns the items and the per-item `(role, reward, advantage)`.
pub fn items_of(episodes: &[EpisodeRecord], rl: &RlConfig) -> Vec<(TrainItem, f64)> {
    let mut rows = Vec::new();
    let mut refs = Vec::new();
    for episode in episodes {
        let Some(reward) = episode.reward.filter(|_| !episode.masked()) else {
            continue;
        };
        for sample in &episode.samples {
            rows.push((episode.group.as_str(), sample.role, reward));
            refs.push(sample);
        }
    }
    let advantages = advantages(&rows, rl.advantage_baseline, rl.divide_by_std);
    refs.into_iter()
        .zip(rows.iter().zip(advantages))
        .map(|(sample, (row, advantage))| (TrainItem::from_sample(sample, advantage as f32), row.2))
        .collect()
}

/// Per-role sums of a micro-batch, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RoleSums {
    /// Trained tokens.
    pub n_tokens: f64,
    /// Sum of the KL estimate over trained tokens.
    pub kl: f64,
    /// Sum of the entropy over trained tokens.
    pub entropy: f64,
    /// Trained tokens whose ratio was clipped.
    pub clipped: f64,
}

/// The loss of one micro-batch, already divided by `total_tokens` (the trained tokens of the
/// whole step), and the per-row sums for metrics. `reference` gives the KL anchor.
pub fn micro_batch_loss(
    policy: &Policy,
    reference: &Policy,
    batch: &PaddedBatch,
    rl: &RlConfig,
    total_tokens: usize,
) -> Result<(Tensor, Vec<RoleSums>)> {
    let (logp, entropy) = token_logprobs(policy, batch)?;
    let reference_logp = if rl.kl_type == KlType::None || rl.kl_coef == 0.0 {
        None
    } else {
        Some(token_logprobs(reference, batch)?.0.detach())
    };
    let run = || -> candle_core::Result<(Tensor, Vec<RoleSums>)> {
        let old = logp.detach();
        let ratio = (&logp - &old)?.exp()?;
        let adv = &batch.advantage;
        let unclipped = (&ratio * adv)?;
        let clipped_ratio = ratio.clamp(1.0 - rl.clip_ratio_low, 1.0 + rl.clip_ratio_high)?;
        let clipped = (&clipped_ratio * adv)?;
        let mut per_token = unclipped.minimum(&clipped)?.neg()?;
        let kl = match &reference_logp {
            Some(reference) => {
                let log_ratio = (&logp - reference)?;
                let kl = match rl.kl_type {
                    KlType::K1 => log_ratio,
                    KlType::K2 => (log_ratio.sqr()? * 0.5)?,
                    KlType::K3 | KlType::None => {
                        let x = log_ratio.neg()?;
                        ((x.exp()? - &x)? - 1.0)?
                    }
                };
                per_token = (per_token + (&kl * rl.kl_coef)?)?;
                Some(kl)
            }
            None => None,
        };
        if rl.entropy_coef != 0.0 {
            per_token = (per_token - (&entropy * rl.entropy_coef)?)?;
        }
        let loss = ((per_token * &batch.weight)?.sum_all()? / total_tokens.max(1) as f64)?;
        let row_sum = |t: &Tensor| -> candle_core::Result<Vec<f32>> {
            (t.detach() * &batch.weight)?.sum(1)?.to_vec1::<f32>()
        };
        let n_tokens = batch.weight.sum(1)?.to_vec1::<f32>()?;
        let kl_rows = match &kl {
            Some(kl) => row_sum(kl)?,
            None => vec![0.0; n_tokens.len()],
        };
        let entropy_rows = row_sum(&entropy)?;
        let outside = ratio
            .detach()
            .ne(&clipped_ratio.detach())?
            .to_dtype(candle_core::DType::F32)?;
        let clipped_rows = row_sum(&outside)?;
        let sums = (0..n_tokens.len())
            .map(|row| RoleSums {
                n_tokens: f64::from(n_tokens[row]),
                kl: f64::from(kl_rows[row]),
                entropy: f64::from(entropy_rows[row]),
                clipped: f64::from(clipped_rows[row]),
            })
            .collect();
        Ok((loss, sums))
    };
    run().map_err(|e| Error::candle("GRPO loss", e))
}

/// Metrics of a step per role, from its items and the loss sums: reward, advantage mean and
/// std, KL, entropy, clip fraction, response length (sampled tokens per sequence).
pub fn role_metrics(items: &[(TrainItem, f64)], sums: &[RoleSums]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for role in [Role::Act, Role::Rehearse] {
        let name = match role {
            Role::Act => "act",
            Role::Rehearse => "rehearse",
        };
        let picked: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].0.role == role)
            .collect();
        if picked.is_empty() {
            continue;
        }
        let n = picked.len() as f64;
        let mean = |f: &dyn Fn(usize) -> f64| picked.iter().map(|&i| f(i)).sum::<f64>() / n;
        let adv_mean = mean(&|i| f64::from(items[i].0.advantage));
        let adv_std = mean(&|i| (f64::from(items[i].0.advantage) - adv_mean).powi(2)).sqrt();
        let tokens: f64 = picked
            .iter()
            .filter_map(|&i| sums.get(i))
            .map(|s| s.n_tokens)
            .sum();
        let per_token = |f: &dyn Fn(&RoleSums) -> f64| {
            if tokens > 0.0 {
                picked
                    .iter()
                    .filter_map(|&i| sums.get(i))
                    .map(f)
                    .sum::<f64>()
                    / tokens
            } else {
                0.0
            }
        };
        out.insert(format!("{name}/reward"), mean(&|i| items[i].1));
        out.insert(format!("{name}/advantage_mean"), adv_mean);
        out.insert(format!("{name}/advantage_std"), adv_std);
        out.insert(format!("{name}/kl"), per_token(&|s| s.kl));
        out.insert(format!("{name}/entropy"), per_token(&|s| s.entropy));
        out.insert(format!("{name}/clip_fraction"), per_token(&|s| s.clipped));
        out.insert(
            format!("{name}/response_length"),
            mean(&|i| {
                items[i]
                    .0
                    .labels
                    .iter()
                    .filter(|l| matches!(l, Label::Act | Label::Rehearse))
                    .count() as f64
            }),
        );
        out.insert(format!("{name}/n_samples"), n);
    }
    out
}

/// The rollout settings of step `step`: the experiment's, with a seed derived from the step.
pub(crate) fn step_settings(session: &Session, step: u32) -> RolloutSettings {
    let mut settings = RolloutSettings::from_config(&session.config);
    settings.seed = session
        .config
        .run
        .seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(u64::from(step) + 1);
    settings
}

/// The tasks of step `step`: `batch_size` consecutive tasks of the pool, wrapping around.
fn step_tasks(pool: &[Arc<GenTask>], step: u32, batch_size: usize) -> Vec<Arc<GenTask>> {
    (0..batch_size)
        .filter_map(|slot| {
            pool.get((step as usize * batch_size + slot) % pool.len().max(1))
                .cloned()
        })
        .collect()
}

/// Evaluates the policy on held-out tasks: greedy, real environment; returns the mean score
/// and the success rate (score 1).
pub fn evaluate(session: &Session, tasks: &[Arc<GenTask>], step: u32) -> Result<(f64, f64)> {
    Ok(eval_summary(&evaluation_episodes(session, tasks, step)?))
}

/// The episodes of a held-out evaluation (greedy, real environment), in task order. With
/// `[rehearsal].mode` on, each committed attempt follows the policy's private rehearsal of the
/// task (`eval::rehearsal`).
pub fn evaluation_episodes(
    session: &Session,
    tasks: &[Arc<GenTask>],
    step: u32,
) -> Result<Vec<EpisodeRecord>> {
    let rehearsal = &session.config.rehearsal;
    match rehearsal.mode {
        RehearsalMode::Off => committed_episodes(session, tasks, step, None),
        style => {
            let budget = rehearsal.budget as usize;
            crate::eval::rehearsal::rehearsed_episodes(session, tasks, step, style, budget)
        }
    }
}

/// The committed (greedy, real-environment) attempts at `tasks`, each with its rehearsal
/// memory when `memories` is given (one per task).
pub fn committed_episodes(
    session: &Session,
    tasks: &[Arc<GenTask>],
    step: u32,
    memories: Option<&[String]>,
) -> Result<Vec<EpisodeRecord>> {
    let mut settings = step_settings(session, step);
    settings.mode = ResponseMode::Real;
    settings.fidelity = false;
    episodes_of(session, tasks, 1, &settings, Sampling::greedy(), memories)
}

/// `copies` episodes of each task (task-major, 32 episodes per batch at most), each with its
/// task's memory when `memories` is given (one per task); few-shot examples come from a copy
/// of the session's cache, which the episodes do not change.
pub(crate) fn episodes_of(
    session: &Session,
    tasks: &[Arc<GenTask>],
    copies: usize,
    settings: &RolloutSettings,
    sampling: Sampling,
    memories: Option<&[String]>,
) -> Result<Vec<EpisodeRecord>> {
    let copies = copies.max(1);
    let mut generator = PolicyGenerator {
        policy: session.policy.clone(),
        sampling,
        max_batch: 32,
    };
    let tasks_per_batch = (16 / copies).max(1);
    let mut episodes = Vec::with_capacity(tasks.len() * copies);
    for (chunk_idx, chunk) in tasks.chunks(tasks_per_batch).enumerate() {
        let mut specs = episode_specs(session, chunk, copies)?;
        if let Some(memories) = memories {
            for (offset, spec) in specs.iter_mut().enumerate() {
                spec.memory = memories
                    .get(chunk_idx * tasks_per_batch + offset / copies)
                    .cloned();
            }
        }
        let mut cache = session.cache.clone();
        episodes.extend(run_batch(
            specs,
            settings,
            &session.codec,
            &mut generator,
            None,
            session.judge.as_ref(),
            &mut cache,
        )?);
    }
    Ok(episodes)
}

/// The mean score and the success rate (score 1) of judged episodes; masked ones do not count.
pub fn eval_summary(episodes: &[EpisodeRecord]) -> (f64, f64) {
    let scores: Vec<f64> = episodes.iter().filter_map(|e| e.reward).collect();
    let n = scores.len().max(1) as f64;
    let mean = scores.iter().sum::<f64>() / n;
    let success = scores.iter().filter(|&&r| r >= 1.0 - 1e-9).count() as f64 / n;
    (mean, success)
}

pub(crate) fn episode_specs(
    session: &Session,
    tasks: &[Arc<GenTask>],
    group_size: usize,
) -> Result<Vec<EpisodeSpec>> {
    let mut specs = Vec::with_capacity(tasks.len() * group_size);
    for task in tasks {
        for _ in 0..group_size {
            specs.push(EpisodeSpec {
                task: task.clone(),
                env: tasks::fresh_env(task.domain, &session.sources)?,
                group: task.id.clone(),
                memory: None,
            });
        }
    }
    Ok(specs)
}

/// The event of a held-out evaluation written by [`write_eval`].
fn eval_event(step: u32, n_tasks: usize, mean: f64, success: f64) -> Event {
    Event::Eval {
        step,
        benchmark: "generated_test".to_owned(),
        n_tasks,
        metrics: BTreeMap::from([("score".to_owned(), mean), ("success".to_owned(), success)]),
    }
}

fn write_eval(
    session: &mut Session,
    step: u32,
    n_tasks: usize,
    mean: f64,
    success: f64,
) -> Result<()> {
    session
        .writer
        .metric(u64::from(step), "eval/generated_test/score", mean)?;
    session
        .writer
        .metric(u64::from(step), "eval/generated_test/success", success)?;
    store_eval_rows(session, step, "all", n_tasks, mean, success)
}

/// Stores the score and success rate of a `generated_test` evaluation under `category`, after
/// the writer's buffered rows.
pub(crate) fn store_eval_rows(
    session: &mut Session,
    step: u32,
    category: &str,
    n_tasks: usize,
    mean: f64,
    success: f64,
) -> Result<()> {
    session.writer.flush()?;
    let mut batch = Batch::new(session.run);
    for (metric, value) in [("score", mean), ("success", success)] {
        batch.evals.push(EvalRow {
            step: u64::from(step),
            benchmark: "generated_test".to_owned(),
            category: category.to_owned(),
            metric: metric.to_owned(),
            value,
            n_tasks: n_tasks as u64,
            wall_time: now_secs(),
        });
    }
    session.writer.store_mut().write(&batch)
}

/// How RL rollouts sample: `[rl].temperature` and `top_p`, the seed from the requests.
pub(crate) fn rollout_sampling(rl: &RlConfig) -> Sampling {
    Sampling {
        temperature: rl.temperature,
        top_p: rl.top_p,
        top_k: 0,
        seed: 0,
    }
}

/// Runs the RL phase from `session.next_step` to its end: the explicit GRPO loop. Returns
/// [`Flow::Stop`] when stopped (after a checkpoint).
pub fn train(
    session: &mut Session,
    pool: &[Arc<GenTask>],
    test_tasks: &[Arc<GenTask>],
    hooks: &mut dyn Hooks,
) -> Result<Flow> {
    let rl = session.config.rl.clone();
    let first_step = session.config.sft.n_steps * u32::from(session.config.sft.enabled);
    let last_step = first_step + rl.n_steps;
    let trained_roles: Vec<Role> = [Role::Act, Role::Rehearse]
        .into_iter()
        .filter(|r| !rl.frozen_roles.contains(r))
        .collect();
    let max_len = (rl.max_prompt_tokens + rl.max_response_tokens) as usize;
    hooks.emit(Event::Phase {
        phase: "rl".to_owned(),
        first_step,
        n_steps: rl.n_steps,
    });
    session.next_step = session.next_step.max(first_step);
    if session.reference.is_none() {
        session.reference = Some(session.policy.deep_copy()?);
        session.save_reference()?;
    }
    if session.optimizer.is_none() {
        session.optimizer = Some(AdamW::new(&session.policy, rl.weight_decay)?);
    }
    let eval_interval = session.config.eval.interval_steps.max(1);
    // The held-out evaluation at step s (the policy after s − first_step RL steps) runs at the
    // start of step s, after the checkpoint of step s − 1: every row labelled s is written
    // after that checkpoint, so a resume from it replays them all.
    let eval_due = |step: u32| (step - first_step).is_multiple_of(eval_interval);
    let started = Instant::now();
    let resumed_at = session.next_step;
    for step in session.next_step..last_step {
        if hooks.poll() == Flow::Stop {
            session.writer.flush()?;
            let path = session.checkpoint(step.saturating_sub(1))?;
            hooks.emit(Event::Checkpoint {
                step: step.saturating_sub(1),
                path: path.display().to_string(),
            });
            return Ok(Flow::Stop);
        }
        let rl_step = step - first_step;
        if eval_due(step) && !test_tasks.is_empty() {
            let (mean, success) = evaluate(session, test_tasks, step)?;
            write_eval(session, step, test_tasks.len(), mean, success)?;
            hooks.emit(eval_event(step, test_tasks.len(), mean, success));
        }
        let step_started = Instant::now();

        // Rollouts: batch_size prompts × group_size episodes, answered per the response mode.
        let tasks = step_tasks(pool, rl_step, rl.batch_size as usize);
        let specs = episode_specs(session, &tasks, rl.group_size as usize)?;
        let settings = step_settings(session, step);
        let mut generator = PolicyGenerator {
            policy: session.policy.clone(),
            sampling: rollout_sampling(&rl),
            max_batch: 64,
        };
        let rollout_started = Instant::now();
        let simulator = session.simulator.as_ref().map(|s| s as &dyn Simulator);
        let episodes = run_batch(
            specs,
            &settings,
            &session.codec,
            &mut generator,
            simulator,
            session.judge.as_ref(),
            &mut session.cache,
        )?;
        let rollout_secs = rollout_started.elapsed().as_secs_f64();
        let generated_tokens: usize = episodes
            .iter()
            .flat_map(|e| e.samples.iter())
            .map(|s| s.count(Label::Act) + s.count(Label::Rehearse))
            .sum();
        let mut batch = Batch::new(session.run);
        record_episodes(&mut batch, u64::from(step), &episodes)?;
        session.writer.flush()?;
        session.writer.store_mut().write(&batch)?;

        // Advantages, then the loss over micro-batches with accumulated gradients.
        let mut items = items_of(&episodes, &rl);
        // Micro-batches of similar lengths pad less; the step's loss is their sum either way.
        items.sort_by_key(|(item, _)| item.window(max_len).0.len());
        let refs: Vec<&TrainItem> = items.iter().map(|(item, _)| item).collect();
        let total: usize = refs
            .iter()
            .map(|i| i.n_trained(max_len, &trained_roles))
            .sum();
        let mut grads = None;
        let mut sums = Vec::with_capacity(refs.len());
        let reference = session.reference.clone().ok_or_else(|| Error::Data {
            source_name: "GRPO".to_owned(),
            message: "no reference policy".to_owned(),
        })?;
        for micro in refs.chunks(rl.micro_batch_size.max(1) as usize) {
            let batch = pad_batch(micro, max_len, &trained_roles, session.policy.device())?;
            let (loss, micro_sums) =
                micro_batch_loss(&session.policy, &reference, &batch, &rl, total)?;
            sums.extend(micro_sums);
            if batch.n_trained > 0 {
                let step_grads = loss
                    .backward()
                    .map_err(|e| Error::candle("GRPO backward", e))?;
                accumulate(&mut grads, step_grads, &session.policy)?;
            }
        }
        let lr = learning_rate(
            rl.lr,
            rl.lr_schedule,
            rl.warmup_steps,
            rl.min_lr_ratio,
            rl_step,
            rl.n_steps,
        );
        let grad_norm = match (grads, session.optimizer.as_mut()) {
            (Some(grads), Some(optimizer)) => optimizer.step(&grads, lr, rl.grad_clip, 1.0)?,
            _ => 0.0,
        };

        // Metrics: per role, fidelity, throughput.
        let secs = step_started.elapsed().as_secs_f64();
        let mut metrics = role_metrics(&items, &sums);
        let scored: Vec<f64> = episodes.iter().filter_map(|e| e.reward).collect();
        let n_episodes = episodes.len().max(1) as f64;
        metrics.insert(
            "rl/reward".to_owned(),
            scored.iter().sum::<f64>() / scored.len().max(1) as f64,
        );
        metrics.insert(
            "rl/success".to_owned(),
            scored.iter().filter(|&&r| r >= 1.0 - 1e-9).count() as f64 / scored.len().max(1) as f64,
        );
        metrics.insert(
            "rl/masked_fraction".to_owned(),
            episodes.iter().filter(|e| e.masked()).count() as f64 / n_episodes,
        );
        metrics.insert(
            "rl/turns".to_owned(),
            episodes.iter().map(|e| e.turns.len() as f64).sum::<f64>() / n_episodes,
        );
        metrics.insert("rl/grad_norm".to_owned(), grad_norm);
        metrics.insert("rl/lr".to_owned(), lr);
        let pairs: Vec<(&str, Scores)> = episodes
            .iter()
            .flat_map(|e| e.fidelity_calls())
            .filter_map(|(_, c)| Some((c.name.as_deref().unwrap_or("(malformed call)"), c.scores?)))
            .collect();
        if !pairs.is_empty() {
            let (all, by_tool) = fidelity::aggregate_by_tool(pairs.iter().map(|(t, s)| (*t, s)));
            for (name, value) in all.named() {
                metrics.insert(format!("fidelity/{name}"), value);
            }
            metrics.insert("fidelity/n_pairs".to_owned(), all.n_pairs as f64);
            for (tool, aggregate) in by_tool {
                for (name, value) in aggregate.named() {
                    metrics.insert(format!("fidelity/{tool}/{name}"), value);
                }
            }
        }
        metrics.insert("perf/step_time_secs".to_owned(), secs);
        metrics.insert("perf/rollout_secs".to_owned(), rollout_secs);
        metrics.insert(
            "perf/generated_tokens_per_sec".to_owned(),
            generated_tokens as f64 / rollout_secs.max(1e-9),
        );
        let tokens_per_sec = total as f64 / (secs - rollout_secs).max(1e-9);
        metrics.insert("perf/tokens_per_sec".to_owned(), tokens_per_sec);
        for (key, value) in &metrics {
            session.writer.metric(u64::from(step), key, *value)?;
        }
        crate::crash::point("step.done");
        session.next_step = step + 1;
        let done = f64::from(step + 1 - resumed_at);
        let eta = started.elapsed().as_secs_f64() / done * f64::from(last_step - step - 1);
        hooks.emit(Event::Step {
            phase: "rl".to_owned(),
            step,
            total_steps: last_step,
            metrics,
            tokens_per_sec,
            eta_secs: eta,
        });
        let interval = session.config.run.checkpoint_interval_steps.max(1);
        if (rl_step + 1).is_multiple_of(interval) || step + 1 == last_step {
            session.writer.flush()?;
            let path = session.checkpoint(step)?;
            hooks.emit(Event::Checkpoint {
                step,
                path: path.display().to_string(),
            });
        }
    }
    if eval_due(last_step) && !test_tasks.is_empty() {
        let (mean, success) = evaluate(session, test_tasks, last_step)?;
        write_eval(session, last_step, test_tasks.len(), mean, success)?;
        hooks.emit(eval_event(last_step, test_tasks.len(), mean, success));
    }
    session.phase = Phase::Done;
    session.writer.flush()?;
    Ok(Flow::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(
        rows: &[(&str, Role, f64)],
        baseline: AdvantageBaseline,
        by_std: bool,
        expected: &[f64],
    ) {
        let got = advantages(rows, baseline, by_std);
        assert_eq!(got.len(), expected.len());
        for (g, e) in got.iter().zip(expected) {
            assert!((g - e).abs() < 1e-5, "got {got:?}, expected {expected:?}");
        }
    }

    /// Two prompts; prompt `a` has two episodes (rewards 1 and 0), the first with two
    /// rehearse calls and the second with one; prompt `b` has one episode.
    fn table() -> Vec<(&'static str, Role, f64)> {
        vec![
            ("a", Role::Act, 1.0),
            ("a", Role::Rehearse, 1.0),
            ("a", Role::Rehearse, 1.0),
            ("a", Role::Act, 0.0),
            ("a", Role::Rehearse, 0.0),
            ("b", Role::Act, 0.5),
            ("b", Role::Rehearse, 0.5),
        ]
    }

    #[test]
    fn role_wise_advantages_by_hand() {
        // Act in a: mean 0.5 → ±0.5. Rehearse in a: mean 2/3 → 1/3, 1/3, −2/3. b: singletons → 0.
        check(
            &table(),
            AdvantageBaseline::RoleWise,
            false,
            &[0.5, 1.0 / 3.0, 1.0 / 3.0, -0.5, -2.0 / 3.0, 0.0, 0.0],
        );
    }

    #[test]
    fn pooled_advantages_by_hand() {
        // All of a: rewards 1, 1, 1, 0, 0 → mean 0.6. b: mean 0.5 → 0.
        check(
            &table(),
            AdvantageBaseline::Pooled,
            false,
            &[0.4, 0.4, 0.4, -0.6, -0.6, 0.0, 0.0],
        );
    }

    #[test]
    fn std_division_by_hand() {
        // Act in a: sample std of {1, 0} = √0.5. Rehearse in a: {1, 1, 0}: std = √(1/3).
        let s_act = 0.5f64.sqrt() + 1e-6;
        let s_reh = (1.0f64 / 3.0).sqrt() + 1e-6;
        check(
            &table(),
            AdvantageBaseline::RoleWise,
            true,
            &[
                0.5 / s_act,
                (1.0 / 3.0) / s_reh,
                (1.0 / 3.0) / s_reh,
                -0.5 / s_act,
                (-2.0 / 3.0) / s_reh,
                0.0,
                0.0,
            ],
        );
        // Pooled over a: {1, 1, 1, 0, 0}: mean 0.6, sample std √0.3.
        let s = 0.3f64.sqrt() + 1e-6;
        check(
            &table(),
            AdvantageBaseline::Pooled,
            true,
            &[0.4 / s, 0.4 / s, 0.4 / s, -0.6 / s, -0.6 / s, 0.0, 0.0],
        );
    }

    #[test]
    fn equal_rewards_give_zero_advantage() {
        let rows = [("a", Role::Act, 0.7), ("a", Role::Act, 0.7)];
        check(&rows, AdvantageBaseline::RoleWise, true, &[0.0, 0.0]);
    }
}
