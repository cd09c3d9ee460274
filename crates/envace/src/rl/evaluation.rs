//! A training job's evaluations: the held-out evaluation after a step and the rehearsal-budget
//! curves after the last one (`eval` computes them), stored in the run's `eval_results` and
//! announced to the hooks as `Eval` events.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::hooks::{Event, Flow, Hooks};
use super::session::Session;
use crate::config::RehearsalMode;
use crate::error::Result;
use crate::eval::heldout::{self, BENCHMARK, Report};
use crate::eval::rehearsal;
use crate::store::{Batch, EvalRow, now_secs};
use crate::tasks::GenTask;

/// Evaluates the policy on the held-out tasks after step `step`, stores the report (rows in
/// `eval_results`, the whole set's figures as `eval/generated_test/*` metrics) and announces it.
pub fn held_out_eval(
    session: &mut Session,
    tasks: &[Arc<GenTask>],
    step: u32,
    hooks: &mut dyn Hooks,
) -> Result<()> {
    let report = heldout::evaluate(session, tasks, step)?;
    let metrics: BTreeMap<String, f64> = report.all.metrics().into_iter().collect();
    for (metric, value) in &metrics {
        session.writer.metric(
            u64::from(step),
            &format!("eval/{}/{metric}", heldout::BENCHMARK),
            *value,
        )?;
    }
    store_report(session, step, "all", &report, true)?;
    hooks.emit(Event::Eval {
        step,
        benchmark: heldout::BENCHMARK.to_owned(),
        n_tasks: tasks.len(),
        metrics,
    });
    Ok(())
}

/// Stores a report's rows under `category` (and, with `families`, its families' rows), after
/// the writer's buffered rows, in one batch.
pub fn store_report(
    session: &mut Session,
    step: u32,
    category: &str,
    report: &Report,
    families: bool,
) -> Result<()> {
    session.writer.flush()?;
    let mut batch = Batch::new(session.run);
    let wall_time = now_secs();
    for (category, metric, value, n_tasks) in report.rows(category, families) {
        batch.evals.push(EvalRow {
            step: u64::from(step),
            benchmark: BENCHMARK.to_owned(),
            category,
            metric,
            value,
            n_tasks: n_tasks as u64,
            wall_time,
        });
    }
    session.writer.store_mut().write(&batch)
}

/// The category [`Hooks::episodes`] gets the plain evaluation's episodes under.
pub const PLAIN_EPISODES: &str = "plain";

/// The rehearsal-budget curves after step `step`: for each style (parallel, sequential) and
/// each budget of `[rehearsal].budget_curve`, the held-out score and success rate of the
/// committed attempts, stored in `eval_results` under category `rehearsal/<style>/<N>` of
/// `generated_test` and reported as `Eval` events; hooks that want them also get each point's
/// committed episodes, after those of a plain (N = 0) pass. Stops between points when asked to.
pub fn budget_curve(
    session: &mut Session,
    tasks: &[Arc<GenTask>],
    step: u32,
    hooks: &mut dyn Hooks,
) -> Result<Flow> {
    let budgets = session.config.rehearsal.budget_curve.clone();
    let subset = curve_tasks(tasks, session.config.rehearsal.curve_max_tasks);
    // On fewer tasks than the plain evaluation scored, the curves get their own N = 0: the
    // same greedy pass on their tasks, so that each point compares like with like.
    let own_zero = subset.len() < tasks.len();
    if own_zero || hooks.wants_episodes() {
        let plain = rehearsal::rehearsed_episodes(session, subset, step, RehearsalMode::Off, 0)?;
        if own_zero {
            let report = Report::of(subset, &plain, &[]);
            for style in [RehearsalMode::Parallel, RehearsalMode::Sequential] {
                let category = rehearsal::curve_category(style, 0);
                store_report(session, step, &category, &report, false)?;
            }
        }
        if hooks.wants_episodes() {
            hooks.episodes(PLAIN_EPISODES, &plain);
        }
    }
    let tasks = subset;
    for style in [RehearsalMode::Parallel, RehearsalMode::Sequential] {
        for &budget in &budgets {
            if hooks.poll() == Flow::Stop {
                return Ok(Flow::Stop);
            }
            let category = rehearsal::curve_category(style, budget as usize);
            hooks.emit(Event::Log {
                level: "info".to_owned(),
                message: format!(
                    "test-time rehearsal: {budget} imagined attempt(s) per task, {} tasks ({category})",
                    tasks.len()
                ),
            });
            let episodes =
                rehearsal::rehearsed_episodes(session, tasks, step, style, budget as usize)?;
            let report = Report::of(tasks, &episodes, &[]);
            store_report(session, step, &category, &report, false)?;
            if hooks.wants_episodes() {
                hooks.episodes(&category, &episodes);
            }
            hooks.emit(Event::Eval {
                step,
                benchmark: heldout::BENCHMARK.to_owned(),
                n_tasks: tasks.len(),
                metrics: report
                    .all
                    .metrics()
                    .into_iter()
                    .map(|(metric, value)| (format!("{category}/{metric}"), value))
                    .collect(),
            });
        }
    }
    Ok(Flow::Continue)
}

/// The held-out tasks the rehearsal-budget curves run on: the first `max_tasks` of `tasks`
/// (all of them when absent or larger).
fn curve_tasks(tasks: &[Arc<GenTask>], max_tasks: Option<u32>) -> &[Arc<GenTask>] {
    let n = max_tasks.map_or(tasks.len(), |n| (n as usize).min(tasks.len()));
    &tasks[..n]
}
