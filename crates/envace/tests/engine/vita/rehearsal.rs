//! Test-time rehearsal on a conversation benchmark: before its turn the agent imagines attempts
//! in which its own model plays the tools, and acts for real with their memory; only the
//! evaluated model is asked while rehearsing (the user simulator and the environment see the
//! committed turn only), parallel attempts are independent, sequential ones see the earlier
//! attempts, and a turn's memory is made once.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use envace::chat::{Message, Role};
use envace::env::vita::{VitaTask, delivery_tools};
use envace::eval::convrehearsal::{ChatModel, RehearsalBudget, RehearsingAgent, memory_text};
use envace::eval::rehearsal::{AttemptSummary, CallSummary, MEMORY_HEADER};
use envace::eval::tau2::{EndpointAgent, STOP, Tau2Options, Termination, UserSimulator};
use envace::eval::vita::{agent_system_prompt, run_conversation};
use envace::openai::{ChatReply, ChatRequest, ToolCallOut};
use envace::rehearse::SYSTEM_PROMPT;

use super::tasks;

/// Calls `get_user_all_orders` when the user has just spoken, speaks after a tool result, and
/// answers rehearse prompts with an imagined result; logs every request.
struct ScriptedModel {
    log: Mutex<Vec<ChatRequest>>,
}

impl ChatModel for ScriptedModel {
    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, String> {
        self.log.lock().unwrap().push(request.clone());
        if request.messages[0].content == SYSTEM_PROMPT {
            return Ok(ChatReply {
                content:
                    "<execution_result>\n{\"result\": \"imagined orders\"}\n</execution_result>"
                        .into(),
                ..ChatReply::default()
            });
        }
        let last = request.messages.last().unwrap();
        Ok(if last.role == Role::Tool {
            ChatReply {
                content: "Done.".into(),
                ..ChatReply::default()
            }
        } else {
            ChatReply {
                tool_calls: vec![ToolCallOut {
                    id: "x".into(),
                    name: "get_user_all_orders".into(),
                    arguments: "{}".into(),
                }],
                ..ChatReply::default()
            }
        })
    }
}

/// States the goal, then stops; counts its turns.
struct CountingUser(AtomicUsize);

impl UserSimulator<VitaTask> for CountingUser {
    fn respond(&self, task: &VitaTask, _: usize, c: &[Message]) -> Result<String, String> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(if c.len() == 1 {
            task.instructions.clone()
        } else {
            format!("Thanks. {STOP}")
        })
    }
}

fn dead_client() -> envace::openai::ChatClient {
    envace::openai::ChatClient::new(&envace::config::EndpointConfig {
        url: "http://127.0.0.1:9/v1".into(),
        model: "m".into(),
        api_key_env: None,
        timeout_secs: 1.0,
        max_retries: 0,
        max_concurrency: 1,
    })
    .unwrap()
}

fn has_memory(request: &ChatRequest) -> Option<&str> {
    request
        .messages
        .iter()
        .find(|m| m.content.starts_with(MEMORY_HEADER))
        .map(|m| m.content.as_str())
}

#[test]
fn the_agent_rehearses_with_its_own_model_and_acts_for_real_with_the_memory() {
    let task = &tasks()[0];
    let tools = delivery_tools();
    let agent = EndpointAgent::with_prompt(dead_client(), String::new(), tools);
    let model = ScriptedModel {
        log: Mutex::new(Vec::new()),
    };
    let system = |t: &VitaTask| agent_system_prompt(t);
    let budget = RehearsalBudget::parse("parallel:2").unwrap();
    let rehearsing = RehearsingAgent::new(&agent, &model, &system, tools, budget);
    let user = CountingUser(AtomicUsize::new(0));
    let record = run_conversation(task, 0, &rehearsing, &user, None, &Tau2Options::default());

    assert_eq!(record.termination, Termination::UserStop);
    assert_eq!(
        user.0.load(Ordering::SeqCst),
        2,
        "the user sees the committed turn only"
    );
    // The conversation: greeting, user, the committed call and its real result, "Done.", stop.
    let roles: Vec<Role> = record.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::Assistant,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::User
        ]
    );
    assert!(
        !record.messages[3].content.contains("imagined"),
        "the real environment answered"
    );
    assert_eq!(
        rehearsing.counts(),
        (2, 2),
        "two attempts of one imagined call each, once per turn"
    );

    let log = model.log.lock().unwrap();
    let rehearse: Vec<&ChatRequest> = log
        .iter()
        .filter(|r| r.messages[0].content == SYSTEM_PROMPT)
        .collect();
    assert_eq!(rehearse.len(), 2);
    assert!(
        rehearse[0].messages[1]
            .content
            .contains("tool: get_user_all_orders")
    );
    // Imagined acting: two requests per attempt, sampled, without a memory (parallel).
    let imagined: Vec<&ChatRequest> = log
        .iter()
        .filter(|r| r.messages[0].content != SYSTEM_PROMPT && r.temperature == Some(0.7))
        .collect();
    assert_eq!(imagined.len(), 4);
    assert!(imagined.iter().all(|r| has_memory(r).is_none()));
    // Committed acting: both steps of the turn carry the same memory, before the user's message.
    let committed: Vec<&ChatRequest> = log.iter().filter(|r| r.temperature == Some(0.0)).collect();
    assert_eq!(committed.len(), 2);
    let memory = has_memory(committed[0]).unwrap();
    assert_eq!(has_memory(committed[1]), Some(memory));
    assert!(
        memory.contains("Attempt 1: get_user_all_orders {} -> imagined orders; answer: \"Done.\""),
        "{memory}"
    );
    assert!(memory.contains("Attempt 2: "), "{memory}");
    let at = committed[0]
        .messages
        .iter()
        .position(|m| m.content == memory)
        .unwrap();
    assert_eq!(committed[0].messages[at + 1].role, Role::User);
    assert_eq!(committed[0].messages[at + 1].content, task.instructions);
    // The memory is recorded with the conversation, once for its one agent turn.
    assert_eq!(record.private_notes, vec![memory.to_owned()]);
    // And the attempts behind it, whole: each call with its imagined response, and the ending.
    assert_eq!(record.imagined_attempts.len(), 1);
    let attempts = &record.imagined_attempts[0];
    assert_eq!(attempts.len(), 2);
    let first = &attempts[0].calls[0];
    assert_eq!(first.name, "get_user_all_orders");
    assert!(first.response.contains("imagined orders"), "{first:?}");
    assert!(attempts[0].answered && attempts[0].outcome.starts_with("answer: "));
    let stored = serde_json::to_value(&record).unwrap();
    assert_eq!(
        stored["imagined_attempts"][0][0]["calls"][0]["name"],
        "get_user_all_orders"
    );
}

#[test]
fn sequential_attempts_see_the_earlier_ones() {
    let task = &tasks()[1];
    let tools = delivery_tools();
    let agent = EndpointAgent::with_prompt(dead_client(), String::new(), tools);
    let model = ScriptedModel {
        log: Mutex::new(Vec::new()),
    };
    let system = |t: &VitaTask| agent_system_prompt(t);
    let budget = RehearsalBudget::parse("sequential:3").unwrap();
    let rehearsing = RehearsingAgent::new(&agent, &model, &system, tools, budget);
    let user = CountingUser(AtomicUsize::new(0));
    run_conversation(task, 0, &rehearsing, &user, None, &Tau2Options::default());
    let log = model.log.lock().unwrap();
    let first_steps: Vec<Option<&str>> = log
        .iter()
        .filter(|r| {
            r.messages[0].content != SYSTEM_PROMPT
                && r.temperature == Some(0.7)
                && r.messages.last().unwrap().role == Role::User
        })
        .map(has_memory)
        .collect();
    assert_eq!(first_steps.len(), 3);
    assert!(first_steps[0].is_none());
    assert!(
        first_steps[1].unwrap().contains("Attempt 1:")
            && !first_steps[1].unwrap().contains("Attempt 2:")
    );
    assert!(first_steps[2].unwrap().contains("Attempt 2:"));
}

#[test]
fn budgets_and_memories_read_and_fit() {
    let budget = RehearsalBudget::parse("sequential:2").unwrap();
    assert_eq!(budget.attempts, 2);
    assert_eq!(budget.label(), "sequential:2");
    for bad in ["parallel", "parallel:0", "greedy:2", "parallel:x"] {
        assert!(RehearsalBudget::parse(bad).is_err(), "{bad}");
    }
    let attempt = AttemptSummary {
        calls: vec![CallSummary {
            name: "get_delivery_store_info".into(),
            arguments: "{\"store_id\": \"S1\"}".into(),
            response: "x".repeat(500),
        }],
        outcome: AttemptSummary::answer("Here it is."),
        answered: true,
    };
    let full = memory_text(std::slice::from_ref(&attempt), 10_000);
    assert!(full.contains("{\"store_id\": \"S1\"}"));
    let small = memory_text(&[attempt.clone(), attempt], 400);
    assert!(small.chars().count() <= 400, "{}", small.chars().count());
    assert!(
        small.contains("Attempt 2: get_delivery_store_info -> "),
        "{small}"
    );
}
