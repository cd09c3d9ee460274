//! τ²-bench task rewards (DB, COMMUNICATE, ACTION; NL_ASSERTION left to a judge) and pass^k.
//!
//! The rules follow the reference evaluators (`src/tau2/evaluator/evaluator_env.py`,
//! `evaluator_communicate.py`, `evaluator_action.py`, `metrics/agent_metrics.py`):
//! - **DB**: the agent's state-changing calls are replayed in order on a fresh environment
//!   (unknown tools, read-only tools and user-requested calls are skipped; failing calls change
//!   nothing beyond what the tool did before failing); the gold actions are applied to another
//!   fresh environment, failures ignored; the component is 1 when the two state hashes are equal.
//!   A task with neither gold actions nor env assertions scores 1 without comparing.
//! - **COMMUNICATE**: each expected string must occur, case-insensitively, in some non-blank
//!   assistant message with its commas removed.
//! - **ACTION**: each gold action must match some call (assistant or user) by name and by the
//!   arguments in `compare_args`, or, without `compare_args`, by the call's own argument names
//!   (so an argument the call omits is not compared). Values compare as Python does (`1 == 1.0`).
//! - The reward is the product of the components in the task's `reward_basis`. When the basis
//!   holds NL_ASSERTION the result is [`Reward::NeedsJudge`]: an LLM judge must decide the
//!   assertions; the product of the other components is carried along.
//!
//! Not reproduced: the reference also sets the reward to 0 when the simulation ended for a
//! reason other than the agent or user stopping; that is the rollout's business here.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::chat::{Message, Role, ToolCall, TurnParse, parse_tool_calls};
use crate::env::{Environment, ToolOutcome};
use crate::error::{Error, Result};

use super::task::{Action, RewardType, Task};
use super::{Tau2Domain, Tau2Env};

/// The gold trajectory of a task: one message per gold action holding its call as the model
/// writes it (from the assistant, or from the user when the user requests it), then (when
/// `tell_user`) one assistant message stating every `communicate_info` string.
pub fn gold_trajectory(task: &Task, tell_user: bool) -> Vec<Message> {
    let criteria = task.evaluation_criteria.as_ref();
    let mut messages: Vec<Message> = criteria
        .and_then(|c| c.actions.as_ref())
        .into_iter()
        .flatten()
        .map(|action| {
            let role = if action.requestor == "user" {
                Role::User
            } else {
                Role::Assistant
            };
            let call = ToolCall {
                name: action.name.clone(),
                arguments: action.arguments.clone(),
            };
            Message::new(role, call.to_block())
        })
        .collect();
    let infos = criteria.and_then(|c| c.communicate_info.as_ref());
    if tell_user && let Some(infos) = infos.filter(|infos| !infos.is_empty()) {
        messages.push(Message::new(Role::Assistant, infos.join("; ")));
    }
    messages
}

/// The environment after a task's gold actions, with each action's outcome.
#[derive(Debug, Clone)]
pub struct GoldReplay {
    /// The final environment.
    pub env: Tau2Env,
    /// One outcome per gold action, in order.
    pub outcomes: Vec<ToolOutcome>,
}

/// Applies a task's gold actions to a fresh environment (failures are kept, not fatal).
pub fn replay_gold(domain: &Arc<Tau2Domain>, task: &Task) -> GoldReplay {
    let mut env = domain.env(0);
    let outcomes = task
        .evaluation_criteria
        .as_ref()
        .and_then(|c| c.actions.as_ref())
        .into_iter()
        .flatten()
        .map(|action| call_action(&mut env, action))
        .collect();
    GoldReplay { env, outcomes }
}

fn call_action(env: &mut Tau2Env, action: &Action) -> ToolOutcome {
    env.call(&action.name, &Value::Object(action.arguments.clone()))
}

/// The DB comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DbCheck {
    /// Whether the hashes are equal.
    pub matched: bool,
    /// Hash after the gold actions.
    pub gold_hash: String,
    /// Hash after replaying the trajectory.
    pub predicted_hash: String,
}

/// One COMMUNICATE check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommunicateCheck {
    /// The expected string.
    pub info: String,
    /// Whether some assistant message contains it.
    pub met: bool,
}

/// One ACTION check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionCheck {
    /// The gold action's id.
    pub action_id: String,
    /// Its tool name.
    pub name: String,
    /// Whether some call matches it.
    pub matched: bool,
}

/// The task reward.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Reward {
    /// Fully decided.
    Scored(f64),
    /// The basis holds NL_ASSERTION: a judge must decide these assertions; the reward is
    /// `reward_without_judge` times the judge's verdict.
    NeedsJudge {
        /// Product of the other components of the basis.
        reward_without_judge: f64,
        /// The assertions to judge.
        nl_assertions: Vec<String>,
    },
}

/// Every component computed for a task, and the reward its basis gives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RewardReport {
    /// The reward.
    pub reward: Reward,
    /// DB component (1 or 0).
    pub db_reward: f64,
    /// The DB comparison, when one was made.
    pub db: Option<DbCheck>,
    /// COMMUNICATE component (1 or 0).
    pub communicate_reward: f64,
    /// Per-string checks.
    pub communicate: Vec<CommunicateCheck>,
    /// ACTION component (1 or 0).
    pub action_reward: f64,
    /// Per-action checks.
    pub actions: Vec<ActionCheck>,
}

/// Grades a trajectory against a task of this domain. The trajectory is the conversation as
/// the model sees it (the engine's chat messages, e.g. a rollout's acting conversation): the
/// calls of an assistant or user message are its well-formed `<tool_call>` blocks (malformed
/// ones call nothing), its text is what lies outside them, and tool and system messages are
/// neither calls nor statements.
pub fn evaluate(domain: &Arc<Tau2Domain>, task: &Task, trajectory: &[Message]) -> RewardReport {
    let Some(criteria) = task.evaluation_criteria.as_ref() else {
        return RewardReport {
            reward: Reward::Scored(1.0),
            db_reward: 1.0,
            db: None,
            communicate_reward: 1.0,
            communicate: Vec::new(),
            action_reward: 1.0,
            actions: Vec::new(),
        };
    };

    let parsed: Vec<(Role, TurnParse)> = trajectory
        .iter()
        .filter(|m| matches!(m.role, Role::Assistant | Role::User))
        .map(|m| (m.role, parse_tool_calls(&m.content)))
        .collect();

    // DB.
    let (db_reward, db) = if criteria.actions.is_none() && criteria.env_assertions.is_none() {
        (1.0, None)
    } else {
        let mut predicted = domain.env(0);
        for (_, turn) in parsed.iter().filter(|(role, _)| *role == Role::Assistant) {
            for call in turn.valid_calls() {
                if predicted.mutates_state(&call.name) {
                    predicted.call(&call.name, &Value::Object(call.arguments.clone()));
                }
            }
        }
        let gold_hash = domain.gold_hash(task);
        let predicted_hash = predicted.state_hash();
        let matched = gold_hash == predicted_hash;
        (
            if matched { 1.0 } else { 0.0 },
            Some(DbCheck {
                matched,
                gold_hash,
                predicted_hash,
            }),
        )
    };

    // COMMUNICATE.
    let communicate: Vec<CommunicateCheck> = criteria
        .communicate_info
        .iter()
        .flatten()
        .map(|info| {
            let wanted = info.to_lowercase();
            let met = parsed.iter().any(|(role, turn)| {
                *role == Role::Assistant
                    && !turn.content.is_empty()
                    && turn
                        .content
                        .to_lowercase()
                        .replace(',', "")
                        .contains(&wanted)
            });
            CommunicateCheck {
                info: info.clone(),
                met,
            }
        })
        .collect();
    let communicate_reward = if communicate.iter().all(|c| c.met) {
        1.0
    } else {
        0.0
    };

    // ACTION.
    let calls: Vec<&ToolCall> = parsed
        .iter()
        .flat_map(|(_, turn)| turn.valid_calls())
        .collect();
    let actions: Vec<ActionCheck> = criteria
        .actions
        .iter()
        .flatten()
        .map(|action| ActionCheck {
            action_id: action.action_id.clone(),
            name: action.name.clone(),
            matched: calls.iter().any(|call| action_matches(action, call)),
        })
        .collect();
    let action_reward = if actions.iter().all(|a| a.matched) {
        1.0
    } else {
        0.0
    };

    let mut product = 1.0;
    for basis in &criteria.reward_basis {
        product *= match basis {
            RewardType::Db => db_reward,
            RewardType::Communicate => communicate_reward,
            RewardType::Action => action_reward,
            RewardType::EnvAssertion | RewardType::NlAssertion => 1.0,
        };
    }
    let reward = if criteria.reward_basis.contains(&RewardType::NlAssertion) {
        Reward::NeedsJudge {
            reward_without_judge: product,
            nl_assertions: criteria.nl_assertions.clone().unwrap_or_default(),
        }
    } else {
        Reward::Scored(product)
    };
    RewardReport {
        reward,
        db_reward,
        db,
        communicate_reward,
        communicate,
        action_reward,
        actions,
    }
}

/// Whether a call matches a gold action (the reference's `compare_with_tool_call`).
pub fn action_matches(action: &Action, call: &ToolCall) -> bool {
    if action.name != call.name {
        return false;
    }
    let keys: Vec<&String> = match &action.compare_args {
        Some(keys) => keys.iter().collect(),
        None => call.arguments.keys().collect(),
    };
    if keys.is_empty() {
        return true;
    }
    let pick = |args: &Map<String, Value>| -> Map<String, Value> {
        args.iter()
            .filter(|(k, _)| keys.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    py_eq(
        &Value::Object(pick(&call.arguments)),
        &Value::Object(pick(&action.arguments)),
    )
}

/// Python `==` on JSON-like values: numbers (and booleans) compare by value.
pub fn py_eq(a: &Value, b: &Value) -> bool {
    let numeric = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::Bool(flag) => Some(if *flag { 1.0 } else { 0.0 }),
        _ => None,
    };
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => numeric(a) == numeric(b),
        },
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Bool(_), Value::Number(_)) | (Value::Number(_), Value::Bool(_)) => {
            numeric(a) == numeric(b)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| py_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|other| py_eq(v, other)))
        }
        _ => a == b,
    }
}

/// Whether a reward counts as a success (within 1e-6 of 1).
pub fn is_successful(reward: f64) -> bool {
    (1.0 - 1e-6..=1.0 + 1e-6).contains(&reward)
}

/// pass^k of one task: `C(successes, k) / C(trials, k)`, the chance that k trials drawn without
/// replacement all succeed.
pub fn pass_hat_k(n_trials: u64, n_successes: u64, k: u64) -> Result<f64> {
    let problem = if n_trials < k {
        Some("fewer trials than k")
    } else if n_successes > n_trials {
        Some("more successes than trials")
    } else {
        None
    };
    if let Some(problem) = problem {
        return Err(Error::PassHatK {
            problem,
            n_trials,
            n_successes,
            k,
        });
    }
    match (binomial(n_successes, k), binomial(n_trials, k)) {
        (Some(num), Some(den)) => Ok(num as f64 / den as f64),
        _ => {
            // Too large for exact integers: multiply the ratios instead.
            let mut ratio = 1.0;
            for i in 0..k {
                ratio *= (n_successes as f64 - i as f64) / (n_trials as f64 - i as f64);
            }
            Ok(ratio.max(0.0))
        }
    }
}

/// `C(n, k)` exactly, `None` on overflow; 0 when k > n.
fn binomial(n: u64, k: u64) -> Option<u128> {
    if k > n {
        return Some(0);
    }
    let k = k.min(n - k);
    let mut result: u128 = 1;
    for i in 0..k {
        result = result.checked_mul(u128::from(n - i))? / u128::from(i + 1);
    }
    Some(result)
}

/// pass^k for k = 1 ..= (fewest trials of any task), averaged over tasks, from
/// `(task_id, reward)` pairs (the reference's `get_tasks_pass_hat_k` then the mean per k).
pub fn pass_hat_ks(results: &[(String, f64)]) -> Result<BTreeMap<u64, f64>> {
    let mut per_task: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (task_id, reward) in results {
        let entry = per_task.entry(task_id.as_str()).or_default();
        entry.0 += 1;
        entry.1 += u64::from(is_successful(*reward));
    }
    let max_k = per_task.values().map(|(n, _)| *n).min().unwrap_or(0);
    let mut out = BTreeMap::new();
    for k in 1..=max_k {
        let mut sum = 0.0;
        for (n_trials, n_successes) in per_task.values() {
            sum += pass_hat_k(*n_trials, *n_successes, k)?;
        }
        out.insert(k, sum / per_task.len() as f64);
    }
    Ok(out)
}
