//! Known answers of the functions domain's tools, including argument and tool errors.

use envace::env::functions::FunctionsEnv;
use envace::env::{Environment, render_outcome};
use expect_test::{Expect, expect};
use serde_json::{Value, json};

fn check(name: &str, arguments: Value, expect: Expect) {
    let mut env = FunctionsEnv::new().unwrap();
    expect.assert_eq(&render_outcome(&env.call(name, &arguments)));
}

#[test]
fn arithmetic() {
    check(
        "add",
        json!({"a": 2, "b": 3.5}),
        expect![[r#"{"result": 5.5}"#]],
    );
    check(
        "subtract",
        json!({"a": 2, "b": 30}),
        expect![[r#"{"result": -28}"#]],
    );
    check(
        "multiply",
        json!({"a": 12, "b": 12}),
        expect![[r#"{"result": 144}"#]],
    );
    check(
        "power",
        json!({"base": 3, "exponent": 4}),
        expect![[r#"{"result": 81}"#]],
    );
    check(
        "add",
        json!({"a": 0.1, "b": 0.2}),
        expect![[r#"{"result": 0.3}"#]],
    );
}

#[test]
fn units() {
    check(
        "convert_length",
        json!({"value": 5, "from_unit": "km", "to_unit": "m"}),
        expect![[r#"{"result": 5000}"#]],
    );
    check(
        "convert_length",
        json!({"value": 12, "from_unit": "in", "to_unit": "ft"}),
        expect![[r#"{"result": 1}"#]],
    );
    check(
        "convert_length",
        json!({"value": 10, "from_unit": "ft", "to_unit": "m"}),
        expect![[r#"{"result": 3.048}"#]],
    );
    check(
        "convert_temperature",
        json!({"value": 100, "from_unit": "C", "to_unit": "F"}),
        expect![[r#"{"result": 212}"#]],
    );
    check(
        "convert_temperature",
        json!({"value": 0, "from_unit": "K", "to_unit": "C"}),
        expect![[r#"{"result": -273.15}"#]],
    );
}

#[test]
fn strings() {
    check(
        "reverse_string",
        json!({"text": "quantum meadow"}),
        expect![[r#"{"result": "wodaem mutnauq"}"#]],
    );
    check(
        "count_vowels",
        json!({"text": "Orchestra Umbrella"}),
        expect![[r#"{"result": 6}"#]],
    );
    check(
        "to_uppercase",
        json!({"text": "velvet ember"}),
        expect![[r#"{"result": "VELVET EMBER"}"#]],
    );
}

#[test]
fn dates() {
    check(
        "days_between",
        json!({"start_date": "2024-02-28", "end_date": "2024-03-01"}),
        expect![[r#"{"result": 2}"#]],
    );
    check(
        "days_between",
        json!({"start_date": "2024-01-01", "end_date": "2023-01-01"}),
        expect![[r#"{"result": -365}"#]],
    );
    check(
        "add_days",
        json!({"date": "2023-12-31", "days": 60}),
        expect![[r#"{"result": "2024-02-29"}"#]],
    );
    check(
        "day_of_week",
        json!({"date": "2024-05-15"}),
        expect![[r#"{"result": "Wednesday"}"#]],
    );
    check(
        "day_of_week",
        json!({"date": "2000-01-01"}),
        expect![[r#"{"result": "Saturday"}"#]],
    );
}

#[test]
fn errors_name_the_argument_or_tool() {
    check(
        "day_of_week",
        json!({"date": "2023-02-29"}),
        expect![[r#"Error: argument date: "2023-02-29" is not a date YYYY-MM-DD"#]],
    );
    check(
        "power",
        json!({"base": 2, "exponent": 11}),
        expect![["Error: argument `exponent` of power: 11 is greater than the maximum of 10"]],
    );
    check(
        "convert_length",
        json!({"value": 1, "from_unit": "mi", "to_unit": "m"}),
        expect![[
            r#"Error: argument `from_unit` of convert_length: "mi" is not one of "mm", "cm", "m", "km", "in" or "ft""#
        ]],
    );
    check(
        "sqrt",
        json!({"x": 4}),
        expect![[
            "Error: tool \"sqrt\" is not available; the tools are: add, subtract, multiply, power, convert_length, convert_temperature, reverse_string, count_vowels, to_uppercase, days_between, add_days, day_of_week"
        ]],
    );
    let env = FunctionsEnv::new().unwrap();
    assert_eq!(env.state_hash(), env.box_clone().state_hash());
    assert_eq!(env.tools().len(), 12);
}
