//! VitaBench evaluation: an agent serves a simulated user over the native delivery environment
//! ([`crate::env::vita`]) in the same conversation loop as τ²-bench, and a rubric judge grades
//! the conversation with the reference's sliding windows; Avg@k, Pass@k and Pass^k are taken
//! over repeated trials.
//!
//! Grading follows meituan-longcat/vitabench's trajectory evaluator: the task's rubrics (every
//! expected state's, then the overall ones, each once) all start unmet; the conversation is cut
//! into windows of 10 messages overlapping by 2; the judge sees one window at a time with the
//! rubrics' current states and returns their new states, which carry over to the next window.
//! The reward is 1 when every rubric ends met, else 0. A conversation cut short (step limit, too
//! many tool errors, an endpoint that failed) scores 0 without a judge. When the judge's
//! endpoint fails or its answer cannot be read, the conversation is masked (not scored) with
//! the reason, where the reference would have kept the earlier states.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use super::tau2::{
    Agent, Conversation, EndpointAgent, STOP, Tau2Options, Termination, UserBrief, UserSimulator,
    converse, termination_text,
};
use crate::chat::{Message, Role, parse_tool_calls};
use crate::env::Environment;
use crate::env::tau2::eval::pass_hat_k;
use crate::env::vita::{DeliveryEnv, VitaTask, parse_time};
use crate::error::Result;
use crate::openai::{ChatClient, ChatMsg, ChatRequest};
use crate::rehearse::excerpt;

/// The agent's first message (the reference's English default).
pub const VITA_GREETING: &str = "Hello, how can I help you?";
/// Messages in one judge window.
pub const WINDOW: usize = 10;
/// Messages two neighbouring windows share.
pub const OVERLAP: usize = 2;

const _: () = assert!(OVERLAP < WINDOW);

/// The day of the week of a `yyyy-mm-dd …` time, in English (empty when it is not one).
fn weekday(time: &str) -> String {
    parse_time(time)
        .and_then(|secs| u64::try_from(secs).ok())
        .and_then(|secs| crate::chat::strftime_utc("%A", secs).ok())
        .unwrap_or_default()
}

/// The agent's system prompt for a task: the time, and how to use the tools and talk.
pub fn agent_system_prompt(task: &VitaTask) -> String {
    format!(
        "You are a food-delivery assistant. The current time is {} ({}).\n\n\
Use the tools to look things up and to place, pay, change or cancel orders. Before you call a \
tool, make sure you know every argument it needs: ask the user for what only they can tell you, \
and look up the rest. Say only what the tools or the user told you; never invent stores, \
products, prices or times. Keep to what the user asks for. When the user's needs are met, ask \
whether they need anything else; if they do not, end the conversation by writing {STOP}.",
        task.db.time,
        weekday(&task.db.time)
    )
}

impl UserBrief for VitaTask {
    fn user_system_prompt(&self) -> String {
        let profile = serde_json::to_string_pretty(&self.user_profile).unwrap_or_default();
        format!(
            "You play a customer ordering food through an assistant, one short message at a \
time, in your own words. The current time is {} ({}). Pursue the goal below; reveal its details \
only as the assistant needs them, and never invent details it does not give. When the goal is \
reached, or cannot be, write {STOP} on its own.\n\n<profile>\n{profile}\n</profile>\n\n<goal>\n{}\n</goal>",
            self.db.time,
            weekday(&self.db.time),
            self.instructions
        )
    }
}

/// An agent behind a chat-completions endpoint with the delivery tools and the task's prompt.
#[derive(Debug)]
pub struct VitaAgent(pub EndpointAgent);

impl VitaAgent {
    /// The agent behind `client`.
    pub fn new(client: ChatClient) -> Self {
        VitaAgent(EndpointAgent::with_prompt(
            client,
            String::new(),
            crate::env::vita::delivery_tools(),
        ))
    }
}

impl Agent<VitaTask> for VitaAgent {
    fn respond(
        &self,
        task: &VitaTask,
        trial: usize,
        conversation: &[Message],
    ) -> std::result::Result<String, String> {
        let request = self.0.request_as(&agent_system_prompt(task), conversation);
        self.0.reply(request, trial)
    }
}

/// One rubric's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RubricState {
    pub rubric: String,
    pub met: bool,
    /// Why, in the judge's words (appended window by window).
    pub justification: String,
}

/// Decides a task's rubrics one window of the conversation at a time.
pub trait RubricJudge: Sync {
    /// The rubrics' states after `window` (the conversation's messages from index
    /// `window_start`, 0-based, shown numbered from `window_start + 1`), given their states
    /// before it; `Err` says why no verdict came.
    fn update(
        &self,
        task: &VitaTask,
        window: &[Message],
        window_start: usize,
        position: (usize, usize),
        states: &[RubricState],
    ) -> std::result::Result<Vec<RubricState>, String>;
}

/// The conversation's windows as `(start, messages)`: one window when it fits, else windows
/// of [`WINDOW`] messages starting every `WINDOW - OVERLAP`, the last one reaching the end.
pub fn windows(messages: &[Message]) -> Vec<(usize, &[Message])> {
    if messages.len() <= WINDOW {
        return vec![(0, messages)];
    }
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        let end = (start + WINDOW).min(messages.len());
        out.push((start, &messages[start..end]));
        if end >= messages.len() {
            break;
        }
        start += WINDOW - OVERLAP;
    }
    out
}

/// A window as the judge reads it: `[n] role: text`, tool calls as `name(arg='value', …)`
/// after the text, messages with nothing to show left out.
pub fn window_text(window: &[Message], start: usize) -> String {
    let mut lines = Vec::new();
    for (i, message) in window.iter().enumerate() {
        let role = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::System => "system",
        };
        let mut text = message.content.clone();
        if message.role == Role::Assistant {
            let parsed = parse_tool_calls(&message.content);
            let calls: Vec<String> = parsed
                .valid_calls()
                .map(|call| {
                    let args: Vec<String> = call
                        .arguments
                        .iter()
                        .map(|(k, v)| format!("{k}={}", crate::env::pyjson::repr(v)))
                        .collect();
                    format!("{}({})", call.name, args.join(", "))
                })
                .collect();
            text = parsed.content.trim().to_owned();
            if !calls.is_empty() {
                if !text.is_empty() {
                    text.push(' ');
                }
                text.push_str(&calls.join("."));
            }
        }
        if !text.is_empty() {
            lines.push(format!("[{}] {role}: {text}", start + i + 1));
        }
    }
    lines.join("\n")
}

/// One conversation as it ran, with its grade.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VitaRecord {
    /// `delivery`.
    pub domain: String,
    pub task_id: String,
    pub trial: usize,
    pub messages: Vec<Message>,
    pub termination: Termination,
    /// 1 when every rubric ended met, 0 otherwise; `None` when masked.
    pub reward: Option<f64>,
    /// Why the reward was masked (the judge failed).
    pub masked: Option<String>,
    /// Why the reward is what it is, in one line (empty for 1).
    pub reason: String,
    /// The rubrics' final states (empty when the judge was not asked).
    pub rubrics: Vec<RubricState>,
    /// Share of rubrics met.
    pub rubric_score: Option<f64>,
    /// Judge windows.
    pub windows: usize,
    pub tool_errors: usize,
    /// Calls to tools this rebuild does not run (see [`crate::env::vita::NOT_REBUILT`]).
    pub unbuilt_calls: usize,
    /// The orders at the end, as the environment holds them.
    pub final_orders: Value,
    /// The agent's private notes: with test-time rehearsal, its memory before each turn.
    pub private_notes: Vec<String>,
    /// With test-time rehearsal, the attempts behind each note (empty without).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub imagined_attempts: Vec<Vec<crate::eval::rehearsal::AttemptSummary>>,
    pub secs: f64,
}

/// Plays one conversation of `task` and grades it with `judge` (masked when there is none).
pub fn run_conversation(
    task: &VitaTask,
    trial: usize,
    agent: &dyn Agent<VitaTask>,
    user: &dyn UserSimulator<VitaTask>,
    judge: Option<&dyn RubricJudge>,
    options: &Tau2Options,
) -> VitaRecord {
    let started = Instant::now();
    let mut env = DeliveryEnv::new(task);
    env.reset(trial as u64);
    let options = Tau2Options {
        agent_may_stop: true,
        ..options.clone()
    };
    let Conversation {
        messages,
        termination,
        tool_errors,
    } = converse(&mut env, task, trial, agent, user, VITA_GREETING, &options);
    let rubrics = task.rubrics();
    let mut record = VitaRecord {
        domain: task.domain.clone(),
        task_id: task.id.clone(),
        trial,
        messages,
        termination,
        reward: None,
        masked: None,
        reason: String::new(),
        rubrics: Vec::new(),
        rubric_score: None,
        windows: 0,
        tool_errors,
        unbuilt_calls: env.unbuilt_calls(),
        final_orders: serde_json::to_value(&env.db().orders).unwrap_or(Value::Null),
        private_notes: agent.private_notes(task, trial),
        imagined_attempts: agent.private_attempts(task, trial),
        secs: 0.0,
    };
    if !record.termination.is_graded() {
        record.reward = Some(0.0);
        record.reason = format!(
            "the conversation ended by {}",
            termination_text(&record.termination)
        );
    } else if rubrics.is_empty() {
        record.reward = Some(1.0);
    } else {
        match judge {
            None => record.masked = Some("the task has rubrics and no judge was given".into()),
            Some(judge) => grade(task, judge, &rubrics, &mut record),
        }
    }
    record.secs = started.elapsed().as_secs_f64();
    record
}

/// Runs the judge over the record's windows and sets its grade.
fn grade(task: &VitaTask, judge: &dyn RubricJudge, rubrics: &[String], record: &mut VitaRecord) {
    let mut states: Vec<RubricState> = rubrics
        .iter()
        .map(|rubric| RubricState {
            rubric: rubric.clone(),
            met: false,
            justification: "Not evaluated yet".into(),
        })
        .collect();
    let cut = windows(&record.messages);
    record.windows = cut.len();
    for (idx, (start, window)) in cut.iter().enumerate() {
        match judge.update(task, window, *start, (idx + 1, cut.len()), &states) {
            Ok(updated) if updated.len() == states.len() => states = updated,
            Ok(updated) => {
                record.masked = Some(format!(
                    "the judge returned {} rubric states for {} rubrics in window {}",
                    updated.len(),
                    states.len(),
                    idx + 1
                ));
                return;
            }
            Err(why) => {
                record.masked = Some(format!("the judge failed on window {}: {why}", idx + 1));
                return;
            }
        }
    }
    let met = states.iter().filter(|s| s.met).count();
    record.rubric_score = Some(met as f64 / states.len() as f64);
    record.reward = Some(if met == states.len() { 1.0 } else { 0.0 });
    if let Some(unmet) = states.iter().find(|s| !s.met) {
        record.reason = format!(
            "rubric not met ({met} of {}): {}",
            states.len(),
            unmet.rubric
        );
    }
    record.rubrics = states;
}

/// A domain's scores over its conversations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VitaScore {
    pub domain: String,
    pub n_tasks: usize,
    pub trials: usize,
    /// Mean reward over the conversations not masked (Avg@k with k = trials).
    pub avg_at_k: f64,
    /// Pass@k (at least one of k trials succeeds) for k = 1..=trials, over the tasks none of
    /// whose trials was masked.
    pub pass_at_k: BTreeMap<u64, f64>,
    /// Pass^k (all of k trials succeed) for k = 1..=trials, over the same tasks.
    pub pass_hat_k: BTreeMap<u64, f64>,
    /// Mean share of rubrics met over the judged conversations.
    pub rubric_score: f64,
    pub n_scored_tasks: usize,
    pub masked: usize,
}

/// `1 − C(n−c, k) / C(n, k)`: the chance that k of n trials, c of them successes, include one.
pub fn pass_at_k(n: u64, c: u64, k: u64) -> f64 {
    if n < k || c > n {
        return 0.0;
    }
    if n - c < k {
        return 1.0;
    }
    let mut none = 1.0;
    for i in 0..k {
        none *= (n - c - i) as f64 / (n - i) as f64;
    }
    1.0 - none
}

impl VitaScore {
    /// The scores of `records` (one domain's).
    pub fn of(domain: &str, trials: usize, records: &[VitaRecord]) -> Result<Self> {
        let mut tasks: BTreeMap<&str, Vec<Option<f64>>> = BTreeMap::new();
        for record in records {
            tasks
                .entry(&record.task_id)
                .or_default()
                .push(record.reward);
        }
        let scored: Vec<f64> = records.iter().filter_map(|r| r.reward).collect();
        let complete: Vec<(u64, u64)> = tasks
            .values()
            .filter(|rewards| rewards.iter().all(Option::is_some))
            .map(|rewards| {
                let n = rewards.len() as u64;
                let c = rewards.iter().flatten().filter(|r| **r == 1.0).count() as u64;
                (n, c)
            })
            .collect();
        let max_k = complete.iter().map(|(n, _)| *n).min().unwrap_or(0);
        let mut pass_at = BTreeMap::new();
        let mut pass_hat = BTreeMap::new();
        for k in 1..=max_k {
            let at: f64 = complete.iter().map(|(n, c)| pass_at_k(*n, *c, k)).sum();
            let mut hat = 0.0;
            for (n, c) in &complete {
                hat += pass_hat_k(*n, *c, k)?;
            }
            pass_at.insert(k, at / complete.len() as f64);
            pass_hat.insert(k, hat / complete.len() as f64);
        }
        let judged: Vec<f64> = records.iter().filter_map(|r| r.rubric_score).collect();
        let mean = |xs: &[f64]| {
            if xs.is_empty() {
                f64::NAN
            } else {
                xs.iter().sum::<f64>() / xs.len() as f64
            }
        };
        Ok(VitaScore {
            domain: domain.to_owned(),
            n_tasks: tasks.len(),
            trials,
            avg_at_k: mean(&scored),
            pass_at_k: pass_at,
            pass_hat_k: pass_hat,
            rubric_score: mean(&judged),
            n_scored_tasks: complete.len(),
            masked: records.len() - scored.len(),
        })
    }
}

/// Runs every task `options.trials` times; `progress(done, total)` after each conversation.
/// Records come in task order, then trial order.
pub fn run_domain(
    domain: &str,
    tasks: &[VitaTask],
    agent: &dyn Agent<VitaTask>,
    user: &dyn UserSimulator<VitaTask>,
    judge: Option<&dyn RubricJudge>,
    options: &Tau2Options,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<(VitaScore, Vec<VitaRecord>)> {
    let jobs: Vec<(&VitaTask, usize)> = tasks
        .iter()
        .flat_map(|task| (0..options.trials).map(move |trial| (task, trial)))
        .collect();
    let records = super::run_concurrently(
        &jobs,
        options.concurrency,
        &|&(task, trial)| run_conversation(task, trial, agent, user, judge, options),
        progress,
    );
    let score = VitaScore::of(domain, options.trials, &records)?;
    Ok((score, records))
}

/// The rubric judge's instructions (the reference's rules, in our words).
pub const RUBRIC_JUDGE_PROMPT: &str = "You grade a conversation between a user and a \
food-delivery assistant that calls tools (tool results are shown as `tool`). The user's full \
goal has been split into rubrics. The conversation is long, so you see it one window of \
messages at a time, with every rubric's state so far; all rubrics start unmet.\n\n\
Rules:\n\
- Set a rubric to met only when the assistant's replies or tool calls in this window achieve \
it; set a met rubric back to unmet only when the assistant undoes it in this window (a user who \
changes their mind, say cancels an order, does not undo an earlier rubric).\n\
- Judge what the assistant did and told the user; what the user says is only guidance, and a \
tool result the assistant never passed on is not a recommendation. The assistant must not make \
tool results up.\n\
- An order rubric is met only if the order was really placed (the tool call succeeded), with \
exactly the quantities and no later than the time the rubric asks, whatever the user accepts.\n\
- Addresses and notes need only serve the same purpose as the rubric's text.\n\
- Leave a rubric this window does not touch as it was; append to its justification what this \
window showed, citing message numbers.\n\n\
Answer with a JSON array and nothing else, one object per rubric in the order given: \
[{\"rubric_idx\": \"rubric_0\", \"justification\": \"...\", \"meetExpectation\": true}, ...].";

/// A rubric judge behind a chat-completions endpoint.
#[derive(Debug)]
pub struct EndpointRubricJudge {
    client: ChatClient,
    /// Most tokens of an answer.
    pub max_tokens: u32,
}

impl EndpointRubricJudge {
    /// A judge behind `client`.
    pub fn new(client: ChatClient) -> Self {
        EndpointRubricJudge {
            client,
            max_tokens: 1024,
        }
    }

    /// The request for one window.
    pub fn request(
        &self,
        task: &VitaTask,
        window: &[Message],
        window_start: usize,
        (idx, total): (usize, usize),
        states: &[RubricState],
    ) -> ChatRequest {
        let current: Vec<Value> = states
            .iter()
            .enumerate()
            .map(|(i, s)| {
                serde_json::json!({
                    "rubric_idx": format!("rubric_{i}"),
                    "rubric": s.rubric,
                    "justification": s.justification,
                    "meetExpectation": s.met,
                })
            })
            .collect();
        let system = format!(
            "{RUBRIC_JUDGE_PROMPT}\n\n# Time of the conversation\n{} {}\n\n# The user's full goal\n{}\n\nThis is window {idx} of {total}.",
            task.db.time,
            weekday(&task.db.time),
            task.instructions
        );
        let user = format!(
            "<window_content>\n{}\n</window_content>\n\n<current_rubrics>\n{}\n</current_rubrics>",
            window_text(window, window_start),
            serde_json::to_string_pretty(&current).unwrap_or_default()
        );
        let mut request = ChatRequest::new(vec![ChatMsg::system(system), ChatMsg::user(user)]);
        request.temperature = Some(0.0);
        request.max_tokens = Some(self.max_tokens);
        request
    }
}

/// Reads the judge's answer: a JSON array of `{rubric_idx, justification, meetExpectation}`
/// (inside a code fence or not; an object holding one array is accepted), applied to the
/// current states. An entry naming no known rubric is ignored; a rubric without an entry keeps
/// its state.
pub fn read_rubric_answer(
    text: &str,
    states: &[RubricState],
) -> std::result::Result<Vec<RubricState>, String> {
    let body = text.trim();
    let body = match (body.find('['), body.rfind(']')) {
        (Some(open), Some(close)) if open < close => &body[open..=close],
        _ => {
            return Err(format!(
                "no JSON array in the answer: {}",
                excerpt(body, 200)
            ));
        }
    };
    let entries: Vec<Value> = serde_json::from_str(body).map_err(|e| {
        format!(
            "the answer's array is not JSON ({e}): {}",
            excerpt(body, 200)
        )
    })?;
    let mut out = states.to_vec();
    let mut touched = 0;
    for entry in &entries {
        let Some(idx) = entry
            .get("rubric_idx")
            .and_then(Value::as_str)
            .and_then(|id| id.strip_prefix("rubric_"))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|i| *i < out.len())
        else {
            continue;
        };
        if let Some(met) = entry.get("meetExpectation").and_then(Value::as_bool) {
            out[idx].met = met;
        }
        if let Some(why) = entry.get("justification").and_then(Value::as_str) {
            out[idx].justification = why.to_owned();
        }
        touched += 1;
    }
    if touched == 0 && !states.is_empty() {
        return Err(format!(
            "the answer names no rubric: {}",
            excerpt(body, 200)
        ));
    }
    Ok(out)
}

impl RubricJudge for EndpointRubricJudge {
    fn update(
        &self,
        task: &VitaTask,
        window: &[Message],
        window_start: usize,
        position: (usize, usize),
        states: &[RubricState],
    ) -> std::result::Result<Vec<RubricState>, String> {
        let request = self.request(task, window, window_start, position, states);
        let reply = self
            .client
            .complete(&request)
            .map_err(|f| format!("{f:?}"))?;
        read_rubric_answer(&reply.content, states)
    }
}
