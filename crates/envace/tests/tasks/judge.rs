//! The rule judge's parts: tool-call parsing, final answers and the episode score formula.

use envace::tasks::{ChatMessage, Role, episode_score, final_answer, parse_tool_calls};
use expect_test::{Expect, expect};

fn check_parse(text: &str, expect: Expect) {
    let parsed: Vec<String> = parse_tool_calls(text)
        .into_iter()
        .map(|call| match call {
            Ok(call) => format!("ok {} {}", call.name, call.arguments),
            Err(reason) => format!("err {reason}"),
        })
        .collect();
    expect.assert_eq(&parsed.join("\n"));
}

#[test]
fn tool_calls_are_parsed_in_order_and_bad_blocks_are_data() {
    check_parse(
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"day_of_week\", \"arguments\": {\"date\": \"2024-05-01\"}}\n</tool_call>",
        expect![[r#"
            ok add {"a":1,"b":2}
            ok day_of_week {"date":"2024-05-01"}"#]],
    );
    check_parse("no calls here", expect![[""]]);
    check_parse(
        "<tool_call>\n{\"name\": \"add\"}\n</tool_call>",
        expect![[
            r#"err tool call "{\"name\": \"add\"}" lacks a string "name" or an object "arguments""#
        ]],
    );
    check_parse(
        "<tool_call>\n{oops}\n</tool_call>",
        expect![[r#"err tool call "{oops}" is not JSON: key must be a string at line 1 column 2"#]],
    );
    check_parse(
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {}}",
        expect![["err a <tool_call> block is not closed"]],
    );
}

#[test]
fn the_final_answer_is_the_last_assistant_text_without_calls() {
    let msg = |role, content: &str| ChatMessage {
        role,
        content: content.to_owned(),
    };
    let with_think = vec![
        msg(Role::User, "hi"),
        msg(Role::Assistant, "<think>hmm</think>\n\nThe answer is 3."),
    ];
    assert_eq!(
        final_answer(&with_think).as_deref(),
        Some("The answer is 3.")
    );
    let ends_in_call = vec![msg(
        Role::Assistant,
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {}}\n</tool_call>",
    )];
    assert_eq!(final_answer(&ends_in_call), None);
}

#[test]
fn episode_score_is_sum_over_turns_divided_by_checklists_times_max_turns() {
    let cases = [
        (vec![1.0], 1, 1),
        (vec![0.5, 1.0], 2, 1),
        (vec![1.0, 1.0], 2, 2),
        (vec![], 0, 1),
    ];
    let shown: Vec<String> = cases
        .iter()
        .map(|(scores, n, max)| {
            format!(
                "{scores:?} / ({n} x {max}) = {}",
                episode_score(scores, *n, *max)
            )
        })
        .collect();
    expect![[r#"
        [1.0] / (1 x 1) = 1
        [0.5, 1.0] / (2 x 1) = 0.75
        [1.0, 1.0] / (2 x 2) = 0.5
        [] / (0 x 1) = 0"#]]
    .assert_eq(&shown.join("\n"));
}

#[test]
fn built_in_environments_never_fault_so_their_episodes_are_scored() {
    let env = envace::tasks::functions::FunctionsEnv::new().unwrap();
    let score = envace::env::EpisodeScore::new(0.75, &env);
    expect![[r#"{"kind":"scored","score":0.75}"#]]
        .assert_eq(&serde_json::to_string(&score).unwrap());
}
