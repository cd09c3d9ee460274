//! VitaBench conversations through the evaluator's real loop: an agent that places the
//! expected orders is graded 1 by a judge that checks them window by window, one that places
//! none 0; the judge's failures (its endpoint down, an unreadable answer) mask the conversation;
//! windows, the judge's reading and Avg@k / Pass@k / Pass^k match hand computations.

use envace::chat::{Message, Role, ToolCall};
use envace::env::vita::VitaTask;
use envace::eval::tau2::{Agent, STOP, Tau2Options, Termination, UserSimulator};
use envace::eval::vita::{
    EndpointRubricJudge, RubricJudge, RubricState, VITA_GREETING, VitaAgent, VitaRecord, VitaScore,
    agent_system_prompt, pass_at_k, read_rubric_answer, run_conversation, run_domain, window_text,
    windows,
};
use serde_json::{Value, json};

use super::tasks;

/// Places the first expected state's new orders (create, then pay), one call per message, then
/// says it is done; with `place: false` it only talks.
struct OrderingAgent {
    place: bool,
}

fn order_calls(task: &VitaTask) -> Vec<ToolCall> {
    let mut calls = Vec::new();
    let Some(state) = task.evaluation.expected_states.first() else {
        return calls;
    };
    for order in &state.required_orders {
        let lines = order["products"].as_array().cloned().unwrap_or_default();
        if task
            .db
            .orders
            .contains_key(order["order_id"].as_str().unwrap_or(""))
            || lines.iter().any(|l| l["product_id"].as_str().is_none())
        {
            continue;
        }
        let arguments = json!({
            "user_id": task.db.user_id,
            "store_id": order["store_id"],
            "product_ids": lines.iter().map(|l| l["product_id"].clone()).collect::<Vec<_>>(),
            "product_cnts": lines.iter().map(|l| l["quantity"].clone()).collect::<Vec<_>>(),
            "address": order["location"]["address"],
            "dispatch_time": task.db.time,
        });
        calls.push(ToolCall {
            name: "create_delivery_order".into(),
            arguments: arguments.as_object().unwrap().clone(),
        });
    }
    calls
}

impl Agent<VitaTask> for OrderingAgent {
    fn respond(
        &self,
        task: &VitaTask,
        _: usize,
        conversation: &[Message],
    ) -> Result<String, String> {
        let done = conversation.iter().filter(|m| m.role == Role::Tool).count();
        if self.place
            && let Some(call) = order_calls(task).get(done)
        {
            return Ok(call.to_block());
        }
        Ok("Your order is placed. Anything else?".into())
    }
}

/// States the goal, then stops once the agent has spoken again.
struct GoalUser;

impl UserSimulator<VitaTask> for GoalUser {
    fn respond(
        &self,
        task: &VitaTask,
        _: usize,
        conversation: &[Message],
    ) -> Result<String, String> {
        Ok(if conversation.len() == 1 {
            task.instructions.clone()
        } else {
            format!("Thanks. {STOP}")
        })
    }
}

/// Marks every rubric met in a window showing a placed order, and leaves them otherwise; records
/// the windows it saw.
struct OrderJudge {
    seen: std::sync::Mutex<Vec<(usize, usize, usize)>>,
}

impl RubricJudge for OrderJudge {
    fn update(
        &self,
        _task: &VitaTask,
        window: &[Message],
        start: usize,
        (idx, total): (usize, usize),
        states: &[RubricState],
    ) -> Result<Vec<RubricState>, String> {
        self.seen.lock().unwrap().push((start, idx, total));
        let placed = window
            .iter()
            .any(|m| m.role == Role::Tool && m.content.starts_with("Order(order_id:OT"));
        Ok(states
            .iter()
            .map(|s| RubricState {
                met: s.met || placed,
                justification: format!("window {idx}: placed={placed}"),
                ..s.clone()
            })
            .collect())
    }
}

/// Fails every time.
struct BrokenJudge;

impl RubricJudge for BrokenJudge {
    fn update(
        &self,
        _: &VitaTask,
        _: &[Message],
        _: usize,
        _: (usize, usize),
        _: &[RubricState],
    ) -> Result<Vec<RubricState>, String> {
        Err("connection refused".into())
    }
}

fn options() -> Tau2Options {
    Tau2Options {
        trials: 1,
        max_steps: 300,
        concurrency: 2,
        ..Tau2Options::default()
    }
}

/// The first tasks whose first expected state has new orders with products in the data.
fn orderable() -> Vec<&'static VitaTask> {
    tasks()
        .iter()
        .filter(|t| {
            let calls = order_calls(t);
            !calls.is_empty()
                && calls.iter().all(|c| {
                    t.db.stores
                        .contains_key(c.arguments["store_id"].as_str().unwrap())
                        && c.arguments["product_ids"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .all(|p| t.db.product(p.as_str().unwrap()).is_some())
                })
        })
        .take(6)
        .collect()
}

#[test]
fn placing_the_expected_orders_scores_one_and_placing_none_scores_zero() {
    let tasks = orderable();
    assert_eq!(tasks.len(), 6);
    for task in tasks {
        let judge = OrderJudge {
            seen: Default::default(),
        };
        let record = run_conversation(
            task,
            0,
            &OrderingAgent { place: true },
            &GoalUser,
            Some(&judge),
            &options(),
        );
        assert_eq!(
            record.termination,
            Termination::UserStop,
            "task {}",
            task.id
        );
        assert_eq!(
            record.reward,
            Some(1.0),
            "task {}: {}",
            task.id,
            record.reason
        );
        assert_eq!(record.messages[0].content, VITA_GREETING);
        assert_eq!(
            record.tool_errors, 0,
            "task {}: {:?}",
            task.id, record.messages
        );
        let n_orders = order_calls(task).len();
        assert_eq!(
            record.final_orders.as_object().unwrap().len(),
            task.db.orders.len() + n_orders
        );
        assert_eq!(record.rubrics.len(), task.rubrics().len());
        assert_eq!(record.rubric_score, Some(1.0));
        // greeting, user, one call and one result per order, the agent's words, the user's stop.
        assert_eq!(record.messages.len(), 4 + 2 * n_orders);
        assert_eq!(record.windows, windows(&record.messages).len());
        assert_eq!(judge.seen.lock().unwrap().len(), record.windows);

        let judge = OrderJudge {
            seen: Default::default(),
        };
        let record = run_conversation(
            task,
            0,
            &OrderingAgent { place: false },
            &GoalUser,
            Some(&judge),
            &options(),
        );
        assert_eq!(record.reward, Some(0.0));
        assert_eq!(record.rubric_score, Some(0.0));
        assert!(
            record.reason.starts_with("rubric not met (0 of"),
            "{}",
            record.reason
        );
    }
}

#[test]
fn rubric_states_carry_over_windows_in_a_long_conversation() {
    // Six orders' worth of calls: the order is placed in the first window, and later windows
    // (which show no order) keep the rubrics met.
    let task = orderable()[0];
    struct Chatty;
    impl Agent<VitaTask> for Chatty {
        fn respond(&self, task: &VitaTask, _: usize, c: &[Message]) -> Result<String, String> {
            let done = c.iter().filter(|m| m.role == Role::Tool).count();
            Ok(match done {
                0 => order_calls(task)[0].to_block(),
                1..=8 => ToolCall {
                    name: "get_user_historical_behaviors".into(),
                    arguments: Default::default(),
                }
                .to_block(),
                _ => "Done.".into(),
            })
        }
    }
    let judge = OrderJudge {
        seen: Default::default(),
    };
    let record = run_conversation(task, 0, &Chatty, &GoalUser, Some(&judge), &options());
    // greeting, user, 9 calls and results, the agent's words, the stop: 22 messages.
    assert_eq!(record.messages.len(), 22);
    assert_eq!(record.windows, 3);
    assert_eq!(
        *judge.seen.lock().unwrap(),
        vec![(0, 1, 3), (8, 2, 3), (16, 3, 3)]
    );
    assert_eq!(record.reward, Some(1.0));
    assert!(
        record.rubrics[0]
            .justification
            .contains("window 3: placed=false")
    );
}

#[test]
fn the_judge_failing_masks_the_conversation_and_the_score_leaves_it_out() {
    let tasks: Vec<VitaTask> = orderable().into_iter().take(3).cloned().collect();
    let record = run_conversation(
        &tasks[0],
        0,
        &OrderingAgent { place: true },
        &GoalUser,
        Some(&BrokenJudge),
        &options(),
    );
    assert_eq!(record.reward, None);
    assert_eq!(
        record.masked.as_deref(),
        Some("the judge failed on window 1: connection refused")
    );
    let record = run_conversation(
        &tasks[0],
        0,
        &OrderingAgent { place: true },
        &GoalUser,
        None,
        &options(),
    );
    assert!(record.masked.unwrap().contains("no judge"));

    // The endpoint judge against an endpoint that does not answer: masked, with the reason.
    let client = envace::openai::ChatClient::new(&envace::config::EndpointConfig {
        url: "http://127.0.0.1:9/v1".into(),
        model: "judge".into(),
        api_key_env: None,
        timeout_secs: 1.0,
        max_retries: 0,
        max_concurrency: 1,
    })
    .unwrap();
    let judge = EndpointRubricJudge::new(client.clone());
    let (score, records) = run_domain(
        "delivery",
        &tasks,
        &OrderingAgent { place: true },
        &GoalUser,
        Some(&judge),
        &options(),
        &|_, _| {},
    )
    .unwrap();
    assert!(records.iter().all(|r| r.reward.is_none()));
    assert!(
        records[0]
            .masked
            .as_ref()
            .unwrap()
            .starts_with("the judge failed on window 1")
    );
    assert_eq!(score.masked, 3);
    assert_eq!(score.n_scored_tasks, 0);
    assert!(score.pass_hat_k.is_empty());

    // The agent and the judge see what they should.
    let agent = VitaAgent::new(client);
    let conversation = vec![Message::new(Role::Assistant, VITA_GREETING)];
    let request = agent
        .0
        .request_as(&agent_system_prompt(&tasks[0]), &conversation);
    assert!(request.messages[0].content.contains(&tasks[0].db.time));
    assert!(
        request.messages[0]
            .content
            .contains("The current time is 2025-06-21 11:20:00 (Saturday)."),
        "{}",
        request.messages[0].content
    );
    assert!(request.messages[0].content.contains(STOP));
    assert_eq!(request.tools.len(), 20);
    assert!(agent.respond(&tasks[0], 0, &conversation).is_err());
    let states = vec![RubricState {
        rubric: "The order is delivered by noon".into(),
        met: false,
        justification: "Not evaluated yet".into(),
    }];
    let request = judge.request(&tasks[0], &conversation, 0, (1, 1), &states);
    assert!(request.messages[0].content.contains(&tasks[0].instructions));
    assert!(
        request.messages[1]
            .content
            .contains("\"rubric_idx\": \"rubric_0\"")
    );
    assert!(
        request.messages[1]
            .content
            .contains("[1] assistant: Hello, how can I help you?")
    );
}

#[test]
fn the_step_limit_scores_zero_without_asking_the_judge_and_the_agent_may_stop() {
    let task = orderable()[0];
    struct Endless;
    impl Agent<VitaTask> for Endless {
        fn respond(&self, _: &VitaTask, _: usize, _: &[Message]) -> Result<String, String> {
            Ok(ToolCall {
                name: "get_user_all_orders".into(),
                arguments: Default::default(),
            }
            .to_block())
        }
    }
    let judge = OrderJudge {
        seen: Default::default(),
    };
    let options = Tau2Options {
        max_steps: 12,
        ..options()
    };
    let record = run_conversation(task, 0, &Endless, &GoalUser, Some(&judge), &options);
    assert_eq!(record.termination, Termination::MaxSteps);
    assert_eq!(record.reward, Some(0.0));
    assert!(judge.seen.lock().unwrap().is_empty());

    struct Stopper;
    impl Agent<VitaTask> for Stopper {
        fn respond(&self, _: &VitaTask, _: usize, _: &[Message]) -> Result<String, String> {
            Ok(format!("Glad to help. {STOP}"))
        }
    }
    let record = run_conversation(task, 0, &Stopper, &GoalUser, Some(&judge), &options);
    assert_eq!(record.termination, Termination::AgentStop);
    assert_eq!(record.reward, Some(0.0), "graded: no order was placed");
    assert_eq!(judge.seen.lock().unwrap().len(), 1);
}

#[test]
fn windows_and_their_text_follow_the_reference() {
    let message = |i: usize| Message::new(Role::User, format!("m{i}"));
    let ten: Vec<Message> = (0..10).map(message).collect();
    assert_eq!(windows(&ten).len(), 1);
    let eleven: Vec<Message> = (0..11).map(message).collect();
    let cut: Vec<(usize, usize)> = windows(&eleven)
        .iter()
        .map(|(s, w)| (*s, w.len()))
        .collect();
    assert_eq!(cut, vec![(0, 10), (8, 3)]);
    let eighteen: Vec<Message> = (0..18).map(message).collect();
    let cut: Vec<(usize, usize)> = windows(&eighteen)
        .iter()
        .map(|(s, w)| (*s, w.len()))
        .collect();
    assert_eq!(cut, vec![(0, 10), (8, 10)]);

    let call = ToolCall {
        name: "pay_delivery_order".into(),
        arguments: json!({"order_id": "OT1", "n": 2})
            .as_object()
            .unwrap()
            .clone(),
    };
    let window = vec![
        Message::new(Role::Assistant, format!("Paying now.\n{}", call.to_block())),
        Message::new(Role::Tool, "Payment successful"),
        Message::new(Role::Assistant, ""),
    ];
    assert_eq!(
        window_text(&window, 4),
        "[5] assistant: Paying now. pay_delivery_order(order_id='OT1', n=2)\n[6] tool: Payment successful"
    );
}

#[test]
fn the_judges_answer_is_read_leniently_but_not_blindly() {
    let states = vec![
        RubricState {
            rubric: "a".into(),
            met: false,
            justification: "Not evaluated yet".into(),
        },
        RubricState {
            rubric: "b".into(),
            met: true,
            justification: "earlier".into(),
        },
    ];
    let answer = "```json\n[{\"rubric_idx\": \"rubric_0\", \"rubric\": \"a\", \"justification\": \"[3] placed\", \"meetExpectation\": true},\n {\"rubric_idx\": \"rubric_9\", \"meetExpectation\": false}]\n```";
    let read = read_rubric_answer(answer, &states).unwrap();
    assert!(read[0].met);
    assert_eq!(read[0].justification, "[3] placed");
    assert_eq!(
        read[1], states[1],
        "a rubric the answer leaves out keeps its state"
    );
    assert!(
        read_rubric_answer("I think it is fine.", &states)
            .unwrap_err()
            .contains("no JSON array")
    );
    assert!(
        read_rubric_answer("[{\"idx\": 0}]", &states)
            .unwrap_err()
            .contains("names no rubric")
    );
    assert!(
        read_rubric_answer("[{oops]", &states)
            .unwrap_err()
            .contains("not JSON")
    );
}

fn record(task: &str, trial: usize, reward: Option<f64>) -> VitaRecord {
    VitaRecord {
        domain: "delivery".into(),
        task_id: task.into(),
        trial,
        messages: Vec::new(),
        termination: Termination::UserStop,
        reward,
        masked: reward.is_none().then(|| "judge failed".to_owned()),
        reason: String::new(),
        rubrics: Vec::new(),
        rubric_score: reward,
        windows: 1,
        tool_errors: 0,
        unbuilt_calls: 0,
        final_orders: Value::Null,
        private_notes: Vec::new(),
        imagined_attempts: Vec::new(),
        secs: 0.0,
    }
}

#[test]
fn avg_pass_at_and_pass_hat_k_match_a_hand_computation() {
    // a: 2 of 3 trials succeed; b: 3 of 3; c: 0 of 3; d: one trial masked (left out of pass).
    let mut records = Vec::new();
    for (task, rewards) in [
        ("a", [Some(1.0), Some(0.0), Some(1.0)]),
        ("b", [Some(1.0), Some(1.0), Some(1.0)]),
        ("c", [Some(0.0), Some(0.0), Some(0.0)]),
        ("d", [Some(1.0), None, Some(1.0)]),
    ] {
        for (trial, reward) in rewards.into_iter().enumerate() {
            records.push(record(task, trial, reward));
        }
    }
    let score = VitaScore::of("delivery", 3, &records).unwrap();
    assert_eq!(score.n_tasks, 4);
    assert_eq!(score.n_scored_tasks, 3);
    assert_eq!(score.masked, 1);
    // Avg: 7 successes in 11 judged conversations.
    assert!((score.avg_at_k - 7.0 / 11.0).abs() < 1e-12);
    // Pass@1 = mean of c/n = (2/3 + 1 + 0) / 3; Pass@2: a: 1 − C(1,2)/C(3,2) = 1, b: 1, c: 0.
    assert!((score.pass_at_k[&1] - (2.0 / 3.0 + 1.0) / 3.0).abs() < 1e-12);
    assert!((score.pass_at_k[&2] - 2.0 / 3.0).abs() < 1e-12);
    assert!((score.pass_at_k[&3] - 2.0 / 3.0).abs() < 1e-12);
    // Pass^2: a: C(2,2)/C(3,2) = 1/3, b: 1, c: 0; Pass^3: a: 0, b: 1, c: 0.
    assert!((score.pass_hat_k[&2] - (1.0 / 3.0 + 1.0) / 3.0).abs() < 1e-12);
    assert!((score.pass_hat_k[&3] - 1.0 / 3.0).abs() < 1e-12);
    assert!((pass_at_k(5, 1, 2) - (1.0 - 6.0 / 10.0)).abs() < 1e-12);
    assert_eq!(pass_at_k(2, 0, 1), 0.0);
    assert_eq!(pass_at_k(1, 1, 2), 0.0, "fewer trials than k");
}
