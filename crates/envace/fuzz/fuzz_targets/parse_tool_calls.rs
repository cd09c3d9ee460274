//! Fuzzes the tool-call parser with arbitrary bytes (read as lossy UTF-8): it must never panic,
//! and every error span must lie on character boundaries inside the text.
#![no_main]

include!("parse_tool_calls_check.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    check_parse_tool_calls(data);
});
