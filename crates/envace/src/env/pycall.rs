//! Reading calls written as Python, `[func(a=1, b="x"), mod.g(c=[1, 2.5])]`: into BFCL's
//! decoded form `[{"func": {"a": 1, "b": "x"}}, …]` (what BFCL's prompt mode asks models
//! without tool-call training to write), or as [`PyCall`]s that keep positional arguments (how
//! BFCL's multi-turn ground truth is written, `sort('report.txt')`). Values are Python literals
//! (numbers, strings, `True`, `False`, `None`, lists, tuples as lists, dicts with string keys);
//! anything else or text around the list is an error saying where.

use serde_json::{Map, Number, Value};

/// The calls in `text`: one Python list of calls, optionally inside a Markdown code fence, or a
/// single call without the brackets.
pub fn parse_calls(text: &str) -> Result<Value, String> {
    let calls = parse_py_calls(text)?;
    let mut decoded = Vec::with_capacity(calls.len());
    for call in calls {
        if !call.positional.is_empty() {
            return Err(format!(
                "{}: expected a keyword argument (name=value), found a positional one",
                call.name
            ));
        }
        let mut one = Map::new();
        one.insert(call.name, Value::Object(call.keyword));
        decoded.push(Value::Object(one));
    }
    Ok(Value::Array(decoded))
}

/// One call as written: its (possibly dotted) name, positional and keyword arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct PyCall {
    pub name: String,
    pub positional: Vec<Value>,
    pub keyword: Map<String, Value>,
}

/// The calls in `text` as [`parse_calls`] reads them, positional arguments allowed.
pub fn parse_py_calls(text: &str) -> Result<Vec<PyCall>, String> {
    let mut body = text.trim();
    if let Some(rest) = body.strip_prefix("```") {
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
        body = rest.trim().strip_suffix("```").unwrap_or(rest).trim();
    }
    let mut parser = Parser { text: body, at: 0 };
    let calls = if body.starts_with('[') {
        parser.expect('[')?;
        let mut calls = Vec::new();
        loop {
            parser.skip_space();
            if parser.eat(']') {
                break;
            }
            calls.push(parser.call()?);
            parser.skip_space();
            if parser.eat(',') {
                continue;
            }
            parser.expect(']')?;
            break;
        }
        calls
    } else {
        vec![parser.call()?]
    };
    parser.skip_space();
    if parser.at < body.len() {
        return Err(format!(
            "unexpected text after the calls at character {}: {:?}",
            parser.at,
            parser.rest().chars().take(20).collect::<String>()
        ));
    }
    if calls.is_empty() {
        return Err("the list holds no call".into());
    }
    Ok(calls)
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn skip_space(&mut self) {
        let trimmed = self.rest().trim_start();
        self.at = self.text.len() - trimmed.len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        if self.peek() == Some(c) {
            self.at += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!(
                "expected {c:?} at character {}, found {:?}",
                self.at,
                self.rest().chars().take(20).collect::<String>()
            ))
        }
    }

    fn identifier(&mut self) -> Option<&str> {
        self.skip_space();
        let rest = self.rest();
        let len = rest
            .char_indices()
            .find(|(i, c)| !(c.is_alphanumeric() || *c == '_' || (*i > 0 && c.is_ascii_digit())))
            .map_or(rest.len(), |(i, _)| i);
        if len == 0 || rest.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let start = self.at;
        self.at += len;
        Some(&self.text[start..start + len])
    }

    /// `name.path(key=value, …)`.
    fn call(&mut self) -> Result<PyCall, String> {
        let mut name = String::new();
        loop {
            let at = self.at;
            let part = self
                .identifier()
                .ok_or_else(|| format!("expected a function name at character {at}"))?;
            name.push_str(part);
            if self.peek() == Some('.') {
                self.at += 1;
                name.push('.');
            } else {
                break;
            }
        }
        self.expect('(')?;
        let mut positional = Vec::new();
        let mut keyword = Map::new();
        loop {
            if self.eat(')') {
                break;
            }
            let key_at = self.at;
            let key = self.identifier().map(str::to_owned);
            match key {
                Some(key) if self.eat('=') => {
                    let value = self.value()?;
                    keyword.insert(key, value);
                }
                _ => {
                    // Not `name=`: a positional value, read again from where it starts.
                    self.at = key_at;
                    if !keyword.is_empty() {
                        return Err(format!(
                            "{name}: a positional argument follows a keyword one at character {key_at}"
                        ));
                    }
                    positional.push(self.value()?);
                }
            }
            if self.eat(',') {
                continue;
            }
            self.expect(')')?;
            break;
        }
        Ok(PyCall {
            name,
            positional,
            keyword,
        })
    }

    fn value(&mut self) -> Result<Value, String> {
        self.skip_space();
        let at = self.at;
        match self.peek() {
            Some('[') => self.sequence('[', ']'),
            Some('(') => self.sequence('(', ')'),
            Some('{') => self.dict(),
            Some('"' | '\'') => self.string().map(Value::String),
            Some(c) if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' => self.number(),
            _ => match self.identifier() {
                Some("True") => Ok(Value::Bool(true)),
                Some("False") => Ok(Value::Bool(false)),
                Some("None") => Ok(Value::Null),
                Some(other) => Err(format!(
                    "{other:?} at character {at} is not a Python literal"
                )),
                None => Err(format!("expected a value at character {at}")),
            },
        }
    }

    fn sequence(&mut self, open: char, close: char) -> Result<Value, String> {
        self.expect(open)?;
        let mut items = Vec::new();
        loop {
            if self.eat(close) {
                break;
            }
            items.push(self.value()?);
            if self.eat(',') {
                continue;
            }
            self.expect(close)?;
            break;
        }
        Ok(Value::Array(items))
    }

    fn dict(&mut self) -> Result<Value, String> {
        self.expect('{')?;
        let mut map = Map::new();
        loop {
            if self.eat('}') {
                break;
            }
            self.skip_space();
            let key = match self.value()? {
                Value::String(key) => key,
                other => other.to_string(),
            };
            self.expect(':')?;
            map.insert(key, self.value()?);
            if self.eat(',') {
                continue;
            }
            self.expect('}')?;
            break;
        }
        Ok(Value::Object(map))
    }

    fn string(&mut self) -> Result<String, String> {
        let start = self.at;
        let Some(quote) = self.peek() else {
            return Err("expected a string".into());
        };
        self.at += 1;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    let Some((_, escaped)) = chars.next() else {
                        break;
                    };
                    out.push(match escaped {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        '0' => '\0',
                        other => other,
                    });
                }
                c if c == quote => {
                    self.at += i + 1;
                    return Ok(out);
                }
                c => out.push(c),
            }
        }
        Err(format!("the string at character {start} is not closed"))
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.at;
        let rest = self.rest();
        let len = rest
            .char_indices()
            .find(|(i, c)| {
                !(c.is_ascii_digit()
                    || matches!(c, '.' | 'e' | 'E' | '_')
                    || ((*c == '-' || *c == '+') && (*i == 0 || rest[..*i].ends_with(['e', 'E']))))
            })
            .map_or(rest.len(), |(i, _)| i);
        let literal: String = rest[..len].chars().filter(|c| *c != '_').collect();
        self.at += len;
        let is_float = literal.contains(['.', 'e', 'E']);
        let number = if is_float {
            literal.parse::<f64>().ok().and_then(Number::from_f64)
        } else {
            literal.parse::<i64>().ok().map(Number::from)
        };
        number
            .map(Value::Number)
            .ok_or_else(|| format!("{literal:?} at character {start} is not a number"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_calls_read_as_bfcl_calls() {
        assert_eq!(
            parse_calls("[math.factorial(number=5)]").unwrap(),
            json!([{"math.factorial": {"number": 5}}])
        );
        assert_eq!(
            parse_calls(
                "```python\n[area(base=10, height=5.0, unit='cm'), f(xs=[1, -2.5e3, (3, 4)], d={'a': True, \"b\": None}, s=\"say \\\"hi\\\"\")]\n```"
            )
            .unwrap(),
            json!([
                {"area": {"base": 10, "height": 5.0, "unit": "cm"}},
                {"f": {"xs": [1, -2500.0, [3, 4]], "d": {"a": true, "b": null}, "s": "say \"hi\""}}
            ])
        );
        assert_eq!(
            parse_calls("get_time()").unwrap(),
            json!([{"get_time": {}}])
        );
        // Integers stay integers and floats floats, as the checker's types need.
        let value = parse_calls("[f(a=2, b=2.0)]").unwrap();
        assert!(value[0]["f"]["a"].is_i64() && value[0]["f"]["b"].is_f64());
    }

    #[test]
    fn anything_else_is_an_error_saying_where() {
        for (text, says) in [
            ("The area is 25.", "expected '('"),
            ("[f(5)]", "expected a keyword argument"),
            ("[f(a=x)]", "\"x\" at character 5 is not a Python literal"),
            ("[f(a='open)]", "is not closed"),
            ("[f(a=1)] and more", "unexpected text after the calls"),
            ("[]", "holds no call"),
            ("[f(a=1)", "expected ']'"),
        ] {
            let err = parse_calls(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
