//! Test-time private rehearsal (DESIGN.md §1): before its one committed attempt at a held-out
//! task the policy rehearses imagined attempts, condenses them into a memory, and acts for real
//! with that memory beside the request (`[rehearsal].memory_position`); and the episodes behind the rehearsal-budget curves
//! (score against the number of imagined attempts, parallel against sequential), which
//! `rl::evaluation` runs after a job's last step and stores.
//!
//! An imagined attempt is a whole episode in rehearse mode: the policy acts and answers its
//! own tool calls, sampled at `[rl].temperature` and `top_p`; nothing touches the real
//! environment (no fidelity replay either, so nothing real leaks into the memory). *Parallel*
//! attempts are independent; *sequential* attempt k sees the memory of attempts 1..k−1. The
//! committed attempt is greedy against the real environment, like the plain evaluation.
//!
//! How it departs from the paper: attempts are rehearsed once per task, before the episode,
//! not before every committed action; the memory is a plain-text list of each attempt's calls,
//! rehearsed responses (errors included) and answer, every attempt within an equal share of
//! `[rehearsal].max_memory_tokens` (in a compact form without arguments when its whole line
//! does not fit), not a summary the model writes. SFT (`[sft].memory_share`)
//! and RL (`[rl].memory_share`) train acting on such memories.

use std::sync::Arc;

use super::episodes::{
    PolicyJob, committed_episodes, episodes_of, rollout_sampling, step_settings,
};
use crate::config::RehearsalMode;
use crate::error::Result;
use crate::rehearse::render_for_agent;
use crate::rollout::{EndReason, EpisodeRecord, ResponseMode, TokenCodec};
use crate::tasks::GenTask;

/// The eval_results category of a budget-curve point, e.g. `rehearsal/parallel/4`.
pub fn curve_category(style: RehearsalMode, budget: usize) -> String {
    let style = match style {
        RehearsalMode::Off => "off",
        RehearsalMode::Parallel => "parallel",
        RehearsalMode::Sequential => "sequential",
    };
    format!("rehearsal/{style}/{budget}")
}

/// Longest answer text kept per attempt in a memory, in characters.
const MAX_ANSWER_CHARS: usize = 240;

/// One call of an attempt as a rehearsal memory shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CallSummary {
    /// The tool's name, or `malformed call` when the call could not be parsed.
    pub name: String,
    /// The arguments as JSON text, or the quoted raw text of a malformed call.
    pub arguments: String,
    /// The response as the agent read it (errors as `Error: …`).
    pub response: String,
}

impl CallSummary {
    /// `name arguments -> response`.
    fn full(&self) -> String {
        format!("{} {} -> {}", self.name, self.arguments, self.response)
    }

    /// `name -> response`: what the call got, without its arguments.
    fn compact(&self) -> String {
        format!("{} -> {}", self.name, self.response)
    }
}

/// One attempt as a rehearsal memory shows it: each call with the response it got (as the
/// agent would read it, errors as `Error: …`), then how the attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AttemptSummary {
    /// One per call, in order.
    pub calls: Vec<CallSummary>,
    /// `answer: "…"`, or why the attempt ended without one.
    pub outcome: String,
    /// Whether the attempt ended with a final answer (the compact line then says `answered`).
    pub answered: bool,
}

impl AttemptSummary {
    /// The summary of an (imagined) episode.
    pub fn of(episode: &EpisodeRecord) -> Self {
        let mut calls = Vec::new();
        for turn in &episode.turns {
            for call in &turn.calls {
                let (name, arguments) = match (&call.name, &call.arguments) {
                    (Some(name), Some(arguments)) => (name.clone(), arguments.to_string()),
                    _ => (
                        "malformed call".to_owned(),
                        format!("{:?}", call.raw.as_deref().unwrap_or_default()),
                    ),
                };
                calls.push(CallSummary {
                    name,
                    arguments,
                    response: render_for_agent(&call.response),
                });
            }
        }
        let outcome = match &episode.end {
            EndReason::FinalAnswer => {
                let answer = episode.turns.last().map_or("", |t| t.text.trim());
                Self::answer(answer)
            }
            EndReason::MaxTurns => "no answer within the turn limit".to_owned(),
            EndReason::ErrorToolCall { code } => format!("ended by {code}"),
            EndReason::TemplateNotIncremental => "ended: template".to_owned(),
            EndReason::Fault { reason } => format!("ended: {reason}"),
        };
        AttemptSummary {
            calls,
            outcome,
            answered: matches!(episode.end, EndReason::FinalAnswer),
        }
    }

    /// The outcome of an attempt that answered `text`.
    pub fn answer(text: &str) -> String {
        let answer: String = text.chars().take(MAX_ANSWER_CHARS).collect();
        format!("answer: {answer:?}")
    }

    /// The memory line of attempt `attempt_idx` (0-based): every call with its arguments and
    /// response, then the outcome.
    pub fn line(&self, attempt_idx: usize) -> String {
        let mut parts: Vec<String> = self.calls.iter().map(CallSummary::full).collect();
        parts.push(self.outcome.clone());
        format!("Attempt {}: {}", attempt_idx + 1, parts.join("; "))
    }

    /// The compact memory line of attempt `attempt_idx`, for a share of the memory too small
    /// for [`line`](Self::line): each call's tool and response without its arguments, and
    /// `answered` for an answer (other endings as they are) — the call, what came back and
    /// what went wrong, in fewer tokens.
    pub fn compact_line(&self, attempt_idx: usize) -> String {
        let mut parts: Vec<String> = self.calls.iter().map(CallSummary::compact).collect();
        parts.push(if self.answered {
            "answered".to_owned()
        } else {
            self.outcome.clone()
        });
        format!("Attempt {}: {}", attempt_idx + 1, parts.join("; "))
    }
}

/// The memory line of one imagined attempt: each call with its rehearsed response, then the
/// answer or why the attempt ended.
pub fn attempt_line(attempt_idx: usize, episode: &EpisodeRecord) -> String {
    AttemptSummary::of(episode).line(attempt_idx)
}

/// The first line of every rehearsal memory.
pub const MEMORY_HEADER: &str = "Private rehearsal (imagined attempts; nothing was executed):";

/// A rehearsal memory of `attempts` in at most `max_tokens` tokens of `codec`: the header,
/// then one line per attempt within an equal share of the tokens left, so that every attempt
/// is seen however long the first one is. An attempt whose whole line does not fit its share
/// gets its compact line (calls without arguments, so the responses and errors stay), cut
/// to the share only when even that is too long.
pub fn memory_text(
    attempts: &[AttemptSummary],
    codec: &TokenCodec,
    max_tokens: usize,
) -> Result<String> {
    let mut text = MEMORY_HEADER.to_owned();
    if attempts.is_empty() {
        return Ok(text);
    }
    let header_tokens = codec.encode(&format!("{MEMORY_HEADER}\n"))?.len();
    let share = max_tokens.saturating_sub(header_tokens) / attempts.len();
    for (idx, attempt) in attempts.iter().enumerate() {
        let line = attempt.line(idx);
        if codec.encode(&line)?.len() < share {
            text.push('\n');
            text.push_str(&line);
            continue;
        }
        let compact = attempt.compact_line(idx);
        let ids = codec.encode(&compact)?;
        if ids.len() < share {
            text.push('\n');
            text.push_str(&compact);
        } else if share > 1 {
            text.push('\n');
            text.push_str(codec.decode(&ids[..share - 1])?.trim_end());
        }
    }
    // A budget smaller than the header cuts the header too.
    let ids = codec.encode(&text)?;
    if ids.len() > max_tokens {
        return codec.decode(&ids[..max_tokens]);
    }
    Ok(text)
}

/// The memory shown to the committed attempt (or the next sequential one): the imagined
/// attempts in at most `max_tokens` tokens of the policy's tokenizer ([`memory_text`]).
pub fn memory_of(
    attempts: &[&EpisodeRecord],
    job: &dyn PolicyJob,
    max_tokens: usize,
) -> Result<String> {
    let summaries: Vec<AttemptSummary> = attempts.iter().map(|e| AttemptSummary::of(e)).collect();
    memory_text(&summaries, job.codec(), max_tokens)
}

/// One imagined attempt at each task (`copies` per task, side by side), each with its memory
/// when given; `attempt_idx` varies the sampling seed. Episodes come back task-major.
fn imagined_episodes(
    job: &dyn PolicyJob,
    tasks: &[Arc<GenTask>],
    step: u32,
    attempt_idx: usize,
    copies: usize,
    memories: Option<&[String]>,
) -> Result<Vec<EpisodeRecord>> {
    let mut settings = step_settings(job, step);
    settings.mode = ResponseMode::Rehearse;
    settings.fidelity = false;
    settings.seed = settings
        .seed
        .wrapping_add((attempt_idx as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03));
    let sampling = rollout_sampling(&job.config().rl);
    episodes_of(job, tasks, copies, &settings, sampling, memories)
}

/// The imagined attempts at each task (outer: tasks in order; inner: attempts in order),
/// `budget` of them rehearsed in `style`; none when `Off`.
pub fn imagined_attempts(
    job: &dyn PolicyJob,
    tasks: &[Arc<GenTask>],
    step: u32,
    style: RehearsalMode,
    budget: usize,
) -> Result<Vec<Vec<EpisodeRecord>>> {
    let max_tokens = job.config().rehearsal.max_memory_tokens as usize;
    let mut attempts: Vec<Vec<EpisodeRecord>> = tasks.iter().map(|_| Vec::new()).collect();
    match style {
        RehearsalMode::Off => {}
        RehearsalMode::Parallel if budget > 0 => {
            let episodes = imagined_episodes(job, tasks, step, 0, budget, None)?;
            for (idx, episode) in episodes.into_iter().enumerate() {
                attempts[idx / budget].push(episode);
            }
        }
        RehearsalMode::Parallel => {}
        RehearsalMode::Sequential => {
            for attempt_idx in 0..budget {
                let memories = if attempt_idx == 0 {
                    None
                } else {
                    Some(memories(&attempts, job, max_tokens)?)
                };
                let episodes =
                    imagined_episodes(job, tasks, step, attempt_idx, 1, memories.as_deref())?;
                for (task_attempts, episode) in attempts.iter_mut().zip(episodes) {
                    task_attempts.push(episode);
                }
            }
        }
    }
    Ok(attempts)
}

/// The committed attempts at `tasks` after `budget` imagined attempts each, rehearsed in
/// `style` (parallel or sequential); `Off` or a budget of 0 gives the plain evaluation.
pub fn rehearsed_episodes(
    job: &dyn PolicyJob,
    tasks: &[Arc<GenTask>],
    step: u32,
    style: RehearsalMode,
    budget: usize,
) -> Result<Vec<EpisodeRecord>> {
    if style == RehearsalMode::Off || budget == 0 {
        return committed_episodes(job, tasks, step, None);
    }
    let attempts = imagined_attempts(job, tasks, step, style, budget)?;
    let max_tokens = job.config().rehearsal.max_memory_tokens as usize;
    let memories = memories(&attempts, job, max_tokens)?;
    committed_episodes(job, tasks, step, Some(&memories))
}

fn memories(
    attempts: &[Vec<EpisodeRecord>],
    job: &dyn PolicyJob,
    max_tokens: usize,
) -> Result<Vec<String>> {
    attempts
        .iter()
        .map(|a| memory_of(&a.iter().collect::<Vec<_>>(), job, max_tokens))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::{CallRecord, ResponseSource, TurnRecord};
    use expect_test::expect;
    use serde_json::json;

    fn call(call_idx: usize, name: Option<&str>, response: serde_json::Value) -> CallRecord {
        CallRecord {
            call_idx,
            name: name.map(str::to_owned),
            arguments: name.map(|_| json!({"a": 3, "b": 4})),
            raw: name.is_none().then(|| "{\"name\": add".to_owned()),
            source: ResponseSource::Rehearse,
            response,
            simulator_text: None,
            real: None,
            scores: None,
        }
    }

    fn episode(turns: Vec<TurnRecord>, end: EndReason) -> EpisodeRecord {
        EpisodeRecord {
            episode_idx: 0,
            task_id: "t".to_owned(),
            group: "t".to_owned(),
            mode: "rehearse".to_owned(),
            messages: Vec::new(),
            turns,
            samples: Vec::new(),
            end,
            reward: Some(0.0),
            shown_reward: None,
            mask_reason: None,
            judge: serde_json::Value::Null,
        }
    }

    #[test]
    fn an_attempt_line_lists_calls_with_rehearsed_responses_then_the_outcome() {
        let answered = episode(
            vec![
                TurnRecord {
                    turn_idx: 0,
                    text: "<tool_call>…</tool_call>".to_owned(),
                    finished: true,
                    calls: vec![
                        call(0, Some("add"), json!({"result": 7})),
                        call(1, None, json!({"error": "INVALID_TOOL_CALL_FORMAT"})),
                    ],
                },
                TurnRecord {
                    turn_idx: 1,
                    text: " The sum is 7.\n".to_owned(),
                    finished: true,
                    calls: Vec::new(),
                },
            ],
            EndReason::FinalAnswer,
        );
        expect![[r#"Attempt 1: add {"a":3,"b":4} -> 7; malformed call "{\"name\": add" -> {"error": "INVALID_TOOL_CALL_FORMAT"}; answer: "The sum is 7.""#]]
            .assert_eq(&attempt_line(0, &answered));
        expect![[r#"Attempt 1: add -> 7; malformed call -> {"error": "INVALID_TOOL_CALL_FORMAT"}; answered"#]]
            .assert_eq(&AttemptSummary::of(&answered).compact_line(0));
        let cut = episode(
            Vec::new(),
            EndReason::ErrorToolCall {
                code: "ERROR_TOOL_CALL".to_owned(),
            },
        );
        expect![[r#"Attempt 3: ended by ERROR_TOOL_CALL"#]].assert_eq(&attempt_line(2, &cut));
        expect![[r#"Attempt 3: ended by ERROR_TOOL_CALL"#]]
            .assert_eq(&AttemptSummary::of(&cut).compact_line(2));
    }

    #[test]
    fn curve_categories_name_style_and_budget() {
        assert_eq!(
            curve_category(RehearsalMode::Parallel, 4),
            "rehearsal/parallel/4"
        );
        assert_eq!(
            curve_category(RehearsalMode::Sequential, 1),
            "rehearsal/sequential/1"
        );
    }
}
