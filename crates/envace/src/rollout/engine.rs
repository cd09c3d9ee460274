//! The batched episode loop: generation requests, tool-call answering in every response
//! mode, labelled token bookkeeping, fidelity replays and judging (see the module
//! documentation of [`crate::rollout`]).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::chat::{self, Message, parse_tool_calls};
use crate::config::{
    ExperimentConfig, MemoryPosition, PolicyRole, RlCredit, ToolPrompt, ToolResponseMode,
};
use crate::env::Environment;
use crate::error::{Error, Result};
use crate::fidelity;
use crate::judge::{EpisodeJudge, Verdict};
use crate::rehearse::{
    CallUnderTest, INVALID_TOOL_CALL_FORMAT, RehearseInput, ResponseCache, ends_trajectory,
    error_code, error_json, outcome_json, parse_execution_result, rehearse_messages,
    render_for_agent,
};
use crate::rng::Rng;
use crate::tasks::GenTask;

use super::codec::TokenCodec;
use super::generators::{GenerationRequest, Generator};
use super::record::{
    CallRecord, EndReason, EpisodeRecord, GenerationWindow, Label, ResponseSource, Sample,
    TurnRecord,
};

/// The error code recorded for a call the external simulator could not answer (the episode is
/// masked).
pub const SIMULATOR_UNAVAILABLE: &str = "SIMULATOR_UNAVAILABLE";

/// The error code of a call over the per-turn limit.
pub const TOO_MANY_TOOL_CALLS: &str = "TOO_MANY_TOOL_CALLS";

/// An external simulator: answers a rehearse prompt (chat messages) with text, or fails with
/// a reason (the episode is then masked).
pub trait Simulator: Sync {
    /// The simulator's answer to the rehearse prompt.
    fn simulate(&self, messages: &[Value]) -> std::result::Result<String, String>;
}

/// Who answers tool calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ResponseMode {
    /// The real environment.
    Real,
    /// The policy, rehearsing.
    Rehearse,
    /// An external simulator.
    External,
    /// Rehearse with this probability per call, else real.
    Mixed {
        /// Probability of rehearsing a call.
        rehearse_probability: f64,
    },
}

impl ResponseMode {
    /// The mode an experiment's `[env]` section asks for.
    pub fn from_config(config: &ExperimentConfig) -> Self {
        match config.env.tool_response_mode {
            ToolResponseMode::Real => ResponseMode::Real,
            ToolResponseMode::Rehearse => ResponseMode::Rehearse,
            ToolResponseMode::External => ResponseMode::External,
            ToolResponseMode::Mixed => ResponseMode::Mixed {
                rehearse_probability: config.env.mix_ratio,
            },
        }
    }

    /// `real`, `rehearse`, `external` or `mixed`.
    pub fn name(self) -> &'static str {
        match self {
            ResponseMode::Real => "real",
            ResponseMode::Rehearse => "rehearse",
            ResponseMode::External => "external",
            ResponseMode::Mixed { .. } => "mixed",
        }
    }
}

/// The limits and choices of a batch of episodes.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutSettings {
    /// Who answers tool calls.
    pub mode: ResponseMode,
    /// Most assistant turns per episode.
    pub max_turns: usize,
    /// Most tool calls run per turn.
    pub max_parallel_calls: usize,
    /// Most context tokens a generation sees (older tokens are cut).
    pub max_prompt_tokens: usize,
    /// Most tokens per generation.
    pub max_response_tokens: usize,
    /// Real responses shown per rehearse prompt.
    pub n_few_shot: usize,
    /// Longest conversation excerpt in a rehearse prompt, in characters.
    pub max_conversation_chars: usize,
    /// Replay non-real responses against the real environment and score them.
    pub fidelity: bool,
    /// Seed of sampling and of the mixed-mode draws.
    pub seed: u64,
    /// A system message before the task's request.
    pub system_prompt: Option<String>,
    /// Tool schemas or only tool names in the act and rehearse prompts.
    pub tool_prompt: ToolPrompt,
    /// Where an episode's rehearsal memory goes: before or after the request.
    pub memory_position: MemoryPosition,
    /// Also judge each episode with simulated answers with its final answer read against the
    /// responses it was shown ([`crate::judge::answer_as_real`]): the act role's reward under
    /// `[rl].credit = "role"`.
    pub judge_as_shown: bool,
}

impl RolloutSettings {
    /// The settings of an experiment: `[env]` limits and mode, `[rl]` token limits.
    pub fn from_config(config: &ExperimentConfig) -> Self {
        RolloutSettings {
            mode: ResponseMode::from_config(config),
            max_turns: config.env.max_turns as usize,
            max_parallel_calls: config.env.max_parallel_calls as usize,
            max_prompt_tokens: config.rl.max_prompt_tokens as usize,
            max_response_tokens: config.rl.max_response_tokens as usize,
            n_few_shot: config.env.n_few_shot as usize,
            max_conversation_chars: 4000,
            fidelity: true,
            seed: config.run.seed,
            system_prompt: None,
            tool_prompt: config.env.tool_prompt,
            memory_position: config.rehearsal.memory_position,
            judge_as_shown: config.rl.credit == RlCredit::Role,
        }
    }
}

/// One episode to run: a task and a real environment in the task's initial state.
#[derive(Debug)]
pub struct EpisodeSpec {
    /// The task.
    pub task: Arc<GenTask>,
    /// The real environment (in rehearse mode, the shadow that fidelity replays run on).
    pub env: Box<dyn Environment>,
    /// The prompt group (GRPO baselines are per group); usually the task id.
    pub group: String,
    /// A test-time rehearsal memory, shown to the agent as a turn just before or just after the
    /// task's request (`RolloutSettings::memory_position`).
    pub memory: Option<String>,
}

struct Live {
    idx: usize,
    /// Tokens of the system turn and the request, kept when a long context is cut.
    head: usize,
    spec: EpisodeSpec,
    tools_json: Vec<Value>,
    messages: Vec<Value>,
    act: Sample,
    rehearsals: Vec<Sample>,
    turns: Vec<TurnRecord>,
    end: Option<EndReason>,
    rng: Rng,
}

/// A call waiting for the policy's rehearsal.
struct RehearseJob {
    live: usize,
    call_idx: usize,
    prompt: Vec<u32>,
    call: Option<(String, Value)>,
}

/// A call waiting for its simulator answer.
struct Pending {
    live: usize,
    call_idx: usize,
    messages: Vec<Value>,
}

/// Runs a batch of episodes to the end and judges them. `simulator` answers calls in
/// external mode; `cache` supplies few-shot examples and collects every real response seen.
pub fn run_batch(
    specs: Vec<EpisodeSpec>,
    settings: &RolloutSettings,
    codec: &TokenCodec,
    generator: &mut dyn Generator,
    simulator: Option<&dyn Simulator>,
    judge: &dyn EpisodeJudge,
    cache: &mut ResponseCache,
) -> Result<Vec<EpisodeRecord>> {
    if settings.mode == ResponseMode::External && simulator.is_none() {
        return Err(Error::Data {
            source_name: "rollout".to_owned(),
            message: "tool_response_mode is external but no simulator endpoint is configured ([env.external])".to_owned(),
        });
    }
    let mut lives = Vec::with_capacity(specs.len());
    for (idx, spec) in specs.into_iter().enumerate() {
        let (tools_json, tool_line) = match settings.tool_prompt {
            ToolPrompt::Schemas => (spec.env.tool_schemas(), None),
            ToolPrompt::Names => (
                Vec::new(),
                Some(format!(
                    "Tools: {}",
                    crate::env::tool_names(spec.env.tools())
                )),
            ),
        };
        let system = match (&settings.system_prompt, tool_line) {
            (Some(system), Some(line)) => Some(format!("{system}\n\n{line}")),
            (Some(system), None) => Some(system.clone()),
            (None, line) => line,
        };
        let mut messages = Vec::new();
        if let Some(system) = &system {
            messages.push(json!({"role": "system", "content": system}));
        }
        // The head stays whenever a long context is cut, when its rendering is a prefix of the
        // prompt's (a template may render the last turn differently): the system turn and the
        // request. A rehearsal memory before the request leaves the system turn alone as the
        // head, so the request stays next to the turn that acts on it and a cut drops the
        // memory (the oldest middle) first; after the request, it is the first turn a cut drops.
        let memory_before = settings.memory_position == MemoryPosition::BeforeRequest;
        if let (Some(memory), true) = (&spec.memory, memory_before) {
            messages.push(json!({"role": "user", "content": memory}));
        }
        let head_len = if spec.memory.is_some() && memory_before {
            messages.len() - 1
        } else {
            messages.len() + 1
        };
        messages.push(json!({"role": "user", "content": spec.task.request}));
        if let (Some(memory), false) = (&spec.memory, memory_before) {
            messages.push(json!({"role": "user", "content": memory}));
        }
        let head_tokens = if head_len == 0 {
            Vec::new()
        } else {
            codec.encode(&codec.render(&messages[..head_len], &tools_json, false)?)?
        };
        let prompt = codec.encode(&codec.render(&messages, &tools_json, true)?)?;
        let head = if prompt.starts_with(&head_tokens) {
            head_tokens.len()
        } else {
            0
        };
        let mut act = Sample::new(PolicyRole::Act);
        act.push(&prompt, Label::Prompt);
        let rng = Rng::new(settings.seed ^ (idx as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        lives.push(Live {
            idx,
            head,
            spec,
            tools_json,
            messages,
            act,
            rehearsals: Vec::new(),
            turns: Vec::new(),
            end: None,
            rng,
        });
    }

    loop {
        let active: Vec<usize> = (0..lives.len())
            .filter(|&i| lives[i].end.is_none())
            .collect();
        if active.is_empty() {
            break;
        }
        act_step(&mut lives, &active, settings, codec, generator)?;
        let mut rehearse_jobs = Vec::new();
        let mut external_jobs = Vec::new();
        for &i in &active {
            plan_calls(
                &mut lives[i],
                settings,
                codec,
                cache,
                &mut rehearse_jobs,
                &mut external_jobs,
            )?;
        }
        answer_rehearsals(&mut lives, rehearse_jobs, settings, codec, generator)?;
        if let Some(simulator) = simulator {
            answer_external(&mut lives, external_jobs, simulator);
        }
        for &i in &active {
            finish_turn(&mut lives[i], settings, codec, cache)?;
        }
    }

    Ok(lives
        .into_iter()
        .map(|live| judge_episode(live, settings, judge))
        .collect())
}

fn request_seed(
    settings: &RolloutSettings,
    episode_idx: usize,
    turn_idx: usize,
    call_idx: usize,
) -> u64 {
    let mut rng = Rng::new(
        settings.seed
            ^ (episode_idx as u64).wrapping_mul(0xa076_1d64_78bd_642f)
            ^ (turn_idx as u64).wrapping_mul(0xe703_7ed1_a0b4_28db)
            ^ (call_idx as u64 + 1).wrapping_mul(0x8ebc_6af0_9c88_c6e3),
    );
    rng.next_u64()
}

/// Where an act prompt of `len` tokens is cut to fit `max_prompt` tokens: `(context_start,
/// pinned)`, the context being tokens `0..pinned` then `context_start..len`. The first `head`
/// tokens (the system turn and the request) stay and the oldest turns after them go; a head
/// that leaves no room for the latest turns is cut from the left like the rest.
pub fn act_context(len: usize, head: usize, max_prompt: usize) -> (usize, usize) {
    if len <= max_prompt {
        return (0, 0);
    }
    // Keep at least a quarter of the budget for the conversation after the head.
    if head == 0 || head + max_prompt / 4 > max_prompt {
        return (len - max_prompt, 0);
    }
    (len - (max_prompt - head), head)
}

fn act_step(
    lives: &mut [Live],
    active: &[usize],
    settings: &RolloutSettings,
    codec: &TokenCodec,
    generator: &mut dyn Generator,
) -> Result<()> {
    let mut requests = Vec::with_capacity(active.len());
    let mut context_starts = Vec::with_capacity(active.len());
    for &i in active {
        let live = &lives[i];
        let (context_start, pinned) =
            act_context(live.act.tokens.len(), live.head, settings.max_prompt_tokens);
        context_starts.push((context_start, pinned));
        let mut prompt = live.act.tokens[..pinned].to_vec();
        prompt.extend_from_slice(&live.act.tokens[context_start..]);
        requests.push(GenerationRequest {
            role: PolicyRole::Act,
            prompt,
            max_new_tokens: settings.max_response_tokens,
            seed: request_seed(settings, live.idx, live.turns.len(), 0),
            episode_idx: live.idx,
            turn_idx: live.turns.len(),
            call_idx: None,
            rehearse_call: None,
        });
    }
    let outputs = generator.generate(codec, &requests)?;
    check_count(outputs.len(), requests.len())?;
    for ((&i, output), (context_start, pinned)) in active.iter().zip(outputs).zip(context_starts) {
        let live = &mut lives[i];
        let start = live.act.tokens.len();
        live.act.push(&output.tokens, Label::Act);
        live.act.logprobs.extend_from_slice(&output.logprobs);
        live.act.windows.push(GenerationWindow {
            context_start,
            start,
            end: live.act.tokens.len(),
            pinned,
        });
        let finished = output
            .tokens
            .last()
            .is_some_and(|t| codec.stop_ids().contains(t));
        let body = if finished {
            &output.tokens[..output.tokens.len() - 1]
        } else {
            &output.tokens[..]
        };
        let text = codec.decode(body)?;
        live.messages
            .push(json!({"role": "assistant", "content": text}));
        live.turns.push(TurnRecord {
            turn_idx: live.turns.len(),
            text,
            finished,
            calls: Vec::new(),
        });
    }
    Ok(())
}

fn check_count(got: usize, asked: usize) -> Result<()> {
    if got == asked {
        Ok(())
    } else {
        Err(Error::Data {
            source_name: "generator".to_owned(),
            message: format!("answered {got} of {asked} generation requests"),
        })
    }
}

/// Parses the new turn's calls, answers real and over-limit calls, runs the shadow replays,
/// and queues rehearse and external calls.
fn plan_calls(
    live: &mut Live,
    settings: &RolloutSettings,
    codec: &TokenCodec,
    cache: &ResponseCache,
    rehearse_jobs: &mut Vec<RehearseJob>,
    external_jobs: &mut Vec<Pending>,
) -> Result<()> {
    let Some(turn) = live.turns.last() else {
        return Ok(());
    };
    let turn_idx = turn.turn_idx;
    let text = turn.text.clone();
    let parse = parse_tool_calls(&text);
    if !parse.has_calls() {
        live.end = Some(EndReason::FinalAnswer);
        return Ok(());
    }
    let conversation: Vec<(String, String)> = live.messages[..live.messages.len() - 1]
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let mut calls = Vec::with_capacity(parse.calls.len());
    for (call_idx, parsed) in parse.calls.iter().enumerate() {
        let (name, arguments, raw) = match parsed {
            Ok(call) => (
                Some(call.name.clone()),
                Some(Value::Object(call.arguments.clone())),
                None,
            ),
            Err(err) => (None, None, Some(text[err.span.0..err.span.1].to_owned())),
        };
        if call_idx >= settings.max_parallel_calls {
            calls.push(CallRecord {
                call_idx,
                name,
                arguments,
                raw,
                source: ResponseSource::Limit,
                response: error_json(
                    TOO_MANY_TOOL_CALLS,
                    &format!(
                        "at most {} tool calls per turn are run; this one was not",
                        settings.max_parallel_calls
                    ),
                ),
                simulator_text: None,
                real: None,
                scores: None,
            });
            continue;
        }
        let source = match settings.mode {
            ResponseMode::Real => ResponseSource::Real,
            ResponseMode::Rehearse => ResponseSource::Rehearse,
            ResponseMode::External => ResponseSource::External,
            ResponseMode::Mixed {
                rehearse_probability,
            } => {
                if live.rng.chance(rehearse_probability) {
                    ResponseSource::Rehearse
                } else {
                    ResponseSource::Real
                }
            }
        };
        // The real answer: the response itself in real mode, the fidelity reference otherwise.
        let real = if source == ResponseSource::Real || settings.fidelity {
            Some(match parsed {
                Ok(call) => {
                    let arguments = Value::Object(call.arguments.clone());
                    outcome_json(&live.spec.env.call(&call.name, &arguments))
                }
                Err(err) => error_json(INVALID_TOOL_CALL_FORMAT, &err.message),
            })
        } else {
            None
        };
        let call_under_test = match parsed {
            Ok(call) => CallUnderTest::Parsed {
                name: call.name.clone(),
                arguments: Value::Object(call.arguments.clone()),
            },
            Err(_) => CallUnderTest::Malformed {
                raw: raw.clone().unwrap_or_default(),
            },
        };
        let examples = match &name {
            Some(name) => cache.examples(name, settings.n_few_shot),
            None => Vec::new(),
        };
        let rehearse_input = || RehearseInput {
            tools: live.spec.env.tools(),
            examples: examples.clone(),
            conversation: conversation.clone(),
            caller_message: &text,
            call: call_under_test.clone(),
            schemas: settings.tool_prompt == ToolPrompt::Schemas,
            max_conversation_chars: settings.max_conversation_chars,
        };
        match source {
            ResponseSource::Rehearse => {
                let prompt_text = codec.render(&rehearse_messages(&rehearse_input()), &[], true)?;
                rehearse_jobs.push(RehearseJob {
                    live: live.idx,
                    call_idx,
                    prompt: codec.encode(&prompt_text)?,
                    call: name.clone().zip(arguments.clone()),
                });
            }
            ResponseSource::External => external_jobs.push(Pending {
                live: live.idx,
                call_idx,
                messages: rehearse_messages(&rehearse_input()),
            }),
            ResponseSource::Real | ResponseSource::Limit => {}
        }
        calls.push(CallRecord {
            call_idx,
            name,
            arguments,
            raw,
            source,
            response: if source == ResponseSource::Real {
                real.clone().unwrap_or(Value::Null)
            } else {
                Value::Null
            },
            simulator_text: None,
            real: if source == ResponseSource::Real {
                None
            } else {
                real
            },
            scores: None,
        });
    }
    if let Some(turn) = live.turns.last_mut() {
        turn.turn_idx = turn_idx;
        turn.calls = calls;
    }
    if let Some(fault) = live.spec.env.fault() {
        live.end = Some(EndReason::Fault {
            reason: fault.to_string(),
        });
    }
    Ok(())
}

fn answer_rehearsals(
    lives: &mut [Live],
    jobs: Vec<RehearseJob>,
    settings: &RolloutSettings,
    codec: &TokenCodec,
    generator: &mut dyn Generator,
) -> Result<()> {
    if jobs.is_empty() {
        return Ok(());
    }
    let requests: Vec<GenerationRequest> = jobs
        .iter()
        .map(|job| {
            let context_start = job.prompt.len().saturating_sub(settings.max_prompt_tokens);
            let turn_idx = lives[job.live].turns.len().saturating_sub(1);
            GenerationRequest {
                role: PolicyRole::Rehearse,
                prompt: job.prompt[context_start..].to_vec(),
                max_new_tokens: settings.max_response_tokens,
                seed: request_seed(settings, job.live, turn_idx, job.call_idx + 1),
                episode_idx: job.live,
                turn_idx,
                call_idx: Some(job.call_idx),
                rehearse_call: job.call.clone(),
            }
        })
        .collect();
    let outputs = generator.generate(codec, &requests)?;
    check_count(outputs.len(), requests.len())?;
    for (
        RehearseJob {
            live: live_idx,
            call_idx,
            prompt,
            ..
        },
        output,
    ) in jobs.into_iter().zip(outputs)
    {
        let live = &mut lives[live_idx];
        let turn_idx = live.turns.len().saturating_sub(1);
        let mut sample = Sample::new(PolicyRole::Rehearse);
        sample.push(&prompt, Label::Prompt);
        let start = sample.tokens.len();
        sample.push(&output.tokens, Label::Rehearse);
        sample.logprobs = output.logprobs;
        sample.windows.push(GenerationWindow {
            context_start: prompt.len().saturating_sub(settings.max_prompt_tokens),
            start,
            end: sample.tokens.len(),
            pinned: 0,
        });
        sample.call = Some((turn_idx, call_idx));
        let body = match output.tokens.last() {
            Some(t) if codec.stop_ids().contains(t) => &output.tokens[..output.tokens.len() - 1],
            _ => &output.tokens[..],
        };
        let text = codec.decode(body)?;
        let response = parse_execution_result(&text).unwrap_or_else(|e| e.to_json());
        live.rehearsals.push(sample);
        if let Some(call) = live
            .turns
            .last_mut()
            .and_then(|t| t.calls.iter_mut().find(|c| c.call_idx == call_idx))
        {
            call.response = response;
            call.simulator_text = Some(text);
        }
    }
    Ok(())
}

fn answer_external(lives: &mut [Live], jobs: Vec<Pending>, simulator: &dyn Simulator) {
    if jobs.is_empty() {
        return;
    }
    let answers: Vec<std::result::Result<String, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|job| scope.spawn(|| simulator.simulate(&job.messages)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the simulator call panicked".to_owned()))
            })
            .collect()
    });
    for (job, answer) in jobs.into_iter().zip(answers) {
        let live = &mut lives[job.live];
        match answer {
            Ok(text) => {
                let response = parse_execution_result(&text).unwrap_or_else(|e| e.to_json());
                if let Some(call) = live
                    .turns
                    .last_mut()
                    .and_then(|t| t.calls.iter_mut().find(|c| c.call_idx == job.call_idx))
                {
                    call.response = response;
                    call.simulator_text = Some(text);
                }
            }
            Err(reason) => {
                if let Some(call) = live
                    .turns
                    .last_mut()
                    .and_then(|t| t.calls.iter_mut().find(|c| c.call_idx == job.call_idx))
                {
                    call.response = error_json(SIMULATOR_UNAVAILABLE, &reason);
                }
                if live.end.is_none() {
                    live.end = Some(EndReason::Fault {
                        reason: format!("external simulator: {reason}"),
                    });
                }
            }
        }
    }
}

/// Scores fidelity, feeds the cache, appends the tool messages and the injected tokens, and
/// decides whether the episode goes on.
fn finish_turn(
    live: &mut Live,
    settings: &RolloutSettings,
    codec: &TokenCodec,
    cache: &mut ResponseCache,
) -> Result<()> {
    let Some(turn) = live.turns.last_mut() else {
        return Ok(());
    };
    if turn.calls.is_empty() {
        return Ok(());
    }
    for call in &mut turn.calls {
        if let (Some(real), ResponseSource::Rehearse | ResponseSource::External) =
            (&call.real, call.source)
            && error_code(&call.response) != Some(SIMULATOR_UNAVAILABLE)
        {
            call.scores = Some(fidelity::score(&call.response, real));
        }
        let real = match call.source {
            ResponseSource::Real => Some(&call.response),
            _ => call.real.as_ref(),
        };
        if let (Some(name), Some(arguments), Some(real)) = (&call.name, &call.arguments, real) {
            cache.record(name, arguments, real);
        }
    }
    if live.end.is_some() {
        return Ok(());
    }
    let before = codec.render(&live.messages, &live.tools_json, false)?;
    for call in &turn.calls {
        live.messages
            .push(json!({"role": "tool", "content": render_for_agent(&call.response)}));
    }
    if let Some(code) = turn
        .calls
        .iter()
        .find(|c| ends_trajectory(&c.response))
        .map(|c| error_code(&c.response).unwrap_or("UNKNOWN").to_owned())
    {
        live.end = Some(EndReason::ErrorToolCall { code });
        return Ok(());
    }
    if live.turns.len() >= settings.max_turns {
        live.end = Some(EndReason::MaxTurns);
        return Ok(());
    }
    let after = codec.render(&live.messages, &live.tools_json, true)?;
    let Some(delta) = after.strip_prefix(before.as_str()) else {
        live.end = Some(EndReason::TemplateNotIncremental);
        return Ok(());
    };
    let finished = live.turns.last().is_some_and(|t| t.finished);
    if !finished && let Some(&stop) = codec.stop_ids().first() {
        live.act.push(&[stop], Label::Injected);
    }
    let tail = before
        .rfind(codec.eos_text())
        .map_or("", |at| &before[at + codec.eos_text().len()..]);
    let injected = codec.encode(&format!("{tail}{delta}"))?;
    live.act.push(&injected, Label::Injected);
    Ok(())
}

fn judge_episode(
    live: Live,
    settings: &RolloutSettings,
    judge: &dyn EpisodeJudge,
) -> EpisodeRecord {
    let messages: Vec<Message> = live
        .messages
        .iter()
        .map(|m| Message {
            // The engine only builds system, user, assistant and tool turns.
            role: chat::Role::parse(m["role"].as_str().unwrap_or_default())
                .unwrap_or(chat::Role::User),
            content: m["content"].as_str().unwrap_or_default().to_owned(),
        })
        .collect();
    let end = live.end.unwrap_or(EndReason::MaxTurns);
    let mut shown_reward = None;
    let (reward, mask_reason, detail) = match &end {
        EndReason::Fault { reason } => (None, Some(reason.clone()), Value::Null),
        _ => {
            // Judges read the conversation after the system turn.
            let trajectory: Vec<Message> = messages
                .iter()
                .filter(|m| m.role != chat::Role::System)
                .cloned()
                .collect();
            if settings.judge_as_shown {
                shown_reward = judge_as_shown(judge, &live.spec.task, &trajectory, &live.turns);
            }
            match judge.judge(&live.spec.task, &trajectory) {
                Verdict::Scored { score, detail } => (Some(score), None, detail),
                Verdict::Masked { reason } => (None, Some(format!("judge: {reason}")), Value::Null),
            }
        }
    };
    let mut samples = Vec::with_capacity(1 + live.rehearsals.len());
    samples.push(live.act);
    samples.extend(live.rehearsals);
    EpisodeRecord {
        episode_idx: live.idx,
        task_id: live.spec.task.id.clone(),
        group: live.spec.group,
        mode: settings.mode.name().to_owned(),
        messages,
        turns: live.turns,
        samples,
        end,
        reward,
        shown_reward,
        mask_reason,
        judge: detail,
    }
}

/// The score of an episode whose final answer is read against the responses the act role was
/// shown ([`crate::judge::answer_as_real`]); `None` when no call was answered by a simulator
/// with a real counterpart, there is no final answer, or the judge masks it.
fn judge_as_shown(
    judge: &dyn EpisodeJudge,
    task: &GenTask,
    trajectory: &[Message],
    turns: &[TurnRecord],
) -> Option<f64> {
    // Only calls a simulator answered carry their real counterpart.
    let pairs: Vec<(&Value, &Value)> = turns
        .iter()
        .flat_map(|turn| &turn.calls)
        .filter_map(|call| Some((&call.response, call.real.as_ref()?)))
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let last = trajectory
        .iter()
        .rposition(|m| m.role == chat::Role::Assistant)?;
    if trajectory[last].content.contains("<tool_call>") {
        return None;
    }
    let mut read_as_real = trajectory.to_vec();
    read_as_real[last].content = crate::judge::answer_as_real(&trajectory[last].content, pairs);
    match judge.judge(task, &read_as_real) {
        Verdict::Scored { score, .. } => Some(score),
        Verdict::Masked { .. } => None,
    }
}
