//! Every task's gold actions replayed: failures exactly where the reference fails, final state
//! hash and rendered outputs equal to the reference's (fixture `gold_hashes.txt`).

use std::collections::BTreeMap;
use std::sync::Arc;

use envace::env::tau2::Tau2Domain;
use envace::env::tau2::eval::replay_gold;
use envace::env::{Environment, ErrorCode, ToolOutcome, render_outcome};
use sha2::{Digest, Sha256};

use super::{airline, retail};

/// One fixture row: the reference's state hash, failing action indices and outputs digest.
#[derive(Debug)]
struct Expected {
    hash: String,
    failed: Vec<usize>,
    outputs_sha256: Option<String>,
}

fn fixture(domain: &str) -> BTreeMap<String, Expected> {
    let text = include_str!("../../fixtures/tau2/gold_hashes.txt");
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cols.len(), 5, "bad fixture row: {line}");
            (cols[0] == domain).then(|| {
                let failed = if cols[3] == "-" {
                    Vec::new()
                } else {
                    cols[3].split(',').map(|i| i.parse().unwrap()).collect()
                };
                let outputs = (cols[4] != "-").then(|| cols[4].to_owned());
                (
                    cols[1].to_owned(),
                    Expected {
                        hash: cols[2].to_owned(),
                        failed,
                        outputs_sha256: outputs,
                    },
                )
            })
        })
        .collect()
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a domain's gold replays did, in counts.
#[derive(Debug, Default)]
struct Counts {
    /// Gold actions that raised.
    n_failed: usize,
    /// Tasks whose final state equals the initial one.
    n_unchanged: usize,
    /// Tasks without gold actions.
    n_without_actions: usize,
}

/// Replays every task and returns the counts and the mismatches (empty when all agree).
fn check_domain(domain: &Arc<Tau2Domain>, name: &str) -> (Counts, Vec<String>) {
    let expected = fixture(name);
    let mut problems = Vec::new();
    assert_eq!(
        domain.initial_db().hash(),
        expected["initial"].hash,
        "{name}: initial state hash"
    );
    let mut counts = Counts::default();
    for task in domain.tasks() {
        let want = expected
            .get(&task.id)
            .unwrap_or_else(|| panic!("{name} task {} has no fixture row", task.id));
        let replay = replay_gold(domain, task);
        let failed: Vec<usize> = replay
            .outcomes
            .iter()
            .enumerate()
            .filter(|(_, outcome)| outcome.is_failure())
            .map(|(idx, _)| idx)
            .collect();
        for idx in &failed {
            let ToolOutcome::Failure(failure) = &replay.outcomes[*idx] else {
                unreachable!()
            };
            if failure.code != ErrorCode::ToolError {
                problems.push(format!(
                    "{name} task {} action {idx}: {} {}",
                    task.id, failure.code, failure.message
                ));
            }
        }
        counts.n_failed += failed.len();
        counts.n_without_actions += usize::from(replay.outcomes.is_empty());
        if failed != want.failed {
            problems.push(format!(
                "{name} task {}: failing actions {failed:?}, reference {:?}",
                task.id, want.failed
            ));
        }
        let hash = replay.env.state_hash();
        counts.n_unchanged += usize::from(hash == expected["initial"].hash);
        if hash != want.hash {
            problems.push(format!("{name} task {}: state hash differs", task.id));
        }
        let rendered: Vec<String> = replay.outcomes.iter().map(render_outcome).collect();
        if let Some(outputs) = &want.outputs_sha256
            && &sha256_hex(&rendered.join("\n")) != outputs
        {
            problems.push(format!(
                "{name} task {}: rendered outputs differ: {}",
                task.id,
                rendered.join("\n").chars().take(3000).collect::<String>()
            ));
        }
    }
    (counts, problems)
}

#[test]
fn retail_gold_replays_match_the_reference() {
    let domain = retail();
    assert_eq!(domain.tasks().len(), 114);
    let (counts, problems) = check_domain(domain, "retail");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The data README's counts: 18 failing gold actions (in 15 tasks), 11 read-only tasks,
    // 2 tasks without gold actions.
    assert_eq!(counts.n_failed, 18);
    assert_eq!(counts.n_unchanged, 11);
    assert_eq!(counts.n_without_actions, 2);
}

#[test]
fn airline_gold_replays_match_the_reference() {
    let domain = airline();
    assert_eq!(domain.tasks().len(), 50);
    let (counts, problems) = check_domain(domain, "airline");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(counts.n_failed, 0);
    assert_eq!(counts.n_unchanged, 24);
    assert_eq!(counts.n_without_actions, 7);
}
