//! `reset` copies back only changed records yet restores the exact initial state, and the
//! delta hash tells states apart exactly when the full state hash does (every gold replay).

use std::collections::BTreeMap;

use envace::env::Environment;
use envace::env::tau2::eval::replay_gold;

use super::{airline, retail};

#[test]
fn reset_restores_the_initial_state_and_delta_hashes_agree_with_full_hashes() {
    let mut summary = Vec::new();
    for domain in [retail(), airline()] {
        let initial = domain.env(0);
        let (initial_full, initial_delta) = (initial.state_hash(), initial.delta_hash());
        let mut by_delta: BTreeMap<String, String> = BTreeMap::new();
        let mut n_changed = 0;
        for task in domain.tasks() {
            let mut env = replay_gold(domain, task).env;
            let (full, delta) = (env.state_hash(), env.delta_hash());
            assert_eq!(
                full == initial_full,
                delta == initial_delta,
                "task {}",
                task.id
            );
            n_changed += usize::from(full != initial_full);
            if let Some(seen) = by_delta.insert(delta.clone(), full.clone()) {
                assert_eq!(seen, full, "task {}: one delta hash, two states", task.id);
            }
            env.reset(1);
            assert_eq!(env.state_hash(), initial_full, "task {}: reset", task.id);
            assert_eq!(env.delta_hash(), initial_delta, "task {}: reset", task.id);
            assert_eq!(env.seed(), 1);
        }
        let n_states = by_delta
            .values()
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        assert_eq!(
            by_delta.len(),
            n_states,
            "distinct delta hashes = distinct states"
        );
        summary.push(format!(
            "{}: {} tasks, {n_changed} change the state, {n_states} distinct final states",
            domain.kind().as_str(),
            domain.tasks().len()
        ));
    }
    expect_test::expect![[r#"
        retail: 114 tasks, 103 change the state, 99 distinct final states
        airline: 50 tasks, 26 change the state, 25 distinct final states"#]]
    .assert_eq(&summary.join("\n"));
}
