//! Java and JavaScript argument values as BFCL scores them: a model writes each argument as
//! source text (`new int[]{1, 2}`, `123L`, `{key: 'v'}`), and the checker reads it into a value
//! of the parameter's declared type, keeping the text as a string when it is not a literal of
//! that type (a variable name, which the checker may still accept). Also the opposite direction,
//! used to feed the ground truth back as model output.
//!
//! The forms read are BFCL's: numbers with Java's `L` / `f` suffixes, `true` / `false`,
//! `new T[]{…}`, `new ArrayList<T>(Arrays.asList(…))`, `new ArrayList<T>() {{ add(…); }}`,
//! `new HashMap<K, V>() {{ put("k", v); }}`; JavaScript numbers, `123n`, quoted strings,
//! `[…]`, `new Array(…)` and object literals. Elements are split at top-level commas only (a
//! comma inside a quoted string or a nested bracket does not split), and quoted string elements
//! lose their quotes in every collection, where BFCL's reader keeps them inside `new T[]{…}`
//! (which would fail its own ground truth for `String[]` parameters).

use serde_json::{Map, Number, Value};

/// Why an argument cannot be read at all: its declared type has no reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub String);

fn float(x: f64) -> Value {
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

fn int(text: &str) -> Option<Value> {
    if let Ok(i) = text.parse::<i64>() {
        return Some(Value::from(i));
    }
    if let Ok(u) = text.parse::<u64>() {
        return Some(Value::from(u));
    }
    text.parse::<f64>().ok().map(float)
}

/// Length of the longest prefix `-?\d+`, or None when there is no digit.
fn digits_end(text: &str, start: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = start;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
    }
    (i > start).then_some(i)
}

/// Whether `text` is `-?\d+`.
fn is_integer(text: &str) -> bool {
    let start = usize::from(text.starts_with('-'));
    digits_end(text, start) == Some(text.len())
}

/// The end of `-?\d+(\.\d+)?([eE][+-]?\d+)?` at the start of `text` (with the exponent only
/// when `exponent`), or None.
fn decimal_end(text: &str, exponent: bool) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = digits_end(text, usize::from(text.starts_with('-')))?;
    if bytes.get(i) == Some(&b'.') {
        i = digits_end(text, i + 1)?;
    }
    if exponent && matches!(bytes.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        if matches!(bytes.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        i = digits_end(text, j)?;
    }
    Some(i)
}

/// `text` without one pair of surrounding quotes (any of `quotes`), if it has them.
fn unquote<'a>(text: &'a str, quotes: &[char]) -> Option<&'a str> {
    let first = text.chars().next()?;
    (text.len() >= 2 && quotes.contains(&first) && text.ends_with(first))
        .then(|| &text[1..text.len() - 1])
}

/// A scan's position relative to quoted strings (with backslash escapes).
#[derive(Default)]
struct Quotes {
    open: Option<char>,
    escaped: bool,
}

impl Quotes {
    /// Feeds `c`: true when it is part of a quoted string (its quotes included); a quote
    /// character among `quote_chars` opens one.
    fn inside(&mut self, c: char, quote_chars: &[char]) -> bool {
        if let Some(q) = self.open {
            if self.escaped {
                self.escaped = false;
            } else if c == '\\' {
                self.escaped = true;
            } else if c == q {
                self.open = None;
            }
            return true;
        }
        if quote_chars.contains(&c) {
            self.open = Some(c);
            return true;
        }
        false
    }
}

/// Splits `text` at commas that are not inside quotes or brackets; trims each part and drops
/// empty ones.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut quotes = Quotes::default();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if quotes.inside(c, &['"', '\'', '`']) {
            continue;
        }
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(text[start..].trim());
    parts.retain(|p| !p.is_empty());
    parts
}

/// The text between the bracket `open` at byte `at` and its matching close, and the byte after
/// that close; None when unbalanced.
fn bracketed(text: &str, at: usize, open: char, close: char) -> Option<(&str, usize)> {
    let mut depth = 0i32;
    let mut quotes = Quotes::default();
    for (i, c) in text[at..].char_indices() {
        if quotes.inside(c, &['"', '\'']) {
            continue;
        }
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some((&text[at + open.len_utf8()..at + i], at + i + 1));
            }
        }
    }
    None
}

/// `rest` after a leading `word` followed by at least one space, if it starts so.
fn after_keyword<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let rest = text.strip_prefix(word)?;
    let trimmed = rest.trim_start();
    (trimmed.len() < rest.len()).then_some(trimmed)
}

/// A Java identifier-like word (`\w+`) at the start of `text`, and the rest.
fn word(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    text.split_at(end)
}

/// Reads a Java argument written as `text` for a parameter of BFCL Java type `ty` (with
/// `items` type `nested` for arrays and lists).
pub fn java_value(text: &str, ty: &str, nested: Option<&str>) -> Result<Value, Unsupported> {
    let keep = || Value::String(text.to_owned());
    Ok(match ty {
        "byte" | "short" | "integer" => {
            if is_integer(text) {
                int(text).unwrap_or_else(keep)
            } else {
                keep()
            }
        }
        "float" => match decimal_end(text, true) {
            Some(end) if end + 1 == text.len() && text.ends_with(['f', 'F']) => {
                text[..end].parse().map(float).unwrap_or_else(|_| keep())
            }
            _ => keep(),
        },
        "double" => match decimal_end(text, true) {
            Some(end) if end == text.len() => text.parse().map(float).unwrap_or_else(|_| keep()),
            _ => keep(),
        },
        "long" => match text.strip_suffix(['l', 'L']) {
            Some(body) if is_integer(body) => int(body).unwrap_or_else(keep),
            _ => keep(),
        },
        "boolean" => match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => keep(),
        },
        "char" | "String" | "any" => keep(),
        "Array" => java_array(text.trim(), nested).unwrap_or_else(keep),
        "ArrayList" => java_array_list(text.trim(), nested).unwrap_or_else(keep),
        "HashMap" => java_hash_map(text.trim()).unwrap_or_else(keep),
        other => {
            return Err(Unsupported(format!(
                "the Java type {other:?} has no reader (BFCL reads byte, short, integer, long, float, double, boolean, char, String, any, Array, ArrayList and HashMap)"
            )));
        }
    })
}

/// One element of a Java collection of declared element type `nested`.
fn java_element(text: &str, nested: Option<&str>) -> Value {
    match nested {
        Some("String" | "char") => match unquote(text, &['"', '\'']) {
            Some(inner) => Value::String(inner.to_owned()),
            None => Value::String(text.to_owned()),
        },
        Some(ty) if ty != "any" => {
            java_value(text, ty, None).unwrap_or_else(|_| Value::String(text.to_owned()))
        }
        _ => java_literal(text),
    }
}

/// A Java literal read by its own syntax (elements of untyped collections, map values).
pub fn java_literal(text: &str) -> Value {
    let text = text.trim();
    match text {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    if let Some(inner) = unquote(text, &['"']) {
        return Value::String(inner.to_owned());
    }
    if let Some(body) = text.strip_suffix(['l', 'L'])
        && is_integer(body)
    {
        return int(body).unwrap_or_else(|| Value::String(text.to_owned()));
    }
    if let Some(body) = text.strip_suffix(['f', 'F'])
        && decimal_end(body, true) == Some(body.len())
        && let Ok(x) = body.parse::<f64>()
    {
        return float(x);
    }
    if is_integer(text) {
        return int(text).unwrap_or_else(|| Value::String(text.to_owned()));
    }
    if decimal_end(text, true) == Some(text.len())
        && let Ok(x) = text.parse::<f64>()
    {
        return float(x);
    }
    Value::String(text.to_owned())
}

/// `new T[]{a, b}` (also `new T[] { }`).
fn java_array(text: &str, nested: Option<&str>) -> Option<Value> {
    let rest = after_keyword(text, "new")?;
    let (ty, rest) = word(rest);
    if ty.is_empty() {
        return None;
    }
    let rest = rest.strip_prefix("[]")?.trim_start();
    if !rest.starts_with('{') {
        return None;
    }
    let (inner, end) = bracketed(rest, 0, '{', '}')?;
    if !rest[end..].trim().is_empty() {
        return None;
    }
    Some(Value::Array(
        split_top_level(inner)
            .into_iter()
            .map(|e| java_element(e, nested))
            .collect(),
    ))
}

/// `new Name<T>` at the start of `text` (the type argument may be empty or one word), and the
/// rest.
fn java_generic_new<'a>(text: &'a str, name: &str, any_type_args: bool) -> Option<&'a str> {
    let rest = after_keyword(text, "new")?.strip_prefix(name)?.trim_start();
    let rest = rest.strip_prefix('<')?;
    let close = rest.find('>')?;
    let args = &rest[..close];
    if !any_type_args && !args.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    Some(rest[close + 1..].trim_start())
}

/// The calls `method(arg)` of a double-brace initialiser body `{{ m(a); m(b); }}`.
fn initializer_calls<'a>(body: &'a str, method: &str) -> Option<Vec<&'a str>> {
    let mut args = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let after = rest.strip_prefix(method)?.trim_start();
        if !after.starts_with('(') {
            return None;
        }
        let (inner, end) = bracketed(after, 0, '(', ')')?;
        args.push(inner.trim());
        rest = after[end..].trim_start();
        rest = rest.strip_prefix(';').unwrap_or(rest).trim_start();
    }
    Some(args)
}

/// The body of `() {{ … }}` / `() { … }` / `()` after a constructor, or None when `text` has
/// another shape; an empty constructor gives an empty body.
fn initializer_body(text: &str) -> Option<&str> {
    let rest = text
        .strip_prefix('(')?
        .trim_start()
        .strip_prefix(')')?
        .trim_start();
    if rest.is_empty() {
        return Some("");
    }
    let (outer, end) = bracketed(rest, 0, '{', '}')?;
    if !rest[end..].trim().is_empty() {
        return None;
    }
    let outer = outer.trim();
    if outer.starts_with('{') {
        let (inner, end) = bracketed(outer, 0, '{', '}')?;
        outer[end..].trim().is_empty().then_some(inner)
    } else {
        Some(outer)
    }
}

/// `new ArrayList<T>(Arrays.asList(a, b))`, `new ArrayList<T>() {{ add(a); add(b); }}` or
/// `new ArrayList<T>()`.
fn java_array_list(text: &str, nested: Option<&str>) -> Option<Value> {
    let rest = java_generic_new(text, "ArrayList", false)?;
    let elements: Vec<&str> = if let Some(args) = rest.strip_prefix('(') {
        let args = args.trim_start();
        if let Some(list) = args.strip_prefix("Arrays.asList") {
            let list = list.trim_start();
            let (inner, end) = bracketed(list, 0, '(', ')')?;
            let tail = list[end..].trim_start().strip_prefix(')')?;
            if !tail.trim().is_empty() {
                return None;
            }
            split_top_level(inner)
        } else {
            initializer_calls(initializer_body(rest)?, "add")?
        }
    } else {
        return None;
    };
    Some(Value::Array(
        elements
            .into_iter()
            .map(|e| java_element(e, nested))
            .collect(),
    ))
}

/// `new HashMap<K, V>() {{ put("k", v); }}` or `new HashMap<K, V>()`.
fn java_hash_map(text: &str) -> Option<Value> {
    let rest = java_generic_new(text, "HashMap", true)?;
    let mut map = Map::new();
    for call in initializer_calls(initializer_body(rest)?, "put")? {
        let parts = split_top_level(call);
        let [key, value] = parts.as_slice() else {
            return None;
        };
        let key = unquote(key, &['"'])?;
        map.insert(key.to_owned(), java_literal(value));
    }
    Some(Value::Object(map))
}

/// Reads a JavaScript argument written as `text` for a parameter of BFCL JavaScript type `ty`
/// (with `items` type `nested` for arrays).
pub fn js_value(text: &str, ty: &str, nested: Option<&str>) -> Result<Value, Unsupported> {
    let keep = || Value::String(text.to_owned());
    Ok(match ty {
        "String" => {
            unquote(text, &['"', '\'']).map_or_else(keep, |inner| Value::String(inner.to_owned()))
        }
        "integer" => {
            if is_integer(text) {
                int(text).unwrap_or_else(keep)
            } else {
                keep()
            }
        }
        "float" => match decimal_end(text, false) {
            Some(end) if end == text.len() => text.parse().map(float).unwrap_or_else(|_| keep()),
            _ => keep(),
        },
        "Bigint" => match text.strip_suffix('n') {
            Some(body) if is_integer(body) => int(body).unwrap_or_else(keep),
            _ => keep(),
        },
        "Boolean" => match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => keep(),
        },
        "dict" => js_object(text.trim()).unwrap_or_else(keep),
        "array" => js_array(text.trim(), nested).unwrap_or_else(keep),
        "any" => keep(),
        other => {
            return Err(Unsupported(format!(
                "the JavaScript type {other:?} has no reader (BFCL reads String, integer, float, Bigint, Boolean, dict, array and any)"
            )));
        }
    })
}

/// A JavaScript literal read by its own syntax: booleans, quoted strings, numbers, arrays and
/// objects; anything else (an identifier, an expression) stays as its text.
pub fn js_literal(text: &str) -> Value {
    let text = text.trim();
    match text {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    if let Some(inner) = unquote(text, &['"', '\'', '`']) {
        return Value::String(inner.to_owned());
    }
    if is_integer(text) {
        return int(text).unwrap_or_else(|| Value::String(text.to_owned()));
    }
    if decimal_end(text, true) == Some(text.len())
        && let Ok(x) = text.parse::<f64>()
    {
        return float(x);
    }
    if (text.starts_with('[') || text.starts_with("new Array"))
        && let Some(v) = js_array(text, None)
    {
        return v;
    }
    if text.starts_with('{')
        && let Some(v) = js_object(text)
    {
        return v;
    }
    Value::String(text.to_owned())
}

/// `[a, b]` or `new Array(a, b)`; elements of declared type `nested` when given.
fn js_array(text: &str, nested: Option<&str>) -> Option<Value> {
    let inner = if text.starts_with('[') {
        let (inner, end) = bracketed(text, 0, '[', ']')?;
        if !text[end..].trim().is_empty() {
            return None;
        }
        inner
    } else {
        let rest = after_keyword(text, "new")?
            .strip_prefix("Array")?
            .trim_start();
        let (inner, end) = bracketed(rest, 0, '(', ')')?;
        if !rest[end..].trim().is_empty() {
            return None;
        }
        inner
    };
    Some(Value::Array(
        split_top_level(inner)
            .into_iter()
            .map(|e| match nested {
                Some(ty @ ("String" | "integer" | "float" | "Bigint" | "Boolean")) => {
                    js_value(e, ty, None).unwrap_or_else(|_| Value::String(e.to_owned()))
                }
                _ => js_literal(e),
            })
            .collect(),
    ))
}

/// `{key: value, 'other': value}`.
fn js_object(text: &str) -> Option<Value> {
    let (inner, end) = bracketed(text, 0, '{', '}')?;
    if !text[end..].trim().is_empty() {
        return None;
    }
    let mut map = Map::new();
    for pair in split_top_level(inner) {
        let colon = key_end(pair)?;
        let key = pair[..colon].trim();
        let key = unquote(key, &['"', '\'']).unwrap_or(key);
        map.insert(key.to_owned(), js_literal(&pair[colon + 1..]));
    }
    Some(Value::Object(map))
}

/// The byte of the colon after an object key (which may be quoted).
fn key_end(pair: &str) -> Option<usize> {
    let mut quotes = Quotes::default();
    pair.char_indices()
        .find(|&(_, c)| !quotes.inside(c, &['"', '\'']) && c == ':')
        .map(|(i, _)| i)
}

/// Java source for a ground-truth `value` of declared type `ty` (element type `nested`), as a
/// model would write it; None for a type BFCL cannot read.
pub fn java_source(value: &Value, ty: &str, nested: Option<&str>) -> Option<String> {
    Some(match (ty, value) {
        ("long", Value::Number(n)) => format!("{n}L"),
        ("float", Value::Number(n)) => format!("{}f", decimal(n)),
        ("double", Value::Number(n)) => decimal(n),
        ("Array", Value::Array(items)) => {
            let elem = nested.unwrap_or("Object");
            let parts: Option<Vec<String>> = items
                .iter()
                .map(|v| java_element_source(v, nested))
                .collect();
            format!("new {}[]{{{}}}", java_type_name(elem), parts?.join(", "))
        }
        ("ArrayList", Value::Array(items)) => {
            let parts: Option<Vec<String>> = items
                .iter()
                .map(|v| java_element_source(v, nested))
                .collect();
            format!("new ArrayList<>(Arrays.asList({}))", parts?.join(", "))
        }
        ("HashMap", Value::Object(map)) => {
            let puts: Vec<String> = map
                .iter()
                .map(|(k, v)| {
                    format!(
                        "put(\"{k}\", {});",
                        java_element_source(v, None).unwrap_or_default()
                    )
                })
                .collect();
            format!("new HashMap<String, Object>() {{{{ {} }}}}", puts.join(" "))
        }
        (_, Value::String(s)) => s.clone(),
        (_, Value::Bool(b)) => b.to_string(),
        (_, Value::Number(n)) => n.to_string(),
        _ => return None,
    })
}

fn java_type_name(ty: &str) -> &str {
    match ty {
        "integer" => "int",
        "any" => "Object",
        other => other,
    }
}

fn java_element_source(value: &Value, nested: Option<&str>) -> Option<String> {
    match (nested, value) {
        (Some("String") | None | Some("any"), Value::String(s)) => Some(format!("\"{s}\"")),
        (Some("char"), Value::String(s)) => Some(format!("'{s}'")),
        (Some(ty), v) => java_source(v, ty, None),
        (None, v) => java_source(v, "any", None),
    }
}

/// A number written with a decimal point or exponent.
fn decimal(n: &Number) -> String {
    let text = n.to_string();
    if text.contains(['.', 'e', 'E']) {
        text
    } else {
        format!("{text}.0")
    }
}

/// JavaScript source for a ground-truth `value` of declared type `ty`.
pub fn js_source(value: &Value, ty: &str) -> Option<String> {
    Some(match (ty, value) {
        ("Bigint", Value::Number(n)) => format!("{n}n"),
        ("String", Value::String(s)) => format!("\"{s}\""),
        (_, Value::String(s)) => s.clone(),
        (_, Value::Array(items)) => {
            let parts: Vec<String> = items.iter().map(js_element_source).collect();
            format!("[{}]", parts.join(", "))
        }
        (_, Value::Object(map)) => {
            let parts: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}: {}", js_element_source(v)))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        (_, Value::Bool(b)) => b.to_string(),
        (_, Value::Number(n)) => n.to_string(),
        (_, Value::Null) => return None,
    })
}

fn js_element_source(value: &Value) -> String {
    match value {
        Value::String(s) => format!("'{s}'"),
        other => js_source(other, "any").unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn java(text: &str, ty: &str) -> Value {
        java_value(text, ty, None).unwrap()
    }

    #[test]
    fn java_scalars_read_by_their_declared_type() {
        assert_eq!(java("123", "integer"), json!(123));
        assert_eq!(java("-128", "byte"), json!(-128));
        assert_eq!(java("2.5f", "float"), json!(2.5));
        assert_eq!(java("3e-3F", "float"), json!(3e-3));
        assert_eq!(java("3f", "float"), json!(3.0));
        assert_eq!(java("3.14e2", "double"), json!(314.0));
        assert_eq!(java("123L", "long"), json!(123));
        assert_eq!(java("-9223372036854775808L", "long"), json!(i64::MIN));
        assert_eq!(java("true", "boolean"), json!(true));
        assert_eq!(java("abc", "String"), json!("abc"));
        assert_eq!(java("123", "any"), json!("123"));
        // Not a literal of the declared type: the text is kept (a variable, or a type error).
        assert_eq!(java("3.14", "float"), json!("3.14"));
        assert_eq!(java("3.14f", "double"), json!("3.14f"));
        assert_eq!(java("12", "long"), json!("12"));
        assert_eq!(
            java("ResultSet.TYPE_FORWARD_ONLY", "integer"),
            json!("ResultSet.TYPE_FORWARD_ONLY")
        );
        assert_eq!(java("yes", "boolean"), json!("yes"));
        assert!(java_value("x", "Set", None).is_err());
    }

    #[test]
    fn java_collections_read_their_elements() {
        assert_eq!(java("new int[]{1, 2, 3}", "Array"), json!([1, 2, 3]));
        assert_eq!(java("new int[] { }", "Array"), json!([]));
        assert_eq!(
            java_value("new long[]{1L, 2L}", "Array", Some("long")).unwrap(),
            json!([1, 2])
        );
        assert_eq!(
            java_value("new String[]{\"a, b\", \"c\"}", "Array", Some("String")).unwrap(),
            json!(["a, b", "c"])
        );
        assert_eq!(
            java("new Object[]{1, \"abc\", true, 2.5f}", "Array"),
            json!([1, "abc", true, 2.5])
        );
        assert_eq!(
            java("new ArrayList<>(Arrays.asList(\"a\", \"b\"))", "ArrayList"),
            json!(["a", "b"])
        );
        assert_eq!(
            java_value(
                "new ArrayList<Integer>(Arrays.asList(1, 2, 3))",
                "ArrayList",
                Some("integer")
            )
            .unwrap(),
            json!([1, 2, 3])
        );
        assert_eq!(
            java_value(
                "new ArrayList<Double>() {{ add(1.0); add(2.5); }}",
                "ArrayList",
                Some("double")
            )
            .unwrap(),
            json!([1.0, 2.5])
        );
        assert_eq!(java("new ArrayList<>()", "ArrayList"), json!([]));
        assert_eq!(
            java(
                "new HashMap<String, Object>() {{ put(\"key1\", 1); put(\"key2\", \"value\"); put(\"key3\", true); }}",
                "HashMap"
            ),
            json!({"key1": 1, "key2": "value", "key3": true})
        );
        assert_eq!(java("new HashMap<>()", "HashMap"), json!({}));
        assert_eq!(java("new HashMap<>() {{ }}", "HashMap"), json!({}));
        assert_eq!(
            java(
                "new HashMap<String, String>() { { put(\"k\", \"v\"); } }",
                "HashMap"
            ),
            json!({"k": "v"})
        );
        // Not a collection literal: a variable name stays a string.
        assert_eq!(java("userList", "ArrayList"), json!("userList"));
        assert_eq!(java("new int[][]{{1}}", "Array"), json!("new int[][]{{1}}"));
    }

    #[test]
    fn javascript_values_read_by_their_declared_type() {
        let js = |text: &str, ty: &str| js_value(text, ty, None).unwrap();
        assert_eq!(js("true", "Boolean"), json!(true));
        assert_eq!(js("123", "integer"), json!(123));
        assert_eq!(js("-2.75", "float"), json!(-2.75));
        assert_eq!(js("3", "float"), json!(3.0));
        assert_eq!(js("123n", "Bigint"), json!(123));
        assert_eq!(js("'abc'", "String"), json!("abc"));
        assert_eq!(js("abc", "String"), json!("abc"));
        assert_eq!(js("[1, 'two', true]", "array"), json!([1, "two", true]));
        assert_eq!(js("new Array(1, 2, 3)", "array"), json!([1, 2, 3]));
        assert_eq!(js(" [ [1, 2], [3, 4]]", "array"), json!([[1, 2], [3, 4]]));
        assert_eq!(
            js_value("[1, 2]", "array", Some("float")).unwrap(),
            json!([1.0, 2.0])
        );
        assert_eq!(
            js_value("[\"a\", 'b']", "array", Some("String")).unwrap(),
            json!(["a", "b"])
        );
        assert_eq!(js("{}", "dict"), json!({}));
        assert_eq!(
            js("{'key': 'value', n: 123, ok: false}", "dict"),
            json!({"key": "value", "n": 123, "ok": false})
        );
        assert_eq!(
            js(
                "{\"initialState\": initialStateObject, \"middlewares\": [\"loggerMiddleware\"], nested: {a: 1}}",
                "dict"
            ),
            json!({"initialState": "initialStateObject", "middlewares": ["loggerMiddleware"], "nested": {"a": 1}})
        );
        assert_eq!(js("dataPointsArray", "array"), json!("dataPointsArray"));
        assert_eq!(js("3.14abc", "float"), json!("3.14abc"));
        assert!(js_value("x", "Symbol", None).is_err());
    }

    #[test]
    fn written_values_read_back_as_themselves() {
        let cases = [
            (json!(42), "long", None),
            (json!(0.5), "double", None),
            (json!(2.0), "float", None),
            (json!([101, 202]), "ArrayList", Some("long")),
            (json!(["-v", "--no-strict"]), "Array", Some("String")),
            (json!([2, 7, 11]), "Array", Some("integer")),
            (
                json!(["userID", 42, "isActive", true]),
                "ArrayList",
                Some("any"),
            ),
            (
                json!({"limit": 50, "schemaFilter": "public"}),
                "HashMap",
                None,
            ),
        ];
        for (value, ty, nested) in cases {
            let source = java_source(&value, ty, nested).unwrap();
            assert!(
                py_eq(&java_value(&source, ty, nested).unwrap(), &value),
                "{value} as {ty} wrote {source}"
            );
        }
        for (value, ty) in [
            (json!({"method": "GET", "n": [1, 2]}), "dict"),
            (json!(["Product A", "Product B"]), "array"),
            (json!(12), "Bigint"),
            (json!("x y"), "String"),
        ] {
            let source = js_source(&value, ty).unwrap();
            assert!(
                py_eq(&js_value(&source, ty, None).unwrap(), &value),
                "{value} as {ty} wrote {source}"
            );
        }
    }

    use super::super::pyvalue::py_eq;
}
