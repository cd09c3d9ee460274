//! The `calculate` tool: Python arithmetic over `+ - * / // **` and parentheses.
//!
//! The reference accepts an expression made only of digits, `+-*/(). ` and evaluates it as a
//! Python expression, then shows `str(round(float(result), 2))`. This evaluator follows Python's
//! grammar for that character set (unary minus binds looser than `**`, `**` is right
//! associative, `/` is true division, `//` floors) with Python ints kept exact in `i128`
//! (beyond that range it falls back to floats, where Python would keep a big int).

use crate::env::pyjson::float_repr;

use super::round2;

const SYNTAX_ERROR: &str = "invalid syntax (<string>, line 1)";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn as_f64(self) -> f64 {
        match self {
            Num::Int(n) => n as f64,
            Num::Float(x) => x,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok {
    Num(Num),
    Plus,
    Minus,
    Star,
    Pow,
    Slash,
    FloorDiv,
    Open,
    Close,
}

/// Evaluates like the reference's `calculate`; `Err` holds the message it raises.
pub(crate) fn calculate(expression: &str) -> Result<String, String> {
    if !expression.chars().all(|c| "0123456789+-*/(). ".contains(c)) {
        return Err("Invalid characters in expression".to_owned());
    }
    let tokens = tokenize(expression)?;
    let mut parser = Parser { tokens, pos: 0 };
    let value = parser.expr()?;
    if parser.pos != parser.tokens.len() {
        return Err(SYNTAX_ERROR.to_owned());
    }
    Ok(float_repr(round2(value.as_f64())))
}

fn tokenize(text: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut idx = 0;
    while idx < chars.len() {
        let c = chars[idx];
        match c {
            ' ' => idx += 1,
            '+' => {
                tokens.push(Tok::Plus);
                idx += 1;
            }
            '-' => {
                tokens.push(Tok::Minus);
                idx += 1;
            }
            '(' => {
                tokens.push(Tok::Open);
                idx += 1;
            }
            ')' => {
                tokens.push(Tok::Close);
                idx += 1;
            }
            '*' if chars.get(idx + 1) == Some(&'*') => {
                tokens.push(Tok::Pow);
                idx += 2;
            }
            '*' => {
                tokens.push(Tok::Star);
                idx += 1;
            }
            '/' if chars.get(idx + 1) == Some(&'/') => {
                tokens.push(Tok::FloorDiv);
                idx += 2;
            }
            '/' => {
                tokens.push(Tok::Slash);
                idx += 1;
            }
            _ => {
                let start = idx;
                while idx < chars.len() && (chars[idx].is_ascii_digit() || chars[idx] == '.') {
                    idx += 1;
                }
                let literal: String = chars[start..idx].iter().collect();
                tokens.push(Tok::Num(parse_number(&literal)?));
            }
        }
    }
    Ok(tokens)
}

fn parse_number(literal: &str) -> Result<Num, String> {
    if literal.matches('.').count() > 1 || literal == "." {
        return Err(SYNTAX_ERROR.to_owned());
    }
    if literal.contains('.') {
        return literal
            .parse::<f64>()
            .map(Num::Float)
            .map_err(|_| SYNTAX_ERROR.to_owned());
    }
    if literal.len() > 1 && literal.starts_with('0') && literal.chars().any(|c| c != '0') {
        return Err("leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)".to_owned());
    }
    Ok(literal
        .parse::<i128>()
        .map(Num::Int)
        .unwrap_or_else(|_| Num::Float(literal.parse::<f64>().unwrap_or(f64::INFINITY))))
}

struct Parser {
    tokens: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<Tok> {
        self.tokens.get(self.pos).copied()
    }

    fn expr(&mut self) -> Result<Num, String> {
        let mut left = self.term()?;
        while let Some(tok @ (Tok::Plus | Tok::Minus)) = self.peek() {
            self.pos += 1;
            let right = self.term()?;
            left = if tok == Tok::Plus {
                add(left, right)
            } else {
                sub(left, right)
            };
        }
        Ok(left)
    }

    fn term(&mut self) -> Result<Num, String> {
        let mut left = self.unary()?;
        while let Some(tok @ (Tok::Star | Tok::Slash | Tok::FloorDiv)) = self.peek() {
            self.pos += 1;
            let right = self.unary()?;
            left = match tok {
                Tok::Star => mul(left, right),
                Tok::Slash => div(left, right)?,
                _ => floor_div(left, right)?,
            };
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Num, String> {
        match self.peek() {
            Some(Tok::Minus) => {
                self.pos += 1;
                Ok(match self.unary()? {
                    Num::Int(n) => Num::Int(-n),
                    Num::Float(x) => Num::Float(-x),
                })
            }
            Some(Tok::Plus) => {
                self.pos += 1;
                self.unary()
            }
            _ => self.power(),
        }
    }

    fn power(&mut self) -> Result<Num, String> {
        let base = self.atom()?;
        if self.peek() == Some(Tok::Pow) {
            self.pos += 1;
            let exponent = self.unary()?;
            return pow(base, exponent);
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Num, String> {
        match self.peek() {
            Some(Tok::Num(n)) => {
                self.pos += 1;
                Ok(n)
            }
            Some(Tok::Open) => {
                self.pos += 1;
                if self.peek() == Some(Tok::Close) {
                    // `()` is an empty tuple in Python.
                    return Err(
                        "float() argument must be a string or a real number, not 'tuple'"
                            .to_owned(),
                    );
                }
                let value = self.expr()?;
                if self.peek() != Some(Tok::Close) {
                    return Err(SYNTAX_ERROR.to_owned());
                }
                self.pos += 1;
                if matches!(self.peek(), Some(Tok::Open | Tok::Num(_))) {
                    return Err(format!(
                        "'{}' object is not callable",
                        if matches!(value, Num::Int(_)) {
                            "int"
                        } else {
                            "float"
                        }
                    ));
                }
                Ok(value)
            }
            _ => Err(SYNTAX_ERROR.to_owned()),
        }
    }
}

fn add(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x
            .checked_add(y)
            .map_or(Num::Float(x as f64 + y as f64), Num::Int),
        _ => Num::Float(a.as_f64() + b.as_f64()),
    }
}

fn sub(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x
            .checked_sub(y)
            .map_or(Num::Float(x as f64 - y as f64), Num::Int),
        _ => Num::Float(a.as_f64() - b.as_f64()),
    }
}

fn mul(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x
            .checked_mul(y)
            .map_or(Num::Float(x as f64 * y as f64), Num::Int),
        _ => Num::Float(a.as_f64() * b.as_f64()),
    }
}

fn div(a: Num, b: Num) -> Result<Num, String> {
    match (a, b) {
        (Num::Int(_), Num::Int(0)) => Err("division by zero".to_owned()),
        (_, _) if b.as_f64() == 0.0 => Err("float division by zero".to_owned()),
        _ => Ok(Num::Float(a.as_f64() / b.as_f64())),
    }
}

fn floor_div(a: Num, b: Num) -> Result<Num, String> {
    match (a, b) {
        (Num::Int(_), Num::Int(0)) => Err("integer division or modulo by zero".to_owned()),
        (Num::Int(x), Num::Int(y)) => {
            let quotient = x / y;
            let floor_fix = i128::from(x % y != 0 && ((x < 0) != (y < 0)));
            Ok(Num::Int(quotient - floor_fix))
        }
        (_, _) if b.as_f64() == 0.0 => Err("float floor division by zero".to_owned()),
        _ => Ok(Num::Float((a.as_f64() / b.as_f64()).floor())),
    }
}

fn pow(base: Num, exponent: Num) -> Result<Num, String> {
    match (base, exponent) {
        (Num::Int(x), Num::Int(y)) if y >= 0 => Ok(u32::try_from(y)
            .ok()
            .and_then(|y| x.checked_pow(y))
            .map_or(Num::Float((x as f64).powf(y as f64)), Num::Int)),
        _ => {
            let (x, y) = (base.as_f64(), exponent.as_f64());
            if x == 0.0 && y < 0.0 {
                return Err("0.0 cannot be raised to a negative power".to_owned());
            }
            if x < 0.0 && y.fract() != 0.0 {
                return Err(
                    "float() argument must be a string or a real number, not 'complex'".to_owned(),
                );
            }
            Ok(Num::Float(x.powf(y)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::calculate;

    #[test]
    fn python_arithmetic() {
        let cases = [
            ("2 + 2", "4.0"),
            ("10 / 4", "2.5"),
            ("1 / 3", "0.33"),
            ("2 ** 10", "1024.0"),
            ("-2 ** 2", "-4.0"),
            ("2 ** -1", "0.5"),
            ("7 // 2", "3.0"),
            ("-7 // 2", "-4.0"),
            ("(1 + 2) * 3", "9.0"),
            ("0.125 + 0", "0.12"),
            ("0.375 + 0", "0.38"),
            ("2.675 * 1", "2.67"),
            ("1000000 * 1000000", "1000000000000.0"),
            ("(100 - 25.5) * 2", "149.0"),
            (".5 + 1.", "1.5"),
            ("3 * 1e5", "Invalid characters in expression"),
        ];
        for (expression, want) in cases {
            let got = calculate(expression).unwrap_or_else(|err| err);
            assert_eq!(got, want, "{expression}");
        }
    }

    #[test]
    fn python_errors() {
        assert_eq!(calculate("1 / 0").unwrap_err(), "division by zero");
        assert_eq!(calculate("1.0 / 0").unwrap_err(), "float division by zero");
        assert_eq!(
            calculate("2 +").unwrap_err(),
            "invalid syntax (<string>, line 1)"
        );
        assert_eq!(
            calculate("abs(2)").unwrap_err(),
            "Invalid characters in expression"
        );
    }
}
