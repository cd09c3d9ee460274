//! BFCL's multi-turn category `multi_turn_base`: its tasks (turns of user messages, the
//! involved classes' initial state, the functions of `multi_turn_func_doc/`), running them on a
//! model turn by turn with the calls executed against the native backends (`env::bfcl`) and the
//! results fed back, at most [`MAX_STEPS_PER_TURN`] model steps a turn, and BFCL's multi-turn
//! checker: after each turn with expected calls, every instance's public state must equal the
//! ground truth's and the ground truth's results must all appear among the model's so far.

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::pyvalue::py_eq;
use super::{CategoryScore, EntryVerdict, Message, Verdict, data_error, data_root, read_lines};
use crate::env::bfcl::{self as backends, Instances};
use crate::env::pycall;
use crate::error::Result;
use crate::openai::{ChatClient, ChatMsg, ChatRequest};

/// The multi-turn categories this build runs and scores.
pub const MULTI_CATEGORIES: [&str; 1] = ["multi_turn_base"];

/// Model steps a turn may take before BFCL forces the task to quit (and fails it).
pub const MAX_STEPS_PER_TURN: usize = 20;

/// One multi-turn task.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiEntry {
    pub id: String,
    /// Each turn's messages (a user message, usually one).
    pub turns: Vec<Vec<Message>>,
    /// `{Class: state}` the involved classes start from.
    pub initial_config: Value,
    pub involved_classes: Vec<String>,
    /// The functions offered: the involved classes' docs without the excluded ones.
    pub functions: Vec<Value>,
    /// The expected calls of each turn, written as Python (`cd(folder='docs')`).
    pub ground_truth: Vec<Vec<String>>,
}

#[derive(Deserialize)]
struct MultiQuestion {
    id: String,
    question: Vec<Vec<Message>>,
    #[serde(default)]
    initial_config: Value,
    involved_classes: Vec<String>,
    #[serde(default)]
    excluded_function: Vec<String>,
}

#[derive(Deserialize)]
struct MultiAnswer {
    id: String,
    ground_truth: Vec<Vec<String>>,
}

/// The tasks of a multi-turn `category` from the BFCL folder `dir`, with their functions from
/// `multi_turn_func_doc/`; ids must agree with `possible_answer/` line by line.
pub fn load_multi(dir: &Path, category: &str) -> Result<Vec<MultiEntry>> {
    if !MULTI_CATEGORIES.contains(&category) {
        return Err(data_error(
            "BFCL",
            format!(
                "multi-turn category {category:?} is not supported; the supported ones are {}",
                MULTI_CATEGORIES.join(", ")
            ),
        ));
    }
    let root = data_root(dir);
    let file = format!("BFCL_v4_{category}.json");
    let questions: Vec<MultiQuestion> = read_lines(&root.join(&file))?;
    let answer_path = root.join("possible_answer").join(&file);
    let answers: Vec<MultiAnswer> = read_lines(&answer_path)?;
    if answers.len() != questions.len() {
        return Err(data_error(
            answer_path.display().to_string(),
            format!(
                "{} answers for {} questions",
                answers.len(),
                questions.len()
            ),
        ));
    }
    let mut docs: std::collections::BTreeMap<&str, Vec<Value>> = Default::default();
    for (class, doc_file) in backends::CLASSES {
        let path = root.join("multi_turn_func_doc").join(doc_file);
        docs.insert(class, read_lines(&path)?);
    }
    let mut entries = Vec::with_capacity(questions.len());
    for (idx, (q, a)) in questions.into_iter().zip(answers).enumerate() {
        if q.id != a.id {
            return Err(data_error(
                format!("{}:{}", answer_path.display(), idx + 1),
                format!("answer id {:?} where the questions have {:?}", a.id, q.id),
            ));
        }
        if a.ground_truth.len() != q.question.len() {
            return Err(data_error(
                format!("{}:{}", answer_path.display(), idx + 1),
                format!(
                    "{}: {} turns of answers for {} turns of questions",
                    q.id,
                    a.ground_truth.len(),
                    q.question.len()
                ),
            ));
        }
        let mut functions = Vec::new();
        for class in &q.involved_classes {
            let Some(class_docs) = docs.get(class.as_str()) else {
                return Err(data_error(
                    format!("{}:{}", root.join(&file).display(), idx + 1),
                    format!(
                        "{}: involves the class {class:?}, which is not rebuilt here",
                        q.id
                    ),
                ));
            };
            functions.extend(
                class_docs
                    .iter()
                    .filter(|doc| {
                        let name = doc.get("name").and_then(Value::as_str).unwrap_or("");
                        !q.excluded_function.iter().any(|x| x == name)
                    })
                    .cloned(),
            );
        }
        entries.push(MultiEntry {
            id: q.id,
            turns: q.question,
            initial_config: q.initial_config,
            involved_classes: q.involved_classes,
            functions,
            ground_truth: a.ground_truth,
        });
    }
    Ok(entries)
}

/// One call as a model's output may give it: Python text, or BFCL's decoded `{name: {args}}`.
fn execute(instances: &mut Instances, call: &Value) -> Option<String> {
    match call {
        Value::String(text) => Some(instances.execute(text)),
        Value::Object(map) if map.len() == 1 => {
            let (name, args) = map.iter().next()?;
            Some(instances.execute_named(name, args.as_object()?))
        }
        _ => None,
    }
}

/// The calls of one step, when it is a non-empty list of calls (BFCL skips anything else: text
/// the model wrote, or an empty step).
fn step_calls(step: &Value) -> Option<&[Value]> {
    let calls = step.as_array()?;
    let usable = !calls.is_empty()
        && calls.iter().all(|c| {
            c.is_string()
                || c.as_object()
                    .is_some_and(|m| m.len() == 1 && m.values().all(Value::is_object))
        });
    usable.then_some(calls.as_slice())
}

/// Where two states first differ: the path from `name` down through objects (by key) and
/// lists (by index) to the first differing value, and each side's value there (`None` where
/// one side lacks the key).
fn first_difference<'a>(
    name: &str,
    mine: &'a Value,
    theirs: &'a Value,
) -> (String, Option<&'a Value>, Option<&'a Value>) {
    match (mine, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, want) in b {
                match a.get(key) {
                    None => return (format!("{name}.{key}"), None, Some(want)),
                    Some(got) if !py_eq(got, want) => {
                        return first_difference(&format!("{name}.{key}"), got, want);
                    }
                    Some(_) => {}
                }
            }
            if let Some((key, extra)) = a.iter().find(|(k, _)| !b.contains_key(*k)) {
                return (format!("{name}.{key}"), Some(extra), None);
            }
            (name.to_owned(), Some(mine), Some(theirs))
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            match a.iter().zip(b).position(|(x, y)| !py_eq(x, y)) {
                Some(i) => first_difference(&format!("{name}[{i}]"), &a[i], &b[i]),
                None => (name.to_owned(), Some(mine), Some(theirs)),
            }
        }
        _ => (name.to_owned(), Some(mine), Some(theirs)),
    }
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}

/// BFCL's multi-turn verdict for `result`: a list with one entry per turn, each a list of
/// steps, each a list of calls (Python text or `{name: {args}}`).
pub fn check_multi(entry: &MultiEntry, result: &Value) -> Verdict {
    let Some(turns) = result.as_array() else {
        return Verdict::fail(
            "multi_turn:inference_error",
            "the output is not a list of turns",
        );
    };
    if turns.len() != entry.ground_truth.len() {
        return Verdict::fail(
            "multi_turn:force_terminated",
            format!(
                "the model's output has {} turns where the task has {} (it was stopped after {MAX_STEPS_PER_TURN} steps in a turn, or the run ended early)",
                turns.len(),
                entry.ground_truth.len()
            ),
        );
    }
    let setup = |what: &str| {
        Instances::new(&entry.initial_config, &entry.involved_classes)
            .map_err(|e| Verdict::fail("multi_turn:unsupported", format!("{what} instances: {e}")))
    };
    let mut model = match setup("the model's") {
        Ok(i) => i,
        Err(v) => return v,
    };
    let mut truth = match setup("the ground truth's") {
        Ok(i) => i,
        Err(v) => return v,
    };
    let mut all_model_results: Vec<String> = Vec::new();
    for (t, (turn, expected)) in turns.iter().zip(&entry.ground_truth).enumerate() {
        let mut n_steps = 0;
        for step in turn.as_array().map(Vec::as_slice).unwrap_or_default() {
            let Some(calls) = step_calls(step) else {
                continue;
            };
            n_steps += 1;
            for call in calls {
                if let Some(text) = execute(&mut model, call) {
                    all_model_results.push(text);
                }
            }
        }
        let truth_results: Vec<String> = expected.iter().map(|c| truth.execute(c)).collect();
        if expected.is_empty() {
            continue;
        }
        if n_steps == 0 {
            return Verdict::fail(
                "multi_turn:empty_turn_model_response",
                format!(
                    "turn {t}: the model made no call where {} were expected",
                    expected.len()
                ),
            );
        }
        let model_state = model.state();
        for (class, want) in truth.state() {
            let got = model_state.get(class).cloned().unwrap_or_default();
            let differing: Vec<String> = want
                .iter()
                .filter(|(k, v)| !got.get(*k).is_some_and(|g| py_eq(g, v)))
                .map(|(k, v)| {
                    let mine = got.get(k).cloned().unwrap_or(Value::Null);
                    let (path, mine, theirs) = first_difference(k, &mine, v);
                    let show = |x: Option<&Value>| {
                        x.map_or("(absent)".to_owned(), |x| clip(&x.to_string(), 160))
                    };
                    format!("{path}: model {} vs expected {}", show(mine), show(theirs))
                })
                .collect();
            if !differing.is_empty() {
                return Verdict::fail(
                    "multi_turn:instance_state_mismatch",
                    format!(
                        "turn {t}: {class} differs from the ground truth's: {}",
                        differing.join("; ")
                    ),
                );
            }
        }
        let mut pool = all_model_results.clone();
        let mut missing = Vec::new();
        for want in &truth_results {
            match pool.iter().position(|got| got == want) {
                Some(at) => {
                    pool.remove(at);
                }
                None => missing.push(clip(want, 160)),
            }
        }
        if !missing.is_empty() {
            return Verdict::fail(
                "multi_turn:execution_response_mismatch",
                format!(
                    "turn {t}: the model's results so far lack {} of the ground truth's: {}",
                    missing.len(),
                    missing.join(" | ")
                ),
            );
        }
    }
    Verdict::ok()
}

/// The ground truth as a model's output: each turn one step of its calls.
pub fn gold_multi_output(entry: &MultiEntry) -> Value {
    Value::Array(
        entry
            .ground_truth
            .iter()
            .map(|turn| {
                if turn.is_empty() {
                    json!([])
                } else {
                    json!([turn])
                }
            })
            .collect(),
    )
}

/// Scores outputs by id (`{"id", "result": [[[call, …], …], …]}` a line); a missing output
/// is wrong and counted, an id not in the category is an error.
pub fn score_multi(
    entries: &[MultiEntry],
    category: &str,
    outputs: &std::collections::BTreeMap<String, Value>,
) -> Result<CategoryScore> {
    if let Some(stray) = outputs
        .keys()
        .find(|id| !entries.iter().any(|e| &e.id == *id))
    {
        return Err(data_error(
            "BFCL outputs",
            format!("entry {stray:?} is not a task of category {category:?}"),
        ));
    }
    let mut missing = 0;
    let verdicts = entries
        .iter()
        .map(|entry| {
            let verdict = match outputs.get(&entry.id) {
                Some(result) => check_multi(entry, result),
                None => {
                    missing += 1;
                    Verdict::fail("output:missing", "no output for this task")
                }
            };
            EntryVerdict {
                id: entry.id.clone(),
                valid: verdict.valid,
                reason: verdict.reason(),
            }
        })
        .collect();
    Ok(CategoryScore::of(category, verdicts, missing))
}

/// One multi-turn task as it ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MultiRecord {
    pub category: String,
    pub id: String,
    /// The whole conversation sent (the last request's messages and the last reply).
    pub messages: Value,
    /// Per turn, per step, the decoded calls (`{name: {args}}`) or the step's text.
    pub result: Value,
    /// Per turn, per step, the text each call was answered with.
    pub execution: Value,
    pub valid: bool,
    pub reason: String,
    /// The expected calls per turn, as Python.
    pub expected: Value,
    /// Model steps in all turns.
    pub steps: usize,
    /// Generated tokens the endpoint counted.
    pub completion_tokens: u64,
    pub secs: f64,
}

/// Runs `entries` through `client` (tools or, with `options.prompting`, Python lists in the
/// reply); `progress(done, total)` after each task.
pub fn run_multi(
    client: &ChatClient,
    entries: &[MultiEntry],
    category: &str,
    options: &super::run::RunOptions,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> (CategoryScore, Vec<MultiRecord>) {
    let records = crate::eval::run_concurrently(
        entries,
        options.concurrency,
        &|entry| run_multi_task(client, entry, category, options),
        progress,
    );
    let tasks = records
        .iter()
        .map(|r| (r.id.as_str(), r.valid, r.reason.as_str()));
    (CategoryScore::of_tasks(category, tasks), records)
}

/// The task's functions as tools (BFCL's types in JSON-schema terms).
pub fn multi_tools(entry: &MultiEntry) -> Vec<Value> {
    let as_entry = super::Entry {
        id: entry.id.clone(),
        turns: Vec::new(),
        functions: entry.functions.clone(),
        ground_truth: None,
    };
    super::run::tools(&as_entry, "multi_turn_base", super::NameStyle::AsDocumented)
}

fn chat_message(m: &Message) -> ChatMsg {
    match m.role.as_str() {
        "system" => ChatMsg::system(m.content.clone()),
        "assistant" => ChatMsg::assistant(m.content.clone()),
        _ => ChatMsg::user(m.content.clone()),
    }
}

fn run_multi_task(
    client: &ChatClient,
    entry: &MultiEntry,
    category: &str,
    options: &super::run::RunOptions,
) -> MultiRecord {
    let started = Instant::now();
    let mut record = MultiRecord {
        category: category.to_owned(),
        id: entry.id.clone(),
        messages: Value::Null,
        result: Value::Null,
        execution: Value::Null,
        valid: false,
        reason: String::new(),
        expected: json!(entry.ground_truth),
        steps: 0,
        completion_tokens: 0,
        secs: 0.0,
    };
    let mut live = match Instances::new(&entry.initial_config, &entry.involved_classes) {
        Ok(i) => i,
        Err(e) => {
            record.reason = format!("multi_turn:unsupported: {e}");
            return record;
        }
    };
    let tools = multi_tools(entry);
    let mut messages: Vec<ChatMsg> = Vec::new();
    if options.prompting {
        let as_entry = super::Entry {
            id: entry.id.clone(),
            turns: Vec::new(),
            functions: entry.functions.clone(),
            ground_truth: None,
        };
        messages.push(ChatMsg::system(super::run::prompting_system(&as_entry)));
    }
    let mut turns_out = Vec::new();
    let mut exec_out = Vec::new();
    let mut failure = None;
    'turns: for turn in &entry.turns {
        messages.extend(turn.iter().map(chat_message));
        let mut steps_out = Vec::new();
        let mut steps_exec = Vec::new();
        let mut n_steps = 0;
        loop {
            let mut request = ChatRequest::new(messages.clone());
            if !options.prompting {
                request.tools = tools.clone();
            }
            request.temperature = Some(0.0);
            request.max_tokens = Some(options.max_tokens);
            let reply = match client.complete(&request) {
                Ok(reply) => reply,
                Err(f) => {
                    failure = Some(format!("endpoint:failed: {f:?}"));
                    turns_out.push(Value::Array(steps_out));
                    exec_out.push(Value::Array(steps_exec));
                    break 'turns;
                }
            };
            record.completion_tokens += reply.completion_tokens;
            record.steps += 1;
            n_steps += 1;
            // The step's calls: tool calls, or in prompt mode a Python list in the text.
            let calls: Option<Vec<(String, Map<String, Value>)>> = if !reply.tool_calls.is_empty() {
                reply
                    .tool_calls
                    .iter()
                    .map(|c| match serde_json::from_str::<Value>(&c.arguments) {
                        Ok(Value::Object(args)) => Some((c.name.clone(), args)),
                        _ => None,
                    })
                    .collect()
            } else if options.prompting {
                pycall::parse_py_calls(&reply.content)
                    .ok()
                    .and_then(|calls| {
                        calls
                            .into_iter()
                            .map(|c| c.positional.is_empty().then_some((c.name, c.keyword)))
                            .collect()
                    })
            } else {
                None
            };
            let Some(calls) = calls.filter(|c| !c.is_empty()) else {
                // No call (or one that does not decode): the turn ends, as in BFCL.
                messages.push(ChatMsg::assistant(reply.content.clone()));
                steps_out.push(Value::String(reply.content));
                break;
            };
            let results: Vec<String> = calls
                .iter()
                .map(|(name, args)| live.execute_named(name, args))
                .collect();
            steps_out.push(Value::Array(
                calls
                    .iter()
                    .map(|(name, args)| json!({ name.clone(): args }))
                    .collect(),
            ));
            steps_exec.push(json!(results));
            if reply.tool_calls.is_empty() {
                messages.push(ChatMsg::assistant(reply.content.clone()));
                let shown: Vec<String> = calls
                    .iter()
                    .zip(&results)
                    .map(|((name, _), r)| format!("{name}: {r}"))
                    .collect();
                messages.push(ChatMsg::user(format!(
                    "Results of your calls:\n{}",
                    shown.join("\n")
                )));
            } else {
                let ids: Vec<String> = reply.tool_calls.iter().map(|c| c.id.clone()).collect();
                messages.push(ChatMsg::assistant_calls(
                    reply.content.clone(),
                    reply.tool_calls.clone(),
                ));
                for (id, result) in ids.iter().zip(&results) {
                    messages.push(ChatMsg::tool(id.clone(), result.clone()));
                }
            }
            if n_steps > MAX_STEPS_PER_TURN {
                // BFCL forces the task to quit; the missing turns fail it.
                turns_out.push(Value::Array(steps_out));
                exec_out.push(Value::Array(steps_exec));
                break 'turns;
            }
        }
        turns_out.push(Value::Array(steps_out));
        exec_out.push(Value::Array(steps_exec));
    }
    record.messages = Value::Array(messages.iter().map(ChatMsg::to_json).collect());
    record.result = Value::Array(turns_out);
    record.execution = Value::Array(exec_out);
    let verdict = match failure {
        Some(reason) => Verdict::fail("endpoint:failed", reason),
        None => check_multi(entry, &record.result),
    };
    record.valid = verdict.valid;
    record.reason = verdict.reason();
    record.secs = started.elapsed().as_secs_f64();
    record
}
