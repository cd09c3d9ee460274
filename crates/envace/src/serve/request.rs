//! Request checks: a chat-completions body validated field by field into a [`ChatCall`] (or a
//! 400 naming the field), the tools folded into the turns for a template that cannot render
//! them, and the prompt text.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use serde_json::{Map, Value, json};

use super::json_response;
use crate::chat::{ChatTemplate, Role, ToolCall};
use crate::env::pyjson;
use crate::openai::{ChatMsg, ToolCallOut};

/// An OpenAI-style error reply.
#[derive(Debug)]
pub(super) struct ApiError {
    pub(super) status: StatusCode,
    pub(super) message: String,
    pub(super) kind: &'static str,
    pub(super) param: Option<String>,
}

impl ApiError {
    pub(super) fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()),
        }
    }

    pub(super) fn body(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
        }
    }

    pub(super) fn response(&self) -> Response<Full<Bytes>> {
        json_response(
            self.status,
            &json!({"error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": Value::Null,
            }}),
        )
    }
}

/// A validated chat-completions request.
#[derive(Debug)]
pub(super) struct ChatCall {
    /// The conversation.
    pub(super) messages: Vec<ChatMsg>,
    /// OpenAI tool objects.
    pub(super) tools: Vec<Value>,
    pub(super) temperature: f64,
    pub(super) top_p: f64,
    pub(super) max_tokens: Option<usize>,
    pub(super) stop: Vec<String>,
    pub(super) seed: Option<u64>,
    /// Answer with server-sent events, one chunk per piece of the reply.
    pub(super) stream: bool,
    /// With `stream`, a last chunk carries the token counts (`stream_options.include_usage`).
    pub(super) include_usage: bool,
}

/// The prompt text of a request: the conversation through the chat template, tools folded
/// into the turns when the template does not render them.
pub(super) fn render_prompt(
    template: &ChatTemplate,
    template_knows_tools: bool,
    call: &ChatCall,
) -> std::result::Result<String, ApiError> {
    let (messages, tools) = if template_knows_tools {
        let messages = call
            .messages
            .iter()
            .map(ChatMsg::to_template_json)
            .collect();
        (messages, call.tools.clone())
    } else {
        (fold_tools(&call.messages, &call.tools), Vec::new())
    };
    template.render(&messages, &tools, true).map_err(|e| {
        ApiError::invalid(
            "messages",
            format!("the chat template rejects this conversation: {e}"),
        )
    })
}

/// Checks a request body field by field.
pub(super) fn parse_chat_call(body: &Value) -> std::result::Result<ChatCall, ApiError> {
    let Value::Object(body) = body else {
        return Err(ApiError::body("the request body must be a JSON object"));
    };
    if let Some(model) = body.get("model")
        && !model.is_string()
    {
        return Err(ApiError::invalid(
            "model",
            format!("must be a string, not {model}"),
        ));
    }
    if let Some(n) = body.get("n").filter(|v| !v.is_null())
        && n.as_u64() != Some(1)
    {
        return Err(ApiError::invalid(
            "n",
            format!("n = {n} is not supported; this server returns one choice (n = 1)"),
        ));
    }
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(stream)) => *stream,
        Some(other) => {
            return Err(ApiError::invalid(
                "stream",
                format!("must be true or false, not {other}"),
            ));
        }
    };
    let include_usage = match body.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(_) if !stream => {
            return Err(ApiError::invalid(
                "stream_options",
                "stream_options are only allowed with stream: true",
            ));
        }
        Some(Value::Object(options)) => match options.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(include)) => *include,
            Some(other) => {
                return Err(ApiError::invalid(
                    "stream_options.include_usage",
                    format!("must be true or false, not {other}"),
                ));
            }
        },
        Some(other) => {
            return Err(ApiError::invalid(
                "stream_options",
                format!("must be an object, not {other}"),
            ));
        }
    };
    if body.get("logprobs").and_then(Value::as_bool) == Some(true) {
        return Err(ApiError::invalid(
            "logprobs",
            "logprobs are not returned by this server; leave logprobs out",
        ));
    }
    let tool_choice_none = match body.get("tool_choice") {
        None | Some(Value::Null) => false,
        Some(Value::String(choice)) if choice == "auto" => false,
        Some(Value::String(choice)) if choice == "none" => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "tool_choice",
                format!("{other} is not supported; use \"auto\" or \"none\""),
            ));
        }
    };
    let temperature = optional_number(body, "temperature", 0.0, 2.0)?.unwrap_or(1.0);
    let top_p = optional_number(body, "top_p", 0.0, 1.0)?.unwrap_or(1.0);
    if top_p <= 0.0 {
        return Err(ApiError::invalid("top_p", "must be greater than 0"));
    }
    let max_tokens = match optional_count(body, "max_completion_tokens")? {
        Some(n) => Some(n),
        None => optional_count(body, "max_tokens")?,
    };
    let stop = match body.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(idx, item)| {
                item.as_str().map(str::to_owned).ok_or_else(|| {
                    ApiError::invalid(
                        format!("stop[{idx}]"),
                        format!("must be a string, not {item}"),
                    )
                })
            })
            .collect::<std::result::Result<_, _>>()?,
        Some(other) => {
            return Err(ApiError::invalid(
                "stop",
                format!("must be a string or a list of strings, not {other}"),
            ));
        }
    };
    let seed = match body.get("seed") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .or_else(|| v.as_i64().map(|s| s as u64))
                .ok_or_else(|| ApiError::invalid("seed", format!("must be an integer, not {v}")))?,
        ),
    };
    if let Some(format) = body.get("response_format").filter(|v| !v.is_null()) {
        let kind = format.get("type").and_then(Value::as_str);
        if !matches!(kind, Some("text" | "json_object" | "json_schema")) {
            return Err(ApiError::invalid(
                "response_format.type",
                format!("must be \"text\", \"json_object\" or \"json_schema\", not {format}"),
            ));
        }
    }
    let tools = if tool_choice_none {
        Vec::new()
    } else {
        parse_tools(body.get("tools"))?
    };
    let messages = parse_messages(body.get("messages"))?;
    Ok(ChatCall {
        messages,
        tools,
        temperature,
        top_p,
        max_tokens,
        stop,
        seed,
        stream,
        include_usage,
    })
}

fn optional_number(
    body: &Map<String, Value>,
    field: &str,
    min: f64,
    max: f64,
) -> std::result::Result<Option<f64>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if (min..=max).contains(&x) => Ok(Some(x)),
            _ => Err(ApiError::invalid(
                field,
                format!("must be a number from {min} to {max}, not {v}"),
            )),
        },
    }
}

fn optional_count(
    body: &Map<String, Value>,
    field: &str,
) -> std::result::Result<Option<usize>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            _ => Err(ApiError::invalid(
                field,
                format!("must be a whole number of at least 1, not {v}"),
            )),
        },
    }
}

fn parse_tools(tools: Option<&Value>) -> std::result::Result<Vec<Value>, ApiError> {
    let items = match tools {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(ApiError::invalid(
                "tools",
                format!("must be a list of tools, not {other}"),
            ));
        }
    };
    for (idx, tool) in items.iter().enumerate() {
        let field = |name: &str| format!("tools[{idx}]{name}");
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            return Err(ApiError::invalid(
                field(".type"),
                "must be \"function\" (the only tool type served)",
            ));
        }
        let Some(function) = tool.get("function").filter(|f| f.is_object()) else {
            return Err(ApiError::invalid(field(".function"), "must be an object"));
        };
        match function.get("name").and_then(Value::as_str) {
            Some(name) if !name.trim().is_empty() => {}
            _ => {
                return Err(ApiError::invalid(
                    field(".function.name"),
                    "must be a non-empty string",
                ));
            }
        }
        if let Some(parameters) = function.get("parameters")
            && !parameters.is_object()
        {
            return Err(ApiError::invalid(
                field(".function.parameters"),
                "must be a JSON Schema object",
            ));
        }
    }
    Ok(items.clone())
}

/// The text of a message's `content`: a string, null, or a list of text parts.
fn content_text(content: Option<&Value>, field: &str) -> std::result::Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (idx, part) in parts.iter().enumerate() {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(piece)) => text.push_str(piece),
                    (kind, _) => {
                        return Err(ApiError::invalid(
                            format!("{field}[{idx}]"),
                            format!(
                                "only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported, not {}",
                                kind.unwrap_or("a part without a type")
                            ),
                        ));
                    }
                }
            }
            Ok(text)
        }
        Some(other) => Err(ApiError::invalid(
            field,
            format!("must be a string or a list of text parts, not {other}"),
        )),
    }
}

/// The request's `messages` as wire messages, checked field by field (`developer` reads as
/// `system`; a tool call's `arguments` may be a JSON text holding an object, or an object).
pub(super) fn parse_messages(
    messages: Option<&Value>,
) -> std::result::Result<Vec<ChatMsg>, ApiError> {
    let items = match messages {
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid(
                "messages",
                "must hold at least one message",
            ));
        }
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("messages", "is required"));
        }
        Some(other) => {
            return Err(ApiError::invalid(
                "messages",
                format!("must be a list of messages, not {other}"),
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (idx, message) in items.iter().enumerate() {
        let field = |name: &str| format!("messages[{idx}]{name}");
        if !message.is_object() {
            return Err(ApiError::invalid(field(""), "must be an object"));
        }
        let role = match message.get("role").and_then(Value::as_str) {
            Some("developer") => Role::System,
            Some(name) => Role::parse(name).ok_or_else(|| {
                ApiError::invalid(
                    field(".role"),
                    format!(
                        "{name:?} is not a role; use system, developer, user, assistant or tool"
                    ),
                )
            })?,
            None => return Err(ApiError::invalid(field(".role"), "is required")),
        };
        let mut msg = ChatMsg::plain(
            role,
            content_text(message.get("content"), &field(".content"))?,
        );
        if role == Role::Assistant {
            let calls = match message.get("tool_calls") {
                None | Some(Value::Null) => &[][..],
                Some(Value::Array(calls)) => &calls[..],
                Some(other) => {
                    return Err(ApiError::invalid(
                        field(".tool_calls"),
                        format!("must be a list, not {other}"),
                    ));
                }
            };
            for (j, call) in calls.iter().enumerate() {
                msg.tool_calls.push(parse_tool_call(
                    call,
                    &format!("messages[{idx}].tool_calls[{j}]"),
                )?);
            }
        }
        if role == Role::Tool {
            let text = |key: &str| match message.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) => Ok(Some(text.clone())),
                Some(other) => Err(ApiError::invalid(
                    field(&format!(".{key}")),
                    format!("must be a string, not {other}"),
                )),
            };
            msg.tool_call_id = text("tool_call_id")?;
            msg.name = text("name")?;
        }
        out.push(msg);
    }
    Ok(out)
}

/// One tool call of an assistant message, at `field` (`messages[i].tool_calls[j]`).
fn parse_tool_call(call: &Value, field: &str) -> std::result::Result<ToolCallOut, ApiError> {
    let function = call.get("function");
    let name = function
        .and_then(|f| f.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| {
            ApiError::invalid(
                format!("{field}.function.name"),
                "must be a non-empty string",
            )
        })?;
    let arguments = match function.and_then(|f| f.get("arguments")) {
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(_)) => text.clone(),
            _ => {
                return Err(ApiError::invalid(
                    format!("{field}.function.arguments"),
                    format!("must be a string holding a JSON object, not {text:?}"),
                ));
            }
        },
        Some(args @ Value::Object(_)) => args.to_string(),
        None | Some(Value::Null) => "{}".to_owned(),
        Some(other) => {
            return Err(ApiError::invalid(
                format!("{field}.function.arguments"),
                format!("must be a JSON string, not {other}"),
            ));
        }
    };
    Ok(ToolCallOut {
        id: call
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        name: name.to_owned(),
        arguments,
    })
}

/// The messages with tools, tool calls and tool responses written into plain turns, for a
/// template that does not render them (see the module doc), in the template's form.
pub(super) fn fold_tools(messages: &[ChatMsg], tools: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    let mut rest = messages;
    if !tools.is_empty() {
        let mut section = String::from(
            "# Tools\n\nTo call a tool, write <tool_call>\n{\"name\": <tool-name>, \"arguments\": <arguments-object>}\n</tool_call>, one block per call.\n<tools>",
        );
        for tool in tools {
            section.push('\n');
            section.push_str(&pyjson::dumps_with(tool, pyjson::Layout::CHAT));
        }
        section.push_str("\n</tools>");
        let system = match messages.first() {
            Some(first) if first.role == Role::System => {
                rest = &messages[1..];
                format!("{}\n\n{section}", first.content)
            }
            _ => section,
        };
        out.push(json!({"role": "system", "content": system}));
    }
    // Consecutive tool responses share one user turn.
    let mut in_responses = false;
    for message in rest {
        match message.role {
            Role::Assistant => {
                let mut content = message.content.clone();
                for call in &message.tool_calls {
                    let block = ToolCall {
                        name: call.name.clone(),
                        arguments: call.arguments_object(),
                    }
                    .to_block();
                    if !content.is_empty() {
                        content.push('\n');
                    }
                    content.push_str(&block);
                }
                out.push(json!({"role": "assistant", "content": content}));
            }
            Role::Tool => {
                let block = format!("<tool_response>\n{}\n</tool_response>", message.content);
                if in_responses
                    && let Some(Value::String(content)) =
                        out.last_mut().and_then(|last| last.get_mut("content"))
                {
                    content.push('\n');
                    content.push_str(&block);
                } else {
                    out.push(json!({"role": "user", "content": block}));
                }
            }
            _ => out.push(message.to_template_json()),
        }
        in_responses = message.role == Role::Tool;
    }
    out
}
