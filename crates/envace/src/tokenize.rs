//! Tokenizers: Hugging Face `tokenizer.json` files, SmolLM2's tokenizer rebuilt from its GGUF
//! metadata, and byte-level BPE trained on a corpus for tiny models.
//!
//! Everything returns the `tokenizers` crate's [`Tokenizer`], so a trained tokenizer saves as a
//! `tokenizer.json` that Python `tokenizers` and `transformers` load unchanged.

use std::collections::HashSet;
use std::path::Path;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder, Vocab};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

use crate::error::{Error, Result};

pub use tokenizers::Tokenizer;

/// Name of a Hugging Face tokenizer file.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// Padding token of trained tokenizers (id 0).
pub const PAD_TOKEN: &str = "<|pad|>";

/// The special tokens a trained tokenizer reserves, in id order from 0: padding, ChatML turn
/// markers, and the tags of tool calls, tool responses, rehearsed execution results and
/// thinking (DESIGN.md §1).
pub const SPECIAL_TOKENS: [&str; 11] = [
    PAD_TOKEN,
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<execution_result>",
    "</execution_result>",
    "<think>",
    "</think>",
];

/// GGUF `tokenizer.ggml.token_type` of a control (special) token.
const GGUF_TOKEN_TYPE_CONTROL: i32 = 3;

/// Loads a Hugging Face `tokenizer.json`.
pub fn load(path: &Path) -> Result<Tokenizer> {
    if !path.is_file() {
        return Err(Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such tokenizer file"),
        ));
    }
    HfTokenizer::from_file(path).map_err(|e| Error::Tokenizer {
        source_name: path.display().to_string(),
        message: e.to_string(),
    })
}

/// Saves `tokenizer` as a (pretty-printed) `tokenizer.json` at `path`.
pub fn save(tokenizer: &Tokenizer, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    tokenizer.save(path, true).map_err(|e| Error::Tokenizer {
        source_name: path.display().to_string(),
        message: e.to_string(),
    })
}

/// The ids of `text`, special tokens written in the text recognised, nothing added around it.
pub fn encode(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    tokenizer
        .encode(text, false)
        .map(|encoding| encoding.get_ids().to_vec())
        .map_err(|e| Error::Tokenizer {
            source_name: "encode".to_owned(),
            message: e.to_string(),
        })
}

/// The text of `ids`, special tokens included.
pub fn decode(tokenizer: &Tokenizer, ids: &[u32]) -> Result<String> {
    tokenizer.decode(ids, false).map_err(|e| Error::Tokenizer {
        source_name: "decode".to_owned(),
        message: e.to_string(),
    })
}

/// The id of one token, e.g. `<|im_end|>`; an error names the token when the vocabulary lacks
/// it.
pub fn token_id(tokenizer: &Tokenizer, token: &str) -> Result<u32> {
    tokenizer
        .token_to_id(token)
        .ok_or_else(|| Error::Tokenizer {
            source_name: "vocabulary".to_owned(),
            message: format!("has no token {token:?}"),
        })
}

/// The byte-level pre-tokenizer of SmolLM2 (and of trained tokenizers): every digit alone, then
/// GPT-2's regex split and byte-to-unicode mapping, with no prefix space.
fn byte_level_pre_tokenizer() -> Sequence {
    pre_tokenizer(true)
}

/// GPT-2's regex split and byte-to-unicode mapping with no prefix space, after splitting every
/// digit alone when `split_digits`.
fn pre_tokenizer(split_digits: bool) -> Sequence {
    let byte_level = PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true));
    if split_digits {
        Sequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            byte_level,
        ])
    } else {
        Sequence::new(vec![byte_level])
    }
}

/// Rebuilds a GPT-2-style byte-level BPE tokenizer from GGUF metadata
/// (`tokenizer.ggml.tokens`, `.merges`, `.token_type`), the way SmolLM2's own tokenizer is
/// configured: tokens of type 3 (control) are special added tokens. `source_name` names the
/// file in errors.
pub fn from_gguf_vocab(
    tokens: &[String],
    merges: &[String],
    token_types: &[i32],
    source_name: &str,
) -> Result<Tokenizer> {
    let fail = |message: String| Error::Tokenizer {
        source_name: source_name.to_owned(),
        message,
    };
    if !token_types.is_empty() && token_types.len() != tokens.len() {
        return Err(fail(format!(
            "tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}",
            token_types.len(),
            tokens.len()
        )));
    }
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, token)| (token.clone(), id as u32))
        .collect();
    let merges = merges
        .iter()
        .enumerate()
        .map(|(idx, merge)| {
            merge
                .split_once(' ')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| {
                    fail(format!(
                        "tokenizer.ggml.merges[{idx}] = {merge:?} is not two tokens separated by a space"
                    ))
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let mut tokenizer = HfTokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(byte_level_pre_tokenizer()));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    tokenizer.with_post_processor(Some(ByteLevel::default().trim_offsets(false)));
    let specials: Vec<AddedToken> = tokens
        .iter()
        .zip(token_types)
        .filter(|&(_, &kind)| kind == GGUF_TOKEN_TYPE_CONTROL)
        .map(|(token, _)| AddedToken::from(token.clone(), true))
        .collect();
    tokenizer
        .add_special_tokens(specials)
        .map_err(|e| fail(e.to_string()))?;
    Ok(tokenizer)
}

/// Trains a byte-level BPE tokenizer of `vocab_size` tokens on `corpus` (any iterator of texts),
/// with [`SPECIAL_TOKENS`] at ids 0.. and all 256 bytes in the alphabet, so every text encodes.
/// Every digit is its own pre-token.
pub fn train_bpe<I, S>(corpus: I, vocab_size: usize) -> Result<Tokenizer>
where
    I: Iterator<Item = S> + Send,
    S: AsRef<str> + Send,
{
    train_bpe_with(corpus, vocab_size, true)
}

/// [`train_bpe`], with runs of digits kept together (so BPE may merge them) unless
/// `split_digits`.
pub fn train_bpe_with<I, S>(corpus: I, vocab_size: usize, split_digits: bool) -> Result<Tokenizer>
where
    I: Iterator<Item = S> + Send,
    S: AsRef<str> + Send,
{
    let alphabet: HashSet<char> = ByteLevel::alphabet().into_iter().collect();
    let floor = SPECIAL_TOKENS.len() + alphabet.len();
    if vocab_size < floor {
        return Err(Error::Tokenizer {
            source_name: "BPE training".to_owned(),
            message: format!(
                "vocab_size {vocab_size} is below {floor} (the special tokens plus the 256 bytes)"
            ),
        });
    }
    let trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(0)
        .show_progress(false)
        .special_tokens(
            SPECIAL_TOKENS
                .iter()
                .map(|token| AddedToken::from(*token, true))
                .collect(),
        )
        .initial_alphabet(alphabet)
        .build();
    let mut tokenizer = HfTokenizer::new(BPE::default());
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer(split_digits)));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    tokenizer.with_post_processor(Some(ByteLevel::default().trim_offsets(false)));
    let mut trainer = TrainerWrapper::from(trainer);
    tokenizer
        .train(&mut trainer, corpus)
        .map_err(|e| Error::Tokenizer {
            source_name: "BPE training".to_owned(),
            message: e.to_string(),
        })?;
    Ok(tokenizer)
}
