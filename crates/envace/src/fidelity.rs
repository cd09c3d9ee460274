//! Fidelity of rehearsed tool responses: each rehearsed (or external-simulator) response is
//! compared with what the real environment answers for the same call in the same state, on
//! five scores, and the scores are aggregated per tool and overall.
//!
//! Both responses are in the rehearse JSON form ([`crate::rehearse::outcome_json`]).
//!
//! - `valid_json`: the rehearse answer parsed (it is not a parser-error object).
//! - `outcome_agrees`: both are errors with the same code, or both are successes.
//! - `key_f1`: F1 of the key-path sets ([`crate::rehearse::key_paths`]); 1 when both are empty.
//! - `value_accuracy`: the fraction of the real response's leaf values ([`crate::rehearse::leaves`])
//!   found at the same path with an equal value (numbers by value).
//! - `exact_match`: the two are equal JSON (numbers by value, object key order ignored).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::rehearse::{ends_trajectory, error_code, json_equal, key_paths, leaves};

/// The five scores of one rehearsed-vs-real pair.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    /// The rehearse answer parsed.
    pub valid_json: bool,
    /// Same outcome (error code, or success).
    pub outcome_agrees: bool,
    /// F1 of the key-path sets.
    pub key_f1: f64,
    /// Fraction of real leaf values matched.
    pub value_accuracy: f64,
    /// Equal JSON.
    pub exact_match: bool,
}

/// Scores a rehearsed response against the real one.
pub fn score(rehearsed: &Value, real: &Value) -> Scores {
    let valid_json = !ends_trajectory(rehearsed);
    let outcome_agrees = valid_json && error_code(rehearsed) == error_code(real);
    let (key_f1, value_accuracy, exact_match) = if valid_json {
        (
            key_set_f1(rehearsed, real),
            leaf_accuracy(rehearsed, real),
            json_equal(rehearsed, real),
        )
    } else {
        (0.0, 0.0, false)
    };
    Scores {
        valid_json,
        outcome_agrees,
        key_f1,
        value_accuracy,
        exact_match,
    }
}

fn key_set_f1(rehearsed: &Value, real: &Value) -> f64 {
    let predicted = key_paths(rehearsed);
    let truth = key_paths(real);
    if predicted.is_empty() && truth.is_empty() {
        return 1.0;
    }
    let hits = predicted.intersection(&truth).count() as f64;
    if hits == 0.0 {
        return 0.0;
    }
    let precision = hits / predicted.len() as f64;
    let recall = hits / truth.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

fn leaf_accuracy(rehearsed: &Value, real: &Value) -> f64 {
    let truth = leaves(real);
    if truth.is_empty() {
        return if leaves(rehearsed).is_empty() {
            1.0
        } else {
            0.0
        };
    }
    let predicted = leaves(rehearsed);
    let hits = truth
        .iter()
        .filter(|(path, value)| predicted.get(*path).is_some_and(|p| json_equal(p, value)))
        .count();
    hits as f64 / truth.len() as f64
}

/// One leaf path of a rehearsed-vs-real pair, as an episode browser lists them side by side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeafDiff {
    /// The path (`a.b[2].c`, as [`crate::rehearse::leaves`] names it).
    pub path: String,
    /// The rehearsed value there, if the rehearsed response has this leaf.
    pub rehearsed: Option<Value>,
    /// The real value there, if the real response has this leaf.
    pub real: Option<Value>,
    /// The two differ: one is missing, or they are unequal (numbers by value), the same rule
    /// `value_accuracy` counts by.
    pub differs: bool,
}

/// Every leaf path of either response, in path order, each marked when the two differ there.
pub fn leaf_diff(rehearsed: &Value, real: &Value) -> Vec<LeafDiff> {
    let mut predicted = leaves(rehearsed);
    let truth = leaves(real);
    let mut out: Vec<LeafDiff> = truth
        .into_iter()
        .map(|(path, real)| {
            let rehearsed = predicted.remove(&path);
            let differs = !rehearsed.as_ref().is_some_and(|r| json_equal(r, &real));
            LeafDiff {
                path,
                rehearsed,
                real: Some(real),
                differs,
            }
        })
        .collect();
    out.extend(predicted.into_iter().map(|(path, rehearsed)| LeafDiff {
        path,
        rehearsed: Some(rehearsed),
        real: None,
        differs: true,
    }));
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Means of the five scores over a set of pairs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    /// Pairs counted.
    pub n_pairs: u64,
    /// Fraction with a parseable answer.
    pub valid_json: f64,
    /// Fraction with the same outcome.
    pub outcome_agreement: f64,
    /// Mean key-set F1.
    pub key_f1: f64,
    /// Mean leaf-value accuracy.
    pub value_accuracy: f64,
    /// Fraction identical.
    pub exact_match: f64,
}

impl Aggregate {
    /// The means over `scores`.
    pub fn of<'a>(scores: impl IntoIterator<Item = &'a Scores>) -> Self {
        let mut sums = [0.0f64; 5];
        let mut n = 0u64;
        for s in scores {
            n += 1;
            sums[0] += f64::from(u8::from(s.valid_json));
            sums[1] += f64::from(u8::from(s.outcome_agrees));
            sums[2] += s.key_f1;
            sums[3] += s.value_accuracy;
            sums[4] += f64::from(u8::from(s.exact_match));
        }
        if n == 0 {
            return Aggregate::default();
        }
        let mean = |sum: f64| sum / n as f64;
        Aggregate {
            n_pairs: n,
            valid_json: mean(sums[0]),
            outcome_agreement: mean(sums[1]),
            key_f1: mean(sums[2]),
            value_accuracy: mean(sums[3]),
            exact_match: mean(sums[4]),
        }
    }

    /// The five means as `(name, value)`, the names used for metrics (`fidelity/<name>`).
    pub fn named(&self) -> [(&'static str, f64); 5] {
        let [
            valid_json,
            outcome_agreement,
            key_f1,
            value_accuracy,
            exact_match,
        ] = crate::metrics::FIDELITY_SCORES;
        [
            (valid_json, self.valid_json),
            (outcome_agreement, self.outcome_agreement),
            (key_f1, self.key_f1),
            (value_accuracy, self.value_accuracy),
            (exact_match, self.exact_match),
        ]
    }
}

/// Aggregates overall and per tool from `(tool, scores)` pairs.
pub fn aggregate_by_tool<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a Scores)>,
) -> (Aggregate, BTreeMap<String, Aggregate>) {
    let mut all = Vec::new();
    let mut per_tool: BTreeMap<String, Vec<Scores>> = BTreeMap::new();
    for (tool, scores) in pairs {
        all.push(*scores);
        per_tool.entry(tool.to_owned()).or_default().push(*scores);
    }
    let by_tool = per_tool
        .into_iter()
        .map(|(tool, scores)| (tool, Aggregate::of(&scores)))
        .collect();
    (Aggregate::of(&all), by_tool)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rehearse::{SimError, SimErrorCode, error_json, parse_execution_result};
    use serde_json::json;

    #[test]
    fn leaf_diff_lists_both_sides_and_marks_where_they_differ() {
        let rehearsed = json!({"user": {"name": "Ana", "age": 31.0}, "extra": true});
        let real = json!({"user": {"name": "Ana", "age": 30}, "items": []});
        let diff = leaf_diff(&rehearsed, &real);
        let marks: Vec<(&str, bool)> = diff.iter().map(|d| (d.path.as_str(), d.differs)).collect();
        assert_eq!(
            marks,
            vec![
                ("extra", true),
                ("items", true),
                ("user.age", true),
                ("user.name", false)
            ]
        );
        assert_eq!(diff[0].real, None);
        assert_eq!(diff[1].rehearsed, None);
        // Numbers compare by value, as value_accuracy counts them.
        let same = leaf_diff(&json!({"n": 2.0}), &json!({"n": 2}));
        assert!(!same[0].differs);
    }

    #[test]
    fn identical_responses_score_one() {
        let real = json!({"order_id": "#W1", "items": [{"id": 1, "price": 2.5}], "note": null});
        let s = score(&real, &real);
        assert_eq!(
            s,
            Scores {
                valid_json: true,
                outcome_agrees: true,
                key_f1: 1.0,
                value_accuracy: 1.0,
                exact_match: true
            }
        );
    }

    #[test]
    fn a_changed_value_costs_value_accuracy_only() {
        let real = json!({"a": 1, "b": "x", "c": true, "d": [1, 2]});
        let rehearsed = json!({"a": 1, "b": "y", "c": true, "d": [1, 2]});
        let s = score(&rehearsed, &real);
        assert!(s.valid_json && s.outcome_agrees && !s.exact_match);
        assert_eq!(s.key_f1, 1.0);
        assert_eq!(s.value_accuracy, 0.8);
    }

    #[test]
    fn a_missing_key_costs_f1_and_values() {
        let real = json!({"a": 1, "b": 2});
        let rehearsed = json!({"a": 1});
        let s = score(&rehearsed, &real);
        // Precision 1, recall 1/2.
        assert!((s.key_f1 - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.value_accuracy, 0.5);
    }

    #[test]
    fn outcomes_compare_by_error_code() {
        let real = error_json("TOOL_ERROR", "Order not found");
        let same_code = error_json("TOOL_ERROR", "no such order");
        let other_code = error_json("INVALID_PARAMETERS", "bad");
        let success = json!({"status": "ok"});
        assert!(score(&same_code, &real).outcome_agrees);
        assert!(!score(&same_code, &real).exact_match);
        assert!(!score(&other_code, &real).outcome_agrees);
        assert!(!score(&success, &real).outcome_agrees);
        assert!(!score(&real, &success).outcome_agrees);
    }

    #[test]
    fn a_parser_error_is_invalid_and_scores_zero() {
        let err = SimError {
            code: SimErrorCode::SimulatorJsonDecodeError,
            message: "bad".to_owned(),
        }
        .to_json();
        let s = score(&err, &json!({"a": 1}));
        assert!(!s.valid_json && !s.outcome_agrees && !s.exact_match);
        assert_eq!((s.key_f1, s.value_accuracy), (0.0, 0.0));
        assert!(parse_execution_result("<execution_result>{\"a\": 1}</execution_result>").is_ok());
    }

    #[test]
    fn aggregates_per_tool() {
        let one = score(&json!({"a": 1}), &json!({"a": 1}));
        let half = score(&json!({"a": 1, "b": 3}), &json!({"a": 1, "b": 2}));
        let (all, by_tool) = aggregate_by_tool([("x", &one), ("x", &half), ("y", &one)]);
        assert_eq!(all.n_pairs, 3);
        assert!((all.value_accuracy - (1.0 + 0.5 + 1.0) / 3.0).abs() < 1e-12);
        assert_eq!(by_tool["x"].n_pairs, 2);
        assert_eq!(by_tool["x"].exact_match, 0.5);
        assert_eq!(by_tool["y"].exact_match, 1.0);
    }
}
