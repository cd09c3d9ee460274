//! Running a policy's episodes for a training job, shared by training and evaluation: each
//! step's rollout settings and sampling, episode specs on fresh environments, batches of a
//! task's copies with their memories, and the committed greedy attempts; [`PolicyJob`] is what
//! they read of the job.

use std::sync::Arc;

use crate::config::{Domain, ExperimentConfig, RlConfig};
use crate::env::Environment;
use crate::error::Result;
use crate::judge::EpisodeJudge;
use crate::model::{Policy, Sampling};
use crate::rehearse::ResponseCache;
use crate::rollout::{
    EpisodeRecord, EpisodeSpec, PolicyGenerator, ResponseMode, RolloutSettings, TokenCodec,
    run_batch,
};
use crate::tasks::{GenSources, GenTask};

/// What running a policy's episodes reads of a training job (`rl::session::Session` is one):
/// the experiment, the policy and its token codec, the task sources, the judge and the
/// few-shot cache.
pub trait PolicyJob {
    /// The experiment.
    fn config(&self) -> &ExperimentConfig;
    /// The policy that acts (and rehearses).
    fn policy(&self) -> &Policy;
    /// Tokenizer, chat template and stop token.
    fn codec(&self) -> &TokenCodec;
    /// Loaded τ²-bench data for fresh environments.
    fn sources(&self) -> &GenSources;
    /// Decides episode scores.
    fn judge(&self) -> &dyn EpisodeJudge;
    /// Real responses for few-shot rehearse prompts (copied, never changed, by episodes here).
    fn cache(&self) -> &ResponseCache;
    /// A fresh real environment of `domain` for one episode: the built-in domain, or the MCP
    /// server `[[env.mcp_servers]]` names for it.
    fn real_env(&self, domain: Domain) -> Result<Box<dyn Environment>>;
}

/// The rollout settings of step `step`: the experiment's, with a seed derived from the step.
pub fn step_settings(job: &dyn PolicyJob, step: u32) -> RolloutSettings {
    let mut settings = RolloutSettings::from_config(job.config());
    settings.seed = job
        .config()
        .run
        .seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(u64::from(step) + 1);
    settings
}

/// How RL rollouts sample: `[rl].temperature` and `top_p`, the seed from the requests.
pub fn rollout_sampling(rl: &RlConfig) -> Sampling {
    Sampling {
        temperature: rl.temperature,
        top_p: rl.top_p,
        top_k: 0,
        seed: 0,
    }
}

/// One episode spec per task and copy (task-major), each on a fresh environment, grouped by
/// task id.
pub fn episode_specs(
    job: &dyn PolicyJob,
    tasks: &[Arc<GenTask>],
    group_size: usize,
) -> Result<Vec<EpisodeSpec>> {
    let mut specs = Vec::with_capacity(tasks.len() * group_size);
    for task in tasks {
        for _ in 0..group_size {
            specs.push(EpisodeSpec {
                task: task.clone(),
                env: job.real_env(task.domain)?,
                group: task.id.clone(),
                memory: None,
            });
        }
    }
    Ok(specs)
}

/// `copies` episodes of each task (task-major, 32 episodes per batch at most), each with its
/// task's memory when `memories` is given (one per task); few-shot examples come from a copy
/// of the job's cache, which the episodes do not change.
pub fn episodes_of(
    job: &dyn PolicyJob,
    tasks: &[Arc<GenTask>],
    copies: usize,
    settings: &RolloutSettings,
    sampling: Sampling,
    memories: Option<&[String]>,
) -> Result<Vec<EpisodeRecord>> {
    let copies = copies.max(1);
    let mut generator = PolicyGenerator {
        policy: job.policy().clone(),
        sampling,
        max_batch: 32,
    };
    let tasks_per_batch = (16 / copies).max(1);
    let mut episodes = Vec::with_capacity(tasks.len() * copies);
    for (chunk_idx, chunk) in tasks.chunks(tasks_per_batch).enumerate() {
        let mut specs = episode_specs(job, chunk, copies)?;
        if let Some(memories) = memories {
            for (offset, spec) in specs.iter_mut().enumerate() {
                spec.memory = memories
                    .get(chunk_idx * tasks_per_batch + offset / copies)
                    .cloned();
            }
        }
        let mut cache = job.cache().clone();
        episodes.extend(run_batch(
            specs,
            settings,
            job.codec(),
            &mut generator,
            None,
            job.judge(),
            &mut cache,
        )?);
    }
    Ok(episodes)
}

/// The committed (greedy, real-environment) attempts at `tasks`, each with its rehearsal
/// memory when `memories` is given (one per task).
pub fn committed_episodes(
    job: &dyn PolicyJob,
    tasks: &[Arc<GenTask>],
    step: u32,
    memories: Option<&[String]>,
) -> Result<Vec<EpisodeRecord>> {
    let mut settings = step_settings(job, step);
    settings.mode = ResponseMode::Real;
    settings.fidelity = false;
    episodes_of(job, tasks, 1, &settings, Sampling::greedy(), memories)
}
