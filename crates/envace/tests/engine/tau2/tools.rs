//! Known answers for every tool of both domains: each case in `tool_cases.json` is run on a
//! fresh environment and every output (as the agent sees it) and the final state hash must equal
//! what the reference implementation gave (`tool_cases.expected.json`).

use std::collections::BTreeSet;

use envace::env::tau2::Tau2Domain;
use envace::env::{Environment, ErrorCode, ToolOutcome, render_outcome};
use serde_json::Value;

use super::{airline, retail};

fn cases() -> Vec<(Value, Value)> {
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("../../fixtures/tau2/tool_cases.json")).unwrap();
    let expected: Vec<Value> =
        serde_json::from_str(include_str!("../../fixtures/tau2/tool_cases.expected.json")).unwrap();
    assert_eq!(cases.len(), expected.len());
    cases.into_iter().zip(expected).collect()
}

fn run_domain(name: &str) -> (Vec<String>, BTreeSet<String>) {
    let domain: &std::sync::Arc<Tau2Domain> = if name == "retail" {
        retail()
    } else {
        airline()
    };
    let mut problems = Vec::new();
    let mut tools_seen = BTreeSet::new();
    for (case, expected) in cases().iter().filter(|(c, _)| c["domain"] == name) {
        let label = case["case"].as_str().unwrap();
        assert_eq!(expected["case"], case["case"]);
        let mut env = domain.env(0);
        let calls = case["calls"].as_array().unwrap();
        let outputs = expected["outputs"].as_array().unwrap();
        for (idx, (call, want)) in calls.iter().zip(outputs).enumerate() {
            let tool = call[0].as_str().unwrap();
            tools_seen.insert(tool.to_owned());
            let outcome = env.call(tool, &call[1]);
            if let ToolOutcome::Failure(failure) = &outcome {
                assert_eq!(failure.code, ErrorCode::ToolError, "{label}: {failure:?}");
            }
            let got = render_outcome(&outcome);
            if got != want.as_str().unwrap() {
                problems.push(format!(
                    "{label}, call {idx} ({tool}):\n  got  {got}\n  want {}",
                    want.as_str().unwrap()
                ));
            }
        }
        if env.state_hash() != expected["state_hash"].as_str().unwrap() {
            problems.push(format!("{label}: final state hash differs"));
        }
    }
    (problems, tools_seen)
}

fn check(name: &str) {
    let domain = if name == "retail" {
        retail()
    } else {
        airline()
    };
    let (problems, tools_seen) = run_domain(name);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let all: BTreeSet<String> = domain
        .tools()
        .specs()
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(tools_seen, all, "every {name} tool has known-answer cases");
    // At least three cases per write tool.
    for spec in domain.tools().specs().iter().filter(|s| s.mutates_state) {
        let n_cases = cases()
            .iter()
            .filter(|(c, _)| c["domain"] == name)
            .filter(|(c, _)| {
                c["case"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{}:", spec.name))
            })
            .count();
        assert!(n_cases >= 3, "{}: only {n_cases} cases", spec.name);
    }
}

#[test]
fn retail_tools_give_the_reference_outputs() {
    check("retail");
}

#[test]
fn airline_tools_give_the_reference_outputs() {
    check("airline");
}
