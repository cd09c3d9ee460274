//! What an episode leaves behind: labelled token samples, turns with each call's response
//! (and its real counterpart and fidelity scores), the end reason and the judge's score, and
//! how episodes go to and come back from the run store.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::chat::Message;
use crate::config::PolicyRole;
use crate::error::{Error, Result};
use crate::fidelity::Scores;
use crate::store::{Batch, FidelityRow, RunId, TrajectoryRow, View};

/// What a token is, for the loss (DESIGN.md §4.3): only `Act` and `Rehearse` tokens are
/// sampled and trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    /// Prompt text: system, user request, rehearse instructions.
    Prompt,
    /// Text the engine inserted: tool responses and template glue.
    Injected,
    /// Sampled by the policy acting.
    Act,
    /// Sampled by the policy rehearsing a tool.
    Rehearse,
}

impl Label {
    fn letter(self) -> char {
        match self {
            Label::Prompt => 'P',
            Label::Injected => 'I',
            Label::Act => 'A',
            Label::Rehearse => 'R',
        }
    }

    fn from_letter(letter: char) -> Option<Self> {
        Some(match letter {
            'P' => Label::Prompt,
            'I' => Label::Injected,
            'A' => Label::Act,
            'R' => Label::Rehearse,
            _ => return None,
        })
    }

    /// Whether the policy sampled this token (it is trained).
    pub fn is_sampled(self) -> bool {
        matches!(self, Label::Act | Label::Rehearse)
    }
}

/// The context one generation saw: tokens `0..pinned` and `context_start..start` of the
/// sample as its prompt, producing tokens `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationWindow {
    /// First token of the truncated context after the pinned head.
    pub context_start: usize,
    /// First generated token.
    pub start: usize,
    /// One past the last generated token.
    pub end: usize,
    /// Leading tokens kept in front of `context_start` when the middle was cut (the system
    /// turn and the request); 0 when the context is one piece.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pinned: usize,
}

impl GenerationWindow {
    /// The tokens of the context: the pinned head, then `context_start..start`.
    pub fn context<'a, T: Clone>(&self, tokens: &'a [T]) -> std::borrow::Cow<'a, [T]> {
        if self.pinned == 0 {
            std::borrow::Cow::Borrowed(&tokens[self.context_start..self.start])
        } else {
            let mut out = tokens[..self.pinned].to_vec();
            out.extend_from_slice(&tokens[self.context_start..self.start]);
            std::borrow::Cow::Owned(out)
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One token sequence of an episode with a label per token.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Which role's sequence: the acting conversation, or one rehearse call.
    pub role: PolicyRole,
    /// Token ids.
    pub tokens: Vec<u32>,
    /// One label per token.
    pub labels: Vec<Label>,
    /// Log-probability of each sampled token under the policy that generated it, in order;
    /// as many as there are `Act` and `Rehearse` labels.
    pub logprobs: Vec<f32>,
    /// The context of each generation.
    pub windows: Vec<GenerationWindow>,
    /// For rehearse samples: the turn and call answered.
    pub call: Option<(usize, usize)>,
}

impl Sample {
    pub(crate) fn new(role: PolicyRole) -> Self {
        Sample {
            role,
            tokens: Vec::new(),
            labels: Vec::new(),
            logprobs: Vec::new(),
            windows: Vec::new(),
            call: None,
        }
    }

    pub(crate) fn push(&mut self, tokens: &[u32], label: Label) {
        self.tokens.extend_from_slice(tokens);
        self.labels.extend(std::iter::repeat_n(label, tokens.len()));
    }

    /// Number of tokens with this label.
    pub fn count(&self, label: Label) -> usize {
        self.labels.iter().filter(|&&l| l == label).count()
    }
}

/// The stored form of a sample: labels as one letter each (`P`, `I`, `A`, `R`).
#[derive(Serialize, Deserialize)]
struct StoredSample {
    role: PolicyRole,
    tokens: Vec<u32>,
    labels: String,
    logprobs: Vec<f32>,
    windows: Vec<GenerationWindow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    call: Option<(usize, usize)>,
}

impl Serialize for Sample {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        StoredSample {
            role: self.role,
            tokens: self.tokens.clone(),
            labels: self.labels.iter().map(|l| l.letter()).collect(),
            logprobs: self.logprobs.clone(),
            windows: self.windows.clone(),
            call: self.call,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Sample {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let stored = StoredSample::deserialize(deserializer)?;
        let labels = stored
            .labels
            .chars()
            .map(|c| {
                Label::from_letter(c).ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "unknown token label {c:?} (expected P, I, A or R)"
                    ))
                })
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        if labels.len() != stored.tokens.len() {
            return Err(serde::de::Error::custom(format!(
                "{} labels for {} tokens",
                labels.len(),
                stored.tokens.len()
            )));
        }
        Ok(Sample {
            role: stored.role,
            tokens: stored.tokens,
            labels,
            logprobs: stored.logprobs,
            windows: stored.windows,
            call: stored.call,
        })
    }
}

/// Who answered a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseSource {
    /// The real environment.
    Real,
    /// The policy, rehearsing.
    Rehearse,
    /// An external simulator endpoint.
    External,
    /// The engine: a call over the per-turn limit, not run.
    Limit,
}

/// One tool call of a turn and its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Position in the turn.
    pub call_idx: usize,
    /// Tool name (`None` for a malformed block).
    pub name: Option<String>,
    /// Arguments (`None` for a malformed block).
    pub arguments: Option<Value>,
    /// The raw block of a malformed call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// Who answered.
    pub source: ResponseSource,
    /// The answer the acting policy saw, in the rehearse JSON form.
    pub response: Value,
    /// What the simulator wrote, for rehearsed and external answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulator_text: Option<String>,
    /// The real environment's answer for the same call and state, for non-real answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real: Option<Value>,
    /// Fidelity of `response` against `real`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scores: Option<Scores>,
}

/// One assistant turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// Turn index, from 0.
    pub turn_idx: usize,
    /// The generated text (stop token excluded).
    pub text: String,
    /// Whether generation stopped at a stop token (not at the token limit).
    pub finished: bool,
    /// The calls and their answers.
    pub calls: Vec<CallRecord>,
}

/// Why an episode ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EndReason {
    /// A turn without tool calls: the final answer.
    FinalAnswer,
    /// `max_turns` assistant turns were taken.
    MaxTurns,
    /// A response carried `error_tool_call` (an unreadable rehearse answer).
    ErrorToolCall {
        /// The parser's error code.
        code: String,
    },
    /// The chat template does not render the conversation incrementally, so the injected
    /// tokens cannot be computed.
    TemplateNotIncremental,
    /// The environment or the external simulator could not answer: masked.
    Fault {
        /// What failed.
        reason: String,
    },
}

/// A finished episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeRecord {
    /// Index in its batch.
    pub episode_idx: usize,
    /// The task.
    pub task_id: String,
    /// The task's group (the same prompt), for per-prompt baselines.
    pub group: String,
    /// How tool calls were answered (`real`, `rehearse`, `external`, `mixed`).
    pub mode: String,
    /// The acting conversation.
    pub messages: Vec<Message>,
    /// The assistant turns.
    pub turns: Vec<TurnRecord>,
    /// The acting sample first, then one per rehearse call.
    pub samples: Vec<Sample>,
    /// Why it ended.
    pub end: EndReason,
    /// The judge's episode score; `None` when masked.
    pub reward: Option<f64>,
    /// The score with the final answer read against the responses the act role was shown
    /// (`[rl].credit = "role"`); `None` when not judged so or no simulator answered a call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown_reward: Option<f64>,
    /// Why it is masked, if it is.
    pub mask_reason: Option<String>,
    /// The judge's details (verdict per standard).
    pub judge: Value,
}

impl EpisodeRecord {
    /// Whether the episode is left out of training.
    pub fn masked(&self) -> bool {
        self.mask_reason.is_some()
    }

    /// Every call with both a non-real response and its real counterpart.
    pub fn fidelity_calls(&self) -> impl Iterator<Item = (usize, &CallRecord)> {
        self.turns.iter().flat_map(|turn| {
            turn.calls
                .iter()
                .filter(|c| c.scores.is_some())
                .map(move |c| (turn.turn_idx, c))
        })
    }
}

/// The fidelity rows of an episode for the run store.
pub fn fidelity_rows(step: u64, episode: &EpisodeRecord) -> Vec<FidelityRow> {
    episode
        .fidelity_calls()
        .filter_map(|(turn_idx, call)| {
            let scores = call.scores?;
            Some(FidelityRow {
                step,
                episode_idx: episode.episode_idx as u64,
                turn_idx: turn_idx as u64,
                call_idx: call.call_idx as u64,
                tool: call
                    .name
                    .clone()
                    .unwrap_or_else(|| "(malformed call)".to_owned()),
                arguments: call
                    .arguments
                    .clone()
                    .unwrap_or_else(|| Value::String(call.raw.clone().unwrap_or_default())),
                rehearsed: call.response.clone(),
                real: call.real.clone().unwrap_or(Value::Null),
                valid_json: scores.valid_json,
                outcome_agrees: scores.outcome_agrees,
                key_f1: scores.key_f1,
                value_accuracy: scores.value_accuracy,
                exact_match: scores.exact_match,
            })
        })
        .collect()
}

/// Adds the episodes of `step` (trajectories and fidelity pairs) to a store batch.
pub fn record_episodes(batch: &mut Batch, step: u64, episodes: &[EpisodeRecord]) -> Result<()> {
    for episode in episodes {
        let data = serde_json::to_value(episode).map_err(|e| Error::Data {
            source_name: format!("episode {} of step {step}", episode.episode_idx),
            message: format!("cannot be serialised: {e}"),
        })?;
        batch.trajectories.push(TrajectoryRow {
            step,
            episode_idx: episode.episode_idx as u64,
            task_id: episode.task_id.clone(),
            reward: episode.reward,
            masked: episode.masked(),
            mask_reason: episode.mask_reason.clone(),
            data,
        });
        batch.fidelity.extend(fidelity_rows(step, episode));
    }
    Ok(())
}

/// The episodes of a run read back from the store, as `(step, episode)`.
pub fn load_episodes(view: &View<'_>, run: RunId) -> Result<Vec<(u64, EpisodeRecord)>> {
    view.trajectories(run)?
        .into_iter()
        .map(|row| {
            let episode: EpisodeRecord =
                serde_json::from_value(row.data).map_err(|e| Error::Data {
                    source_name: format!(
                        "run store trajectory (step {}, episode {})",
                        row.step, row.episode_idx
                    ),
                    message: format!("is not an episode record: {e}"),
                })?;
            Ok((row.step, episode))
        })
        .collect()
}
