//! End-to-end: the Benchmarks tab on a run whose public-benchmark evaluations are stored with
//! their task records — the score table (BFCL categories, a τ²-bench domain, their means and the
//! overall mean per checkpoint) and the drill-down from a score to its failing tasks, with the
//! checker's reason and the model's calls beside the expected ones, or a conversation's
//! grade. The records are real: BFCL outputs scored by the engine's AST checker, and a τ² and
//! a VitaBench conversation run and graded by the engine's evaluators, and a BFCL multi-turn
//! task executed on the rebuilt backends (its turns' calls beside the expected ones and what
//! each turn's calls were answered). A column evaluated with test-time rehearsal sits beside
//! the plain one, the scores are charted over checkpoints, and
//! the Compare tab shows two runs' tables side by side.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use envace::chat::{Message, Role};
use envace::env::tau2::{DomainKind, Task, Tau2Domain};
use envace::env::vita::{VitaTask, load_tasks};
use envace::eval::bfcl::{self, NameStyle};
use envace::eval::tau2::{Agent, STOP, Tau2Options, UserSimulator, run_conversation};
use envace::eval::vita::{RubricJudge, RubricState};
use envace::store::{Batch, EvalRow, EvalTaskRow, Store};
use serde_json::{Value, json};

use super::Studio;

fn data() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/benchmarks")
}

/// The first three simple_python tasks answered with their ground truth, except task 1, whose
/// first argument is off by one; scored by the AST checker into task rows at `step`.
fn bfcl_rows(step: u64, wrong: bool) -> (Vec<EvalTaskRow>, f64) {
    let entries = bfcl::load(&data(), "simple_python").unwrap();
    let mut rows = Vec::new();
    for entry in entries.iter().take(3) {
        let mut output = bfcl::gold_output(entry, "simple_python").unwrap();
        if wrong && entry.id == "simple_python_1" {
            let call = output[0]
                .as_object_mut()
                .unwrap()
                .values_mut()
                .next()
                .unwrap();
            let (_, first) = call.as_object_mut().unwrap().iter_mut().next().unwrap();
            *first = json!(first.as_i64().unwrap_or(0) + 1);
        }
        let verdict = bfcl::score_entry(entry, "simple_python", &output, NameStyle::AsDocumented);
        rows.push(EvalTaskRow {
            step,
            benchmark: "bfcl_simple_python".into(),
            task_id: entry.id.clone(),
            trial: 0,
            score: Some(if verdict.valid { 1.0 } else { 0.0 }),
            reason: verdict.reason(),
            data: json!({
                "category": "simple_python",
                "id": entry.id,
                "messages": entry.turns[0].iter().map(|m| json!({"role": m.role, "content": m.content})).collect::<Vec<_>>(),
                "result": output,
                "expected": entry.ground_truth,
                "valid": verdict.valid,
                "reason": verdict.reason(),
            }),
        });
    }
    let accuracy = rows.iter().filter(|r| r.score == Some(1.0)).count() as f64 / rows.len() as f64;
    (rows, accuracy)
}

/// An agent that looks the reservation up and then says it cannot help.
struct LookOnly;

impl Agent for LookOnly {
    fn respond(&self, _: &Task, _: usize, conversation: &[Message]) -> Result<String, String> {
        if conversation.iter().any(|m| m.role == Role::Tool) {
            Ok("Sorry, I cannot change that reservation.".into())
        } else {
            Ok("<tool_call>\n{\"name\": \"get_reservation_details\", \"arguments\": {\"reservation_id\": \"Q69X3R\"}}\n</tool_call>".into())
        }
    }
}

/// Asks once, then ends the call.
struct AskOnce;

impl UserSimulator for AskOnce {
    fn respond(&self, _: &Task, _: usize, conversation: &[Message]) -> Result<String, String> {
        Ok(if conversation.len() == 1 {
            "Please change my flight.".into()
        } else {
            format!("Fine. {STOP}")
        })
    }
}

/// Offers to order, then the user ends the call.
struct OffersOnly;

impl Agent<VitaTask> for OffersOnly {
    fn respond(&self, _: &VitaTask, _: usize, _: &[Message]) -> Result<String, String> {
        Ok("I can order rice noodles from Jintugo for you.".into())
    }
}

struct StatesGoal;

impl UserSimulator<VitaTask> for StatesGoal {
    fn respond(&self, task: &VitaTask, _: usize, c: &[Message]) -> Result<String, String> {
        Ok(if c.len() == 1 {
            task.instructions.clone()
        } else {
            format!("Never mind. {STOP}")
        })
    }
}

/// Finds the first rubric met and no other.
struct FirstRubricOnly;

impl RubricJudge for FirstRubricOnly {
    fn update(
        &self,
        _: &VitaTask,
        _: &[Message],
        _: usize,
        _: (usize, usize),
        states: &[RubricState],
    ) -> Result<Vec<RubricState>, String> {
        Ok(states
            .iter()
            .enumerate()
            .map(|(i, s)| RubricState {
                met: i == 0,
                justification: if i == 0 {
                    "[3] the store offers dine-in".into()
                } else {
                    String::new()
                },
                ..s.clone()
            })
            .collect())
    }
}

/// multi_turn_base_0 answered with its ground truth but for one call (the `mkdir` of its
/// first turn), executed on the rebuilt backends and scored by BFCL's multi-turn checker, as
/// the runner records it.
fn bfcl_multi_row(step: u64) -> EvalTaskRow {
    let entries = bfcl::multi::load_multi(&data(), "multi_turn_base").unwrap();
    let entry = &entries[0];
    let mut output = bfcl::multi::gold_multi_output(entry);
    output[0][0].as_array_mut().unwrap().remove(1);
    let mut live =
        envace::env::bfcl::Instances::new(&entry.initial_config, &entry.involved_classes).unwrap();
    let execution: Vec<Value> = output
        .as_array()
        .unwrap()
        .iter()
        .map(|turn| {
            let steps = turn.as_array().unwrap().iter().map(|step| {
                let calls = step.as_array().unwrap();
                json!(
                    calls
                        .iter()
                        .map(|c| live.execute(c.as_str().unwrap()))
                        .collect::<Vec<_>>()
                )
            });
            json!(steps.collect::<Vec<_>>())
        })
        .collect();
    let verdict = bfcl::multi::check_multi(entry, &output);
    assert!(!verdict.valid);
    let messages: Vec<Value> = entry
        .turns
        .iter()
        .flatten()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    let record = bfcl::multi::MultiRecord {
        category: "multi_turn_base".into(),
        id: entry.id.clone(),
        messages: json!(messages),
        result: output,
        execution: json!(execution),
        valid: false,
        reason: verdict.reason(),
        expected: json!(entry.ground_truth),
        steps: 4,
        completion_tokens: 0,
        secs: 1.0,
    };
    EvalTaskRow {
        step,
        benchmark: "bfcl_multi_turn_base".into(),
        task_id: entry.id.clone(),
        trial: 0,
        score: Some(0.0),
        reason: record.reason.clone(),
        data: serde_json::to_value(&record).unwrap(),
    }
}

fn eval_row(step: u64, benchmark: &str, metric: &str, value: f64) -> EvalRow {
    EvalRow {
        step,
        benchmark: benchmark.into(),
        category: "all".into(),
        metric: metric.into(),
        value,
        n_tasks: 1,
        wall_time: 1.0,
    }
}

#[test]
fn benchmark_scores_drill_down_to_failing_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("runs.sqlite");
    let mut store = Store::open(&store_path).unwrap();
    let run = store
        .create_run("smollm2-eval", super::training::TINY)
        .unwrap();

    let domain: Arc<Tau2Domain> =
        Tau2Domain::load(DomainKind::Airline, data().join("tau2-bench/airline")).unwrap();
    let record = run_conversation(
        &domain,
        domain.task("7").unwrap(),
        0,
        &LookOnly,
        &AskOnce,
        None,
        &Tau2Options::default(),
    )
    .unwrap();
    assert_eq!(record.reward, Some(0.0), "{}", record.reason);
    let vita_tasks = load_tasks(&data().join("vitabench/delivery/tasks_en.json")).unwrap();
    let vita = envace::eval::vita::run_conversation(
        &vita_tasks[0],
        0,
        &OffersOnly,
        &StatesGoal,
        Some(&FirstRubricOnly),
        &Tau2Options::default(),
    );
    assert_eq!(vita.reward, Some(0.0), "{}", vita.reason);

    for (step, wrong) in [(4u64, true), (8, false)] {
        let (rows, accuracy) = bfcl_rows(step, wrong);
        let mut batch = Batch::new(run);
        batch.evals.push(EvalRow {
            step,
            benchmark: "bfcl_simple_python".into(),
            category: "all".into(),
            metric: "accuracy".into(),
            value: accuracy,
            n_tasks: rows.len() as u64,
            wall_time: 1.0,
        });
        batch.eval_tasks = rows;
        if step == 8 {
            batch.evals.push(EvalRow {
                step,
                benchmark: "tau2_airline".into(),
                category: "all".into(),
                metric: "pass^1".into(),
                value: 0.0,
                n_tasks: 1,
                wall_time: 1.0,
            });
            batch.eval_tasks.push(EvalTaskRow {
                step,
                benchmark: "tau2_airline".into(),
                task_id: "7".into(),
                trial: 0,
                score: record.reward,
                reason: record.reason.clone(),
                data: serde_json::to_value(&record).unwrap(),
            });
            batch
                .evals
                .push(eval_row(step, "tau2_airline@parallel:2", "pass^1", 1.0));
            batch
                .evals
                .push(eval_row(step, "vita_delivery", "pass@1", 0.0));
            batch
                .evals
                .push(eval_row(step, "bfcl_multi_turn_base", "accuracy", 0.0));
            batch.eval_tasks.push(bfcl_multi_row(step));
            batch.eval_tasks.push(EvalTaskRow {
                step,
                benchmark: "vita_delivery".into(),
                task_id: vita.task_id.clone(),
                trial: 0,
                score: vita.reward,
                reason: vita.reason.clone(),
                data: serde_json::to_value(&vita).unwrap(),
            });
        }
        store.write_evaluation(&batch).unwrap();
    }
    // A second run for the Compare tab.
    let other = store
        .create_run("smollm2-b", super::training::TINY)
        .unwrap();
    let mut batch = Batch::new(other);
    batch
        .evals
        .push(eval_row(2, "bfcl_simple_python", "accuracy", 0.5));
    batch
        .evals
        .push(eval_row(2, "vita_delivery", "pass@1", 0.25));
    store.write_evaluation(&batch).unwrap();
    drop(store);

    let config = dir.path().join("tiny.toml");
    std::fs::write(&config, super::training::TINY).unwrap();
    let studio = Studio::open(&config, &store_path);
    let s = studio.s();
    s.click("#tab-benchmarks").unwrap();
    let table = s
        .wait_for(
            "the score table",
            "const t = document.querySelector('#score-table'); return t && t.innerText",
            Duration::from_secs(20),
        )
        .unwrap();
    let table = table.as_str().unwrap().to_owned();
    for cell in [
        "BFCL",
        "τ²-bench",
        "VitaBench",
        "simple_python",
        "multi_turn_base",
        "airline",
        "airline@parallel:2",
        "delivery",
        "overall",
        "66.7%",
        "100.0%",
        "16.7%",
    ] {
        assert!(table.contains(cell), "{cell} in {table}");
    }
    let cells: Value = s
        .script(
            "return [...document.querySelectorAll('#score-table tr')].slice(2).map(r => [...r.cells].map(c => c.innerText))",
            json!([]),
        )
        .unwrap();
    // Rows: step, multi_turn_base, simple_python, BFCL mean, airline, airline@parallel:2, τ²
    // mean (plain columns only), delivery, VitaBench mean, overall (over the family means).
    assert_eq!(
        cells,
        json!([
            ["4", "–", "66.7%", "66.7%", "–", "–", "–", "–", "–", "66.7%"],
            [
                "8", "0.0%", "100.0%", "50.0%", "0.0%", "100.0%", "0.0%", "0.0%", "0.0%", "16.7%"
            ]
        ])
    );
    // The same scores over checkpoints: 5 columns, 3 family means and the overall, 12 points.
    s.wait_for(
        "the chart of scores over checkpoints",
        "const c = document.getElementById('chart-benchview'); return c && Number(c.dataset.points) === 12 && c.querySelector('canvas') !== null",
        Duration::from_secs(10),
    )
    .unwrap();
    let legend = s.text("#chart-benchview .u-legend").unwrap();
    assert!(
        legend.contains("VitaBench/delivery") && legend.contains("overall"),
        "{legend}"
    );
    studio.shot("studio-benchmarks", Some("#benchview-table"));
    studio.shot("studio-benchmarks-chart", Some("#chart-benchview"));

    // The 66.7% at step 4 opens its tasks: the wrong one, with the checker's reason.
    s.click("#score-table button[data-benchmark='bfcl_simple_python'][data-step='4']")
        .unwrap();
    let title = s
        .wait_for(
            "the task list",
            "const t = document.querySelector('#tasks-title'); return t && t.textContent",
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(title, "bfcl_simple_python at step 4: 2 of 3 right");
    let rows: Value = s
        .script(
            "return [...document.querySelectorAll('#task-table .task-row')].map(r => [...r.cells].map(c => c.innerText))",
            json!([]),
        )
        .unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1, "only the failing task: {rows:?}");
    assert_eq!(rows[0][0], "simple_python_1");
    assert!(
        rows[0][3].as_str().unwrap().starts_with("value_error:"),
        "{rows:?}"
    );
    s.click("#task-table .task-row[data-task='simple_python_1'] td")
        .unwrap();
    let calls = s
        .wait_for(
            "the calls side by side",
            "const m = document.querySelector('#task-detail .model-calls'); const e = document.querySelector('#task-detail .expected-calls'); return m && e && [m.textContent, e.textContent]",
            Duration::from_secs(10),
        )
        .unwrap();
    let (model, expected) = (calls[0].as_str().unwrap(), calls[1].as_str().unwrap());
    assert!(
        model.contains("math.factorial") && expected.contains("math.factorial"),
        "{model} / {expected}"
    );
    assert_ne!(model, expected);
    // Every task is listed when asked for.
    s.click("#only-failing").unwrap();
    let n: Value = s
        .script(
            "return document.querySelectorAll('#task-table .task-row').length",
            json!([]),
        )
        .unwrap();
    assert_eq!(n, 3);
    studio.shot("studio-benchmarks-bfcl-task", Some("#task-detail"));

    // The τ² score opens its conversation, with how it ended and the reward's components.
    s.click("#score-table button[data-benchmark='tau2_airline'][data-step='8']")
        .unwrap();
    s.wait_for(
        "the τ² task",
        "const r = document.querySelector(\"#task-table .task-row[data-task='7']\"); return r !== null",
        Duration::from_secs(10),
    )
    .unwrap();
    s.click("#task-table .task-row[data-task='7'] td").unwrap();
    let facts = s
        .wait_for(
            "the conversation's grade",
            "const f = document.querySelector('#task-detail .facts'); return f && f.innerText",
            Duration::from_secs(10),
        )
        .unwrap();
    let facts = facts.as_str().unwrap();
    assert!(facts.contains("user_stop"), "{facts}");
    assert!(
        facts.contains("differs from the gold actions' result"),
        "{facts}"
    );
    assert!(facts.contains("✗ update_reservation_flights"), "{facts}");
    let conversation: Value = s
        .script(
            "return [...document.querySelectorAll('#task-detail .msg .role')].map(r => r.textContent)",
            json!([]),
        )
        .unwrap();
    assert_eq!(
        conversation,
        json!([
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user"
        ])
    );
    studio.shot("studio-benchmarks-tau2-task", Some("#task-detail"));

    // The multi-turn score opens its task: the calls per turn beside the expected ones, what
    // each turn's calls were answered, and the checker's reason.
    s.click("#score-table button[data-benchmark='bfcl_multi_turn_base'][data-step='8']")
        .unwrap();
    s.wait_for(
        "the multi-turn task",
        "return document.querySelector(\"#task-table .task-row[data-task='multi_turn_base_0']\") !== null",
        Duration::from_secs(10),
    )
    .unwrap();
    let reason: Value = s
        .script(
            "return document.querySelector(\"#task-table .task-row[data-task='multi_turn_base_0']\").innerText",
            json!([]),
        )
        .unwrap();
    assert!(
        reason
            .as_str()
            .unwrap()
            .contains("multi_turn:instance_state_mismatch"),
        "{reason}"
    );
    s.click("#task-table .task-row[data-task='multi_turn_base_0'] td")
        .unwrap();
    let shown = s
        .wait_for(
            "the turns' calls and results",
            "const m = document.querySelector('#task-detail .model-calls'); const e = document.querySelector('#task-detail .expected-calls'); const f = document.querySelector('#task-detail .facts'); return m && e && f && [m.textContent, e.textContent, f.innerText]",
            Duration::from_secs(10),
        )
        .unwrap();
    let (model, expected, facts) = (
        shown[0].as_str().unwrap(),
        shown[1].as_str().unwrap(),
        shown[2].as_str().unwrap(),
    );
    assert!(
        !model.contains("mkdir") && expected.contains("mkdir(dir_name='temp')"),
        "{model} / {expected}"
    );
    assert!(
        facts.contains("turn 2 results") && facts.contains("No such file or directory"),
        "{facts}"
    );
    studio.shot("studio-benchmarks-bfcl-multi-turn", Some("#task-detail"));

    // The VitaBench score opens its conversation, with each rubric's verdict.
    s.click("#score-table button[data-benchmark='vita_delivery'][data-step='8']")
        .unwrap();
    let task = format!("#task-table .task-row[data-task='{}']", vita.task_id);
    s.wait_for(
        "the VitaBench task",
        &format!("return document.querySelector(\"{task}\") !== null"),
        Duration::from_secs(10),
    )
    .unwrap();
    s.click(&format!("{task} td")).unwrap();
    let facts = s
        .wait_for(
            "the rubric verdicts",
            "const f = document.querySelector('#task-detail .facts'); return f && f.innerText.includes('rubric') && f.innerText",
            Duration::from_secs(10),
        )
        .unwrap();
    let facts = facts.as_str().unwrap();
    assert!(facts.contains("✓ The rice noodle restaurant must support Dine-in available ([3] the store offers dine-in)"), "{facts}");
    assert!(facts.contains("✗ "), "{facts}");
    studio.shot("studio-benchmarks-vita-task", Some("#task-detail"));

    // Compare: both runs' tables side by side, each at its latest evaluated checkpoint.
    s.click("#tab-compare").unwrap();
    s.wait_for(
        "the run list",
        "return document.querySelectorAll('#compare-runs input.run-box').length === 2",
        Duration::from_secs(10),
    )
    .unwrap();
    for id in [run.0, other.0] {
        let box_ = format!("#compare-runs input.run-box[value='{id}']");
        let ticked: Value = s
            .script(
                &format!("return document.querySelector(\"{box_}\").checked"),
                json!([]),
            )
            .unwrap();
        if ticked != json!(true) {
            s.click(&box_).unwrap();
        }
    }
    s.click("#compare-button").unwrap();
    let rows = s
        .wait_for(
            "the compared benchmark tables",
            "const rows = [...document.querySelectorAll('#compare-bench-table tr')].slice(2); return rows.length === 2 && rows.map(r => [...r.cells].map(c => c.innerText))",
            Duration::from_secs(20),
        )
        .unwrap();
    assert_eq!(
        rows,
        json!([
            [
                format!("run {} · smollm2-eval", run.0),
                "8",
                "0.0%",
                "100.0%",
                "50.0%",
                "0.0%",
                "100.0%",
                "0.0%",
                "0.0%",
                "0.0%",
                "16.7%"
            ],
            [
                format!("run {} · smollm2-b", other.0),
                "2",
                "–",
                "50.0%",
                "50.0%",
                "–",
                "–",
                "–",
                "25.0%",
                "25.0%",
                "37.5%"
            ]
        ])
    );
    studio.shot("studio-compare-benchmarks", Some("#compare-bench-table"));
}
