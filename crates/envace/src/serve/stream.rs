//! Streamed replies (`stream: true`): the tokens of a generation as OpenAI-style server-sent
//! events, content as it is decoded, tool calls whole once the reply is done.
//!
//! Text is sent as soon as it cannot change: a token that ends inside a UTF-8 character waits
//! for the rest, and text that may be the start of a `<tool_call>` tag or of a stop string
//! waits until it is clear. From the first tag or stop string on nothing more is streamed as
//! content; when the generation ends, the reply is split as a whole reply is
//! ([`finish_turn`]), the content not yet sent goes out, then each tool call, then the finish
//! reason, the token counts when asked (`stream_options.include_usage`) and `data: [DONE]`.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use serde_json::{Value, json};

use super::reply::finish_turn;
use super::{State, fresh_u64, unix_secs};
use crate::model::Generated;
use crate::openai::ToolCallOut;
use crate::tokenize::{self, Tokenizer};

/// Tags that start or end a tool call block; text from one on is not streamed as content.
const TAGS: [&str; 2] = ["<tool_call>", "</tool_call>"];

/// A response body fed event by event from a channel; it ends when the sender is dropped.
pub(super) struct EventBody(pub(super) tokio::sync::mpsc::UnboundedReceiver<Bytes>);

impl Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|event| event.map(|b| Ok(Frame::data(b))))
    }
}

/// The content of a reply as it grows, token by token: what may be sent so far.
pub(super) struct TextStream {
    tokens: Vec<u32>,
    /// The decoded text up to the end of what was sent (which must stay its start).
    prefix: String,
    /// Text already sent: `prefix` without its leading whitespace (the reply's content is
    /// trimmed, so whitespace is sent only once text follows it).
    sent: String,
    /// Strings that end what is streamed as content (the tags and the request's stops).
    markers: Vec<String>,
    /// A marker was seen (or the text stopped growing as a prefix): nothing more to stream.
    closed: bool,
}

impl TextStream {
    pub(super) fn new(stop: &[String]) -> Self {
        let mut markers: Vec<String> = TAGS.iter().map(|t| (*t).to_owned()).collect();
        markers.extend(stop.iter().filter(|s| !s.is_empty()).cloned());
        TextStream {
            tokens: Vec::new(),
            prefix: String::new(),
            sent: String::new(),
            markers,
            closed: false,
        }
    }

    /// Takes the next generated token (stop tokens left out by the caller); returns the text
    /// that may be sent now, if any.
    pub(super) fn push(&mut self, tokenizer: &Tokenizer, token: u32) -> Option<String> {
        self.tokens.push(token);
        if self.closed {
            return None;
        }
        let text = tokenize::decode(tokenizer, &self.tokens).ok()?;
        if !text.starts_with(&self.prefix) {
            // A decoder that rewrites earlier text: leave the rest to the end of the reply.
            self.closed = true;
            return None;
        }
        let limit = match self
            .markers
            .iter()
            .filter_map(|m| text.find(m.as_str()))
            .min()
        {
            Some(at) => {
                self.closed = true;
                at
            }
            None => {
                // Hold back a tail that could still grow into a marker, and a character cut in
                // the middle of its bytes (decoded as U+FFFD).
                let limit = text.len() - held_tail(&text, &self.markers);
                text[..limit].trim_end_matches('\u{FFFD}').len()
            }
        };
        // Whitespace at the end may be trimmed off the content; it goes once text follows.
        let limit = text[..limit].trim_end().len();
        let begin = if self.sent.is_empty() {
            text.len() - text.trim_start().len()
        } else {
            self.prefix.len()
        };
        if limit <= begin.max(self.prefix.len()) {
            return None;
        }
        let delta = text[begin.max(self.prefix.len())..limit].to_owned();
        self.prefix = text[..limit].to_owned();
        self.sent.push_str(&delta);
        Some(delta)
    }

    /// The content already sent.
    pub(super) fn sent(&self) -> &str {
        &self.sent
    }
}

/// Length in bytes of the longest end of `text` that is a proper start of some marker.
fn held_tail(text: &str, markers: &[String]) -> usize {
    markers
        .iter()
        .flat_map(|marker| {
            (1..marker.len())
                .rev()
                .filter(|&n| marker.is_char_boundary(n) && text.ends_with(&marker[..n]))
                .take(1)
        })
        .max()
        .unwrap_or(0)
}

/// What a streamed reply needs besides the tokens.
pub(super) struct StreamedCall {
    pub(super) n_prompt: usize,
    pub(super) max_new_tokens: usize,
    pub(super) stop: Vec<String>,
    pub(super) include_usage: bool,
}

/// One `chat.completion.chunk` event.
struct Chunks {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
}

impl Chunks {
    fn event(&self, delta: Value, finish_reason: Value) -> Bytes {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": Value::Null,
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": Value::Null,
                "finish_reason": finish_reason,
            }],
        });
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        sse(&chunk)
    }

    fn usage(&self, n_prompt: usize, n_completion: usize) -> Bytes {
        sse(&json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": Value::Null,
            "choices": [],
            "usage": {
                "prompt_tokens": n_prompt,
                "completion_tokens": n_completion,
                "total_tokens": n_prompt + n_completion,
            },
        }))
    }
}

fn sse(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// Turns the worker's tokens and answer for one request into events on `out`, until the reply
/// is done or the client has gone.
pub(super) async fn stream_reply(
    state: Arc<State>,
    call: StreamedCall,
    mut tokens: tokio::sync::mpsc::UnboundedReceiver<u32>,
    answer: tokio::sync::oneshot::Receiver<std::result::Result<Generated, String>>,
    out: tokio::sync::mpsc::UnboundedSender<Bytes>,
) {
    let chunks = Chunks {
        id: format!("chatcmpl-{:016x}", fresh_u64()),
        created: unix_secs(),
        model: state.model_name.clone(),
        include_usage: call.include_usage,
    };
    if out
        .send(chunks.event(json!({"role": "assistant", "content": ""}), Value::Null))
        .is_err()
    {
        return;
    }
    let mut text = TextStream::new(&call.stop);
    while let Some(token) = tokens.recv().await {
        if state.stop_tokens.contains(&token) {
            continue;
        }
        if let Some(delta) = text.push(&state.tokenizer, token)
            && out
                .send(chunks.event(json!({"content": delta}), Value::Null))
                .is_err()
        {
            // The client has gone; dropping the answer tells the worker nobody waits.
            return;
        }
    }
    let outcome = answer.await;
    state.counters.n_requests.fetch_add(1, Ordering::Relaxed);
    let generated = match outcome {
        Ok(Ok(generated)) => generated,
        Ok(Err(message)) => {
            let _ = out.send(error_event(&format!("generation failed: {message}")));
            return;
        }
        Err(_) => {
            let _ = out.send(error_event(
                "the model worker has stopped; the server is shutting down",
            ));
            return;
        }
    };
    state
        .counters
        .n_generated_tokens
        .fetch_add(generated.tokens.len() as u64, Ordering::Relaxed);
    let turn = match finish_turn(&state, &generated.tokens, call.max_new_tokens, &call.stop) {
        Ok(turn) => turn,
        Err(err) => {
            let _ = out.send(error_event(&err.to_string()));
            return;
        }
    };
    match turn.content.strip_prefix(text.sent()) {
        Some(rest) if !rest.is_empty() => {
            let _ = out.send(chunks.event(json!({"content": rest}), Value::Null));
        }
        Some(_) => {}
        None => tracing::debug!("the streamed content is not a prefix of the reply's content"),
    }
    for (index, call) in turn.tool_calls.iter().enumerate() {
        let ToolCallOut {
            id,
            name,
            arguments,
        } = call;
        let delta = json!({"tool_calls": [{
            "index": index,
            "id": id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }]});
        let _ = out.send(chunks.event(delta, Value::Null));
    }
    let _ = out.send(chunks.event(json!({}), Value::from(turn.finish_reason)));
    if call.include_usage {
        let _ = out.send(chunks.usage(call.n_prompt, generated.tokens.len()));
    }
    let _ = out.send(Bytes::from_static(b"data: [DONE]\n\n"));
}

/// An error after the stream has begun: an event with an OpenAI-style error object, as
/// OpenAI-compatible servers send it (the status line has gone out already).
fn error_event(message: &str) -> Bytes {
    sse(&json!({"error": {
        "message": message,
        "type": "server_error",
        "param": Value::Null,
        "code": Value::Null,
    }}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_that_may_become_a_marker_is_held() {
        let markers: Vec<String> = ["<tool_call>", "STOP"].map(str::to_owned).to_vec();
        assert_eq!(held_tail("hello <tool", &markers), 5);
        assert_eq!(held_tail("hello <", &markers), 1);
        assert_eq!(held_tail("hello ST", &markers), 2);
        assert_eq!(held_tail("hello", &markers), 0);
        assert_eq!(held_tail("a <tool_call", &markers), "<tool_call".len());
    }
}
