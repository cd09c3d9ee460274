//! τ²-bench tasks: what the simulated user is told and how the episode is graded.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One task of a domain's `tasks.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Task {
    /// Task id, "0", "1", ….
    pub id: String,
    /// Purpose, relevant policies and notes (all nullable).
    #[serde(default)]
    pub description: Option<TaskDescription>,
    /// Everything the user simulator sees.
    pub user_scenario: UserScenario,
    /// An initial state of its own; null in every retail and airline task.
    #[serde(default)]
    pub initial_state: Option<Value>,
    /// How the episode is graded; `None` grades every episode 1.0.
    #[serde(default)]
    pub evaluation_criteria: Option<EvaluationCriteria>,
}

/// A task's description block.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskDescription {
    /// What the task tests.
    #[serde(default)]
    pub purpose: Option<String>,
    /// Policy sections it touches.
    #[serde(default)]
    pub relevant_policies: Option<String>,
    /// Free notes.
    #[serde(default)]
    pub notes: Option<String>,
}

/// The user simulator's brief.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserScenario {
    /// A persona, if any.
    #[serde(default)]
    pub persona: Option<String>,
    /// The instructions (structured in these domains).
    pub instructions: UserInstructions,
}

/// Instructions for the user simulator: structured, or free text.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum UserInstructions {
    /// The structured form used by retail and airline.
    Structured(StructuredInstructions),
    /// Free text.
    Text(String),
}

/// The structured user instructions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StructuredInstructions {
    /// Domain name.
    pub domain: String,
    /// Why the user calls.
    pub reason_for_call: String,
    /// What the user knows.
    #[serde(default)]
    pub known_info: Option<String>,
    /// What the user does not know.
    #[serde(default)]
    pub unknown_info: Option<String>,
    /// How the user should behave.
    pub task_instructions: String,
}

/// A grading component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RewardType {
    /// The final database equals the gold one.
    #[serde(rename = "DB")]
    Db,
    /// Environment assertions hold (unused in these domains).
    #[serde(rename = "ENV_ASSERTION")]
    EnvAssertion,
    /// Required facts were said to the user.
    #[serde(rename = "COMMUNICATE")]
    Communicate,
    /// The gold actions were called.
    #[serde(rename = "ACTION")]
    Action,
    /// Natural-language assertions hold (needs an LLM judge).
    #[serde(rename = "NL_ASSERTION")]
    NlAssertion,
}

fn default_reward_basis() -> Vec<RewardType> {
    vec![RewardType::Db, RewardType::Communicate]
}

/// How a task is graded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvaluationCriteria {
    /// The gold actions, in order.
    #[serde(default)]
    pub actions: Option<Vec<Action>>,
    /// Facts the agent must tell the user.
    #[serde(default)]
    pub communicate_info: Option<Vec<String>>,
    /// Statements about the conversation a judge must confirm.
    #[serde(default)]
    pub nl_assertions: Option<Vec<String>>,
    /// Environment assertions (none in these domains).
    #[serde(default)]
    pub env_assertions: Option<Vec<Value>>,
    /// Which components make up the reward (default DB and COMMUNICATE).
    #[serde(default = "default_reward_basis")]
    pub reward_basis: Vec<RewardType>,
}

fn default_requestor() -> String {
    "assistant".to_owned()
}

/// A gold tool call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Action {
    /// Id within the task.
    pub action_id: String,
    /// Who calls it: `assistant` (default) or `user`.
    #[serde(default = "default_requestor")]
    pub requestor: String,
    /// Tool name.
    pub name: String,
    /// Arguments.
    pub arguments: Map<String, Value>,
    /// A note.
    #[serde(default)]
    pub info: Option<String>,
    /// Arguments compared when matching a call; `None` compares the call's arguments.
    #[serde(default)]
    pub compare_args: Option<Vec<String>>,
}
