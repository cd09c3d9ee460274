//! τ²-bench conversations through the evaluator's real loop: a scripted user and an agent that
//! replays the gold actions score 1 on every task whose reward needs no LLM; dropping one write
//! call scores 0; NL assertions are judged or masked; pass^k over trials matches a hand
//! computation; endpoints stand behind the agent and user in the OpenAI format.

use std::sync::atomic::{AtomicUsize, Ordering};

use envace::chat::{Message, Role, ToolCall, parse_tool_calls};
use envace::env::tau2::eval::Reward;
use envace::env::tau2::{RewardType, Task, Tau2Domain};
use envace::eval::tau2::{
    Agent, AssertionJudge, EndpointAgent, EndpointUser, GREETING, STOP, Tau2Options, Termination,
    UserSimulator, reply_text, run_conversation, run_domain,
};
use envace::openai::ToolCallOut;
use serde_json::json;

use super::{airline, retail};

/// Replays the task's gold actions one per message (the next one is the number of tool results
/// so far), optionally skipping one, then states every `communicate_info` string.
struct GoldAgent {
    skip: Option<usize>,
}

impl Agent for GoldAgent {
    fn respond(
        &self,
        task: &Task,
        _trial: usize,
        conversation: &[Message],
    ) -> Result<String, String> {
        let actions: Vec<_> = task
            .evaluation_criteria
            .as_ref()
            .and_then(|c| c.actions.clone())
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .filter(|(idx, _)| Some(*idx) != self.skip)
            .map(|(_, action)| action)
            .collect();
        let done = conversation.iter().filter(|m| m.role == Role::Tool).count();
        if let Some(action) = actions.get(done) {
            return Ok(ToolCall {
                name: action.name.clone(),
                arguments: action.arguments.clone(),
            }
            .to_block());
        }
        let infos = task
            .evaluation_criteria
            .as_ref()
            .and_then(|c| c.communicate_info.clone())
            .unwrap_or_default();
        Ok(if infos.is_empty() {
            "All done.".to_owned()
        } else {
            format!("Here is what you asked: {}", infos.join("; "))
        })
    }
}

/// States the reason for the call, then stops once the agent has spoken again.
struct ScriptedUser;

impl UserSimulator for ScriptedUser {
    fn respond(
        &self,
        task: &Task,
        _trial: usize,
        conversation: &[Message],
    ) -> Result<String, String> {
        if conversation.len() == 1 {
            let reason = match &task.user_scenario.instructions {
                envace::env::tau2::task::UserInstructions::Structured(s) => {
                    s.reason_for_call.clone()
                }
                envace::env::tau2::task::UserInstructions::Text(t) => t.clone(),
            };
            Ok(reason)
        } else {
            Ok(format!("Thanks. {STOP}"))
        }
    }
}

/// A user who never ends the call.
struct EndlessUser;

impl UserSimulator for EndlessUser {
    fn respond(
        &self,
        _task: &Task,
        _trial: usize,
        _conversation: &[Message],
    ) -> Result<String, String> {
        Ok("Tell me more.".into())
    }
}

/// A judge that says every assertion holds, or fails, and counts its calls.
struct FixedJudge {
    answer: Result<bool, String>,
    calls: AtomicUsize,
}

impl AssertionJudge for FixedJudge {
    fn judge(
        &self,
        _conversation: &[Message],
        assertions: &[String],
    ) -> Result<Vec<(bool, String)>, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let met = self.answer.clone()?;
        Ok(assertions.iter().map(|_| (met, "checked".into())).collect())
    }
}

fn needs_judge(task: &Task) -> bool {
    task.evaluation_criteria
        .as_ref()
        .is_some_and(|c| c.reward_basis.contains(&RewardType::NlAssertion))
}

fn options() -> Tau2Options {
    Tau2Options {
        concurrency: 2,
        ..Tau2Options::default()
    }
}

#[test]
fn the_gold_agent_with_a_scripted_user_scores_one_on_every_task_without_an_llm_reward() {
    let mut n_rule_tasks = 0;
    for domain in [retail(), airline()] {
        let tasks: Vec<Task> = domain
            .tasks()
            .iter()
            .filter(|t| !needs_judge(t))
            .cloned()
            .collect();
        n_rule_tasks += tasks.len();
        let (score, records) = run_domain(
            domain,
            &tasks,
            &GoldAgent { skip: None },
            &ScriptedUser,
            None,
            &options(),
            &|_, _| {},
        )
        .unwrap();
        for record in &records {
            let label = format!("{} task {}", record.domain, record.task_id);
            assert_eq!(record.termination, Termination::UserStop, "{label}");
            assert_eq!(record.reward, Some(1.0), "{label}: {}", record.reason);
            assert_eq!(record.reason, "", "{label}");
            assert_eq!(record.messages[0].content, GREETING);
            assert_eq!(record.messages.last().unwrap().role, Role::User);
        }
        assert_eq!(score.pass_hat_k.get(&1), Some(&1.0), "{}", score.domain);
        assert_eq!(score.avg_reward, 1.0);
        assert_eq!(score.masked, 0);
    }
    // All 50 airline tasks and the two retail tasks graded on DB alone (README).
    assert_eq!(n_rule_tasks, 52);
}

/// The index of the task's first gold action that changes the state.
fn first_write(domain: &Tau2Domain, task: &Task) -> Option<usize> {
    task.evaluation_criteria
        .as_ref()?
        .actions
        .as_ref()?
        .iter()
        .position(|a| {
            domain
                .tools()
                .get(&a.name)
                .is_some_and(|spec| spec.mutates_state)
        })
}

#[test]
fn dropping_one_write_call_scores_zero() {
    let judge = FixedJudge {
        answer: Ok(true),
        calls: AtomicUsize::new(0),
    };
    let mut checked = 0;
    let airline_tasks: Vec<&Task> = airline().tasks().iter().collect();
    let retail_tasks: Vec<&Task> = ["33", "34", "0", "36"]
        .iter()
        .map(|id| retail().task(id).unwrap())
        .collect();
    for (domain, tasks) in [(airline(), airline_tasks), (retail(), retail_tasks)] {
        for task in tasks {
            let Some(write) = first_write(domain, task) else {
                continue;
            };
            let record = run_conversation(
                domain,
                task,
                0,
                &GoldAgent { skip: Some(write) },
                &ScriptedUser,
                Some(&judge),
                &options(),
            )
            .unwrap();
            let label = format!("{} task {} without call {write}", record.domain, task.id);
            assert_eq!(record.reward, Some(0.0), "{label}");
            assert!(
                record
                    .reason
                    .contains("the database differs from the gold actions' result"),
                "{label}: {}",
                record.reason
            );
            checked += 1;
        }
    }
    // The DB already decides: the judge is never asked.
    assert_eq!(judge.calls.load(Ordering::SeqCst), 0);
    assert!(checked >= 30, "{checked} tasks with a write call");
}

#[test]
fn nl_assertions_are_judged_and_masked_when_the_judge_fails_or_is_missing() {
    let domain = retail();
    let task = domain
        .tasks()
        .iter()
        .find(|t| {
            needs_judge(t)
                && t.evaluation_criteria
                    .as_ref()
                    .is_some_and(|c| c.nl_assertions.as_ref().is_some_and(|a| !a.is_empty()))
        })
        .unwrap();
    let run = |judge: Option<&dyn AssertionJudge>| {
        run_conversation(
            domain,
            task,
            0,
            &GoldAgent { skip: None },
            &ScriptedUser,
            judge,
            &options(),
        )
        .unwrap()
    };
    let yes = FixedJudge {
        answer: Ok(true),
        calls: AtomicUsize::new(0),
    };
    let record = run(Some(&yes));
    assert_eq!(record.reward, Some(1.0), "{}", record.reason);
    assert!(!record.nl_assertions.is_empty());
    assert!(record.nl_assertions.iter().all(|v| v.met));

    let no = FixedJudge {
        answer: Ok(false),
        calls: AtomicUsize::new(0),
    };
    let record = run(Some(&no));
    assert_eq!(record.reward, Some(0.0));
    assert!(
        record.reason.starts_with("NL assertion not met: "),
        "{}",
        record.reason
    );

    let broken = FixedJudge {
        answer: Err("connection refused".into()),
        calls: AtomicUsize::new(0),
    };
    let record = run(Some(&broken));
    assert_eq!(record.reward, None);
    assert_eq!(
        record.masked.as_deref(),
        Some("the judge failed: connection refused")
    );
    let record = run(None);
    assert_eq!(record.reward, None);
    assert!(record.masked.unwrap().contains("no judge was given"));
    assert!(matches!(record.report.reward, Reward::NeedsJudge { .. }));
}

/// Succeeds on the trials listed for each task, and otherwise skips the first write call.
struct FlakyAgent {
    good: Vec<(&'static str, Vec<usize>)>,
}

impl Agent for FlakyAgent {
    fn respond(
        &self,
        task: &Task,
        trial: usize,
        conversation: &[Message],
    ) -> Result<String, String> {
        let good = self
            .good
            .iter()
            .any(|(id, trials)| *id == task.id && trials.contains(&trial));
        GoldAgent {
            skip: if good {
                None
            } else {
                first_write(airline(), task)
            },
        }
        .respond(task, trial, conversation)
    }
}

#[test]
fn pass_hat_k_over_trials_matches_a_hand_computation() {
    // Airline tasks 7, 14 and 20, 4 trials each; the agent succeeds on 4, 2 and 0 of them.
    // pass^1 = (4/4 + 2/4 + 0/4) / 3 = 0.5
    // pass^2 = (C(4,2)/C(4,2) + C(2,2)/C(4,2) + 0) / 3 = (1 + 1/6) / 3 = 7/18
    // pass^3 = (1 + 0 + 0) / 3 = 1/3, pass^4 = 1/3.
    let domain = airline();
    let tasks: Vec<Task> = ["7", "14", "20"]
        .iter()
        .map(|id| domain.task(id).unwrap().clone())
        .collect();
    let options = Tau2Options {
        trials: 4,
        concurrency: 3,
        ..Tau2Options::default()
    };
    let agent = FlakyAgent {
        good: vec![("7", vec![0, 1, 2, 3]), ("14", vec![1, 3]), ("20", vec![])],
    };
    let (score, records) = run_domain(
        domain,
        &tasks,
        &agent,
        &ScriptedUser,
        None,
        &options,
        &|_, _| {},
    )
    .unwrap();
    assert_eq!(records.len(), 12);
    let successes: Vec<(String, usize)> = records
        .iter()
        .filter(|r| r.reward == Some(1.0))
        .map(|r| (r.task_id.clone(), r.trial))
        .collect();
    assert_eq!(
        successes,
        vec![
            ("7".into(), 0),
            ("7".into(), 1),
            ("7".into(), 2),
            ("7".into(), 3),
            ("14".into(), 1),
            ("14".into(), 3)
        ]
    );
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    assert!(close(score.pass_hat_k[&1], 0.5), "{score:?}");
    assert!(close(score.pass_hat_k[&2], 7.0 / 18.0), "{score:?}");
    assert!(close(score.pass_hat_k[&3], 1.0 / 3.0), "{score:?}");
    assert!(close(score.pass_hat_k[&4], 1.0 / 3.0), "{score:?}");
    assert_eq!(score.n_tasks, 3);
    assert_eq!(score.n_scored_tasks, 3);
}

#[test]
fn conversations_that_the_user_does_not_end_score_zero() {
    let domain = airline();
    let task = domain.task("1").unwrap();
    let record = run_conversation(
        domain,
        task,
        0,
        &GoldAgent { skip: None },
        &EndlessUser,
        None,
        &Tau2Options {
            max_steps: 12,
            ..options()
        },
    )
    .unwrap();
    assert_eq!(record.termination, Termination::MaxSteps);
    assert_eq!(record.messages.len(), 12);
    assert_eq!(record.reward, Some(0.0));
    assert_eq!(
        record.reason,
        "the conversation ended by reaching the step limit"
    );

    struct DownAgent;
    impl Agent for DownAgent {
        fn respond(&self, _: &Task, _: usize, _: &[Message]) -> Result<String, String> {
            Err("HTTP 503".into())
        }
    }
    let record =
        run_conversation(domain, task, 0, &DownAgent, &ScriptedUser, None, &options()).unwrap();
    assert_eq!(
        record.termination,
        Termination::AgentFailed("HTTP 503".into())
    );
    assert_eq!(record.reward, Some(0.0));
    assert_eq!(record.messages.len(), 2, "greeting and the user's opening");

    // Malformed calls are recorded and counted, and enough of them stop the conversation.
    struct Garbling;
    impl Agent for Garbling {
        fn respond(&self, _: &Task, _: usize, _: &[Message]) -> Result<String, String> {
            Ok(
                "<tool_call>\n{\"name\": \"get_user_details\", \"arguments\": 3}\n</tool_call>"
                    .into(),
            )
        }
    }
    let record = run_conversation(
        domain,
        task,
        0,
        &Garbling,
        &EndlessUser,
        None,
        &Tau2Options {
            max_errors: 3,
            ..options()
        },
    )
    .unwrap();
    assert_eq!(record.termination, Termination::TooManyErrors);
    assert_eq!(record.tool_errors, 3);
    assert_eq!(record.reward, Some(0.0));
}

#[test]
fn endpoint_players_see_the_conversation_from_their_own_side() {
    let domain: &std::sync::Arc<Tau2Domain> = airline();
    let task = domain.task("1").unwrap();
    let call = ToolCall {
        name: "get_user_details".into(),
        arguments: json!({"user_id": "mia_li_3668"})
            .as_object()
            .unwrap()
            .clone(),
    };
    let conversation = vec![
        Message::new(Role::Assistant, GREETING),
        Message::new(Role::User, "I want to book a flight."),
        Message::new(
            Role::Assistant,
            format!("Let me look.\n{}", call.to_block()),
        ),
        Message::new(Role::Tool, "{\"user_id\": \"mia_li_3668\"}"),
        Message::new(Role::Assistant, "What is your destination?"),
    ];
    let client = envace::openai::ChatClient::new(&envace::config::EndpointConfig {
        url: "http://127.0.0.1:9/v1".into(),
        model: "m".into(),
        api_key_env: None,
        timeout_secs: 1.0,
        max_retries: 0,
        max_concurrency: 1,
    })
    .unwrap();

    // The agent: the policy in the system prompt, the tools, and calls paired with results.
    let agent = EndpointAgent::new(client.clone(), domain);
    let request = agent.request(&conversation);
    assert!(request.messages[0].content.contains(domain.policy()));
    assert_eq!(request.tools.len(), domain.tools().specs().len());
    assert_eq!(request.messages[3].content, "Let me look.");
    assert_eq!(request.messages[3].tool_calls[0].id, "call_2_0");
    assert_eq!(
        request.messages[3].tool_calls[0].arguments,
        "{\"user_id\":\"mia_li_3668\"}"
    );
    assert_eq!(
        request.messages[4].tool_call_id.as_deref(),
        Some("call_2_0")
    );
    // A failing endpoint is the agent failing, with the reason kept.
    assert!(agent.respond(task, 0, &conversation).is_err());

    // The user: the scenario in the system prompt; the agent's spoken words as the other
    // side's, its own as the assistant's; no tools and no tool results.
    let user = EndpointUser::new(client);
    let request = user.request(task, &conversation);
    assert!(request.messages[0].content.contains(STOP));
    let roles: Vec<(Role, &str)> = request.messages[1..]
        .iter()
        .map(|m| (m.role, m.content.as_str()))
        .collect();
    assert_eq!(
        roles,
        vec![
            (Role::User, GREETING),
            (Role::Assistant, "I want to book a flight."),
            (Role::User, "Let me look."),
            (Role::User, "What is your destination?"),
        ]
    );
    assert!(request.tools.is_empty());

    // Replies come back in the engine's form; arguments that are not an object stay malformed.
    let text = reply_text(
        "Checking.",
        &[
            ToolCallOut {
                id: "a".into(),
                name: "get_user_details".into(),
                arguments: "{\"user_id\": \"x\"}".into(),
            },
            ToolCallOut {
                id: "b".into(),
                name: "get_user_details".into(),
                arguments: "user_id=x".into(),
            },
        ],
    );
    let parsed = parse_tool_calls(&text);
    assert_eq!(parsed.content, "Checking.");
    assert_eq!(parsed.calls.len(), 2);
    assert_eq!(parsed.valid_calls().count(), 1);
}
