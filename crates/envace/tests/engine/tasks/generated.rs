//! Generated tasks end to end: oracle replays, perturbations, seeds, splits and variety.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use envace::chat::{Message, Role};
use envace::config::{Domain, TaskSplit};
use envace::env::render_outcome;
use envace::tasks::{
    GenConfig, GenTask, Rule, Runner, digest, families, fresh_env, generate, judge,
    parse_tool_calls, split_name, split_of,
};
use serde_json::{Map, Value};

use super::sources;

const DOMAINS: [Domain; 3] = [Domain::Retail, Domain::Airline, Domain::Functions];

/// `n_per_difficulty` tasks at each difficulty 1–5.
fn tasks(domain: Domain, seed: u64, split: TaskSplit, n_per_difficulty: usize) -> Vec<GenTask> {
    (1..=5)
        .flat_map(|difficulty| {
            let config = GenConfig {
                seed,
                split,
                difficulty,
                n_tasks: n_per_difficulty,
                families: Vec::new(),
            };
            generate(domain, sources(), &config).unwrap()
        })
        .collect()
}

/// The tool messages of a trajectory, in order.
fn tool_messages(trajectory: &[Message]) -> Vec<String> {
    trajectory
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.clone())
        .collect()
}

#[test]
fn oracles_replayed_through_the_real_tools_reach_full_score() {
    let mut summary = Vec::new();
    for domain in DOMAINS {
        let start = Instant::now();
        let mut generated = tasks(domain, 7, TaskSplit::Train, 400);
        // And 40 of each family asked for by name (some are drawn only when named).
        let n_families = families(domain).len();
        for (family, difficulty) in families(domain) {
            let config = GenConfig {
                seed: 7,
                split: TaskSplit::Train,
                difficulty,
                n_tasks: 40,
                families: vec![family.to_owned()],
            };
            let named = generate(domain, sources(), &config).unwrap();
            assert!(named.iter().all(|t| t.family == family), "{family}");
            generated.extend(named);
        }
        let generated_secs = start.elapsed().as_secs_f64();
        let mut runner = Runner::new(domain, sources()).unwrap();
        let mut per_family: BTreeMap<&str, usize> = BTreeMap::new();
        for task in &generated {
            let replay = runner.replay(&task.oracle);
            assert_eq!(
                replay.responses,
                tool_messages(&task.oracle),
                "task {}",
                task.id
            );
            let report = judge(&task.checklists, &task.oracle, Some(&replay.state_hash), 1);
            assert_eq!(report.score, 1.0, "task {}: {:?}", task.id, report.failed());
            assert!(task.checklists[0].standards.len() >= 2, "task {}", task.id);
            *per_family.entry(task.family).or_default() += 1;
        }
        let all: BTreeSet<&str> = families(domain).into_iter().map(|(name, _)| name).collect();
        let seen: BTreeSet<&str> = per_family.keys().copied().collect();
        assert_eq!(seen, all, "{domain:?}: every family appears");
        summary.push(format!(
            "{domain:?}: {} tasks, {} families, generated in {generated_secs:.2} s, generated + replayed + judged in {:.2} s",
            generated.len(),
            per_family.len(),
            start.elapsed().as_secs_f64()
        ));
        assert_eq!(generated.len(), 2000 + 40 * n_families);
    }
    eprintln!("{}", summary.join("\n"));
}

/// The assistant message and block index of the last tool call, and that call.
fn last_call(task: &GenTask) -> (usize, usize, envace::chat::ToolCall) {
    let (msg_idx, msg) = task
        .oracle
        .iter()
        .enumerate()
        .rev()
        .find(|(_, m)| m.role == Role::Assistant && m.content.contains("<tool_call>"))
        .unwrap();
    let calls = parse_tool_calls(&msg.content);
    let block_idx = calls.len() - 1;
    (msg_idx, block_idx, calls[block_idx].clone().unwrap())
}

/// Changes the first string or number argument of a call; returns the key changed.
fn perturb(arguments: &mut Map<String, Value>) -> Option<String> {
    for (key, value) in arguments {
        match value {
            Value::String(text) => text.push('X'),
            Value::Number(n) => *value = Value::from(n.as_f64()? + 1.0),
            _ => continue,
        }
        return Some(key.clone());
    }
    None
}

#[test]
fn a_perturbed_argument_loses_exactly_the_standards_that_check_it() {
    let mut summary = Vec::new();
    for domain in DOMAINS {
        let generated = tasks(domain, 11, TaskSplit::Train, 40);
        let mut runner = Runner::new(domain, sources()).unwrap();
        let probe = fresh_env(domain, sources()).unwrap();
        let mut lost: BTreeMap<String, usize> = BTreeMap::new();
        for task in &generated {
            let (msg_idx, block_idx, original) = last_call(task);
            let mut changed = original.clone();
            let key = perturb(&mut changed.arguments).unwrap();
            let mut blocks: Vec<String> = parse_tool_calls(&task.oracle[msg_idx].content)
                .into_iter()
                .map(|c| c.unwrap().to_block())
                .collect();
            blocks[block_idx] = changed.to_block();
            let mut trajectory = task.oracle.clone();
            trajectory[msg_idx].content = blocks.join("\n");
            let report = runner.judge(task, &trajectory);
            let standards = &task.checklists[0].standards;
            let expected: Vec<(usize, usize)> = standards
                .iter()
                .enumerate()
                .filter(|(_, s)| match &s.rule {
                    Rule::Called { name, arguments } => {
                        name == &original.name && arguments == &original.arguments_value()
                    }
                    Rule::Argument {
                        name,
                        arguments,
                        key: checked,
                    } => {
                        name == &original.name
                            && arguments == &original.arguments_value()
                            && checked == &key
                    }
                    Rule::StateHash { .. } => probe.mutates_state(&original.name),
                    Rule::Mentions { .. } => false,
                })
                .map(|(idx, _)| (0, idx))
                .collect();
            assert_eq!(
                report.failed(),
                expected,
                "task {} with {key} changed",
                task.id
            );
            assert!(report.score < 1.0 && report.score > 0.0, "task {}", task.id);
            let kinds: Vec<&str> = expected
                .iter()
                .map(|(_, idx)| match standards[*idx].rule {
                    Rule::Called { .. } => "call",
                    Rule::Argument { .. } => "argument",
                    Rule::StateHash { .. } => "state",
                    Rule::Mentions { .. } => "answer",
                })
                .collect();
            *lost.entry(kinds.join("+")).or_default() += 1;
        }
        summary.push(format!("{domain:?}: {lost:?}"));
    }
    expect_test::expect![[r#"
        Retail: {"argument": 135, "argument+state": 65}
        Airline: {"argument": 137, "argument+state": 63}
        Functions: {"argument": 200}"#]]
    .assert_eq(&summary.join("\n"));
}

#[test]
fn a_perturbed_write_is_explained_per_standard() {
    let task = tasks(Domain::Retail, 3, TaskSplit::Train, 30)
        .into_iter()
        .find(|t| t.family == "cancel_pending_order")
        .unwrap();
    let mut trajectory = task.oracle.clone();
    let (msg_idx, _, call) = last_call(&task);
    let reason = call.arguments["reason"].as_str().unwrap();
    let other = if reason == "no longer needed" {
        "ordered by mistake"
    } else {
        "no longer needed"
    };
    trajectory[msg_idx].content = trajectory[msg_idx].content.replace(reason, other);
    let mut runner = Runner::new(Domain::Retail, sources()).unwrap();
    let report = runner.judge(&task, &trajectory);
    let failed: Vec<String> = report
        .verdicts
        .iter()
        .filter(|v| !v.met)
        .map(|v| {
            v.reason
                .split(", not")
                .next()
                .unwrap()
                .split(" hash is")
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    expect_test::expect![[r#"
        cancel_pending_order was called with reason = "X"
        the final state"#]]
    .assert_eq(&failed.join("\n").replace(other, "X").replace(
        &call.arguments["order_id"].as_str().unwrap().to_owned(),
        "#W0000000",
    ));
}

#[test]
fn the_same_seed_gives_identical_tasks_and_another_seed_different_ones() {
    for domain in DOMAINS {
        let config = |seed| GenConfig {
            seed,
            split: TaskSplit::Train,
            difficulty: 3,
            n_tasks: 50,
            families: Vec::new(),
        };
        let a = generate(domain, sources(), &config(1)).unwrap();
        let b = generate(domain, sources(), &config(1)).unwrap();
        let c = generate(domain, sources(), &config(2)).unwrap();
        assert_eq!(digest(&a), digest(&b), "{domain:?}");
        assert_ne!(digest(&a), digest(&c), "{domain:?}");
        let differing = a
            .iter()
            .zip(&c)
            .filter(|(x, y)| x.request != y.request)
            .count();
        assert!(
            differing >= 45,
            "{domain:?}: only {differing} of 50 requests differ"
        );
    }
}

/// The split of the entity behind a touched key (orders and reservations follow their user).
fn owner_split(task: &GenTask, key: &str) -> Option<TaskSplit> {
    let kind = key.split(':').next()?;
    match kind {
        "user" | "product" | "flight" | "value" => Some(split_of(key)),
        _ => {
            let user = task.touched.iter().find(|k| k.starts_with("user:"))?;
            Some(split_of(user))
        }
    }
}

#[test]
fn splits_are_disjoint_by_user_and_record() {
    for domain in DOMAINS {
        let mut touched: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for (split, n) in [
            (TaskSplit::Train, 200),
            (TaskSplit::Validation, 60),
            (TaskSplit::Test, 60),
        ] {
            for task in tasks(domain, 5, split, n) {
                assert_eq!(task.split, split);
                assert!(!task.touched.is_empty(), "task {}", task.id);
                for key in &task.touched {
                    assert_eq!(
                        owner_split(&task, key),
                        Some(split),
                        "task {} touches {key}",
                        task.id
                    );
                    touched
                        .entry(split_name(split))
                        .or_default()
                        .insert(key.clone());
                }
            }
        }
        let train = &touched["train"];
        let validation = &touched["validation"];
        let test = &touched["test"];
        assert!(
            train.is_disjoint(test),
            "{domain:?}: {:?}",
            train.intersection(test).collect::<Vec<_>>()
        );
        assert!(train.is_disjoint(validation), "{domain:?}");
        assert!(validation.is_disjoint(test), "{domain:?}");
        assert!(
            test.len() >= 20,
            "{domain:?}: test touches only {} entities",
            test.len()
        );
    }
}

/// A request with every token holding a digit, `@`, `_` or `#` removed: what is left is the
/// template's wording (plus names and words drawn as slots).
fn wording(request: &str) -> String {
    request
        .split_whitespace()
        .filter(|w| !w.chars().any(|c| c.is_ascii_digit() || "@_#".contains(c)))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn requests_vary_within_every_family() {
    let mut summary = Vec::new();
    for domain in DOMAINS {
        let generated = tasks(domain, 13, TaskSplit::Train, 120);
        let mut texts: BTreeMap<&str, (usize, BTreeSet<&str>, BTreeSet<String>)> = BTreeMap::new();
        for task in &generated {
            let entry = texts.entry(task.family).or_default();
            entry.0 += 1;
            entry.1.insert(&task.request);
            entry.2.insert(wording(&task.request));
        }
        for (family, (n, distinct, wordings)) in &texts {
            assert!(*n >= 10, "{family}: only {n} tasks");
            assert!(
                distinct.len() * 10 >= n * 9,
                "{family}: {} distinct requests of {n}",
                distinct.len()
            );
            assert!(
                wordings.len() >= 4,
                "{family}: only {} wordings",
                wordings.len()
            );
        }
        summary.push(format!("{domain:?}: {} families", texts.len()));
    }
    expect_test::expect![[r#"
        Retail: 8 families
        Airline: 7 families
        Functions: 7 families"#]]
    .assert_eq(&summary.join("\n"));
}

#[test]
fn oracle_turns_use_the_hermes_format_and_render_real_outcomes() {
    let task = &generate(
        Domain::Functions,
        sources(),
        &GenConfig {
            seed: 1,
            split: TaskSplit::Train,
            difficulty: 4,
            n_tasks: 1,
            families: Vec::new(),
        },
    )
    .unwrap()[0];
    let assistant = &task.oracle[1];
    assert!(
        assistant.content.starts_with("<tool_call>\n{\"name\": \"")
            || assistant.content.starts_with("<tool_call>\n{\"name\":\"")
    );
    let mut env = fresh_env(Domain::Functions, sources()).unwrap();
    for (call, response) in parse_tool_calls(&assistant.content)
        .iter()
        .zip(&task.oracle[2..])
    {
        let call = call.as_ref().unwrap();
        assert_eq!(
            render_outcome(&env.call(&call.name, &call.arguments_value())),
            response.content
        );
    }
}

#[test]
fn difficulty_adds_steps_checks_and_families() {
    let mut rows = Vec::new();
    for domain in DOMAINS {
        for difficulty in 1..=5 {
            let config = GenConfig {
                seed: 17,
                split: TaskSplit::Train,
                difficulty,
                n_tasks: 200,
                families: Vec::new(),
            };
            let generated = generate(domain, sources(), &config).unwrap();
            let n_calls: usize = generated
                .iter()
                .map(|t| {
                    t.oracle
                        .iter()
                        .map(|m| parse_tool_calls(&m.content).len())
                        .sum::<usize>()
                })
                .sum();
            let n_standards: usize = generated
                .iter()
                .map(|t| t.checklists[0].standards.len())
                .sum();
            let n_state = generated
                .iter()
                .filter(|t| {
                    t.checklists[0]
                        .standards
                        .iter()
                        .any(|s| matches!(s.rule, Rule::StateHash { .. }))
                })
                .count();
            let n_families = generated
                .iter()
                .map(|t| t.family)
                .collect::<BTreeSet<_>>()
                .len();
            rows.push(format!(
                "{domain:?} d{difficulty}: {:.2} calls, {:.2} standards, {n_state}/200 with a state check, {n_families} families",
                n_calls as f64 / 200.0,
                n_standards as f64 / 200.0
            ));
        }
    }
    expect_test::expect![[r#"
        Retail d1: 1.00 calls, 2.37 standards, 0/200 with a state check, 3 families
        Retail d2: 1.97 calls, 5.45 standards, 74/200 with a state check, 6 families
        Retail d3: 2.38 calls, 7.21 standards, 200/200 with a state check, 7 families
        Retail d4: 2.55 calls, 9.26 standards, 200/200 with a state check, 8 families
        Retail d5: 2.46 calls, 9.09 standards, 200/200 with a state check, 8 families
        Airline d1: 1.00 calls, 3.00 standards, 0/200 with a state check, 2 families
        Airline d2: 1.80 calls, 4.55 standards, 51/200 with a state check, 4 families
        Airline d3: 2.08 calls, 6.33 standards, 200/200 with a state check, 6 families
        Airline d4: 2.22 calls, 8.05 standards, 200/200 with a state check, 7 families
        Airline d5: 2.19 calls, 7.86 standards, 200/200 with a state check, 7 families
        Functions d1: 1.00 calls, 2.48 standards, 0/200 with a state check, 2 families
        Functions d2: 1.00 calls, 2.94 standards, 0/200 with a state check, 4 families
        Functions d3: 2.00 calls, 5.71 standards, 0/200 with a state check, 1 families
        Functions d4: 2.50 calls, 6.74 standards, 0/200 with a state check, 1 families
        Functions d5: 3.55 calls, 10.44 standards, 0/200 with a state check, 1 families"#]]
    .assert_eq(&rows.join("\n"));
}

#[test]
fn an_upper_cased_result_counts_only_when_stated_in_capitals() {
    let config = GenConfig {
        seed: 5,
        split: TaskSplit::Train,
        difficulty: 1,
        n_tasks: 80,
        families: vec!["fn_strings".to_owned()],
    };
    let generated = generate(Domain::Functions, sources(), &config).unwrap();
    let task = generated
        .iter()
        .find(|t| t.oracle.iter().any(|m| m.content.contains("to_uppercase")))
        .unwrap();
    let result = task.checklists[0]
        .standards
        .iter()
        .find_map(|s| match &s.rule {
            Rule::Mentions { text, exact_case } => {
                assert!(exact_case, "{text}");
                Some(text.clone())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(result, result.to_uppercase(), "{result}");
    let mut runner = Runner::new(Domain::Functions, sources()).unwrap();
    assert_eq!(runner.judge(task, &task.oracle).score, 1.0);
    // The answer restates the lower-case request but states a wrong result: the request's
    // words in lower case are not the upper-cased result.
    let mut wrong = task.oracle.clone();
    let answer = wrong.last_mut().unwrap();
    answer.content = answer.content.replace(&result, "VELVET MEADOW");
    assert!(
        answer
            .content
            .to_lowercase()
            .contains(&result.to_lowercase())
    );
    let report = runner.judge(task, &wrong);
    assert!(report.score < 1.0, "{:?}", report.verdicts);
    // Stated in lower case, the result does not count either.
    let mut lower = task.oracle.clone();
    let answer = lower.last_mut().unwrap();
    answer.content = answer.content.replace(&result, &result.to_lowercase());
    assert!(runner.judge(task, &lower).score < 1.0);
}
