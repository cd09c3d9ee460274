//! FinMCP-style tool metrics for any dataset of conversations in OpenAI message format: which
//! tools a model calls against which the reference conversation calls, as tool-name precision,
//! recall and F1 (macro over samples and micro over calls), and exact ordered match, overall
//! and grouped by scenario and by difficulty.
//!
//! A sample is one JSON object (a line of a JSON Lines file, or an item of a JSON array) with
//! `messages` (OpenAI chat messages; the assistant turns are the reference), optional `tools`
//! (OpenAI function schemas), optional `id`, and optional `scenario` and `difficulty`, at the top
//! level or inside `metadata`. A model is evaluated turn by turn with the reference history
//! (teacher forcing): for every assistant turn it is given the messages before it and the tools,
//! and the names of the tools it calls are compared with the turn's own (an assistant turn that
//! only speaks expects no call). The sample's predicted and reference name lists are the turns'
//! lists joined in order.
//!
//! Per sample, with the multiset intersection `∩`: precision `|pred ∩ gold| / |pred|`, recall
//! `|pred ∩ gold| / |gold|` (each 1 when its denominator is empty), F1 their harmonic mean (0
//! when both are 0), and exact match when the two name sequences are equal. Macro averages the
//! samples' figures; micro pools the counts over the samples first.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::chat::Role;
use crate::error::{Error, Result};
use crate::openai::{ChatClient, ChatMsg, ChatRequest};

/// One sample of a tool-call dataset.
#[derive(Debug, Clone)]
pub struct ToolSample {
    pub id: String,
    /// The sample's scenario (`unspecified` when the data gives none).
    pub scenario: String,
    /// The sample's difficulty (`unspecified` when the data gives none).
    pub difficulty: String,
    pub messages: Vec<ChatMsg>,
    /// OpenAI function schemas offered to the model.
    pub tools: Vec<Value>,
}

/// What a dataset sample is missing, as a data error.
fn data_error(path: &Path, message: String) -> Error {
    Error::ToolData {
        path: path.to_path_buf(),
        message,
    }
}

/// The samples of a dataset file: JSON Lines, or one JSON array. An error names the file, the
/// sample (line or index) and the field.
pub fn load_samples(path: &Path) -> Result<Vec<ToolSample>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let items: Vec<(String, Value)> = if text.trim_start().starts_with('[') {
        let values: Vec<Value> = serde_json::from_str(&text)
            .map_err(|e| data_error(path, format!("not a JSON array of samples: {e}")))?;
        values
            .into_iter()
            .enumerate()
            .map(|(i, v)| (format!("sample {i}"), v))
            .collect()
    } else {
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(line)
                .map_err(|e| data_error(path, format!("line {}: not JSON: {e}", i + 1)))?;
            out.push((format!("line {}", i + 1), value));
        }
        out
    };
    let mut samples = Vec::with_capacity(items.len());
    for (idx, (at, value)) in items.into_iter().enumerate() {
        if !value.is_object() {
            return Err(data_error(
                path,
                format!("{at}: a sample must be an object"),
            ));
        }
        let meta = |key: &str| -> String {
            let found = value
                .get(key)
                .or_else(|| value.get("metadata").and_then(|m| m.get(key)));
            match found {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => "unspecified".to_owned(),
            }
        };
        let id = match value.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => idx.to_string(),
        };
        let messages = value
            .get("messages")
            .ok_or_else(|| data_error(path, format!("{at} (id {id}): `messages` is required")))?;
        let messages = crate::serve::openai_messages(messages)
            .map_err(|why| data_error(path, format!("{at} (id {id}): {why}")))?;
        if !messages.iter().any(|m| m.role == Role::Assistant) {
            return Err(data_error(
                path,
                format!("{at} (id {id}): no assistant message to compare with"),
            ));
        }
        let tools = match value.get("tools") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(tools)) => tools.clone(),
            Some(_) => {
                return Err(data_error(
                    path,
                    format!("{at} (id {id}): `tools` must be a list of function schemas"),
                ));
            }
        };
        samples.push(ToolSample {
            id,
            scenario: meta("scenario"),
            difficulty: meta("difficulty"),
            messages,
            tools,
        });
    }
    Ok(samples)
}

impl ToolSample {
    /// Indices of the reference's assistant turns.
    pub fn turns(&self) -> Vec<usize> {
        self.messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::Assistant)
            .map(|(i, _)| i)
            .collect()
    }

    /// The tool names the reference calls, in order.
    pub fn gold_names(&self) -> Vec<String> {
        self.messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .flat_map(|m| m.tool_calls.iter().map(|c| c.name.clone()))
            .collect()
    }
}

/// One sample's comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SampleScore {
    pub id: String,
    pub scenario: String,
    pub difficulty: String,
    pub predicted: Vec<String>,
    pub gold: Vec<String>,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    pub exact: bool,
    /// Why the prediction is missing, when the model could not answer (scored as no call).
    pub failure: Option<String>,
}

/// Size of the multiset intersection of two name lists.
fn overlap(predicted: &[String], gold: &[String]) -> usize {
    let mut left: BTreeMap<&str, usize> = BTreeMap::new();
    for name in gold {
        *left.entry(name).or_default() += 1;
    }
    let mut hits = 0;
    for name in predicted {
        if let Some(n) = left.get_mut(name.as_str())
            && *n > 0
        {
            *n -= 1;
            hits += 1;
        }
    }
    hits
}

fn ratio(hits: usize, of: usize) -> f64 {
    if of == 0 {
        1.0
    } else {
        hits as f64 / of as f64
    }
}

fn harmonic(p: f64, r: f64) -> f64 {
    if p + r == 0.0 {
        0.0
    } else {
        2.0 * p * r / (p + r)
    }
}

impl SampleScore {
    /// The comparison of `predicted` with `gold` for `sample`.
    pub fn of(sample: &ToolSample, predicted: Vec<String>, failure: Option<String>) -> Self {
        let gold = sample.gold_names();
        let hits = overlap(&predicted, &gold);
        let precision = ratio(hits, predicted.len());
        let recall = ratio(hits, gold.len());
        SampleScore {
            id: sample.id.clone(),
            scenario: sample.scenario.clone(),
            difficulty: sample.difficulty.clone(),
            exact: predicted == gold,
            f1: harmonic(precision, recall),
            precision,
            recall,
            predicted,
            gold,
            failure,
        }
    }
}

/// The figures of a set of samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolMetrics {
    pub n_samples: usize,
    pub precision_macro: f64,
    pub recall_macro: f64,
    pub f1_macro: f64,
    pub precision_micro: f64,
    pub recall_micro: f64,
    pub f1_micro: f64,
    /// Share of samples whose name sequence equals the reference's.
    pub exact_match: f64,
}

impl ToolMetrics {
    /// The figures of `scores`.
    pub fn of<'a>(scores: impl IntoIterator<Item = &'a SampleScore>) -> Self {
        let scores: Vec<&SampleScore> = scores.into_iter().collect();
        let n = scores.len();
        let mean = |f: &dyn Fn(&SampleScore) -> f64| {
            if n == 0 {
                f64::NAN
            } else {
                scores.iter().map(|s| f(s)).sum::<f64>() / n as f64
            }
        };
        let hits: usize = scores.iter().map(|s| overlap(&s.predicted, &s.gold)).sum();
        let predicted: usize = scores.iter().map(|s| s.predicted.len()).sum();
        let gold: usize = scores.iter().map(|s| s.gold.len()).sum();
        let (p, r) = (ratio(hits, predicted), ratio(hits, gold));
        ToolMetrics {
            n_samples: n,
            precision_macro: mean(&|s| s.precision),
            recall_macro: mean(&|s| s.recall),
            f1_macro: mean(&|s| s.f1),
            precision_micro: if n == 0 { f64::NAN } else { p },
            recall_micro: if n == 0 { f64::NAN } else { r },
            f1_micro: if n == 0 { f64::NAN } else { harmonic(p, r) },
            exact_match: mean(&|s| f64::from(u8::from(s.exact))),
        }
    }

    /// The figures as `(metric, value)` pairs, in a fixed order.
    pub fn pairs(&self) -> [(&'static str, f64); 7] {
        [
            ("f1_macro", self.f1_macro),
            ("precision_macro", self.precision_macro),
            ("recall_macro", self.recall_macro),
            ("f1_micro", self.f1_micro),
            ("precision_micro", self.precision_micro),
            ("recall_micro", self.recall_micro),
            ("exact_match", self.exact_match),
        ]
    }
}

/// A dataset's report: overall, per scenario, per difficulty, and every sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolReport {
    pub overall: ToolMetrics,
    pub by_scenario: BTreeMap<String, ToolMetrics>,
    pub by_difficulty: BTreeMap<String, ToolMetrics>,
    pub samples: Vec<SampleScore>,
}

impl ToolReport {
    /// The report of `samples`' scores.
    pub fn of(samples: Vec<SampleScore>) -> Self {
        let group = |key: &dyn Fn(&SampleScore) -> &str| {
            let mut names: Vec<&str> = samples.iter().map(key).collect();
            names.sort_unstable();
            names.dedup();
            names
                .into_iter()
                .map(|name| {
                    let metrics = ToolMetrics::of(samples.iter().filter(|s| key(s) == name));
                    (name.to_owned(), metrics)
                })
                .collect::<BTreeMap<_, _>>()
        };
        ToolReport {
            overall: ToolMetrics::of(&samples),
            by_scenario: group(&|s| s.scenario.as_str()),
            by_difficulty: group(&|s| s.difficulty.as_str()),
            samples,
        }
    }
}

/// Reads another system's predictions, JSON Lines: `{"id": …, "tool_calls": […]}` (names, or
/// OpenAI tool calls) or `{"id": …, "messages": […]}` (its whole conversation; the assistant
/// turns' calls count). An error names the file, the line and the field.
pub fn read_predictions(path: &Path) -> Result<BTreeMap<String, Vec<String>>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("line {}", i + 1);
        let value: Value = serde_json::from_str(line)
            .map_err(|e| data_error(path, format!("{at}: not JSON: {e}")))?;
        let id = match value.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => return Err(data_error(path, format!("{at}: `id` is required"))),
        };
        let names = if let Some(calls) = value.get("tool_calls") {
            let Value::Array(calls) = calls else {
                return Err(data_error(
                    path,
                    format!("{at}: `tool_calls` must be a list"),
                ));
            };
            calls
                .iter()
                .enumerate()
                .map(|(j, call)| {
                    let name = match call {
                        Value::String(s) => Some(s.as_str()),
                        other => other
                            .get("function")
                            .and_then(|f| f.get("name"))
                            .or_else(|| other.get("name"))
                            .and_then(Value::as_str),
                    };
                    name.map(str::to_owned).ok_or_else(|| {
                        data_error(
                            path,
                            format!(
                                "{at}: tool_calls[{j}] is neither a name nor a call with a name"
                            ),
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?
        } else if let Some(messages) = value.get("messages") {
            crate::serve::openai_messages(messages)
                .map_err(|why| data_error(path, format!("{at}: {why}")))?
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .flat_map(|m| m.tool_calls.iter().map(|c| c.name.clone()))
                .collect()
        } else {
            return Err(data_error(
                path,
                format!("{at}: give `tool_calls` or `messages`"),
            ));
        };
        out.insert(id, names);
    }
    Ok(out)
}

/// Scores predictions made elsewhere; a sample without a prediction counts as calling nothing
/// (and says so).
pub fn score_predictions(
    samples: &[ToolSample],
    given: &BTreeMap<String, Vec<String>>,
) -> ToolReport {
    ToolReport::of(
        samples
            .iter()
            .map(|sample| match given.get(&sample.id) {
                Some(names) => SampleScore::of(sample, names.clone(), None),
                None => SampleScore::of(sample, Vec::new(), Some("no prediction given".into())),
            })
            .collect(),
    )
}

/// Asks the model behind `client` for every reference assistant turn of `sample`, with the
/// reference history before it; the names it calls, in order, or why it could not answer.
pub fn predict(
    client: &ChatClient,
    sample: &ToolSample,
    max_tokens: u32,
) -> std::result::Result<Vec<String>, String> {
    let mut names = Vec::new();
    for turn in sample.turns() {
        let mut request = ChatRequest::new(sample.messages[..turn].to_vec());
        request.tools = sample.tools.clone();
        request.temperature = Some(0.0);
        request.max_tokens = Some(max_tokens);
        let reply = client
            .complete(&request)
            .map_err(|f| format!("turn {turn}: {f:?}"))?;
        names.extend(reply.tool_calls.into_iter().map(|c| c.name));
    }
    Ok(names)
}

/// Runs `samples` on the model behind `client`, `concurrency` at once; `progress(done, total)`
/// after each sample.
pub fn run_dataset(
    client: &ChatClient,
    samples: &[ToolSample],
    max_tokens: u32,
    concurrency: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> ToolReport {
    let scores = super::run_concurrently(
        samples,
        concurrency,
        &|sample| match predict(client, sample, max_tokens) {
            Ok(names) => SampleScore::of(sample, names, None),
            Err(why) => SampleScore::of(sample, Vec::new(), Some(why)),
        },
        progress,
    );
    ToolReport::of(scores)
}
