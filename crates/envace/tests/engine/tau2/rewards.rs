//! Task rewards: gold trajectories score 1 on DB, COMMUNICATE and ACTION for every task;
//! perturbed trajectories lose exactly the component they break; NL_ASSERTION is left to a
//! judge; pass^k known answers. The component values expected for the perturbed trajectories
//! of airline task 7 and retail tasks 0 and 33 were also obtained from the reference evaluators
//! (`EnvironmentEvaluator`, `CommunicateEvaluator`, `ActionEvaluator` at the fixtures' commit).

use envace::chat::{Message, Role, ToolCall};
use envace::env::tau2::eval::{
    Reward, action_matches, evaluate, gold_trajectory, is_successful, pass_hat_k, pass_hat_ks,
    py_eq,
};
use envace::env::tau2::{Action, RewardType, Task};
use serde_json::{Map, Value, json};

use super::{airline, retail};

fn task<'a>(domain: &'a envace::env::tau2::Tau2Domain, id: &str) -> &'a Task {
    domain.task(id).unwrap()
}

fn args(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

#[test]
fn gold_trajectories_score_full_marks_on_every_task() {
    let mut n_judge = 0;
    for domain in [retail(), airline()] {
        for task in domain.tasks() {
            let report = evaluate(domain, task, &gold_trajectory(task, true));
            let label = format!("{} task {}", domain.kind().as_str(), task.id);
            assert_eq!(report.db_reward, 1.0, "{label}: {:?}", report.db);
            assert_eq!(report.communicate_reward, 1.0, "{label}");
            assert_eq!(report.action_reward, 1.0, "{label}");
            let criteria = task.evaluation_criteria.as_ref().unwrap();
            match &report.reward {
                Reward::Scored(reward) => {
                    assert!(!criteria.reward_basis.contains(&RewardType::NlAssertion));
                    assert_eq!(*reward, 1.0, "{label}");
                }
                Reward::NeedsJudge {
                    reward_without_judge,
                    nl_assertions,
                } => {
                    n_judge += 1;
                    assert!(criteria.reward_basis.contains(&RewardType::NlAssertion));
                    assert_eq!(*reward_without_judge, 1.0, "{label}");
                    assert_eq!(
                        Some(nl_assertions),
                        criteria.nl_assertions.as_ref().or(Some(&Vec::new())),
                        "{label}"
                    );
                }
            }
        }
    }
    // The README: 112 retail tasks have NL_ASSERTION in their basis, no airline task does.
    assert_eq!(n_judge, 112);
}

#[test]
fn a_changed_argument_loses_db_and_action() {
    let domain = airline();
    let task = task(domain, "7");
    let mut trajectory = gold_trajectory(task, true);
    let message = trajectory
        .iter_mut()
        .find(|m| m.content.contains("\"update_reservation_flights\""))
        .unwrap();
    message.content = message.content.replace("\"business\"", "\"economy\"");
    let report = evaluate(domain, task, &trajectory);
    assert_eq!(report.db_reward, 0.0);
    assert!(!report.db.as_ref().unwrap().matched);
    assert_eq!(report.action_reward, 0.0);
    let missed: Vec<&str> = report
        .actions
        .iter()
        .filter(|a| !a.matched)
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(missed, ["update_reservation_flights"]);
    assert_eq!(report.communicate_reward, 1.0);
    // Airline tasks are graded on DB and COMMUNICATE.
    assert_eq!(report.reward, Reward::Scored(0.0));
}

#[test]
fn silence_loses_communicate_only() {
    let domain = airline();
    let task = task(domain, "7");
    let report = evaluate(domain, task, &gold_trajectory(task, false));
    assert_eq!(report.db_reward, 1.0);
    assert_eq!(report.action_reward, 1.0);
    assert_eq!(report.communicate_reward, 0.0);
    assert_eq!(report.communicate[0].info, "1628");
    assert!(!report.communicate[0].met);
    assert_eq!(report.reward, Reward::Scored(0.0));
    // Commas are ignored and case does not matter.
    let mut trajectory = gold_trajectory(task, false);
    trajectory.push(Message::new(
        Role::Assistant,
        "The difference is $1,628 in total.",
    ));
    assert_eq!(
        evaluate(domain, task, &trajectory).reward,
        Reward::Scored(1.0)
    );
}

#[test]
fn calls_are_read_from_the_text_the_model_writes() {
    let domain = airline();
    let task = task(domain, "7");
    // The gold calls and the statement in one assistant message, as a model would write them:
    // the text outside the blocks is the statement, the blocks are the calls.
    let blocks: Vec<String> = gold_trajectory(task, false)
        .into_iter()
        .map(|m| m.content)
        .collect();
    let one_turn = Message::new(
        Role::Assistant,
        format!("{}\nThe difference is $1628.", blocks.join("\n")),
    );
    let report = evaluate(domain, task, std::slice::from_ref(&one_turn));
    assert_eq!(report.reward, Reward::Scored(1.0));
    // The statement inside a call's arguments is not a statement.
    let hidden = Message::new(
        Role::Assistant,
        ToolCall::new("think", vec![("thought", json!("1628"))]).to_block(),
    );
    let mut trajectory = gold_trajectory(task, false);
    trajectory.push(hidden);
    assert_eq!(evaluate(domain, task, &trajectory).communicate_reward, 0.0);
    // A malformed block calls nothing, and tool messages are never calls.
    let broken: Vec<Message> = gold_trajectory(task, true)
        .into_iter()
        .map(|m| Message::new(m.role, m.content.replace("\"arguments\"", "\"args\"")))
        .collect();
    let report = evaluate(domain, task, &broken);
    assert_eq!(
        (report.action_reward, report.communicate_reward),
        (0.0, 1.0)
    );
    let as_tool: Vec<Message> = gold_trajectory(task, true)
        .into_iter()
        .map(|m| Message::new(Role::Tool, m.content))
        .collect();
    let report = evaluate(domain, task, &as_tool);
    assert_eq!(
        (report.action_reward, report.communicate_reward),
        (0.0, 0.0)
    );
}

#[test]
fn extra_reads_and_failed_writes_do_not_change_the_db_reward() {
    let domain = retail();
    let task = task(domain, "33");
    assert_eq!(
        task.evaluation_criteria.as_ref().unwrap().reward_basis,
        [RewardType::Db]
    );
    let mut trajectory = vec![
        assistant_call(
            "get_user_details",
            args(json!({"user_id": "noah_patel_6952"})),
        ),
        assistant_call(
            "cancel_pending_order",
            args(json!({"order_id": "#W0000000", "reason": "no longer needed"})),
        ),
        assistant_call("no_such_tool", args(json!({}))),
    ];
    trajectory.extend(gold_trajectory(task, true));
    assert_eq!(
        evaluate(domain, task, &trajectory).reward,
        Reward::Scored(1.0)
    );
    // Without the address change the DB differs.
    let reads_only: Vec<Message> = gold_trajectory(task, true)
        .into_iter()
        .filter(|m| !m.content.contains("\"modify_user_address\""))
        .collect();
    let report = evaluate(domain, task, &reads_only);
    assert_eq!(report.db_reward, 0.0);
    assert_eq!(report.action_reward, 0.0);
    assert_eq!(report.reward, Reward::Scored(0.0));
    // An extra write makes it differ too.
    trajectory.push(assistant_call(
        "cancel_pending_order",
        args(json!({"order_id": "#W6779827", "reason": "no longer needed"})),
    ));
    assert_eq!(
        evaluate(domain, task, &trajectory).reward,
        Reward::Scored(0.0)
    );
}

#[test]
fn needs_judge_is_reported_for_nl_assertions() {
    let domain = retail();
    let task = task(domain, "0");
    let report = evaluate(domain, task, &[]);
    assert_eq!(report.db_reward, 0.0);
    assert_eq!(report.action_reward, 0.0);
    assert_eq!(report.communicate_reward, 1.0);
    assert_eq!(
        report.reward,
        Reward::NeedsJudge {
            reward_without_judge: 0.0,
            nl_assertions: Vec::new()
        }
    );
}

fn action(name: &str, arguments: Value, compare_args: Option<&[&str]>) -> Action {
    Action {
        action_id: "t_0".to_owned(),
        requestor: "assistant".to_owned(),
        name: name.to_owned(),
        arguments: args(arguments),
        info: None,
        compare_args: compare_args.map(|keys| keys.iter().map(|k| (*k).to_owned()).collect()),
    }
}

/// An assistant message holding one call, as the model writes it.
fn assistant_call(name: &str, arguments: Map<String, Value>) -> Message {
    let call = ToolCall {
        name: name.to_owned(),
        arguments,
    };
    Message::new(Role::Assistant, call.to_block())
}

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        name: name.to_owned(),
        arguments: args(arguments),
    }
}

#[test]
fn action_matching_follows_the_reference() {
    let gold = action(
        "send_certificate",
        json!({"user_id": "u", "amount": 100}),
        None,
    );
    assert!(action_matches(
        &gold,
        &call("send_certificate", json!({"user_id": "u", "amount": 100}))
    ));
    assert!(action_matches(
        &gold,
        &call("send_certificate", json!({"user_id": "u", "amount": 100.0}))
    ));
    assert!(!action_matches(
        &gold,
        &call("send_certificate", json!({"user_id": "u", "amount": 101}))
    ));
    assert!(!action_matches(
        &gold,
        &call("get_user_details", json!({"user_id": "u"}))
    ));
    // Without compare_args only the call's own arguments are compared.
    assert!(action_matches(
        &gold,
        &call("send_certificate", json!({"user_id": "u"}))
    ));
    // With compare_args only those are compared; an empty list matches on the name alone.
    let summary = action(
        "transfer_to_human_agents",
        json!({"summary": "a"}),
        Some(&[]),
    );
    assert!(action_matches(
        &summary,
        &call("transfer_to_human_agents", json!({"summary": "b"}))
    ));
    let by_user = action(
        "send_certificate",
        json!({"user_id": "u", "amount": 100}),
        Some(&["user_id"]),
    );
    assert!(action_matches(
        &by_user,
        &call("send_certificate", json!({"user_id": "u", "amount": 5}))
    ));
    assert!(!action_matches(
        &by_user,
        &call("send_certificate", json!({"user_id": "v", "amount": 100}))
    ));
    assert!(py_eq(&json!({"a": [1, true]}), &json!({"a": [1.0, 1]})));
    assert!(!py_eq(&json!({"a": [1]}), &json!({"a": ["1"]})));
}

#[test]
fn pass_hat_k_known_answers() {
    assert_eq!(pass_hat_k(4, 2, 1).unwrap(), 0.5);
    assert_eq!(pass_hat_k(4, 2, 2).unwrap(), 1.0 / 6.0);
    assert_eq!(pass_hat_k(4, 4, 4).unwrap(), 1.0);
    assert_eq!(pass_hat_k(4, 3, 4).unwrap(), 0.0);
    assert_eq!(pass_hat_k(5, 3, 2).unwrap(), 0.3);
    assert!(pass_hat_k(200, 100, 100).unwrap() > 0.0);
    assert_eq!(
        pass_hat_k(3, 1, 4).unwrap_err().to_string(),
        "pass^k: fewer trials than k (n_trials = 3, n_successes = 1, k = 4)"
    );
    assert!(pass_hat_k(3, 4, 1).is_err());
    assert!(is_successful(1.0 - 1e-7));
    assert!(!is_successful(0.99));
    // Task a: 2 of 3 trials succeed; task b: 3 of 3. pass^1 = (2/3 + 1) / 2, pass^2 =
    // (1/3 + 1) / 2, pass^3 = (0 + 1) / 2.
    let results: Vec<(String, f64)> = [
        ("a", 1.0),
        ("a", 0.0),
        ("a", 1.0),
        ("b", 1.0),
        ("b", 1.0),
        ("b", 1.0),
    ]
    .into_iter()
    .map(|(id, r)| (id.to_owned(), r))
    .collect();
    let ks = pass_hat_ks(&results).unwrap();
    assert_eq!(ks.len(), 3);
    assert!((ks[&1] - (2.0 / 3.0 + 1.0) / 2.0).abs() < 1e-12);
    assert!((ks[&2] - (1.0 / 3.0 + 1.0) / 2.0).abs() < 1e-12);
    assert_eq!(ks[&3], 0.5);
}
