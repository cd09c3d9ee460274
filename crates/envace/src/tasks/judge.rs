//! The rule judge: decides each standard of a checklist from a trajectory and the final state
//! hash, and scores the episode with the DESIGN.md §1 formula.
//!
//! A turn scores the weighted fraction of its checklist's standards met (in `[0, 1]`); the
//! episode scores the sum over turns divided by (number of checklists × max turns), where
//! `max_turns` is how many times each checklist is judged. Generated tasks are single requests
//! judged once at the end (`max_turns = 1`), so their score is the weighted fraction met.

use serde::Serialize;
use serde_json::Value;

use super::{Checklist, Message, Role, Rule};
use crate::chat::ToolCall;

/// The verdict on one standard.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StandardVerdict {
    /// Index of the checklist.
    pub checklist_idx: usize,
    /// Index of the standard in its checklist.
    pub standard_idx: usize,
    /// Whether it is met.
    pub met: bool,
    /// Why, in a sentence.
    pub reason: String,
}

/// Every verdict and the scores.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeReport {
    /// One verdict per standard, checklist by checklist.
    pub verdicts: Vec<StandardVerdict>,
    /// Each checklist's turn score, in `[0, 1]`.
    pub turn_scores: Vec<f64>,
    /// The episode score.
    pub score: f64,
}

impl JudgeReport {
    /// `(checklist_idx, standard_idx)` of every standard not met.
    pub fn failed(&self) -> Vec<(usize, usize)> {
        self.verdicts
            .iter()
            .filter(|v| !v.met)
            .map(|v| (v.checklist_idx, v.standard_idx))
            .collect()
    }
}

/// The episode score: sum of turn scores / (n_checklists × max_turns); 0 without checklists.
pub fn episode_score(turn_scores: &[f64], n_checklists: usize, max_turns: usize) -> f64 {
    let denominator = (n_checklists * max_turns) as f64;
    if denominator == 0.0 {
        return 0.0;
    }
    turn_scores.iter().sum::<f64>() / denominator
}

/// The tool calls of an assistant message, parsed as the engine parses them
/// ([`crate::chat::parse_tool_calls`]): a malformed block gives an `Err` with the reason (data,
/// not a crash).
pub fn parse_tool_calls(text: &str) -> Vec<Result<ToolCall, String>> {
    crate::chat::parse_tool_calls(text)
        .calls
        .into_iter()
        .map(|call| call.map_err(|error| error.message))
        .collect()
}

/// The final answer: the last assistant message without tool calls, `<think>` stripped.
pub fn final_answer(trajectory: &[Message]) -> Option<String> {
    let last = trajectory
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)?;
    if last.content.contains("<tool_call>") {
        return None;
    }
    let text = match last.content.find("</think>") {
        Some(end) => &last.content[end + "</think>".len()..],
        None => &last.content,
    };
    Some(text.trim().to_owned())
}

/// Whether two JSON values are equal, numbers by value (`1` equals `1.0`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, a)| y.get(key).is_some_and(|b| json_eq(a, b)))
        }
        _ => a == b,
    }
}

/// Pairs each call a checklist's argument standards require with at most one call of the
/// trajectory to the same tool: greedily by the most equal arguments (ties: the earlier
/// required call, then the earlier actual call), each actual call used once. Returns
/// `(name, required arguments, the call paired with it)`.
fn assign_calls<'a>(
    checklist: &'a Checklist,
    calls: &'a [ToolCall],
) -> Vec<(&'a str, &'a Value, Option<&'a ToolCall>)> {
    let mut required: Vec<(&str, &Value)> = Vec::new();
    for standard in &checklist.standards {
        if let Rule::Argument {
            name, arguments, ..
        } = &standard.rule
            && !required
                .iter()
                .any(|(n, a)| *n == name.as_str() && json_eq(a, arguments))
        {
            required.push((name.as_str(), arguments));
        }
    }
    let matching = |want: &Value, call: &ToolCall| -> usize {
        want.as_object().map_or(0, |want| {
            want.iter()
                .filter(|(k, v)| {
                    call.arguments
                        .get(k.as_str())
                        .is_some_and(|got| json_eq(got, v))
                })
                .count()
        })
    };
    let mut pairs: Vec<(usize, usize, usize)> = Vec::new();
    for (r, (name, want)) in required.iter().enumerate() {
        for (c, call) in calls.iter().enumerate() {
            if call.name == *name {
                pairs.push((matching(want, call), r, c));
            }
        }
    }
    pairs.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
    let mut paired: Vec<Option<&ToolCall>> = vec![None; required.len()];
    let mut used = vec![false; calls.len()];
    for (_, r, c) in pairs {
        if paired[r].is_none() && !used[c] {
            paired[r] = Some(&calls[c]);
            used[c] = true;
        }
    }
    required
        .into_iter()
        .zip(paired)
        .map(|((name, arguments), call)| (name, arguments, call))
        .collect()
}

/// Judges a trajectory against checklists. `state_hash` is the environment's hash after the
/// trajectory (`None` when unknown: every state standard then fails, saying so).
pub fn judge(
    checklists: &[Checklist],
    trajectory: &[Message],
    state_hash: Option<&str>,
    max_turns: usize,
) -> JudgeReport {
    let calls: Vec<ToolCall> = trajectory
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| parse_tool_calls(&m.content))
        .filter_map(Result::ok)
        .collect();
    let answer = final_answer(trajectory);
    let mut verdicts = Vec::new();
    let mut turn_scores = Vec::new();
    for (checklist_idx, checklist) in checklists.iter().enumerate() {
        let assigned = assign_calls(checklist, &calls);
        let mut met_weight = 0.0;
        let mut total_weight = 0.0;
        for (standard_idx, standard) in checklist.standards.iter().enumerate() {
            let (met, reason) = match &standard.rule {
                Rule::Called { name, arguments } => {
                    let same_name: Vec<&ToolCall> =
                        calls.iter().filter(|c| &c.name == name).collect();
                    if same_name
                        .iter()
                        .any(|c| json_eq(&c.arguments_value(), arguments))
                    {
                        (true, format!("{name} was called with {arguments}"))
                    } else if same_name.is_empty() {
                        (false, format!("{name} was never called"))
                    } else {
                        let seen: Vec<String> = same_name
                            .iter()
                            .map(|c| c.arguments_value().to_string())
                            .collect();
                        (
                            false,
                            format!(
                                "{name} was called with {}, not {arguments}",
                                seen.join(" / ")
                            ),
                        )
                    }
                }
                Rule::Argument {
                    name,
                    arguments,
                    key,
                } => {
                    let closest = assigned
                        .iter()
                        .find(|(n, a, _)| n == name && json_eq(a, arguments))
                        .and_then(|(_, _, call)| *call);
                    let want = arguments.get(key.as_str()).unwrap_or(&Value::Null);
                    match closest.map(|call| call.arguments.get(key.as_str())) {
                        None if calls.iter().any(|c| &c.name == name) => {
                            (false, format!("no call to {name} is left for {arguments}"))
                        }
                        None => (false, format!("{name} was never called")),
                        Some(Some(got)) if json_eq(got, want) => {
                            (true, format!("{name} was called with {key} = {want}"))
                        }
                        Some(Some(got)) => (
                            false,
                            format!("{name} was called with {key} = {got}, not {want}"),
                        ),
                        Some(None) => (false, format!("{name} was called without {key}")),
                    }
                }
                Rule::Mentions { text, exact_case } => {
                    let mentions = |answer: &str| {
                        if *exact_case {
                            answer.contains(text.as_str())
                        } else {
                            answer.to_lowercase().contains(&text.to_lowercase())
                        }
                    };
                    match &answer {
                        Some(answer) if mentions(answer) => {
                            (true, format!("the final answer mentions {text:?}"))
                        }
                        Some(_) => (false, format!("the final answer does not mention {text:?}")),
                        None => (false, "there is no final answer".to_owned()),
                    }
                }
                Rule::StateHash { hash } => match state_hash {
                    Some(actual) if actual == hash => {
                        (true, "the final state is the expected one".to_owned())
                    }
                    Some(actual) => (
                        false,
                        format!("the final state hash is {actual}, expected {hash}"),
                    ),
                    None => (false, "the final state is unknown".to_owned()),
                },
            };
            total_weight += standard.weight;
            if met {
                met_weight += standard.weight;
            }
            verdicts.push(StandardVerdict {
                checklist_idx,
                standard_idx,
                met,
                reason,
            });
        }
        turn_scores.push(if total_weight > 0.0 {
            met_weight / total_weight
        } else {
            0.0
        });
    }
    let score = episode_score(&turn_scores, checklists.len(), max_turns);
    JudgeReport {
        verdicts,
        turn_scores,
        score,
    }
}
