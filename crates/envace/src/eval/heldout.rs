//! Held-out evaluation on generated test tasks: greedy success and mean score with standard
//! errors, the same per task family, and sampled pass@k over `[eval].n_trials` attempts at the
//! rollout temperature; the rollouts it shares with training (step settings, sampling)
//! are `eval::episodes`.
//!
//! A standard error is the sample standard deviation of the per-task values over √n (0 for a
//! single task). pass@k per task is the unbiased estimator `1 − C(n−c, k) / C(n, k)` from `c`
//! successes in `n` sampled trials, averaged over tasks.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::episodes::{
    PolicyJob, committed_episodes, episodes_of, rollout_sampling, step_settings,
};
use crate::config::RehearsalMode;
use crate::error::Result;
use crate::rollout::{EpisodeRecord, ResponseMode};
use crate::tasks::GenTask;

/// The benchmark name of held-out generated tasks in `eval_results`.
pub const BENCHMARK: &str = "generated_test";

/// The pass@k values reported, those up to `[eval].n_trials`.
pub const PASS_KS: [u32; 4] = [1, 2, 4, 8];

/// A mean over tasks with its standard error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The mean.
    pub mean: f64,
    /// Its standard error (sample standard deviation / √n; 0 for fewer than two values).
    pub se: f64,
}

impl Estimate {
    /// The mean and standard error of `values` (NaN mean for none).
    pub fn of(values: &[f64]) -> Self {
        let n = values.len();
        if n == 0 {
            return Estimate {
                mean: f64::NAN,
                se: f64::NAN,
            };
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let se = if n > 1 {
            let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            (var / n as f64).sqrt()
        } else {
            0.0
        };
        Estimate { mean, se }
    }
}

/// The figures of one group of tasks (all of them, or one family).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupReport {
    /// Tasks scored (masked episodes do not count).
    pub n_tasks: usize,
    /// Greedy episode score.
    pub score: Estimate,
    /// Greedy success (score 1).
    pub success: Estimate,
    /// Sampled pass@k by k (empty with one trial).
    pub pass_at: BTreeMap<u32, Estimate>,
}

impl GroupReport {
    /// `(metric, value)` pairs: `score`, `score_se`, `success`, `success_se`, `pass@k`,
    /// `pass@k_se`.
    pub fn metrics(&self) -> Vec<(String, f64)> {
        let mut out = vec![
            ("score".to_owned(), self.score.mean),
            ("score_se".to_owned(), self.score.se),
            ("success".to_owned(), self.success.mean),
            ("success_se".to_owned(), self.success.se),
        ];
        for (k, estimate) in &self.pass_at {
            out.push((format!("pass@{k}"), estimate.mean));
            out.push((format!("pass@{k}_se"), estimate.se));
        }
        out
    }
}

/// A held-out evaluation: every task, and each family.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// All tasks.
    pub all: GroupReport,
    /// By task family.
    pub families: BTreeMap<String, GroupReport>,
}

impl Report {
    /// The report of greedy episodes (one per task, in task order) and, when given, the
    /// successes of sampled trials (per task, one per trial).
    pub fn of(tasks: &[Arc<GenTask>], greedy: &[EpisodeRecord], trials: &[Vec<bool>]) -> Self {
        let group = |pick: &dyn Fn(&GenTask) -> bool| -> GroupReport {
            let mut scores = Vec::new();
            let mut successes = Vec::new();
            let mut per_k: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
            for (idx, task) in tasks.iter().enumerate() {
                if !pick(task) {
                    continue;
                }
                if let Some(reward) = greedy.get(idx).and_then(|e| e.reward) {
                    scores.push(reward);
                    successes.push(f64::from(u8::from(is_success(reward))));
                }
                if let Some(task_trials) = trials.get(idx).filter(|t| t.len() > 1) {
                    let n = task_trials.len();
                    let c = task_trials.iter().filter(|&&s| s).count();
                    for k in PASS_KS.into_iter().filter(|&k| k as usize <= n) {
                        per_k
                            .entry(k)
                            .or_default()
                            .push(pass_at_k(n, c, k as usize));
                    }
                }
            }
            GroupReport {
                n_tasks: scores.len(),
                score: Estimate::of(&scores),
                success: Estimate::of(&successes),
                pass_at: per_k
                    .into_iter()
                    .map(|(k, values)| (k, Estimate::of(&values)))
                    .collect(),
            }
        };
        let mut families = BTreeMap::new();
        for task in tasks {
            if !families.contains_key(task.family) {
                let family = task.family;
                families.insert(family.to_owned(), group(&|t| t.family == family));
            }
        }
        Report {
            all: group(&|_| true),
            families,
        }
    }

    /// `(category, metric, value, n_tasks)` rows: the whole set under `category`, and with
    /// `families` each family under `category` + `/family/<name>` (`family/<name>` when
    /// `category` is `all`).
    pub fn rows(&self, category: &str, families: bool) -> Vec<(String, String, f64, usize)> {
        let mut out: Vec<(String, String, f64, usize)> = self
            .all
            .metrics()
            .into_iter()
            .map(|(metric, value)| (category.to_owned(), metric, value, self.all.n_tasks))
            .collect();
        for (family, report) in self.families.iter().filter(|_| families) {
            let family_category = if category == "all" {
                format!("family/{family}")
            } else {
                format!("{category}/family/{family}")
            };
            out.extend(
                report.metrics().into_iter().map(|(metric, value)| {
                    (family_category.clone(), metric, value, report.n_tasks)
                }),
            );
        }
        out
    }
}

/// Whether an episode score counts as solved.
pub fn is_success(score: f64) -> bool {
    score >= 1.0 - 1e-9
}

/// The unbiased pass@k estimate from `c` successes in `n` trials: `1 − C(n−c, k) / C(n, k)`
/// (1 when every size-k subset holds a success; NaN when k > n).
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    if k > n || c > n {
        return f64::NAN;
    }
    if n - c < k {
        return 1.0;
    }
    // C(n−c, k) / C(n, k) = Π_{i=0}^{k−1} (n−c−i) / (n−i).
    let fail: f64 = (0..k)
        .map(|i| (n - c - i) as f64 / (n - i) as f64)
        .product();
    1.0 - fail
}

/// The greedy episodes of a held-out evaluation (real environment), in task order. With
/// `[rehearsal].mode` on, each committed attempt follows the policy's private rehearsal of the
/// task (`eval::rehearsal`).
pub fn evaluation_episodes(
    job: &dyn PolicyJob,
    tasks: &[Arc<GenTask>],
    step: u32,
) -> Result<Vec<EpisodeRecord>> {
    let rehearsal = &job.config().rehearsal;
    match rehearsal.mode {
        RehearsalMode::Off => committed_episodes(job, tasks, step, None),
        style => {
            let budget = rehearsal.budget as usize;
            super::rehearsal::rehearsed_episodes(job, tasks, step, style, budget)
        }
    }
}

/// Whether each of `n_trials` attempts at each task (sampled at the rollout temperature,
/// real environment, no rehearsal) succeeded; empty lists when `n_trials` is 1.
pub fn sampled_trials(
    job: &dyn PolicyJob,
    tasks: &[Arc<GenTask>],
    step: u32,
    n_trials: usize,
) -> Result<Vec<Vec<bool>>> {
    if n_trials < 2 {
        return Ok(vec![Vec::new(); tasks.len()]);
    }
    let mut settings = step_settings(job, step);
    settings.mode = ResponseMode::Real;
    settings.fidelity = false;
    settings.seed ^= 0x7a11_5eed_0f7e_57ed;
    let sampling = rollout_sampling(&job.config().rl);
    let episodes = episodes_of(job, tasks, n_trials, &settings, sampling, None)?;
    Ok(episodes
        .chunks(n_trials)
        .map(|trials| {
            trials
                .iter()
                .map(|e| e.reward.is_some_and(is_success))
                .collect()
        })
        .collect())
}

/// The held-out evaluation after step `step`: greedy episodes (rehearsed first when
/// `[rehearsal].mode` is on) and `[eval].n_trials` sampled trials.
pub fn evaluate(job: &dyn PolicyJob, tasks: &[Arc<GenTask>], step: u32) -> Result<Report> {
    let greedy = evaluation_episodes(job, tasks, step)?;
    let trials = sampled_trials(job, tasks, step, job.config().eval.n_trials as usize)?;
    Ok(Report::of(tasks, &greedy, &trials))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_at_k_against_a_hand_computed_table() {
        // n = 4 trials. c = 0: never. c = 1: pass@1 = 1/4, pass@2 = 1 − C(3,2)/C(4,2) = 1 − 3/6,
        // pass@4 = 1. c = 2: pass@1 = 1/2, pass@2 = 1 − C(2,2)/C(4,2) = 5/6. c = 4: always.
        let table = [
            (4, 0, 1, 0.0),
            (4, 0, 4, 0.0),
            (4, 1, 1, 0.25),
            (4, 1, 2, 0.5),
            (4, 1, 4, 1.0),
            (4, 2, 1, 0.5),
            (4, 2, 2, 5.0 / 6.0),
            (4, 2, 3, 1.0),
            (4, 4, 1, 1.0),
            // n = 8, c = 3: pass@2 = 1 − C(5,2)/C(8,2) = 1 − 10/28; pass@4 = 1 − 5/70.
            (8, 3, 2, 1.0 - 10.0 / 28.0),
            (8, 3, 4, 1.0 - 5.0 / 70.0),
            (8, 3, 8, 1.0),
        ];
        for (n, c, k, expected) in table {
            let got = pass_at_k(n, c, k);
            assert!(
                (got - expected).abs() < 1e-12,
                "pass@{k} n={n} c={c}: {got}"
            );
        }
        assert!(pass_at_k(2, 1, 4).is_nan());
    }

    #[test]
    fn estimates_are_the_mean_and_standard_error() {
        let e = Estimate::of(&[1.0, 0.0, 1.0, 1.0]);
        assert_eq!(e.mean, 0.75);
        // Sample variance of {1, 0, 1, 1} = 0.25; se = √(0.25 / 4).
        assert!((e.se - 0.25).abs() < 1e-12);
        assert_eq!(Estimate::of(&[0.5]).se, 0.0);
        assert!(Estimate::of(&[]).mean.is_nan());
    }
}
