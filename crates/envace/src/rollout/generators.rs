//! What produces tokens for the engine: the [`Generator`] trait with its requests and outputs,
//! the policy ([`PolicyGenerator`]), one generator per role ([`RoleRouter`]) and the
//! deterministic stand-ins used for SFT data and tests ([`Scripted`], [`OracleActor`],
//! [`RealRehearser`]).

use std::sync::Arc;

use serde_json::Value;

use crate::chat;
use crate::config::PolicyRole;
use crate::env::Environment;
use crate::error::Result;
use crate::model::{Policy, Sampling};
use crate::rehearse::{INVALID_TOOL_CALL_FORMAT, error_json, outcome_json};
use crate::tasks::GenTask;

use super::codec::TokenCodec;

/// One generation the engine asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationRequest {
    /// Acting or rehearsing.
    pub role: PolicyRole,
    /// The (left-truncated) context.
    pub prompt: Vec<u32>,
    /// Token limit of the answer.
    pub max_new_tokens: usize,
    /// Sampling seed.
    pub seed: u64,
    /// The episode asking, within its batch.
    pub episode_idx: usize,
    /// The assistant turn.
    pub turn_idx: usize,
    /// For rehearse requests, the call within the turn.
    pub call_idx: Option<usize>,
    /// For rehearse requests of well-formed calls, the tool and arguments (what an oracle
    /// simulator answers from; a model reads them from the prompt).
    pub rehearse_call: Option<(String, Value)>,
}

/// A generation: new tokens (the stop token included when reached) and their log-probabilities.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationOutput {
    /// The new tokens.
    pub tokens: Vec<u32>,
    /// Log-probability of each new token under the generating policy.
    pub logprobs: Vec<f32>,
}

/// Whatever produces tokens for the engine: the policy, or a deterministic stand-in.
pub trait Generator {
    /// Answers every request, in order.
    fn generate(
        &mut self,
        codec: &TokenCodec,
        requests: &[GenerationRequest],
    ) -> Result<Vec<GenerationOutput>>;
}

/// The policy as a generator: all requests in one left-padded batch.
#[derive(Debug, Clone)]
pub struct PolicyGenerator {
    /// The model.
    pub policy: Policy,
    /// Temperature, top-p and top-k; the seed comes from the requests.
    pub sampling: Sampling,
    /// Most requests generated together.
    pub max_batch: usize,
}

impl Generator for PolicyGenerator {
    fn generate(
        &mut self,
        codec: &TokenCodec,
        requests: &[GenerationRequest],
    ) -> Result<Vec<GenerationOutput>> {
        let mut out = Vec::with_capacity(requests.len());
        for chunk in requests.chunks(self.max_batch.max(1)) {
            let prompts: Vec<Vec<u32>> = chunk.iter().map(|r| r.prompt.clone()).collect();
            let max_new = chunk.iter().map(|r| r.max_new_tokens).max().unwrap_or(0);
            let sampling = Sampling {
                seed: chunk.first().map_or(0, |r| r.seed),
                ..self.sampling.clone()
            };
            let generated = self
                .policy
                .generate(&prompts, max_new, codec.stop_ids(), &sampling)?;
            for (request, mut g) in chunk.iter().zip(generated) {
                g.tokens.truncate(request.max_new_tokens);
                g.logprobs.truncate(request.max_new_tokens);
                out.push(GenerationOutput {
                    tokens: g.tokens,
                    logprobs: g.logprobs,
                });
            }
        }
        Ok(out)
    }
}

/// The policy's copy on a wgpu device as a generator: all requests in left-padded batches, as
/// [`PolicyGenerator`] does on the training device (same sampling settings; the draws come from
/// the GPU's own seeded generator).
#[cfg(feature = "wgpu")]
#[derive(Debug)]
pub struct GpuGenerator<'a> {
    /// The weights on the GPU, refreshed by the trainer after each optimizer step.
    pub model: &'a crate::model::wgpu::GpuModel,
    /// Temperature, top-p and top-k; the seed comes from the requests.
    pub sampling: Sampling,
    /// Most requests generated together.
    pub max_batch: usize,
}

#[cfg(feature = "wgpu")]
impl Generator for GpuGenerator<'_> {
    fn generate(
        &mut self,
        codec: &TokenCodec,
        requests: &[GenerationRequest],
    ) -> Result<Vec<GenerationOutput>> {
        let mut out = Vec::with_capacity(requests.len());
        for chunk in requests.chunks(self.max_batch.max(1)) {
            let prompts: Vec<Vec<u32>> = chunk.iter().map(|r| r.prompt.clone()).collect();
            let max_new = chunk.iter().map(|r| r.max_new_tokens).max().unwrap_or(0);
            let sampling = Sampling {
                seed: chunk.first().map_or(0, |r| r.seed),
                ..self.sampling.clone()
            };
            let generated = crate::model::wgpu::generate(
                self.model,
                &prompts,
                max_new,
                codec.stop_ids(),
                &sampling,
            )?;
            for (request, mut g) in chunk.iter().zip(generated) {
                g.tokens.truncate(request.max_new_tokens);
                g.logprobs.truncate(request.max_new_tokens);
                out.push(GenerationOutput {
                    tokens: g.tokens,
                    logprobs: g.logprobs,
                });
            }
        }
        Ok(out)
    }
}

/// A deterministic stand-in for the model: a function from the request and its decoded
/// prompt to the text to emit (followed by the first stop token, log-probability 0). Used by
/// tests and benchmarks to drive every branch of the real engine.
pub struct Scripted<F> {
    script: F,
}

impl<F> Scripted<F>
where
    F: FnMut(&GenerationRequest, &str) -> String,
{
    /// A generator that answers with `script(request, prompt_text)`.
    pub fn new(script: F) -> Self {
        Scripted { script }
    }
}

impl<F> std::fmt::Debug for Scripted<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripted")
    }
}

impl<F> Generator for Scripted<F>
where
    F: FnMut(&GenerationRequest, &str) -> String,
{
    fn generate(
        &mut self,
        codec: &TokenCodec,
        requests: &[GenerationRequest],
    ) -> Result<Vec<GenerationOutput>> {
        requests
            .iter()
            .map(|request| {
                let prompt = codec.decode(&request.prompt)?;
                let text = (self.script)(request, &prompt);
                let mut tokens = codec.encode(&text)?;
                tokens.truncate(request.max_new_tokens);
                if tokens.len() < request.max_new_tokens
                    && let Some(&stop) = codec.stop_ids().first()
                {
                    tokens.push(stop);
                }
                let logprobs = vec![0.0; tokens.len()];
                Ok(GenerationOutput { tokens, logprobs })
            })
            .collect()
    }
}

/// The oracle acting: episode `i` of the batch replays the assistant turns of `tasks[i]`'s
/// oracle trajectory (the SFT targets of the Act role).
#[derive(Debug, Clone)]
pub struct OracleActor {
    turns: Vec<Vec<String>>,
}

impl OracleActor {
    /// An actor for a batch whose episode `i` runs `tasks[i]`.
    pub fn new(tasks: &[Arc<GenTask>]) -> Self {
        OracleActor {
            turns: tasks
                .iter()
                .map(|task| {
                    task.oracle
                        .iter()
                        .filter(|m| m.role == chat::Role::Assistant)
                        .map(|m| m.content.clone())
                        .collect()
                })
                .collect(),
        }
    }
}

impl Generator for OracleActor {
    fn generate(
        &mut self,
        codec: &TokenCodec,
        requests: &[GenerationRequest],
    ) -> Result<Vec<GenerationOutput>> {
        let turns = &self.turns;
        Scripted::new(|request: &GenerationRequest, _: &str| {
            turns
                .get(request.episode_idx)
                .and_then(|t| t.get(request.turn_idx))
                .cloned()
                .unwrap_or_default()
        })
        .generate(codec, requests)
    }
}

/// The real environment playing the simulator: each episode's calls run in order on its own
/// environment and are answered with the exact rehearse block (the SFT targets of the
/// Rehearse role, and the perfect simulator fidelity is measured against).
#[derive(Debug)]
pub struct RealRehearser {
    envs: Vec<Box<dyn Environment>>,
}

impl RealRehearser {
    /// A rehearser for a batch whose episode `i` starts from `envs[i]`.
    pub fn new(envs: Vec<Box<dyn Environment>>) -> Self {
        RealRehearser { envs }
    }
}

impl Generator for RealRehearser {
    fn generate(
        &mut self,
        codec: &TokenCodec,
        requests: &[GenerationRequest],
    ) -> Result<Vec<GenerationOutput>> {
        let envs = &mut self.envs;
        Scripted::new(|request: &GenerationRequest, _: &str| {
            let answer = match (&request.rehearse_call, envs.get_mut(request.episode_idx)) {
                (Some((name, arguments)), Some(env)) => outcome_json(&env.call(name, arguments)),
                _ => error_json(
                    INVALID_TOOL_CALL_FORMAT,
                    "the call is not a well-formed tool call",
                ),
            };
            crate::rehearse::execution_result_block(&answer)
        })
        .generate(codec, requests)
    }
}

/// Separate generators per role: e.g. a frozen caller acting while the policy rehearses.
pub struct RoleRouter<'a> {
    /// Answers Act requests.
    pub act: &'a mut dyn Generator,
    /// Answers Rehearse requests.
    pub rehearse: &'a mut dyn Generator,
}

impl std::fmt::Debug for RoleRouter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RoleRouter")
    }
}

impl Generator for RoleRouter<'_> {
    fn generate(
        &mut self,
        codec: &TokenCodec,
        requests: &[GenerationRequest],
    ) -> Result<Vec<GenerationOutput>> {
        let (act, rehearse): (Vec<_>, Vec<_>) = requests
            .iter()
            .enumerate()
            .partition(|(_, r)| r.role == PolicyRole::Act);
        let act_requests: Vec<GenerationRequest> = act.iter().map(|(_, r)| (*r).clone()).collect();
        let rehearse_requests: Vec<GenerationRequest> =
            rehearse.iter().map(|(_, r)| (*r).clone()).collect();
        let act_out = if act_requests.is_empty() {
            Vec::new()
        } else {
            self.act.generate(codec, &act_requests)?
        };
        let rehearse_out = if rehearse_requests.is_empty() {
            Vec::new()
        } else {
            self.rehearse.generate(codec, &rehearse_requests)?
        };
        let mut out = vec![GenerationOutput::default(); requests.len()];
        for ((idx, _), g) in act.iter().zip(act_out) {
            out[*idx] = g;
        }
        for ((idx, _), g) in rehearse.iter().zip(rehearse_out) {
            out[*idx] = g;
        }
        Ok(out)
    }
}
