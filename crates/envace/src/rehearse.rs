//! The rehearse protocol (DESIGN.md §1): the prompt that asks the policy (or an external
//! simulator) to play a tool, the strict parser of its `<execution_result>` answer with the
//! published error codes, and the one JSON form in which real and rehearsed responses are
//! compared, stored and shown to the acting policy.
//!
//! # One JSON form for every response
//!
//! A rehearsed response is a non-empty JSON object or array. A real [`ToolOutcome`] is mapped
//! to that form by [`outcome_json`]: an object or array result as is, a plain-text or scalar
//! result as `{"result": …}`, a failure as `{"error": {"code", "message"}}`. The acting policy
//! sees any response through [`render_for_agent`], which inverts that mapping (`{"result":
//! "text"}` shows as `text`, an error as `Error: message`, anything else as Python-style JSON),
//! so that a perfect simulator gives the acting policy byte-identical context to the real
//! environment, and SFT can teach the Rehearse role the real responses in its own format.
//!
//! # Parser failures
//!
//! A rehearse answer that cannot be read becomes an error object carrying
//! `"error_tool_call": true` (see [`SimError::to_json`]); such a response ends the trajectory.
//! Validation errors the simulator itself reports inside a well-formed answer
//! (`INVALID_TOOL_CALL_FORMAT`, `TOOL_NOT_AVAILABLE`, `INVALID_PARAMETERS`) are ordinary
//! responses.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::env::{ToolOutcome, ToolSpec, pyjson};

/// The tag that opens a rehearsed response.
pub const RESULT_OPEN: &str = "<execution_result>";
/// The tag that closes a rehearsed response.
pub const RESULT_CLOSE: &str = "</execution_result>";

/// The error code of a malformed `<tool_call>` block.
pub const INVALID_TOOL_CALL_FORMAT: &str = "INVALID_TOOL_CALL_FORMAT";

/// The system instruction of the rehearse prompt.
pub const SYSTEM_PROMPT: &str = "You are a silent tool executor. You do not talk to anyone: you \
receive one tool call and answer with what the tool returns. Check the call before answering, \
in this order. 1. If the call is not a well-formed JSON object with a \"name\" and an \
\"arguments\" object, answer the error code INVALID_TOOL_CALL_FORMAT. 2. If the tool is not \
among the candidate tools, answer the error code TOOL_NOT_AVAILABLE. 3. If the arguments do not \
satisfy the tool's JSON schema, answer the error code INVALID_PARAMETERS. 4. Otherwise produce \
the result the tool would return: consistent with its schema, with the conversation so far and \
with the real responses shown for this tool. Errors are written as {\"error\": {\"code\": \
CODE, \"message\": TEXT}}; a text result as {\"result\": TEXT}. Reply with exactly one block \
<execution_result>\nJSON\n</execution_result> holding a non-empty JSON object or array, and \
nothing else.";

/// Why a rehearse answer could not be read (DESIGN.md §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SimErrorCode {
    /// Nothing but whitespace (after an optional `<think>` block).
    EmptySimulatorOutput,
    /// No `<execution_result>` tag at all.
    NoExecutionResultTagFound,
    /// The tag is there but not as exactly one `<execution_result>…</execution_result>` pair
    /// with nothing else around it.
    ExecutionResultTagMalformed,
    /// The text inside the tags is not JSON.
    SimulatorJsonDecodeError,
    /// The JSON is not a non-empty object or array.
    InvalidExecutionResultType,
}

impl SimErrorCode {
    /// The code as written in error objects.
    pub fn as_str(self) -> &'static str {
        match self {
            SimErrorCode::EmptySimulatorOutput => "EMPTY_SIMULATOR_OUTPUT",
            SimErrorCode::NoExecutionResultTagFound => "NO_EXECUTION_RESULT_TAG_FOUND",
            SimErrorCode::ExecutionResultTagMalformed => "EXECUTION_RESULT_TAG_MALFORMED",
            SimErrorCode::SimulatorJsonDecodeError => "SIMULATOR_JSON_DECODE_ERROR",
            SimErrorCode::InvalidExecutionResultType => "INVALID_EXECUTION_RESULT_TYPE",
        }
    }
}

/// A rehearse answer that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimError {
    /// What is wrong.
    pub code: SimErrorCode,
    /// A sentence naming what was found.
    pub message: String,
}

impl SimError {
    fn new(code: SimErrorCode, message: impl Into<String>) -> Self {
        SimError {
            code,
            message: message.into(),
        }
    }

    /// The error object the acting policy sees; it carries `error_tool_call` and so ends the
    /// trajectory.
    pub fn to_json(&self) -> Value {
        json!({
            "error": {"code": self.code.as_str(), "message": self.message},
            "error_tool_call": true,
        })
    }
}

/// Whether a response ends the trajectory: an object with `"error_tool_call": true`.
pub fn ends_trajectory(response: &Value) -> bool {
    response.get("error_tool_call").and_then(Value::as_bool) == Some(true)
}

/// Parses a rehearse answer strictly: an optional leading `<think>…</think>` is dropped, then
/// the text must be exactly one `<execution_result>` block (whitespace around it allowed)
/// holding a non-empty JSON object or array.
pub fn parse_execution_result(text: &str) -> std::result::Result<Value, SimError> {
    let mut body = text.trim();
    if let Some(rest) = body.strip_prefix("<think>") {
        body = match rest.find("</think>") {
            Some(end) => rest[end + "</think>".len()..].trim(),
            // An unclosed think block holds no answer.
            None => "",
        };
    }
    if body.is_empty() {
        return Err(SimError::new(
            SimErrorCode::EmptySimulatorOutput,
            "the simulator produced no output",
        ));
    }
    let n_open = body.matches(RESULT_OPEN).count();
    let n_close = body.matches(RESULT_CLOSE).count();
    if n_open == 0 && n_close == 0 {
        return Err(SimError::new(
            SimErrorCode::NoExecutionResultTagFound,
            format!("no {RESULT_OPEN} tag in {:?}", excerpt(body, 120)),
        ));
    }
    if n_open != 1 || n_close != 1 {
        return Err(SimError::new(
            SimErrorCode::ExecutionResultTagMalformed,
            format!(
                "expected one {RESULT_OPEN}…{RESULT_CLOSE} pair, found {n_open} opening and {n_close} closing tag(s)"
            ),
        ));
    }
    let Some(inner) = body
        .strip_prefix(RESULT_OPEN)
        .and_then(|rest| rest.strip_suffix(RESULT_CLOSE))
    else {
        return Err(SimError::new(
            SimErrorCode::ExecutionResultTagMalformed,
            format!(
                "the answer must be only the {RESULT_OPEN} block, got {:?}",
                excerpt(body, 120)
            ),
        ));
    };
    let value: Value = serde_json::from_str(inner.trim()).map_err(|e| {
        SimError::new(
            SimErrorCode::SimulatorJsonDecodeError,
            format!(
                "the execution result is not JSON ({e}): {:?}",
                excerpt(inner, 120)
            ),
        )
    })?;
    match &value {
        Value::Object(map) if !map.is_empty() => Ok(value),
        Value::Array(items) if !items.is_empty() => Ok(value),
        other => Err(SimError::new(
            SimErrorCode::InvalidExecutionResultType,
            format!(
                "the execution result must be a non-empty object or array, got {}",
                excerpt(&other.to_string(), 120)
            ),
        )),
    }
}

/// The first `max_chars` characters of `text`, with `…` when it was cut.
pub(crate) fn excerpt(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(max_chars).collect();
        format!("{cut}…")
    }
}

/// A real outcome in the rehearse JSON form (see the module documentation).
pub fn outcome_json(outcome: &ToolOutcome) -> Value {
    match outcome {
        ToolOutcome::Success(value @ Value::Object(map)) if !map.is_empty() => value.clone(),
        ToolOutcome::Success(value @ Value::Array(items)) if !items.is_empty() => value.clone(),
        ToolOutcome::Success(value) => json!({ "result": value }),
        ToolOutcome::Failure(failure) => error_json(failure.code.as_str(), &failure.message),
    }
}

/// `{"error": {"code": code, "message": message}}`.
pub fn error_json(code: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message}})
}

/// The error code of a response in the rehearse JSON form, if it is an error.
pub fn error_code(response: &Value) -> Option<&str> {
    response.get("error")?.get("code")?.as_str()
}

/// How the acting policy sees a response in the rehearse JSON form: the inverse of
/// [`outcome_json`], so a real outcome renders exactly as [`crate::env::render_outcome`] does.
pub fn render_for_agent(response: &Value) -> String {
    if let Value::Object(map) = response {
        if map.len() == 1 {
            if let Some(result) = map.get("result") {
                return match result {
                    Value::String(text) => text.clone(),
                    other => pyjson::dumps(other, false),
                };
            }
            if let Some(message) = map
                .get("error")
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
            {
                return format!("Error: {message}");
            }
        }
        if ends_trajectory(response)
            && let Some(message) = map
                .get("error")
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
        {
            return format!("Error: {message}");
        }
    }
    pyjson::dumps(response, false)
}

/// The target a Rehearse role learns for a response: the exact block it should write.
pub fn execution_result_block(response: &Value) -> String {
    format!(
        "{RESULT_OPEN}\n{}\n{RESULT_CLOSE}",
        pyjson::dumps(response, false)
    )
}

/// A real response kept as a few-shot example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    /// The call's arguments.
    pub arguments: Value,
    /// The real response, in the rehearse JSON form.
    pub response: Value,
}

/// Recent real responses per tool, the few-shot examples of the rehearse prompt. Keeps the
/// latest `capacity` distinct examples of each tool.
#[derive(Debug, Clone, Default)]
pub struct ResponseCache {
    capacity: usize,
    by_tool: BTreeMap<String, VecDeque<Example>>,
}

impl ResponseCache {
    /// An empty cache keeping up to `capacity` examples per tool.
    pub fn new(capacity: usize) -> Self {
        ResponseCache {
            capacity,
            by_tool: BTreeMap::new(),
        }
    }

    /// Remembers a real response of `tool` (a repeat of a kept example moves it to the front).
    pub fn record(&mut self, tool: &str, arguments: &Value, response: &Value) {
        if self.capacity == 0 {
            return;
        }
        let kept = self.by_tool.entry(tool.to_owned()).or_default();
        kept.retain(|e| !(e.arguments == *arguments && e.response == *response));
        kept.push_front(Example {
            arguments: arguments.clone(),
            response: response.clone(),
        });
        kept.truncate(self.capacity);
    }

    /// How many examples of each tool are kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Up to `n` of the most recent examples of `tool`, newest first.
    pub fn examples(&self, tool: &str, n: usize) -> Vec<Example> {
        self.by_tool
            .get(tool)
            .map(|kept| kept.iter().take(n).cloned().collect())
            .unwrap_or_default()
    }

    /// Every tool's kept examples, newest first (for checkpoints).
    pub fn entries(&self) -> Vec<(String, Vec<Example>)> {
        self.by_tool
            .iter()
            .map(|(tool, kept)| (tool.clone(), kept.iter().cloned().collect()))
            .collect()
    }

    /// Number of examples kept over all tools.
    pub fn len(&self) -> usize {
        self.by_tool.values().map(VecDeque::len).sum()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The call being rehearsed: parsed, or the raw block when it is malformed.
#[derive(Debug, Clone, PartialEq)]
pub enum CallUnderTest {
    /// A well-formed call.
    Parsed {
        /// Tool name.
        name: String,
        /// Arguments object.
        arguments: Value,
    },
    /// A malformed `<tool_call>` block, as written.
    Malformed {
        /// The raw block text.
        raw: String,
    },
}

/// Everything the rehearse prompt shows (DESIGN.md §1).
#[derive(Debug, Clone)]
pub struct RehearseInput<'a> {
    /// The environment's tools.
    pub tools: &'a [ToolSpec],
    /// Real responses of the same tool.
    pub examples: Vec<Example>,
    /// The conversation before the caller's message, as `(role, content)`.
    pub conversation: Vec<(String, String)>,
    /// The caller's whole assistant message, as generated.
    pub caller_message: &'a str,
    /// The call to answer.
    pub call: CallUnderTest,
    /// Longest conversation excerpt shown, in characters (older text is cut first).
    pub max_conversation_chars: usize,
    /// Whether the prompt lists each candidate tool's description and the called tool's JSON
    /// schema (`tool_prompt = "schemas"`) or only the candidate tools' names.
    pub schemas: bool,
}

/// The rehearse prompt as chat messages (`system`, `user`), ready for a chat template or an
/// OpenAI-compatible endpoint.
pub fn rehearse_messages(input: &RehearseInput<'_>) -> Vec<Value> {
    let mut user = String::new();
    user.push_str("# Candidate tools\n");
    if input.schemas {
        for tool in input.tools {
            user.push_str(&format!(
                "- {}: {}\n",
                tool.name,
                first_line(&tool.description)
            ));
        }
    } else {
        user.push_str(&crate::env::tool_names(input.tools));
        user.push('\n');
    }
    if !input.examples.is_empty() {
        user.push_str("\n# Real responses of this tool\n");
        for example in &input.examples {
            user.push_str(&format!(
                "arguments: {}\n{}\n",
                pyjson::dumps(&example.arguments, false),
                execution_result_block(&example.response)
            ));
        }
    }
    user.push_str("\n# Conversation so far\n");
    let mut conversation = String::new();
    for (role, content) in &input.conversation {
        conversation.push_str(&format!("[{role}] {content}\n"));
    }
    let n_chars = conversation.chars().count();
    if n_chars > input.max_conversation_chars {
        let skip = n_chars - input.max_conversation_chars;
        conversation = format!("…{}", conversation.chars().skip(skip).collect::<String>());
    }
    user.push_str(&conversation);
    user.push_str("\n# Caller message\n");
    user.push_str(input.caller_message);
    user.push_str("\n\n# Current call\n");
    match &input.call {
        CallUnderTest::Parsed { name, arguments } => {
            user.push_str(&format!("tool: {name}\n"));
            match input.tools.iter().find(|t| &t.name == name) {
                Some(_) if !input.schemas => {}
                Some(spec) => user.push_str(&format!(
                    "schema: {}\n",
                    pyjson::dumps(&spec.parameters, false)
                )),
                None => user.push_str("schema: (no such candidate tool)\n"),
            }
            user.push_str(&format!("arguments: {}\n", pyjson::dumps(arguments, false)));
        }
        CallUnderTest::Malformed { raw } => {
            user.push_str(&format!("raw call (could not be parsed): {raw}\n"));
        }
    }
    vec![
        json!({"role": "system", "content": SYSTEM_PROMPT}),
        json!({"role": "user", "content": user}),
    ]
}

/// The rehearse prompt's messages as chat-completion messages (a role the prompt does not use
/// reads as `user`), for a simulator behind an endpoint.
pub fn as_chat(messages: &[Value]) -> Vec<crate::openai::ChatMsg> {
    messages
        .iter()
        .map(|m| {
            let content = m["content"].as_str().unwrap_or_default().to_owned();
            let role = match m["role"].as_str().and_then(crate::chat::Role::parse) {
                Some(role @ (crate::chat::Role::System | crate::chat::Role::Assistant)) => role,
                _ => crate::chat::Role::User,
            };
            crate::openai::ChatMsg::plain(role, content)
        })
        .collect()
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default().trim()
}

/// Key paths of a JSON value: object keys joined with `.`, array elements as `[]`, so that
/// two lists of records with the same fields have the same key set.
pub fn key_paths(value: &Value) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    collect_keys(value, "", &mut out);
    out
}

fn collect_keys(value: &Value, prefix: &str, out: &mut std::collections::BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                out.insert(path.clone());
                collect_keys(child, &path, out);
            }
        }
        Value::Array(items) => {
            for child in items {
                collect_keys(child, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

/// Leaf values of a JSON value by exact path (`a.b[2].c`), scalars and empty containers.
pub fn leaves(value: &Value) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    collect_leaves(value, String::new(), &mut out);
    out
}

fn collect_leaves(value: &Value, path: String, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                collect_leaves(child, child_path, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (idx, child) in items.iter().enumerate() {
                collect_leaves(child, format!("{path}[{idx}]"), out);
            }
        }
        other => {
            out.insert(path, other.clone());
        }
    }
}

/// `true` for JSON values equal by value (`1` equals `1.0`), objects compared as maps.
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(xs), Value::Array(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| json_equal(x, y))
        }
        (Value::Object(xs), Value::Object(ys)) => {
            xs.len() == ys.len()
                && xs
                    .iter()
                    .all(|(k, x)| ys.get(k).is_some_and(|y| json_equal(x, y)))
        }
        _ => a == b,
    }
}

/// An object from `(key, value)` pairs, in order.
pub fn object(pairs: Vec<(&str, Value)>) -> Value {
    let mut map = Map::new();
    for (key, value) in pairs {
        map.insert(key.to_owned(), value);
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::{ErrorCode, ToolFailure, render_outcome};

    #[test]
    fn every_parser_error_code_is_reachable() {
        let cases = [
            ("", SimErrorCode::EmptySimulatorOutput),
            ("  \n ", SimErrorCode::EmptySimulatorOutput),
            ("<think>hmm</think>  ", SimErrorCode::EmptySimulatorOutput),
            ("<think>never closed", SimErrorCode::EmptySimulatorOutput),
            ("{\"a\": 1}", SimErrorCode::NoExecutionResultTagFound),
            (
                "<execution_result>{\"a\": 1}",
                SimErrorCode::ExecutionResultTagMalformed,
            ),
            (
                "<execution_result>{\"a\": 1}</execution_result><execution_result>[1]</execution_result>",
                SimErrorCode::ExecutionResultTagMalformed,
            ),
            (
                "Sure! <execution_result>{\"a\": 1}</execution_result>",
                SimErrorCode::ExecutionResultTagMalformed,
            ),
            (
                "<execution_result>\n{\"a\": \n</execution_result>",
                SimErrorCode::SimulatorJsonDecodeError,
            ),
            (
                "<execution_result>\n\"text\"\n</execution_result>",
                SimErrorCode::InvalidExecutionResultType,
            ),
            (
                "<execution_result>\n{}\n</execution_result>",
                SimErrorCode::InvalidExecutionResultType,
            ),
            (
                "<execution_result>[]</execution_result>",
                SimErrorCode::InvalidExecutionResultType,
            ),
        ];
        for (text, code) in cases {
            let err = parse_execution_result(text).expect_err(text);
            assert_eq!(err.code, code, "{text:?}: {}", err.message);
            assert!(ends_trajectory(&err.to_json()));
        }
    }

    #[test]
    fn well_formed_answers_parse() {
        let value =
            parse_execution_result("<think>the order exists</think>\n<execution_result>\n{\"status\": \"pending\"}\n</execution_result>\n")
                .expect("well formed");
        assert_eq!(value, json!({"status": "pending"}));
        let list =
            parse_execution_result("<execution_result>[1, 2]</execution_result>").expect("array");
        assert_eq!(list, json!([1, 2]));
        assert!(!ends_trajectory(&value));
    }

    #[test]
    fn real_outcomes_round_trip_through_the_rehearse_form() {
        let outcomes = [
            ToolOutcome::Success(json!({"order_id": "#W1", "items": [{"price": 10.5}]})),
            ToolOutcome::Success(json!([{"a": 1}])),
            ToolOutcome::Success(json!("Transfer successful")),
            ToolOutcome::Success(json!(42.0)),
            ToolOutcome::Success(json!([])),
            ToolOutcome::Success(json!({})),
            ToolOutcome::Failure(ToolFailure::new(ErrorCode::ToolError, "Order not found")),
            ToolOutcome::Failure(ToolFailure::new(
                ErrorCode::InvalidParameters,
                "missing order_id",
            )),
        ];
        for outcome in outcomes {
            let as_json = outcome_json(&outcome);
            assert!(
                as_json.as_object().is_some_and(|m| !m.is_empty())
                    || as_json.as_array().is_some_and(|a| !a.is_empty())
            );
            assert_eq!(
                render_for_agent(&as_json),
                render_outcome(&outcome),
                "{outcome:?}"
            );
            let block = execution_result_block(&as_json);
            assert_eq!(
                parse_execution_result(&block).expect("own block parses"),
                as_json
            );
        }
    }

    #[test]
    fn cache_keeps_recent_distinct_examples() {
        let mut cache = ResponseCache::new(2);
        for idx in 0..3 {
            cache.record("t", &json!({"i": idx}), &json!({"r": idx}));
        }
        cache.record("t", &json!({"i": 2}), &json!({"r": 2}));
        let kept = cache.examples("t", 5);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].arguments, json!({"i": 2}));
        assert_eq!(kept[1].arguments, json!({"i": 1}));
        assert!(cache.examples("other", 1).is_empty());
    }

    #[test]
    fn prompt_names_every_part() {
        let tools = vec![ToolSpec {
            name: "get_order".to_owned(),
            description: "Get an order.\nMore text.".to_owned(),
            parameters: json!({"type": "object", "properties": {"order_id": {"type": "string"}}}),
            mutates_state: false,
        }];
        let input = RehearseInput {
            tools: &tools,
            examples: vec![Example {
                arguments: json!({"order_id": "#W0"}),
                response: json!({"status": "delivered"}),
            }],
            conversation: vec![("user".to_owned(), "Where is #W1?".to_owned())],
            caller_message: "<tool_call>\n{\"name\": \"get_order\", \"arguments\": {\"order_id\": \"#W1\"}}\n</tool_call>",
            call: CallUnderTest::Parsed {
                name: "get_order".to_owned(),
                arguments: json!({"order_id": "#W1"}),
            },
            max_conversation_chars: 2000,
            schemas: true,
        };
        let messages = rehearse_messages(&input);
        assert_eq!(messages.len(), 2);
        let user = messages[1]["content"].as_str().expect("text");
        for part in [
            "- get_order: Get an order.",
            "{\"status\": \"delivered\"}",
            "[user] Where is #W1?",
            "# Caller message",
            "tool: get_order",
            "\"order_id\": {\"type\": \"string\"}",
            "arguments: {\"order_id\": \"#W1\"}",
        ] {
            assert!(user.contains(part), "missing {part:?} in\n{user}");
        }
        // With tool names only: the name line, no description and no schema.
        let names = RehearseInput {
            schemas: false,
            ..input
        };
        let messages = rehearse_messages(&names);
        let user = messages[1]["content"].as_str().expect("text");
        assert!(user.contains("# Candidate tools\nget_order\n"), "{user}");
        assert!(user.contains("tool: get_order\narguments: "), "{user}");
        assert!(!user.contains("Get an order"), "{user}");
        assert!(!user.contains("schema:"), "{user}");
    }

    #[test]
    fn key_paths_and_leaves() {
        let value = json!({"a": {"b": 1}, "c": [{"d": 2}, {"d": 3, "e": []}]});
        let keys: Vec<String> = key_paths(&value).into_iter().collect();
        assert_eq!(keys, ["a", "a.b", "c", "c[].d", "c[].e"]);
        let leaves: Vec<String> = leaves(&value).into_keys().collect();
        assert_eq!(leaves, ["a.b", "c[0].d", "c[1].d", "c[1].e"]);
        assert!(json_equal(&json!({"x": 1}), &json!({"x": 1.0})));
        assert!(!json_equal(&json!({"x": 1}), &json!({"x": 2})));
    }
}
