//! Tool calls in an assistant turn: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
//! blocks (several per turn, DESIGN.md §1) parsed into structured calls, and every malformed
//! block into a structured error that says what is wrong and where. Never panics, whatever
//! the text: a bad model output is data.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::env::pyjson;

/// The tag that opens a tool call.
pub const OPEN_TAG: &str = "<tool_call>";
/// The tag that closes a tool call.
pub const CLOSE_TAG: &str = "</tool_call>";

/// One well-formed tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool's name; never empty.
    pub name: String,
    /// The arguments object.
    pub arguments: Map<String, Value>,
}

impl ToolCall {
    /// A call of `name` with these `(key, value)` arguments, in order.
    pub fn new(name: &str, arguments: Vec<(&str, Value)>) -> Self {
        ToolCall {
            name: name.to_owned(),
            arguments: arguments
                .into_iter()
                .map(|(key, value)| (key.to_owned(), value))
                .collect(),
        }
    }

    /// The arguments as one JSON object value.
    pub fn arguments_value(&self) -> Value {
        Value::Object(self.arguments.clone())
    }

    /// The call as the model writes it: `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`.
    pub fn to_block(&self) -> String {
        let mut body = Map::new();
        body.insert("name".to_owned(), Value::from(self.name.clone()));
        body.insert(
            "arguments".to_owned(),
            Value::Object(self.arguments.clone()),
        );
        format!(
            "{OPEN_TAG}\n{}\n{CLOSE_TAG}",
            pyjson::dumps_with(&Value::Object(body), pyjson::Layout::CHAT)
        )
    }
}

/// What is wrong with a tool-call block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallErrorKind {
    /// `<tool_call>` with no `</tool_call>` before the next `<tool_call>` or the end.
    UnclosedTag,
    /// `</tool_call>` with no `<tool_call>` before it.
    UnexpectedClosingTag,
    /// The block is not valid JSON.
    InvalidJson,
    /// The JSON is not an object.
    NotAnObject,
    /// No `"name"`, or it is not a non-empty string.
    InvalidName,
    /// No `"arguments"`, or it is neither an object nor a string holding a JSON object.
    InvalidArguments,
}

/// A malformed tool-call block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallError {
    /// What is wrong.
    pub kind: ToolCallErrorKind,
    /// A sentence saying what is wrong, with the value at fault.
    pub message: String,
    /// Byte range of the block (tags included) in the parsed text.
    pub span: (usize, usize),
}

impl ToolCallError {
    /// The rehearsal error code of every malformed call (DESIGN.md §1).
    pub fn code(&self) -> &'static str {
        "INVALID_TOOL_CALL_FORMAT"
    }
}

/// An assistant turn split into its text and its tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnParse {
    /// The text outside the tool-call blocks, trimmed.
    pub content: String,
    /// Each block in order: the call, or why it is malformed.
    pub calls: Vec<Result<ToolCall, ToolCallError>>,
}

impl TurnParse {
    /// Whether the turn holds any tool-call block (well-formed or not).
    pub fn has_calls(&self) -> bool {
        !self.calls.is_empty()
    }

    /// The well-formed calls only.
    pub fn valid_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.calls.iter().filter_map(|c| c.as_ref().ok())
    }
}

/// Splits `text` into content and tool-call blocks. A block ends at the first `</tool_call>`
/// after a complete JSON value (so tag texts inside JSON strings are fine), else at the first
/// `</tool_call>`. Each block's body (whitespace around it ignored) must be a JSON object with a non-empty string `"name"` and an `"arguments"` object
/// (a string holding a JSON object is accepted too, as chat templates allow); other keys are
/// ignored.
pub fn parse_tool_calls(text: &str) -> TurnParse {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut pos = 0;
    while pos < text.len() {
        let rest = &text[pos..];
        let next_open = rest.find(OPEN_TAG);
        let next_close = rest.find(CLOSE_TAG);
        match (next_open, next_close) {
            (None, None) => {
                content.push_str(rest);
                break;
            }
            // A closing tag with no opener before it.
            (open, Some(close)) if open.is_none_or(|open| close < open) => {
                content.push_str(&rest[..close]);
                let start = pos + close;
                let end = start + CLOSE_TAG.len();
                calls.push(Err(ToolCallError {
                    kind: ToolCallErrorKind::UnexpectedClosingTag,
                    message: format!("{CLOSE_TAG} at byte {start} closes no {OPEN_TAG}"),
                    span: (start, end),
                }));
                pos = end;
            }
            (Some(open), _) => {
                content.push_str(&rest[..open]);
                let start = pos + open;
                let body_start = start + OPEN_TAG.len();
                let after = &text[body_start..];
                // A JSON body may hold the tag texts inside its strings: when the block starts
                // with a JSON value followed by the closing tag, that is the block.
                if let Some(close) = json_then_close(after) {
                    let end = body_start + close + CLOSE_TAG.len();
                    calls.push(parse_body(&after[..close], (start, end)));
                    pos = end;
                    continue;
                }
                let close = after.find(CLOSE_TAG);
                let reopen = after.find(OPEN_TAG);
                match close {
                    Some(close) if reopen.is_none_or(|reopen| close < reopen) => {
                        let body = &after[..close];
                        let end = body_start + close + CLOSE_TAG.len();
                        calls.push(parse_body(body, (start, end)));
                        pos = end;
                    }
                    _ => {
                        let end = reopen.map_or(text.len(), |reopen| body_start + reopen);
                        calls.push(Err(ToolCallError {
                            kind: ToolCallErrorKind::UnclosedTag,
                            message: format!(
                                "{OPEN_TAG} at byte {start} has no {CLOSE_TAG} before {}",
                                if reopen.is_some() {
                                    "the next <tool_call>"
                                } else {
                                    "the end of the turn"
                                }
                            ),
                            span: (start, end),
                        }));
                        pos = end;
                    }
                }
            }
            // Unreachable by the guard above, kept total so that the parser cannot panic.
            (None, Some(close)) => {
                content.push_str(&rest[..close]);
                pos += close + CLOSE_TAG.len();
            }
        }
    }
    TurnParse {
        content: content.trim().to_owned(),
        calls,
    }
}

/// When `after` (the text after an opening tag) starts with a JSON value, then optional
/// whitespace, then the closing tag: the byte offset of that closing tag.
fn json_then_close(after: &str) -> Option<usize> {
    let mut values = serde_json::Deserializer::from_str(after).into_iter::<serde::de::IgnoredAny>();
    values.next()?.ok()?;
    let value_end = values.byte_offset();
    let rest = after.get(value_end..)?;
    let gap = rest.len() - rest.trim_start().len();
    rest.trim_start()
        .starts_with(CLOSE_TAG)
        .then_some(value_end + gap)
}

fn parse_body(body: &str, span: (usize, usize)) -> Result<ToolCall, ToolCallError> {
    let error = |kind, message: String| ToolCallError {
        kind,
        message,
        span,
    };
    let value: Value = serde_json::from_str(body.trim()).map_err(|e| {
        error(
            ToolCallErrorKind::InvalidJson,
            format!("the tool call is not valid JSON: {e}"),
        )
    })?;
    let Value::Object(mut object) = value else {
        return Err(error(
            ToolCallErrorKind::NotAnObject,
            format!("the tool call is {}, not a JSON object", json_kind(&value)),
        ));
    };
    let name = match object.remove("name") {
        Some(Value::String(name)) if !name.trim().is_empty() => name,
        Some(Value::String(_)) => {
            return Err(error(
                ToolCallErrorKind::InvalidName,
                "\"name\" is empty".to_owned(),
            ));
        }
        Some(other) => {
            return Err(error(
                ToolCallErrorKind::InvalidName,
                format!("\"name\" is {}, not a string", json_kind(&other)),
            ));
        }
        None => {
            return Err(error(
                ToolCallErrorKind::InvalidName,
                "the tool call has no \"name\"".to_owned(),
            ));
        }
    };
    let arguments = match object.remove("arguments") {
        Some(Value::Object(arguments)) => arguments,
        Some(Value::String(text)) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(arguments)) => arguments,
            _ => {
                return Err(error(
                    ToolCallErrorKind::InvalidArguments,
                    format!("\"arguments\" of {name} is a string that holds no JSON object"),
                ));
            }
        },
        Some(other) => {
            return Err(error(
                ToolCallErrorKind::InvalidArguments,
                format!(
                    "\"arguments\" of {name} is {}, not an object",
                    json_kind(&other)
                ),
            ));
        }
        None => {
            return Err(error(
                ToolCallErrorKind::InvalidArguments,
                format!("the call of {name} has no \"arguments\""),
            ));
        }
    };
    Ok(ToolCall { name, arguments })
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
