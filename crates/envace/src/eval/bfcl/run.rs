//! Running BFCL tasks on a model behind a chat-completions endpoint (ours, started in-process by
//! the CLI, or any other): each task's first turn is sent with its functions as tools (or, in
//! prompt mode, described in the system prompt, with the calls read from the reply as Python),
//! greedy, the reply's calls are decoded into BFCL's form and scored, and every task is recorded
//! with its prompt, calls, verdict and reason.

use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{CategoryScore, Entry, Language, NameStyle, language, score_entry};
use crate::openai::{ChatClient, ChatMsg, ChatRequest};

/// How tasks are sent.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Most tokens of a reply.
    pub max_tokens: u32,
    /// Requests in flight at once (a server batches them).
    pub concurrency: usize,
    /// Function names with dots written as underscores, for endpoints that forbid dots.
    pub names: NameStyle,
    /// BFCL's prompt mode: the functions described in the system prompt and the calls written
    /// as a Python list in the reply, for models without tool-call training (Python
    /// categories only).
    pub prompting: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            max_tokens: 256,
            concurrency: 8,
            names: NameStyle::AsDocumented,
            prompting: false,
        }
    }
}

/// The system prompt of prompt mode, before the functions' JSON.
pub const PROMPTING_INSTRUCTION: &str = "You answer by calling functions. Reply with the calls \
only, written as one Python list: [function_name(parameter=value, ...), ...], with keyword \
arguments and Python literals as values, and nothing before or after the list. If no function \
fits the request, say so in words instead. The functions you can call, as JSON:";

/// Prompt mode's system message for a task's functions.
pub fn prompting_system(entry: &Entry) -> String {
    let docs = serde_json::to_string_pretty(&entry.functions).unwrap_or_default();
    format!("{PROMPTING_INSTRUCTION}\n{docs}")
}

/// One task as it ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRecord {
    pub category: String,
    pub id: String,
    /// The messages sent.
    pub messages: Value,
    /// The reply's text outside tool calls.
    pub content: String,
    /// The decoded calls (`[{name: {param: value}}]`), or the text when no call decoded.
    pub result: Value,
    pub valid: bool,
    pub reason: String,
    /// The acceptable calls (`[{name: {param: [acceptable values]}}]`); null for irrelevance,
    /// where the right answer is no call.
    pub expected: Value,
    /// Generated tokens the endpoint counted.
    pub completion_tokens: u64,
    /// Seconds from sending the request to its reply.
    pub secs: f64,
}

/// A JSON-schema type for a BFCL Python type.
fn schema_type(bfcl: &str) -> &str {
    match bfcl {
        "dict" => "object",
        "float" => "number",
        "tuple" => "array",
        "any" => "string",
        other => other,
    }
}

/// A BFCL parameter schema in JSON-schema terms, nested schemas too.
fn python_schema(schema: &Value) -> Value {
    let Some(map) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        let converted = match key.as_str() {
            "type" => Value::from(value.as_str().map_or("string", schema_type)),
            "properties" => Value::Object(
                value
                    .as_object()
                    .map(|props| {
                        props
                            .iter()
                            .map(|(k, v)| (k.clone(), python_schema(v)))
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            "items" => python_schema(value),
            _ => value.clone(),
        };
        out.insert(key.clone(), converted);
    }
    Value::Object(out)
}

/// The parameters of a Java or JavaScript function: every argument is source text, so each
/// parameter becomes a string whose description names the declared type.
fn source_text_schema(parameters: &Value, lang: &str) -> Value {
    let mut props = Map::new();
    if let Some(given) = parameters.get("properties").and_then(Value::as_object) {
        for (name, detail) in given {
            let declared = detail.get("type").and_then(Value::as_str).unwrap_or("any");
            let items = detail
                .pointer("/items/type")
                .and_then(Value::as_str)
                .map(|t| format!(" of {t}"))
                .unwrap_or_default();
            let description = detail
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("");
            props.insert(
                name.clone(),
                json!({
                    "type": "string",
                    "description": format!("{description} (a {lang} {declared}{items} value, written as {lang} source)").trim_start().to_owned(),
                }),
            );
        }
    }
    json!({
        "type": "object",
        "properties": props,
        "required": parameters.get("required").cloned().unwrap_or_else(|| json!([])),
    })
}

/// The task's functions as chat-completions tools.
pub fn tools(entry: &Entry, category: &str, names: NameStyle) -> Vec<Value> {
    entry
        .functions
        .iter()
        .map(|doc| {
            let name = doc.get("name").and_then(Value::as_str).unwrap_or("");
            let name = match names {
                NameStyle::AsDocumented => name.to_owned(),
                NameStyle::DotsAsUnderscores => name.replace('.', "_"),
            };
            let parameters = doc.get("parameters").cloned().unwrap_or_else(|| json!({}));
            let parameters = match language(category) {
                Language::Python => python_schema(&parameters),
                Language::Java => source_text_schema(&parameters, "Java"),
                Language::JavaScript => source_text_schema(&parameters, "JavaScript"),
            };
            json!({"type": "function", "function": {
                "name": name,
                "description": doc.get("description").cloned().unwrap_or_else(|| json!("")),
                "parameters": parameters,
            }})
        })
        .collect()
}

/// The messages of the task's first turn.
fn messages(entry: &Entry) -> Vec<ChatMsg> {
    entry
        .turns
        .first()
        .map(|turn| {
            turn.iter()
                .map(|m| match m.role.as_str() {
                    "system" => ChatMsg::system(m.content.clone()),
                    "assistant" => ChatMsg::assistant(m.content.clone()),
                    _ => ChatMsg::user(m.content.clone()),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The reply's calls in BFCL's decoded form, or its text when a call's arguments are not a JSON
/// object or it made none (scored as "no call" for irrelevance, a decoder failure elsewhere).
fn decoded(content: &str, calls: &[crate::openai::ToolCallOut]) -> Value {
    if calls.is_empty() {
        return Value::String(content.to_owned());
    }
    let mut out = Vec::new();
    for call in calls {
        match serde_json::from_str::<Value>(&call.arguments) {
            Ok(Value::Object(args)) => {
                let mut one = Map::new();
                one.insert(call.name.clone(), Value::Object(args));
                out.push(Value::Object(one));
            }
            _ => {
                return Value::String(format!(
                    "{content}<tool_call>{} {}</tool_call>",
                    call.name, call.arguments
                ));
            }
        }
    }
    Value::Array(out)
}

/// Runs `entries` of `category` through `client`; `progress(done, total)` after each task.
pub fn run_category(
    client: &ChatClient,
    entries: &[Entry],
    category: &str,
    options: &RunOptions,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> (CategoryScore, Vec<TaskRecord>) {
    let records = crate::eval::run_concurrently(
        entries,
        options.concurrency,
        &|entry| run_task(client, entry, category, options),
        progress,
    );
    let tasks = records
        .iter()
        .map(|r| (r.id.as_str(), r.valid, r.reason.as_str()));
    (CategoryScore::of_tasks(category, tasks), records)
}

fn run_task(
    client: &ChatClient,
    entry: &Entry,
    category: &str,
    options: &RunOptions,
) -> TaskRecord {
    let mut request = if options.prompting {
        let mut sent = vec![ChatMsg::system(prompting_system(entry))];
        sent.extend(messages(entry));
        ChatRequest::new(sent)
    } else {
        let mut request = ChatRequest::new(messages(entry));
        request.tools = tools(entry, category, options.names);
        request
    };
    request.temperature = Some(0.0);
    request.max_tokens = Some(options.max_tokens);
    let sent = Value::Array(request.messages.iter().map(ChatMsg::to_json).collect());
    let started = Instant::now();
    let reply = client.complete(&request);
    let secs = started.elapsed().as_secs_f64();
    let (content, result, tokens, failure) = match reply {
        Ok(reply) => {
            let result = if options.prompting && reply.tool_calls.is_empty() {
                super::pycall::parse_calls(&reply.content)
                    .unwrap_or_else(|_| Value::String(reply.content.clone()))
            } else {
                decoded(&reply.content, &reply.tool_calls)
            };
            (reply.content, result, reply.completion_tokens, None)
        }
        Err(failure) => (String::new(), Value::Null, 0, Some(failure)),
    };
    let verdict = match &failure {
        // The endpoint failed: the task is scored wrong and says why (irrelevance included).
        Some(f) => super::Verdict::fail("endpoint:failed", format!("{f:?}")),
        None => score_entry(entry, category, &result, options.names),
    };
    TaskRecord {
        category: category.to_owned(),
        id: entry.id.clone(),
        messages: sent,
        content,
        result,
        valid: verdict.valid,
        reason: verdict.reason(),
        expected: entry
            .ground_truth
            .as_ref()
            .map_or(Value::Null, |calls| Value::Array(calls.clone())),
        completion_tokens: tokens,
        secs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::ToolCallOut;

    #[test]
    fn functions_become_tools_and_replies_become_bfcl_calls() {
        let entry = Entry {
            id: "simple_python_0".into(),
            turns: vec![],
            functions: vec![
                json!({"name": "math.area", "description": "Area.", "parameters": {"type": "dict",
                "properties": {"r": {"type": "float", "description": "radius"}, "tags": {"type": "tuple", "items": {"type": "any"}}},
                "required": ["r"]}}),
            ],
            ground_truth: None,
        };
        let tool = &tools(&entry, "simple_python", NameStyle::AsDocumented)[0]["function"];
        assert_eq!(tool["name"], "math.area");
        assert_eq!(tool["parameters"]["type"], "object");
        assert_eq!(tool["parameters"]["properties"]["r"]["type"], "number");
        assert_eq!(tool["parameters"]["properties"]["tags"]["type"], "array");
        assert_eq!(
            tool["parameters"]["properties"]["tags"]["items"]["type"],
            "string"
        );
        let java = &tools(&entry, "simple_java", NameStyle::DotsAsUnderscores)[0]["function"];
        assert_eq!(java["name"], "math_area");
        assert_eq!(java["parameters"]["properties"]["r"]["type"], "string");
        assert!(
            java["parameters"]["properties"]["r"]["description"]
                .as_str()
                .unwrap()
                .contains("Java float")
        );

        let call = |args: &str| ToolCallOut {
            id: "c".into(),
            name: "math.area".into(),
            arguments: args.into(),
        };
        assert_eq!(
            decoded("", &[call("{\"r\": 2}")]),
            json!([{"math.area": {"r": 2}}])
        );
        assert_eq!(decoded("The area is 4.", &[]), json!("The area is 4."));
        assert!(
            decoded("", &[call("r=2")]).is_string(),
            "arguments that are not an object decode as text"
        );
    }
}
