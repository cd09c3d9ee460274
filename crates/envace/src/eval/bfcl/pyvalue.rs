//! JSON values seen the way BFCL's Python checker sees them: exact Python types (an integer is
//! not a float, a boolean is not an integer), Python equality (`1 == 1.0`, `True == 1`) and
//! `repr` for error messages.

use serde_json::Value;

/// The Python type a decoded JSON value has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PyType {
    Str,
    Int,
    Float,
    Bool,
    List,
    Dict,
    None,
}

impl PyType {
    /// Python's name of the type, as `type(v).__name__` prints it.
    pub fn name(self) -> &'static str {
        match self {
            PyType::Str => "str",
            PyType::Int => "int",
            PyType::Float => "float",
            PyType::Bool => "bool",
            PyType::List => "list",
            PyType::Dict => "dict",
            PyType::None => "NoneType",
        }
    }
}

/// The exact Python type of `value` (`json.loads` makes `3` an int and `3.0` a float).
pub fn py_type(value: &Value) -> PyType {
    match value {
        Value::String(_) => PyType::Str,
        Value::Number(n) if n.is_f64() => PyType::Float,
        Value::Number(_) => PyType::Int,
        Value::Bool(_) => PyType::Bool,
        Value::Array(_) => PyType::List,
        Value::Object(_) => PyType::Dict,
        Value::Null => PyType::None,
    }
}

/// A number's value for comparison: booleans count as 0 and 1, as in Python.
fn numeric(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

/// Python's `a == b` on decoded JSON.
pub fn py_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Null, Value::Null) => true,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, p)| y.get(key).is_some_and(|q| py_eq(p, q)))
        }
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => match (numeric(a), numeric(b)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
    }
}

/// Python's `value in items`.
pub fn py_in(value: &Value, items: &[Value]) -> bool {
    items.iter().any(|item| py_eq(value, item))
}

/// Python's `repr` of a decoded JSON value, for the checker's messages.
pub use crate::env::pyjson::repr as py_repr;

/// BFCL's string standardisation: drop spaces and `,./-_*^`, lower-case, and read single
/// quotes as double quotes (so `April 1, 2024` matches `april 1 2024`).
pub fn standardize(text: &str) -> String {
    text.chars()
        .filter(|c| !matches!(c, ' ' | ',' | '.' | '/' | '-' | '_' | '*' | '^'))
        .flat_map(char::to_lowercase)
        .map(|c| if c == '\'' { '"' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn types_and_equality_follow_python() {
        assert_eq!(py_type(&json!(3)), PyType::Int);
        assert_eq!(py_type(&json!(3.0)), PyType::Float);
        assert_eq!(py_type(&json!(true)), PyType::Bool);
        assert!(py_eq(&json!(1), &json!(1.0)));
        assert!(py_eq(&json!(true), &json!(1)));
        assert!(!py_eq(&json!("1"), &json!(1)));
        assert!(py_eq(&json!([1, {"a": 2.0}]), &json!([1.0, {"a": 2}])));
        assert!(!py_eq(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
        assert!(py_in(&json!(2), &[json!("x"), json!(2.0)]));
    }

    #[test]
    fn repr_and_standardisation_match_python() {
        assert_eq!(
            py_repr(&json!({"k": [1, 2.0, "it's", true, null]})),
            "{'k': [1, 2.0, \"it's\", True, None]}"
        );
        assert_eq!(standardize("April 1, 2024"), "april12024");
        assert_eq!(standardize("New_York-City 'x'"), "newyorkcity\"x\"");
    }
}
