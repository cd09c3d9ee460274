// The invariant of the `parse_tool_calls` fuzz target, shared with `tests/engine/chat.rs` (which
// includes this file) so that the stable test suite compiles it and runs the seed corpus.

/// Parses `data` as an assistant turn and checks what any parse must satisfy.
pub fn check_parse_tool_calls(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let parsed = envace::chat::parse_tool_calls(&text);
    let mut last_end = 0;
    for call in &parsed.calls {
        match call {
            Ok(call) => assert!(!call.name.trim().is_empty()),
            Err(err) => {
                let (start, end) = err.span;
                assert!(last_end <= start && start < end && end <= text.len());
                assert!(text.is_char_boundary(start) && text.is_char_boundary(end));
                assert!(text[start..].starts_with('<'));
                last_end = end;
            }
        }
    }
    assert!(parsed.content.len() <= text.len());
    // A well-formed call survives a render → parse round trip.
    for call in parsed.valid_calls() {
        let again = envace::chat::parse_tool_calls(&call.to_block());
        assert_eq!(again.calls, vec![Ok(call.clone())]);
    }
}
