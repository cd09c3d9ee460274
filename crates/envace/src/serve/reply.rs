//! A generated reply split into the OpenAI message parts: content, tool calls and finish
//! reason (a malformed `<tool_call>` block stays in the content).

use serde_json::Value;

use super::{State, fresh_u64};
use crate::chat::parse_tool_calls;
use crate::error::Result;
use crate::openai::ToolCallOut;
use crate::tokenize;

/// A reply's message parts.
#[derive(Debug, PartialEq)]
pub(super) struct Turn {
    pub(super) content: String,
    pub(super) tool_calls: Vec<ToolCallOut>,
    pub(super) finish_reason: &'static str,
}

/// Decodes the generated tokens into content, tool calls and a finish reason.
pub(super) fn finish_turn(
    state: &State,
    tokens: &[u32],
    max_new_tokens: usize,
    stop: &[String],
) -> Result<Turn> {
    let ended_by_token = tokens.last().is_some_and(|t| state.stop_tokens.contains(t));
    let text_tokens = if ended_by_token {
        &tokens[..tokens.len() - 1]
    } else {
        tokens
    };
    let text = tokenize::decode(&state.tokenizer, text_tokens)?;
    let cut = stop
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()))
        .min();
    let (text, stopped) = match cut {
        Some(at) => (&text[..at], true),
        None => (
            text.as_str(),
            ended_by_token || tokens.len() < max_new_tokens,
        ),
    };
    Ok(split_turn(text, stopped))
}

/// Splits generated text into content and OpenAI tool calls; malformed blocks stay in the
/// content as they were written.
pub(super) fn split_turn(text: &str, stopped: bool) -> Turn {
    let parsed = parse_tool_calls(text);
    // Hide each malformed block behind a placeholder that no tag can match, parse again so
    // that only the well-formed blocks are taken out, then put the blocks back.
    let mut masked = String::with_capacity(text.len());
    let mut originals = Vec::new();
    let mut pos = 0;
    for err in parsed.calls.iter().filter_map(|c| c.as_ref().err()) {
        let (start, end) = err.span;
        if start < pos || end > text.len() {
            continue;
        }
        masked.push_str(&text[pos..start]);
        masked.push_str(&format!("\u{E000}{}\u{E001}", originals.len()));
        originals.push(&text[start..end]);
        pos = end;
    }
    masked.push_str(&text[pos..]);
    let reparsed = parse_tool_calls(&masked);
    let mut content = reparsed.content.clone();
    for (idx, original) in originals.iter().enumerate() {
        content = content.replace(&format!("\u{E000}{idx}\u{E001}"), original);
    }
    let tool_calls: Vec<ToolCallOut> = reparsed
        .valid_calls()
        .map(|call| ToolCallOut {
            id: format!("call_{:016x}", fresh_u64()),
            name: call.name.clone(),
            arguments: Value::Object(call.arguments.clone()).to_string(),
        })
        .collect();
    let finish_reason = match (stopped, tool_calls.is_empty()) {
        (false, _) => "length",
        (true, false) => "tool_calls",
        (true, true) => "stop",
    };
    Turn {
        content,
        tool_calls,
        finish_reason,
    }
}
