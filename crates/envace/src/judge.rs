//! Judges that turn a finished episode into its score (DESIGN.md §1): the rule judge for
//! generated tasks, and the verdict type every judge returns, where a judge that could not
//! decide masks the episode instead of scoring it 0.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

use crate::config::Domain;
use crate::error::Result;
use crate::tasks::{ChatMessage, GenSources, GenTask, Runner};

/// A judge's decision on one episode.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The episode score, with the per-standard details.
    Scored {
        /// Sum of turn scores / (checklists × max turns), in `[0, 1]`.
        score: f64,
        /// Verdict per standard, for the episode viewer.
        detail: Value,
    },
    /// The judge could not decide (its call failed): the episode is left out of training.
    Masked {
        /// Why.
        reason: String,
    },
}

/// Scores finished episodes.
pub trait EpisodeJudge: Sync {
    /// The verdict on `trajectory` (user, assistant and tool messages) for `task`.
    fn judge(&self, task: &GenTask, trajectory: &[ChatMessage]) -> Verdict;
}

/// The rule judge of generated tasks: replays the trajectory's tool calls on the real
/// environment from the task's initial state and decides every standard by its rule (required
/// calls, facts in the final answer, final state hash).
#[derive(Debug)]
pub struct RuleJudge {
    sources: GenSources,
    runners: Mutex<HashMap<Domain, Runner>>,
}

impl RuleJudge {
    /// A judge over the loaded domain data.
    pub fn new(sources: GenSources) -> Self {
        RuleJudge {
            sources,
            runners: Mutex::new(HashMap::new()),
        }
    }

    fn judge_with_runner(&self, task: &GenTask, trajectory: &[ChatMessage]) -> Result<Verdict> {
        let mut runners = self
            .runners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let runner = match runners.entry(task.domain) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Runner::new(task.domain, &self.sources)?)
            }
        };
        let report = runner.judge(task, trajectory);
        let detail = serde_json::to_value(&report).unwrap_or(Value::Null);
        Ok(Verdict::Scored {
            score: report.score,
            detail,
        })
    }
}

impl EpisodeJudge for RuleJudge {
    fn judge(&self, task: &GenTask, trajectory: &[ChatMessage]) -> Verdict {
        self.judge_with_runner(task, trajectory)
            .unwrap_or_else(|e| Verdict::Masked {
                reason: format!("the rule judge could not replay the episode: {e}"),
            })
    }
}
