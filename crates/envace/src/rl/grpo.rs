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
//! - Every sampled token is trained on the context generation gave it: a turn generated after
//!   the conversation was cut (`max_prompt_tokens`) is its own training sequence with the same
//!   cut ([`TrainItem::of_sample`]).
//! - Masked episodes (judge or environment failure) contribute no samples.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use candle_core::Tensor;

use crate::config::{
    AdvantageBaseline, FewShotSource, KlType, PolicyRole, RlConfig, RlCredit, RlReward,
};
use crate::error::{Error, Result};
use crate::eval::episodes::{episode_specs, rollout_sampling, step_settings};
use crate::eval::heldout::is_success;
use crate::fidelity::{self, Scores};
use crate::model::{Policy, with_workers_awake};
use crate::rollout::{
    EpisodeRecord, Generator, Label, PolicyGenerator, Sample, Simulator, record_episodes, run_batch,
};
use crate::store::Batch;
use crate::tasks::GenTask;

use super::evaluation::held_out_eval;
use super::hooks::{Event, Flow, Hooks};
use super::session::{Phase, Session};
use super::{
    AdamW, PaddedBatch, TrainItem, accumulate, learning_rate, pad_batch_packed, token_logprobs,
};

/// Advantages of `(group, role, reward)` rows: each row's reward minus the mean over its
/// baseline set (same group and role, or same group when pooled), divided by that set's
/// sample standard deviation (+1e-6) when `divide_by_std`. A set of one row gives 0.
pub fn advantages(
    rows: &[(&str, PolicyRole, f64)],
    baseline: AdvantageBaseline,
    divide_by_std: bool,
) -> Vec<f64> {
    let key = |row: &(&str, PolicyRole, f64)| match baseline {
        AdvantageBaseline::RoleWise => (row.0.to_owned(), Some(row.1)),
        AdvantageBaseline::Pooled => (row.0.to_owned(), None),
    };
    let mut sets: BTreeMap<(String, Option<PolicyRole>), Vec<f64>> = BTreeMap::new();
    for row in rows {
        sets.entry(key(row)).or_default().push(row.2);
    }
    let stats: BTreeMap<(String, Option<PolicyRole>), (f64, f64, usize)> = sets
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

/// One training item of a step with the reward of its episode and the sample it came from (a
/// sample generated in several contexts gives several items: [`TrainItem::of_sample`]).
#[derive(Debug, Clone)]
pub struct StepItem {
    /// The item, with its sample's advantage.
    pub item: TrainItem,
    /// The reward of the item's episode.
    pub reward: f64,
    /// The index of its sample among the step's scored samples.
    pub sample: usize,
}

/// The training items of a step's episodes: every sample of every scored episode, with its
/// advantage, as one item per context it was generated in.
pub fn items_of(episodes: &[EpisodeRecord], rl: &RlConfig) -> Vec<StepItem> {
    let mut rows = Vec::new();
    let mut refs = Vec::new();
    for episode in episodes {
        for sample in &episode.samples {
            if let Some(reward) = sample_reward(episode, sample, rl) {
                rows.push((episode.group.as_str(), sample.role, reward));
                refs.push(sample);
            }
        }
    }
    let advantages = advantages(&rows, rl.advantage_baseline, rl.divide_by_std);
    refs.into_iter()
        .zip(rows.iter().zip(advantages))
        .enumerate()
        .flat_map(|(index, (sample, (row, advantage)))| {
            TrainItem::of_sample(sample, advantage as f32)
                .into_iter()
                .map(move |item| StepItem {
                    item,
                    reward: row.2,
                    sample: index,
                })
        })
        .collect()
}

/// One rollout of a GRPO group as the studio shows it: its reward and the advantage each role
/// got (the mean over that role's samples; `None` for a role without samples, or masked).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GroupMember {
    /// Index of the episode in its step.
    pub episode_idx: usize,
    /// Its score (`None` when masked).
    pub reward: Option<f64>,
    /// The advantage of its act sample.
    pub act_advantage: Option<f64>,
    /// The mean advantage of its rehearse samples.
    pub rehearse_advantage: Option<f64>,
}

/// The members of group `group` among a step's `episodes`, with the advantages the step's
/// loss gave each role under `rl` (the same computation as training).
pub fn group_members(episodes: &[EpisodeRecord], group: &str, rl: &RlConfig) -> Vec<GroupMember> {
    let members: Vec<&EpisodeRecord> = episodes.iter().filter(|e| e.group == group).collect();
    let mut rows = Vec::new();
    let mut owners = Vec::new();
    for episode in &members {
        for sample in &episode.samples {
            if let Some(reward) = sample_reward(episode, sample, rl) {
                rows.push((episode.group.as_str(), sample.role, reward));
                owners.push((episode.episode_idx, sample.role));
            }
        }
    }
    let values = advantages(&rows, rl.advantage_baseline, rl.divide_by_std);
    let mean_of = |episode_idx: usize, role: PolicyRole| -> Option<f64> {
        let picked: Vec<f64> = owners
            .iter()
            .zip(&values)
            .filter(|((idx, r), _)| *idx == episode_idx && *r == role)
            .map(|(_, v)| *v)
            .collect();
        (!picked.is_empty()).then(|| picked.iter().sum::<f64>() / picked.len() as f64)
    };
    members
        .iter()
        .map(|episode| GroupMember {
            episode_idx: episode.episode_idx,
            reward: episode.reward,
            act_advantage: mean_of(episode.episode_idx, PolicyRole::Act),
            rehearse_advantage: mean_of(episode.episode_idx, PolicyRole::Rehearse),
        })
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
    let (logp, entropy) = token_logprobs(policy, batch, rl.entropy_coef != 0.0)?;
    let reference_logp = if rl.kl_type == KlType::None || rl.kl_coef == 0.0 {
        None
    } else {
        Some(token_logprobs(reference, batch, false)?.0.detach())
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

/// Metrics of a step per role, from its items and the loss sums (one per item): reward,
/// advantage mean and std and response length (sampled tokens) per sample, KL, entropy and
/// clip fraction per trained token.
pub fn role_metrics(items: &[StepItem], sums: &[RoleSums]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for role in [PolicyRole::Act, PolicyRole::Rehearse] {
        let name = match role {
            PolicyRole::Act => "act",
            PolicyRole::Rehearse => "rehearse",
        };
        let picked: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].item.role == role)
            .collect();
        if picked.is_empty() {
            continue;
        }
        // Per sample: its reward and advantage (alike on all its items) and its sampled tokens
        // (each trained in exactly one of its items).
        let mut samples: BTreeMap<usize, (f64, f64, usize)> = BTreeMap::new();
        for &i in &picked {
            let StepItem {
                item,
                reward,
                sample,
            } = &items[i];
            let sampled = item.labels.iter().filter(|l| l.is_sampled()).count();
            let entry = samples
                .entry(*sample)
                .or_insert((*reward, f64::from(item.advantage), 0));
            entry.2 += sampled;
        }
        let n = samples.len() as f64;
        let mean = |f: &dyn Fn(&(f64, f64, usize)) -> f64| samples.values().map(f).sum::<f64>() / n;
        let adv_mean = mean(&|s| s.1);
        let adv_std = mean(&|s| (s.1 - adv_mean).powi(2)).sqrt();
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
        out.insert(format!("{name}/reward"), mean(&|s| s.0));
        out.insert(format!("{name}/advantage_mean"), adv_mean);
        out.insert(format!("{name}/advantage_std"), adv_std);
        out.insert(format!("{name}/kl"), per_token(&|s| s.kl));
        out.insert(format!("{name}/entropy"), per_token(&|s| s.entropy));
        out.insert(format!("{name}/clip_fraction"), per_token(&|s| s.clipped));
        out.insert(format!("{name}/response_length"), mean(&|s| s.2 as f64));
        out.insert(format!("{name}/n_samples"), n);
    }
    out
}

/// A step's rollouts.
#[derive(Debug)]
pub struct StepRollouts {
    /// Every episode of the step, numbered across rounds.
    pub episodes: Vec<EpisodeRecord>,
    /// Groups (prompts, and their memory groups) rolled out.
    pub n_groups: usize,
    /// Groups whose unmasked rewards differ: the only ones with a non-zero advantage.
    pub n_signal_groups: usize,
    /// Groups left out of the loss (dynamic sampling drops those without signal).
    pub dropped_groups: Vec<String>,
    /// Rounds of rollouts (more than one only under dynamic sampling).
    pub n_rounds: usize,
}

/// The reward `sample` of `episode` trains with under `[rl].reward` and `[rl].credit`; `None`
/// leaves it out: a masked or unscored episode, or (role credit) a rehearse sample whose
/// response has no real counterpart to be scored against.
pub fn sample_reward(episode: &EpisodeRecord, sample: &Sample, rl: &RlConfig) -> Option<f64> {
    let score = episode.reward.filter(|_| !episode.masked())?;
    match (rl.credit, sample.role) {
        (RlCredit::Episode, _) => Some(rl.reward.of(score)),
        // Right either way: a faithful report of what it was shown, or the real result (which
        // the act role may work out without its tool, as it does for string tools).
        (RlCredit::Role, PolicyRole::Act) => Some(
            rl.reward
                .of(episode.shown_reward.map_or(score, |shown| shown.max(score))),
        ),
        (RlCredit::Role, PolicyRole::Rehearse) => {
            let (turn_idx, call_idx) = sample.call?;
            let scores = episode
                .turns
                .iter()
                .find(|turn| turn.turn_idx == turn_idx)?
                .calls
                .iter()
                .find(|call| call.call_idx == call_idx)?
                .scores?;
            Some(match rl.reward {
                RlReward::Score => scores.value_accuracy,
                RlReward::Success => f64::from(u8::from(scores.exact_match)),
            })
        }
    }
}

/// Whether some sample of a group gets a non-zero advantage under `rl` (its training rewards
/// differ within a baseline set).
pub fn has_signal(episodes: &[&EpisodeRecord], rl: &RlConfig) -> bool {
    let rows: Vec<(&str, PolicyRole, f64)> = episodes
        .iter()
        .flat_map(|episode| {
            episode.samples.iter().filter_map(move |sample| {
                sample_reward(episode, sample, rl)
                    .map(|reward| (episode.group.as_str(), sample.role, reward))
            })
        })
        .collect();
    advantages(&rows, rl.advantage_baseline, false)
        .iter()
        .any(|a| a.abs() > 1e-12)
}

/// Per task family of a step: `rl/family/<family>/success`, the share of its rollouts (dropped
/// groups included) that succeeded, and `rl/family/<family>/trained_groups`, its groups in the
/// loss (`trained`) — what each family gives the step, so a family that drowns the others'
/// signal shows. `family_of` maps a task id to its family (none: not counted).
pub fn family_metrics(
    episodes: &[EpisodeRecord],
    trained: &[EpisodeRecord],
    family_of: &dyn Fn(&str) -> Option<&'static str>,
) -> BTreeMap<String, f64> {
    let mut rollouts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for episode in episodes {
        if let (Some(family), Some(score)) = (family_of(&episode.task_id), episode.reward) {
            let entry = rollouts.entry(family).or_default();
            entry.0 += 1;
            entry.1 += usize::from(is_success(score));
        }
    }
    let mut groups: BTreeMap<&str, usize> = rollouts.keys().map(|f| (*f, 0)).collect();
    for (_, members) in groups_of(trained) {
        if let Some(family) = family_of(&members[0].task_id) {
            *groups.entry(family).or_default() += 1;
        }
    }
    let mut out = BTreeMap::new();
    for (family, (n, n_success)) in rollouts {
        out.insert(
            format!("rl/family/{family}/success"),
            n_success as f64 / n.max(1) as f64,
        );
    }
    for (family, n_groups) in groups {
        out.insert(
            format!("rl/family/{family}/trained_groups"),
            n_groups as f64,
        );
    }
    out
}

/// The groups of `episodes` in order of first appearance, each with its episodes.
fn groups_of(episodes: &[EpisodeRecord]) -> Vec<(String, Vec<&EpisodeRecord>)> {
    let mut out: Vec<(String, Vec<&EpisodeRecord>)> = Vec::new();
    for episode in episodes {
        match out.iter_mut().find(|(group, _)| *group == episode.group) {
            Some((_, members)) => members.push(episode),
            None => out.push((episode.group.clone(), vec![episode])),
        }
    }
    out
}

/// The rollouts of RL step `step` (`rl_step` within RL): `batch_size` prompts of the pool from
/// the step's offset, `group_size` episodes each. Under `[rl].dynamic_sampling` groups whose
/// rewards are all equal are dropped and the next prompts rolled out, until `batch_size`
/// groups carry a signal, every prompt of the pool was tried in this step, or
/// `max_sampling_rounds` rounds were run (the step then trains on the groups it kept). With
/// `[rl].memory_share`, that share of the kept groups is rolled out again with a rehearsal
/// memory of its first attempts (group `<task>#memory`). Few-shot examples come from the
/// session's cache, which only `few_shot_source = "live"` lets the rollouts extend.
/// `generator` plays the policy (the session's own in training).
pub fn step_rollouts(
    session: &mut Session,
    pool: &[Arc<GenTask>],
    step: u32,
    rl_step: u32,
    generator: &mut dyn Generator,
) -> Result<StepRollouts> {
    let rl = session.config.rl.clone();
    let batch_size = rl.batch_size as usize;
    let group_size = rl.group_size as usize;
    let live = session.config.env.few_shot_source == FewShotSource::Live;
    let mut out = StepRollouts {
        episodes: Vec::new(),
        n_groups: 0,
        n_signal_groups: 0,
        dropped_groups: Vec::new(),
        n_rounds: 0,
    };
    let mut kept: Vec<Arc<GenTask>> = Vec::new();
    let mut tried = 0usize;
    let first = rl_step as usize * batch_size;
    let mut run = |session: &mut Session,
                   specs: Vec<crate::rollout::EpisodeSpec>,
                   round: usize,
                   out: &mut StepRollouts|
     -> Result<Vec<EpisodeRecord>> {
        let mut settings = step_settings(session, step);
        settings.seed ^= (round as u64).wrapping_mul(0x2545_f491_4f6c_dd1d);
        let simulator = session.simulator.as_ref().map(|s| s as &dyn Simulator);
        let mut offline = session.cache.clone();
        let cache = if live {
            &mut session.cache
        } else {
            &mut offline
        };
        let mut episodes = run_batch(
            specs,
            &settings,
            &session.codec,
            &mut *generator,
            simulator,
            session.judge.as_ref(),
            cache,
        )?;
        let offset = out.episodes.len();
        for episode in &mut episodes {
            episode.episode_idx += offset;
        }
        out.n_rounds += 1;
        Ok(episodes)
    };
    let max_rounds = rl.max_sampling_rounds.max(1) as usize;
    while kept.len() < batch_size && tried < pool.len() && out.n_rounds < max_rounds {
        let wanted = if rl.dynamic_sampling {
            (batch_size - kept.len()).min(pool.len() - tried)
        } else {
            batch_size
        };
        let tasks: Vec<Arc<GenTask>> = (0..wanted)
            .filter_map(|slot| pool.get((first + tried + slot) % pool.len()).cloned())
            .collect();
        tried += tasks.len();
        let specs = episode_specs(session, &tasks, group_size)?;
        let round = out.n_rounds;
        let episodes = run(session, specs, round, &mut out)?;
        for (task, (group, members)) in tasks.iter().zip(groups_of(&episodes)) {
            out.n_groups += 1;
            if has_signal(&members, &rl) {
                out.n_signal_groups += 1;
                kept.push(task.clone());
            } else if rl.dynamic_sampling {
                out.dropped_groups.push(group);
            } else {
                kept.push(task.clone());
            }
        }
        out.episodes.extend(episodes);
        if !rl.dynamic_sampling {
            break;
        }
    }
    let n_memory = ((kept.len() as f64) * rl.memory_share).round() as usize;
    if n_memory > 0 {
        let max_tokens = session.config.rehearsal.max_memory_tokens as usize;
        let mut memories = Vec::with_capacity(n_memory);
        for task in &kept[..n_memory] {
            let attempts: Vec<&EpisodeRecord> =
                out.episodes.iter().filter(|e| e.group == task.id).collect();
            memories.push(crate::eval::rehearsal::memory_of(
                &attempts, session, max_tokens,
            )?);
        }
        let mut specs = episode_specs(session, &kept[..n_memory], group_size)?;
        for (idx, spec) in specs.iter_mut().enumerate() {
            spec.memory = memories.get(idx / group_size).cloned();
            spec.group = format!("{}#memory", spec.group);
        }
        let round = out.n_rounds;
        let episodes = run(session, specs, round, &mut out)?;
        for (_, members) in groups_of(&episodes) {
            out.n_groups += 1;
            if has_signal(&members, &rl) {
                out.n_signal_groups += 1;
            }
        }
        out.episodes.extend(episodes);
    }
    Ok(out)
}

/// Runs the RL phase from `session.next_step` to its end: the explicit GRPO loop. Returns
/// [`Flow::Stop`] when stopped (after a checkpoint).
/// The policy's copy on a wgpu device, when `[backend]` places a role's RL generation there
/// (`None` otherwise). Without `policy`, only checks that an adapter opens (at a job's start).
#[cfg(feature = "wgpu")]
pub(crate) fn open_generation_gpu(
    config: &crate::config::ExperimentConfig,
    policy: Option<&Policy>,
) -> Result<Option<crate::model::wgpu::GpuModel>> {
    let backend = &config.backend;
    if !backend.uses_wgpu() {
        return Ok(None);
    }
    let adapter = (!backend.wgpu_adapter.is_empty()).then_some(backend.wgpu_adapter.as_str());
    let gpu = crate::model::wgpu::open_gpu(adapter)?;
    let Some(policy) = policy else {
        return Ok(None);
    };
    tracing::info!(adapter = %gpu.describe(), "RL generation on wgpu");
    // Rotary angles for every position a rollout context can reach.
    let positions = policy.config().max_position_embeddings.max(16_384);
    policy.to_gpu(gpu, positions).map(Some)
}

/// Without the `wgpu` feature, a role placed on wgpu is refused at the job's start.
#[cfg(not(feature = "wgpu"))]
pub(crate) fn open_generation_gpu(
    config: &crate::config::ExperimentConfig,
    _policy: Option<&Policy>,
) -> Result<Option<std::convert::Infallible>> {
    if config.backend.uses_wgpu() {
        return Err(Error::BackendNotCompiled {
            backend: "wgpu",
            feature: "wgpu",
        });
    }
    Ok(None)
}

pub fn train(
    session: &mut Session,
    pool: &[Arc<GenTask>],
    test_tasks: &[Arc<GenTask>],
    hooks: &mut dyn Hooks,
) -> Result<Flow> {
    let rl = session.config.rl.clone();
    let first_step = session.config.sft.n_steps * u32::from(session.config.sft.enabled);
    let last_step = first_step + rl.n_steps;
    let trained_roles: Vec<PolicyRole> = [PolicyRole::Act, PolicyRole::Rehearse]
        .into_iter()
        .filter(|r| !rl.frozen_roles.contains(r))
        .collect();
    let max_len = (rl.max_prompt_tokens + rl.max_response_tokens) as usize;
    hooks.emit(Event::Phase {
        phase: Phase::Rl,
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
    // Every `[eval].interval_steps` RL steps (0: none on the way), and always after the last
    // step, so the final policy is evaluated and a rehearsal-budget curve stored at that step
    // has its plain (N = 0) point beside it.
    let eval_interval = session.config.eval.interval_steps;
    // The held-out evaluation at step s (the policy after s − first_step RL steps) runs at the
    // start of step s, after the checkpoint of step s − 1: every row labelled s is written
    // after that checkpoint, so a resume from it replays them all.
    let eval_due = |step: u32| {
        step == last_step
            || (eval_interval > 0 && (step - first_step).is_multiple_of(eval_interval))
    };
    let started = Instant::now();
    let resumed_at = session.next_step;
    // Each pool task's family, for the per-family metrics of every step.
    let families: std::collections::HashMap<&str, &'static str> = pool
        .iter()
        .map(|task| (task.id.as_str(), task.family))
        .collect();
    #[cfg_attr(
        not(feature = "wgpu"),
        allow(
            unused_mut,
            reason = "refreshed after each step only with the wgpu feature"
        )
    )]
    let mut on_gpu = open_generation_gpu(&session.config, Some(&session.policy))?;
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
            held_out_eval(session, test_tasks, step, hooks)?;
        }
        let step_started = Instant::now();

        // Rollouts: batch_size prompts × group_size episodes, answered per the response mode
        // (refilled past groups without signal under dynamic sampling).
        let rollout_started = Instant::now();
        let mut generator = PolicyGenerator {
            policy: session.policy.clone(),
            sampling: rollout_sampling(&rl),
            max_batch: 64,
        };
        let rollouts = match &on_gpu {
            None => step_rollouts(session, pool, step, rl_step, &mut generator)?,
            #[cfg(feature = "wgpu")]
            Some(model) => {
                let backend = session.config.backend.clone();
                let mut gpu_act = crate::rollout::GpuGenerator {
                    model,
                    sampling: rollout_sampling(&rl),
                    max_batch: 64,
                };
                let mut gpu_rehearse = crate::rollout::GpuGenerator {
                    model,
                    sampling: rollout_sampling(&rl),
                    max_batch: 64,
                };
                let mut policy_rehearse = generator.clone();
                let on_wgpu = |placement| placement == crate::config::GenerationPlacement::Wgpu;
                let mut router = crate::rollout::RoleRouter {
                    act: if on_wgpu(backend.act_placement()) {
                        &mut gpu_act
                    } else {
                        &mut generator
                    },
                    rehearse: if on_wgpu(backend.rehearse_placement()) {
                        &mut gpu_rehearse
                    } else {
                        &mut policy_rehearse
                    },
                };
                step_rollouts(session, pool, step, rl_step, &mut router)?
            }
            #[cfg(not(feature = "wgpu"))]
            Some(never) => match *never {},
        };
        let episodes = rollouts.episodes;
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
        let trained: Vec<EpisodeRecord> = episodes
            .iter()
            .filter(|e| !rollouts.dropped_groups.contains(&e.group))
            .cloned()
            .collect();

        // Advantages, then the loss over micro-batches with accumulated gradients.
        let update_started = Instant::now();
        let mut items = items_of(&trained, &rl);
        // Items in the order of their tokens: a group's completions of one prompt sit together,
        // so a micro-batch runs their shared prompt once (`rl::packing`); the step's loss is
        // the sum over micro-batches either way.
        items.sort_by_cached_key(|step_item| step_item.item.window(max_len).0.into_owned());
        let refs: Vec<&TrainItem> = items.iter().map(|step_item| &step_item.item).collect();
        let total: usize = refs
            .iter()
            .map(|i| i.n_trained(max_len, &trained_roles))
            .sum();
        let reference = session.reference.clone().ok_or_else(|| Error::Data {
            source_name: "GRPO".to_owned(),
            message: "no reference policy".to_owned(),
        })?;
        let lr = learning_rate(
            rl.lr,
            rl.lr_schedule,
            rl.warmup_steps,
            rl.min_lr_ratio,
            rl_step,
            rl.n_steps,
        );
        // Forward, backward and the optimizer step with the pool's workers kept awake (their
        // many small ops would otherwise wake a sleeping worker each).
        let policy = &session.policy;
        let optimizer = session.optimizer.as_mut();
        let (grad_norm, sums) = with_workers_awake(policy.device(), || -> Result<_> {
            let mut grads = None;
            let mut sums = Vec::with_capacity(refs.len());
            for micro in refs.chunks(rl.micro_batch_size.max(1) as usize) {
                let batch = pad_batch_packed(micro, max_len, &trained_roles, policy)?;
                let (loss, micro_sums) = micro_batch_loss(policy, &reference, &batch, &rl, total)?;
                sums.extend(micro_sums);
                if batch.n_trained > 0 {
                    let step_grads = loss
                        .backward()
                        .map_err(|e| Error::candle("GRPO backward", e))?;
                    accumulate(&mut grads, step_grads, policy)?;
                }
            }
            let grad_norm = match (grads, optimizer) {
                (Some(grads), Some(optimizer)) => optimizer.step(&grads, lr, rl.grad_clip, 1.0)?,
                _ => 0.0,
            };
            Ok((grad_norm, sums))
        })?;
        // The GPU's copy follows the step (every weight changes under full fine-tuning).
        #[cfg(feature = "wgpu")]
        if let Some(model) = &mut on_gpu {
            let refresh_started = Instant::now();
            let bytes = crate::model::wgpu::refresh(model, &session.policy, &[])?;
            tracing::debug!(
                bytes,
                secs = refresh_started.elapsed().as_secs_f64(),
                "refreshed the wgpu copy of the policy"
            );
        }

        let update_secs = update_started.elapsed().as_secs_f64();

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
            scored.iter().filter(|&&r| is_success(r)).count() as f64 / scored.len().max(1) as f64,
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
        if let Some(optimizer) = &session.optimizer {
            // Updates the moments have seen: with `carry_optimizer`, SFT's steps count too.
            metrics.insert(
                "rl/optimizer_updates".to_owned(),
                optimizer.n_updates() as f64,
            );
        }
        let n_groups = rollouts.n_groups.max(1) as f64;
        metrics.insert(
            "rl/signal_group_fraction".to_owned(),
            rollouts.n_signal_groups as f64 / n_groups,
        );
        metrics.insert("rl/n_groups".to_owned(), rollouts.n_groups as f64);
        metrics.insert(
            "rl/dropped_groups".to_owned(),
            rollouts.dropped_groups.len() as f64,
        );
        metrics.insert("rl/rollout_rounds".to_owned(), rollouts.n_rounds as f64);
        metrics.insert("rl/lr".to_owned(), lr);
        let family_of = |task_id: &str| families.get(task_id).copied();
        metrics.extend(family_metrics(&episodes, &trained, &family_of));
        let pairs: Vec<(&str, Scores)> = episodes
            .iter()
            .flat_map(|e| e.fidelity_calls())
            .filter_map(|(_, c)| Some((c.name.as_deref().unwrap_or("(malformed call)"), c.scores?)))
            .collect();
        // Drift: how often the rehearsed world answers with an error against how often the
        // real one does for the same calls (a simulator that stops erring has become too easy).
        let replayed: Vec<(bool, bool)> = episodes
            .iter()
            .flat_map(|e| e.fidelity_calls())
            .filter_map(|(_, c)| {
                let real = c.real.as_ref()?;
                Some((
                    crate::rehearse::error_code(&c.response).is_some(),
                    crate::rehearse::error_code(real).is_some(),
                ))
            })
            .collect();
        if !replayed.is_empty() {
            let n = replayed.len() as f64;
            metrics.insert(
                "drift/rehearsed_error_rate".to_owned(),
                replayed.iter().filter(|(r, _)| *r).count() as f64 / n,
            );
            metrics.insert(
                "drift/real_error_rate".to_owned(),
                replayed.iter().filter(|(_, r)| *r).count() as f64 / n,
            );
        }
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
        metrics.insert("perf/update_secs".to_owned(), update_secs);
        metrics.insert("perf/generated_tokens".to_owned(), generated_tokens as f64);
        if let Some(mib) = crate::runtime::peak_rss_mib() {
            metrics.insert("perf/peak_rss_mib".to_owned(), mib);
        }
        for (key, value) in &metrics {
            session.writer.metric(u64::from(step), key, *value)?;
        }
        crate::crash::point("step.done");
        session.next_step = step + 1;
        let done = f64::from(step + 1 - resumed_at);
        let eta = started.elapsed().as_secs_f64() / done * f64::from(last_step - step - 1);
        hooks.emit(Event::Step {
            phase: Phase::Rl,
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
        held_out_eval(session, test_tasks, last_step, hooks)?;
    }
    session.phase = Phase::Done;
    session.writer.flush()?;
    Ok(Flow::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(
        rows: &[(&str, PolicyRole, f64)],
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
    fn table() -> Vec<(&'static str, PolicyRole, f64)> {
        vec![
            ("a", PolicyRole::Act, 1.0),
            ("a", PolicyRole::Rehearse, 1.0),
            ("a", PolicyRole::Rehearse, 1.0),
            ("a", PolicyRole::Act, 0.0),
            ("a", PolicyRole::Rehearse, 0.0),
            ("b", PolicyRole::Act, 0.5),
            ("b", PolicyRole::Rehearse, 0.5),
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

    /// An episode of group `a` with one act sample and `n_rehearse` rehearse samples.
    fn member(episode_idx: usize, reward: f64, n_rehearse: usize) -> EpisodeRecord {
        let sample = |role| crate::rollout::Sample {
            role,
            tokens: Vec::new(),
            labels: Vec::new(),
            logprobs: Vec::new(),
            windows: Vec::new(),
            call: None,
        };
        let mut samples = vec![sample(PolicyRole::Act)];
        samples.extend((0..n_rehearse).map(|_| sample(PolicyRole::Rehearse)));
        EpisodeRecord {
            episode_idx,
            task_id: "a".to_owned(),
            group: "a".to_owned(),
            mode: "rehearse".to_owned(),
            messages: Vec::new(),
            turns: Vec::new(),
            samples,
            end: crate::rollout::EndReason::FinalAnswer,
            reward: Some(reward),
            shown_reward: None,
            mask_reason: None,
            judge: serde_json::Value::Null,
        }
    }

    #[test]
    fn group_members_carry_the_advantages_training_used() {
        // The table above as episodes: rewards 1 (two calls) and 0 (one call).
        let episodes = [member(0, 1.0, 2), member(1, 0.0, 1)];
        let members = group_members(&episodes, "a", &RlConfig::default());
        assert_eq!(members.len(), 2);
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
        assert!(close(members[0].act_advantage, 0.5));
        assert!(close(members[0].rehearse_advantage, 1.0 / 3.0));
        assert!(close(members[1].act_advantage, -0.5));
        assert!(close(members[1].rehearse_advantage, -2.0 / 3.0));
        assert_eq!(members[1].reward, Some(0.0));
    }

    #[test]
    fn equal_rewards_give_zero_advantage() {
        let rows = [("a", PolicyRole::Act, 0.7), ("a", PolicyRole::Act, 0.7)];
        check(&rows, AdvantageBaseline::RoleWise, true, &[0.0, 0.0]);
    }

    #[test]
    fn a_success_reward_gives_near_misses_no_advantage() {
        let near_misses = [member(0, 0.5, 0), member(1, 0.25, 0), member(2, 0.0, 0)];
        let members: Vec<&EpisodeRecord> = near_misses.iter().collect();
        let success = RlConfig {
            reward: RlReward::Success,
            ..RlConfig::default()
        };
        assert!(has_signal(&members, &RlConfig::default()));
        assert!(!has_signal(&members, &success));
        for member in group_members(&near_misses, "a", &success) {
            assert_eq!(member.act_advantage, Some(0.0));
        }
        // One success among near misses: +2/3 for it, -1/3 for each miss, whatever its score.
        let mixed = [member(0, 1.0, 0), member(1, 0.75, 0), member(2, 0.0, 0)];
        let advantages: Vec<f64> = group_members(&mixed, "a", &success)
            .into_iter()
            .map(|m| m.act_advantage.unwrap())
            .collect();
        let expected = [2.0 / 3.0, -1.0 / 3.0, -1.0 / 3.0];
        assert!(
            advantages
                .iter()
                .zip(expected)
                .all(|(a, e)| (a - e).abs() < 1e-9),
            "{advantages:?}"
        );
        // The episode keeps its score: the stored reward is not the training reward.
        assert_eq!(group_members(&mixed, "a", &success)[1].reward, Some(0.75));
    }

    /// A rehearsed episode scored `reward` by the real judge and `shown` against what it was
    /// shown, whose one rehearse sample answered a call with value accuracy `fidelity`.
    fn rehearsed(episode_idx: usize, reward: f64, shown: f64, fidelity: f64) -> EpisodeRecord {
        let mut episode = member(episode_idx, reward, 1);
        episode.shown_reward = Some(shown);
        episode.samples[1].call = Some((0, 0));
        let real = serde_json::json!({"result": "dlrow"});
        episode.turns = vec![crate::rollout::TurnRecord {
            turn_idx: 0,
            text: String::new(),
            finished: true,
            calls: vec![crate::rollout::CallRecord {
                call_idx: 0,
                name: Some("reverse_string".to_owned()),
                arguments: Some(serde_json::json!({"text": "world"})),
                raw: None,
                source: crate::rollout::ResponseSource::Rehearse,
                response: real.clone(),
                simulator_text: None,
                real: Some(real),
                scores: Some(Scores {
                    valid_json: true,
                    outcome_agrees: true,
                    key_f1: 1.0,
                    value_accuracy: fidelity,
                    exact_match: fidelity == 1.0,
                }),
            }],
        }];
        episode
    }

    #[test]
    fn role_credit_scores_the_act_role_as_shown_and_the_rehearse_role_by_fidelity() {
        // Both episodes score 0.5 on the real judge: no signal under the episode's credit.
        // The first reported its (wrong) rehearsed result faithfully, the second did not; the
        // first's rehearsed response was wrong (fidelity 0), the second's right.
        let episodes = [rehearsed(0, 0.5, 1.0, 0.0), rehearsed(1, 0.5, 0.5, 1.0)];
        let members: Vec<&EpisodeRecord> = episodes.iter().collect();
        assert!(!has_signal(&members, &RlConfig::default()));
        let role = RlConfig {
            credit: RlCredit::Role,
            ..RlConfig::default()
        };
        assert!(has_signal(&members, &role));
        let got = group_members(&episodes, "a", &role);
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
        assert!(close(got[0].act_advantage, 0.25) && close(got[1].act_advantage, -0.25));
        assert!(close(got[0].rehearse_advantage, -0.5) && close(got[1].rehearse_advantage, 0.5));
        // The stored reward stays the real judge's.
        assert_eq!(got[0].reward, Some(0.5));
        // Under the success reward the rehearse role needs an exact match.
        let success = RlConfig {
            reward: RlReward::Success,
            ..role.clone()
        };
        let got = group_members(&episodes, "a", &success);
        assert!(close(got[0].act_advantage, 0.5) && close(got[1].act_advantage, -0.5));
        assert!(close(got[1].rehearse_advantage, 0.5));
        // An answer right against the real environment but not as shown (the act role worked
        // the result out itself and ignored a wrong rehearsal) is right for the act role too.
        let own = [rehearsed(0, 1.0, 0.5, 0.0), rehearsed(1, 0.5, 0.5, 0.0)];
        let got = group_members(&own, "a", &role);
        assert!(close(got[0].act_advantage, 0.25) && close(got[1].act_advantage, -0.25));
        // A rehearse sample without a scored call is left out, not scored 0.
        let mut unscored = rehearsed(2, 0.5, 0.5, 0.0);
        unscored.turns[0].calls[0].scores = None;
        assert_eq!(sample_reward(&unscored, &unscored.samples[1], &role), None);
        assert_eq!(
            sample_reward(&unscored, &unscored.samples[0], &role),
            Some(0.5)
        );
    }

    #[test]
    fn family_metrics_count_successes_and_trained_groups_per_family() {
        let episode = |idx: usize, task: &str, reward: f64| EpisodeRecord {
            task_id: task.to_owned(),
            group: task.to_owned(),
            ..member(idx, reward, 0)
        };
        // Task "s1" (strings) solved once in two, "s2" (strings) never, "a1" (arithmetic)
        // twice; only "s1" carries a signal and is trained; "x" has no known family.
        let episodes = [
            episode(0, "s1", 1.0),
            episode(1, "s1", 0.5),
            episode(2, "s2", 0.0),
            episode(3, "s2", 0.0),
            episode(4, "a1", 1.0),
            episode(5, "a1", 1.0),
            episode(6, "x", 1.0),
        ];
        let trained = episodes[..2].to_vec();
        let family_of = |task: &str| match task {
            "s1" | "s2" => Some("fn_strings"),
            "a1" => Some("fn_arithmetic"),
            _ => None,
        };
        let metrics = family_metrics(&episodes, &trained, &family_of);
        let expected: BTreeMap<String, f64> = [
            ("rl/family/fn_arithmetic/success", 1.0),
            ("rl/family/fn_arithmetic/trained_groups", 0.0),
            ("rl/family/fn_strings/success", 0.25),
            ("rl/family/fn_strings/trained_groups", 1.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(metrics, expected);
        for key in metrics.keys() {
            assert!(
                crate::metrics::metric_of(key).is_some(),
                "{key} is not in the catalogue"
            );
        }
    }
}
