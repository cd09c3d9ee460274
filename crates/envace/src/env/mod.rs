//! Real environments: the [`Environment`] trait every executable tool world implements, the
//! structured outcome of a tool call, and how an outcome is shown to the agent.
//!
//! A call goes through two stages. First the [`ToolSet`] checks the call against the tool's
//! JSON Schema: an unknown tool gives `TOOL_NOT_AVAILABLE`, arguments that do not fit give
//! `INVALID_PARAMETERS` naming the argument and what is wrong (the same codes the rehearse
//! prompt asks the model to produce, DESIGN.md §1). Only then does the tool run; a failure it
//! raises itself is `TOOL_ERROR` with the tool's own message. A call never panics.
//!
//! Environments are cheap to clone ([`Environment::box_clone`]) so that a rehearsed call can
//! later be replayed against a copy of the real state, and expose a canonical state hash
//! ([`Environment::state_hash`], sha256 hex) so two states can be compared;
//! [`Environment::delta_hash`] compares states reached from the same initial state more cheaply.
//! An environment that can no longer answer truthfully (an MCP server that crashed or hung)
//! reports an [`EnvFault`] through [`Environment::fault`]; [`EpisodeScore`] then masks the
//! episode with that reason instead of scoring it.

pub mod bfcl;
pub mod functions;
pub mod pycall;
pub mod pyjson;
pub mod tau2;
pub mod vita;

use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// Why a tool call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// The tool is not one this environment offers.
    ToolNotAvailable,
    /// The arguments do not satisfy the tool's JSON Schema.
    InvalidParameters,
    /// The tool ran and raised an error (the reference's `ValueError` and friends).
    ToolError,
    /// The environment itself could not answer (a crashed, hung or unreachable MCP server):
    /// the episode is masked ([`Environment::fault`] says why).
    EnvironmentFault,
}

impl ErrorCode {
    /// The code as written in error objects, e.g. `INVALID_PARAMETERS`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ToolNotAvailable => "TOOL_NOT_AVAILABLE",
            ErrorCode::InvalidParameters => "INVALID_PARAMETERS",
            ErrorCode::ToolError => "TOOL_ERROR",
            ErrorCode::EnvironmentFault => "ENVIRONMENT_FAULT",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A structured tool failure: `{"code": ..., "message": ...}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolFailure {
    /// What kind of failure.
    pub code: ErrorCode,
    /// The message; for `TOOL_ERROR` exactly the reference tool's message.
    pub message: String,
}

impl ToolFailure {
    /// A failure with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ToolFailure {
            code,
            message: message.into(),
        }
    }
}

/// The outcome of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// The tool returned this value. A JSON string is a plain-text result (shown unquoted).
    Success(Value),
    /// The call failed.
    Failure(ToolFailure),
}

impl ToolOutcome {
    /// Whether the call failed.
    pub fn is_failure(&self) -> bool {
        matches!(self, ToolOutcome::Failure(_))
    }

    /// The outcome as a JSON value: the result, or `{"code", "message"}` for a failure.
    pub fn to_json(&self) -> Value {
        match self {
            ToolOutcome::Success(value) => value.clone(),
            ToolOutcome::Failure(failure) => serde_json::json!({
                "code": failure.code.as_str(),
                "message": failure.message,
            }),
        }
    }
}

/// Renders an outcome the way the τ²-bench reference shows it to the agent: a string result
/// as is, any other result as Python `json.dumps(..., default=str)` with default settings
/// (record field order, `null` for absent optional fields), a failure as `Error: <message>`.
pub fn render_outcome(outcome: &ToolOutcome) -> String {
    match outcome {
        ToolOutcome::Success(Value::String(text)) => text.clone(),
        ToolOutcome::Success(value) => pyjson::dumps(value, false),
        ToolOutcome::Failure(failure) => format!("Error: {}", failure.message),
    }
}

/// One tool: name, description, JSON Schema of its parameters, and whether it changes state.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// The tool name the agent calls.
    pub name: String,
    /// What the tool does, for the agent.
    pub description: String,
    /// JSON Schema (an `object` schema) of the arguments.
    pub parameters: Value,
    /// Whether the tool can change the environment state (replayed when grading).
    pub mutates_state: bool,
}

/// The tools' names, comma-separated: the tool list of `tool_prompt = "names"` prompts.
pub fn tool_names(tools: &[ToolSpec]) -> String {
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    names.join(", ")
}

impl ToolSpec {
    /// The tool in OpenAI function format: `{"type": "function", "function": {...}}`.
    pub fn openai_schema(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        })
    }
}

/// The tools of an environment with their compiled argument validators.
pub struct ToolSet {
    specs: Vec<ToolSpec>,
    validators: Vec<jsonschema::Validator>,
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSet")
            .field(
                "tools",
                &self.specs.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl ToolSet {
    /// Compiles each tool's parameter schema.
    pub fn new(specs: Vec<ToolSpec>) -> Result<Self> {
        let validators = specs
            .iter()
            .map(|spec| {
                jsonschema::validator_for(&spec.parameters).map_err(|err| Error::ToolSchema {
                    tool: spec.name.clone(),
                    message: err.to_string(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ToolSet { specs, validators })
    }

    /// The tools, in the order they are offered.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// The tool with this name, if offered.
    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.specs.iter().find(|spec| spec.name == name)
    }

    /// Checks a call before it runs: the tool exists and the arguments fit its schema.
    /// Returns the arguments as an object.
    pub fn check<'a>(
        &self,
        name: &str,
        arguments: &'a Value,
    ) -> Result<&'a Map<String, Value>, ToolFailure> {
        let Some(idx) = self.specs.iter().position(|spec| spec.name == name) else {
            let names: Vec<&str> = self.specs.iter().map(|s| s.name.as_str()).collect();
            return Err(ToolFailure::new(
                ErrorCode::ToolNotAvailable,
                format!(
                    "tool {name:?} is not available; the tools are: {}",
                    names.join(", ")
                ),
            ));
        };
        let spec = &self.specs[idx];
        let Value::Object(args) = arguments else {
            return Err(ToolFailure::new(
                ErrorCode::InvalidParameters,
                format!(
                    "arguments of {name} must be a JSON object, got {}",
                    json_type(arguments)
                ),
            ));
        };
        let properties = spec.parameters.get("properties").and_then(Value::as_object);
        if let Some(required) = spec.parameters.get("required").and_then(Value::as_array) {
            for key in required.iter().filter_map(Value::as_str) {
                if !args.contains_key(key) {
                    return Err(ToolFailure::new(
                        ErrorCode::InvalidParameters,
                        format!("argument `{key}` of {name} is required but missing"),
                    ));
                }
            }
        }
        if let Some(properties) = properties {
            for key in args.keys() {
                if !properties.contains_key(key) {
                    let known: Vec<&str> = properties.keys().map(String::as_str).collect();
                    return Err(ToolFailure::new(
                        ErrorCode::InvalidParameters,
                        format!(
                            "argument `{key}` is not a parameter of {name}; its parameters are: {}",
                            known.join(", ")
                        ),
                    ));
                }
            }
        }
        if let Some(err) = self.validators[idx].iter_errors(arguments).next() {
            let path = err
                .instance_path()
                .as_str()
                .trim_start_matches('/')
                .to_owned();
            let path = if path.is_empty() {
                "(arguments)".to_owned()
            } else {
                path
            };
            // Name every allowed value (the validator's own message names only the first
            // two), so that a caller can correct its call from the error alone.
            let message = match err.kind() {
                jsonschema::error::ValidationErrorKind::Enum { options } => {
                    let shown: Vec<String> = options
                        .as_array()
                        .map(|values| values.iter().map(Value::to_string).collect())
                        .unwrap_or_default();
                    match shown.split_last() {
                        Some((last, rest)) if !rest.is_empty() => format!(
                            "{} is not one of {} or {last}",
                            err.instance(),
                            rest.join(", ")
                        ),
                        _ => err.to_string(),
                    }
                }
                _ => err.to_string(),
            };
            return Err(ToolFailure::new(
                ErrorCode::InvalidParameters,
                format!("argument `{path}` of {name}: {message}"),
            ));
        }
        Ok(args)
    }
}

/// JSON type name of a value, for messages.
pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// An executable tool world the agent acts in.
pub trait Environment: fmt::Debug + Send + Sync {
    /// The environment's name, e.g. `tau2/retail`.
    fn name(&self) -> &str;

    /// The tools offered, with their schemas.
    fn tools(&self) -> &[ToolSpec];

    /// The tools in OpenAI function format.
    fn tool_schemas(&self) -> Vec<Value> {
        self.tools().iter().map(ToolSpec::openai_schema).collect()
    }

    /// Puts the environment back in the initial state of its task. The seed is recorded;
    /// deterministic environments ignore it.
    fn reset(&mut self, seed: u64);

    /// Calls a tool: validates the arguments against its schema, then runs it.
    fn call(&mut self, name: &str, arguments: &Value) -> ToolOutcome;

    /// Whether calling this tool can change the state (unknown tools do not).
    fn mutates_state(&self, name: &str) -> bool {
        self.tools()
            .iter()
            .any(|spec| spec.name == name && spec.mutates_state)
    }

    /// sha256 hex of the canonical serialisation of the state.
    fn state_hash(&self) -> String;

    /// sha256 hex of how the state differs from the environment's initial state (the state
    /// right after `reset`). Two states reached from the same initial state are equal exactly
    /// when their delta hashes are; environments with large states compute it from the changed
    /// parts only. By default it is the full [`Environment::state_hash`].
    fn delta_hash(&self) -> String {
        self.state_hash()
    }

    /// An independent copy of the environment, state included.
    fn box_clone(&self) -> Box<dyn Environment>;

    /// Why the environment can no longer answer truthfully, once it cannot (built-in
    /// environments never fault). A rollout that sees a fault masks the episode.
    fn fault(&self) -> Option<EnvFault> {
        None
    }
}

/// Why an environment could not answer a call: the episode is masked, not scored.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EnvFault {
    /// A call got no answer within its timeout, on every attempt.
    Timeout {
        /// The server.
        server: String,
        /// The tool called.
        tool: String,
        /// The timeout of one attempt.
        timeout_secs: f64,
        /// Attempts made.
        attempts: u32,
    },
    /// The connection closed: the server process exited or crashed.
    Disconnected {
        /// The server.
        server: String,
        /// What was seen.
        detail: String,
    },
    /// The transport kept failing (connection refused, broken pipe) on every attempt.
    Transport {
        /// The server.
        server: String,
        /// The last error.
        detail: String,
        /// Attempts made.
        attempts: u32,
    },
}

impl fmt::Display for EnvFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvFault::Timeout {
                server,
                tool,
                timeout_secs,
                attempts,
            } => write!(
                f,
                "MCP server {server} did not answer {tool} within {timeout_secs} s ({attempts} attempt(s))"
            ),
            EnvFault::Disconnected { server, detail } => {
                write!(f, "MCP server {server} is gone: {detail}")
            }
            EnvFault::Transport {
                server,
                detail,
                attempts,
            } => write!(
                f,
                "MCP server {server} unreachable after {attempts} attempt(s): {detail}"
            ),
        }
    }
}

/// How an episode counts: scored, or masked with the reason (never a silent zero).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EpisodeScore {
    /// The judge's episode score.
    Scored {
        /// The score.
        score: f64,
    },
    /// Left out of training and metrics.
    Masked {
        /// Why.
        reason: EnvFault,
    },
}

impl EpisodeScore {
    /// The judge's score, unless the environment faulted during the episode.
    pub fn new(score: f64, env: &dyn Environment) -> Self {
        match env.fault() {
            Some(reason) => EpisodeScore::Masked { reason },
            None => EpisodeScore::Scored { score },
        }
    }
}

impl Clone for Box<dyn Environment> {
    fn clone(&self) -> Self {
        self.box_clone()
    }
}
