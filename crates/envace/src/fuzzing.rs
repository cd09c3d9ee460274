//! Fuzzing entry points: each parser that reads outside input (model output, config files, GGUF
//! headers, benchmark data, HTTP request bodies) behind one function that takes arbitrary bytes
//! and must never panic, checking what must hold of what it accepts.
//!
//! `cargo xtask fuzz TARGET` drives these with AFL++ (the `fuzz/` crate); the engine's tests run
//! every committed corpus and regression file (`fuzz/corpus/TARGET/`, `fuzz/regressions/TARGET/`)
//! through them, so a crash found once stays fixed.

use std::path::Path;

use serde_json::Value;

use crate::chat::ChatTemplate;

/// The fuzz targets, by name.
pub const TARGETS: [&str; 6] = [
    "tool_call",
    "rehearse",
    "config",
    "gguf_header",
    "bfcl_line",
    "request",
];

/// Runs target `name` on `data`; a panic is a bug found. `false` when no target has that name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "tool_call" => tool_call(data),
        "rehearse" => rehearse(data),
        "config" => config(data),
        "gguf_header" => gguf_header(data),
        "bfcl_line" => bfcl_line(data),
        "request" => request(data),
        _ => return false,
    }
    true
}

/// The tool-call parser on a model's turn: every span it reports for a malformed block lies in
/// the text on character boundaries (the server cuts the text there), and re-parsing the
/// content it leaves finds no well-formed call in it.
pub fn tool_call(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = crate::chat::parse_tool_calls(text);
    for call in &parsed.calls {
        match call {
            Ok(call) => {
                let _ = Value::Object(call.arguments.clone()).to_string();
            }
            Err(err) => {
                let (start, end) = err.span;
                assert!(
                    start <= end && end <= text.len(),
                    "span {start}..{end} outside {} bytes",
                    text.len()
                );
                assert!(
                    text.is_char_boundary(start) && text.is_char_boundary(end),
                    "span {start}..{end} cuts a character"
                );
            }
        }
    }
}

/// The rehearse parser on a model's answer: what it accepts is written back as the block a
/// rehearse role learns, which parses to the same value.
pub fn rehearse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(value) = crate::rehearse::parse_execution_result(text) {
        let _ = crate::rehearse::render_for_agent(&value);
        let block = crate::rehearse::execution_result_block(&value);
        let again = crate::rehearse::parse_execution_result(&block)
            .unwrap_or_else(|e| panic!("its own block {block:?} does not parse: {e:?}"));
        assert_eq!(again, value, "the block {block:?} reads back differently");
    }
}

/// The config loader on a TOML file: a config it accepts is written back as TOML that loads
/// to the same config.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = crate::config::parse(text, "fuzz.toml") {
        let written = config
            .to_toml()
            .unwrap_or_else(|e| panic!("an accepted config cannot be written: {e}"));
        let again = crate::config::parse(&written, "written.toml")
            .unwrap_or_else(|e| panic!("its own TOML does not load: {e}\n{written}"));
        assert_eq!(
            again, config,
            "the written TOML loads differently:\n{written}"
        );
    }
}

/// The GGUF header reader on a file's first bytes, and the model config read from its metadata.
pub fn gguf_header(data: &[u8]) {
    let mut reader = std::io::Cursor::new(data);
    if let Ok(gguf) = crate::model::Gguf::read_from(&mut reader, Path::new("fuzz.gguf")) {
        let _ = gguf.architecture();
        let _ = gguf.transformer_config();
    }
}

/// The BFCL loader on a question line and an answer line (the input's first two lines), then
/// the prompt, the gold output and the checker on the entry.
pub fn bfcl_line(data: &[u8]) {
    use crate::eval::bfcl;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.splitn(3, '\n');
    let question = lines.next().unwrap_or_default();
    let answer = lines.next();
    let Ok(entry) = bfcl::parse_entry_lines(question, answer, "fuzz.json:1") else {
        return;
    };
    let _ = bfcl::run::prompting_system(&entry);
    for category in [
        "simple_python",
        "multiple",
        "parallel",
        "simple_java",
        "simple_javascript",
    ] {
        if let Some(gold) = bfcl::gold_output(&entry, category) {
            let _ = bfcl::score_entry(&entry, category, &gold, Default::default());
        }
    }
    let decoded: Value = lines
        .next()
        .and_then(|line| serde_json::from_str(line).ok())
        .unwrap_or(Value::Null);
    let _ = bfcl::score_entry(&entry, "simple_python", &decoded, Default::default());
}

/// A ChatML template like SmolLM2's, for the request target.
const CHATML: &str = "{% for message in messages %}<|im_start|>{{ message['role'] }}\n\
    {{ message['content'] }}<|im_end|>\n{% endfor %}\
    {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A template that renders tools itself, for the request target.
const WITH_TOOLS: &str = "{% if tools %}{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}\
    {% endif %}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\
    {% if message.tool_calls %}{% for call in message.tool_calls %}{{ call | tojson }}{% endfor %}\
    {% endif %}\n{% endfor %}";

/// The server's request parser on a body, then the prompt it renders, with a template that
/// renders tools and one that gets them folded into the turns.
pub fn request(data: &[u8]) {
    use std::sync::OnceLock;
    static TEMPLATES: OnceLock<Option<(ChatTemplate, ChatTemplate)>> = OnceLock::new();
    let Some((plain, tools)) = TEMPLATES.get_or_init(|| {
        Some((
            ChatTemplate::new(CHATML, "chatml", "", "<|im_end|>").ok()?,
            ChatTemplate::new(WITH_TOOLS, "with-tools", "", "").ok()?,
        ))
    }) else {
        panic!("the fuzz target's own templates do not compile");
    };
    let _ = crate::serve::check_request_body(data, plain, false);
    let _ = crate::serve::check_request_body(data, tools, true);
}
