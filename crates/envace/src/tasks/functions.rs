//! The task families of the `functions` environment (`env::functions`): single, multiple,
//! parallel and parallel-multiple calls of its pure functions, with requests that name units and
//! dates as people write them.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{Fact, Plan, Rng, capitalise, pick_text, split_of};
use crate::chat::ToolCall;
use crate::config::TaskSplit;
use crate::env::functions::{
    LENGTH_NAMES, LENGTH_UNITS, MONTHS, TEMPERATURE_NAMES, civil_from_days, days_from_civil,
    format_date, parse_date, run,
};
use crate::env::pyjson;

/// An ISO date written in words, `March 5, 2023` or `5 March 2023` (the tools take only ISO).
fn date_in_words(iso: &str, rng: &mut Rng) -> String {
    let Ok(days) = parse_date("date", iso) else {
        return iso.to_owned();
    };
    let (y, m, d) = civil_from_days(days);
    let month = MONTHS[(m - 1).clamp(0, 11) as usize];
    if rng.chance(0.5) {
        format!("{month} {d}, {y}")
    } else {
        format!("{d} {month} {y}")
    }
}

const WORDS: [&str; 24] = [
    "banana",
    "orchestra",
    "quantum",
    "meadow",
    "lantern",
    "cascade",
    "harbor",
    "velvet",
    "ember",
    "horizon",
    "pebble",
    "saffron",
    "thunder",
    "umbrella",
    "voyage",
    "whisper",
    "galaxy",
    "iceberg",
    "juniper",
    "kestrel",
    "labyrinth",
    "marble",
    "nectar",
    "origami",
];

/// A data value of the split: draws until the value's key falls in it.
fn split_value<T: ToString>(
    split: TaskSplit,
    rng: &mut Rng,
    mut draw: impl FnMut(&mut Rng) -> T,
) -> T {
    loop {
        let value = draw(rng);
        if split_of(&format!("value:{}", value.to_string())) == split {
            return value;
        }
    }
}

/// One planned call with its question, the sentence that answers it, the result that sentence
/// states (the fact a final answer must mention) and the data values it uses.
struct Item {
    call: ToolCall,
    question: String,
    answer_text: String,
    result_text: String,
    values: Vec<String>,
}

fn shown(value: &Value) -> String {
    pyjson::dumps(value, false)
}

/// A random single call of one kind (0 arithmetic, 1 units, 2 strings, 3 dates, 4 units
/// named in words, 5 dates written in words).
fn item(kind: usize, split: TaskSplit, rng: &mut Rng) -> Option<Item> {
    match kind {
        4 => return named_units_item(split, rng),
        5 => return named_dates_item(split, rng),
        _ => {}
    }
    let (call, question, values) = match kind {
        0 => {
            let a = split_value(split, rng, |r| r.range(2, 999));
            let b = split_value(split, rng, |r| r.range(2, 99));
            let op = *rng.pick(&["add", "subtract", "multiply", "power"])?;
            let (call, q) = match op {
                "power" => {
                    let e = rng.range(2, 4);
                    (
                        ToolCall::new("power", vec![("base", json!(b)), ("exponent", json!(e))]),
                        pick_text(
                            rng,
                            &["{b} to the power of {e}", "{b}^{e}", "{b} raised to {e}"],
                            &[("b", b.to_string()), ("e", e.to_string())],
                        ),
                    )
                }
                _ => (
                    ToolCall::new(op, vec![("a", json!(a)), ("b", json!(b))]),
                    match op {
                        "add" => pick_text(
                            rng,
                            &["{a} plus {b}", "the sum of {a} and {b}", "{a} + {b}"],
                            &[("a", a.to_string()), ("b", b.to_string())],
                        ),
                        "subtract" => pick_text(
                            rng,
                            &["{a} minus {b}", "{b} subtracted from {a}", "{a} - {b}"],
                            &[("a", a.to_string()), ("b", b.to_string())],
                        ),
                        _ => pick_text(
                            rng,
                            &["{a} times {b}", "the product of {a} and {b}", "{a} * {b}"],
                            &[("a", a.to_string()), ("b", b.to_string())],
                        ),
                    },
                ),
            };
            let values = if op == "power" {
                vec![b.to_string()]
            } else {
                vec![a.to_string(), b.to_string()]
            };
            (call, q, values)
        }
        1 => {
            let value = split_value(split, rng, |r| r.range(1, 500));
            if rng.chance(0.5) {
                let from = rng.pick(&LENGTH_UNITS)?.0;
                let to = rng.pick(&LENGTH_UNITS)?.0;
                if from == to {
                    return None;
                }
                (
                    ToolCall::new(
                        "convert_length",
                        vec![
                            ("value", json!(value)),
                            ("from_unit", json!(from)),
                            ("to_unit", json!(to)),
                        ],
                    ),
                    pick_text(
                        rng,
                        &[
                            "{v} {f} in {t}",
                            "how many {t} are {v} {f}",
                            "{v} {f} converted to {t}",
                        ],
                        &[
                            ("v", value.to_string()),
                            ("f", from.to_owned()),
                            ("t", to.to_owned()),
                        ],
                    ),
                    vec![value.to_string()],
                )
            } else {
                let from = *rng.pick(&["C", "F", "K"])?;
                let to = *rng.pick(&["C", "F", "K"])?;
                if from == to {
                    return None;
                }
                (
                    ToolCall::new(
                        "convert_temperature",
                        vec![
                            ("value", json!(value)),
                            ("from_unit", json!(from)),
                            ("to_unit", json!(to)),
                        ],
                    ),
                    pick_text(
                        rng,
                        &[
                            "{v} degrees {f} in {t}",
                            "{v}°{f} expressed in {t}",
                            "the temperature {v} {f} converted to {t}",
                        ],
                        &[
                            ("v", value.to_string()),
                            ("f", from.to_owned()),
                            ("t", to.to_owned()),
                        ],
                    ),
                    vec![value.to_string()],
                )
            }
        }
        2 => {
            let word = split_value(split, rng, |r| {
                let a = r.pick(&WORDS).copied().unwrap_or("word");
                let b = r.pick(&WORDS).copied().unwrap_or("word");
                format!("{a} {b}")
            });
            let op = *rng.pick(&["reverse_string", "count_vowels", "to_uppercase"])?;
            let q = match op {
                "reverse_string" => pick_text(
                    rng,
                    &["the text \"{w}\" reversed", "\"{w}\" spelled backwards"],
                    &[("w", word.clone())],
                ),
                "count_vowels" => pick_text(
                    rng,
                    &[
                        "the number of vowels in \"{w}\"",
                        "how many vowels \"{w}\" has",
                    ],
                    &[("w", word.clone())],
                ),
                _ => pick_text(
                    rng,
                    &["\"{w}\" in upper case", "\"{w}\" in capitals"],
                    &[("w", word.clone())],
                ),
            };
            (
                ToolCall::new(op, vec![("text", json!(word))]),
                q,
                vec![word],
            )
        }
        _ => date_item(split, rng, |date, _| date.to_owned())?,
    };
    finish_item(call, question, values)
}

/// The item of a call: the environment's result, the sentence stating it and the fact.
fn finish_item(call: ToolCall, question: String, values: Vec<String>) -> Option<Item> {
    let args = &call.arguments;
    let result = run(&call.name, args).ok()?.get("result").cloned()?;
    let result_text = shown_plain(&result);
    Some(Item {
        call,
        answer_text: format!("{question} is {result_text}"),
        question,
        result_text,
        values,
    })
}

/// A conversion whose request names the units in words ("12 feet in metres"): the call must
/// use the tool's unit codes, and a call with the words gets the tool's real error listing
/// them.
fn named_units_item(split: TaskSplit, rng: &mut Rng) -> Option<Item> {
    let value = split_value(split, rng, |r| r.range(1, 500));
    let (name, table): (&str, &[(&str, &[&str])]) = if rng.chance(0.5) {
        ("convert_length", &LENGTH_NAMES)
    } else {
        ("convert_temperature", &TEMPERATURE_NAMES)
    };
    let (from, from_names) = *rng.pick(table)?;
    let (to, to_names) = *rng.pick(table)?;
    if from == to {
        return None;
    }
    let from_word = *rng.pick(from_names)?;
    let to_word = *rng.pick(to_names)?;
    let call = ToolCall::new(
        name,
        vec![
            ("value", json!(value)),
            ("from_unit", json!(from)),
            ("to_unit", json!(to)),
        ],
    );
    let question = pick_text(
        rng,
        &[
            "{v} {f} in {t}",
            "{v} {f} converted to {t}",
            "how much {v} {f} is in {t}",
        ],
        &[
            ("v", value.to_string()),
            ("f", from_word.to_owned()),
            ("t", to_word.to_owned()),
        ],
    );
    finish_item(call, question, vec![value.to_string()])
}

/// A date question whose request writes the dates in words ("March 5, 2023"): the call must
/// use ISO dates, and a call with the words gets the tool's real error.
fn named_dates_item(split: TaskSplit, rng: &mut Rng) -> Option<Item> {
    let (call, question, values) = date_item(split, rng, date_in_words)?;
    finish_item(call, question, values)
}

/// A date question (days between, days after, weekday): the call takes ISO dates, and the
/// request shows each date as `shown` writes it.
fn date_item(
    split: TaskSplit,
    rng: &mut Rng,
    shown: fn(&str, &mut Rng) -> String,
) -> Option<(ToolCall, String, Vec<String>)> {
    let date_of = |r: &mut Rng| format_date(days_from_civil(2020, 1, 1) + r.range(0, 3000));
    let start = split_value(split, rng, date_of);
    let start_text = shown(&start, rng);
    let op = *rng.pick(&["days_between", "add_days", "day_of_week"])?;
    Some(match op {
        "days_between" => {
            let end = split_value(split, rng, date_of);
            let end_text = shown(&end, rng);
            (
                ToolCall::new(
                    "days_between",
                    vec![("start_date", json!(start)), ("end_date", json!(end))],
                ),
                pick_text(
                    rng,
                    &[
                        "the number of days from {s} to {e}",
                        "how many days lie between {s} and {e}",
                    ],
                    &[("s", start_text), ("e", end_text)],
                ),
                vec![start, end],
            )
        }
        "add_days" => {
            let days = rng.range(1, 400);
            (
                ToolCall::new(
                    "add_days",
                    vec![("date", json!(start)), ("days", json!(days))],
                ),
                pick_text(
                    rng,
                    &["the date {n} days after {s}", "{s} plus {n} days"],
                    &[("s", start_text), ("n", days.to_string())],
                ),
                vec![start],
            )
        }
        _ => (
            ToolCall::new("day_of_week", vec![("date", json!(start))]),
            pick_text(
                rng,
                &["the weekday of {s}", "which day of the week {s} was"],
                &[("s", start_text)],
            ),
            vec![start],
        ),
    })
}

/// A result as the answer states it: strings unquoted, numbers as the tool shows them.
fn shown_plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => shown(other),
    }
}

const OPENERS: [&str; 6] = [
    "Please compute {q}.",
    "What is {q}?",
    "I need {q}.",
    "Can you work out {q}?",
    "Tell me {q}.",
    "Quick one: {q}?",
];

/// Plans a functions task: single (1–2), multiple (3), parallel (4), parallel multiple (5);
/// with `families` given, of one of those families instead (at the same difficulty).
pub(crate) fn plan(split: TaskSplit, difficulty: u32, families: &[String], rng: &mut Rng) -> Plan {
    loop {
        let drawn = if families.is_empty() {
            try_plan(split, difficulty, rng)
        } else {
            rng.pick(families)
                .and_then(|family| family_items(family, split, rng))
                .and_then(|(family, items, parallel)| {
                    plan_of(family, items, parallel, difficulty, rng)
                })
        };
        if let Some(plan) = drawn {
            return plan;
        }
    }
}

/// The single-call families with the kind of call each draws.
const SINGLE_FAMILIES: [(&str, usize); 6] = [
    ("fn_arithmetic", 0),
    ("fn_units", 1),
    ("fn_strings", 2),
    ("fn_dates", 3),
    ("fn_units_named", 4),
    ("fn_dates_named", 5),
];

/// The calls of a task of `family`: its items and whether they go in one parallel turn.
fn family_items(
    family: &str,
    split: TaskSplit,
    rng: &mut Rng,
) -> Option<(&'static str, Vec<Item>, bool)> {
    if let Some((name, kind)) = SINGLE_FAMILIES.iter().find(|(name, _)| *name == family) {
        return Some((name, vec![item(*kind, split, rng)?], false));
    }
    match family {
        "fn_multiple" => multiple_items(split, rng),
        "fn_parallel" => parallel_items(split, rng),
        "fn_parallel_multiple" => parallel_multiple_items(split, rng),
        _ => None,
    }
}

fn multiple_items(split: TaskSplit, rng: &mut Rng) -> Option<(&'static str, Vec<Item>, bool)> {
    let first = rng.below(4);
    let second = (first + 1 + rng.below(3)) % 4;
    Some((
        "fn_multiple",
        vec![item(first, split, rng)?, item(second, split, rng)?],
        false,
    ))
}

fn parallel_items(split: TaskSplit, rng: &mut Rng) -> Option<(&'static str, Vec<Item>, bool)> {
    let kind = rng.below(4);
    let n = 2 + rng.below(2);
    let items: Vec<Item> = (0..n)
        .map(|_| item(kind, split, rng))
        .collect::<Option<_>>()?;
    Some(("fn_parallel", items, true))
}

fn parallel_multiple_items(
    split: TaskSplit,
    rng: &mut Rng,
) -> Option<(&'static str, Vec<Item>, bool)> {
    let n = 3 + rng.below(2);
    let start = rng.below(4);
    let items: Vec<Item> = (0..n)
        .map(|k| item((start + k) % 4, split, rng))
        .collect::<Option<_>>()?;
    Some(("fn_parallel_multiple", items, true))
}

fn try_plan(split: TaskSplit, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let (family, items, parallel): (&'static str, Vec<Item>, bool) = match difficulty {
        1 | 2 => {
            let kind = if difficulty == 1 {
                rng.below(2) * 2
            } else {
                rng.below(4)
            };
            let family = ["fn_arithmetic", "fn_units", "fn_strings", "fn_dates"][kind];
            (family, vec![item(kind, split, rng)?], false)
        }
        3 => multiple_items(split, rng)?,
        4 => parallel_items(split, rng)?,
        _ => parallel_multiple_items(split, rng)?,
    };
    plan_of(family, items, parallel, difficulty, rng)
}

/// The plan of a task made of `items`: request, turns, facts and answer.
fn plan_of(
    family: &'static str,
    items: Vec<Item>,
    parallel: bool,
    difficulty: u32,
    rng: &mut Rng,
) -> Option<Plan> {
    let calls: Vec<ToolCall> = items.iter().map(|i| i.call.clone()).collect();
    let distinct: BTreeSet<String> = calls.iter().map(|c| c.to_block()).collect();
    if distinct.len() != calls.len() {
        return None;
    }
    let questions: Vec<String> = items.iter().map(|i| i.question.clone()).collect();
    let joined = match questions.as_slice() {
        [one] => one.clone(),
        [rest @ .., last] => format!("{}, and {last}", rest.join(", ")),
        [] => return None,
    };
    let mut request = pick_text(rng, &OPENERS, &[("q", joined)]);
    if difficulty == 2 {
        let aside = *rng.pick(&[
            "I'm preparing a report for tomorrow.",
            "No need to explain the method.",
            "My colleague got a different answer earlier.",
            "This is for a homework check.",
        ])?;
        request = format!("{aside} {request}");
    }
    let turns = if parallel {
        vec![calls.clone()]
    } else {
        calls.iter().map(|c| vec![c.clone()]).collect()
    };
    let facts: Vec<Fact> = items
        .iter()
        // The answer must state each result; how it words the question is its own affair.
        .map(|i| Fact {
            what: i.question.clone(),
            text: i.result_text.clone(),
        })
        .collect();
    let answer = format!(
        "{}.",
        items
            .iter()
            .map(|i| capitalise(&i.answer_text))
            .collect::<Vec<_>>()
            .join(". ")
    );
    let touched = items
        .iter()
        .flat_map(|i| i.values.iter().map(|v| format!("value:{v}")))
        .collect();
    Some(Plan {
        family,
        request,
        turns,
        required: calls,
        facts,
        answer,
        check_state: false,
        touched,
    })
}

/// The functions family names with their difficulty.
pub(crate) fn families() -> Vec<(&'static str, u32)> {
    vec![
        ("fn_arithmetic", 1),
        ("fn_strings", 1),
        ("fn_units", 2),
        ("fn_dates", 2),
        ("fn_multiple", 3),
        ("fn_parallel", 4),
        ("fn_parallel_multiple", 5),
        // Drawn only when named in `[env].families`: requests that name units and write dates
        // in words, which the tools reject with real errors until the call uses their codes.
        ("fn_units_named", 2),
        ("fn_dates_named", 2),
    ]
}
