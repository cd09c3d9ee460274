//! BFCL-v4 (the Berkeley Function-Calling Leaderboard): its single-turn categories' questions
//! and possible answers read from the published JSON Lines files, decoded calls from any system
//! scored by BFCL's AST checker (`checker`) with each entry's verdict and reason, irrelevance
//! scored as "no call made", per-category accuracy with its standard error, and running the
//! tasks on a model behind a chat-completions endpoint (`run`).

pub mod checker;
pub mod literals;
pub mod multi;
pub mod pyvalue;
pub use crate::env::pycall;
pub mod run;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

pub use checker::{Language, NameStyle, Shape, Verdict};

pub(crate) fn data_error(source_name: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Data {
        source_name: source_name.into(),
        message: message.into(),
    }
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The categories whose answers the AST checker scores, and irrelevance.
pub const CATEGORIES: [&str; 7] = [
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
];

/// Categories in the data that this build cannot score yet, with the reason.
pub fn unsupported(category: &str) -> Option<&'static str> {
    (category.starts_with("multi_turn") && !multi::MULTI_CATEGORIES.contains(&category)).then_some(
        "of the multi-turn categories only multi_turn_base is rebuilt (the long-context, missing-function and missing-parameter variants are not)",
    )
}

/// Whether a category is one of the multi-turn ones ([`multi`]).
pub fn is_multi_turn(category: &str) -> bool {
    category.starts_with("multi_turn")
}

/// The language a category's arguments are written in.
pub fn language(category: &str) -> Language {
    match category {
        "simple_java" => Language::Java,
        "simple_javascript" => Language::JavaScript,
        _ => Language::Python,
    }
}

/// Whether a category is scored as "the model made no call".
pub fn is_irrelevance(category: &str) -> bool {
    category.contains("irrelevance")
}

/// One chat message of a question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// One task: its question turns, the functions offered, and (except for irrelevance) the
/// possible answers `[{name: {param: [acceptable values]}}]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: String,
    pub turns: Vec<Vec<Message>>,
    pub functions: Vec<Value>,
    pub ground_truth: Option<Vec<Value>>,
}

#[derive(Deserialize)]
struct QuestionLine {
    id: String,
    question: Vec<Vec<Message>>,
    #[serde(default)]
    function: Vec<Value>,
}

#[derive(Deserialize)]
struct AnswerLine {
    id: String,
    ground_truth: Vec<Value>,
}

/// One entry from a line of a question file and, except for irrelevance, the matching line of
/// its `possible_answer/` file, as [`load`] reads them (`source_name` names them in errors).
pub fn parse_entry_lines(question: &str, answer: Option<&str>, source_name: &str) -> Result<Entry> {
    let q: QuestionLine = serde_json::from_str(question)
        .map_err(|e| data_error(source_name, format!("not a BFCL record: {e}")))?;
    let ground_truth = match answer {
        Some(answer) => {
            let a: AnswerLine = serde_json::from_str(answer)
                .map_err(|e| data_error(source_name, format!("not a BFCL answer record: {e}")))?;
            if a.id != q.id {
                return Err(data_error(
                    source_name,
                    format!("answer id {:?} where the question has {:?}", a.id, q.id),
                ));
            }
            Some(a.ground_truth)
        }
        None => None,
    };
    Ok(Entry {
        id: q.id,
        turns: q.question,
        functions: q.function,
        ground_truth,
    })
}

/// The BFCL folder under `dir`: `dir/bfcl` when it exists, else `dir` itself.
pub fn data_root(dir: &Path) -> PathBuf {
    let nested = dir.join("bfcl");
    if nested.is_dir() {
        nested
    } else {
        dir.to_path_buf()
    }
}

pub(crate) fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>> {
    let text = read_text(path)?;
    let mut out = Vec::new();
    for (idx, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let item = serde_json::from_str(line).map_err(|e| {
            data_error(
                format!("{}:{}", path.display(), idx + 1),
                format!("not a BFCL record: {e}"),
            )
        })?;
        out.push(item);
    }
    Ok(out)
}

/// The entries of `category` from the BFCL folder `dir` (or the folder holding `bfcl/`):
/// `BFCL_v4_<category>.json` and, except for irrelevance, `possible_answer/` beside it, which
/// must list the same ids in the same order.
pub fn load(dir: &Path, category: &str) -> Result<Vec<Entry>> {
    if let Some(why) = unsupported(category) {
        return Err(data_error(
            "BFCL",
            format!("category {category:?} is not supported: {why}"),
        ));
    }
    if is_multi_turn(category) {
        return Err(data_error(
            "BFCL",
            format!("category {category:?} is multi-turn: its tasks are read by multi::load_multi"),
        ));
    }
    if !CATEGORIES.contains(&category) {
        return Err(data_error(
            "BFCL",
            format!(
                "unknown category {category:?}; the categories are {}",
                CATEGORIES.join(", ")
            ),
        ));
    }
    let root = data_root(dir);
    let file = format!("BFCL_v4_{category}.json");
    let questions: Vec<QuestionLine> = read_lines(&root.join(&file))?;
    let answers: Option<Vec<AnswerLine>> = if is_irrelevance(category) {
        None
    } else {
        Some(read_lines(&root.join("possible_answer").join(&file))?)
    };
    if let Some(answers) = &answers {
        let answer_file = root.join("possible_answer").join(&file);
        if answers.len() != questions.len() {
            return Err(data_error(
                answer_file.display().to_string(),
                format!(
                    "{} answers for {} questions in {}",
                    answers.len(),
                    questions.len(),
                    root.join(&file).display()
                ),
            ));
        }
        for (idx, (q, a)) in questions.iter().zip(answers).enumerate() {
            if q.id != a.id {
                return Err(data_error(
                    format!("{}:{}", answer_file.display(), idx + 1),
                    format!("answer id {:?} where the questions have {:?}", a.id, q.id),
                ));
            }
        }
    }
    let mut answers = answers.map(Vec::into_iter);
    Ok(questions
        .into_iter()
        .map(|q| Entry {
            id: q.id,
            turns: q.question,
            functions: q.function,
            ground_truth: answers
                .as_mut()
                .and_then(Iterator::next)
                .map(|a| a.ground_truth),
        })
        .collect())
}

/// Decoded calls from some system, one JSON object a line: `{"id": …, "result": [{name: {param:
/// value}}, …]}`; `result` may also be a string (text that was not decoded into calls).
pub fn read_outputs(path: &Path) -> Result<BTreeMap<String, Value>> {
    let text = read_text(path)?;
    let mut out = BTreeMap::new();
    for (idx, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{}:{}", path.display(), idx + 1);
        let value: Value = serde_json::from_str(line)
            .map_err(|e| data_error(at.clone(), format!("not a JSON object: {e}")))?;
        let Some(id) = value.get("id").and_then(Value::as_str) else {
            return Err(data_error(at, "no \"id\" (a string)"));
        };
        let Some(result) = value.get("result") else {
            return Err(data_error(at, format!("no \"result\" for {id:?}")));
        };
        if out.insert(id.to_owned(), result.clone()).is_some() {
            return Err(data_error(at, format!("{id:?} appears twice")));
        }
    }
    Ok(out)
}

/// Whether `result` is a list of calls in BFCL's decoded form (one-key objects whose value is an
/// object of arguments).
pub fn is_call_list(result: &Value) -> bool {
    result.as_array().is_some_and(|calls| {
        calls.iter().all(|call| {
            call.as_object()
                .is_some_and(|m| m.len() == 1 && m.values().all(Value::is_object))
        })
    })
}

/// One entry's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntryVerdict {
    pub id: String,
    pub valid: bool,
    /// `error_type: message`, empty when valid.
    pub reason: String,
}

/// A category's verdicts and accuracy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CategoryScore {
    pub category: String,
    pub verdicts: Vec<EntryVerdict>,
    pub correct: usize,
    pub total: usize,
    pub accuracy: f64,
    /// Standard error of the accuracy over entries.
    pub accuracy_se: f64,
    /// Entries the outputs had nothing for (scored as wrong).
    pub missing: usize,
}

impl CategoryScore {
    /// The score of tasks given as (id, right, reason), none missing.
    pub fn of_tasks<'a>(
        category: &str,
        tasks: impl Iterator<Item = (&'a str, bool, &'a str)>,
    ) -> CategoryScore {
        let verdicts = tasks
            .map(|(id, valid, reason)| EntryVerdict {
                id: id.to_owned(),
                valid,
                reason: reason.to_owned(),
            })
            .collect();
        CategoryScore::of(category, verdicts, 0)
    }

    /// The accuracy of `verdicts` and its standard error over tasks.
    pub fn of(category: &str, verdicts: Vec<EntryVerdict>, missing: usize) -> CategoryScore {
        let total = verdicts.len();
        let correct = verdicts.iter().filter(|v| v.valid).count();
        let accuracy = if total == 0 {
            0.0
        } else {
            correct as f64 / total as f64
        };
        let accuracy_se = if total == 0 {
            0.0
        } else {
            (accuracy * (1.0 - accuracy) / total as f64).sqrt()
        };
        CategoryScore {
            category: category.to_owned(),
            verdicts,
            correct,
            total,
            accuracy,
            accuracy_se,
            missing,
        }
    }
}

/// Scores one entry's decoded `result`.
pub fn score_entry(entry: &Entry, category: &str, result: &Value, names: NameStyle) -> Verdict {
    if is_irrelevance(category) {
        // BFCL: right when nothing decodes as a call.
        return match result.as_array() {
            Some(calls) if is_call_list(result) && !calls.is_empty() => Verdict::fail(
                "irrelevance:function_called",
                format!("a function was called where none of the offered ones fits: {result}"),
            ),
            _ => Verdict::ok(),
        };
    }
    if !is_call_list(result) {
        return Verdict::fail(
            "ast_decoder:decoder_failed",
            format!(
                "the output is not a list of calls: {}",
                truncate(&result.to_string(), 200)
            ),
        );
    }
    let calls = result.as_array().map(Vec::as_slice).unwrap_or_default();
    let answers = entry.ground_truth.as_deref().unwrap_or_default();
    checker::check(
        &entry.functions,
        calls,
        answers,
        language(category),
        Shape::of(category),
        names,
    )
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}…")
}

/// Scores every entry of `category` against `outputs` (by id). An output whose id is not in the
/// category is an error naming it; an entry without an output is scored wrong and counted.
pub fn score(
    entries: &[Entry],
    category: &str,
    outputs: &BTreeMap<String, Value>,
    names: NameStyle,
) -> Result<CategoryScore> {
    let ids: BTreeSet<&str> = entries.iter().map(|e| e.id.as_str()).collect();
    if let Some(stray) = outputs.keys().find(|id| !ids.contains(id.as_str())) {
        return Err(data_error(
            "BFCL outputs",
            format!("entry {stray:?} is not a task of category {category:?}"),
        ));
    }
    let mut verdicts = Vec::with_capacity(entries.len());
    let mut missing = 0;
    for entry in entries {
        let verdict = match outputs.get(&entry.id) {
            Some(result) => score_entry(entry, category, result, names),
            None => {
                missing += 1;
                Verdict::fail("output:missing", "no output for this task")
            }
        };
        verdicts.push(EntryVerdict {
            id: entry.id.clone(),
            valid: verdict.valid,
            reason: verdict.reason(),
        });
    }
    Ok(CategoryScore::of(category, verdicts, missing))
}

/// BFCL's non-live AST summary over the categories scored: the three simple languages averaged
/// into one "simple" figure, then simple, multiple, parallel and parallel_multiple averaged,
/// each unweighted; None when none of them was scored. (Irrelevance is reported on its own.)
pub fn ast_summary(accuracy: &BTreeMap<String, f64>) -> Option<f64> {
    let mean = |xs: &[f64]| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
    let simple: Vec<f64> = ["simple_python", "simple_java", "simple_javascript"]
        .iter()
        .filter_map(|c| accuracy.get(*c).copied())
        .collect();
    let mut parts: Vec<f64> = mean(&simple).into_iter().collect();
    parts.extend(
        ["multiple", "parallel", "parallel_multiple"]
            .iter()
            .filter_map(|c| accuracy.get(*c).copied()),
    );
    mean(&parts)
}

/// BFCL v4's overall weights of its score groups (`eval_runner_helper.py`: non-live 10, live 10,
/// irrelevance 10, multi-turn 30, agentic 40), for the groups this build runs.
pub const GROUP_WEIGHTS: [(&str, f64); 3] = [
    ("non-live AST", 10.0),
    ("irrelevance", 10.0),
    ("multi-turn", 30.0),
];

/// BFCL's overall score over the groups that were run, weighted as BFCL weighs them and
/// normalised over those groups: the non-live AST summary ([`ast_summary`]), irrelevance, and
/// the mean of the multi-turn categories run; with each group's accuracy. None when fewer than
/// two groups were run (a single group is its own summary). BFCL's own overall also counts the
/// live and agentic groups, which are not rebuilt here.
pub fn weighted_summary(
    accuracy: &BTreeMap<String, f64>,
) -> Option<(f64, Vec<(&'static str, f64)>)> {
    let multi: Vec<f64> = accuracy
        .iter()
        .filter(|(c, _)| is_multi_turn(c))
        .map(|(_, a)| *a)
        .collect();
    let groups = [
        ast_summary(accuracy),
        accuracy.get("irrelevance").copied(),
        (!multi.is_empty()).then(|| multi.iter().sum::<f64>() / multi.len() as f64),
    ];
    let run: Vec<(&'static str, f64, f64)> = GROUP_WEIGHTS
        .iter()
        .zip(groups)
        .filter_map(|((name, weight), acc)| acc.map(|a| (*name, *weight, a)))
        .collect();
    if run.len() < 2 {
        return None;
    }
    let total: f64 = run.iter().map(|(_, w, _)| w).sum();
    let value = run.iter().map(|(_, w, a)| w * a).sum::<f64>() / total;
    Some((value, run.into_iter().map(|(n, _, a)| (n, a)).collect()))
}

/// The ground truth of `entry` written as a model's decoded calls: the first acceptable value
/// of each parameter (optional ones left out where that comes first), Java and JavaScript
/// arguments as source text.
pub fn gold_output(entry: &Entry, category: &str) -> Option<Value> {
    let language = language(category);
    let calls = entry.ground_truth.as_ref()?;
    let mut out = Vec::new();
    for call in calls {
        let (name, params) = call.as_object()?.iter().next()?;
        let doc = entry
            .functions
            .iter()
            .find(|f| f.get("name").and_then(Value::as_str) == Some(name))?;
        let required: Vec<&str> = doc
            .pointer("/parameters/required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut args = Map::new();
        for (param, options) in params.as_object()? {
            // A required parameter is written even where the answer file lists "" first.
            let value = if required.contains(&param.as_str()) {
                options
                    .as_array()?
                    .iter()
                    .find(|o| o.as_str() != Some(""))
                    .map(resolve)
            } else {
                first_choice(options)
            };
            let Some(value) = value else {
                continue;
            };
            let detail = doc
                .get("parameters")
                .and_then(|p| p.get("properties"))
                .and_then(|p| p.get(param));
            let Some(detail) = detail else {
                // An answer may name a parameter the function does not document
                // (parallel_multiple_26): left out when it may be, else there is no way to write it.
                if options
                    .as_array()
                    .is_some_and(|o| o.iter().any(|v| v.as_str() == Some("")))
                {
                    continue;
                }
                return None;
            };
            let ty = detail.get("type").and_then(Value::as_str).unwrap_or("any");
            let nested = detail.pointer("/items/type").and_then(Value::as_str);
            let value = match language {
                Language::Python => value,
                Language::Java => Value::String(literals::java_source(&value, ty, nested)?),
                Language::JavaScript => Value::String(literals::js_source(&value, ty)?),
            };
            args.insert(param.clone(), value);
        }
        let mut call = Map::new();
        call.insert(name.clone(), Value::Object(args));
        out.push(Value::Object(call));
    }
    Some(Value::Array(out))
}

/// The first acceptable value of a parameter, with dicts (and lists of dicts) of acceptable
/// values resolved the same way; None when the first choice is to leave it out.
fn first_choice(options: &Value) -> Option<Value> {
    // A bare value (simple_java_64 has one inside a dict) is the one acceptable value.
    let Some(options) = options.as_array() else {
        return Some(resolve(options));
    };
    let first = options.first()?;
    if first.as_str() == Some("") {
        return None;
    }
    Some(resolve(first))
}

fn resolve(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter_map(|(k, options)| first_choice(options).map(|v| (k.clone(), v)))
                .collect(),
        ),
        Value::Array(items) if items.iter().all(Value::is_object) && !items.is_empty() => {
            Value::Array(items.iter().map(resolve).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared_bfcl() -> Option<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/benchmarks/bfcl");
        dir.is_dir().then_some(dir)
    }

    #[test]
    fn every_categorys_ground_truth_fed_back_scores_every_task() {
        let Some(dir) = shared_bfcl() else {
            panic!("the BFCL data is missing: ../shared/benchmarks/bfcl beside the checkout");
        };
        for category in CATEGORIES {
            let entries = load(&dir, category).unwrap();
            assert!(!entries.is_empty(), "{category}");
            let outputs: BTreeMap<String, Value> = entries
                .iter()
                .map(|e| {
                    let result = if is_irrelevance(category) {
                        Value::Array(Vec::new())
                    } else {
                        gold_output(e, category).unwrap_or_else(|| {
                            panic!("{category} {}: cannot write its ground truth", e.id)
                        })
                    };
                    (e.id.clone(), result)
                })
                .collect();
            let scored = score(&entries, category, &outputs, NameStyle::AsDocumented).unwrap();
            let failed: Vec<String> = scored
                .verdicts
                .iter()
                .filter(|v| !v.valid)
                .map(|v| format!("{} {}", v.id, v.reason))
                .collect();
            assert!(
                failed.is_empty(),
                "{category}: {} of {} fail:\n{}",
                failed.len(),
                scored.total,
                failed.join("\n")
            );
            assert_eq!(scored.accuracy, 1.0);
        }
    }

    /// Prompt mode's decoder on real data: each Python category's ground truth written as a
    /// Python list of calls (values by Python's `repr`), read back by `pycall`, scores 100%.
    #[test]
    fn ground_truth_written_as_python_reads_back_and_scores_every_task() {
        let Some(dir) = shared_bfcl() else {
            panic!("the BFCL data is missing: ../shared/benchmarks/bfcl beside the checkout");
        };
        for category in ["simple_python", "multiple", "parallel", "parallel_multiple"] {
            let entries = load(&dir, category).unwrap();
            let mut outputs = BTreeMap::new();
            for entry in &entries {
                let gold = gold_output(entry, category).unwrap();
                let calls: Vec<String> = gold
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|call| {
                        let (name, args) = call.as_object().unwrap().iter().next().unwrap();
                        let args: Vec<String> = args
                            .as_object()
                            .unwrap()
                            .iter()
                            .map(|(k, v)| format!("{k}={}", pyvalue::py_repr(v)))
                            .collect();
                        format!("{name}({})", args.join(", "))
                    })
                    .collect();
                let text = format!("[{}]", calls.join(", "));
                let read = pycall::parse_calls(&text)
                    .unwrap_or_else(|e| panic!("{category} {}: {e}\n{text}", entry.id));
                outputs.insert(entry.id.clone(), read);
            }
            let scored = score(&entries, category, &outputs, NameStyle::AsDocumented).unwrap();
            let failed: Vec<String> = scored
                .verdicts
                .iter()
                .filter(|v| !v.valid)
                .map(|v| format!("{} {}", v.id, v.reason))
                .collect();
            assert!(failed.is_empty(), "{category}:\n{}", failed.join("\n"));
        }
    }

    #[test]
    fn perturbed_ground_truth_fails_with_the_perturbations_reason() {
        let Some(dir) = shared_bfcl() else {
            panic!("the BFCL data is missing: ../shared/benchmarks/bfcl beside the checkout");
        };
        let mut applied: BTreeMap<&str, usize> = BTreeMap::new();
        for category in ["simple_python", "multiple"] {
            for entry in load(&dir, category).unwrap() {
                let gold = gold_output(&entry, category).unwrap();
                let (name, args) = gold[0].as_object().unwrap().iter().next().unwrap();
                let args = args.as_object().unwrap().clone();
                let doc = entry
                    .functions
                    .iter()
                    .find(|f| f["name"].as_str() == Some(name))
                    .unwrap();
                let answers = entry.ground_truth.as_ref().unwrap()[0][name].clone();
                let declared = |p: &str| {
                    doc["parameters"]["properties"][p]["type"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned()
                };
                let mut cases: Vec<(Map<String, Value>, &str)> = Vec::new();
                if let Some(first) = doc["parameters"]["required"]
                    .as_array()
                    .and_then(|r| r.first())
                {
                    let mut a = args.clone();
                    a.remove(first.as_str().unwrap());
                    cases.push((a, "simple_function_checker:missing_required"));
                }
                let mut a = args.clone();
                a.insert("zz_not_a_parameter".into(), Value::from(1));
                cases.push((a, "simple_function_checker:unexpected_param"));
                for (param, value) in &args {
                    let accepted = answers[param].as_array().cloned().unwrap_or_default();
                    let typed_answers = accepted
                        .iter()
                        .all(|v| !v.is_string() || v.as_str() == Some(""));
                    match (declared(param).as_str(), value) {
                        ("integer", Value::Number(_)) if typed_answers => {
                            let mut a = args.clone();
                            a.insert(param.clone(), Value::from("not a number"));
                            cases.push((a, "type_error:simple"));
                        }
                        ("string", Value::String(_)) => {
                            let mut a = args.clone();
                            a.insert(param.clone(), Value::from("zz certainly wrong zz"));
                            cases.push((a, "value_error:string"));
                        }
                        ("array", Value::Array(items))
                            if items.len() >= 2 && !items.iter().any(Value::is_object) =>
                        {
                            let reversed: Vec<Value> = items.iter().rev().cloned().collect();
                            let standardized = |list: &[Value]| {
                                Value::Array(
                                    list.iter()
                                        .map(|v| match v {
                                            Value::String(s) => {
                                                Value::String(pyvalue::standardize(s))
                                            }
                                            o => o.clone(),
                                        })
                                        .collect(),
                                )
                            };
                            let also_right = accepted.iter().any(|c| {
                                c.as_array().is_some_and(|c| {
                                    pyvalue::py_eq(&standardized(c), &standardized(&reversed))
                                })
                            });
                            if !also_right {
                                let mut a = args.clone();
                                a.insert(param.clone(), Value::Array(reversed));
                                cases.push((a, "value_error:list/tuple"));
                            }
                        }
                        _ => {}
                    }
                }
                for (args, expected) in cases {
                    let result = serde_json::json!([{ name.clone(): args }]);
                    let verdict = score_entry(&entry, category, &result, NameStyle::AsDocumented);
                    assert!(!verdict.valid, "{}: {result} passed", entry.id);
                    assert_eq!(
                        verdict.error_type, expected,
                        "{}: {result}: {:?}",
                        entry.id, verdict.errors
                    );
                    *applied.entry(expected).or_default() += 1;
                }
            }
        }
        // Each perturbation was tried on many tasks.
        for (kind, at_least) in [
            ("simple_function_checker:missing_required", 500),
            ("simple_function_checker:unexpected_param", 600),
            ("type_error:simple", 200),
            ("value_error:string", 200),
            ("value_error:list/tuple", 20),
        ] {
            let n = applied.get(kind).copied().unwrap_or(0);
            assert!(n >= at_least, "{kind}: {n} tasks ({applied:?})");
        }
    }

    #[test]
    fn bfcl_weighs_the_groups_run() {
        let acc = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
        };
        // One group alone has no weighted summary.
        assert!(weighted_summary(&acc(&[("simple_python", 0.5)])).is_none());
        // Non-live 10 and multi-turn 30: (10 · 0.5 + 30 · 0.1) / 40.
        let (value, groups) =
            weighted_summary(&acc(&[("simple_python", 0.5), ("multi_turn_base", 0.1)])).unwrap();
        assert!((value - 0.2).abs() < 1e-12, "{value}");
        assert_eq!(groups, vec![("non-live AST", 0.5), ("multi-turn", 0.1)]);
        let (value, _) = weighted_summary(&acc(&[
            ("simple_python", 1.0),
            ("irrelevance", 0.0),
            ("multi_turn_base", 0.5),
        ]))
        .unwrap();
        assert!((value - 25.0 / 50.0).abs() < 1e-12, "{value}");
    }

    #[test]
    fn bad_data_and_outputs_are_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("possible_answer")).unwrap();
        std::fs::write(
            dir.path().join("BFCL_v4_simple_python.json"),
            "{\"id\": \"simple_python_0\", \"question\": [[]], \"function\": []}\nnot json\n",
        )
        .unwrap();
        std::fs::write(
            dir.path()
                .join("possible_answer/BFCL_v4_simple_python.json"),
            "",
        )
        .unwrap();
        let err = format!("{:#}", load(dir.path(), "simple_python").unwrap_err());
        assert!(err.contains("BFCL_v4_simple_python.json:2"), "{err}");
        let err = load(dir.path(), "multi_turn_long_context")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not supported"), "{err}");
        let err = load(dir.path(), "multi_turn_base").unwrap_err().to_string();
        assert!(err.contains("multi-turn"), "{err}");
        let err = load(dir.path(), "simple_cobol").unwrap_err().to_string();
        assert!(err.contains("unknown category"), "{err}");

        let outputs = dir.path().join("out.jsonl");
        std::fs::write(
            &outputs,
            "{\"id\": \"a\", \"result\": []}\n{\"result\": []}\n",
        )
        .unwrap();
        let err = read_outputs(&outputs).unwrap_err().to_string();
        assert!(err.ends_with("out.jsonl:2: no \"id\" (a string)"), "{err}");
    }

    #[test]
    fn irrelevance_is_right_when_no_call_is_made_and_undecoded_text_fails_ast_categories() {
        let entry = Entry {
            id: "irrelevance_0".into(),
            turns: vec![],
            functions: vec![],
            ground_truth: None,
        };
        assert!(
            score_entry(
                &entry,
                "irrelevance",
                &serde_json::json!([]),
                NameStyle::AsDocumented
            )
            .valid
        );
        assert!(
            score_entry(
                &entry,
                "irrelevance",
                &serde_json::json!("I cannot help"),
                NameStyle::AsDocumented
            )
            .valid
        );
        let called = score_entry(
            &entry,
            "irrelevance",
            &serde_json::json!([{"f": {}}]),
            NameStyle::AsDocumented,
        );
        assert_eq!(called.error_type, "irrelevance:function_called");
        let text = score_entry(
            &entry,
            "simple_python",
            &serde_json::json!("f(x=1)"),
            NameStyle::AsDocumented,
        );
        assert_eq!(text.error_type, "ast_decoder:decoder_failed");
    }

    #[test]
    fn the_summary_averages_the_simple_languages_first() {
        let acc: BTreeMap<String, f64> = [
            ("simple_python", 0.9),
            ("simple_java", 0.6),
            ("simple_javascript", 0.3),
            ("multiple", 0.8),
            ("irrelevance", 0.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert!((ast_summary(&acc).unwrap() - 0.7).abs() < 1e-12);
        assert_eq!(ast_summary(&BTreeMap::new()), None);
    }
}
