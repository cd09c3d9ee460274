//! The episode browser's data: a run's episodes (task, reward, calls rehearsed) and, for the one
//! opened, each rehearsed tool response beside the real one, leaf by leaf, with the leaves where
//! they differ marked (the engine's `fidelity::leaf_diff`). Read on demand, not every frame.

use std::collections::HashMap;

use envace::fidelity::{LeafDiff, leaf_diff};
use envace::store::{FidelityRow, RunId};

use crate::follow::Follower;

/// One episode of the list.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    /// Optimizer step it was sampled at.
    pub step: u64,
    /// Index within the step's batch.
    pub episode_idx: u64,
    /// The task it attempted.
    pub task_id: String,
    /// Its score; `None` when masked.
    pub reward: Option<f64>,
    /// Rehearsed-vs-real pairs recorded for it.
    pub n_pairs: usize,
}

impl Episode {
    /// The line the browser lists it by.
    pub fn label(&self) -> String {
        let reward = self
            .reward
            .map_or_else(|| "masked".to_owned(), |r| format!("reward {r:.2}"));
        format!(
            "step {} · episode {} · {} · {reward} · {} rehearsed",
            self.step, self.episode_idx, self.task_id, self.n_pairs
        )
    }
}

/// A rehearsed call of the opened episode with its leaf-by-leaf comparison.
#[derive(Debug, Clone)]
pub struct Call {
    /// The stored pair.
    pub pair: FidelityRow,
    /// Its leaves, differing ones marked.
    pub leaves: Vec<LeafDiff>,
}

/// A run's episodes as the browser holds them.
#[derive(Debug, Clone)]
pub struct Episodes {
    /// Whose episodes.
    pub run: RunId,
    /// In step and episode order.
    pub list: Vec<Episode>,
    pairs: Vec<FidelityRow>,
}

impl Episodes {
    /// Reads the run's episodes and rehearsed-vs-real pairs from the follower's store.
    pub fn load(follower: &mut Follower, run: RunId) -> envace::Result<Self> {
        let (trajectories, pairs) = follower.episodes(run)?;
        let mut per_episode: HashMap<(u64, u64), usize> = HashMap::new();
        for pair in &pairs {
            *per_episode
                .entry((pair.step, pair.episode_idx))
                .or_default() += 1;
        }
        let list = trajectories
            .into_iter()
            .map(|t| Episode {
                n_pairs: per_episode
                    .get(&(t.step, t.episode_idx))
                    .copied()
                    .unwrap_or(0),
                step: t.step,
                episode_idx: t.episode_idx,
                task_id: t.task_id,
                reward: t.reward,
            })
            .collect();
        Ok(Episodes { run, list, pairs })
    }

    /// The rehearsed calls of one episode, in turn and call order.
    pub fn calls(&self, step: u64, episode_idx: u64) -> Vec<Call> {
        self.pairs
            .iter()
            .filter(|p| p.step == step && p.episode_idx == episode_idx)
            .map(|pair| Call {
                leaves: leaf_diff(&pair.rehearsed, &pair.real),
                pair: pair.clone(),
            })
            .collect()
    }
}
