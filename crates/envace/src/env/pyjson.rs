//! Python-compatible JSON text: what CPython's `json.dumps` and `repr(float)` print.
//!
//! The τ²-bench reference shows tool results to the agent with `json.dumps(value, default=str)`
//! and hashes its database with `json.dumps(state, sort_keys=True, default=str)`. Both use the
//! default settings, which differ from `serde_json`'s compact output:
//!
//! - separators are `", "` between items and `": "` between a key and its value;
//! - every non-ASCII character is escaped as `\uXXXX` (lower-case hex, UTF-16 surrogate pairs
//!   above U+FFFF), and control characters as `\n`, `\t`, … or `\u00XX`;
//! - floats are printed with Python's `repr`: the shortest digits that round-trip, always with a
//!   `.0` when integral (`99.0`), in exponent form (`1e+16`, `1e-05`) when the decimal exponent is
//!   below −4 or at least 16; integers print as integers. A JSON number therefore keeps the
//!   int/float distinction it had in the record model (`serde_json` numbers built from `f64` are
//!   floats, from `i64`/`u64` integers);
//! - with `sort_keys` every object's keys are sorted by code point (Rust's `str` ordering is the
//!   same); without it they keep their insertion order (`serde_json` is built with
//!   `preserve_order`).

use serde_json::Value;

/// Python's `repr` of a decoded JSON value: `'text'`, `True`, `None`, floats as `repr(float)`,
/// lists and dicts (in insertion order) with `, ` and `: ` separators.
pub fn repr(value: &Value) -> String {
    match value {
        Value::String(s) => {
            let quote = if s.contains('\'') && !s.contains('"') {
                '"'
            } else {
                '\''
            };
            let mut out = String::with_capacity(s.len() + 2);
            out.push(quote);
            for c in s.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    '\r' => out.push_str("\\r"),
                    c if c == quote => {
                        out.push('\\');
                        out.push(c);
                    }
                    c => out.push(c),
                }
            }
            out.push(quote);
            out
        }
        Value::Number(n) if n.is_f64() => float_repr(n.as_f64().unwrap_or(f64::NAN)),
        Value::Number(n) => n.to_string(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Null => "None".to_owned(),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(repr).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", repr(&Value::String(k.clone())), repr(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

/// Python's `repr(x)` for a float: shortest round-trip digits, `.0` for integral values.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    // `{:e}` gives the shortest round-trip digits as `d.ddde<exp>`; where two such strings are
    // equally near, Python takes the even one, which exact rounding to that many digits gives.
    let shortest = format!("{:e}", x.abs());
    let n_digits = shortest
        .split('e')
        .next()
        .map_or(1, |m| m.chars().filter(char::is_ascii_digit).count());
    let sci = format!("{:.*e}", n_digits.saturating_sub(1), x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if x < 0.0 { "-" } else { "" };
    if !(-4..16).contains(&exp) {
        let mut out = String::from(sign);
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.abs()));
        return out;
    }
    let mut out = String::from(sign);
    if exp >= 0 {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', int_len - digits.len()));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    } else {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
        out.push_str(&digits);
    }
    out
}

/// How [`dumps_with`] lays JSON out: the `json.dumps` keyword arguments the engine uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    /// `indent`: each item on its own line, indented by this many spaces a level, items
    /// separated by `","`; `None` puts everything on one line with `", "` between items.
    pub indent: Option<usize>,
    /// `sort_keys`: every object's keys sorted by code point.
    pub sort_keys: bool,
    /// `ensure_ascii`: every non-ASCII character (and DEL) escaped as `\uXXXX`; without it
    /// they are written as they are and only `"`, `\` and control characters are escaped.
    pub ensure_ascii: bool,
}

impl Layout {
    /// Python's defaults: one line, keys in insertion order, `ensure_ascii=True`.
    pub const PYTHON: Layout = Layout {
        indent: None,
        sort_keys: false,
        ensure_ascii: true,
    };
    /// How chat templates write JSON (Hugging Face's `tojson`): Python's defaults with
    /// `ensure_ascii=False`.
    pub const CHAT: Layout = Layout {
        indent: None,
        sort_keys: false,
        ensure_ascii: false,
    };
}

/// Python's `json.dumps(value)` (default settings), optionally with `sort_keys=True`.
pub fn dumps(value: &Value, sort_keys: bool) -> String {
    dumps_with(
        value,
        Layout {
            sort_keys,
            ..Layout::PYTHON
        },
    )
}

/// Python's `json.dumps(value, indent=…, sort_keys=…, ensure_ascii=…)` as `layout` says.
pub fn dumps_with(value: &Value, layout: Layout) -> String {
    let mut out = String::new();
    write_value(&mut out, value, layout, 0);
    out
}

/// A string as a Python JSON string literal (quotes and `\uXXXX` escapes).
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    write_str(&mut out, text, true);
    out
}

/// Python's `str(n)` for a JSON number as the reference holds it (int or float).
pub fn number_str(number: &serde_json::Number) -> String {
    if number.is_f64() {
        number
            .as_f64()
            .map_or_else(|| number.to_string(), float_repr)
    } else {
        number.to_string()
    }
}

fn write_value(out: &mut String, value: &Value, layout: Layout, level: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => {
            if number.is_f64() {
                match number.as_f64() {
                    Some(x) if x.is_nan() => out.push_str("NaN"),
                    Some(x) if x.is_infinite() => {
                        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" })
                    }
                    Some(x) => out.push_str(&float_repr(x)),
                    None => out.push_str(&number.to_string()),
                }
            } else {
                out.push_str(&number.to_string());
            }
        }
        Value::String(text) => write_str(out, text, layout.ensure_ascii),
        Value::Array(items) if items.is_empty() => out.push_str("[]"),
        Value::Object(map) if map.is_empty() => out.push_str("{}"),
        Value::Array(items) => {
            out.push('[');
            for (idx, item) in items.iter().enumerate() {
                separate(out, idx, layout, level + 1);
                write_value(out, item, layout, level + 1);
            }
            newline(out, layout, level);
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if layout.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            for (idx, (key, item)) in entries.into_iter().enumerate() {
                separate(out, idx, layout, level + 1);
                write_str(out, key, layout.ensure_ascii);
                out.push_str(": ");
                write_value(out, item, layout, level + 1);
            }
            newline(out, layout, level);
            out.push('}');
        }
    }
}

/// What goes before item `idx` of a container whose items sit at `level`.
fn separate(out: &mut String, idx: usize, layout: Layout, level: usize) {
    if idx > 0 {
        out.push_str(if layout.indent.is_some() { "," } else { ", " });
    }
    newline(out, layout, level);
}

/// With an indent: a line break and the indentation of `level`.
fn newline(out: &mut String, layout: Layout, level: usize) {
    if let Some(width) = layout.indent {
        out.push('\n');
        out.push_str(&" ".repeat(width * level));
    }
}

/// A JSON string literal as Python writes it, with or without `ensure_ascii`.
fn write_str(out: &mut String, text: &str, ensure_ascii: bool) {
    out.push('"');
    if text
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
    {
        out.push_str(text);
        out.push('"');
        return;
    }
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            ' '..='~' => out.push(ch),
            c if !ensure_ascii && c >= ' ' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in ch.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (99.0, "99.0"),
            (71.96000000000001, "71.96000000000001"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.25e-7, "1.25e-07"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (100.0, "100.0"),
            (123.456, "123.456"),
            // Two shortest strings equally near: Python takes the even digit.
            (3_602_879_701_896_397.0 / 4.0, "900719925474099.2"),
            (2f64.powi(-25), "2.9802322387695312e-08"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (0.1 + 0.2, "0.30000000000000004"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "repr({x:?})");
        }
    }

    #[test]
    fn dumps_matches_python_defaults() {
        let value = json!({"b": [1, 2.0, "é😀"], "a": null, "c": {"z": true, "y": "q\"\n\u{1}"}});
        assert_eq!(
            dumps(&value, false),
            r#"{"b": [1, 2.0, "\u00e9\ud83d\ude00"], "a": null, "c": {"z": true, "y": "q\"\n\u0001"}}"#
        );
        assert_eq!(
            dumps(&value, true),
            r#"{"a": null, "b": [1, 2.0, "\u00e9\ud83d\ude00"], "c": {"y": "q\"\n\u0001", "z": true}}"#
        );
        assert_eq!(dumps(&json!([]), false), "[]");
        assert_eq!(dumps(&json!({}), true), "{}");
    }

    #[test]
    fn layouts_match_python_keyword_arguments() {
        let value = json!({"b": [1, 1e16, {}], "a": "é\u{7f}\t"});
        // json.dumps(value, ensure_ascii=False)
        assert_eq!(
            dumps_with(&value, Layout::CHAT),
            "{\"b\": [1, 1e+16, {}], \"a\": \"é\u{7f}\\t\"}"
        );
        // json.dumps(value, indent=2, sort_keys=True)
        let layout = Layout {
            indent: Some(2),
            sort_keys: true,
            ensure_ascii: true,
        };
        assert_eq!(
            dumps_with(&value, layout),
            "{\n  \"a\": \"\\u00e9\\u007f\\t\",\n  \"b\": [\n    1,\n    1e+16,\n    {}\n  ]\n}"
        );
    }
}
