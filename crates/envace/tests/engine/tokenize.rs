//! Tokenizer tests: the Qwen3 `tokenizer.json` and SmolLM2's GGUF-built tokenizer give the
//! reference ids of `fixtures/tokenize/reference_ids.json`, and a trained byte-level BPE keeps
//! its special tokens, round-trips text and survives save → load.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic here is the test failing, with the value.

use envace::rng::Rng;
use std::path::PathBuf;

use envace::model::{self, Gguf};
use envace::tokenize::{self, SPECIAL_TOKENS, Tokenizer};
use expect_test::expect;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tokenize")
        .join(name)
}

/// The cached file, or a failure that names it and `cargo xtask setup`.
fn require(found: envace::Result<PathBuf>) -> PathBuf {
    found.unwrap_or_else(|e| panic!("{e}"))
}

fn check_reference_ids(name: &str, tokenizer: &Tokenizer) {
    let text = std::fs::read_to_string(fixture("reference_ids.json")).unwrap();
    let reference: Value = serde_json::from_str(&text).unwrap();
    let cases = reference[name].as_array().unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let expected: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        let ids = tokenize::encode(tokenizer, text).unwrap();
        assert_eq!(ids, expected, "{name} ids of {text:?}");
        assert_eq!(
            tokenize::decode(tokenizer, &ids).unwrap(),
            text,
            "{name} round trip"
        );
    }
}

#[test]
fn qwen3_tokenizer_matches_python_tokenizers() {
    let dir = require(model::qwen3_tokenizer_dir());
    let tokenizer = tokenize::load(&dir.join(tokenize::TOKENIZER_FILE)).unwrap();
    check_reference_ids("qwen3", &tokenizer);
    let tags: Vec<u32> = [
        "<|im_start|>",
        "<|im_end|>",
        "<tool_call>",
        "</tool_call>",
        "<think>",
    ]
    .iter()
    .map(|t| tokenize::token_id(&tokenizer, t).unwrap())
    .collect();
    expect!["[151644, 151645, 151657, 151658, 151667]"].assert_eq(&format!("{tags:?}"));
}

#[test]
fn smollm2_tokenizer_from_gguf_matches_reference() {
    let gguf = Gguf::open(&require(model::smollm2_gguf())).unwrap();
    let tokenizer = gguf.tokenizer().unwrap();
    assert_eq!(tokenizer.get_vocab_size(true), 49152);
    check_reference_ids("smollm2", &tokenizer);
    // The failure mode of a generic GGUF tokenizer: "user" must be one plain token, not "Ġuser".
    let ids = tokenize::encode(&tokenizer, "<|im_start|>user").unwrap();
    expect!["[1, 4093]"].assert_eq(&format!("{ids:?}"));
    expect![[r#""user""#]].assert_eq(&format!("{:?}", tokenizer.id_to_token(4093).unwrap()));
}

#[test]
fn missing_cache_files_name_the_file_and_the_setup_command() {
    let err = model::cached_file("models/no-such-model.gguf", "the test model").unwrap_err();
    let message = err.to_string();
    assert!(message.contains("no-such-model.gguf"), "{message}");
    assert!(message.contains("cargo xtask setup"), "{message}");
    assert!(
        message.starts_with("the test model is missing"),
        "{message}"
    );
}

fn corpus() -> Vec<String> {
    let mut lines = Vec::new();
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
    for idx in 0..400 {
        lines.push(format!(
            "<|im_start|>user\nWhere is order #W{:07}? I ordered {} items.<|im_end|>\n\
             <|im_start|>assistant\n<tool_call>\n{{\"name\": \"get_order_details\", \
             \"arguments\": {{\"order_id\": \"#W{:07}\"}}}}\n</tool_call><|im_end|>",
            idx * 7919 % 10_000_000,
            idx % 13,
            idx * 104_729 % 10_000_000
        ));
        lines.push(format!(
            "The quick brown fox {idx} jumps over the lazy dog; café naïve résumé."
        ));
        // Made-up words from syllables, so that there are more merges to learn than the
        // vocabulary has room for.
        const SYLLABLES: [&str; 16] = [
            "ka", "lo", "mir", "sen", "tu", "vra", "pel", "dos", "qui", "ne", "ash", "bor", "fy",
            "gle", "hon", "jun",
        ];
        let words: Vec<String> = (0..12)
            .map(|_| {
                (0..1 + rng.next_u64() % 4)
                    .map(|_| SYLLABLES[(rng.next_u64() % 16) as usize])
                    .collect()
            })
            .collect();
        lines.push(words.join(" "));
    }
    lines
}

#[test]
fn trained_bpe_keeps_specials_and_round_trips() {
    let corpus = corpus();
    let tokenizer = tokenize::train_bpe(corpus.iter(), 600).unwrap();
    assert_eq!(tokenizer.get_vocab_size(true), 600);
    for (id, token) in SPECIAL_TOKENS.iter().enumerate() {
        assert_eq!(
            tokenize::token_id(&tokenizer, token).unwrap(),
            id as u32,
            "{token}"
        );
    }
    let text = "<tool_call>\n{\"name\": \"get_user\"}\n</tool_call>\u{1F680} 中文 0123";
    let ids = tokenize::encode(&tokenizer, text).unwrap();
    assert_eq!(ids[0], 3, "<tool_call> is one token");
    assert_eq!(tokenize::decode(&tokenizer, &ids).unwrap(), text);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny").join(tokenize::TOKENIZER_FILE);
    tokenize::save(&tokenizer, &path).unwrap();
    let loaded = tokenize::load(&path).unwrap();
    for line in corpus.iter().take(20) {
        assert_eq!(
            tokenize::encode(&loaded, line).unwrap(),
            tokenize::encode(&tokenizer, line).unwrap()
        );
    }
    // Learned merges compress the corpus well below one token per byte.
    let n_bytes: usize = corpus.iter().map(String::len).sum();
    let n_tokens: usize = corpus
        .iter()
        .map(|line| tokenize::encode(&tokenizer, line).unwrap().len())
        .sum();
    assert!(
        n_tokens * 3 < n_bytes,
        "{n_tokens} tokens for {n_bytes} bytes"
    );
}

#[test]
fn digits_merge_only_when_not_split() {
    let corpus: Vec<String> = (0..400)
        .map(|i| format!("What is {} plus 963? It is {}.", i % 50, i % 50 + 963))
        .collect();
    let split = tokenize::train_bpe(corpus.iter(), 400).unwrap();
    let merged = tokenize::train_bpe_with(corpus.iter(), 400, false).unwrap();
    let text = "What is 12 plus 963? It is 975.";
    let n_digit_tokens = |tokenizer: &tokenize::Tokenizer| {
        tokenize::encode(tokenizer, text)
            .unwrap()
            .iter()
            .filter(|&&id| {
                let piece = tokenize::decode(tokenizer, &[id]).unwrap();
                piece.chars().any(|c| c.is_ascii_digit())
            })
            .count()
    };
    // Split: one token per digit (2 + 3 + 3); merged: "963" at least is one token.
    assert_eq!(n_digit_tokens(&split), 8);
    assert!(n_digit_tokens(&merged) <= 6, "{}", n_digit_tokens(&merged));
    for tokenizer in [&split, &merged] {
        let ids = tokenize::encode(tokenizer, text).unwrap();
        assert_eq!(tokenize::decode(tokenizer, &ids).unwrap(), text);
    }
}

#[test]
fn tokenizer_errors_name_the_problem() {
    let err = tokenize::train_bpe(["abc"].iter(), 100).unwrap_err();
    expect!["tokenizer BPE training: vocab_size 100 is below 267 (the special tokens plus the 256 bytes)"]
        .assert_eq(&err.to_string());
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("tokenizer.json");
    std::fs::write(&bad, "{\"not\": \"a tokenizer\"}").unwrap();
    let message = tokenize::load(&bad).unwrap_err().to_string();
    assert!(
        message.starts_with(&format!("tokenizer {}:", bad.display())),
        "{message}"
    );
    let tokenizer = tokenize::train_bpe(corpus().iter(), 300).unwrap();
    expect![[r#"tokenizer vocabulary: has no token "<|endoftext|>""#]].assert_eq(
        &tokenize::token_id(&tokenizer, "<|endoftext|>")
            .unwrap_err()
            .to_string(),
    );
}
