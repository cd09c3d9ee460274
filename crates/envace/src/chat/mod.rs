//! Chat templates: a model's own Jinja template (from `tokenizer_config.json` or GGUF metadata)
//! rendered as Hugging Face `transformers` renders it, and a ChatML fallback for tiny models.
//!
//! HF renders with Python `jinja2` (`trim_blocks`, `lstrip_blocks`, loop controls), a `tojson`
//! filter that is `json.dumps(x, ensure_ascii=False)` (`", "` and `": "` separators, no HTML
//! escaping), `raise_exception`, `strftime_now`, and Python string and dict methods (`startswith`, `split`,
//! `items`, ...). This module gives minijinja the same, so that renderings are byte-identical.

mod message;
mod tool_call;

use std::path::Path;

use minijinja::value::{Kwargs, Value as JinjaValue};
use minijinja::{Environment, ErrorKind};
use serde_json::{Map, Value};

use crate::env::pyjson;
use crate::error::{Error, Result};
use crate::model::Gguf;

pub use message::{Message, Role};
pub use tool_call::{
    CLOSE_TAG, OPEN_TAG, ToolCall, ToolCallError, ToolCallErrorKind, TurnParse, parse_tool_calls,
};

/// The ChatML template with tools and `<tool_call>` blocks that tiny models use.
pub const CHATML_TEMPLATE: &str = include_str!("chatml.jinja");

const TEMPLATE_NAME: &str = "chat";

/// A compiled chat template with the special tokens it may refer to.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source_name: String,
    bos_token: String,
    eos_token: String,
    mentions_tools: bool,
}

impl ChatTemplate {
    /// Compiles `source`; `source_name` names it in errors. `bos_token` / `eos_token` are what
    /// the template sees under those names (empty when the model has none).
    pub fn new(source: &str, source_name: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| template_error(source_name, &e))?;
        env.set_syntax(syntax);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(|e| template_error(source_name, &e))?;
        Ok(ChatTemplate {
            env,
            source_name: source_name.to_owned(),
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            mentions_tools: source.contains("tools"),
        })
    }

    /// Whether the template's source refers to tools (so it renders them itself; otherwise a
    /// server folds them into the messages).
    pub fn mentions_tools(&self) -> bool {
        self.mentions_tools
    }

    /// EnvACE's ChatML template ([`CHATML_TEMPLATE`]) for tiny models.
    pub fn chatml() -> Result<Self> {
        Self::new(CHATML_TEMPLATE, "built-in ChatML", "", "<|im_end|>")
    }

    /// The `chat_template` of a Hugging Face `tokenizer_config.json`, with its `bos_token` and
    /// `eos_token`.
    pub fn from_tokenizer_config(path: &Path) -> Result<Self> {
        let source_name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let config: Value = serde_json::from_str(&text).map_err(|e| Error::ChatTemplate {
            source_name: source_name.clone(),
            message: format!("not valid JSON: {e}"),
        })?;
        let template = match config.get("chat_template") {
            Some(Value::String(template)) => template.clone(),
            // The list form: `[{"name": "default", "template": "..."}, ...]`.
            Some(Value::Array(named)) => named
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(|t| t.get("template"))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| Error::ChatTemplate {
                    source_name: source_name.clone(),
                    message: "chat_template is a list without a \"default\" template".to_owned(),
                })?,
            _ => {
                return Err(Error::ChatTemplate {
                    source_name,
                    message: "has no chat_template string".to_owned(),
                });
            }
        };
        let token = |key: &str| match config.get(key) {
            Some(Value::String(token)) => token.clone(),
            // `{"content": "<s>", ...}` (an AddedToken).
            Some(Value::Object(added)) => added
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            _ => String::new(),
        };
        Self::new(
            &template,
            &format!("{source_name}, chat_template"),
            &token("bos_token"),
            &token("eos_token"),
        )
    }

    /// The chat template of a GGUF file (`tokenizer.chat_template`), with the texts of its
    /// BOS and EOS tokens.
    pub fn from_gguf(gguf: &Gguf) -> Result<Self> {
        let source_name = format!("{}, tokenizer.chat_template", gguf.path().display());
        let template = gguf.chat_template().ok_or_else(|| Error::ChatTemplate {
            source_name: source_name.clone(),
            message: "the GGUF metadata has no chat template".to_owned(),
        })?;
        Self::new(
            &template,
            &source_name,
            &gguf
                .special_token("tokenizer.ggml.bos_token_id")
                .unwrap_or_default(),
            &gguf
                .special_token("tokenizer.ggml.eos_token_id")
                .unwrap_or_default(),
        )
    }

    /// Renders a conversation: `messages` as Hugging Face chat messages (`role`, `content`,
    /// optional `tool_calls`), `tools` as JSON schemas of functions (none: no tools section),
    /// ending with the assistant header when `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[Value],
        tools: &[Value],
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.render_with(messages, tools, add_generation_prompt, &Map::new())
    }

    /// [`ChatTemplate::render`] with more template variables, e.g. `enable_thinking: false`.
    pub fn render_with(
        &self,
        messages: &[Value],
        tools: &[Value],
        add_generation_prompt: bool,
        extra: &Map<String, Value>,
    ) -> Result<String> {
        let mut context = extra.clone();
        context.insert("messages".to_owned(), Value::from(messages.to_vec()));
        if !tools.is_empty() {
            context.insert("tools".to_owned(), Value::from(tools.to_vec()));
        }
        context.insert(
            "add_generation_prompt".to_owned(),
            Value::from(add_generation_prompt),
        );
        context.insert("bos_token".to_owned(), Value::from(self.bos_token.clone()));
        context.insert("eos_token".to_owned(), Value::from(self.eos_token.clone()));
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| template_error(&self.source_name, &e))?;
        template
            .render(JinjaValue::from(minijinja::value::Serde(&Value::Object(
                context,
            ))))
            .map_err(|e| template_error(&self.source_name, &e))
    }
}

fn template_error(source_name: &str, error: &minijinja::Error) -> Error {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    Error::ChatTemplate {
        source_name: source_name.to_owned(),
        message,
    }
}

/// `raise_exception(message)`: HF templates call it to reject a conversation.
fn raise_exception(message: String) -> std::result::Result<JinjaValue, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: the current UTC date and time, as Llama 3 templates ask for it.
/// Supports `%d %m %Y %y %b %B %a %A %H %M %S %j %%`; other directives are an error.
fn strftime_now(format: String) -> std::result::Result<JinjaValue, minijinja::Error> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    strftime_utc(&format, secs)
        .map(JinjaValue::from)
        .map_err(|message| minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// Formats `unix_secs` (UTC) with the `strftime` directives the templates' `strftime_now`
/// supports: `%d %m %Y %y %b %B %a %A %H %M %S %j %%`.
pub fn strftime_utc(format: &str, unix_secs: u64) -> std::result::Result<String, String> {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const WEEKDAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = unix_secs / 86_400;
    let secs_of_day = unix_secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const CUMULATIVE: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let day_of_year = CUMULATIVE[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let month_name = MONTHS[(month - 1) as usize];
    let weekday = WEEKDAYS[(days % 7) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year % 100)),
            Some('b') => out.push_str(&month_name[..3]),
            Some('B') => out.push_str(month_name),
            Some('a') => out.push_str(&weekday[..3]),
            Some('A') => out.push_str(weekday),
            Some('H') => out.push_str(&format!("{:02}", secs_of_day / 3600)),
            Some('M') => out.push_str(&format!("{:02}", secs_of_day / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", secs_of_day % 60)),
            Some('j') => out.push_str(&format!("{day_of_year:03}")),
            Some('%') => out.push('%'),
            Some(other) => return Err(format!("strftime_now: %{other} is not supported")),
            None => return Err("strftime_now: the format ends with a lone %".to_owned()),
        }
    }
    Ok(out)
}

/// `tojson` as HF defines it: Python `json.dumps(value, ensure_ascii=False, indent=None,
/// sort_keys=False)`, i.e. `", "` / `": "` separators and no HTML escaping; `indent`,
/// `sort_keys` and `ensure_ascii` keyword arguments are honoured.
fn tojson(value: JinjaValue, kwargs: Kwargs) -> std::result::Result<JinjaValue, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value).map_err(|e| {
        minijinja::Error::new(ErrorKind::InvalidOperation, "tojson cannot serialize").with_source(e)
    })?;
    let text = pyjson::dumps_with(
        &json,
        pyjson::Layout {
            indent,
            sort_keys: sort_keys == Some(true),
            ensure_ascii: ensure_ascii == Some(true),
        },
    );
    Ok(JinjaValue::from_safe_string(text))
}
