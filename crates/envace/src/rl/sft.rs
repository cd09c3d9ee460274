//! SFT warm start on oracle trajectories: the Act role learns the oracle's assistant turns,
//! the Rehearse role learns to write the real tool responses in the rehearse format.
//!
//! # Configuration (`[sft]`)
//!
//! `n_tasks` generated tasks (train split) give the data; `n_steps` AdamW steps at `lr`
//! (linear warm-up over the first 5% of steps, then constant or, with `lr_schedule =
//! "cosine"`, decaying to `lr × min_lr_ratio`) on `batch_size` sequences per
//! step drawn from a per-epoch shuffle seeded by the run seed, in micro-batches of
//! `micro_batch_size`; `roles` says which roles' tokens are trained. The loss is the mean
//! cross-entropy over the trained tokens of the step (token-mean).
//!
//! # Where the data comes from
//!
//! The samples are produced by the rollout engine itself, in rehearse mode, with the oracle
//! acting ([`OracleActor`]) and the real environment rehearsing ([`RealRehearser`]): the
//! sequences, labels, rehearse prompts and few-shot examples are exactly what RL will
//! generate, and the response cache that RL's rehearse prompts start from is filled on the way.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crate::chat;
use crate::config::PolicyRole;
use crate::error::{Error, Result};
use crate::eval::episodes::{PolicyJob, episode_specs};
use crate::eval::rehearsal::{AttemptSummary, CallSummary, MEMORY_HEADER, memory_text};
use crate::rehearse::{ResponseCache, outcome_json, render_for_agent};
use crate::rng::Rng;
use crate::rollout::{
    EpisodeSpec, OracleActor, RealRehearser, ResponseMode, RoleRouter, RolloutSettings, run_batch,
};
use crate::tasks::{self, GenTask};

use super::hooks::{Event, Flow, Hooks};
use super::session::{Phase, Session, optimizer_weight_decay};
use super::{AdamW, TrainItem, accumulate, learning_rate, pad_batch_packed, token_logprobs};
use crate::model::with_workers_awake;

/// Runs the oracle through the engine on every task and returns the labelled samples.
pub fn oracle_items(session: &mut Session, tasks: &[Arc<GenTask>]) -> Result<Vec<TrainItem>> {
    let mut settings = RolloutSettings::from_config(&session.config);
    settings.mode = ResponseMode::Rehearse;
    settings.max_turns = settings.max_turns.max(64);
    settings.max_parallel_calls = settings.max_parallel_calls.max(16);
    // Prompts are cut at `max_prompt_tokens` as in RL, so that each turn is trained on the
    // context the policy will see when it generates that turn (the oracle itself reads no prompt).
    settings.max_response_tokens = usize::MAX / 4;
    settings.fidelity = true;
    // The samples are built from an empty response cache, so that a job resumed during SFT
    // rebuilds exactly the samples of the run it continues; the cache they leave is the
    // session's (SFT does not change it otherwise).
    let mut cache = ResponseCache::new(session.cache.capacity());
    let mut items = Vec::new();
    for chunk in tasks.chunks(64) {
        let specs = episode_specs(session, chunk, 1)?;
        let envs = chunk
            .iter()
            .map(|task| tasks::fresh_env(task.domain, &session.sources))
            .collect::<Result<Vec<_>>>()?;
        let mut actor = OracleActor::new(chunk);
        let mut rehearser = RealRehearser::new(envs);
        let mut router = RoleRouter {
            act: &mut actor,
            rehearse: &mut rehearser,
        };
        let episodes = run_batch(
            specs,
            &settings,
            &session.codec,
            &mut router,
            None,
            session.judge.as_ref(),
            &mut cache,
        )?;
        for episode in episodes {
            for sample in &episode.samples {
                items.extend(TrainItem::of_sample(sample, 1.0));
            }
        }
    }
    if session.config.sft.memory_share > 0.0 {
        items.extend(memory_items(session, tasks, &settings, &mut cache)?);
    }
    session.cache = cache;
    Ok(items)
}

/// A call of `task`'s oracle changed so that the real tool rejects it, with the error it
/// gets: a number passed as a string, a string with a stray suffix, a missing argument or a
/// misspelt tool, whichever fails first in an order drawn from `rng`.
fn wrong_call(
    task: &GenTask,
    session: &Session,
    rng: &mut Rng,
) -> Result<Option<(chat::ToolCall, serde_json::Value)>> {
    let calls: Vec<chat::ToolCall> = task
        .oracle
        .iter()
        .filter(|m| m.role == chat::Role::Assistant)
        .flat_map(|m| tasks::parse_tool_calls(&m.content))
        .filter_map(std::result::Result::ok)
        .collect();
    let Some(original) = rng.pick(&calls).cloned() else {
        return Ok(None);
    };
    let mut order = [0usize, 1, 2, 3];
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let keys: Vec<String> = original.arguments.keys().cloned().collect();
    for kind in order {
        let mut call = original.clone();
        let args = &mut call.arguments;
        let changed = match kind {
            0 => args
                .values_mut()
                .find(|v| v.is_number())
                .map(|v| *v = serde_json::Value::String(v.to_string()))
                .is_some(),
            1 => args
                .values_mut()
                .find_map(|v| match v {
                    serde_json::Value::String(text) => {
                        text.push('x');
                        Some(())
                    }
                    _ => None,
                })
                .is_some(),
            2 => match rng.pick(&keys) {
                Some(key) => args.remove(key).is_some(),
                None => false,
            },
            _ => {
                call.name.push('s');
                true
            }
        };
        if !changed {
            continue;
        }
        let mut env = tasks::fresh_env(task.domain, &session.sources)?;
        let outcome = env.call(&call.name, &call.arguments_value());
        if outcome.is_failure() {
            return Ok(Some((call, outcome_json(&outcome))));
        }
    }
    Ok(None)
}

/// A rehearsal memory of the oracle's attempt at `task`, as the tokenizer's corpus holds it
/// so that a tiny model's tokenizer has tokens for the words memories are written in (its
/// header, `Attempt`, `answered`): the header, then the attempt's whole and compact lines.
pub(crate) fn memory_corpus_text(task: &GenTask, attempt_idx: usize) -> String {
    let summary = OracleAttempt::of(task).summary();
    format!(
        "{MEMORY_HEADER}\n{}\n{}\nno answer; ended by",
        summary.line(attempt_idx),
        summary.compact_line(attempt_idx)
    )
}

/// The share of the oracle attempts in an SFT memory that are shown as rehearsal imagines
/// them ([`OracleAttempt::imagined`]) rather than as they really went.
const IMAGINED_SHARE: f64 = 0.75;

/// The oracle's attempt at a task as a memory shows it: each call (`name`, arguments as
/// JSON text) with the response it got as the agent reads it, then the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OracleAttempt {
    calls: Vec<(String, String, String)>,
    answer: String,
}

impl OracleAttempt {
    /// The oracle's attempt at `task` with the real responses.
    fn of(task: &GenTask) -> Self {
        let mut calls = Vec::new();
        let mut pending: Vec<chat::ToolCall> = Vec::new();
        let mut answer = String::new();
        for message in &task.oracle {
            match message.role {
                chat::Role::Assistant => {
                    pending = tasks::parse_tool_calls(&message.content)
                        .into_iter()
                        .filter_map(std::result::Result::ok)
                        .collect();
                    pending.reverse();
                    if pending.is_empty() {
                        answer = message.content.trim().to_owned();
                    }
                }
                chat::Role::Tool => {
                    if let Some(call) = pending.pop() {
                        // Shown as the agent reads it, as test-time memories show responses.
                        let response = serde_json::from_str(&message.content)
                            .map_or_else(|_| message.content.clone(), |v| render_for_agent(&v));
                        calls.push((
                            call.name.clone(),
                            call.arguments_value().to_string(),
                            response,
                        ));
                    }
                }
                chat::Role::System | chat::Role::User => {}
            }
        }
        OracleAttempt { calls, answer }
    }

    /// The same attempt as the policy's own rehearsal tends to imagine it, so that acting
    /// on a memory learns to take values from the request and the real responses, never
    /// from the memory: numeric responses with a digit or two wrong (a simulator that
    /// cannot compute), now and then a miscopied number in the arguments, and an answer
    /// that repeats the imagined response (and now and then miscopies it too).
    fn imagined(&self, rng: &mut Rng) -> Self {
        let mut answer = self.answer.clone();
        let calls = self
            .calls
            .iter()
            .map(|(name, arguments, response)| {
                let arguments = if rng.chance(0.25) {
                    perturb_digits(arguments, rng)
                } else {
                    arguments.clone()
                };
                let imagined = if rng.chance(0.75) {
                    perturb_digits(response, rng)
                } else {
                    response.clone()
                };
                if !response.trim().is_empty() && imagined != *response {
                    answer = answer.replace(response.trim(), imagined.trim());
                }
                (name.clone(), arguments, imagined)
            })
            .collect();
        if rng.chance(0.25) {
            answer = perturb_digits(&answer, rng);
        }
        OracleAttempt { calls, answer }
    }

    /// The attempt as a memory line's parts.
    fn summary(&self) -> AttemptSummary {
        AttemptSummary {
            calls: self
                .calls
                .iter()
                .map(|(name, arguments, response)| CallSummary {
                    name: name.clone(),
                    arguments: arguments.clone(),
                    response: response.clone(),
                })
                .collect(),
            outcome: AttemptSummary::answer(&self.answer),
            answered: true,
        }
    }
}

/// `text` with one or two of its digits changed (replaced by another digit, swapped with
/// the next one or dropped from a longer number); unchanged when it has no digit.
fn perturb_digits(text: &str, rng: &mut Rng) -> String {
    let original: Vec<char> = text.chars().collect();
    let mut chars = original.clone();
    let n_edits = 1 + rng.below(2);
    for _ in 0..n_edits {
        let digits: Vec<usize> = (0..chars.len())
            .filter(|&i| chars[i].is_ascii_digit())
            .collect();
        let Some(&pos) = rng.pick(&digits) else {
            return text.to_owned();
        };
        let next_is_digit = chars.get(pos + 1).is_some_and(char::is_ascii_digit);
        let prev_is_digit = pos > 0 && chars[pos - 1].is_ascii_digit();
        match rng.below(3) {
            0 if next_is_digit && chars[pos] != chars[pos + 1] => chars.swap(pos, pos + 1),
            1 if next_is_digit || prev_is_digit => {
                chars.remove(pos);
            }
            _ => chars[pos] = other_digit(chars[pos], rng),
        }
    }
    if chars == original {
        // Two edits that undid each other: change one digit for certain.
        if let Some(pos) = chars.iter().position(char::is_ascii_digit) {
            chars[pos] = other_digit(chars[pos], rng);
        }
    }
    chars.into_iter().collect()
}

/// A digit other than `digit`, drawn from `rng`.
fn other_digit(digit: char, rng: &mut Rng) -> char {
    let value = digit.to_digit(10).unwrap_or(0) as usize;
    let new = (value + 1 + rng.below(9)) % 10;
    char::from_digit(new as u32, 10).unwrap_or('0')
}

/// The SFT samples that teach acting on a rehearsal memory (`[sft].memory_share`): for that
/// share of the tasks, the oracle's act sample again with a memory of 1–4 attempts after the
/// request (the oracle's own, most of them as rehearsal would imagine them, with wrong
/// numbers; or a deliberately wrong call with the real error it gets), and
/// the rehearse sample of that wrong call, so that rehearsal learns the tool's real errors.
/// The same tasks, attempts and seeds come out on every call (a resumed job rebuilds them).
fn memory_items(
    session: &Session,
    tasks: &[Arc<GenTask>],
    settings: &RolloutSettings,
    cache: &mut ResponseCache,
) -> Result<Vec<TrainItem>> {
    let share = session.config.sft.memory_share;
    let max_tokens = session.config.rehearsal.max_memory_tokens as usize;
    let seed = session.config.run.seed ^ 0x6d65_6d6f_7279_5f73;
    let mut memory_specs = Vec::new();
    let mut memory_tasks = Vec::new();
    let mut mistake_tasks = Vec::new();
    for (idx, task) in tasks.iter().enumerate() {
        let mut rng = Rng::new(seed ^ (idx as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        if !rng.chance(share) {
            continue;
        }
        let wrong = wrong_call(task, session, &mut rng)?;
        let n_attempts = 1 + rng.below(4);
        let attempts: Vec<AttemptSummary> = (0..n_attempts)
            .map(|_| match &wrong {
                Some((call, response)) if rng.chance(0.5) => AttemptSummary {
                    calls: vec![CallSummary {
                        name: call.name.clone(),
                        arguments: call.arguments_value().to_string(),
                        response: render_for_agent(response),
                    }],
                    outcome: "no answer".to_owned(),
                    answered: false,
                },
                _ => {
                    let oracle = OracleAttempt::of(task);
                    if rng.chance(IMAGINED_SHARE) {
                        oracle.imagined(&mut rng).summary()
                    } else {
                        oracle.summary()
                    }
                }
            })
            .collect();
        let memory = memory_text(&attempts, &session.codec, max_tokens)?;
        memory_specs.push(EpisodeSpec {
            task: task.clone(),
            env: session.real_env(task.domain)?,
            group: task.id.clone(),
            memory: Some(memory),
        });
        memory_tasks.push(task.clone());
        if let Some((call, response)) = wrong {
            // The task with the wrong call made first: its rehearse sample is the lesson.
            let mut mistaken = (**task).clone();
            mistaken.oracle.insert(
                1,
                chat::Message {
                    role: chat::Role::Assistant,
                    content: call.to_block(),
                },
            );
            mistaken.oracle.insert(
                2,
                chat::Message {
                    role: chat::Role::Tool,
                    content: render_for_agent(&response),
                },
            );
            mistake_tasks.push(Arc::new(mistaken));
        }
    }
    let mut items = Vec::new();
    let run = |batch_tasks: &[Arc<GenTask>],
               specs: Vec<EpisodeSpec>,
               cache: &mut ResponseCache|
     -> Result<Vec<crate::rollout::EpisodeRecord>> {
        let envs = batch_tasks
            .iter()
            .map(|task| tasks::fresh_env(task.domain, &session.sources))
            .collect::<Result<Vec<_>>>()?;
        let mut actor = OracleActor::new(batch_tasks);
        let mut rehearser = RealRehearser::new(envs);
        let mut router = RoleRouter {
            act: &mut actor,
            rehearse: &mut rehearser,
        };
        run_batch(
            specs,
            settings,
            &session.codec,
            &mut router,
            None,
            session.judge.as_ref(),
            cache,
        )
    };
    let mut specs = memory_specs.into_iter();
    for chunk in memory_tasks.chunks(64) {
        let batch: Vec<EpisodeSpec> = specs.by_ref().take(chunk.len()).collect();
        for episode in run(chunk, batch, cache)? {
            items.extend(
                episode
                    .samples
                    .iter()
                    .filter(|s| s.role == PolicyRole::Act)
                    .flat_map(|s| TrainItem::of_sample(s, 1.0)),
            );
        }
    }
    for chunk in mistake_tasks.chunks(64) {
        let batch = episode_specs(session, chunk, 1)?;
        // Only the wrong call's response is learnt; the few-shot cache is not extended by it.
        let mut scratch = cache.clone();
        for episode in run(chunk, batch, &mut scratch)? {
            items.extend(
                episode
                    .samples
                    .iter()
                    .filter(|s| s.role == PolicyRole::Rehearse && s.call == Some((0, 0)))
                    .flat_map(|s| TrainItem::of_sample(s, 1.0)),
            );
        }
    }
    Ok(items)
}

/// The indices of step `step`'s batch: consecutive positions of a shuffle of all items that
/// is redrawn every epoch from the run seed.
fn batch_indices(seed: u64, step: u32, batch_size: usize, n_items: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(batch_size);
    let mut cached_epoch = usize::MAX;
    let mut order: Vec<usize> = Vec::new();
    for slot in 0..batch_size {
        let position = step as usize * batch_size + slot;
        let epoch = position / n_items.max(1);
        if epoch != cached_epoch {
            order = (0..n_items).collect();
            let mut rng = Rng::new(seed ^ (epoch as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
            for i in (1..order.len()).rev() {
                let j = rng.below(i + 1);
                order.swap(i, j);
            }
            cached_epoch = epoch;
        }
        if let Some(&idx) = order.get(position % n_items.max(1)) {
            out.push(idx);
        }
    }
    out
}

/// The items of step `step`'s batch. With `rehearse_share` set, `round(batch_size × share)` of
/// them come from the rehearse samples and the rest from the act samples, each role through its
/// own per-epoch shuffle; otherwise the batch is drawn from all samples alike.
pub fn batch_items(
    items: &[TrainItem],
    seed: u64,
    step: u32,
    batch_size: usize,
    rehearse_share: Option<f64>,
) -> Vec<usize> {
    let Some(share) = rehearse_share else {
        return batch_indices(seed, step, batch_size, items.len());
    };
    let of_role = |role: PolicyRole| -> Vec<usize> {
        (0..items.len())
            .filter(|&i| items[i].role == role)
            .collect()
    };
    let (act, rehearse) = (of_role(PolicyRole::Act), of_role(PolicyRole::Rehearse));
    let mut n_rehearse = ((batch_size as f64) * share.clamp(0.0, 1.0)).round() as usize;
    if rehearse.is_empty() {
        n_rehearse = 0;
    } else if act.is_empty() {
        n_rehearse = batch_size;
    }
    let mut out: Vec<usize> = batch_indices(seed, step, batch_size - n_rehearse, act.len())
        .into_iter()
        .map(|i| act[i])
        .collect();
    out.extend(
        batch_indices(seed ^ 0x5bd1_e995, step, n_rehearse, rehearse.len())
            .into_iter()
            .map(|i| rehearse[i]),
    );
    out
}

/// Runs the SFT phase from `session.next_step` to its end; returns [`Flow::Stop`] when
/// stopped (after a checkpoint). Every `[eval].sft_interval_steps` steps the policy is
/// evaluated on `test_tasks` at the start of the step (so a resume from the checkpoint
/// before it evaluates again).
pub fn train(
    session: &mut Session,
    tasks: &[Arc<GenTask>],
    test_tasks: &[Arc<GenTask>],
    hooks: &mut dyn Hooks,
) -> Result<Flow> {
    let sft = session.config.sft.clone();
    let n_steps = sft.n_steps;
    let total_steps = n_steps + session.config.rl.n_steps;
    hooks.emit(Event::Log {
        level: "info".to_owned(),
        message: format!("SFT: building oracle samples from {} tasks", tasks.len()),
    });
    let items = oracle_items(session, tasks)?;
    let roles: Vec<PolicyRole> = sft.roles.clone();
    let max_len =
        (session.config.rl.max_prompt_tokens + session.config.rl.max_response_tokens) as usize;
    let n_trainable = items
        .iter()
        .filter(|i| i.n_trained(max_len, &roles) > 0)
        .count();
    if n_trainable == 0 {
        return Err(Error::Data {
            source_name: "[sft]".to_owned(),
            message: "no oracle sample has a trained token (check sft.roles and the task domains)"
                .to_owned(),
        });
    }
    hooks.emit(Event::Phase {
        phase: Phase::Sft,
        first_step: 0,
        n_steps,
    });
    if session.optimizer.is_none() {
        session.optimizer = Some(AdamW::new(
            &session.policy,
            optimizer_weight_decay(&session.config, Phase::Sft),
        )?);
    }
    let warmup = sft.warmup_steps.unwrap_or((n_steps / 20).max(1));
    let started = Instant::now();
    let first = session.next_step;
    for step in session.next_step..n_steps {
        if hooks.poll() == Flow::Stop {
            let path = session.checkpoint(step.saturating_sub(1))?;
            hooks.emit(Event::Checkpoint {
                step: step.saturating_sub(1),
                path: path.display().to_string(),
            });
            return Ok(Flow::Stop);
        }
        let eval_interval = session.config.eval.sft_interval_steps;
        if eval_interval > 0
            && step > 0
            && step.is_multiple_of(eval_interval)
            && !test_tasks.is_empty()
        {
            super::evaluation::held_out_eval(session, test_tasks, step, hooks)?;
        }
        let step_started = Instant::now();
        let picked = batch_items(
            &items,
            session.config.run.seed,
            step,
            sft.batch_size as usize,
            sft.rehearse_share,
        );
        let mut batch_items: Vec<&TrainItem> = picked.iter().map(|&i| &items[i]).collect();
        // Micro-batches of similar lengths pad less; the step's loss is their sum either way.
        batch_items.sort_by_key(|item| item.window_len(max_len));
        let total: usize = batch_items
            .iter()
            .map(|i| i.n_trained(max_len, &roles))
            .sum();
        let lr = learning_rate(
            sft.lr,
            sft.lr_schedule,
            warmup,
            sft.min_lr_ratio,
            step,
            n_steps,
        );
        // Forward, backward and the optimizer step with the pool's workers kept awake (their
        // many small ops would otherwise wake a sleeping worker each).
        let policy = &session.policy;
        let optimizer = session.optimizer.as_mut();
        let (grad_norm, loss_by_role) = with_workers_awake(policy.device(), || -> Result<_> {
            let mut grads = None;
            let mut loss_by_role: BTreeMap<&'static str, (f64, f64)> = BTreeMap::new();
            for micro in batch_items.chunks(sft.micro_batch_size.max(1) as usize) {
                let batch = pad_batch_packed(micro, max_len, &roles, policy)?;
                if batch.n_trained == 0 {
                    continue;
                }
                let (logp, _) = token_logprobs(policy, &batch, false)?;
                let run = || -> candle_core::Result<(candle_core::Tensor, Vec<f32>, Vec<f32>)> {
                    let weighted = (&logp * &batch.weight)?;
                    let loss = (weighted.sum_all()?.neg()? / total.max(1) as f64)?;
                    let rows = weighted.sum(1)?.neg()?.to_vec1::<f32>()?;
                    let counts = batch.weight.sum(1)?.to_vec1::<f32>()?;
                    Ok((loss, rows, counts))
                };
                let (loss, rows, counts) = run().map_err(|e| Error::candle("SFT loss", e))?;
                for ((item, row), count) in micro.iter().zip(rows).zip(counts) {
                    let name = match item.role {
                        PolicyRole::Act => "act",
                        PolicyRole::Rehearse => "rehearse",
                    };
                    let entry = loss_by_role.entry(name).or_default();
                    entry.0 += f64::from(row);
                    entry.1 += f64::from(count);
                }
                let step_grads = loss
                    .backward()
                    .map_err(|e| Error::candle("SFT backward", e))?;
                accumulate(&mut grads, step_grads, policy)?;
            }
            let grad_norm = match (grads, optimizer) {
                (Some(grads), Some(optimizer)) => optimizer.step(&grads, lr, 1.0, 1.0)?,
                _ => 0.0,
            };
            Ok((grad_norm, loss_by_role))
        })?;
        let secs = step_started.elapsed().as_secs_f64();
        let mut metrics = BTreeMap::new();
        let (sum, count) = loss_by_role
            .values()
            .fold((0.0, 0.0), |acc, (s, c)| (acc.0 + s, acc.1 + c));
        metrics.insert("sft/loss".to_owned(), sum / count.max(1.0));
        for (name, (s, c)) in &loss_by_role {
            metrics.insert(format!("sft/loss_{name}"), s / c.max(1.0));
        }
        metrics.insert("sft/grad_norm".to_owned(), grad_norm);
        metrics.insert("sft/lr".to_owned(), lr);
        metrics.insert("perf/step_time_secs".to_owned(), secs);
        let tokens_per_sec = total as f64 / secs.max(1e-9);
        metrics.insert("perf/tokens_per_sec".to_owned(), tokens_per_sec);
        for (key, value) in &metrics {
            session.writer.metric(u64::from(step), key, *value)?;
        }
        crate::crash::point("step.done");
        session.next_step = step + 1;
        let done = f64::from(step + 1 - first);
        let eta = started.elapsed().as_secs_f64() / done * f64::from(total_steps - step - 1);
        hooks.emit(Event::Step {
            phase: Phase::Sft,
            step,
            total_steps,
            metrics,
            tokens_per_sec,
            eta_secs: eta,
        });
        let interval = session.config.run.checkpoint_interval_steps.max(1);
        if (step + 1).is_multiple_of(interval) && step + 1 < n_steps {
            session.writer.flush()?;
            let path = session.checkpoint(step)?;
            hooks.emit(Event::Checkpoint {
                step,
                path: path.display().to_string(),
            });
        }
    }
    session.phase = Phase::Rl;
    if session.config.rl.carry_optimizer {
        // RL continues with SFT's moments; only the weight decay changes.
        if let Some(optimizer) = session.optimizer.as_mut() {
            optimizer.set_weight_decay(optimizer_weight_decay(&session.config, Phase::Rl));
        }
    } else {
        session.optimizer = None;
    }
    session.writer.flush()?;
    if n_steps > 0 {
        let path = session.checkpoint(n_steps - 1)?;
        hooks.emit(Event::Checkpoint {
            step: n_steps - 1,
            path: path.display().to_string(),
        });
    }
    Ok(Flow::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arithmetic_tasks() -> Vec<GenTask> {
        let sources = tasks::GenSources {
            retail: None,
            airline: None,
        };
        let config = tasks::GenConfig {
            seed: 11,
            split: crate::config::TaskSplit::Train,
            difficulty: 1,
            n_tasks: 20,
            families: vec!["fn_arithmetic".to_owned()],
        };
        tasks::generate(crate::config::Domain::Functions, &sources, &config).unwrap()
    }

    #[test]
    fn perturbing_digits_changes_digits_only() {
        let mut rng = Rng::new(5);
        for text in ["27264", "247.2222", "The product is 27264.", "7", "-3.5"] {
            for _ in 0..50 {
                let out = perturb_digits(text, &mut rng);
                assert_ne!(out, text);
                let letters = |t: &str| {
                    t.chars()
                        .filter(|c| !c.is_ascii_digit())
                        .collect::<String>()
                };
                assert_eq!(letters(&out), letters(text), "{text} -> {out}");
                // At most two digits differ in count (one or two edits).
                let n_digits = |t: &str| t.chars().filter(char::is_ascii_digit).count();
                assert!(n_digits(text) - n_digits(&out) <= 2, "{text} -> {out}");
                assert!(n_digits(&out) >= 1, "{text} -> {out}");
            }
        }
        assert_eq!(perturb_digits("Hello, world", &mut rng), "Hello, world");
    }

    #[test]
    fn an_imagined_oracle_attempt_gets_numbers_wrong_but_keeps_its_calls() {
        let mut rng = Rng::new(9);
        let mut n_wrong_responses = 0;
        let mut n_answers_follow = 0;
        let mut n_calls = 0;
        for task in arithmetic_tasks() {
            let real = OracleAttempt::of(&task);
            assert!(!real.calls.is_empty(), "{}", task.id);
            assert!(!real.answer.is_empty(), "{}", task.id);
            let imagined = real.imagined(&mut rng);
            assert_eq!(imagined.calls.len(), real.calls.len());
            for ((name, _, response), (real_name, _, real_response)) in
                imagined.calls.iter().zip(&real.calls)
            {
                n_calls += 1;
                assert_eq!(name, real_name);
                if response != real_response {
                    n_wrong_responses += 1;
                    // The imagined answer repeats the imagined value, not the real one.
                    if real.answer.contains(real_response.trim())
                        && imagined.answer.contains(response.trim())
                    {
                        n_answers_follow += 1;
                    }
                }
            }
            let line = imagined.summary().line(0);
            assert!(line.starts_with("Attempt 1: "), "{line}");
            assert!(line.contains(" -> "), "{line}");
        }
        // Three in four responses are imagined wrong; 20 tasks leave room for chance.
        assert!(
            n_wrong_responses * 2 > n_calls,
            "{n_wrong_responses} of {n_calls}"
        );
        assert!(
            n_answers_follow * 2 > n_wrong_responses,
            "{n_answers_follow}"
        );
        // The real attempt's line is the oracle's own.
        let task = &arithmetic_tasks()[0];
        let real = OracleAttempt::of(task).summary();
        let tool = task
            .oracle
            .iter()
            .find(|m| m.role == chat::Role::Tool)
            .unwrap();
        let shown = render_for_agent(&serde_json::from_str(&tool.content).unwrap());
        assert_eq!(real.calls[0].response, shown, "{:?}", real.calls[0]);
        assert!(
            !real.calls[0].response.contains("\"result\""),
            "{:?}",
            real.calls[0]
        );
        let line = real.line(0);
        assert!(line.contains(&format!(" -> {shown}; answer: ")), "{line}");
    }

    #[test]
    fn batches_cover_each_epoch_once() {
        let n_items = 10;
        let mut seen: Vec<usize> = (0..5)
            .flat_map(|step| batch_indices(3, step, 2, n_items))
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_eq!(
            batch_indices(3, 7, 4, n_items),
            batch_indices(3, 7, 4, n_items)
        );
        assert_ne!(
            batch_indices(3, 0, 10, n_items),
            batch_indices(4, 0, 10, n_items)
        );
    }

    fn item(role: PolicyRole) -> TrainItem {
        TrainItem {
            role,
            tokens: vec![1, 2],
            labels: Vec::new(),
            advantage: 1.0,
            start: 0,
            pinned: 0,
        }
    }

    #[test]
    fn rehearse_share_splits_every_batch() {
        // Three act samples for each rehearse sample.
        let items: Vec<TrainItem> = (0..40)
            .map(|i| {
                item(if i % 4 == 3 {
                    PolicyRole::Rehearse
                } else {
                    PolicyRole::Act
                })
            })
            .collect();
        let mut rehearse_seen = Vec::new();
        for step in 0..5 {
            let picked = batch_items(&items, 9, step, 8, Some(0.5));
            assert_eq!(picked.len(), 8);
            let n_rehearse = picked
                .iter()
                .filter(|&&i| items[i].role == PolicyRole::Rehearse)
                .count();
            assert_eq!(n_rehearse, 4, "step {step}: {picked:?}");
            rehearse_seen.extend(picked.into_iter().filter(|&i| i % 4 == 3));
        }
        // 20 rehearse draws over 10 rehearse samples: two whole epochs, each sample twice.
        rehearse_seen.sort_unstable();
        let expected: Vec<usize> = (0..10).flat_map(|k| [4 * k + 3, 4 * k + 3]).collect();
        assert_eq!(rehearse_seen, expected);
        // Unset: the plain shuffle of all samples.
        assert_eq!(
            batch_items(&items, 9, 2, 8, None),
            batch_indices(9, 2, 8, items.len())
        );
        assert!(
            batch_items(&items, 9, 0, 8, Some(0.0))
                .iter()
                .all(|&i| items[i].role == PolicyRole::Act)
        );
    }
}
