//! τ²-bench evaluation: an agent and a user simulator talk over a native retail or airline
//! environment until the user ends the call or a limit is reached, the conversation is graded
//! by the task's reward basis (NL assertions through an LLM judge, masked when the judge fails),
//! and pass^k is taken over repeated trials.
//!
//! The conversation follows the reference orchestrator: the agent opens with a greeting, the
//! user answers, and then each agent message either calls tools (answered by the environment,
//! after which the agent speaks again) or speaks to the user (who answers). The user ends the
//! call with `###STOP###`, `###TRANSFER###` or `###OUT-OF-SCOPE###`. A conversation that ends
//! any other way (the step limit, too many tool errors, an endpoint that failed) scores 0, as
//! in the reference. The agent, the user and the judge are traits: the CLI puts
//! chat-completions endpoints behind them, the tests scripted players.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::chat::{Message, Role, ToolCall, parse_tool_calls};
use crate::env::tau2::eval::{Reward, RewardReport, evaluate, pass_hat_ks};
use crate::env::tau2::task::{RewardType, UserInstructions};
use crate::env::tau2::{Task, Tau2Domain};
use crate::env::{Environment, render_outcome};
use crate::error::Result;
use crate::eval::rehearsal::AttemptSummary;
use crate::openai::{ChatClient, ChatMsg, ChatRequest, ToolCallOut};

/// The agent's first message, before the user says anything (the reference's default).
pub const GREETING: &str = "Hi! How can I help you today?";
/// The user's token for "my goal is met, goodbye".
pub const STOP: &str = "###STOP###";
/// The user's token for "I was transferred to a human".
pub const TRANSFER: &str = "###TRANSFER###";
/// The user's token for "the scenario does not say how to go on".
pub const OUT_OF_SCOPE: &str = "###OUT-OF-SCOPE###";

/// The agent: its next message from the conversation so far. `T` is the benchmark's task
/// (τ²-bench's by default; VitaBench's for [`super::vita`]).
pub trait Agent<T: ?Sized = Task>: Sync {
    /// The next assistant message in the engine's form: text, and any tool calls as
    /// `<tool_call>` blocks. `trial` numbers the task's conversations from 0 (endpoints use it
    /// as the sampling seed, so trials differ reproducibly). `Err` says why no message came (an
    /// endpoint that failed).
    fn respond(
        &self,
        task: &T,
        trial: usize,
        conversation: &[Message],
    ) -> std::result::Result<String, String>;

    /// What the agent noted privately in the task's `trial`-th conversation, in order (a
    /// rehearsing agent's memory before each turn), recorded with the conversation. None by
    /// default.
    fn private_notes(&self, _task: &T, _trial: usize) -> Vec<String> {
        Vec::new()
    }

    /// The attempts the agent imagined in the task's `trial`-th conversation, one list per
    /// private note (with test-time rehearsal: each turn's attempts, calls, imagined responses
    /// and endings), recorded with the conversation. None by default.
    fn private_attempts(&self, _task: &T, _trial: usize) -> Vec<Vec<AttemptSummary>> {
        Vec::new()
    }
}

/// The simulated user: its next message from the conversation so far.
pub trait UserSimulator<T: ?Sized = Task>: Sync {
    /// The user's next message in the task's `trial`-th conversation; it ends the call by
    /// containing one of the stop tokens.
    fn respond(
        &self,
        task: &T,
        trial: usize,
        conversation: &[Message],
    ) -> std::result::Result<String, String>;
}

/// Decides NL assertions about a finished conversation.
pub trait AssertionJudge: Sync {
    /// One `(met, reason)` per assertion, in order, or why no verdict came.
    fn judge(
        &self,
        conversation: &[Message],
        assertions: &[String],
    ) -> std::result::Result<Vec<(bool, String)>, String>;
}

/// How conversations are run.
#[derive(Debug, Clone)]
pub struct Tau2Options {
    /// Trials per task (pass^k for k up to this).
    pub trials: usize,
    /// Most messages in a conversation (greeting, user, agent and tool messages all count).
    pub max_steps: usize,
    /// Most failed or malformed tool calls before the conversation is stopped.
    pub max_errors: usize,
    /// Conversations in flight at once.
    pub concurrency: usize,
    /// Whether the agent may end the call by writing `###STOP###` (VitaBench's agents may;
    /// τ²-bench's user ends every call).
    pub agent_may_stop: bool,
}

impl Default for Tau2Options {
    fn default() -> Self {
        Tau2Options {
            trials: 1,
            max_steps: 100,
            max_errors: 10,
            concurrency: 4,
            agent_may_stop: false,
        }
    }
}

/// Why a conversation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum Termination {
    /// The user wrote `###STOP###`.
    UserStop,
    /// The user wrote `###TRANSFER###`.
    Transfer,
    /// The user wrote `###OUT-OF-SCOPE###`.
    OutOfScope,
    /// The agent wrote `###STOP###` (only where [`Tau2Options::agent_may_stop`]).
    AgentStop,
    /// The conversation reached the step limit.
    MaxSteps,
    /// Too many tool calls failed or were malformed.
    TooManyErrors,
    /// The agent's endpoint failed.
    AgentFailed(String),
    /// The user simulator's endpoint failed.
    UserFailed(String),
}

impl Termination {
    /// Whether the conversation ended the way the benchmark grades (the user ended it).
    pub fn is_graded(&self) -> bool {
        matches!(
            self,
            Termination::UserStop
                | Termination::Transfer
                | Termination::OutOfScope
                | Termination::AgentStop
        )
    }
}

/// One NL assertion's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssertionVerdict {
    pub assertion: String,
    pub met: bool,
    pub reason: String,
}

/// One conversation as it ran, with its grade.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConversationRecord {
    /// `retail` or `airline`.
    pub domain: String,
    pub task_id: String,
    /// 0-based trial number.
    pub trial: usize,
    /// Every message: the greeting, user, assistant (calls as `<tool_call>` blocks) and tool
    /// messages, in order.
    pub messages: Vec<Message>,
    pub termination: Termination,
    /// The task reward, or `None` when it was masked.
    pub reward: Option<f64>,
    /// Why the reward was masked (the judge could not decide).
    pub masked: Option<String>,
    /// Why the reward is what it is, in one line (empty for a reward of 1).
    pub reason: String,
    /// The DB, COMMUNICATE and ACTION components.
    pub report: RewardReport,
    /// The judge's verdicts on the NL assertions, when it was asked.
    pub nl_assertions: Vec<AssertionVerdict>,
    /// Failed or malformed tool calls.
    pub tool_errors: usize,
    /// The agent's private notes: with test-time rehearsal, its memory before each turn.
    pub private_notes: Vec<String>,
    /// With test-time rehearsal, the attempts behind each note (empty without).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub imagined_attempts: Vec<Vec<AttemptSummary>>,
    pub secs: f64,
}

/// A conversation as played, before it is graded.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// Every message in order, starting with the greeting.
    pub messages: Vec<Message>,
    pub termination: Termination,
    /// Failed or malformed tool calls.
    pub tool_errors: usize,
}

/// The reference orchestrators' loop, shared by τ²-bench and VitaBench: the agent's `greeting`,
/// then the user and the agent in turn; an agent message that calls tools is answered by `env`
/// and the agent goes on, one that only speaks hands the turn to the user, who ends the call
/// with a stop token. `options.max_steps` and `options.max_errors` bound it.
pub fn converse<T: ?Sized>(
    env: &mut dyn Environment,
    task: &T,
    trial: usize,
    agent: &dyn Agent<T>,
    user: &dyn UserSimulator<T>,
    greeting: &str,
    options: &Tau2Options,
) -> Conversation {
    let mut messages = vec![Message::new(Role::Assistant, greeting)];
    let mut errors = 0;
    let mut user_turn = true;
    let termination = loop {
        if messages.len() >= options.max_steps {
            break Termination::MaxSteps;
        }
        if user_turn {
            let text = match user.respond(task, trial, &messages) {
                Ok(text) => text,
                Err(why) => break Termination::UserFailed(why),
            };
            let ended = [
                (STOP, Termination::UserStop),
                (TRANSFER, Termination::Transfer),
                (OUT_OF_SCOPE, Termination::OutOfScope),
            ]
            .into_iter()
            .find(|(token, _)| text.contains(token));
            messages.push(Message::new(Role::User, text));
            if let Some((_, termination)) = ended {
                break termination;
            }
            user_turn = false;
            continue;
        }
        let text = match agent.respond(task, trial, &messages) {
            Ok(text) => text,
            Err(why) => break Termination::AgentFailed(why),
        };
        let parsed = parse_tool_calls(&text);
        messages.push(Message::new(Role::Assistant, text));
        if options.agent_may_stop && parsed.content.contains(STOP) {
            break Termination::AgentStop;
        }
        let mut called = false;
        for call in &parsed.calls {
            match call {
                Ok(call) => {
                    let outcome = env.call(&call.name, &Value::Object(call.arguments.clone()));
                    errors += usize::from(outcome.is_failure());
                    messages.push(Message::new(Role::Tool, render_outcome(&outcome)));
                    called = true;
                }
                Err(_) => errors += 1,
            }
        }
        if errors >= options.max_errors {
            break Termination::TooManyErrors;
        }
        // After tool results the agent goes on; after speaking, the user answers.
        user_turn = !called;
    };
    Conversation {
        messages,
        termination,
        tool_errors: errors,
    }
}

/// Plays one conversation of `task` and grades it.
pub fn run_conversation(
    domain: &Arc<Tau2Domain>,
    task: &Task,
    trial: usize,
    agent: &dyn Agent,
    user: &dyn UserSimulator,
    judge: Option<&dyn AssertionJudge>,
    options: &Tau2Options,
) -> Result<ConversationRecord> {
    let started = Instant::now();
    let mut env = domain.env_for_task(&task.id, trial as u64)?;
    let Conversation {
        messages,
        termination,
        tool_errors: errors,
    } = converse(&mut env, task, trial, agent, user, GREETING, options);
    let report = evaluate(domain, task, &messages);
    let mut nl_assertions = Vec::new();
    let mut masked = None;
    let (reward, reason) = if !termination.is_graded() {
        (
            Some(0.0),
            format!(
                "the conversation ended by {}",
                termination_text(&termination)
            ),
        )
    } else {
        match &report.reward {
            Reward::Scored(reward) => (Some(*reward), components_reason(task, &report, *reward)),
            Reward::NeedsJudge {
                reward_without_judge,
                ..
            } if *reward_without_judge == 0.0 => (Some(0.0), components_reason(task, &report, 0.0)),
            Reward::NeedsJudge {
                reward_without_judge,
                nl_assertions: assertions,
            } if assertions.is_empty() => (
                Some(*reward_without_judge),
                components_reason(task, &report, *reward_without_judge),
            ),
            Reward::NeedsJudge {
                reward_without_judge,
                nl_assertions: assertions,
            } => match judge.map(|judge| judge.judge(&messages, assertions)) {
                None => {
                    masked = Some("the task has NL assertions and no judge was given".to_owned());
                    (None, String::new())
                }
                Some(Err(why)) => {
                    masked = Some(format!("the judge failed: {why}"));
                    (None, String::new())
                }
                Some(Ok(verdicts)) => {
                    nl_assertions = assertions
                        .iter()
                        .zip(verdicts)
                        .map(|(assertion, (met, reason))| AssertionVerdict {
                            assertion: assertion.clone(),
                            met,
                            reason,
                        })
                        .collect();
                    let all_met = nl_assertions.iter().all(|v| v.met);
                    let reward = if all_met { *reward_without_judge } else { 0.0 };
                    let reason = match nl_assertions.iter().find(|v| !v.met) {
                        Some(unmet) => format!("NL assertion not met: {}", unmet.assertion),
                        None => components_reason(task, &report, reward),
                    };
                    (Some(reward), reason)
                }
            },
        }
    };
    Ok(ConversationRecord {
        domain: domain.kind().as_str().to_owned(),
        task_id: task.id.clone(),
        trial,
        messages,
        termination,
        reward,
        masked,
        reason,
        report,
        nl_assertions,
        tool_errors: errors,
        private_notes: agent.private_notes(task, trial),
        imagined_attempts: agent.private_attempts(task, trial),
        secs: started.elapsed().as_secs_f64(),
    })
}

pub(crate) fn termination_text(termination: &Termination) -> String {
    match termination {
        Termination::UserStop => "the user stopping".into(),
        Termination::Transfer => "a transfer".into(),
        Termination::OutOfScope => "the user going out of scope".into(),
        Termination::AgentStop => "the agent stopping".into(),
        Termination::MaxSteps => "reaching the step limit".into(),
        Termination::TooManyErrors => "too many tool errors".into(),
        Termination::AgentFailed(why) => format!("the agent's endpoint failing ({why})"),
        Termination::UserFailed(why) => format!("the user simulator failing ({why})"),
    }
}

/// Which components of the task's reward basis cost the reward.
fn components_reason(task: &Task, report: &RewardReport, reward: f64) -> String {
    if reward > 0.0 {
        return String::new();
    }
    let basis = task
        .evaluation_criteria
        .as_ref()
        .map(|c| c.reward_basis.clone())
        .unwrap_or_default();
    let mut parts = Vec::new();
    if basis.contains(&RewardType::Db) && report.db_reward == 0.0 {
        parts.push("the database differs from the gold actions' result".to_owned());
    }
    let missed: Vec<&str> = report
        .communicate
        .iter()
        .filter(|c| !c.met)
        .map(|c| c.info.as_str())
        .collect();
    if basis.contains(&RewardType::Communicate) && !missed.is_empty() {
        parts.push(format!("not told to the user: {}", missed.join(", ")));
    }
    let unmatched: Vec<&str> = report
        .actions
        .iter()
        .filter(|a| !a.matched)
        .map(|a| a.name.as_str())
        .collect();
    if basis.contains(&RewardType::Action) && report.action_reward == 0.0 && !unmatched.is_empty() {
        parts.push(format!("gold actions not taken: {}", unmatched.join(", ")));
    }
    parts.join("; ")
}

/// A domain's scores over its conversations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DomainScore {
    pub domain: String,
    /// Tasks run.
    pub n_tasks: usize,
    /// Trials per task.
    pub trials: usize,
    /// Mean reward over the conversations not masked.
    pub avg_reward: f64,
    /// pass^k for k = 1..=trials, over the tasks none of whose trials was masked.
    pub pass_hat_k: BTreeMap<u64, f64>,
    /// Tasks in pass^k.
    pub n_scored_tasks: usize,
    /// Conversations whose reward was masked.
    pub masked: usize,
}

impl DomainScore {
    /// The scores of `records` (one domain's).
    pub fn of(domain: &str, trials: usize, records: &[ConversationRecord]) -> Result<Self> {
        let mut tasks: BTreeMap<&str, Vec<Option<f64>>> = BTreeMap::new();
        for record in records {
            tasks
                .entry(&record.task_id)
                .or_default()
                .push(record.reward);
        }
        let scored: Vec<f64> = records.iter().filter_map(|r| r.reward).collect();
        let mut pairs = Vec::new();
        let mut n_scored_tasks = 0;
        for (task, rewards) in &tasks {
            if rewards.iter().all(Option::is_some) {
                n_scored_tasks += 1;
                pairs.extend(rewards.iter().flatten().map(|r| ((*task).to_owned(), *r)));
            }
        }
        Ok(DomainScore {
            domain: domain.to_owned(),
            n_tasks: tasks.len(),
            trials,
            avg_reward: if scored.is_empty() {
                f64::NAN
            } else {
                scored.iter().sum::<f64>() / scored.len() as f64
            },
            pass_hat_k: pass_hat_ks(&pairs)?,
            n_scored_tasks,
            masked: records.len() - scored.len(),
        })
    }
}

/// Runs every task of `tasks` `options.trials` times; `progress(done, total)` after each
/// conversation. Records come in task order, then trial order.
pub fn run_domain(
    domain: &Arc<Tau2Domain>,
    tasks: &[Task],
    agent: &dyn Agent,
    user: &dyn UserSimulator,
    judge: Option<&dyn AssertionJudge>,
    options: &Tau2Options,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<(DomainScore, Vec<ConversationRecord>)> {
    let jobs: Vec<(&Task, usize)> = tasks
        .iter()
        .flat_map(|task| (0..options.trials).map(move |trial| (task, trial)))
        .collect();
    let records = super::run_concurrently(
        &jobs,
        options.concurrency,
        &|&(task, trial)| run_conversation(domain, task, trial, agent, user, judge, options),
        progress,
    )
    .into_iter()
    .collect::<Result<Vec<_>>>()?;
    let score = DomainScore::of(domain.kind().as_str(), options.trials, &records)?;
    Ok((score, records))
}

/// The agent's system prompt: its role and the domain's policy.
pub fn agent_system_prompt(policy: &str) -> String {
    format!(
        "You are a customer-service agent. Help the user within the policy below, and do \
nothing it does not allow. Look records up and change them only through the tools; a message \
either calls tools or speaks to the user. Ask for what you need, confirm before you change \
anything, and tell the user what you found and did.\n\n<policy>\n{policy}\n</policy>"
    )
}

/// A task a simulated user can play: what its system prompt says.
pub trait UserBrief {
    /// The user simulator's system prompt for this task.
    fn user_system_prompt(&self) -> String;
}

impl UserBrief for Task {
    fn user_system_prompt(&self) -> String {
        user_system_prompt(self)
    }
}

/// The user simulator's system prompt for a task's scenario.
pub fn user_system_prompt(task: &Task) -> String {
    let scenario = &task.user_scenario;
    let mut brief = String::new();
    if let Some(persona) = scenario.persona.as_deref().filter(|p| !p.is_empty()) {
        brief.push_str(&format!("Persona: {persona}\n"));
    }
    match &scenario.instructions {
        UserInstructions::Text(text) => brief.push_str(text),
        UserInstructions::Structured(s) => {
            brief.push_str(&format!("Why you are calling: {}\n", s.reason_for_call));
            if let Some(known) = s.known_info.as_deref() {
                brief.push_str(&format!("What you know: {known}\n"));
            }
            if let Some(unknown) = s.unknown_info.as_deref() {
                brief.push_str(&format!("What you do not know: {unknown}\n"));
            }
            brief.push_str(&format!("How to behave: {}\n", s.task_instructions));
        }
    }
    format!(
        "You play a customer talking to a customer-service agent, one short message at a time, \
in your own words. Follow the scenario below; give a piece of information only when the agent \
asks for it, and never invent details the scenario does not give. When your goal is reached, \
or cannot be, write {STOP} on its own. If you are transferred to a human agent, write \
{TRANSFER}. If the agent asks something the scenario gives you no way to answer, write \
{OUT_OF_SCOPE}.\n\n<scenario>\n{brief}</scenario>"
    )
}

/// The text of an assistant message without its tool-call blocks.
fn spoken(text: &str) -> String {
    parse_tool_calls(text).content
}

/// An agent behind a chat-completions endpoint, with the domain's tools.
#[derive(Debug)]
pub struct EndpointAgent {
    client: ChatClient,
    system: String,
    tools: Vec<Value>,
    /// Most tokens of a reply.
    pub max_tokens: u32,
    /// Sampling temperature.
    pub temperature: f64,
}

impl EndpointAgent {
    /// An agent for `domain` behind `client`.
    pub fn new(client: ChatClient, domain: &Tau2Domain) -> Self {
        Self::with_prompt(
            client,
            agent_system_prompt(domain.policy()),
            domain.tools().specs(),
        )
    }

    /// An agent behind `client` with this system prompt and these tools.
    pub fn with_prompt(client: ChatClient, system: String, tools: &[crate::env::ToolSpec]) -> Self {
        EndpointAgent {
            client,
            system,
            tools: tools
                .iter()
                .map(crate::env::ToolSpec::openai_schema)
                .collect(),
            max_tokens: 512,
            temperature: 0.0,
        }
    }

    /// The request for the conversation so far: tool calls get ids `call_<message>_<k>` and
    /// each tool message answers the next unanswered call.
    pub fn request(&self, conversation: &[Message]) -> ChatRequest {
        self.request_as(&self.system, conversation)
    }

    /// [`EndpointAgent::request`] with another system prompt (one made for the task).
    pub fn request_as(&self, system: &str, conversation: &[Message]) -> ChatRequest {
        let mut messages = vec![ChatMsg::system(system.to_owned())];
        let mut pending: std::collections::VecDeque<String> = Default::default();
        for (idx, message) in conversation.iter().enumerate() {
            match message.role {
                Role::Assistant => {
                    let parsed = parse_tool_calls(&message.content);
                    let calls: Vec<ToolCallOut> = parsed
                        .valid_calls()
                        .enumerate()
                        .map(|(k, call)| ToolCallOut {
                            id: format!("call_{idx}_{k}"),
                            name: call.name.clone(),
                            arguments: Value::Object(call.arguments.clone()).to_string(),
                        })
                        .collect();
                    pending.extend(calls.iter().map(|c| c.id.clone()));
                    messages.push(ChatMsg::assistant_calls(parsed.content, calls));
                }
                Role::Tool => {
                    let id = pending.pop_front().unwrap_or_else(|| format!("call_{idx}"));
                    messages.push(ChatMsg::tool(id, message.content.clone()));
                }
                Role::User => messages.push(ChatMsg::user(message.content.clone())),
                Role::System => messages.push(ChatMsg::system(message.content.clone())),
            }
        }
        let mut request = ChatRequest::new(messages);
        request.tools = self.tools.clone();
        request.temperature = Some(self.temperature);
        request.max_tokens = Some(self.max_tokens);
        request
    }
}

/// An endpoint's reply in the engine's form: its text, then each call as a `<tool_call>` block
/// (a call whose arguments are not a JSON object is kept as a malformed block, so it is
/// recorded and counted as an error).
pub fn reply_text(content: &str, calls: &[ToolCallOut]) -> String {
    let mut text = content.trim().to_owned();
    for call in calls {
        if !text.is_empty() {
            text.push('\n');
        }
        match serde_json::from_str::<Value>(&call.arguments) {
            Ok(Value::Object(arguments)) => text.push_str(
                &ToolCall {
                    name: call.name.clone(),
                    arguments,
                }
                .to_block(),
            ),
            _ => text.push_str(&format!(
                "<tool_call>\n{{\"name\": {}, \"arguments\": {}}}\n</tool_call>",
                Value::from(call.name.clone()),
                call.arguments
            )),
        }
    }
    text
}

impl EndpointAgent {
    /// The endpoint's next message for a request, in the engine's form (`trial` seeds it).
    pub fn reply(
        &self,
        mut request: ChatRequest,
        trial: usize,
    ) -> std::result::Result<String, String> {
        request.seed = Some(trial as u64);
        let reply = self
            .client
            .complete(&request)
            .map_err(|f| format!("{f:?}"))?;
        Ok(reply_text(&reply.content, &reply.tool_calls))
    }
}

impl Agent for EndpointAgent {
    fn respond(
        &self,
        _task: &Task,
        trial: usize,
        conversation: &[Message],
    ) -> std::result::Result<String, String> {
        self.reply(self.request(conversation), trial)
    }
}

/// A user simulator behind a chat-completions endpoint: it sees the agent's spoken messages
/// as the other party's and its own as the assistant's, never the tools.
#[derive(Debug)]
pub struct EndpointUser {
    client: ChatClient,
    /// Most tokens of a reply.
    pub max_tokens: u32,
    /// Sampling temperature.
    pub temperature: f64,
}

impl EndpointUser {
    /// A user simulator behind `client`.
    pub fn new(client: ChatClient) -> Self {
        EndpointUser {
            client,
            max_tokens: 256,
            temperature: 0.0,
        }
    }

    /// The user simulator's request for the conversation so far.
    pub fn request(
        &self,
        task: &(impl UserBrief + ?Sized),
        conversation: &[Message],
    ) -> ChatRequest {
        let mut messages = vec![ChatMsg::system(task.user_system_prompt())];
        for message in conversation {
            match message.role {
                Role::Assistant => {
                    let text = spoken(&message.content);
                    if !text.is_empty() {
                        messages.push(ChatMsg::user(text));
                    }
                }
                Role::User => messages.push(ChatMsg::assistant(message.content.clone())),
                Role::Tool | Role::System => {}
            }
        }
        let mut request = ChatRequest::new(messages);
        request.temperature = Some(self.temperature);
        request.max_tokens = Some(self.max_tokens);
        request
    }
}

impl<T: UserBrief + ?Sized> UserSimulator<T> for EndpointUser {
    fn respond(
        &self,
        task: &T,
        trial: usize,
        conversation: &[Message],
    ) -> std::result::Result<String, String> {
        let mut request = self.request(task, conversation);
        request.seed = Some(trial as u64);
        let reply = self
            .client
            .complete(&request)
            .map_err(|f| format!("{f:?}"))?;
        let text = reply.content.trim().to_owned();
        if text.is_empty() {
            // An empty message would leave the agent nothing to answer: the reference's user
            // always says something, so this counts as the simulator failing.
            return Err("the user simulator sent an empty message".into());
        }
        Ok(text)
    }
}

/// The instruction of the NL-assertion judge.
pub const ASSERTION_JUDGE_PROMPT: &str = "You grade a customer-service conversation. You read \
the conversation between a customer, an agent and the agent's tools, and a numbered list of \
assertions about what the agent did or said. Decide for each assertion whether the \
conversation shows it to be true. Answer with one JSON object and nothing else: \
{\"verdicts\": [{\"index\": 0, \"met\": true, \"reason\": \"...\"}, ...]}, exactly one verdict \
per assertion, in order.";

/// An NL-assertion judge behind a chat-completions endpoint; its verdict is read strictly.
#[derive(Debug)]
pub struct EndpointJudge {
    client: ChatClient,
    /// Most tokens of a verdict.
    pub max_tokens: u32,
}

impl EndpointJudge {
    /// A judge behind `client`.
    pub fn new(client: ChatClient) -> Self {
        EndpointJudge {
            client,
            max_tokens: 512,
        }
    }
}

impl AssertionJudge for EndpointJudge {
    fn judge(
        &self,
        conversation: &[Message],
        assertions: &[String],
    ) -> std::result::Result<Vec<(bool, String)>, String> {
        let mut text = String::new();
        for message in conversation {
            let who = match message.role {
                Role::User => "customer",
                Role::Assistant => "agent",
                Role::Tool => "tool",
                Role::System => "system",
            };
            text.push_str(&format!("[{who}] {}\n", message.content));
        }
        let mut list = String::new();
        for (idx, assertion) in assertions.iter().enumerate() {
            list.push_str(&format!("{idx}. {assertion}\n"));
        }
        let mut request = ChatRequest::new(vec![
            ChatMsg::system(ASSERTION_JUDGE_PROMPT),
            ChatMsg::user(format!("# Conversation\n{text}\n# Assertions\n{list}")),
        ]);
        request.temperature = Some(0.0);
        request.max_tokens = Some(self.max_tokens);
        request.response_format_json = true;
        let reply = self
            .client
            .complete(&request)
            .map_err(|f| format!("{f:?}"))?;
        let met = crate::judge::parse_verdict(&reply.content, assertions.len())?;
        // The reasons are optional in the verdict; keep them when given (inside a code fence
        // too, as `parse_verdict` reads it).
        let body = crate::judge::strip_code_fence(&reply.content);
        let reasons: Vec<String> = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v.get("verdicts").and_then(Value::as_array).cloned())
            .map(|vs| {
                vs.iter()
                    .map(|v| {
                        v.get("reason")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned()
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(met
            .into_iter()
            .enumerate()
            .map(|(idx, met)| (met, reasons.get(idx).cloned().unwrap_or_default()))
            .collect())
    }
}
