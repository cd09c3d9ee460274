//! Chat-template and tool-call tests: Qwen3, SmolLM2 and the built-in ChatML template render
//! byte-identical to Python jinja2 with Hugging Face settings (`fixtures/chat/`), and tool-call
//! blocks parse into calls or structured errors, never a panic, whatever the text.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic here is the test failing, with the value.

use envace::rng::Rng;
use std::path::PathBuf;

use envace::chat::{ChatTemplate, ToolCall, parse_tool_calls, strftime_utc};
use envace::model::{self, Gguf};
use expect_test::{Expect, expect};
use serde_json::{Map, Value, json};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/chat")
        .join(name)
}

fn read_json(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap()
}

/// The cached file, or a failure that names it and `cargo xtask setup`.
fn require(found: envace::Result<PathBuf>) -> PathBuf {
    found.unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn templates_render_like_python_jinja2() {
    let qwen3 = ChatTemplate::from_tokenizer_config(
        &require(model::qwen3_tokenizer_dir()).join("tokenizer_config.json"),
    )
    .unwrap();
    let gguf = Gguf::open(&require(model::smollm2_gguf())).unwrap();
    let smollm2 = ChatTemplate::from_gguf(&gguf).unwrap();
    let chatml = ChatTemplate::chatml().unwrap();

    let conversation = read_json("conversation.json");
    let messages = conversation["messages"].as_array().unwrap();
    let tools = conversation["tools"].as_array().unwrap();
    let cases = read_json("cases.json");
    for case in cases.as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let template = match case["template"].as_str().unwrap() {
            "qwen3" => &qwen3,
            "smollm2" => &smollm2,
            "chatml" => &chatml,
            other => panic!("unknown template {other}"),
        };
        let selected: &[Value] = match case["messages"].as_str().unwrap() {
            "all" => messages,
            "first2" => &messages[..2],
            "user_only" => &messages[1..2],
            other => panic!("unknown selection {other}"),
        };
        let case_tools: &[Value] = if case["tools"].as_bool().unwrap() {
            tools
        } else {
            &[]
        };
        let extra: Map<String, Value> = case["extra"].as_object().unwrap().clone();
        let rendered = template
            .render_with(
                selected,
                case_tools,
                case["add_generation_prompt"].as_bool().unwrap(),
                &extra,
            )
            .unwrap();
        let reference = std::fs::read_to_string(fixture(&format!("{name}.txt"))).unwrap();
        assert_eq!(rendered, reference, "case {name}");
    }
}

#[test]
fn template_errors_name_the_source() {
    let err = ChatTemplate::new("{% if %}", "broken.jinja", "", "").unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("chat template broken.jinja: syntax error"),
        "{message}"
    );
    let raising = ChatTemplate::new(
        "{{ raise_exception('only user and assistant roles are supported') }}",
        "strict",
        "",
        "",
    )
    .unwrap();
    let message = raising.render(&[], &[], true).unwrap_err().to_string();
    assert!(
        message.contains("only user and assistant roles are supported"),
        "{message}"
    );
}

#[test]
fn tojson_behaves_like_python_json_dumps() {
    let template = ChatTemplate::new(
        "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(sort_keys=true) }}|{{ s | tojson(ensure_ascii=true) }}",
        "tojson",
        "",
        "",
    )
    .unwrap();
    let mut extra = Map::new();
    extra.insert(
        "x".to_owned(),
        json!({"b": [1, 2.5, null, true], "a": "<&'\"\n>", "e": {}, "f": []}),
    );
    extra.insert("s".to_owned(), json!("é🚀"));
    let rendered = template.render_with(&[], &[], false, &extra).unwrap();
    expect![[r#"
        {"b": [1, 2.5, null, true], "a": "<&'\"\n>", "e": {}, "f": []}|{
          "b": [
            1,
            2.5,
            null,
            true
          ],
          "a": "<&'\"\n>",
          "e": {},
          "f": []
        }|{"a": "<&'\"\n>", "b": [1, 2.5, null, true], "e": {}, "f": []}|"\u00e9\ud83d\ude80""#]]
    .assert_eq(&rendered);
}

#[test]
fn strftime_matches_python() {
    // Python: time.strftime(fmt, time.gmtime(secs)).
    let cases = [
        (0, "%d %b %Y"),
        (951_782_400, "%Y-%m-%d %H:%M:%S %a %A %B %j %y %%"), // 2000-02-29, a leap day
        (1_798_502_399, "%d %B %Y, %H:%M:%S, day %j"),        // late in 2026
    ];
    let out: Vec<String> = cases
        .iter()
        .map(|&(secs, format)| strftime_utc(format, secs).unwrap())
        .collect();
    expect![[r#"
        01 Jan 1970
        2000-02-29 00:00:00 Tue Tuesday February 060 00 %
        28 December 2026, 23:59:59, day 362"#]]
    .assert_eq(&out.join("\n"));
    expect!["strftime_now: %Q is not supported"].assert_eq(&strftime_utc("%Q", 0).unwrap_err());
    let template = ChatTemplate::new("{{ strftime_now('%Y') }}", "date", "", "").unwrap();
    assert_eq!(template.render(&[], &[], false).unwrap().len(), 4);
}

#[test]
fn chatml_and_a_trained_tokenizer_keep_tool_tags_whole() {
    let conversation = read_json("conversation.json");
    let messages = conversation["messages"].as_array().unwrap();
    let tools = conversation["tools"].as_array().unwrap();
    let text = ChatTemplate::chatml()
        .unwrap()
        .render(messages, tools, true)
        .unwrap();
    let tokenizer =
        envace::tokenize::train_bpe(std::iter::repeat_n(text.as_str(), 4), 400).unwrap();
    let ids = envace::tokenize::encode(&tokenizer, &text).unwrap();
    assert_eq!(envace::tokenize::decode(&tokenizer, &ids).unwrap(), text);
    let count = |id: u32| ids.iter().filter(|&&i| i == id).count();
    // <|im_start|> 1, <|im_end|> 2, <tool_call> 3, </tool_call> 4, <tool_response> 5.
    expect!["[8, 7, 3, 3, 2]"].assert_eq(&format!(
        "{:?}",
        [count(1), count(2), count(3), count(4), count(5)]
    ));
}

fn check_parse(text: &str, expected: Expect) {
    let parsed = parse_tool_calls(text);
    let mut out = format!("content: {:?}\n", parsed.content);
    for call in &parsed.calls {
        match call {
            Ok(call) => out.push_str(&format!(
                "call {} {}\n",
                call.name,
                Value::Object(call.arguments.clone())
            )),
            Err(err) => out.push_str(&format!(
                "error {:?} {:?} at {:?}: {}\n",
                err.kind,
                err.code(),
                err.span,
                err.message
            )),
        }
    }
    expected.assert_eq(&out);
}

#[test]
fn tool_calls_parse_into_calls_or_structured_errors() {
    check_parse(
        "Let me check.\n<tool_call>\n{\"name\": \"get_order\", \"arguments\": {\"order_id\": \"#W1\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_user\", \"arguments\": \"{\\\"user_id\\\": \\\"u1\\\"}\"}\n</tool_call>",
        expect![[r##"
            content: "Let me check."
            call get_order {"order_id":"#W1"}
            call get_user {"user_id":"u1"}
        "##]],
    );
    check_parse(
        "no calls at all",
        expect![[r#"
            content: "no calls at all"
        "#]],
    );
    check_parse(
        "<tool_call>{\"name\": \"a\", \"arguments\": {}</tool_call>",
        expect![[r#"
            content: ""
            error InvalidJson "INVALID_TOOL_CALL_FORMAT" at (0, 52): the tool call is not valid JSON: EOF while parsing an object at line 1 column 29
        "#]],
    );
    check_parse(
        "<tool_call>[1]</tool_call><tool_call>{\"arguments\": {}}</tool_call><tool_call>{\"name\": 3, \"arguments\": {}}</tool_call><tool_call>{\"name\": \" \", \"arguments\": {}}</tool_call>",
        expect![[r#"
            content: ""
            error NotAnObject "INVALID_TOOL_CALL_FORMAT" at (0, 26): the tool call is an array, not a JSON object
            error InvalidName "INVALID_TOOL_CALL_FORMAT" at (26, 66): the tool call has no "name"
            error InvalidName "INVALID_TOOL_CALL_FORMAT" at (66, 117): "name" is a number, not a string
            error InvalidName "INVALID_TOOL_CALL_FORMAT" at (117, 170): "name" is empty
        "#]],
    );
    check_parse(
        "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": [1]}</tool_call><tool_call>{\"name\": \"c\", \"arguments\": \"[1]\"}</tool_call>",
        expect![[r#"
            content: ""
            error InvalidArguments "INVALID_TOOL_CALL_FORMAT" at (0, 36): the call of a has no "arguments"
            error InvalidArguments "INVALID_TOOL_CALL_FORMAT" at (36, 90): "arguments" of b is an array, not an object
            error InvalidArguments "INVALID_TOOL_CALL_FORMAT" at (90, 146): "arguments" of c is a string that holds no JSON object
        "#]],
    );
    check_parse(
        "a </tool_call> b <tool_call>{\"name\": \"x\", \"arguments\": {}} <tool_call>{\"name\": \"y\", \"arguments\": {}}</tool_call> c <tool_call>never closed",
        expect![[r#"
            content: "a  b  c"
            error UnexpectedClosingTag "INVALID_TOOL_CALL_FORMAT" at (2, 14): </tool_call> at byte 2 closes no <tool_call>
            error UnclosedTag "INVALID_TOOL_CALL_FORMAT" at (17, 59): <tool_call> at byte 17 has no </tool_call> before the next <tool_call>
            call y {}
            error UnclosedTag "INVALID_TOOL_CALL_FORMAT" at (115, 138): <tool_call> at byte 115 has no </tool_call> before the end of the turn
        "#]],
    );
}

#[test]
fn a_call_renders_back_to_the_block_it_came_from() {
    let call = ToolCall {
        name: "get_user".to_owned(),
        arguments: json!({"user_id": "ü1", "n": 2})
            .as_object()
            .unwrap()
            .clone(),
    };
    let block = call.to_block();
    expect![[r#"
        <tool_call>
        {"name": "get_user", "arguments": {"user_id": "ü1", "n": 2}}
        </tool_call>"#]]
    .assert_eq(&block);
    let parsed = parse_tool_calls(&block);
    assert_eq!(parsed.calls, vec![Ok(call)]);
}

// The fuzz target's invariant: spans inside the text on char boundaries, valid calls round-trip.
include!("../../fuzz/fuzz_targets/parse_tool_calls_check.rs");

#[test]
fn fuzz_seed_corpus_passes_the_fuzz_check() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/parse_tool_calls");
    let mut n_seeds = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        check_parse_tool_calls(&std::fs::read(entry.unwrap().path()).unwrap());
        n_seeds += 1;
    }
    assert!(n_seeds >= 5, "{n_seeds} seeds in {}", dir.display());
}

#[test]
fn tag_texts_inside_json_strings_stay_in_the_call() {
    check_parse(
        "<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"text\": \"</tool_call> and <tool_call>\"}}\n</tool_call>",
        expect![[r#"
            content: ""
            call echo {"text":"</tool_call> and <tool_call>"}
        "#]],
    );
}

#[test]
fn garbled_outputs_never_panic() {
    const PIECES: &[&str] = &[
        "<tool_call>",
        "</tool_call>",
        "<tool_call",
        "</tool_",
        "\n",
        "{",
        "}",
        "[",
        "]",
        "\"name\"",
        "\"arguments\"",
        ":",
        ",",
        "\"get_user\"",
        "{\"a\": 1}",
        "\"{\\\"x\\\": 2}\"",
        "null",
        "é",
        "🚀",
        "\\",
        "\"",
        " ",
        "<think>",
        "x",
        "7",
        "{\"name\": \"get_user\", \"arguments\": {\"a\": 1}}",
        "{\"name\": \"</tool_call>\", \"arguments\": {\"<tool_call>\": 1}}",
    ];
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut n_calls = 0;
    let mut n_errors = 0;
    for _ in 0..20_000 {
        let n_pieces = rng.below(24);
        let text: String = (0..n_pieces)
            .map(|_| PIECES[rng.below(PIECES.len())])
            .collect();
        let parsed = parse_tool_calls(&text);
        n_calls += parsed.calls.iter().filter(|c| c.is_ok()).count();
        n_errors += parsed.calls.iter().filter(|c| c.is_err()).count();
        check_parse_tool_calls(text.as_bytes());
        // Cut at an arbitrary byte too: invalid UTF-8 is read lossily, as the fuzz target does.
        let cut = rng.below(text.len() + 1);
        check_parse_tool_calls(&text.as_bytes()[..cut]);
    }
    assert!(
        n_errors > 1000 && n_calls > 10,
        "{n_calls} calls, {n_errors} errors"
    );
}
