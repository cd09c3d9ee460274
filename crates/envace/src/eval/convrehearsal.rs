//! Test-time private rehearsal on the conversation benchmarks (τ²-bench, VitaBench): before each
//! of its turns the agent imagines attempts at the turn, playing the tools itself through the
//! rehearse protocol, and then acts for real with the memory of those attempts.
//!
//! An imagined attempt starts from the real conversation so far. The agent's model writes its
//! next message (sampled, with the attempt's own seed); every tool call in it is answered by the
//! same model in the rehearse role ([`crate::rehearse::rehearse_messages`], read strictly by
//! [`parse_execution_result`]; an unreadable answer ends the attempt, as in training); the
//! attempt goes on until the agent speaks to the user, or `max_calls` calls were imagined. Only
//! the evaluated model is asked while rehearsing: no environment, no user simulator, no judge.
//! *Parallel* attempts are independent; *sequential* attempt k sees the memory of attempts
//! 1..k−1. The memory (the held-out rehearsal's lines: each call with its imagined response,
//! then the reply or why the attempt ended) goes in a user turn just before the user's last
//! message, as the held-out tasks place it (`memory_position = "before_request"`), and stays
//! there for every step of the turn; the turn itself runs against the real environment.

use std::collections::HashMap;
use std::sync::Mutex;

use super::rehearsal::{AttemptSummary, CallSummary, MEMORY_HEADER};
use super::tau2::{Agent, EndpointAgent, reply_text};
use crate::chat::{Message, Role, parse_tool_calls};
use crate::config::RehearsalMode;
use crate::env::ToolSpec;
use crate::openai::{ChatMsg, ChatReply, ChatRequest};
use crate::rehearse::{
    CallUnderTest, RehearseInput, ends_trajectory, parse_execution_result, rehearse_messages,
    render_for_agent,
};

/// A chat model asked for completions: the endpoint client, or a scripted one in tests.
pub trait ChatModel: Sync {
    /// The model's reply to `request`, or why none came.
    fn chat(&self, request: &ChatRequest) -> std::result::Result<ChatReply, String>;
}

impl ChatModel for crate::openai::ChatClient {
    fn chat(&self, request: &ChatRequest) -> std::result::Result<ChatReply, String> {
        self.complete(request).map_err(|f| format!("{f:?}"))
    }
}

/// How much to rehearse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RehearsalBudget {
    /// Parallel or sequential.
    pub style: RehearsalMode,
    /// Imagined attempts before each turn.
    pub attempts: usize,
    /// Most tool calls imagined in one attempt.
    pub max_calls: usize,
    /// Longest memory, in characters (each attempt gets an equal share).
    pub max_memory_chars: usize,
}

impl RehearsalBudget {
    /// `parallel:N` or `sequential:N` (N ≥ 1).
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let (style, n) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?}: give STYLE:N, e.g. parallel:4 or sequential:2"))?;
        let style = match style {
            "parallel" => RehearsalMode::Parallel,
            "sequential" => RehearsalMode::Sequential,
            other => {
                return Err(format!(
                    "{text:?}: the style {other:?} is not parallel or sequential"
                ));
            }
        };
        let attempts: usize = n
            .parse()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("{text:?}: N must be a whole number from 1"))?;
        Ok(RehearsalBudget {
            style,
            attempts,
            max_calls: 4,
            max_memory_chars: 2400,
        })
    }

    /// `parallel:4`, the form [`RehearsalBudget::parse`] reads.
    pub fn label(&self) -> String {
        let style = match self.style {
            RehearsalMode::Sequential => "sequential",
            _ => "parallel",
        };
        format!("{style}:{}", self.attempts)
    }
}

/// The memory text of `attempts` within `max_chars`: the header, then each attempt's line in
/// an equal share (its compact line when the whole one does not fit, cut when even that does
/// not).
pub fn memory_text(attempts: &[AttemptSummary], max_chars: usize) -> String {
    let mut text = MEMORY_HEADER.to_owned();
    if attempts.is_empty() {
        return text;
    }
    let share = max_chars.saturating_sub(MEMORY_HEADER.len() + 1) / attempts.len();
    for (idx, attempt) in attempts.iter().enumerate() {
        let line = attempt.line(idx);
        let line = if line.chars().count() <= share {
            line
        } else {
            let compact = attempt.compact_line(idx);
            if compact.chars().count() <= share {
                compact
            } else {
                compact.chars().take(share).collect()
            }
        };
        if !line.is_empty() {
            text.push('\n');
            text.push_str(&line);
        }
    }
    text
}

/// A memory made before one turn, and the imagined attempts it summarises.
type Note = (String, Vec<AttemptSummary>);

/// An agent that rehearses privately before each of its turns (see the module's comment).
pub struct RehearsingAgent<'a, T: ?Sized> {
    /// Builds requests: the tools, call ids, the reply's form, `max_tokens`, `temperature`.
    pub agent: &'a EndpointAgent,
    /// The evaluated model: it acts, and it plays the tools while rehearsing.
    pub model: &'a dyn ChatModel,
    /// The agent's system prompt for a task.
    pub system: &'a (dyn Fn(&T) -> String + Sync),
    /// The environment's tools, for the rehearse prompt.
    pub tools: &'a [ToolSpec],
    pub budget: RehearsalBudget,
    /// Sampling temperature of imagined attempts (the committed turn keeps the agent's).
    pub temperature: f64,
    /// The memory of each conversation's current turn: (task address, trial) → (where the
    /// turn starts, memory).
    memories: Mutex<HashMap<(usize, usize), (usize, String)>>,
    /// Every memory made, per conversation, in order, with the attempts it summarises.
    notes: Mutex<HashMap<(usize, usize), Vec<Note>>>,
    /// Imagined attempts and calls so far, for reports.
    counts: Mutex<(usize, usize)>,
}

impl<T: ?Sized> std::fmt::Debug for RehearsingAgent<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RehearsingAgent")
            .field("budget", &self.budget)
            .field("temperature", &self.temperature)
            .finish_non_exhaustive()
    }
}

impl<'a, T: ?Sized> RehearsingAgent<'a, T> {
    /// An agent acting through `agent`'s requests on `model`, rehearsing `budget`.
    pub fn new(
        agent: &'a EndpointAgent,
        model: &'a dyn ChatModel,
        system: &'a (dyn Fn(&T) -> String + Sync),
        tools: &'a [ToolSpec],
        budget: RehearsalBudget,
    ) -> Self {
        RehearsingAgent {
            agent,
            model,
            system,
            tools,
            budget,
            temperature: 0.7,
            memories: Mutex::new(HashMap::new()),
            notes: Mutex::new(HashMap::new()),
            counts: Mutex::new((0, 0)),
        }
    }

    /// Imagined attempts and imagined calls so far.
    pub fn counts(&self) -> (usize, usize) {
        *self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The request for `conversation` with `memory` as a user turn before the user's last
    /// message.
    fn request(&self, system: &str, conversation: &[Message], memory: Option<&str>) -> ChatRequest {
        let mut request = self.agent.request_as(system, conversation);
        if let Some(memory) = memory {
            let at = request
                .messages
                .iter()
                .rposition(|m| m.role == Role::User)
                .unwrap_or(request.messages.len());
            request
                .messages
                .insert(at, ChatMsg::user(memory.to_owned()));
        }
        request
    }

    /// One imagined attempt at the turn that follows `conversation`.
    fn imagine(
        &self,
        system: &str,
        conversation: &[Message],
        memory: Option<&str>,
        seed: u64,
    ) -> AttemptSummary {
        let mut imagined = conversation.to_vec();
        let mut calls = Vec::new();
        let mut n_calls = 0;
        let outcome = loop {
            let mut request = self.request(system, &imagined, memory);
            request.temperature = Some(self.temperature);
            request.seed = Some(seed.wrapping_add(n_calls as u64));
            let text = match self.model.chat(&request) {
                Ok(reply) => reply_text(&reply.content, &reply.tool_calls),
                Err(why) => break format!("ended: the model failed ({why})"),
            };
            let parsed = parse_tool_calls(&text);
            imagined.push(Message::new(Role::Assistant, text.clone()));
            if parsed.calls.is_empty() {
                break AttemptSummary::answer(parsed.content.trim());
            }
            let mut ended = None;
            for call in &parsed.calls {
                n_calls += 1;
                let under_test = match call {
                    Ok(call) => CallUnderTest::Parsed {
                        name: call.name.clone(),
                        arguments: serde_json::Value::Object(call.arguments.clone()),
                    },
                    Err(bad) => CallUnderTest::Malformed {
                        raw: text
                            .get(bad.span.0..bad.span.1)
                            .unwrap_or_default()
                            .to_owned(),
                    },
                };
                let response = self.rehearse(&imagined, &text, under_test.clone(), seed, n_calls);
                let (name, arguments) = match &under_test {
                    CallUnderTest::Parsed { name, arguments } => {
                        (name.clone(), arguments.to_string())
                    }
                    CallUnderTest::Malformed { raw } => {
                        ("malformed call".to_owned(), format!("{raw:?}"))
                    }
                };
                let shown = render_for_agent(&response);
                calls.push(CallSummary {
                    name,
                    arguments,
                    response: shown.clone(),
                });
                imagined.push(Message::new(Role::Tool, shown));
                if ends_trajectory(&response) {
                    ended = Some("ended by an unreadable rehearsed response".to_owned());
                    break;
                }
            }
            if let Some(why) = ended {
                break why;
            }
            if n_calls >= self.budget.max_calls {
                break "no reply within the imagined-call limit".to_owned();
            }
        };
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.0 += 1;
        counts.1 += n_calls;
        AttemptSummary {
            answered: outcome.starts_with("answer: "),
            calls,
            outcome,
        }
    }

    /// The model's answer, in the rehearse role, to one call of an imagined attempt.
    fn rehearse(
        &self,
        imagined: &[Message],
        caller: &str,
        call: CallUnderTest,
        seed: u64,
        n: usize,
    ) -> serde_json::Value {
        let before = &imagined[..imagined.len().saturating_sub(1)];
        let conversation = before
            .iter()
            .map(|m| (m.role.as_str().to_owned(), m.content.clone()))
            .collect();
        let messages = rehearse_messages(&RehearseInput {
            tools: self.tools,
            examples: Vec::new(),
            conversation,
            caller_message: caller,
            call,
            max_conversation_chars: 6000,
            schemas: true,
        });
        let mut request = ChatRequest::new(crate::rehearse::as_chat(&messages));
        request.temperature = Some(self.temperature);
        request.max_tokens = Some(self.agent.max_tokens);
        request.seed = Some(seed ^ (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        match self.model.chat(&request) {
            Ok(reply) => match parse_execution_result(&reply.content) {
                Ok(value) => value,
                Err(bad) => bad.to_json(),
            },
            Err(why) => crate::rehearse::error_json("EMPTY_SIMULATOR_OUTPUT", &why),
        }
    }

    /// The memory for the turn that follows `conversation`, and the attempts behind it.
    fn memory(
        &self,
        system: &str,
        conversation: &[Message],
        trial: usize,
    ) -> (String, Vec<AttemptSummary>) {
        let base =
            (trial as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03) ^ conversation.len() as u64;
        let mut attempts: Vec<AttemptSummary> = Vec::new();
        match self.budget.style {
            RehearsalMode::Sequential => {
                for k in 0..self.budget.attempts {
                    let memory = (!attempts.is_empty())
                        .then(|| memory_text(&attempts, self.budget.max_memory_chars));
                    let attempt = self.imagine(
                        system,
                        conversation,
                        memory.as_deref(),
                        base + k as u64 * 7919,
                    );
                    attempts.push(attempt);
                }
            }
            _ => {
                let ks: Vec<usize> = (0..self.budget.attempts).collect();
                attempts = super::run_concurrently(
                    &ks,
                    self.budget.attempts,
                    &|k| self.imagine(system, conversation, None, base + *k as u64 * 7919),
                    &|_, _| {},
                );
            }
        }
        (
            memory_text(&attempts, self.budget.max_memory_chars),
            attempts,
        )
    }
}

impl<T: ?Sized + Sync> Agent<T> for RehearsingAgent<'_, T> {
    fn respond(
        &self,
        task: &T,
        trial: usize,
        conversation: &[Message],
    ) -> std::result::Result<String, String> {
        let system = (self.system)(task);
        // The turn starts after the user's last message; its memory is made once, there.
        let turn_start = conversation
            .iter()
            .rposition(|m| m.role == Role::User)
            .map_or(0, |i| i + 1);
        let key = (task as *const T as *const u8 as usize, trial);
        let cached = self
            .memories
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .filter(|(start, _)| *start == turn_start)
            .map(|(_, memory)| memory.clone());
        let memory = match cached {
            Some(memory) => memory,
            None => {
                let (memory, attempts) = self.memory(&system, &conversation[..turn_start], trial);
                self.memories
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, (turn_start, memory.clone()));
                self.notes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(key)
                    .or_default()
                    .push((memory.clone(), attempts));
                memory
            }
        };
        let mut request = self.request(&system, conversation, Some(&memory));
        request.seed = Some(trial as u64);
        let reply = self.model.chat(&request)?;
        Ok(reply_text(&reply.content, &reply.tool_calls))
    }

    fn private_notes(&self, task: &T, trial: usize) -> Vec<String> {
        let key = (task as *const T as *const u8 as usize, trial);
        self.notes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .map(|notes| notes.iter().map(|(memory, _)| memory.clone()).collect())
            .unwrap_or_default()
    }

    fn private_attempts(&self, task: &T, trial: usize) -> Vec<Vec<AttemptSummary>> {
        let key = (task as *const T as *const u8 as usize, trial);
        self.notes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .map(|notes| notes.iter().map(|(_, attempts)| attempts.clone()).collect())
            .unwrap_or_default()
    }
}
