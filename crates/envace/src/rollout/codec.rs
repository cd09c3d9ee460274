//! The token codec: a tokenizer with the chat template and stop tokens the engine renders
//! conversations with and cuts generations at.

use serde_json::Value;

use crate::chat::ChatTemplate;
use crate::error::{Error, Result};
use crate::tokenize::{self, Tokenizer};

/// A tokenizer with the chat template and stop tokens the engine renders and cuts with.
#[derive(Debug)]
pub struct TokenCodec {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    stop_ids: Vec<u32>,
    eos_text: String,
}

impl TokenCodec {
    /// The text of the first stop token, which closes a turn in a rendering.
    pub(crate) fn eos_text(&self) -> &str {
        &self.eos_text
    }

    /// A codec; `stop_tokens` (at least one, e.g. `<|im_end|>`) end a generation, the first
    /// one is what the template writes after each message.
    pub fn new(tokenizer: Tokenizer, template: ChatTemplate, stop_tokens: &[&str]) -> Result<Self> {
        let Some(first) = stop_tokens.first() else {
            return Err(Error::Data {
                source_name: "token codec".to_owned(),
                message: "needs at least one stop token, e.g. <|im_end|>".to_owned(),
            });
        };
        let stop_ids = stop_tokens
            .iter()
            .map(|token| tokenize::token_id(&tokenizer, token))
            .collect::<Result<Vec<_>>>()?;
        Ok(TokenCodec {
            tokenizer,
            template,
            stop_ids,
            eos_text: (*first).to_owned(),
        })
    }

    /// The ids of `text`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        tokenize::encode(&self.tokenizer, text)
    }

    /// The text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        tokenize::decode(&self.tokenizer, ids)
    }

    /// The tokens that end a generation.
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// Renders chat messages with the template.
    pub fn render(
        &self,
        messages: &[Value],
        tools: &[Value],
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.template.render(messages, tools, add_generation_prompt)
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
}
