//! Python value semantics the backends share: numbers as `int` or `float`, `==` and ordering,
//! arithmetic with Python's error texts, `float()`/`int()` parsing, rounding, dict keys and
//! `KeyError` texts, iteration, `strptime` dates; and the reading of a class's `initial_config`.
//!
//! The values are decoded JSON (`serde_json::Value`). Each helper is written once here; a
//! backend with a value model of its own (`MathAPI`'s unbounded integers, `VehicleControlAPI`'s
//! non-finite floats) builds on the pieces that fit. Where the rebuild cannot hold what Python
//! would compute (an integer beyond 64 bits, an infinite float in the state), the helpers say so
//! in an error rather than store something else. The tests' `harness` at the end calls a
//! backend as BFCL's harness does.

use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

use super::{Outcome, Raised};
use crate::env::pyjson;
use crate::error::Error;

// ---------------------------------------------------------------------------------------------
// A value's type, text and truth.

/// Python's `str(value)`.
pub fn str_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => pyjson::repr(other),
    }
}

/// Python's truthiness.
pub fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Python's `type(value).__name__`.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// A float as a JSON number for output (`NaN` and infinities, which JSON lacks, as `null`).
pub fn float(x: f64) -> Value {
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// `json.dumps` of a float: `repr`, with `NaN`, `Infinity` and `-Infinity` for the values JSON
/// lacks (Python writes them; the harness shows the text as it is).
pub fn dumps_float(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        pyjson::float_repr(x)
    }
}

// ---------------------------------------------------------------------------------------------
// Python's exception texts.

/// Python's `AttributeError` text for `value.name`.
pub fn no_attribute(value: &Value, name: &str) -> Raised {
    attribute_error(type_name(value), name)
}

/// Python's `AttributeError` text for an attribute `name` missing on an object of `type_name`
/// (a class name for a method the backend does not have).
pub fn attribute_error(type_name: &str, name: &str) -> Raised {
    format!("'{type_name}' object has no attribute '{name}'")
}

/// Python's `TypeError` text for an ordering comparison `op` between two types.
pub fn not_supported(op: &str, a_type: &str, b_type: &str) -> Raised {
    format!("'{op}' not supported between instances of '{a_type}' and '{b_type}'")
}

/// Python's `TypeError` text for a binary operator `op` (`+`, `-=`, `**`, ...) between two types.
pub fn unsupported_operands(op: &str, a_type: &str, b_type: &str) -> Raised {
    format!("unsupported operand type(s) for {op}: '{a_type}' and '{b_type}'")
}

/// The text of Python's `KeyError(key)`: the key's `repr`.
pub fn key_error(key: &Value) -> Raised {
    pyjson::repr(key)
}

/// The `TypeError` Python raises when hashing a list or dict.
pub fn check_hashable(key: &Value) -> Result<(), Raised> {
    match key {
        Value::Array(_) | Value::Object(_) => Err(unhashable(key)),
        _ => Ok(()),
    }
}

/// The text of that `TypeError`.
fn unhashable(key: &Value) -> Raised {
    format!("unhashable type: '{}'", type_name(key))
}

/// The key a lookup in a dict with string keys hashes: `Some(text)` for a string, `None` for a
/// hashable value that cannot equal a string key, or the `TypeError` for an unhashable one.
pub fn hash_key(key: &Value) -> Result<Option<&str>, Raised> {
    check_hashable(key)?;
    Ok(key.as_str())
}

/// Python's `key in mapping` for a dict with string keys.
pub fn contains(mapping: &Map<String, Value>, key: &Value) -> Result<bool, Raised> {
    Ok(hash_key(key)?.is_some_and(|k| mapping.contains_key(k)))
}

/// `mapping[key]` on a dict with string keys: Python's `KeyError` text when it lacks the key.
pub fn item<'a>(mapping: &'a Map<String, Value>, key: &str) -> Result<&'a Value, Raised> {
    mapping.get(key).ok_or_else(|| key_error(&Value::from(key)))
}

/// Python's `value[key]` for a string key, on any value.
pub fn getitem<'a>(value: &'a Value, key: &str) -> Result<&'a Value, Raised> {
    match value {
        Value::Object(map) => item(map, key),
        Value::Array(_) => Err("list indices must be integers or slices, not str".into()),
        Value::String(_) => Err("string indices must be integers, not 'str'".into()),
        other => Err(format!(
            "'{}' object is not subscriptable",
            type_name(other)
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Results.

/// A dict built from `(key, value)` pairs, in order.
pub fn object<const N: usize, V: Into<Value>>(pairs: [(&str, V); N]) -> Value {
    Value::Object(
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into()))
            .collect(),
    )
}

/// `{"error": message}`, the answer of a method that refuses a call.
pub fn error(message: impl Into<String>) -> Outcome {
    Ok(object([("error", message.into())]))
}

// ---------------------------------------------------------------------------------------------
// Numbers.

/// A number or bool as Python sees it in arithmetic: an `int` or a `float`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    /// The number a JSON value holds (`True` is 1), or `None` for a non-number.
    pub fn of(value: &Value) -> Option<Num> {
        match value {
            Value::Bool(b) => Some(Num::Int(i128::from(*b))),
            Value::Number(n) if n.is_f64() => n.as_f64().map(Num::Float),
            Value::Number(_) => int_of(value).map(Num::Int),
            _ => None,
        }
    }

    /// Python's `float(self)`.
    pub fn to_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(x) => x,
        }
    }

    /// Python's ordering of two numbers, exact across int and float (`None` with a NaN).
    pub fn cmp(self, other: Num) -> Option<Ordering> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(&b)),
            (Num::Float(a), Num::Float(b)) => a.partial_cmp(&b),
            (Num::Int(a), Num::Float(b)) => int_float_cmp(a, b),
            (Num::Float(a), Num::Int(b)) => int_float_cmp(b, a).map(Ordering::reverse),
        }
    }

    /// Python's `self <op> other` for numbers; the error is Python's `ZeroDivisionError` text,
    /// or an integer result past 128 bits, which is not held here.
    pub fn apply(self, op: Op, other: Num) -> Result<Num, Raised> {
        match (op, self, other) {
            (Op::Div, _, _) => {
                if other.to_f64() == 0.0 {
                    let both_int = matches!((self, other), (Num::Int(_), Num::Int(_)));
                    return Err(if both_int {
                        "division by zero"
                    } else {
                        "float division by zero"
                    }
                    .into());
                }
                Ok(Num::Float(match (self, other) {
                    (Num::Int(p), Num::Int(q)) => int_ratio(p, q),
                    _ => self.to_f64() / other.to_f64(),
                }))
            }
            (_, Num::Int(p), Num::Int(q)) => {
                let result = match op {
                    Op::Add => p.checked_add(q),
                    Op::Sub => p.checked_sub(q),
                    _ => p.checked_mul(q),
                };
                result
                    .map(Num::Int)
                    .ok_or_else(|| "an integer result beyond 128 bits is not held here".to_owned())
            }
            _ => {
                let (p, q) = (self.to_f64(), other.to_f64());
                Ok(Num::Float(match op {
                    Op::Add => p + q,
                    Op::Sub => p - q,
                    _ => p * q,
                }))
            }
        }
    }
}

/// Compares an int with a float exactly, as Python does.
fn int_float_cmp(i: i128, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    // Every i128 lies strictly between these.
    if f >= 1.7e38 {
        return Some(Ordering::Less);
    }
    if f <= -1.7e38 {
        return Some(Ordering::Greater);
    }
    let floor = f.floor();
    match i.cmp(&(floor as i128)) {
        Ordering::Equal if f > floor => Some(Ordering::Less),
        order => Some(order),
    }
}

/// `x / y` for two ints (`y != 0`), correctly rounded as Python's true division rounds it.
pub fn int_ratio(x: i128, y: i128) -> f64 {
    const EXACT: u128 = 1 << 53;
    let (n, d) = (x.unsigned_abs(), y.unsigned_abs());
    if n <= EXACT && d <= EXACT {
        // Both exact as floats: one correctly rounded division (CPython's fast path).
        return x as f64 / y as f64;
    }
    let negative = (x < 0) != (y < 0);
    if n == 0 {
        return if negative { -0.0 } else { 0.0 };
    }
    // Long division until the quotient holds at least 55 bits; the remainder is a sticky bit.
    let (mut q, mut r) = (n / d, n % d);
    let mut exp: i32 = 0;
    while q < 1 << 54 {
        // r < d <= 2^127, so doubling it stays within 128 bits.
        r <<= 1;
        q <<= 1;
        if r >= d {
            r -= d;
            q |= 1;
        }
        exp -= 1;
    }
    let drop = 128 - q.leading_zeros() - 53;
    let mut mantissa = q >> drop;
    let dropped = q & ((1 << drop) - 1);
    let half = 1u128 << (drop - 1);
    if dropped > half || (dropped == half && (r != 0 || mantissa & 1 == 1)) {
        mantissa += 1;
    }
    // The value lies within [2^-128, 2^128]: a normal float, scaled exactly by a power of two.
    let scale = f64::from_bits(((exp + drop as i32 + 1023) as u64) << 52);
    let value = mantissa as f64 * scale;
    if negative { -value } else { value }
}

/// An integer JSON number (not a float, not a bool) as a Python int.
pub fn int_of(value: &Value) -> Option<i128> {
    match value {
        Value::Number(n) if !n.is_f64() => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    }
}

/// A Python int as a JSON number for output (beyond 64 bits, the nearest float: JSON numbers
/// here are 64-bit).
pub fn int_value(n: i128) -> Value {
    if let Ok(small) = i64::try_from(n) {
        Value::from(small)
    } else if let Ok(big) = u64::try_from(n) {
        Value::from(big)
    } else {
        float(n as f64)
    }
}

/// A number computed here as the JSON value a backend keeps, or an error where JSON cannot
/// hold it exactly (an int beyond 64 bits, an infinite or NaN float).
pub fn num_value(n: Num) -> Result<Value, Raised> {
    match n {
        Num::Float(x) => float_value(x),
        Num::Int(i) => {
            if let Ok(small) = i64::try_from(i) {
                Ok(Value::from(small))
            } else if let Ok(big) = u64::try_from(i) {
                Ok(Value::from(big))
            } else {
                Err(format!(
                    "the integer {i} is beyond 64 bits, which this rebuild does not hold"
                ))
            }
        }
    }
}

/// A float as the JSON number a backend keeps, or an error for an infinity or NaN, which JSON
/// (and so the state kept here) cannot hold.
pub fn float_value(x: f64) -> Result<Value, Raised> {
    Number::from_f64(x).map(Value::Number).ok_or_else(|| {
        format!(
            "the float {} cannot be held in JSON, which this rebuild keeps its state in",
            pyjson::float_repr(x)
        )
    })
}

// ---------------------------------------------------------------------------------------------
// Comparison.

/// Python's `a == b`: numbers and bools by value (`1 == 1.0 == True`), lists item by item,
/// dicts regardless of key order.
pub fn eq(a: &Value, b: &Value) -> bool {
    if let (Some(x), Some(y)) = (Num::of(a), Num::of(b)) {
        return x.cmp(y) == Some(Ordering::Equal);
    }
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| eq(v, w)))
        }
        _ => false,
    }
}

/// How `a` orders against `b` under Python's `op` (`None` when neither is less, as with NaN),
/// or the `TypeError` text for operands Python cannot order: numbers by value, strings by code
/// point, lists at their first unequal item (then by length).
pub fn order(a: &Value, op: &str, b: &Value) -> Result<Option<Ordering>, Raised> {
    if let (Some(x), Some(y)) = (Num::of(a), Num::of(b)) {
        return Ok(x.cmp(y));
    }
    match (a, b) {
        (Value::String(x), Value::String(y)) => Ok(Some(x.cmp(y))),
        (Value::Array(x), Value::Array(y)) => match x.iter().zip(y).find(|(p, q)| !eq(p, q)) {
            Some((p, q)) => order(p, op, q),
            None => Ok(Some(x.len().cmp(&y.len()))),
        },
        _ => Err(not_supported(op, type_name(a), type_name(b))),
    }
}

/// Whether an ordering satisfies `op` (`<`, `<=`, `>` or `>=`); never with a NaN.
pub fn holds(order: Option<Ordering>, op: &str) -> bool {
    match (order, op) {
        (None, _) => false,
        (Some(o), "<") => o == Ordering::Less,
        (Some(o), "<=") => o != Ordering::Greater,
        (Some(o), ">") => o == Ordering::Greater,
        (Some(o), _) => o != Ordering::Less,
    }
}

/// Python's `a <op> b` for an ordering comparison, or its `TypeError` text.
pub fn compare(a: &Value, op: &str, b: &Value) -> Result<bool, Raised> {
    Ok(holds(order(a, op, b)?, op))
}

// ---------------------------------------------------------------------------------------------
// Arithmetic.

/// An arithmetic operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

impl Op {
    fn symbol(self) -> &'static str {
        match self {
            Op::Add => "+",
            Op::Sub => "-",
            Op::Mul => "*",
            Op::Div => "/",
        }
    }
}

/// The longest string or list a repetition may build.
const MAX_REPEAT: usize = 1 << 24;

/// Python's `a <op> b` (`a <op>= b` when `augmented`, which changes error texts and lets
/// `list += iterable` extend the list).
pub fn arith(op: Op, a: &Value, b: &Value, augmented: bool) -> Result<Value, Raised> {
    let unsupported = || {
        let symbol = format!("{}{}", op.symbol(), if augmented { "=" } else { "" });
        unsupported_operands(&symbol, type_name(a), type_name(b))
    };
    if let (Some(x), Some(y)) = (Num::of(a), Num::of(b)) {
        return num_value(x.apply(op, y)?);
    }
    match (op, a, b) {
        (Op::Add, Value::String(x), Value::String(y)) => Ok(Value::String(format!("{x}{y}"))),
        (Op::Add, Value::Array(x), Value::Array(y)) => {
            Ok(Value::Array(x.iter().chain(y).cloned().collect()))
        }
        (Op::Add, Value::String(_), other) => Err(format!(
            "can only concatenate str (not \"{}\") to str",
            type_name(other)
        )),
        (Op::Add, Value::Array(x), other) if augmented => Ok(Value::Array(
            x.iter().cloned().chain(iterate(other)?).collect(),
        )),
        (Op::Add, Value::Array(_), other) => Err(format!(
            "can only concatenate list (not \"{}\") to list",
            type_name(other)
        )),
        (Op::Mul, seq @ (Value::String(_) | Value::Array(_)), count)
        | (Op::Mul, count, seq @ (Value::String(_) | Value::Array(_))) => {
            let Some(Num::Int(n)) = Num::of(count) else {
                return Err(format!(
                    "can't multiply sequence by non-int of type '{}'",
                    type_name(count)
                ));
            };
            repeat(seq, n)
        }
        _ => Err(unsupported()),
    }
}

/// `seq * n` for a string or list.
fn repeat(seq: &Value, n: i128) -> Result<Value, Raised> {
    let n = usize::try_from(n.max(0)).unwrap_or(usize::MAX);
    let len = match seq {
        Value::String(s) => s.len(),
        Value::Array(a) => a.len(),
        _ => 0,
    };
    if len.saturating_mul(n) > MAX_REPEAT {
        return Err("MemoryError: the repeated sequence is too long".into());
    }
    // An empty sequence stays empty however often it is repeated.
    let n = if len == 0 { 0 } else { n };
    Ok(match seq {
        Value::String(s) => Value::String(s.repeat(n)),
        Value::Array(a) => Value::Array((0..n).flat_map(|_| a.iter().cloned()).collect()),
        other => other.clone(),
    })
}

/// Python's `round(x, digits)` for a float and non-negative `digits`: the nearest value with
/// that many decimals, ties to even on the exact binary value.
pub fn round(x: f64, digits: usize) -> f64 {
    if !x.is_finite() {
        return x;
    }
    format!("{x:.digits$}").parse().unwrap_or(x)
}

// ---------------------------------------------------------------------------------------------
// Strings and iteration.

/// Python's `str.isspace` for one character.
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `value.lower()` for a string; Python's `AttributeError` for anything else.
pub fn lower(value: &Value) -> Result<String, Raised> {
    match value {
        Value::String(s) => Ok(s.to_lowercase()),
        other => Err(no_attribute(other, "lower")),
    }
}

/// The items Python's iteration over `value` gives: a list's items, a string's characters, a
/// dict's keys; `TypeError` for anything else.
pub fn iterate(value: &Value) -> Result<Vec<Value>, Raised> {
    match value {
        Value::Array(items) => Ok(items.clone()),
        Value::String(s) => Ok(s.chars().map(|c| Value::from(c.to_string())).collect()),
        Value::Object(map) => Ok(map.keys().map(|k| Value::from(k.as_str())).collect()),
        other => Err(format!("'{}' object is not iterable", type_name(other))),
    }
}

// ---------------------------------------------------------------------------------------------
// `float()` and `int()`.

/// Python's `float(value)`, with its error texts.
pub fn to_float(value: &Value) -> Result<f64, Raised> {
    if let Some(n) = Num::of(value) {
        return Ok(n.to_f64());
    }
    match value {
        Value::String(text) => parse_float(text)
            .ok_or_else(|| format!("could not convert string to float: {}", pyjson::repr(value))),
        other => Err(format!(
            "float() argument must be a string or a real number, not '{}'",
            type_name(other)
        )),
    }
}

/// Python's `float(text)`: surrounding whitespace, a sign, decimal digits of any script,
/// underscores only between digits, `inf`/`infinity`/`nan` in any case.
pub fn parse_float(text: &str) -> Option<f64> {
    let chars: Vec<char> = text.trim_matches(is_space).chars().collect();
    let mut plain = String::with_capacity(chars.len());
    for (i, &c) in chars.iter().enumerate() {
        if c == '_' {
            let digit_at = |j: Option<usize>| {
                j.and_then(|j| chars.get(j))
                    .is_some_and(|&d| decimal_digit(d).is_some())
            };
            if !(digit_at(i.checked_sub(1)) && digit_at(Some(i + 1))) {
                return None;
            }
            continue;
        }
        match decimal_digit(c) {
            Some(d) => plain.push(char::from(b'0' + d as u8)),
            None if c.is_ascii() => plain.push(c),
            None => return None,
        }
    }
    let lower = plain.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    if lower.len() - unsigned.len() > 1 {
        return None;
    }
    match unsigned {
        "inf" | "infinity" | "nan" => {}
        _ if unsigned
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | '+' | '-')) => {}
        _ => return None,
    }
    lower.parse().ok()
}

/// ASCII digits with single underscores between them (PEP 515), without the underscores.
pub fn digit_part(text: &str) -> Option<String> {
    if text.is_empty() || text.starts_with('_') || text.ends_with('_') || text.contains("__") {
        return None;
    }
    if !text.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return None;
    }
    Some(text.chars().filter(|c| *c != '_').collect())
}

/// `int(text)` in base 10 as far as its syntax goes: surrounding whitespace, a sign, then
/// [`digit_part`] (ASCII digits only); whether it is negative, and its digits.
pub fn int_literal(text: &str) -> Option<(bool, String)> {
    let body = text.trim_matches(is_space);
    let (negative, digits) = match body.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, body.strip_prefix('+').unwrap_or(body)),
    };
    Some((negative, digit_part(digits)?))
}

/// The value of a decimal digit of any script (what `int(c)` gives), if `c` is one.
pub fn decimal_digit(c: char) -> Option<u32> {
    unicode_digits::decimal(c)
}

/// Python's `c.isdigit()` for one character.
pub fn is_digit(c: char) -> bool {
    unicode_digits::is_digit(c)
}

/// Which characters Python's `str.isdigit` accepts and which of them `int()` reads (Unicode
/// 14, as in CPython 3.11).
mod unicode_digits {
    /// The first code point of each run of ten decimal digits (category Nd).
    const DECIMAL_ZEROS: [u32; 66] = [
        0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66,
        0xDE6, 0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
        0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0,
        0xFF10, 0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0,
        0x11650, 0x116C0, 0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0,
        0x16B50, 0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0,
    ];

    /// Ranges of digits that are not decimal (superscripts, circled digits, ...).
    const OTHER_DIGITS: [(u32, u32); 20] = [
        (0xB2, 0xB3),
        (0xB9, 0xB9),
        (0x1369, 0x1371),
        (0x19DA, 0x19DA),
        (0x2070, 0x2070),
        (0x2074, 0x2079),
        (0x2080, 0x2089),
        (0x2460, 0x2468),
        (0x2474, 0x247C),
        (0x2488, 0x2490),
        (0x24EA, 0x24EA),
        (0x24F5, 0x24FD),
        (0x24FF, 0x24FF),
        (0x2776, 0x277E),
        (0x2780, 0x2788),
        (0x278A, 0x2792),
        (0x10A40, 0x10A43),
        (0x10E60, 0x10E68),
        (0x11052, 0x1105A),
        (0x1F100, 0x1F10A),
    ];

    /// The value of a decimal digit (what `int(c)` gives), if `c` is one.
    pub fn decimal(c: char) -> Option<u32> {
        if c.is_ascii() {
            return c.to_digit(10);
        }
        let code = u32::from(c);
        DECIMAL_ZEROS
            .iter()
            .find(|&&zero| (zero..zero + 10).contains(&code))
            .map(|zero| code - zero)
    }

    /// Python's `c.isdigit()`.
    pub fn is_digit(c: char) -> bool {
        let code = u32::from(c);
        decimal(c).is_some()
            || OTHER_DIGITS
                .iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&code))
    }
}

// ---------------------------------------------------------------------------------------------
// Dicts whose keys are any hashable value.

/// A hashable Python value used as a dict key: its type is kept, so `0` and `'0'` are
/// different keys while `1`, `1.0` and `True` are the same one.
#[derive(Clone, Debug)]
pub enum Key {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
}

impl Key {
    /// The key a JSON value makes, or Python's `TypeError` for a list or dict.
    pub fn from_value(value: &Value) -> Result<Key, Raised> {
        Ok(match value {
            Value::Null => Key::None,
            Value::Bool(b) => Key::Bool(*b),
            Value::Number(n) if n.is_f64() => Key::Float(n.as_f64().unwrap_or(f64::NAN)),
            Value::Number(_) => Key::Int(int_of(value).unwrap_or_default()),
            Value::String(s) => Key::Str(s.clone()),
            other => return Err(unhashable(other)),
        })
    }

    /// The key as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            Key::None => Value::Null,
            Key::Bool(b) => Value::Bool(*b),
            Key::Int(i) => int_value(*i),
            Key::Float(x) => float(*x),
            Key::Str(s) => Value::from(s.as_str()),
        }
    }

    /// Python's `str(key)`, how the reference fixture names the key.
    pub fn to_str(&self) -> String {
        match self {
            Key::None => "None".into(),
            Key::Bool(true) => "True".into(),
            Key::Bool(false) => "False".into(),
            Key::Int(i) => i.to_string(),
            Key::Float(x) => pyjson::float_repr(*x),
            Key::Str(s) => s.clone(),
        }
    }

    /// Python's `str(KeyError(key))`: the key's `repr`.
    pub fn key_error(&self) -> Raised {
        match self {
            Key::Str(s) => key_error(&Value::from(s.as_str())),
            other => other.to_str(),
        }
    }

    fn num(&self) -> Option<Num> {
        match self {
            Key::Bool(b) => Some(Num::Int(i128::from(*b))),
            Key::Int(i) => Some(Num::Int(*i)),
            Key::Float(x) => Some(Num::Float(*x)),
            _ => None,
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        if let (Some(x), Some(y)) = (self.num(), other.num()) {
            return x.cmp(y) == Some(Ordering::Equal);
        }
        match (self, other) {
            (Key::None, Key::None) => true,
            (Key::Str(a), Key::Str(b)) => a == b,
            _ => false,
        }
    }
}

/// `d.get(key)` on a dict kept as insertion-ordered pairs.
pub fn dict_get<'a, V>(dict: &'a [(Key, V)], key: &Key) -> Option<&'a V> {
    dict.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// `d[key] = value`: an equal key keeps its place (and its original form), a new one goes last.
pub fn dict_set<V>(dict: &mut Vec<(Key, V)>, key: Key, value: V) {
    match dict.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => dict.push((key, value)),
    }
}

/// A dict as the reference fixture writes it: keys through `str`, a later key equal as text
/// replacing the earlier one's value in its place.
pub fn dict_state<V>(dict: &[(Key, V)], value: impl Fn(&V) -> Value) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in dict {
        out.insert(k.to_str(), value(v));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Dates.

/// A naive datetime as `(year, month, day, hour, minute, second)`, ordered as Python orders it.
pub type DateTime = (i64, u32, u32, u32, u32, u32);

/// The `%Y-%m-%d` format.
pub const DATE_FORMAT: &str = "%Y-%m-%d";
/// The `%Y-%m-%d %H:%M:%S` format.
pub const DATETIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// What `datetime.strptime` raised.
#[derive(Debug)]
pub enum Strptime {
    /// A `TypeError` (the value is not a string).
    Type(Raised),
    /// A `ValueError` (the text does not fit the format, or names no real date).
    Value(Raised),
}

impl From<Strptime> for Raised {
    fn from(raised: Strptime) -> Raised {
        match raised {
            Strptime::Type(text) | Strptime::Value(text) => text,
        }
    }
}

/// One piece of the regular expression Python's `_strptime` builds for a format.
#[derive(Clone, Copy)]
enum Piece {
    /// A literal character.
    Lit(char),
    /// `\s+` (a space in the format).
    Space,
    /// A directive: the field it fills, and its alternatives, tried in order, each a sequence
    /// of character classes.
    Field(usize, &'static [&'static [Class]]),
}

/// A character class inside a directive's alternative.
#[derive(Clone, Copy)]
enum Class {
    /// `\d`: a decimal digit of any script, as in Python's `str` patterns.
    Digit,
    Range(char, char),
    Char(char),
}

use Class::{Char, Digit, Range};

/// `%Y`: `\d\d\d\d`.
const YEAR: &[&[Class]] = &[&[Digit, Digit, Digit, Digit]];
/// `%m`: `1[0-2]|0[1-9]|[1-9]`.
const MONTH: &[&[Class]] = &[
    &[Char('1'), Range('0', '2')],
    &[Char('0'), Range('1', '9')],
    &[Range('1', '9')],
];
/// `%d`: `3[01]|[12]\d|0[1-9]|[1-9]| [1-9]`.
const DAY: &[&[Class]] = &[
    &[Char('3'), Range('0', '1')],
    &[Range('1', '2'), Digit],
    &[Char('0'), Range('1', '9')],
    &[Range('1', '9')],
    &[Char(' '), Range('1', '9')],
];
/// `%H`: `2[0-3]|[0-1]\d|\d`.
const HOUR: &[&[Class]] = &[
    &[Char('2'), Range('0', '3')],
    &[Range('0', '1'), Digit],
    &[Digit],
];
/// `%M`: `[0-5]\d|\d`.
const MINUTE: &[&[Class]] = &[&[Range('0', '5'), Digit], &[Digit]];
/// `%S`: `6[0-1]|[0-5]\d|\d`.
const SECOND: &[&[Class]] = &[
    &[Char('6'), Range('0', '1')],
    &[Range('0', '5'), Digit],
    &[Digit],
];

fn class_matches(class: Class, c: char) -> bool {
    match class {
        Digit => decimal_digit(c).is_some(),
        Range(lo, hi) => (lo..=hi).contains(&c),
        Char(x) => c == x,
    }
}

/// Matches `pieces` against `text` from `at` as Python's regex engine would (alternatives in
/// order, `\s+` greedy, backtracking), filling `fields` with each directive's text; returns
/// where the match ends.
fn match_pieces(
    pieces: &[Piece],
    text: &[char],
    at: usize,
    fields: &mut [String; 6],
) -> Option<usize> {
    let Some((first, rest)) = pieces.split_first() else {
        return Some(at);
    };
    match *first {
        Piece::Lit(c) => {
            if text.get(at) == Some(&c) {
                match_pieces(rest, text, at + 1, fields)
            } else {
                None
            }
        }
        Piece::Space => {
            let mut end = at;
            while text.get(end).is_some_and(|c| is_space(*c)) {
                end += 1;
            }
            while end > at {
                if let Some(done) = match_pieces(rest, text, end, fields) {
                    return Some(done);
                }
                end -= 1;
            }
            None
        }
        Piece::Field(slot, alternatives) => {
            for alternative in alternatives {
                let fits = alternative
                    .iter()
                    .enumerate()
                    .all(|(i, class)| text.get(at + i).is_some_and(|c| class_matches(*class, *c)));
                if !fits {
                    continue;
                }
                let end = at + alternative.len();
                let saved = fields[slot].clone();
                fields[slot] = text[at..end].iter().collect();
                if let Some(done) = match_pieces(rest, text, end, fields) {
                    return Some(done);
                }
                fields[slot] = saved;
            }
            None
        }
    }
}

/// Python's `datetime.strptime(value, format)` for [`DATE_FORMAT`] and [`DATETIME_FORMAT`],
/// with its error texts.
pub fn strptime(value: &Value, format: &str) -> Result<DateTime, Strptime> {
    let Value::String(text) = value else {
        let name = match value {
            Value::Null => "None",
            other => type_name(other),
        };
        return Err(Strptime::Type(format!(
            "strptime() argument 1 must be str, not {name}"
        )));
    };
    let date = [
        Piece::Field(0, YEAR),
        Piece::Lit('-'),
        Piece::Field(1, MONTH),
        Piece::Lit('-'),
        Piece::Field(2, DAY),
    ];
    let time = [
        Piece::Space,
        Piece::Field(3, HOUR),
        Piece::Lit(':'),
        Piece::Field(4, MINUTE),
        Piece::Lit(':'),
        Piece::Field(5, SECOND),
    ];
    let pieces: Vec<Piece> = if format == DATE_FORMAT {
        date.to_vec()
    } else {
        date.iter().chain(time.iter()).copied().collect()
    };
    let chars: Vec<char> = text.chars().collect();
    let mut fields: [String; 6] = Default::default();
    let Some(end) = match_pieces(&pieces, &chars, 0, &mut fields) else {
        return Err(Strptime::Value(format!(
            "time data {} does not match format {}",
            pyjson::repr(value),
            pyjson::repr(&Value::from(format))
        )));
    };
    if end < chars.len() {
        let rest: String = chars[end..].iter().collect();
        return Err(Strptime::Value(format!("unconverted data remains: {rest}")));
    }
    // `int()` of each field: its digits, the leading space of a day like " 5" aside.
    let field = |i: usize| -> u32 {
        fields[i]
            .chars()
            .filter_map(decimal_digit)
            .fold(0, |n, d| n * 10 + d)
    };
    let (year, month, day) = (i64::from(field(0)), field(1), field(2));
    if year < 1 {
        return Err(Strptime::Value(format!("year {year} is out of range")));
    }
    if day > days_in_month(year, month) {
        return Err(Strptime::Value("day is out of range for month".into()));
    }
    let (hour, minute, second) = (field(3), field(4), field(5));
    if second > 59 {
        return Err(Strptime::Value("second must be in 0..59".into()));
    }
    Ok((year, month, day, hour, minute, second))
}

/// The number of days in `month` of `year` (proleptic Gregorian).
pub fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's days-to-civil).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

// ---------------------------------------------------------------------------------------------
// `initial_config`.

/// The error for a configuration that does not fit `class`.
pub fn config_error(class: &str, message: impl Into<String>) -> Error {
    Error::BfclTask {
        context: class.into(),
        message: message.into(),
    }
}

/// A class's entry of `initial_config`, read with errors that name the class.
#[derive(Clone, Copy)]
pub struct Config<'a> {
    class: &'static str,
    map: &'a Map<String, Value>,
}

impl<'a> Config<'a> {
    pub fn new(class: &'static str, map: &'a Map<String, Value>) -> Config<'a> {
        Config { class, map }
    }

    /// The error for a configuration that does not fit the class.
    pub fn error(&self, message: impl Into<String>) -> Error {
        config_error(self.class, message)
    }

    /// The entry, if given.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    /// The entry as given (any value, as Python keeps any), or `default`.
    pub fn value(&self, key: &str, default: Value) -> Value {
        self.map.get(key).cloned().unwrap_or(default)
    }

    /// An integer entry (not a float, not a bool), or `default`.
    pub fn int(&self, key: &str, default: i128) -> crate::error::Result<i128> {
        match self.map.get(key) {
            None => Ok(default),
            Some(value) => int_of(value)
                .ok_or_else(|| self.error(format!("`{key}` must be an integer, not {value}"))),
        }
    }

    /// `random_seed`: an int (a bool counts, as Python seeds with `True` as with 1), or
    /// `default`.
    pub fn seed(&self, default: i128) -> crate::error::Result<i128> {
        match self.map.get("random_seed") {
            Some(Value::Bool(b)) => Ok(i128::from(*b)),
            _ => self.int("random_seed", default),
        }
    }

    /// A list entry, if given.
    pub fn list(&self, key: &str) -> crate::error::Result<Option<&'a Vec<Value>>> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(other) => Err(self.error(format!("`{key}` must be a list, not {other}"))),
        }
    }

    /// An object entry, if given.
    pub fn object(&self, key: &str) -> crate::error::Result<Option<&'a Map<String, Value>>> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) => Err(self.error(format!("`{key}` must be an object, not {other}"))),
        }
    }

    /// A list entry whose every item is an object, if given.
    pub fn list_of_objects(
        &self,
        key: &str,
    ) -> crate::error::Result<Option<Vec<Map<String, Value>>>> {
        let Some(items) = self.list(key)? else {
            return Ok(None);
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::Object(map) => Ok(map.clone()),
                other => Err(self.error(format!("`{key}`[{i}] must be an object, not {other}"))),
            })
            .collect::<crate::error::Result<Vec<_>>>()
            .map(Some)
    }

    /// An object entry whose every value passes `fits` (`what` names what it must be, "a
    /// list"), if given.
    pub fn object_of(
        &self,
        key: &str,
        what: &str,
        fits: fn(&Value) -> bool,
    ) -> crate::error::Result<Option<&'a Map<String, Value>>> {
        let Some(map) = self.object(key)? else {
            return Ok(None);
        };
        if let Some((name, value)) = map.iter().find(|(_, v)| !fits(v)) {
            return Err(self.error(format!("`{key}`[{name:?}] must be {what}, not {value}")));
        }
        Ok(Some(map))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn operators_on_values_follow_python() {
        assert!(eq(&json!(1), &json!(1.0)) && eq(&json!(true), &json!(1)));
        assert!(!eq(&json!("1"), &json!(1)));
        assert!(eq(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
        assert!(
            compare(
                &json!(9_007_199_254_740_993_i64),
                "<",
                &json!(9_007_199_254_740_994.0)
            )
            .unwrap()
        );
        assert!(compare(&json!([1, "b"]), "<", &json!([1.0, "c"])).unwrap());
        assert!(!compare(&json!(f64::NAN.max(1.0)), "<", &json!(1)).unwrap());
        assert_eq!(
            compare(&json!([1]), "<=", &json!([None::<i32>])).unwrap_err(),
            "'<=' not supported between instances of 'int' and 'NoneType'"
        );
        assert_eq!(round(0.125, 2), 0.12);
        assert_eq!(round(2.675, 2), 2.67);
        // `[1] += 'ab'` extends the list; `[1] += 1` raises.
        assert_eq!(
            arith(Op::Add, &json!([1]), &json!("ab"), true).unwrap(),
            json!([1, "a", "b"])
        );
        assert_eq!(
            arith(Op::Add, &json!([1]), &json!(1), true).unwrap_err(),
            "'int' object is not iterable"
        );
        assert_eq!(
            arith(Op::Sub, &json!("a"), &json!(1), true).unwrap_err(),
            "unsupported operand type(s) for -=: 'str' and 'int'"
        );
        assert_eq!(
            arith(Op::Div, &json!(1), &json!(0), false).unwrap_err(),
            "division by zero"
        );
        assert_eq!(
            arith(Op::Div, &json!(1), &json!(0.0), false).unwrap_err(),
            "float division by zero"
        );
        assert!(arith(Op::Mul, &json!(1e308), &json!(10), false).is_err());
    }

    #[test]
    fn int_division_is_correctly_rounded() {
        // CPython 3.11: each `x / y` as `float.hex`.
        let cases: [(i128, i128, &str); 6] = [
            (9_007_199_254_740_993, 1, "0x1.0000000000000p+53"),
            (9_007_199_254_740_995, 1, "0x1.0000000000002p+53"),
            (-(1 << 100) - 1, 3, "-0x1.5555555555555p+98"),
            (1, 3 << 60, "0x1.5555555555555p-62"),
            (10_000_000_000_000_000_001, 9, "0x1.ed6eb565788e4p+59"),
            (0, -(1 << 60), "-0x0.0p+0"),
        ];
        for (x, y, hex) in cases {
            let got = int_ratio(x, y);
            assert_eq!(float_hex(got), hex, "{x} / {y}");
        }
        assert_eq!(int_ratio(7, 2), 3.5);
    }

    /// Python's `float.hex` for a normal float or zero.
    fn float_hex(x: f64) -> String {
        let sign = if x.is_sign_negative() { "-" } else { "" };
        if x == 0.0 {
            return format!("{sign}0x0.0p+0");
        }
        let bits = x.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as i64 - 1023;
        let mantissa = bits & ((1 << 52) - 1);
        let exp_sign = if exp < 0 { "-" } else { "+" };
        format!("{sign}0x1.{mantissa:013x}p{exp_sign}{}", exp.abs())
    }

    #[test]
    fn float_parsing_follows_python() {
        assert_eq!(parse_float(" 1_000.5 "), Some(1000.5));
        assert_eq!(parse_float("\u{0663}.\u{0665}"), Some(3.5));
        assert_eq!(parse_float("\u{1c}2e3\u{1f}"), Some(2000.0));
        assert_eq!(parse_float("1__0"), None);
        assert_eq!(parse_float("_1"), None);
        assert_eq!(parse_float("+-1"), None);
        assert_eq!(parse_float("."), None);
        assert_eq!(parse_float("0x1"), None);
        assert!(parse_float("-InFinity").is_some_and(|x| x == f64::NEG_INFINITY));
        assert!(parse_float("nan").is_some_and(f64::is_nan));
    }

    #[test]
    fn int_literals_parse_as_python_ints() {
        assert_eq!(int_literal(" +1_0 "), Some((false, "10".into())));
        assert_eq!(int_literal("-007"), Some((true, "007".into())));
        assert_eq!(int_literal("1_"), None);
        assert_eq!(int_literal("x"), None);
        assert_eq!(int_literal("--1"), None);
    }

    #[test]
    fn dates_parse_as_strptime_does() {
        let parse = |text: &str, format: &str| strptime(&json!(text), format);
        assert_eq!(
            parse("\u{ff11}\u{ff19}\u{ff19}\u{ff10}-1-1\u{0665}", DATE_FORMAT).unwrap(),
            (1990, 1, 15, 0, 0, 0)
        );
        assert_eq!(
            parse("2024-01-01  1:2:3", DATETIME_FORMAT).unwrap(),
            (2024, 1, 1, 1, 2, 3)
        );
        let error = |text: &str| Raised::from(parse(text, DATE_FORMAT).unwrap_err());
        assert_eq!(error("2024-09-011"), "unconverted data remains: 1");
        assert_eq!(error("2024-02-30"), "day is out of range for month");
        assert_eq!(error("0000-01-01"), "year 0 is out of range");
        assert!(matches!(
            strptime(&Value::Null, DATE_FORMAT),
            Err(Strptime::Type(text)) if text == "strptime() argument 1 must be str, not None"
        ));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}

/// Helpers for the backends' tests: calls made as BFCL's harness makes them.
#[cfg(test)]
pub(super) mod harness {
    use serde_json::{Value, json};

    use super::super::{Args, Backend, Instances, bind, format_outcome};

    /// Runs `method` on `backend` with keyword arguments, bound as the harness binds them; the
    /// text the harness shows.
    pub fn call(backend: &mut dyn Backend, method: &str, kwargs: Value) -> String {
        let Value::Object(kwargs) = kwargs else {
            panic!("keyword arguments must be an object: {kwargs}")
        };
        let spec = backend.methods().iter().find(|m| m.name == method).copied();
        let outcome = match spec {
            Some(spec) => bind(backend.class(), &spec, &[], &kwargs),
            None => Ok(Args::new(method, kwargs)),
        }
        .and_then(|args| backend.call(method, &args));
        format_outcome(&outcome)
    }

    /// Each `(method, keyword arguments, the text Python printed)` in turn.
    pub fn script(backend: &mut dyn Backend, steps: &[(&str, Value, &str)]) {
        for (method, kwargs, want) in steps {
            assert_eq!(
                call(backend, method, kwargs.clone()),
                *want,
                "{method}({kwargs})"
            );
        }
    }

    /// Runs calls written as Python on a fresh instance of `class` loaded with `config`; each
    /// call's text and the final state.
    pub fn run(class: &str, config: Value, calls: &[&str]) -> (Vec<String>, Value) {
        let mut instances = Instances::new(&json!({ class: config }), &[class.to_owned()]).unwrap();
        let results = calls.iter().map(|c| instances.execute(c)).collect();
        let state = instances.state().remove(class).unwrap();
        (results, Value::Object(state))
    }
}
