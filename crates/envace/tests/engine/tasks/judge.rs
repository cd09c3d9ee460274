//! The rule judge's parts: tool-call parsing, final answers and the episode score formula.

use envace::chat::{Message, Role};
use envace::tasks::{episode_score, final_answer, parse_tool_calls};
use expect_test::{Expect, expect};

fn check_parse(text: &str, expect: Expect) {
    let parsed: Vec<String> = parse_tool_calls(text)
        .into_iter()
        .map(|call| match call {
            Ok(call) => format!("ok {} {}", call.name, call.arguments_value()),
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
    // Read as the engine reads calls: arguments given as a JSON string are accepted too.
    check_parse(
        "<tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>",
        expect![[r#"ok add {"a":1}"#]],
    );
    check_parse(
        "<tool_call>\n{\"name\": \"add\"}\n</tool_call>",
        expect![[r#"err the call of add has no "arguments""#]],
    );
    check_parse(
        "<tool_call>\n{oops}\n</tool_call>",
        expect!["err the tool call is not valid JSON: key must be a string at line 1 column 2"],
    );
    check_parse(
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {}}",
        expect!["err <tool_call> at byte 0 has no </tool_call> before the end of the turn"],
    );
}

#[test]
fn the_final_answer_is_the_last_assistant_text_without_calls() {
    let msg = |role, content: &str| Message {
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
    let env = envace::env::functions::FunctionsEnv::new().unwrap();
    let score = envace::env::EpisodeScore::new(0.75, &env);
    expect![[r#"{"kind":"scored","score":0.75}"#]]
        .assert_eq(&serde_json::to_string(&score).unwrap());
}

fn standard(weight: f64, rule: envace::tasks::Rule) -> envace::tasks::Standard {
    envace::tasks::Standard {
        question: String::new(),
        focus_on: String::new(),
        pass_condition: String::new(),
        failure_examples: Vec::new(),
        weight,
        rule,
    }
}

/// A checklist with one argument standard (weight ½) per argument of each `(a, b)` add call,
/// and a fact.
fn add_checklist(calls: &[(i64, i64)], fact: &str) -> envace::tasks::Checklist {
    let mut standards = Vec::new();
    for &(a, b) in calls {
        for key in ["a", "b"] {
            standards.push(standard(
                0.5,
                envace::tasks::Rule::Argument {
                    name: "add".to_owned(),
                    arguments: serde_json::json!({"a": a, "b": b}),
                    key: key.to_owned(),
                },
            ));
        }
    }
    standards.push(standard(
        1.0,
        envace::tasks::Rule::Mentions {
            text: fact.to_owned(),
            exact_case: false,
        },
    ));
    envace::tasks::Checklist {
        turn_idx: 0,
        standards,
    }
}

/// A trajectory making `calls` in one turn, then answering `answer`.
fn add_trajectory(calls: &[(i64, i64)], answer: &str) -> Vec<Message> {
    let blocks: Vec<String> = calls
        .iter()
        .map(|(a, b)| {
            format!("<tool_call>\n{{\"name\": \"add\", \"arguments\": {{\"a\": {a}, \"b\": {b}}}}}\n</tool_call>")
        })
        .collect();
    let mut out = vec![Message {
        role: Role::User,
        content: "What is 379 + 28?".to_owned(),
    }];
    if !blocks.is_empty() {
        out.push(Message {
            role: Role::Assistant,
            content: blocks.join("\n"),
        });
        out.push(Message {
            role: Role::Tool,
            content: "407".to_owned(),
        });
    }
    out.push(Message {
        role: Role::Assistant,
        content: answer.to_owned(),
    });
    out
}

#[test]
fn near_misses_earn_the_arguments_and_facts_they_got_right() {
    let one = add_checklist(&[(379, 28)], "407");
    let score = |checklist: &envace::tasks::Checklist, calls: &[(i64, i64)], answer: &str| {
        envace::tasks::judge(
            std::slice::from_ref(checklist),
            &add_trajectory(calls, answer),
            None,
            1,
        )
        .score
    };
    // Standards weigh ½ (a), ½ (b) and 1 (the fact): a score is the weighted share met.
    assert_eq!(score(&one, &[(379, 28)], "It is 407."), 1.0);
    assert_eq!(score(&one, &[(379, 29)], "It is 408."), 0.25);
    assert_eq!(score(&one, &[(379, 28)], "I do not know."), 0.5);
    assert_eq!(score(&one, &[], "It is 407."), 0.5);
    assert_eq!(score(&one, &[(1, 2)], "No idea."), 0.0);
    // Several calls: the one that matches best is judged (here the second, exact).
    assert_eq!(score(&one, &[(28, 379), (379, 28)], "It is 407."), 1.0);
    // Two required calls to the same tool are paired with actual calls one to one, so crossed
    // arguments earn half of each call, never a full match.
    let two = add_checklist(&[(1, 2), (3, 4)], "done");
    assert_eq!(score(&two, &[(1, 2), (3, 4)], "done"), 1.0);
    assert_eq!(
        score(&two, &[(1, 4), (3, 2)], "done"),
        (0.5 + 0.5 + 1.0) / 3.0
    );
    assert_eq!(score(&two, &[(1, 2)], "done"), (1.0 + 1.0) / 3.0);
    let report = envace::tasks::judge(
        std::slice::from_ref(&two),
        &add_trajectory(&[(1, 2)], "done"),
        None,
        1,
    );
    let reasons: Vec<String> = report.verdicts.iter().map(|v| v.reason.clone()).collect();
    expect![[r#"
        add was called with a = 1
        add was called with b = 2
        no call to add is left for {"a":3,"b":4}
        no call to add is left for {"a":3,"b":4}
        the final answer mentions "done""#]]
    .assert_eq(&reasons.join("\n"));
}
