//! Generated training tasks: seeded, reproducible tasks over the τ²-bench retail and airline
//! databases and the stateless `functions` domain, each with a rule-decidable checklist and an
//! oracle trajectory that solves it through the real tools.
//!
//! Generated tasks live here, in `tasks/` (not under `env/`): they are data built *on top of*
//! environments, and the rule judge that scores a trajectory against a checklist is here too
//! ([`mod@judge`]).
//!
//! # What a task is
//!
//! A [`GenTask`] holds a natural-language request (one of several templates per family, with
//! slots filled from the database), one [`Checklist`] in the DESIGN.md §1 shape (standards with
//! question, focus_on, pass_condition, failure_examples and weight) whose standards a rule can
//! decide ([`Rule`]: a required call with its arguments, a fact the final answer must mention,
//! the final state hash), and an oracle trajectory: Qwen3/Hermes assistant turns with
//! `<tool_call>` blocks, the real tool responses rendered with [`render_outcome`], and a final
//! answer. The oracle is produced by running the calls on a fresh environment, so its responses
//! and the expected state hash are the real ones.
//!
//! # Difficulty
//!
//! `difficulty` (1–5) is a real parameter. Each family has a lowest difficulty; a task of
//! difficulty `d` is drawn from the families whose lowest difficulty is at most `d`, and `d`
//! then shapes the task: at 1 the ids are given, from 2 the user must be looked up by email and
//! from 4 by name and zip code, higher levels ask for more facts in the answer, more items or
//! passengers, and read-only tasks from 3 on also require the state to be unchanged. In the
//! functions domain it sets single (1–2), multiple (3), parallel (4) and parallel multiple (5)
//! calls.
//!
//! # Splits
//!
//! Train, validation and test are disjoint by user and record. Every user, product and flight
//! falls in one split by a fixed hash of its id (8 / 1 / 1 out of 10), independent of the
//! generation seed; orders and reservations follow their user. A task of a split only names
//! (in its calls) and reads (in its answer) entities of that split; [`GenTask::touched`] lists
//! them as `kind:id` keys. In the functions domain the data values (numbers, texts, dates)
//! are split the same way. Catalogue-wide reads are not counted as touching: the product list
//! (`list_all_product_types`, asked for from difficulty 2 in `variant_availability`) names every
//! product, and a record's own details show ids it refers to (an order's items, a reservation's
//! flights) without the task asking about them. Flight searches are counted: every flight a
//! search finds belongs to the task's split.
//!
//! # Seeds
//!
//! Task `i` of a generation run draws from its own generator seeded by (seed, domain, split,
//! difficulty, i) with the engine's SplitMix64 ([`crate::rng::Rng`]), whose stream never changes
//! with a dependency update: the same [`GenConfig`] gives byte-identical tasks ([`digest`]).

pub mod functions;
pub mod judge;
mod tau2_airline;
mod tau2_retail;

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::chat::{Message, Role, ToolCall};
use crate::config::{Domain, TaskSplit};
use crate::env::tau2::Tau2Domain;
use crate::env::{Environment, render_outcome};
use crate::error::{Error, Result};
use crate::rng::Rng;

pub use judge::{
    JudgeReport, StandardVerdict, episode_score, final_answer, judge, parse_tool_calls,
};

/// One rule-decidable condition of a standard.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Rule {
    /// Some tool call in the trajectory has this name and exactly these arguments (numbers
    /// compared by value, `1` equals `1.0`).
    Called {
        /// Tool name.
        name: String,
        /// The arguments, as a JSON object.
        arguments: Value,
    },
    /// The trajectory's call paired with this required call has argument `key` equal to
    /// `arguments[key]`: one argument of one required call, so that a near miss earns the
    /// arguments it got right. Required calls of a checklist are paired with actual calls to
    /// the same tool one to one, the most equal arguments first.
    Argument {
        /// Tool name.
        name: String,
        /// Every argument of the required call, as a JSON object.
        arguments: Value,
        /// The argument this standard checks.
        key: String,
    },
    /// The final answer contains this text, ignoring case unless `exact_case`.
    Mentions {
        /// The text to find.
        text: String,
        /// Whether the case must match too: set for text written all in capitals (upper-cased
        /// text, codes), whose capitals are the fact, so that an answer restating a lower-case
        /// request does not pass for an upper-cased result.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        exact_case: bool,
    },
    /// The environment's state after the trajectory is the expected one: its
    /// [`Environment::delta_hash`] (from the task's initial state) equals this one.
    StateHash {
        /// The expected final state's delta hash.
        hash: String,
    },
}

/// One standard of a checklist (DESIGN.md §1), with the rule that decides it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Standard {
    /// What the judge asks.
    pub question: String,
    /// What to look at in the trajectory.
    pub focus_on: String,
    /// When the standard is met.
    pub pass_condition: String,
    /// Examples of trajectories that fail it.
    pub failure_examples: Vec<String>,
    /// Weight in the turn's score.
    pub weight: f64,
    /// How the rule judge decides it.
    pub rule: Rule,
}

/// The standards for one user turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checklist {
    /// Index of the user turn the checklist judges (0 for single-request tasks).
    pub turn_idx: usize,
    /// The standards.
    pub standards: Vec<Standard>,
}

/// Whether `text` has letters and all of them are capitals.
fn written_in_capitals(text: &str) -> bool {
    text.chars().any(char::is_alphabetic) && !text.chars().any(char::is_lowercase)
}

/// A generated task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenTask {
    /// Unique id: `{domain}-{split}-s{seed}-d{difficulty}-{index}`.
    pub id: String,
    /// The domain whose tools solve it.
    pub domain: Domain,
    /// The task family, e.g. `cancel_pending_order`.
    pub family: &'static str,
    /// Difficulty, 1–5.
    pub difficulty: u32,
    /// The split it belongs to.
    pub split: TaskSplit,
    /// The user's request.
    pub request: String,
    /// The checklists (one: generated tasks are single requests).
    pub checklists: Vec<Checklist>,
    /// The oracle trajectory: the request, assistant turns, tool responses, final answer.
    pub oracle: Vec<Message>,
    /// Entities the task names or reads, as `kind:id` (`user:…`, `order:…`, `product:…`,
    /// `reservation:…`, `flight:…`, `value:…`), sorted.
    pub touched: Vec<String>,
}

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenConfig {
    /// The generation seed.
    pub seed: u64,
    /// Which split's users and records to draw from.
    pub split: TaskSplit,
    /// Difficulty, 1–5.
    pub difficulty: u32,
    /// How many tasks.
    pub n_tasks: usize,
    /// Families to draw from (empty: every family `difficulty` allows).
    pub families: Vec<String>,
}

/// The loaded data generation draws from: the τ²-bench domains (shared, loaded once).
#[derive(Debug, Clone)]
pub struct GenSources {
    /// The retail domain, for [`Domain::Retail`].
    pub retail: Option<Arc<Tau2Domain>>,
    /// The airline domain, for [`Domain::Airline`].
    pub airline: Option<Arc<Tau2Domain>>,
}

/// A fresh environment of a domain in its initial state.
pub fn fresh_env(domain: Domain, sources: &GenSources) -> Result<Box<dyn Environment>> {
    Ok(match domain {
        Domain::Retail => Box::new(need(&sources.retail, "retail")?.env(0)),
        Domain::Airline => Box::new(need(&sources.airline, "airline")?.env(0)),
        Domain::Functions => Box::new(crate::env::functions::FunctionsEnv::new()?),
    })
}

fn need<'a>(domain: &'a Option<Arc<Tau2Domain>>, name: &str) -> Result<&'a Arc<Tau2Domain>> {
    domain.as_ref().ok_or_else(|| Error::TaskGen {
        what: format!("domain {name}"),
        message: "its τ²-bench data was not loaded (GenSources has no such domain)".to_owned(),
    })
}

/// Generates `config.n_tasks` tasks of a domain.
pub fn generate(domain: Domain, sources: &GenSources, config: &GenConfig) -> Result<Vec<GenTask>> {
    if !(1..=5).contains(&config.difficulty) {
        return Err(Error::TaskGen {
            what: "difficulty".to_owned(),
            message: format!("must be 1 to 5, got {}", config.difficulty),
        });
    }
    let known = families(domain);
    if let Some(unknown) = config
        .families
        .iter()
        .find(|f| !known.iter().any(|(name, _)| name == f))
    {
        let names: Vec<&str> = known.iter().map(|(name, _)| *name).collect();
        return Err(Error::TaskGen {
            what: format!("family {unknown:?}"),
            message: format!(
                "is not a generated family of the {} domain; its families: {}",
                domain_name(domain),
                names.join(", ")
            ),
        });
    }
    let mut runner = Runner::new(domain, sources)?;
    let mut out = Vec::with_capacity(config.n_tasks);
    match domain {
        Domain::Retail => {
            let pools = tau2_retail::Pools::new(need(&sources.retail, "retail")?, config.split)?;
            for idx in 0..config.n_tasks {
                let mut rng = task_rng(domain, config, idx);
                let plan =
                    tau2_retail::plan(&pools, config.difficulty, &config.families, &mut rng)?;
                out.push(build(domain, config, idx, plan, &mut runner)?);
            }
        }
        Domain::Airline => {
            let pools = tau2_airline::Pools::new(need(&sources.airline, "airline")?, config.split)?;
            for idx in 0..config.n_tasks {
                let mut rng = task_rng(domain, config, idx);
                let plan =
                    tau2_airline::plan(&pools, config.difficulty, &config.families, &mut rng)?;
                out.push(build(domain, config, idx, plan, &mut runner)?);
            }
        }
        Domain::Functions => {
            for idx in 0..config.n_tasks {
                let mut rng = task_rng(domain, config, idx);
                let plan =
                    functions::plan(config.split, config.difficulty, &config.families, &mut rng);
                out.push(build(domain, config, idx, plan, &mut runner)?);
            }
        }
    }
    Ok(out)
}

/// Every task family of a domain with the lowest difficulty it appears at.
pub fn families(domain: Domain) -> Vec<(&'static str, u32)> {
    match domain {
        Domain::Retail => tau2_retail::families(),
        Domain::Airline => tau2_airline::families(),
        Domain::Functions => functions::families(),
    }
}

/// Runs tool calls on an environment of one domain, always from the initial state: calls
/// that cannot change the state run on it directly, a sequence with a state-changing call is
/// followed by a `reset` (which for τ²-bench domains copies back only the changed records).
/// Final states are compared by [`Environment::delta_hash`]. This keeps generating and
/// replaying thousands of tasks over megabyte databases fast.
#[derive(Debug)]
pub struct Runner {
    env: Box<dyn Environment>,
    initial_hash: String,
}

/// What replaying a trajectory's calls gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// One rendered response per `<tool_call>` block, in order (`Error: …` for a malformed
    /// block or a failed call).
    pub responses: Vec<String>,
    /// The delta hash of the final state ([`Environment::delta_hash`]).
    pub state_hash: String,
}

impl Runner {
    /// A runner over a fresh environment of the domain.
    pub fn new(domain: Domain, sources: &GenSources) -> Result<Self> {
        let env = fresh_env(domain, sources)?;
        let initial_hash = env.delta_hash();
        Ok(Runner { env, initial_hash })
    }

    /// Runs calls from the initial state; returns each outcome rendered (`Err` for a failure)
    /// and the final state's delta hash, and leaves the environment in the initial state.
    fn run(&mut self, calls: &[Result<ToolCall, String>]) -> (Vec<Result<String, String>>, String) {
        let mutates = calls
            .iter()
            .flatten()
            .any(|call| self.env.mutates_state(&call.name));
        let mut responses = Vec::with_capacity(calls.len());
        for call in calls {
            responses.push(match call {
                Ok(call) => {
                    let outcome = self.env.call(&call.name, &call.arguments_value());
                    if outcome.is_failure() {
                        Err(render_outcome(&outcome))
                    } else {
                        Ok(render_outcome(&outcome))
                    }
                }
                Err(reason) => Err(format!("Error: {reason}")),
            });
        }
        let hash = if mutates {
            let hash = self.env.delta_hash();
            self.env.reset(0);
            hash
        } else {
            self.initial_hash.clone()
        };
        (responses, hash)
    }

    /// Replays the `<tool_call>` blocks of a trajectory's assistant messages from the initial
    /// state.
    pub fn replay(&mut self, trajectory: &[Message]) -> Replay {
        let calls: Vec<Result<ToolCall, String>> = trajectory
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .flat_map(|m| parse_tool_calls(&m.content))
            .collect();
        let (responses, state_hash) = self.run(&calls);
        Replay {
            responses: responses
                .into_iter()
                .map(|r| r.unwrap_or_else(|e| e))
                .collect(),
            state_hash,
        }
    }

    /// Replays a trajectory and judges it against a task's checklists.
    pub fn judge(&mut self, task: &GenTask, trajectory: &[Message]) -> JudgeReport {
        let replay = self.replay(trajectory);
        judge(&task.checklists, trajectory, Some(&replay.state_hash), 1)
    }
}

fn task_rng(domain: Domain, config: &GenConfig, idx: usize) -> Rng {
    let domain_tag = match domain {
        Domain::Retail => 1,
        Domain::Airline => 2,
        Domain::Functions => 3,
    };
    let mut rng = Rng::new(config.seed);
    let mixed = rng.next_u64()
        ^ Rng::new(domain_tag).next_u64()
        ^ Rng::new(split_index(config.split) as u64 + 11).next_u64()
        ^ Rng::new(u64::from(config.difficulty) + 101).next_u64()
        ^ Rng::new(idx as u64 + 1009).next_u64();
    Rng::new(mixed)
}

/// The split name used in ids: `train`, `validation`, `test`.
pub fn split_name(split: TaskSplit) -> &'static str {
    match split {
        TaskSplit::Train => "train",
        TaskSplit::Validation => "validation",
        TaskSplit::Test => "test",
    }
}

fn split_index(split: TaskSplit) -> usize {
    match split {
        TaskSplit::Train => 0,
        TaskSplit::Validation => 1,
        TaskSplit::Test => 2,
    }
}

fn domain_name(domain: Domain) -> &'static str {
    match domain {
        Domain::Retail => "retail",
        Domain::Airline => "airline",
        Domain::Functions => "functions",
    }
}

/// The split an entity key (`user:…`, `product:…`, `flight:…`, `value:…`) falls in: a fixed
/// hash of the key, 8 of 10 buckets train, 1 validation, 1 test.
pub fn split_of(key: &str) -> TaskSplit {
    let digest = Sha256::digest(key.as_bytes());
    match digest[0] % 10 {
        8 => TaskSplit::Validation,
        9 => TaskSplit::Test,
        _ => TaskSplit::Train,
    }
}

/// A fact the final answer must state.
#[derive(Debug, Clone)]
pub(crate) struct Fact {
    /// What it is, for the standard's question ("the order status").
    pub what: String,
    /// The text that must appear.
    pub text: String,
}

/// What a family decided, before running it: the request, the assistant turns (each one or
/// more calls), the facts of the answer and the final answer text.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub family: &'static str,
    pub request: String,
    pub turns: Vec<Vec<ToolCall>>,
    /// Calls the checklist requires (usually all of them; lookups given in the request are
    /// still required when the oracle makes them).
    pub required: Vec<ToolCall>,
    pub facts: Vec<Fact>,
    pub answer: String,
    /// Whether the final state is checked (writes always; reads from difficulty 3).
    pub check_state: bool,
    pub touched: BTreeSet<String>,
}

/// Runs a plan from the initial state, renders the oracle and builds the checklist.
fn build(
    domain: Domain,
    config: &GenConfig,
    idx: usize,
    plan: Plan,
    runner: &mut Runner,
) -> Result<GenTask> {
    let id = format!(
        "{}-{}-s{}-d{}-{idx:05}",
        domain_name(domain),
        split_name(config.split),
        config.seed,
        config.difficulty
    );
    let mutates = plan
        .turns
        .iter()
        .flatten()
        .any(|call| runner.env.mutates_state(&call.name));
    let calls: Vec<Result<ToolCall, String>> =
        plan.turns.iter().flatten().cloned().map(Ok).collect();
    let (responses, final_hash) = runner.run(&calls);
    let mut responses = responses.into_iter();
    let mut oracle = vec![Message {
        role: Role::User,
        content: plan.request.clone(),
    }];
    for turn in &plan.turns {
        let blocks: Vec<String> = turn.iter().map(ToolCall::to_block).collect();
        oracle.push(Message {
            role: Role::Assistant,
            content: blocks.join("\n"),
        });
        for call in turn {
            let content = match responses.next() {
                Some(Ok(text)) => text,
                Some(Err(text)) => {
                    return Err(Error::TaskGen {
                        what: format!("task {id} (family {})", plan.family),
                        message: format!("oracle call {} failed: {text}", call.to_block()),
                    });
                }
                None => String::new(),
            };
            oracle.push(Message {
                role: Role::Tool,
                content,
            });
        }
    }
    oracle.push(Message {
        role: Role::Assistant,
        content: plan.answer.clone(),
    });
    for fact in &plan.facts {
        if !plan
            .answer
            .to_lowercase()
            .contains(&fact.text.to_lowercase())
        {
            return Err(Error::TaskGen {
                what: format!("task {id} (family {})", plan.family),
                message: format!(
                    "the oracle answer {:?} does not state {} ({:?})",
                    plan.answer, fact.what, fact.text
                ),
            });
        }
    }
    let mut standards = Vec::new();
    for call in &plan.required {
        let keys: Vec<&String> = call.arguments.keys().collect();
        if !keys.is_empty() {
            // One standard per argument, sharing the call's weight of 1.
            let weight = 1.0 / keys.len() as f64;
            for key in keys {
                let value = &call.arguments[key.as_str()];
                standards.push(Standard {
                    question: format!("Did the agent call {} with {key} = {value}?", call.name),
                    focus_on: format!("the agent's {} tool calls", call.name),
                    pass_condition: format!(
                        "The call to {} that matches {} best has {key} = {value}",
                        call.name,
                        call.arguments_value()
                    ),
                    failure_examples: vec![
                        format!("{} is never called", call.name),
                        format!("{} is called with a different {key}", call.name),
                    ],
                    weight,
                    rule: Rule::Argument {
                        name: call.name.clone(),
                        arguments: call.arguments_value(),
                        key: key.clone(),
                    },
                });
            }
            continue;
        }
        standards.push(Standard {
            question: format!("Did the agent call {} with the right arguments?", call.name),
            focus_on: format!("the agent's {} tool calls", call.name),
            pass_condition: format!(
                "A call to {} with exactly the arguments {}",
                call.name,
                call.arguments_value()
            ),
            failure_examples: vec![
                format!("{} is never called", call.name),
                format!("{} is called with a different argument value", call.name),
            ],
            weight: 1.0,
            rule: Rule::Called {
                name: call.name.clone(),
                arguments: call.arguments_value(),
            },
        });
    }
    for fact in &plan.facts {
        standards.push(Standard {
            question: format!("Does the final answer tell the user {}?", fact.what),
            focus_on: "the agent's final answer".to_owned(),
            pass_condition: format!("The final answer contains {:?}", fact.text),
            failure_examples: vec![
                format!("The answer omits {}", fact.what),
                format!("The answer states a wrong value for {}", fact.what),
            ],
            weight: 1.0,
            rule: Rule::Mentions {
                text: fact.text.clone(),
                exact_case: written_in_capitals(&fact.text),
            },
        });
    }
    if plan.check_state {
        let what = if mutates {
            "the database ends exactly in the state the requested change produces"
        } else {
            "the database is left unchanged"
        };
        standards.push(Standard {
            question: "Is the final database state the expected one?".to_owned(),
            focus_on: "the environment state after the trajectory".to_owned(),
            pass_condition: format!("The state hash equals the oracle's: {what}"),
            failure_examples: vec![
                "A write with a wrong argument".to_owned(),
                "A missing or extra write".to_owned(),
            ],
            weight: 2.0,
            rule: Rule::StateHash { hash: final_hash },
        });
    }
    Ok(GenTask {
        id,
        domain,
        family: plan.family,
        difficulty: config.difficulty,
        split: config.split,
        request: plan.request,
        checklists: vec![Checklist {
            turn_idx: 0,
            standards,
        }],
        oracle,
        touched: plan.touched.into_iter().collect(),
    })
}

/// sha256 hex of the tasks' canonical JSON: equal digests mean identical tasks.
pub fn digest(tasks: &[GenTask]) -> String {
    let mut hasher = Sha256::new();
    for task in tasks {
        match serde_json::to_string(task) {
            Ok(text) => hasher.update(text.as_bytes()),
            // A task always serialises (string keys only); mark the impossible case anyway.
            Err(_) => hasher.update(b"<unserialisable>"),
        }
        hasher.update(b"\n");
    }
    hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The entries of a family table `(name, lowest difficulty, planner)` a task is drawn from:
/// those named in `families`, else those allowed at `difficulty`.
pub(crate) fn allowed_families<'a, T>(
    table: &'a [(&'static str, u32, T)],
    difficulty: u32,
    families: &[String],
) -> Vec<&'a (&'static str, u32, T)> {
    table
        .iter()
        .filter(|(name, lowest, _)| {
            if families.is_empty() {
                *lowest <= difficulty
            } else {
                families.iter().any(|f| f == name)
            }
        })
        .collect()
}

/// The family names of a table of `(name, lowest difficulty, planner)` rows.
pub(crate) fn family_names<T>(table: &[(&'static str, u32, T)]) -> Vec<(&'static str, u32)> {
    table.iter().map(|(name, d, _)| (*name, *d)).collect()
}

/// Draws a family of `table` allowed at this difficulty (or among `families`) and plans a task
/// with it (`plan_with` returns `None` when the sample does not fit), drawing again until one
/// fits; `what` names the table in the error after 500 draws.
pub(crate) fn plan_from_table<T>(
    table: &[(&'static str, u32, T)],
    what: &str,
    difficulty: u32,
    families: &[String],
    rng: &mut Rng,
    mut plan_with: impl FnMut(&T, &mut Rng) -> Option<Plan>,
) -> Result<Plan> {
    let allowed = allowed_families(table, difficulty, families);
    for _ in 0..500 {
        let Some((_, _, family)) = rng.pick(&allowed) else {
            break;
        };
        if let Some(plan) = plan_with(family, rng) {
            return Ok(plan);
        }
    }
    Err(Error::TaskGen {
        what: what.to_owned(),
        message: format!(
            "no task fits after 500 draws at difficulty {difficulty}; is the split empty?"
        ),
    })
}

/// One of `templates`, drawn from `rng`, filled with `slots` ([`fill`]).
pub(crate) fn pick_text(rng: &mut Rng, templates: &[&str], slots: &[(&str, String)]) -> String {
    fill(rng.pick(templates).copied().unwrap_or(""), slots)
}

/// `text` with its first letter in upper case.
pub(crate) fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Fills a template: each `{name}` is replaced by its slot value.
pub(crate) fn fill(template: &str, slots: &[(&str, String)]) -> String {
    let mut out = template.to_owned();
    for (name, value) in slots {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}
