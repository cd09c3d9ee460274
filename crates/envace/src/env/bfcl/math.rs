//! BFCL's `MathAPI` rebuilt natively: stateless arithmetic on Python numbers, lists of numbers
//! and units, printed exactly as Python prints the results.
//!
//! Python's semantics are kept where they show: integers are unbounded (`add`, `multiply` and
//! `power` of integers stay exact; a result past 4300 digits fails the way Python's
//! `int`-to-text limit makes it fail), `int / int` is correctly rounded, `round` rounds the exact
//! binary value half to even, `sum` adds left to right, a negative number to a fractional power
//! is a `complex`, and operands Python refuses give the method's own error entry.
//!
//! Two methods print values that JSON cannot hold, so BFCL's harness falls back to `str` of
//! the result dict: `logarithm` computes with mpmath at `precision` decimal digits and returns
//! an `mpf` (`{'result': mpf('1.3027')}`), `square_root` computes with `decimal` at `precision`
//! significant digits (`{'result': Decimal('1.414')}`). Both are rebuilt bit for bit (the `mp`
//! and `dec` modules below, on the small big-integer arithmetic of `nat`): mpmath's logarithm
//! is its own algorithm (a Taylor series on a cached grid, argument reduction by `ln 2`, the
//! pure-Python integer square root), ported as written, so its last bits are mpmath's and not
//! merely correctly rounded. What is not rebuilt is an error here, where Python would answer:
//! `logarithm` above 700 digits (or past 2500 bits of working precision near 1, where mpmath
//! switches to its AGM algorithm), a complex number or a decimal exponent beyond 400 written
//! as a string; `square_root` above 10000 digits. Strings are read with ASCII digits only.

use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

use super::pyops::{self, error};
use super::{Args, Backend, Method, Outcome, req};
use crate::env::pyjson;
use crate::error::Result;

use nat::{Int, Nat};

/// Its public methods.
pub const METHODS: &[Method] = &[
    Method {
        name: "logarithm",
        params: &[req("value"), req("base"), req("precision")],
    },
    Method {
        name: "mean",
        params: &[req("numbers")],
    },
    Method {
        name: "standard_deviation",
        params: &[req("numbers")],
    },
    Method {
        name: "si_unit_conversion",
        params: &[req("value"), req("unit_in"), req("unit_out")],
    },
    Method {
        name: "imperial_si_conversion",
        params: &[req("value"), req("unit_in"), req("unit_out")],
    },
    Method {
        name: "add",
        params: &[req("a"), req("b")],
    },
    Method {
        name: "subtract",
        params: &[req("a"), req("b")],
    },
    Method {
        name: "multiply",
        params: &[req("a"), req("b")],
    },
    Method {
        name: "divide",
        params: &[req("a"), req("b")],
    },
    Method {
        name: "power",
        params: &[req("base"), req("exponent")],
    },
    Method {
        name: "square_root",
        params: &[req("number"), req("precision")],
    },
    Method {
        name: "absolute_value",
        params: &[req("number")],
    },
    Method {
        name: "round_number",
        params: &[req("number"), super::opt("decimal_places")],
    },
    Method {
        name: "percentage",
        params: &[req("part"), req("whole")],
    },
    Method {
        name: "min_value",
        params: &[req("numbers")],
    },
    Method {
        name: "max_value",
        params: &[req("numbers")],
    },
    Method {
        name: "sum_values",
        params: &[req("numbers")],
    },
];

/// The most digits `square_root` computes (Python's `decimal` goes on to `MAX_PREC`).
const MAX_DECIMAL_PREC: u64 = 10_000;

/// The stateless backend (a Python instance has no public attributes).
pub struct MathApi;

impl MathApi {
    /// `MathAPI` takes no configuration (BFCL lists it as stateless and never loads one).
    pub fn load(_config: &Map<String, Value>) -> Result<Self> {
        Ok(MathApi)
    }
}

impl Backend for MathApi {
    fn class(&self) -> &'static str {
        "MathAPI"
    }

    fn methods(&self) -> &'static [Method] {
        METHODS
    }

    fn call(&mut self, method: &str, args: &Args) -> Outcome {
        let arg = |name: &str| Py::from_value(args.value(name));
        match method {
            "logarithm" => logarithm(&arg("value"), &arg("base"), &arg("precision")),
            "mean" => mean(&arg("numbers")),
            "standard_deviation" => standard_deviation(&arg("numbers")),
            "si_unit_conversion" => {
                si_unit_conversion(&arg("value"), &arg("unit_in"), &arg("unit_out"))
            }
            "imperial_si_conversion" => {
                imperial_si_conversion(&arg("value"), &arg("unit_in"), &arg("unit_out"))
            }
            "add" => caught(add(&arg("a"), &arg("b")), "Both inputs must be numbers"),
            "subtract" => caught(sub(&arg("a"), &arg("b")), "Both inputs must be numbers"),
            "multiply" => {
                let (a, b) = (arg("a"), arg("b"));
                if !a.is_number() || !b.is_number() {
                    return error("Both inputs must be numbers");
                }
                caught(mul(&a, &b), "Both inputs must be numbers")
            }
            "divide" => {
                let (a, b) = (arg("a"), arg("b"));
                if py_eq(&b, &Py::Int(Int::zero())) {
                    return error("Cannot divide by zero");
                }
                caught(truediv(&a, &b), "Both inputs must be numbers")
            }
            "power" => caught(
                pow(&arg("base"), &arg("exponent")),
                "Both inputs must be numbers",
            ),
            "square_root" => square_root(&arg("number"), &arg("precision")),
            "absolute_value" => caught(abs(&arg("number")), "Input must be a number"),
            "round_number" => {
                let places = args
                    .get("decimal_places")
                    .map_or(Py::Int(Int::zero()), Py::from_value);
                caught(
                    round(&arg("number"), &places),
                    "First input must be a number, second input must be an integer",
                )
            }
            "percentage" => {
                let (part, whole) = (arg("part"), arg("whole"));
                if py_eq(&whole, &Py::Int(Int::zero())) {
                    return error("Whole value cannot be zero");
                }
                let ratio =
                    truediv(&part, &whole).and_then(|r| mul(&r, &Py::Int(Int::from_i128(100))));
                caught(ratio, "Both inputs must be numbers")
            }
            "min_value" => extreme(&arg("numbers"), false),
            "max_value" => extreme(&arg("numbers"), true),
            "sum_values" => {
                let numbers = arg("numbers");
                if !numbers.truthy() {
                    return error("Cannot calculate sum of an empty list");
                }
                caught(
                    iterate(&numbers).and_then(|items| sum(&items)),
                    "All elements in the list must be numbers",
                )
            }
            other => Err(format!("'MathAPI' object has no attribute '{other}'")),
        }
    }

    fn state(&self) -> Map<String, Value> {
        Map::new()
    }
}

// ---------------------------------------------------------------------------------------------
// The methods.

/// A method body of the form `try: return {"result": ...} except TypeError: return {"error":
/// ...}`: other exceptions propagate as Python's do.
fn caught(result: std::result::Result<Py, PyErr>, on_type_error: &str) -> Outcome {
    match result {
        Ok(value) => result_entry(&value),
        Err(PyErr::Type(_)) => error(on_type_error),
        Err(PyErr::Other(text)) => Err(text),
    }
}

fn logarithm(value: &Py, base: &Py, precision: &Py) -> Outcome {
    // `mpmath.mp.dps = precision`: mpmath reads it with `int()`.
    let dps = match int_of(precision) {
        Ok(dps) => dps,
        Err(text) => return error(text),
    };
    let Some(prec) = mp::dps_to_prec(&dps) else {
        return Err(format!(
            "logarithm: precision {} is beyond the {} digits computed here",
            dps.to_decimal(),
            mp::MAX_DPS
        ));
    };
    let log_of = |x: &Py| -> std::result::Result<mp::MpNum, mp::Failure> {
        let x = mp::convert(x, prec)?;
        mp::ln(&x, prec)
    };
    let result = log_of(value).and_then(|lv| {
        let lb = log_of(base)?;
        mp::divide(&lv, &lb, prec)
    });
    match result {
        Ok(number) => Ok(Value::String(format!(
            "{{'result': {}}}",
            mp::repr(&number, prec)?
        ))),
        Err(mp::Failure::Raised(text)) => error(text),
        Err(mp::Failure::Unsupported(text)) => Err(format!("logarithm: {text}")),
    }
}

fn square_root(number: &Py, precision: &Py) -> Outcome {
    const INVALID: &str = "Input must be a number or computation resulted in an invalid operation";
    // `number < 0` raises TypeError for anything but a number.
    let Some(sign) = number.number_sign() else {
        return error(INVALID);
    };
    if sign == Ordering::Less {
        return error("Cannot calculate square root of a negative number");
    }
    // `getcontext().prec = precision`: an index (int or bool) in [1, MAX_PREC].
    let prec = match precision {
        Py::Bool(b) => Int::from_i128(i128::from(*b)),
        Py::Int(i) => i.clone(),
        _ => return error(INVALID),
    };
    if prec.cmp(&Int::from_i128(i128::from(i64::MAX))) == Ordering::Greater
        || prec.cmp(&Int::from_i128(i128::from(i64::MIN))) == Ordering::Less
    {
        return Err("Python int too large to convert to C ssize_t".into());
    }
    let prec_value = prec.to_i128().unwrap_or(0);
    if !(1..=999_999_999_999_999_999).contains(&prec_value) {
        return Err("valid range for prec is [1, MAX_PREC]".into());
    }
    let prec = prec_value as u64;
    if prec > MAX_DECIMAL_PREC {
        return Err(format!(
            "square_root: precision {prec} is beyond the {MAX_DECIMAL_PREC} digits computed here"
        ));
    }
    let decimal = match number {
        Py::Bool(b) => dec::Dec::from_int(&Int::from_i128(i128::from(*b))),
        Py::Int(i) => dec::Dec::from_int(i),
        Py::Float(x) => dec::Dec::from_f64(*x),
        _ => return error(INVALID),
    };
    let root = decimal.sqrt(prec)?;
    Ok(Value::String(format!(
        "{{'result': Decimal('{}')}}",
        root.to_sci_string()
    )))
}

fn mean(numbers: &Py) -> Outcome {
    if !numbers.truthy() {
        return error("Cannot calculate mean of an empty list");
    }
    let result = iterate(numbers).and_then(|items| {
        let total = sum(&items)?;
        truediv(&total, &Py::Int(Int::from_i128(items.len() as i128)))
    });
    caught(result, "All elements in the list must be numbers")
}

fn standard_deviation(numbers: &Py) -> Outcome {
    if !numbers.truthy() {
        return error("Cannot calculate standard deviation of an empty list");
    }
    let result = iterate(numbers).and_then(|items| {
        let count = Py::Int(Int::from_i128(items.len() as i128));
        let mean = truediv(&sum(&items)?, &count)?;
        let two = Py::Int(Int::from_i128(2));
        let squares = items
            .iter()
            .map(|x| pow(&sub(x, &mean)?, &two))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let variance = truediv(&sum(&squares)?, &count)?;
        match variance {
            Py::Float(v) => Ok(Py::Float(v.sqrt())),
            other => Ok(Py::Float(other.to_f64()?.sqrt())),
        }
    });
    caught(result, "All elements in the list must be numbers")
}

fn si_unit_conversion(value: &Py, unit_in: &Py, unit_out: &Py) -> Outcome {
    let to_meters = [
        ("km", Py::Int(Int::from_i128(1000))),
        ("m", Py::Int(Int::from_i128(1))),
        ("cm", Py::Float(0.01)),
        ("mm", Py::Float(0.001)),
        ("um", Py::Float(1e-6)),
        ("nm", Py::Float(1e-9)),
    ];
    let factor = |unit: &Py| -> std::result::Result<Option<&Py>, String> {
        unit.check_hashable()?;
        Ok(match unit {
            Py::Str(name) => to_meters.iter().find(|(u, _)| u == name).map(|(_, f)| f),
            _ => None,
        })
    };
    if !value.is_number() {
        return error("Value must be a number");
    }
    let Some(into_meters) = factor(unit_in)? else {
        return unsupported_conversion(unit_in, unit_out);
    };
    let Some(out_factor) = factor(unit_out)? else {
        return unsupported_conversion(unit_in, unit_out);
    };
    // `1 / factor`: always a float.
    let from_meters = truediv(&Py::Int(Int::from_i128(1)), out_factor);
    let result = mul(value, into_meters).and_then(|m| mul(&m, &from_meters?));
    match result {
        Ok(r) => result_entry(&r),
        Err(PyErr::Type(text) | PyErr::Other(text)) => Err(text),
    }
}

fn unsupported_conversion(unit_in: &Py, unit_out: &Py) -> Outcome {
    error(format!(
        "Conversion from '{}' to '{}' is not supported",
        unit_in.str(),
        unit_out.str()
    ))
}

fn imperial_si_conversion(value: &Py, unit_in: &Py, unit_out: &Py) -> Outcome {
    let conversion: [(&str, f64); 12] = [
        ("cm_to_in", 0.393701),
        ("in_to_cm", 2.54),
        ("m_to_ft", 3.28084),
        ("ft_to_m", 0.3048),
        ("m_to_yd", 1.09361),
        ("yd_to_m", 0.9144),
        ("km_to_miles", 0.621371),
        ("miles_to_km", 1.60934),
        ("kg_to_lb", 2.20462),
        ("lb_to_kg", 0.453592),
        ("celsius_to_fahrenheit", 1.8),
        ("fahrenheit_to_celsius", 5.0 / 9.0),
    ];
    if !value.is_number() {
        return error("Value must be a number");
    }
    if py_eq(unit_in, unit_out) {
        return result_entry(value);
    }
    let key = format!("{}_to_{}", unit_in.str(), unit_out.str());
    let Some(&(_, factor)) = conversion.iter().find(|(k, _)| *k == key) else {
        return unsupported_conversion(unit_in, unit_out);
    };
    let factor = Py::Float(factor);
    let is = |unit: &Py, name: &str| matches!(unit, Py::Str(s) if s == name);
    let result = if is(unit_in, "celsius") && is(unit_out, "fahrenheit") {
        mul(value, &factor).and_then(|v| add(&v, &Py::Int(Int::from_i128(32))))
    } else if is(unit_in, "fahrenheit") && is(unit_out, "celsius") {
        sub(value, &Py::Int(Int::from_i128(32))).and_then(|v| mul(&v, &factor))
    } else {
        mul(value, &factor)
    };
    match result {
        Ok(r) => result_entry(&r),
        Err(PyErr::Type(text) | PyErr::Other(text)) => Err(text),
    }
}

/// `min_value` (`largest` false) and `max_value`.
fn extreme(numbers: &Py, largest: bool) -> Outcome {
    if !numbers.truthy() {
        return error(if largest {
            "Cannot find maximum of an empty list"
        } else {
            "Cannot find minimum of an empty list"
        });
    }
    let result = iterate(numbers).and_then(|items| {
        let mut items = items.into_iter();
        let Some(mut best) = items.next() else {
            return Err(PyErr::Other("max() arg is an empty sequence".into()));
        };
        for item in items {
            let better = if largest {
                py_lt(&best, &item)?
            } else {
                py_lt(&item, &best)?
            };
            if better {
                best = item;
            }
        }
        Ok(best)
    });
    caught(result, "All elements in the list must be numbers")
}

// ---------------------------------------------------------------------------------------------
// Python values and operators.

/// A Python value as the methods see it (JSON's kinds, with integers unbounded and `complex`
/// as a result of `**`).
#[derive(Clone, Debug)]
enum Py {
    None,
    Bool(bool),
    Int(Int),
    Float(f64),
    Complex(f64, f64),
    Str(String),
    List(Vec<Py>),
    Dict(Vec<(String, Py)>),
}

/// What a Python operation raised: a `TypeError` (which the methods catch) or anything else
/// (`ZeroDivisionError`, `OverflowError`, ...), with its text.
#[derive(Debug)]
enum PyErr {
    Type(String),
    Other(String),
}

impl From<String> for PyErr {
    fn from(text: String) -> PyErr {
        PyErr::Other(text)
    }
}

type PyResult = std::result::Result<Py, PyErr>;

impl Py {
    fn from_value(value: &Value) -> Py {
        match value {
            Value::Null => Py::None,
            Value::Bool(b) => Py::Bool(*b),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Py::Int(Int::from_i128(i128::from(i)))
                } else if let Some(u) = n.as_u64() {
                    Py::Int(Int::from_i128(i128::from(u)))
                } else {
                    Py::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => Py::Str(s.clone()),
            Value::Array(items) => Py::List(items.iter().map(Py::from_value).collect()),
            Value::Object(map) => Py::Dict(
                map.iter()
                    .map(|(k, v)| (k.clone(), Py::from_value(v)))
                    .collect(),
            ),
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Py::None => "NoneType",
            Py::Bool(_) => "bool",
            Py::Int(_) => "int",
            Py::Float(_) => "float",
            Py::Complex(..) => "complex",
            Py::Str(_) => "str",
            Py::List(_) => "list",
            Py::Dict(_) => "dict",
        }
    }

    /// `isinstance(x, (int, float))` (booleans are ints).
    fn is_number(&self) -> bool {
        matches!(self, Py::Bool(_) | Py::Int(_) | Py::Float(_))
    }

    /// An `int` (booleans included) as an integer.
    fn as_int(&self) -> Option<Int> {
        match self {
            Py::Bool(b) => Some(Int::from_i128(i128::from(*b))),
            Py::Int(i) => Some(i.clone()),
            _ => None,
        }
    }

    /// How a number compares with 0 (`None` for anything else, or NaN).
    fn number_sign(&self) -> Option<Ordering> {
        match self {
            Py::Bool(b) => Some(if *b {
                Ordering::Greater
            } else {
                Ordering::Equal
            }),
            Py::Int(i) => Some(i.cmp(&Int::zero())),
            Py::Float(x) => x.partial_cmp(&0.0),
            _ => None,
        }
    }

    /// Python's `float(x)` for a number, with its `OverflowError` for a huge integer.
    fn to_f64(&self) -> std::result::Result<f64, PyErr> {
        match self {
            Py::Float(x) => Ok(*x),
            _ => match self.as_int() {
                Some(i) => i
                    .to_f64()
                    .ok_or_else(|| PyErr::Other("int too large to convert to float".into())),
                None => Err(PyErr::Type(format!(
                    "must be real number, not {}",
                    self.type_name()
                ))),
            },
        }
    }

    fn truthy(&self) -> bool {
        match self {
            Py::None => false,
            Py::Bool(b) => *b,
            Py::Int(i) => !i.is_zero(),
            Py::Float(x) => *x != 0.0,
            Py::Complex(re, im) => *re != 0.0 || *im != 0.0,
            Py::Str(s) => !s.is_empty(),
            Py::List(items) => !items.is_empty(),
            Py::Dict(items) => !items.is_empty(),
        }
    }

    fn check_hashable(&self) -> std::result::Result<(), String> {
        match self {
            Py::List(_) | Py::Dict(_) => Err(format!("unhashable type: '{}'", self.type_name())),
            _ => Ok(()),
        }
    }

    /// Python's `repr`.
    fn repr(&self) -> std::result::Result<String, String> {
        Ok(match self {
            Py::None => "None".into(),
            Py::Bool(true) => "True".into(),
            Py::Bool(false) => "False".into(),
            Py::Int(i) => int_text(i)?,
            Py::Float(x) => pyjson::float_repr(*x),
            Py::Complex(re, im) => complex_repr(*re, *im),
            Py::Str(s) => pyjson::repr(&Value::String(s.clone())),
            Py::List(items) => {
                let inner = items
                    .iter()
                    .map(Py::repr)
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                format!("[{}]", inner.join(", "))
            }
            Py::Dict(items) => {
                let inner = items
                    .iter()
                    .map(|(k, v)| {
                        Ok(format!(
                            "{}: {}",
                            pyjson::repr(&Value::String(k.clone())),
                            v.repr()?
                        ))
                    })
                    .collect::<std::result::Result<Vec<_>, String>>()?;
                format!("{{{}}}", inner.join(", "))
            }
        })
    }

    /// Python's `str`.
    fn str(&self) -> String {
        match self {
            Py::Str(s) => s.clone(),
            other => other.repr().unwrap_or_else(|e| e),
        }
    }

    /// The value as JSON when JSON holds it exactly (integers within 64 bits, finite floats,
    /// no complex).
    fn to_value(&self) -> Option<Value> {
        Some(match self {
            Py::None => Value::Null,
            Py::Bool(b) => Value::Bool(*b),
            Py::Int(i) => i.to_value()?,
            Py::Float(x) => Value::Number(Number::from_f64(*x)?),
            Py::Complex(..) => return None,
            Py::Str(s) => Value::String(s.clone()),
            Py::List(items) => Value::Array(items.iter().map(Py::to_value).collect::<Option<_>>()?),
            Py::Dict(items) => Value::Object(
                items
                    .iter()
                    .map(|(k, v)| Some((k.clone(), v.to_value()?)))
                    .collect::<Option<_>>()?,
            ),
        })
    }

    /// Python's `json.dumps`, or `None` where it raises `TypeError` (a complex number).
    fn dumps(&self) -> Option<std::result::Result<String, String>> {
        Some(Ok(match self {
            Py::None => "null".into(),
            Py::Bool(b) => b.to_string(),
            Py::Int(i) => match int_text(i) {
                Ok(text) => text,
                Err(e) => return Some(Err(e)),
            },
            Py::Float(x) => pyops::dumps_float(*x),
            Py::Complex(..) => return None,
            Py::Str(s) => pyjson::quote(s),
            Py::List(items) => {
                let mut inner = Vec::new();
                for item in items {
                    match item.dumps()? {
                        Ok(text) => inner.push(text),
                        Err(e) => return Some(Err(e)),
                    }
                }
                format!("[{}]", inner.join(", "))
            }
            Py::Dict(items) => {
                let mut inner = Vec::new();
                for (k, v) in items {
                    match v.dumps()? {
                        Ok(text) => inner.push(format!("{}: {text}", pyjson::quote(k))),
                        Err(e) => return Some(Err(e)),
                    }
                }
                format!("{{{}}}", inner.join(", "))
            }
        }))
    }
}

/// An integer's decimal text, or Python's `ValueError` past 4300 digits.
fn int_text(i: &Int) -> std::result::Result<String, String> {
    let text = i.to_decimal();
    if text.trim_start_matches('-').len() > 4300 {
        return Err(
            "Exceeds the limit (4300 digits) for integer string conversion; use \
                    sys.set_int_max_str_digits() to increase the limit"
                .into(),
        );
    }
    Ok(text)
}

/// `{"result": value}` as the harness prints it: JSON when `json.dumps` takes it, else `str`
/// of the dict.
fn result_entry(value: &Py) -> Outcome {
    if let Some(json) = value.to_value() {
        let mut map = Map::new();
        map.insert("result".into(), json);
        return Ok(Value::Object(map));
    }
    match value.dumps() {
        Some(Ok(text)) => Ok(Value::String(format!("{{\"result\": {text}}}"))),
        Some(Err(raised)) => Err(raised),
        None => Ok(Value::String(format!("{{'result': {}}}", value.repr()?))),
    }
}

/// Python's `repr(complex(re, im))`.
fn complex_repr(re: f64, im: f64) -> String {
    // `repr` of each part without the `.0` that float's own repr adds.
    let part = |x: f64| {
        let text = pyjson::float_repr(x);
        text.strip_suffix(".0").map(str::to_owned).unwrap_or(text)
    };
    let signed = |x: f64| {
        let text = part(x);
        if text.starts_with('-') {
            text
        } else {
            format!("+{text}")
        }
    };
    if re == 0.0 && re.is_sign_positive() {
        format!("{}j", part(im))
    } else {
        format!("({}{}j)", part(re), signed(im))
    }
}

/// Python's `int(x)`, as mpmath's precision setter applies it, with Python's error texts.
fn int_of(value: &Py) -> std::result::Result<Int, String> {
    match value {
        Py::Float(x) => {
            if x.is_nan() {
                Err("cannot convert float NaN to integer".into())
            } else if x.is_infinite() {
                Err("cannot convert float infinity to integer".into())
            } else {
                Ok(Int::from_f64_integral(x.trunc()))
            }
        }
        Py::Str(s) => parse_int(s).map_err(|error| match error {
            IntError::TooLong(digits) => format!(
                "Exceeds the limit (4300 digits) for integer string conversion: value has \
                 {digits} digits; use sys.set_int_max_str_digits() to increase the limit"
            ),
            IntError::Invalid => format!(
                "invalid literal for int() with base 10: {}",
                pyjson::repr(&Value::String(s.clone()))
            ),
        }),
        other => other.as_int().ok_or_else(|| {
            format!(
                "int() argument must be a string, a bytes-like object or a real number, not '{}'",
                other.type_name()
            )
        }),
    }
}

/// Why `int(text)` raised `ValueError`.
#[derive(Debug)]
enum IntError {
    /// Not a base-10 literal.
    Invalid,
    /// Over Python's 4300-digit limit (the digit count).
    TooLong(usize),
}

/// `int(text)` in base 10: surrounding whitespace, a sign, ASCII digits with single
/// underscores between them, at most 4300 digits.
fn parse_int(text: &str) -> std::result::Result<Int, IntError> {
    let (neg, clean) = pyops::int_literal(text).ok_or(IntError::Invalid)?;
    if clean.len() > 4300 {
        return Err(IntError::TooLong(clean.len()));
    }
    Ok(Int::new(neg, Nat::from_decimal(&clean)))
}

/// Whether `text` is a literal Python's `float()` accepts, written in ASCII (the digits
/// mpmath's `str_to_man_exp` goes on to read here).
fn is_float_literal(text: &str) -> bool {
    text.trim_matches(pyops::is_space).is_ascii() && pyops::parse_float(text).is_some()
}

/// A number as the operators see it.
enum Num {
    Int(Int),
    Float(f64),
}

fn num(value: &Py) -> Option<Num> {
    match value {
        Py::Float(x) => Some(Num::Float(*x)),
        other => other.as_int().map(Num::Int),
    }
}

fn unsupported(op: &str, a: &Py, b: &Py) -> PyErr {
    PyErr::Type(pyops::unsupported_operands(
        op,
        a.type_name(),
        b.type_name(),
    ))
}

/// Both operands as floats (for a mixed or float operation).
fn floats(a: Num, b: Num) -> std::result::Result<(f64, f64), PyErr> {
    let f = |n: Num| match n {
        Num::Float(x) => Ok(x),
        Num::Int(i) => i
            .to_f64()
            .ok_or_else(|| PyErr::Other("int too large to convert to float".into())),
    };
    Ok((f(a)?, f(b)?))
}

/// `a <op> b` for two numbers: exact on two ints (`ints`), in floats otherwise (`reals`);
/// `None` when either is not a number.
fn numeric(
    a: &Py,
    b: &Py,
    ints: fn(&Int, &Int) -> Int,
    reals: fn(f64, f64) -> f64,
) -> Option<PyResult> {
    Some(match (num(a)?, num(b)?) {
        (Num::Int(x), Num::Int(y)) => Ok(Py::Int(ints(&x, &y))),
        (x, y) => floats(x, y).map(|(x, y)| Py::Float(reals(x, y))),
    })
}

/// Python's `a + b`.
fn add(a: &Py, b: &Py) -> PyResult {
    numeric(a, b, Int::add, |x, y| x + y).unwrap_or_else(|| match (a, b) {
        (Py::Str(x), Py::Str(y)) => Ok(Py::Str(format!("{x}{y}"))),
        (Py::List(x), Py::List(y)) => Ok(Py::List(x.iter().chain(y).cloned().collect())),
        _ => Err(unsupported("+", a, b)),
    })
}

/// Python's `a - b`.
fn sub(a: &Py, b: &Py) -> PyResult {
    numeric(a, b, Int::sub, |x, y| x - y).unwrap_or_else(|| Err(unsupported("-", a, b)))
}

/// Python's `a * b` on numbers.
fn mul(a: &Py, b: &Py) -> PyResult {
    numeric(a, b, Int::mul, |x, y| x * y).unwrap_or_else(|| Err(unsupported("*", a, b)))
}

/// Python's `a / b`: an `int / int` quotient correctly rounded.
fn truediv(a: &Py, b: &Py) -> PyResult {
    match (num(a), num(b)) {
        (Some(Num::Int(x)), Some(Num::Int(y))) => {
            if y.is_zero() {
                return Err(PyErr::Other("division by zero".into()));
            }
            nat::ratio_to_f64(&x, &y)
                .map(Py::Float)
                .ok_or_else(|| PyErr::Other("integer division result too large for a float".into()))
        }
        (Some(x), Some(y)) => {
            let (x, y) = floats(x, y)?;
            if y == 0.0 {
                return Err(PyErr::Other("float division by zero".into()));
            }
            Ok(Py::Float(x / y))
        }
        _ => Err(unsupported("/", a, b)),
    }
}

/// Python's `abs(x)`.
fn abs(x: &Py) -> PyResult {
    match num(x) {
        Some(Num::Int(i)) => Ok(Py::Int(i.abs())),
        Some(Num::Float(f)) => Ok(Py::Float(f.abs())),
        None => Err(PyErr::Type(format!(
            "bad operand type for abs(): '{}'",
            x.type_name()
        ))),
    }
}

/// Python's `base ** exponent`.
fn pow(base: &Py, exponent: &Py) -> PyResult {
    match (num(base), num(exponent)) {
        (Some(Num::Int(b)), Some(Num::Int(e))) if !e.is_neg() => int_pow(&b, &e),
        (Some(b), Some(e)) => {
            let (b, e) = floats(b, e)?;
            float_pow(b, e)
        }
        _ => Err(unsupported("** or pow()", base, exponent)),
    }
}

/// The message Python's `int`-to-text limit raises with.
const INT_DIGITS_LIMIT: &str = "Exceeds the limit (4300 digits) for integer string conversion; \
                                use sys.set_int_max_str_digits() to increase the limit";

/// `b ** e` for integers, `e >= 0`: exact, except that a result too long to print (which is
/// all the harness does with it) is refused before it is computed.
fn int_pow(b: &Int, e: &Int) -> PyResult {
    let magnitude = b.abs();
    if magnitude.cmp(&Int::from_i128(1)) != Ordering::Greater {
        // 0, 1 and -1 to any power.
        return Ok(Py::Int(if e.is_zero() {
            Int::from_i128(1)
        } else if b.is_neg() && e.is_odd() {
            Int::from_i128(-1)
        } else {
            magnitude
        }));
    }
    let bits = magnitude.bits();
    // The result has at least e * (bits - 1) bits; past 14300 bits it has over 4300 digits.
    let too_long = match e.to_i128() {
        Some(e) => e.saturating_mul(i128::from(bits - 1)) > 14_300,
        None => true,
    };
    if too_long {
        return Err(PyErr::Other(INT_DIGITS_LIMIT.into()));
    }
    let exp = e.to_i128().unwrap_or(0) as u64;
    Ok(Py::Int(b.pow(exp)))
}

/// CPython's `float.__pow__`.
fn float_pow(iv: f64, iw: f64) -> PyResult {
    let is_odd_integer = |x: f64| x.abs() % 2.0 == 1.0;
    if iw == 0.0 {
        return Ok(Py::Float(1.0));
    }
    if iv.is_nan() {
        return Ok(Py::Float(iv));
    }
    if iw.is_nan() {
        return Ok(Py::Float(if iv == 1.0 { 1.0 } else { iw }));
    }
    if iw.is_infinite() {
        let iv = iv.abs();
        return Ok(Py::Float(if iv == 1.0 {
            1.0
        } else if (iw > 0.0) == (iv > 1.0) {
            iw.abs()
        } else {
            0.0
        }));
    }
    if iv.is_infinite() {
        let odd = is_odd_integer(iw);
        return Ok(Py::Float(if iw > 0.0 {
            if odd { iv } else { iv.abs() }
        } else if odd {
            0.0_f64.copysign(iv)
        } else {
            0.0
        }));
    }
    if iv == 0.0 {
        if iw < 0.0 {
            return Err(PyErr::Other(
                "0.0 cannot be raised to a negative power".into(),
            ));
        }
        return Ok(Py::Float(if is_odd_integer(iw) { iv } else { 0.0 }));
    }
    let mut iv = iv;
    let mut negate = false;
    if iv < 0.0 {
        if iw != iw.floor() {
            return complex_pow(iv, iw);
        }
        iv = -iv;
        negate = is_odd_integer(iw);
    }
    if iv == 1.0 {
        return Ok(Py::Float(if negate { -1.0 } else { 1.0 }));
    }
    let ix = libm_pow(iv, iw);
    if ix.is_infinite() {
        return Err(PyErr::Other("(34, 'Numerical result out of range')".into()));
    }
    Ok(Py::Float(if negate { -ix } else { ix }))
}

/// The C library's `pow`, as Python calls it (kept out of constant folding).
fn libm_pow(x: f64, y: f64) -> f64 {
    std::hint::black_box(x).powf(std::hint::black_box(y))
}

/// CPython's complex power for a negative real base and a non-integral real exponent.
fn complex_pow(base: f64, exponent: f64) -> PyResult {
    let vabs = base.hypot(0.0);
    let len = libm_pow(vabs, exponent);
    let at = 0.0_f64.atan2(base);
    let phase = at * exponent;
    let re = len * phase.cos();
    let im = len * phase.sin();
    if re.is_infinite() || im.is_infinite() {
        return Err(PyErr::Other("complex exponentiation".into()));
    }
    Ok(Py::Complex(re, im))
}

/// Python's `round(number, ndigits)` (`ndigits` `None` rounds to an integer).
fn round(number: &Py, places: &Py) -> PyResult {
    let type_error = |what: &Py| {
        PyErr::Type(format!(
            "'{}' object cannot be interpreted as an integer",
            what.type_name()
        ))
    };
    match number {
        Py::Float(x) => match places {
            Py::None => Ok(Py::Int(round_half_even_to_int(*x)?)),
            _ => {
                let n = places.as_int().ok_or_else(|| type_error(places))?;
                // Clipped to a C ssize_t, as Python clips it.
                let n = n
                    .to_i128()
                    .unwrap_or(if n.is_neg() { i128::MIN } else { i128::MAX });
                Ok(Py::Float(round_float(*x, n)?))
            }
        },
        _ => {
            let Some(i) = number.as_int() else {
                return Err(PyErr::Type(format!(
                    "type {} doesn't define __round__ method",
                    number.type_name()
                )));
            };
            match places {
                Py::None => Ok(Py::Int(i)),
                _ => {
                    let n = places.as_int().ok_or_else(|| type_error(places))?;
                    if !n.is_neg() {
                        return Ok(Py::Int(i));
                    }
                    // Round to a multiple of 10^k, half to even; past 10^45 every integer
                    // here rounds to 0.
                    let k = n.abs().to_i128().unwrap_or(i128::MAX);
                    if k > 45 {
                        return Ok(Py::Int(Int::zero()));
                    }
                    let unit = Int::from_nat(Nat::pow_small(10, k as u64));
                    Ok(Py::Int(i.div_near(&unit).mul(&unit)))
                }
            }
        }
    }
}

/// `round(x)` for a float: the nearest integer, half to even, exactly.
fn round_half_even_to_int(x: f64) -> std::result::Result<Int, PyErr> {
    if x.is_nan() {
        return Err(PyErr::Other("cannot convert float NaN to integer".into()));
    }
    if x.is_infinite() {
        return Err(PyErr::Other(
            "cannot convert float infinity to integer".into(),
        ));
    }
    Ok(Int::from_f64_integral(x.round_ties_even()))
}

/// `round(x, n)` for a float: the exact binary value rounded half to even at `n` decimals,
/// read back as a float (CPython's `double_round`).
fn round_float(x: f64, n: i128) -> std::result::Result<f64, PyErr> {
    const NDIGITS_MAX: i128 = 323;
    const NDIGITS_MIN: i128 = -308;
    if !x.is_finite() || n > NDIGITS_MAX {
        return Ok(x);
    }
    if n < NDIGITS_MIN {
        return Ok(0.0 * x);
    }
    let text = if n >= 0 {
        format!("{:.*}", n as usize, x)
    } else {
        // x / 10^k rounded half to even, exactly, then scaled back by the exponent.
        let k = (-n) as u64;
        let exact = nat::Ratio::from_f64(x.abs());
        let scaled = nat::Ratio {
            num: exact.num,
            den: exact.den.mul(&Nat::pow_small(10, k)),
        };
        let q = scaled.round_half_even();
        let sign = if x.is_sign_negative() { "-" } else { "" };
        format!("{sign}{}e{k}", q.to_decimal())
    };
    let rounded: f64 = text.parse().unwrap_or(f64::NAN);
    if rounded.is_infinite() {
        return Err(PyErr::Other("rounded value too large to represent".into()));
    }
    Ok(rounded)
}

/// Python's `sum(items)` (start 0): `+` from left to right.
fn sum(items: &[Py]) -> PyResult {
    let mut total = Py::Int(Int::zero());
    for item in items {
        total = add(&total, item)?;
    }
    Ok(total)
}

/// The items a `for` loop over `value` visits.
fn iterate(value: &Py) -> std::result::Result<Vec<Py>, PyErr> {
    match value {
        Py::List(items) => Ok(items.clone()),
        Py::Str(s) => Ok(s.chars().map(|c| Py::Str(c.to_string())).collect()),
        Py::Dict(items) => Ok(items.iter().map(|(k, _)| Py::Str(k.clone())).collect()),
        other => Err(PyErr::Type(format!(
            "'{}' object is not iterable",
            other.type_name()
        ))),
    }
}

/// Exact comparison of two numbers (`None` with a NaN).
fn cmp_num(a: &Num, b: &Num) -> Option<Ordering> {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => Some(x.cmp(y)),
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(y),
        (Num::Int(x), Num::Float(y)) => x.cmp_f64(*y),
        (Num::Float(x), Num::Int(y)) => y.cmp_f64(*x).map(Ordering::reverse),
    }
}

/// Python's `==`.
fn py_eq(a: &Py, b: &Py) -> bool {
    if let (Some(x), Some(y)) = (num(a), num(b)) {
        return cmp_num(&x, &y) == Some(Ordering::Equal);
    }
    match (a, b) {
        (Py::None, Py::None) => true,
        (Py::Str(x), Py::Str(y)) => x == y,
        (Py::List(x), Py::List(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q))
        }
        (Py::Dict(x), Py::Dict(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.iter().any(|(k2, v2)| k == k2 && py_eq(v, v2)))
        }
        (Py::Complex(a, b), Py::Complex(c, d)) => a == c && b == d,
        _ => false,
    }
}

/// Python's `a < b`.
fn py_lt(a: &Py, b: &Py) -> std::result::Result<bool, PyErr> {
    if let (Some(x), Some(y)) = (num(a), num(b)) {
        return Ok(cmp_num(&x, &y) == Some(Ordering::Less));
    }
    match (a, b) {
        (Py::Str(x), Py::Str(y)) => Ok(x < y),
        (Py::List(x), Py::List(y)) => match x.iter().zip(y).position(|(p, q)| !py_eq(p, q)) {
            Some(i) => py_lt(&x[i], &y[i]),
            None => Ok(x.len() < y.len()),
        },
        _ => Err(PyErr::Type(pyops::not_supported(
            "<",
            a.type_name(),
            b.type_name(),
        ))),
    }
}

impl From<PyErr> for String {
    fn from(err: PyErr) -> String {
        match err {
            PyErr::Type(text) | PyErr::Other(text) => text,
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// Unbounded integers: naturals as little-endian 32-bit limbs, and signed integers over them
/// with Python's floor semantics for shifts and division.
mod nat {
    use std::cmp::Ordering;

    use serde_json::Value;

    /// A natural number (no high zero limbs).
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct Nat(Vec<u32>);

    impl Ord for Nat {
        fn cmp(&self, other: &Nat) -> Ordering {
            self.0
                .len()
                .cmp(&other.0.len())
                .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
        }
    }

    impl PartialOrd for Nat {
        fn partial_cmp(&self, other: &Nat) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }

    impl Nat {
        pub fn zero() -> Nat {
            Nat(Vec::new())
        }

        pub fn one() -> Nat {
            Nat(vec![1])
        }

        pub fn from_u128(mut v: u128) -> Nat {
            let mut limbs = Vec::new();
            while v > 0 {
                limbs.push(v as u32);
                v >>= 32;
            }
            Nat(limbs)
        }

        fn trimmed(mut limbs: Vec<u32>) -> Nat {
            while limbs.last() == Some(&0) {
                limbs.pop();
            }
            Nat(limbs)
        }

        pub fn is_zero(&self) -> bool {
            self.0.is_empty()
        }

        pub fn is_one(&self) -> bool {
            self.0 == [1]
        }

        /// The bit length.
        pub fn bits(&self) -> u64 {
            match self.0.last() {
                None => 0,
                Some(&top) => (self.0.len() as u64 - 1) * 32 + u64::from(32 - top.leading_zeros()),
            }
        }

        pub fn is_odd(&self) -> bool {
            self.0.first().is_some_and(|l| l & 1 == 1)
        }

        /// Bit `i` (0 is the lowest).
        pub fn bit(&self, i: u64) -> bool {
            usize::try_from(i / 32)
                .ok()
                .and_then(|limb| self.0.get(limb))
                .is_some_and(|l| (l >> (i % 32)) & 1 == 1)
        }

        /// The number of low zero bits (0 for zero).
        pub fn trailing_zeros(&self) -> u64 {
            for (i, limb) in self.0.iter().enumerate() {
                if *limb != 0 {
                    return i as u64 * 32 + u64::from(limb.trailing_zeros());
                }
            }
            0
        }

        /// Whether any of the `n` lowest bits is set.
        pub fn low_bits_nonzero(&self, n: u64) -> bool {
            n > 0 && !self.is_zero() && self.trailing_zeros() < n
        }

        pub fn to_u128(&self) -> Option<u128> {
            if self.0.len() > 4 {
                return None;
            }
            Some(
                self.0
                    .iter()
                    .rev()
                    .fold(0u128, |acc, l| (acc << 32) | u128::from(*l)),
            )
        }

        pub fn add(&self, other: &Nat) -> Nat {
            let (long, short) = if self.0.len() >= other.0.len() {
                (self, other)
            } else {
                (other, self)
            };
            let mut out = Vec::with_capacity(long.0.len() + 1);
            let mut carry = 0u64;
            for (i, limb) in long.0.iter().enumerate() {
                let sum =
                    u64::from(*limb) + u64::from(short.0.get(i).copied().unwrap_or(0)) + carry;
                out.push(sum as u32);
                carry = sum >> 32;
            }
            if carry > 0 {
                out.push(carry as u32);
            }
            Nat::trimmed(out)
        }

        /// `self - other`, or zero when `other` is larger (callers never ask that).
        pub fn sub(&self, other: &Nat) -> Nat {
            if *self < *other {
                return Nat::zero();
            }
            let mut out = Vec::with_capacity(self.0.len());
            let mut borrow = 0i64;
            for (i, limb) in self.0.iter().enumerate() {
                let mut diff =
                    i64::from(*limb) - i64::from(other.0.get(i).copied().unwrap_or(0)) - borrow;
                borrow = 0;
                if diff < 0 {
                    diff += 1 << 32;
                    borrow = 1;
                }
                out.push(diff as u32);
            }
            Nat::trimmed(out)
        }

        pub fn mul(&self, other: &Nat) -> Nat {
            if self.is_zero() || other.is_zero() {
                return Nat::zero();
            }
            let mut out = vec![0u32; self.0.len() + other.0.len()];
            for (i, a) in self.0.iter().enumerate() {
                let mut carry = 0u64;
                for (j, b) in other.0.iter().enumerate() {
                    let t = u64::from(*a) * u64::from(*b) + u64::from(out[i + j]) + carry;
                    out[i + j] = t as u32;
                    carry = t >> 32;
                }
                let mut k = i + other.0.len();
                while carry > 0 && k < out.len() {
                    let t = u64::from(out[k]) + carry;
                    out[k] = t as u32;
                    carry = t >> 32;
                    k += 1;
                }
            }
            Nat::trimmed(out)
        }

        pub fn mul_small(&self, m: u32) -> Nat {
            let mut out = Vec::with_capacity(self.0.len() + 1);
            let mut carry = 0u64;
            for limb in &self.0 {
                let t = u64::from(*limb) * u64::from(m) + carry;
                out.push(t as u32);
                carry = t >> 32;
            }
            if carry > 0 {
                out.push(carry as u32);
            }
            Nat::trimmed(out)
        }

        pub fn shl(&self, n: u64) -> Nat {
            if self.is_zero() {
                return Nat::zero();
            }
            let limbs = (n / 32) as usize;
            let bits = (n % 32) as u32;
            let mut out = vec![0u32; limbs];
            out.reserve(self.0.len() + 1);
            if bits == 0 {
                out.extend_from_slice(&self.0);
            } else {
                let mut carry = 0u32;
                for limb in &self.0 {
                    out.push((limb << bits) | carry);
                    carry = limb >> (32 - bits);
                }
                if carry > 0 {
                    out.push(carry);
                }
            }
            Nat::trimmed(out)
        }

        pub fn shr(&self, n: u64) -> Nat {
            let Ok(limbs) = usize::try_from(n / 32) else {
                return Nat::zero();
            };
            if limbs >= self.0.len() {
                return Nat::zero();
            }
            let bits = (n % 32) as u32;
            let rest = &self.0[limbs..];
            if bits == 0 {
                return Nat(rest.to_vec());
            }
            let mut out = Vec::with_capacity(rest.len());
            for (i, limb) in rest.iter().enumerate() {
                let high = rest.get(i + 1).map_or(0, |h| h << (32 - bits));
                out.push((limb >> bits) | high);
            }
            Nat::trimmed(out)
        }

        /// Quotient and remainder by a nonzero single limb (zero divides to zero).
        pub fn divmod_small(&self, d: u32) -> (Nat, u32) {
            if d == 0 {
                return (Nat::zero(), 0);
            }
            let mut out = vec![0u32; self.0.len()];
            let mut rem = 0u64;
            for i in (0..self.0.len()).rev() {
                let cur = (rem << 32) | u64::from(self.0[i]);
                out[i] = (cur / u64::from(d)) as u32;
                rem = cur % u64::from(d);
            }
            (Nat::trimmed(out), rem as u32)
        }

        /// Quotient and remainder (Knuth's algorithm D); division by zero gives `(0, self)`.
        pub fn divmod(&self, d: &Nat) -> (Nat, Nat) {
            if d.is_zero() {
                return (Nat::zero(), self.clone());
            }
            if *self < *d {
                return (Nat::zero(), self.clone());
            }
            if d.0.len() == 1 {
                let (q, r) = self.divmod_small(d.0[0]);
                return (q, Nat::from_u128(u128::from(r)));
            }
            let shift = u64::from(d.0[d.0.len() - 1].leading_zeros());
            let v = d.shl(shift).0;
            let mut u = self.shl(shift).0;
            u.resize(self.0.len() + 1, 0);
            let n = v.len();
            let m = u.len() - n - 1;
            let mut q = vec![0u32; m + 1];
            let base = 1u64 << 32;
            for j in (0..=m).rev() {
                let num = (u64::from(u[j + n]) << 32) | u64::from(u[j + n - 1]);
                let mut qhat = num / u64::from(v[n - 1]);
                let mut rhat = num % u64::from(v[n - 1]);
                while qhat >= base
                    || qhat * u64::from(v[n - 2]) > ((rhat << 32) | u64::from(u[j + n - 2]))
                {
                    qhat -= 1;
                    rhat += u64::from(v[n - 1]);
                    if rhat >= base {
                        break;
                    }
                }
                let mut borrow = 0i64;
                let mut carry = 0u64;
                for i in 0..n {
                    let p = qhat * u64::from(v[i]) + carry;
                    carry = p >> 32;
                    let t = i64::from(u[i + j]) - borrow - (p & 0xffff_ffff) as i64;
                    u[i + j] = t as u32;
                    borrow = i64::from(t < 0);
                }
                let t = i64::from(u[j + n]) - borrow - carry as i64;
                u[j + n] = t as u32;
                if t < 0 {
                    qhat -= 1;
                    let mut c = 0u64;
                    for i in 0..n {
                        let s = u64::from(u[i + j]) + u64::from(v[i]) + c;
                        u[i + j] = s as u32;
                        c = s >> 32;
                    }
                    u[j + n] = u[j + n].wrapping_add(c as u32);
                }
                q[j] = qhat as u32;
            }
            u.truncate(n);
            (Nat::trimmed(q), Nat::trimmed(u).shr(shift))
        }

        /// `base ** exp`.
        pub fn pow_small(base: u32, exp: u64) -> Nat {
            Nat::from_u128(u128::from(base)).pow(exp)
        }

        /// `self ** exp`.
        pub fn pow(&self, mut exp: u64) -> Nat {
            let mut result = Nat::one();
            let mut square = self.clone();
            while exp > 0 {
                if exp & 1 == 1 {
                    result = result.mul(&square);
                }
                exp >>= 1;
                if exp > 0 {
                    square = square.mul(&square);
                }
            }
            result
        }

        pub fn to_decimal(&self) -> String {
            if self.is_zero() {
                return "0".into();
            }
            let mut chunks = Vec::new();
            let mut rest = self.clone();
            while !rest.is_zero() {
                let (q, r) = rest.divmod_small(1_000_000_000);
                chunks.push(r);
                rest = q;
            }
            let mut out = String::new();
            for (i, chunk) in chunks.iter().rev().enumerate() {
                if i == 0 {
                    out.push_str(&chunk.to_string());
                } else {
                    out.push_str(&format!("{chunk:09}"));
                }
            }
            out
        }

        /// A string of ASCII digits (anything else is skipped).
        pub fn from_decimal(digits: &str) -> Nat {
            let mut out = Nat::zero();
            for c in digits.chars() {
                if let Some(d) = c.to_digit(10) {
                    out = out.mul_small(10).add(&Nat::from_u128(u128::from(d)));
                }
            }
            out
        }

        /// The nearest float (half to even), `None` past the largest float.
        pub fn to_f64(&self) -> Option<f64> {
            let bits = self.bits();
            if bits <= 64 {
                return self.to_u128().map(|v| v as f64);
            }
            let shift = bits - 64;
            let top = self.shr(shift).to_u128().unwrap_or(0) as u64;
            let sticky = u64::from(self.low_bits_nonzero(shift));
            let value = ldexp((top | sticky) as f64, shift as i64);
            value.is_finite().then_some(value)
        }

        /// `int(x)` for a finite float `x >= 0` (truncated).
        pub fn from_f64_trunc(x: f64) -> Nat {
            let x = x.trunc();
            if x.is_nan() || x < 1.0 || x.is_infinite() {
                return Nat::zero();
            }
            let bits = x.to_bits();
            let exponent = ((bits >> 52) & 0x7ff) as i64 - 1075;
            let mantissa = (bits & ((1 << 52) - 1)) | (1 << 52);
            let m = Nat::from_u128(u128::from(mantissa));
            if exponent >= 0 {
                m.shl(exponent as u64)
            } else {
                m.shr((-exponent) as u64)
            }
        }
    }

    /// `x * 2^e`, exact whenever the result is representable.
    pub fn ldexp(mut x: f64, mut e: i64) -> f64 {
        while e > 1000 {
            x *= 2f64.powi(1000);
            e -= 1000;
            if x.is_infinite() {
                return x;
            }
        }
        while e < -1000 {
            x *= 2f64.powi(-1000);
            e += 1000;
            if x == 0.0 {
                return x;
            }
        }
        x * 2f64.powi(e as i32)
    }

    /// A signed integer.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Int {
        neg: bool,
        mag: Nat,
    }

    impl Int {
        pub fn new(neg: bool, mag: Nat) -> Int {
            Int {
                neg: neg && !mag.is_zero(),
                mag,
            }
        }

        pub fn zero() -> Int {
            Int::new(false, Nat::zero())
        }

        pub fn from_i128(v: i128) -> Int {
            Int::new(v < 0, Nat::from_u128(v.unsigned_abs()))
        }

        pub fn from_nat(mag: Nat) -> Int {
            Int::new(false, mag)
        }

        /// The integer a float with no fraction equals.
        pub fn from_f64_integral(x: f64) -> Int {
            Int::new(x < 0.0, Nat::from_f64_trunc(x.abs()))
        }

        pub fn is_zero(&self) -> bool {
            self.mag.is_zero()
        }

        pub fn is_neg(&self) -> bool {
            self.neg
        }

        pub fn is_odd(&self) -> bool {
            self.mag.is_odd()
        }

        pub fn magnitude(&self) -> &Nat {
            &self.mag
        }

        pub fn bits(&self) -> u64 {
            self.mag.bits()
        }

        pub fn negated(&self) -> Int {
            Int::new(!self.neg, self.mag.clone())
        }

        pub fn abs(&self) -> Int {
            Int::new(false, self.mag.clone())
        }

        pub fn to_i128(&self) -> Option<i128> {
            let m = self.mag.to_u128()?;
            if self.neg {
                if m <= 1u128 << 127 {
                    Some((m as i128).wrapping_neg())
                } else {
                    None
                }
            } else {
                i128::try_from(m).ok()
            }
        }

        /// As a JSON number when it fits in 64 bits.
        pub fn to_value(&self) -> Option<Value> {
            let v = self.to_i128()?;
            if let Ok(small) = i64::try_from(v) {
                Some(Value::from(small))
            } else {
                u64::try_from(v).ok().map(Value::from)
            }
        }

        pub fn to_f64(&self) -> Option<f64> {
            self.mag.to_f64().map(|x| if self.neg { -x } else { x })
        }

        pub fn to_decimal(&self) -> String {
            let digits = self.mag.to_decimal();
            if self.neg {
                format!("-{digits}")
            } else {
                digits
            }
        }

        pub fn add(&self, other: &Int) -> Int {
            if self.neg == other.neg {
                return Int::new(self.neg, self.mag.add(&other.mag));
            }
            match self.mag.cmp(&other.mag) {
                Ordering::Less => Int::new(other.neg, other.mag.sub(&self.mag)),
                _ => Int::new(self.neg, self.mag.sub(&other.mag)),
            }
        }

        pub fn sub(&self, other: &Int) -> Int {
            self.add(&other.negated())
        }

        pub fn mul(&self, other: &Int) -> Int {
            Int::new(self.neg != other.neg, self.mag.mul(&other.mag))
        }

        pub fn pow(&self, exp: u64) -> Int {
            Int::new(self.neg && exp % 2 == 1, self.mag.pow(exp))
        }

        pub fn shl(&self, n: u64) -> Int {
            Int::new(self.neg, self.mag.shl(n))
        }

        /// `self >> n` with Python's floor rounding.
        pub fn shr_floor(&self, n: u64) -> Int {
            if !self.neg {
                return Int::new(false, self.mag.shr(n));
            }
            let q = self.mag.shr(n);
            let inexact = self.mag.low_bits_nonzero(n);
            Int::new(true, if inexact { q.add(&Nat::one()) } else { q })
        }

        /// The nearest integer to `self / d` (`d > 0`), ties to even.
        pub fn div_near(&self, d: &Int) -> Int {
            let (q, r) = self.mag.divmod(&d.mag);
            let twice = r.shl(1);
            let up = match twice.cmp(&d.mag) {
                Ordering::Greater => true,
                Ordering::Equal => q.is_odd(),
                Ordering::Less => false,
            };
            let q = if up { q.add(&Nat::one()) } else { q };
            Int::new(self.neg != d.neg, q)
        }

        pub fn cmp(&self, other: &Int) -> Ordering {
            match (self.neg, other.neg) {
                (false, true) => Ordering::Greater,
                (true, false) => Ordering::Less,
                (false, false) => self.mag.cmp(&other.mag),
                (true, true) => other.mag.cmp(&self.mag),
            }
        }

        /// Exact comparison with a float (`None` for NaN).
        pub fn cmp_f64(&self, f: f64) -> Option<Ordering> {
            if f.is_nan() {
                return None;
            }
            if f.is_infinite() {
                return Some(if f > 0.0 {
                    Ordering::Less
                } else {
                    Ordering::Greater
                });
            }
            let floor = f.floor();
            match self.cmp(&Int::from_f64_integral(floor)) {
                Ordering::Equal if f > floor => Some(Ordering::Less),
                other => Some(other),
            }
        }
    }

    /// An exact non-negative rational (a float's value, scaled).
    pub struct Ratio {
        pub num: Nat,
        pub den: Nat,
    }

    impl Ratio {
        /// The exact value of a finite float `x >= 0`.
        pub fn from_f64(x: f64) -> Ratio {
            let bits = x.to_bits() & !(1 << 63);
            let raw_exp = ((bits >> 52) & 0x7ff) as i64;
            let frac = bits & ((1 << 52) - 1);
            let (mantissa, exponent) = if raw_exp == 0 {
                (frac, -1074)
            } else {
                (frac | (1 << 52), raw_exp - 1075)
            };
            let m = Nat::from_u128(u128::from(mantissa));
            if exponent >= 0 {
                Ratio {
                    num: m.shl(exponent as u64),
                    den: Nat::one(),
                }
            } else {
                Ratio {
                    num: m,
                    den: Nat::one().shl((-exponent) as u64),
                }
            }
        }

        /// The nearest integer, ties to even.
        pub fn round_half_even(&self) -> Nat {
            let (q, r) = self.num.divmod(&self.den);
            match r.shl(1).cmp(&self.den) {
                Ordering::Greater => q.add(&Nat::one()),
                Ordering::Equal if q.is_odd() => q.add(&Nat::one()),
                _ => q,
            }
        }
    }

    /// `a / b` correctly rounded to a float (`b != 0`); `None` past the largest float.
    pub fn ratio_to_f64(a: &Int, b: &Int) -> Option<f64> {
        let neg = a.is_neg() != b.is_neg();
        let (n, d) = (a.magnitude(), b.magnitude());
        if n.is_zero() {
            return Some(if neg { -0.0 } else { 0.0 });
        }
        // Scale so the quotient has at least 66 bits, keeping a sticky bit for the rest.
        let shift = 66 + d.bits() as i64 - n.bits() as i64;
        let (q, r) = if shift >= 0 {
            n.shl(shift as u64).divmod(d)
        } else {
            n.divmod(&d.shl((-shift) as u64))
        };
        let q_bits = q.bits() as i64;
        // The value is q * 2^-shift (plus less than one unit); its exponent decides how many
        // bits a float keeps (fewer below the normal range).
        let exponent = q_bits - 1 - shift;
        let keep = if exponent >= -1022 {
            53
        } else {
            53 - (-1022 - exponent)
        };
        if keep <= 0 {
            // Below half the smallest subnormal, or a tie at it: rounds to zero or to it.
            let half_min =
                exponent == -1075 && (q.low_bits_nonzero((q_bits - 1) as u64) || !r.is_zero());
            let x = if half_min { f64::from_bits(1) } else { 0.0 };
            return Some(if neg { -x } else { x });
        }
        let drop = (q_bits - keep) as u64;
        let mut m = q.shr(drop);
        let half = q.bit(drop - 1);
        let below = q.low_bits_nonzero(drop - 1) || !r.is_zero();
        if half && (below || m.is_odd()) {
            m = m.add(&Nat::one());
        }
        let value = ldexp(m.to_u128().unwrap_or(0) as f64, drop as i64 - shift);
        if value.is_infinite() {
            return None;
        }
        Some(if neg { -value } else { value })
    }
}

// ---------------------------------------------------------------------------------------------

/// mpmath (1.3, pure-Python backend) as `MathAPI.logarithm` uses it: `mpf` values with
/// round-to-nearest, `log` through its cached Taylor series, division, complex results for
/// negative arguments, and the `repr` that prints them.
mod mp {
    use super::nat::{Int, Nat};
    use super::{Py, is_float_literal, parse_int, pyops};

    /// The largest `mp.dps` computed here (working precision stays within mpmath's Taylor
    /// range, 2500 bits).
    pub const MAX_DPS: u64 = 700;
    /// mpmath's `LOG_TAYLOR_PREC`: above it mpmath uses the AGM, not rebuilt here.
    const LOG_TAYLOR_PREC: u64 = 2500;
    /// mpmath's `LOG_TAYLOR_SHIFT`.
    const LOG_TAYLOR_SHIFT: u64 = 9;

    /// How a computation stopped: an exception mpmath raises inside the method's `try` (its
    /// text), or a case not rebuilt here.
    #[derive(Debug)]
    pub enum Failure {
        Raised(String),
        Unsupported(String),
    }

    type Res<T> = std::result::Result<T, Failure>;

    fn zero_division() -> Failure {
        Failure::Raised(String::new())
    }

    /// A raw `mpf`: zero, the specials, or `(-1)^neg * man * 2^exp` with `man` odd.
    #[derive(Clone, Debug, PartialEq)]
    pub enum Mpf {
        Zero,
        Inf,
        NegInf,
        Nan,
        Num { neg: bool, man: Nat, exp: i64 },
    }

    impl Mpf {
        /// A finite non-zero value's sign, mantissa and exponent.
        fn parts(&self) -> Option<(bool, &Nat, i64)> {
            match self {
                Mpf::Num { neg, man, exp } => Some((*neg, man, *exp)),
                _ => None,
            }
        }
    }

    /// A real or complex result.
    #[derive(Clone, Debug)]
    pub enum MpNum {
        Real(Mpf),
        Complex(Mpf, Mpf),
    }

    /// `dps_to_prec(n)`: `max(1, round((n + 1) * 3.3219280948873626))`, or `None` past
    /// [`MAX_DPS`].
    pub fn dps_to_prec(dps: &Int) -> Option<u64> {
        if dps.cmp(&Int::from_i128(i128::from(MAX_DPS))) == std::cmp::Ordering::Greater {
            return None;
        }
        let n = dps.to_i128()? as f64;
        let bits = ((n + 1.0) * 3.321_928_094_887_362_6).round_ties_even();
        Some(bits.max(1.0) as u64)
    }

    /// mpmath's rounding modes that `logarithm` meets: to nearest (the context's) and toward
    /// zero (`round_fast`, the default of the internal `mpf_add` calls in complex division).
    #[derive(Clone, Copy, PartialEq)]
    enum Rnd {
        Nearest,
        Down,
    }

    /// `normalize(sign, man, exp, bc, prec, round_nearest)` (`prec` 0: exact).
    fn normalize(neg: bool, man: Nat, exp: i64, prec: u64) -> Mpf {
        normalize_rnd(neg, man, exp, prec, Rnd::Nearest)
    }

    /// `normalize` with a rounding mode.
    fn normalize_rnd(neg: bool, man: Nat, exp: i64, prec: u64, rnd: Rnd) -> Mpf {
        if man.is_zero() {
            return Mpf::Zero;
        }
        let mut man = man;
        let mut exp = exp;
        let bc = man.bits();
        if prec > 0 && bc > prec {
            let n = bc - prec;
            match rnd {
                Rnd::Nearest => {
                    let t = man.shr(n - 1);
                    let up = t.is_odd() && (t.bit(1) || man.low_bits_nonzero(n - 1));
                    man = t.shr(1);
                    if up {
                        man = man.add(&Nat::one());
                    }
                }
                Rnd::Down => man = man.shr(n),
            }
            exp += n as i64;
        }
        let tz = man.trailing_zeros();
        if tz > 0 {
            man = man.shr(tz);
            exp += tz as i64;
        }
        Mpf::Num { neg, man, exp }
    }

    fn from_man_exp(m: &Int, exp: i64, prec: u64) -> Mpf {
        normalize(m.is_neg(), m.magnitude().clone(), exp, prec)
    }

    fn from_int(i: &Int, prec: u64) -> Mpf {
        from_man_exp(i, 0, prec)
    }

    fn from_f64(x: f64) -> Mpf {
        if x.is_nan() {
            return Mpf::Nan;
        }
        if x.is_infinite() {
            return if x > 0.0 { Mpf::Inf } else { Mpf::NegInf };
        }
        let r = super::nat::Ratio::from_f64(x.abs());
        let (man, exp) = if r.den.is_one() {
            (r.num, 0)
        } else {
            (r.num, -(r.den.bits() as i64 - 1))
        };
        normalize(x < 0.0, man, exp, 0)
    }

    fn is_special(x: &Mpf) -> bool {
        matches!(x, Mpf::Inf | Mpf::NegInf | Mpf::Nan)
    }

    fn sign(x: &Mpf) -> i32 {
        match x {
            Mpf::Zero | Mpf::Nan => 0,
            Mpf::Inf => 1,
            Mpf::NegInf => -1,
            Mpf::Num { neg, .. } => {
                if *neg {
                    -1
                } else {
                    1
                }
            }
        }
    }

    fn neg(x: &Mpf) -> Mpf {
        match x {
            Mpf::Inf => Mpf::NegInf,
            Mpf::NegInf => Mpf::Inf,
            Mpf::Num { neg, man, exp } => Mpf::Num {
                neg: !neg,
                man: man.clone(),
                exp: *exp,
            },
            other => other.clone(),
        }
    }

    fn abs(x: &Mpf) -> Mpf {
        match x {
            Mpf::NegInf => Mpf::Inf,
            Mpf::Num { man, exp, .. } => Mpf::Num {
                neg: false,
                man: man.clone(),
                exp: *exp,
            },
            other => other.clone(),
        }
    }

    /// `mpf_add(s, t, prec)` with its default rounding, toward zero (`prec` 0: exact).
    fn add(s: &Mpf, t: &Mpf, prec: u64) -> Mpf {
        let rnd = Rnd::Down;
        if let (Some((sneg, sman, sexp)), Some((tneg, tman, texp))) = (s.parts(), t.parts()) {
            let (sbc, tbc) = (sman.bits() as i64, tman.bits() as i64);
            let offset = sexp - texp;
            // Far apart: only the larger one matters, perturbed by one unit beyond precision.
            if prec > 0 && offset.abs() > 100 {
                let (big, bneg, bexp, bbc, small_exp, small_bc, small_neg) = if offset > 0 {
                    (sman, sneg, sexp, sbc, texp, tbc, tneg)
                } else {
                    (tman, tneg, texp, tbc, sexp, sbc, sneg)
                };
                let delta = bbc + bexp - small_bc - small_exp;
                if delta > prec as i64 + 4 {
                    let shift = prec + 4;
                    let shifted = big.shl(shift);
                    let man = if small_neg == bneg {
                        shifted.add(&Nat::one())
                    } else {
                        shifted.sub(&Nat::one())
                    };
                    return normalize_rnd(bneg, man, bexp - shift as i64, prec, rnd);
                }
            }
            let (a, b, exp) = if offset >= 0 {
                (
                    Int::new(sneg, sman.shl(offset as u64)),
                    Int::new(tneg, tman.clone()),
                    texp,
                )
            } else {
                (
                    Int::new(sneg, sman.clone()),
                    Int::new(tneg, tman.shl((-offset) as u64)),
                    sexp,
                )
            };
            let total = a.add(&b);
            return normalize_rnd(total.is_neg(), total.magnitude().clone(), exp, prec, rnd);
        }
        match (s, t) {
            (s, t) if is_special(s) => {
                if s == t || matches!(t, Mpf::Num { .. } | Mpf::Zero) {
                    s.clone()
                } else {
                    Mpf::Nan
                }
            }
            (Mpf::Zero, Mpf::Num { neg, man, exp }) => {
                normalize_rnd(*neg, man.clone(), *exp, prec, rnd)
            }
            (Mpf::Zero, t) => t.clone(),
            (_, t) if is_special(t) => t.clone(),
            (Mpf::Num { neg, man, exp }, _) => normalize_rnd(*neg, man.clone(), *exp, prec, rnd),
            (s, _) => s.clone(),
        }
    }

    fn sub(s: &Mpf, t: &Mpf, prec: u64) -> Mpf {
        add(s, &neg(t), prec)
    }

    /// `mpf_mul(s, t, prec)` (`prec` 0: exact).
    fn mul(s: &Mpf, t: &Mpf, prec: u64) -> Mpf {
        if let (Some((sneg, sman, sexp)), Some((tneg, tman, texp))) = (s.parts(), t.parts()) {
            return normalize(sneg != tneg, sman.mul(tman), sexp + texp, prec);
        }
        if !is_special(s) && !is_special(t) {
            return Mpf::Zero;
        }
        if *s == Mpf::Nan || *t == Mpf::Nan {
            return Mpf::Nan;
        }
        let (s, t) = if is_special(t) { (t, s) } else { (s, t) };
        if *t == Mpf::Zero {
            return Mpf::Nan;
        }
        if sign(s) * sign(t) > 0 {
            Mpf::Inf
        } else {
            Mpf::NegInf
        }
    }

    /// `mpf_div(s, t, prec)`; dividing by zero raises an empty `ZeroDivisionError`.
    fn div(s: &Mpf, t: &Mpf, prec: u64) -> Res<Mpf> {
        let (Some((sneg, sman, sexp)), Some((tneg, tman, texp))) = (s.parts(), t.parts()) else {
            if *s == Mpf::Zero {
                return match t {
                    Mpf::Zero => Err(zero_division()),
                    Mpf::Nan => Ok(Mpf::Nan),
                    _ => Ok(Mpf::Zero),
                };
            }
            if *t == Mpf::Zero {
                return Err(zero_division());
            }
            if is_special(s) && is_special(t) {
                return Ok(Mpf::Nan);
            }
            if *s == Mpf::Nan || *t == Mpf::Nan {
                return Ok(Mpf::Nan);
            }
            if !is_special(t) {
                return Ok(if sign(s) * sign(t) > 0 {
                    Mpf::Inf
                } else {
                    Mpf::NegInf
                });
            }
            return Ok(Mpf::Zero);
        };
        let neg = sneg != tneg;
        if tman.is_one() {
            return Ok(normalize(neg, sman.clone(), sexp - texp, prec));
        }
        let (sbc, tbc) = (sman.bits() as i64, tman.bits() as i64);
        let mut extra = prec as i64 - sbc + tbc + 5;
        if extra < 5 {
            extra = 5;
        }
        let (quot, rem) = sman.shl(extra as u64).divmod(tman);
        if rem.is_zero() {
            Ok(normalize(neg, quot, sexp - texp - extra, prec))
        } else {
            let quot = quot.shl(1).add(&Nat::one());
            Ok(normalize(neg, quot, sexp - texp - extra - 1, prec))
        }
    }

    /// `floor(ln(2) * 2^prec)`, exactly.
    fn ln2_fixed(prec: u64) -> Nat {
        // ln 2 = 2 atanh(1/3) = sum 2 / ((2k+1) 3^(2k+1)); every truncation errs low.
        let mut guard = 64;
        loop {
            let w = prec + guard;
            let mut power = Nat::one().shl(w + 1).divmod_small(3).0;
            let mut total = Nat::zero();
            let mut k = 1u32;
            let mut terms = 0u64;
            while !power.is_zero() {
                total = total.add(&power.divmod_small(k).0);
                power = power.divmod_small(9).0;
                k += 2;
                terms += 1;
            }
            let err = Nat::from_u128(u128::from(3 * terms + 4));
            let low = total.shr(guard);
            if low == total.add(&err).shr(guard) {
                return low;
            }
            guard *= 2;
        }
    }

    /// `floor(pi * 2^prec)`, exactly.
    fn pi_fixed(prec: u64) -> Nat {
        // Machin: pi = 16 atan(1/5) - 4 atan(1/239).
        let atan_inv = |x: u32, w: u64| -> (Int, u64) {
            let mut power = Nat::one().shl(w).divmod_small(x).0;
            let mut total = Int::zero();
            let mut k = 1u32;
            let mut terms = 0u64;
            let mut negative = false;
            while !power.is_zero() {
                let term = Int::new(negative, power.divmod_small(k).0);
                total = total.add(&term);
                power = power.divmod_small(x * x).0;
                k += 2;
                terms += 1;
                negative = !negative;
            }
            (total, 3 * terms + 3)
        };
        let mut guard = 64;
        loop {
            let w = prec + guard;
            let (a, ea) = atan_inv(5, w);
            let (b, eb) = atan_inv(239, w);
            let approx = a.mul(&Int::from_i128(16)).sub(&b.mul(&Int::from_i128(4)));
            let err = Int::from_i128(i128::from(16 * ea + 4 * eb));
            let low = approx.sub(&err).shr_floor(guard);
            let high = approx.add(&err).shr_floor(guard);
            if low == high {
                return low.magnitude().clone();
            }
            guard *= 2;
        }
    }

    /// `mpf_pi(prec)`.
    fn pi(prec: u64) -> Mpf {
        let wp = prec + 20;
        normalize(false, pi_fixed(wp), -(wp as i64), prec)
    }

    /// mpmath's `cache_prec_steps[prec]`.
    fn cache_prec(prec: u64) -> u64 {
        if prec < 2 {
            return 22;
        }
        prec.next_power_of_two().min(LOG_TAYLOR_PREC) + 20
    }

    /// `x ** 0.5` (or another power) for an integer, through floats as Python computes it.
    fn int_float_pow(x: &Nat, y: f64) -> f64 {
        let f = x.to_f64().unwrap_or(f64::INFINITY);
        super::libm_pow(f, y)
    }

    /// mpmath's `isqrt_fast` (pure-Python version): floor square root, approximately for
    /// large inputs, computed exactly as mpmath computes it.
    fn isqrt_fast(x: &Nat) -> Nat {
        if x.bits() <= 800 {
            let mut y = Nat::from_f64_trunc(int_float_pow(x, 0.5));
            for threshold in [100, 200, 400] {
                if x.bits() > threshold {
                    y = y.add(&x.divmod(&y).0).shr(1);
                } else {
                    break;
                }
            }
            return y;
        }
        let guard = 10u64;
        let x = x.shl(2 * guard);
        let mut bc = x.bits();
        bc += bc & 1;
        let hbc = bc / 2;
        let startprec = 50.min(hbc);
        let head = x.shr(bc - 2 * startprec);
        let r0 = 2f64.powi(2 * startprec as i32) * int_float_pow(&head, -0.5);
        let mut r = Int::from_nat(Nat::from_f64_trunc(r0));
        let mut pp = startprec;
        let steps = giant_steps(startprec, hbc);
        let mut p = hbc;
        for step in steps {
            p = step;
            let r2 = r.mul(&r).shr_floor(2 * pp - p);
            let xr2 = Int::from_nat(x.shr(bc - p)).mul(&r2).shr_floor(p);
            r = r.mul(&Int::from_i128(3).shl(p).sub(&xr2)).shr_floor(pp + 1);
            pp = p;
        }
        r.mul(&Int::from_nat(x.shr(hbc)))
            .shr_floor(p + guard)
            .magnitude()
            .clone()
    }

    /// mpmath's `giant_steps(start, target)`.
    fn giant_steps(start: u64, target: u64) -> Vec<u64> {
        let mut steps = vec![target];
        while let Some(&last) = steps.last() {
            if last <= start * 2 {
                break;
            }
            steps.push(last / 2 + 2);
        }
        steps.reverse();
        steps
    }

    /// The series both Taylor routines share: for `v` in fixed point, returns the
    /// `(s0 + s1)` sum of odd powers `v^k / k`, as mpmath accumulates it.
    fn odd_series(v: &Nat, prec: u64) -> Nat {
        let v2 = v.mul(v).shr(prec);
        let v4 = v2.mul(&v2).shr(prec);
        let mut s0 = v.clone();
        let mut s1 = v.divmod_small(3).0;
        let mut v = v.mul(&v4).shr(prec);
        let mut k = 5u32;
        while !v.is_zero() {
            s0 = s0.add(&v.divmod_small(k).0);
            k += 2;
            s1 = s1.add(&v.divmod_small(k).0);
            v = v.mul(&v4).shr(prec);
            k += 2;
        }
        let s1 = s1.mul(&v2).shr(prec);
        s0.add(&s1)
    }

    /// mpmath's `log_taylor(x, prec, r)`.
    fn log_taylor(x: &Nat, prec: u64, r: u32) -> Int {
        let mut x = x.clone();
        for _ in 0..r {
            x = isqrt_fast(&x.shl(prec));
        }
        let one = Nat::one().shl(prec);
        let denominator = x.add(&one);
        // v = ((x - one) << prec) // (x + one), floor division.
        let (negative, v) = if x >= one {
            (false, x.sub(&one).shl(prec).divmod(&denominator).0)
        } else {
            let (q, rem) = one.sub(&x).shl(prec).divmod(&denominator);
            (true, if rem.is_zero() { q } else { q.add(&Nat::one()) })
        };
        let s = odd_series(&v, prec).shl(1 + u64::from(r));
        Int::new(negative, s)
    }

    /// mpmath's `log_taylor_cached(x, prec)` for `x` in [0.5, 1) in fixed point.
    fn log_taylor_cached(x: &Nat, prec: u64) -> Int {
        let n = x.shr(prec - LOG_TAYLOR_SHIFT);
        let cached_prec = cache_prec(prec);
        let dprec = cached_prec - prec;
        let a_cached = n.shl(cached_prec - LOG_TAYLOR_SHIFT);
        let log_a = log_taylor(&a_cached, cached_prec, 8).shr_floor(dprec);
        let a = a_cached.shr(dprec);
        let u = x.sub(&a).shl(prec).divmod(&a).0;
        let v = u.shl(prec).divmod(&Nat::from_u128(2).shl(prec).add(&u)).0;
        let s = odd_series(&v, prec).shl(1);
        log_a.add(&Int::from_nat(s))
    }

    /// Why `mpf_log` did not give a real value.
    enum LogFailure {
        /// A negative argument (mpmath's `ComplexResult`).
        Complex,
        Unsupported(String),
    }

    /// `mpf_log(x, prec)`.
    fn log(x: &Mpf, prec: u64) -> std::result::Result<Mpf, LogFailure> {
        let (man, exp) = match x {
            Mpf::Zero => return Ok(Mpf::NegInf),
            Mpf::Inf => return Ok(Mpf::Inf),
            Mpf::Nan => return Ok(Mpf::Nan),
            Mpf::NegInf | Mpf::Num { neg: true, .. } => return Err(LogFailure::Complex),
            Mpf::Num { man, exp, .. } => (man, *exp),
        };
        let mut wp = prec + 20;
        if man.is_one() {
            if exp == 0 {
                return Ok(Mpf::Zero);
            }
            let m = Int::from_nat(ln2_fixed(wp)).mul(&Int::from_i128(i128::from(exp)));
            return Ok(from_man_exp(&m, -(wp as i64), prec));
        }
        let bc = man.bits() as i64;
        let mag = exp + bc;
        let abs_mag = mag.abs();
        if abs_mag <= 1 {
            let tsign = abs_mag == 0;
            let tman = if tsign {
                Nat::one().shl(bc as u64).sub(man)
            } else {
                man.sub(&Nat::one().shl(bc as u64 - 1))
            };
            let tbc = tman.bits() as i64;
            let cancellation = (bc - tbc) as u64;
            if cancellation > wp {
                return Ok(normalize(tsign, tman, abs_mag - bc, prec));
            }
            wp += cancellation;
        }
        if abs_mag > 10_000 && 64 - abs_mag.leading_zeros() as u64 > wp {
            let m = Int::from_nat(ln2_fixed(wp)).mul(&Int::from_i128(i128::from(exp)));
            return Ok(from_man_exp(&m, -(wp as i64), prec));
        }
        if wp > LOG_TAYLOR_PREC {
            return Err(LogFailure::Unsupported(format!(
                "a working precision of {wp} bits is beyond mpmath's Taylor range, which is \
                 all that is rebuilt here"
            )));
        }
        let shifted = if wp as i64 >= bc {
            man.shl(wp - bc as u64)
        } else {
            man.shr(bc as u64 - wp)
        };
        let mut m = log_taylor_cached(&shifted, wp);
        if mag != 0 {
            m = m.add(&Int::from_nat(ln2_fixed(wp)).mul(&Int::from_i128(i128::from(mag))));
        }
        Ok(from_man_exp(&m, -(wp as i64), prec))
    }

    /// `mpmath.ln(x)` at `prec` bits: real, or complex for a negative argument.
    pub fn ln(x: &Mpf, prec: u64) -> Res<MpNum> {
        match log(x, prec) {
            Ok(value) => Ok(MpNum::Real(value)),
            Err(LogFailure::Unsupported(text)) => Err(Failure::Unsupported(text)),
            Err(LogFailure::Complex) => {
                // mpc_log((x, 0)): log|x| (mpf_log_hypot with a zero imaginary part) and
                // atan2(0, x) = pi.
                let re = match x {
                    Mpf::Num { .. } => match log(&abs(x), prec) {
                        Ok(v) => v,
                        Err(LogFailure::Unsupported(text)) => {
                            return Err(Failure::Unsupported(text));
                        }
                        Err(LogFailure::Complex) => Mpf::Nan,
                    },
                    _ => Mpf::Inf,
                };
                Ok(MpNum::Complex(re, pi(prec)))
            }
        }
    }

    /// `a / b` for mpmath numbers.
    pub fn divide(a: &MpNum, b: &MpNum, prec: u64) -> Res<MpNum> {
        match (a, b) {
            (MpNum::Real(s), MpNum::Real(t)) => Ok(MpNum::Real(div(s, t, prec)?)),
            (MpNum::Complex(re, im), MpNum::Real(p)) => {
                Ok(MpNum::Complex(div(re, p, prec)?, div(im, p, prec)?))
            }
            (MpNum::Real(p), MpNum::Complex(a, b)) => {
                let m = add(&mul(a, a, 0), &mul(b, b, 0), prec + 10);
                let re = div(&mul(a, p, 0), &m, prec)?;
                let im = div(&neg(&mul(b, p, 0)), &m, prec)?;
                Ok(MpNum::Complex(re, im))
            }
            (MpNum::Complex(a, b), MpNum::Complex(c, d)) => {
                let wp = prec + 10;
                let mag = add(&mul(c, c, 0), &mul(d, d, 0), wp);
                let t = add(&mul(a, c, 0), &mul(b, d, 0), wp);
                let u = sub(&mul(b, c, 0), &mul(a, d, 0), wp);
                Ok(MpNum::Complex(div(&t, &mag, prec)?, div(&u, &mag, prec)?))
            }
        }
    }

    /// mpmath's conversion of a Python argument (`mpmathify`) at `prec` bits.
    pub fn convert(x: &Py, prec: u64) -> Res<Mpf> {
        match x {
            Py::Bool(_) | Py::Int(_) => Ok(from_int(&x.as_int().unwrap_or_else(Int::zero), 0)),
            Py::Float(f) => Ok(from_f64(*f)),
            Py::Str(s) => match from_str(s, prec)? {
                Some(value) => Ok(value),
                None if s.to_lowercase().contains('j') => Err(Failure::Unsupported(
                    "a complex number written as a string is not supported".into(),
                )),
                None => Err(cannot_create(x)),
            },
            other => Err(cannot_create(other)),
        }
    }

    fn cannot_create(x: &Py) -> Failure {
        Failure::Raised(format!(
            "cannot create mpf from {}",
            x.repr().unwrap_or_default()
        ))
    }

    /// mpmath's `from_str(x, prec)`: the value, or `None` where it raises `ValueError`.
    fn from_str(text: &str, prec: u64) -> Res<Option<Mpf>> {
        let x = text.to_lowercase();
        let x = x.trim_matches(pyops::is_space);
        match x {
            "inf" | "+inf" => return Ok(Some(Mpf::Inf)),
            "-inf" => return Ok(Some(Mpf::NegInf)),
            "nan" => return Ok(Some(Mpf::Nan)),
            _ => {}
        }
        if x.contains('/') {
            let parts: Vec<&str> = x.split('/').collect();
            let [p, q] = parts[..] else {
                return Ok(None);
            };
            let (Ok(p), Ok(q)) = (
                parse_int(p.trim_end_matches('l')),
                parse_int(q.trim_end_matches('l')),
            ) else {
                return Ok(None);
            };
            return div(&from_int(&p, 0), &from_int(&q, 0), prec).map(Some);
        }
        // str_to_man_exp
        let x = x.trim_end_matches('l');
        if !is_float_literal(x) {
            return Ok(None);
        }
        let (mantissa, mut exp) = match x.split_once('e') {
            None => (x.to_owned(), Int::zero()),
            Some((m, e)) => match parse_int(e) {
                Ok(e) => (m.to_owned(), e),
                Err(_) => return Ok(None),
            },
        };
        let digits = match mantissa.split_once('.') {
            Some((a, b)) if !b.contains('.') => {
                let b = b.trim_end_matches('0');
                exp = exp.sub(&Int::from_i128(b.chars().count() as i128));
                format!("{a}{b}")
            }
            _ => mantissa,
        };
        let Ok(man) = parse_int(&digits) else {
            return Ok(None);
        };
        let exp = match exp.to_i128() {
            Some(e) if e.abs() <= 400 => e,
            _ => {
                return Err(Failure::Unsupported(
                    "a decimal exponent beyond 400 in a string is not supported".into(),
                ));
            }
        };
        let ten = Nat::from_u128(10);
        if exp >= 0 {
            let scaled = man.mul(&Int::from_nat(ten.pow(exp as u64)));
            Ok(Some(from_int(&scaled, prec)))
        } else {
            let den = Int::from_nat(ten.pow((-exp) as u64));
            div(&from_int(&man, 0), &from_int(&den, 0), prec).map(Some)
        }
    }

    /// `repr(result)`: `mpf('...')` or `mpc(real='...', imag='...')`.
    pub fn repr(x: &MpNum, prec: u64) -> std::result::Result<String, String> {
        let digits = repr_dps(prec);
        let text = |v: &Mpf| to_str(v, digits).map_err(|e| format!("logarithm: {e}"));
        Ok(match x {
            MpNum::Real(v) => format!("mpf('{}')", text(v)?),
            MpNum::Complex(re, im) => {
                format!("mpc(real='{}', imag='{}')", text(re)?, text(im)?)
            }
        })
    }

    /// `repr_dps(prec)`: the digits `repr` shows.
    fn repr_dps(prec: u64) -> u64 {
        let dps =
            ((prec as f64 / 3.321_928_094_887_362_6).round_ties_even() as i64 - 1).max(1) as u64;
        if dps == 15 { 17 } else { dps + 3 }
    }

    /// Python's `math.log(10, 2)`.
    fn log2_10() -> f64 {
        std::hint::black_box(10f64).ln() / std::hint::black_box(2f64).ln()
    }

    /// mpmath's `to_digits_exp(s, dps)` for a finite nonzero `s`: sign, digits (truncated) and
    /// the decimal exponent.
    fn to_digits_exp(
        neg: bool,
        man: &Nat,
        exp: i64,
        dps: u64,
    ) -> std::result::Result<(bool, String, i64), String> {
        let bc = man.bits() as i64;
        if (exp + bc).abs() > 3500 {
            return Err("a result beyond 2^3500 in magnitude is not printed here".into());
        }
        let bitprec = (dps as f64 * log2_10()) as i64 + 10;
        let fixprec = (bitprec - exp - bc).max(0);
        let fixdps = (fixprec as f64 / log2_10() + 0.5) as i64;
        let offset = exp + fixprec;
        let sf = if offset >= 0 {
            man.shl(offset as u64)
        } else {
            man.shr((-offset) as u64)
        };
        let sd = sf
            .mul(&Nat::pow_small(10, fixdps as u64))
            .shr(fixprec as u64);
        let digits = sd.to_decimal();
        let exponent = digits.len() as i64 - fixdps - 1;
        Ok((neg, digits, exponent))
    }

    /// mpmath's `to_str(s, dps)`.
    fn to_str(x: &Mpf, dps: u64) -> std::result::Result<String, String> {
        let (neg, man, exp) = match x {
            Mpf::Zero => return Ok("0.0".into()),
            Mpf::Inf => return Ok("+inf".into()),
            Mpf::NegInf => return Ok("-inf".into()),
            Mpf::Nan => return Ok("nan".into()),
            Mpf::Num { neg, man, exp } => (*neg, man, *exp),
        };
        let dps_i = dps as i64;
        let min_fixed = (-(dps_i / 3)).min(-5);
        let max_fixed = dps_i;
        let (neg, digits, mut exponent) = to_digits_exp(neg, man, exp, dps + 3)?;
        let dps_u = dps as usize;
        let mut digits: Vec<u8> = digits.into_bytes();
        if digits.len() > dps_u && digits[dps_u] >= b'5' {
            digits.truncate(dps_u);
            let mut i = dps_u;
            while i > 0 && digits[i - 1] == b'9' {
                i -= 1;
            }
            if i > 0 {
                digits[i - 1] += 1;
                for d in &mut digits[i..] {
                    *d = b'0';
                }
            } else {
                digits = std::iter::once(b'1')
                    .chain(std::iter::repeat_n(b'0', dps_u.saturating_sub(1)))
                    .collect();
                exponent += 1;
            }
        } else {
            digits.truncate(dps_u);
        }
        let mut digits = String::from_utf8(digits).unwrap_or_default();
        let split;
        if min_fixed < exponent && exponent < max_fixed {
            if exponent < 0 {
                digits = format!("{}{digits}", "0".repeat((-exponent) as usize));
                split = 1;
            } else {
                split = exponent as usize + 1;
                if split > dps_u {
                    digits.push_str(&"0".repeat(split - dps_u));
                }
            }
            exponent = 0;
        } else {
            split = 1;
        }
        let split = split.min(digits.len());
        let mut text = format!("{}.{}", &digits[..split], &digits[split..]);
        while text.ends_with('0') {
            text.pop();
        }
        if text.ends_with('.') {
            text.push('0');
        }
        let sign = if neg { "-" } else { "" };
        Ok(if exponent == 0 {
            format!("{sign}{text}")
        } else if exponent > 0 {
            format!("{sign}{text}e+{exponent}")
        } else {
            format!("{sign}{text}e{exponent}")
        })
    }

    #[cfg(test)]
    pub(super) fn ln2_fixed_for_test(prec: u64) -> Nat {
        ln2_fixed(prec)
    }

    #[cfg(test)]
    pub(super) fn pi_fixed_for_test(prec: u64) -> Nat {
        pi_fixed(prec)
    }
}

// ---------------------------------------------------------------------------------------------

/// Python's `decimal` as `MathAPI.square_root` uses it: an exact `Decimal` from an int or a
/// float, its correctly rounded square root at the context precision (half to even, the ideal
/// exponent when exact), and `str`.
mod dec {
    use super::nat::{Int, Nat};

    /// A finite decimal: `(-1)^neg * coeff * 10^exp`.
    pub struct Dec {
        neg: bool,
        coeff: Nat,
        exp: i64,
    }

    impl Dec {
        /// `Decimal(i)`.
        pub fn from_int(i: &Int) -> Dec {
            Dec {
                neg: i.is_neg(),
                coeff: i.magnitude().clone(),
                exp: 0,
            }
        }

        /// `Decimal(x)` for a finite float: its exact value.
        pub fn from_f64(x: f64) -> Dec {
            if x == 0.0 {
                return Dec {
                    neg: x.is_sign_negative(),
                    coeff: Nat::zero(),
                    exp: 0,
                };
            }
            let r = super::nat::Ratio::from_f64(x.abs());
            // num / 2^k with the fraction reduced: num * 5^k / 10^k.
            let k = if r.den.is_one() { 0 } else { r.den.bits() - 1 };
            let tz = r.num.trailing_zeros().min(k);
            let (num, k) = (r.num.shr(tz), k - tz);
            Dec {
                neg: x.is_sign_negative(),
                coeff: num.mul(&Nat::pow_small(5, k)),
                exp: -(k as i64),
            }
        }

        fn digits(&self) -> u64 {
            self.coeff.to_decimal().len() as u64
        }

        /// `self.sqrt()` with the context precision `prec` (CPython's algorithm).
        pub fn sqrt(&self, prec: u64) -> std::result::Result<Dec, String> {
            if self.coeff.is_zero() {
                return Ok(Dec {
                    neg: self.neg,
                    coeff: Nat::zero(),
                    exp: self.exp.div_euclid(2),
                });
            }
            let work_prec = prec + 1;
            let mut e = self.exp.div_euclid(2);
            let len = self.digits();
            let (c, l) = if self.exp.rem_euclid(2) == 1 {
                (self.coeff.mul_small(10), (len >> 1) + 1)
            } else {
                (self.coeff.clone(), (len + 1) >> 1)
            };
            let shift = work_prec as i64 - l as i64;
            let (c, mut exact) = if shift >= 0 {
                (c.mul(&Nat::pow_small(100, shift as u64)), true)
            } else {
                let (q, r) = c.divmod(&Nat::pow_small(100, (-shift) as u64));
                (q, r.is_zero())
            };
            e -= shift;
            let mut n = Nat::pow_small(10, work_prec);
            loop {
                let q = c.divmod(&n).0;
                if n <= q {
                    break;
                }
                n = n.add(&q).shr(1);
            }
            exact = exact && n.mul(&n) == c;
            if exact {
                if shift >= 0 {
                    n = n.divmod(&Nat::pow_small(10, shift as u64)).0;
                } else {
                    n = n.mul(&Nat::pow_small(10, (-shift) as u64));
                }
                e += shift;
            } else if n.divmod_small(5).1 == 0 {
                n = n.add(&Nat::one());
            }
            Dec {
                neg: false,
                coeff: n,
                exp: e,
            }
            .fix(prec)
        }

        /// `_fix`: rounds half to even to `prec` digits (the exponent limits of the default
        /// context are far from anything a square root of a float reaches).
        fn fix(self, prec: u64) -> std::result::Result<Dec, String> {
            let digits = self.coeff.to_decimal();
            let len = digits.len() as i64;
            let exp_min = len + self.exp - prec as i64;
            let e_tiny = -999_999 - prec as i64 + 1;
            let e_top = 999_999 - prec as i64 + 1;
            if exp_min > e_top || exp_min < e_tiny {
                return Err(
                    "square_root: a result outside the decimal context's exponent \
                            range is not supported"
                        .into(),
                );
            }
            if self.exp >= exp_min {
                return Ok(self);
            }
            let keep = (len + self.exp - exp_min).max(0) as usize;
            let (head, tail) = digits.split_at(keep.min(digits.len()));
            let tail_first = tail.as_bytes().first().copied().unwrap_or(b'0');
            let tail_rest_zero = tail.bytes().skip(1).all(|d| d == b'0');
            let last_even = head
                .as_bytes()
                .last()
                .is_none_or(|d| (d - b'0').is_multiple_of(2));
            let up = match tail_first {
                b'5' if tail_rest_zero => !last_even,
                d => d >= b'5',
            };
            let mut coeff = Nat::from_decimal(if head.is_empty() { "0" } else { head });
            let mut exp = exp_min;
            if up {
                coeff = coeff.add(&Nat::one());
                if coeff.to_decimal().len() as u64 > prec {
                    coeff = coeff.divmod_small(10).0;
                    exp += 1;
                }
            }
            Ok(Dec {
                neg: self.neg,
                coeff,
                exp,
            })
        }

        /// `str(self)`: scientific notation as the decimal specification writes it.
        pub fn to_sci_string(&self) -> String {
            let int = self.coeff.to_decimal();
            let len = int.len() as i64;
            let leftdigits = self.exp + len;
            let dotplace = if self.exp <= 0 && leftdigits > -6 {
                leftdigits
            } else {
                1
            };
            let (intpart, fracpart) = if dotplace <= 0 {
                (
                    "0".to_owned(),
                    format!(".{}{int}", "0".repeat((-dotplace) as usize)),
                )
            } else if dotplace >= len {
                (
                    format!("{int}{}", "0".repeat((dotplace - len) as usize)),
                    String::new(),
                )
            } else {
                let (a, b) = int.split_at(dotplace as usize);
                (a.to_owned(), format!(".{b}"))
            };
            let exp = if leftdigits == dotplace {
                String::new()
            } else {
                format!("E{:+}", leftdigits - dotplace)
            };
            let sign = if self.neg { "-" } else { "" };
            format!("{sign}{intpart}{fracpart}{exp}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::pyops::harness;
    use super::*;

    fn call(method: &str, args: Value) -> String {
        harness::call(&mut MathApi, method, args)
    }

    // Each expected text is what BFCL's MathAPI returned through the harness's formatting
    // (Python 3.11, mpmath 1.3.0) for the same arguments.
    #[test]
    fn logarithms_print_as_mpmath_prints_them() {
        let cases = [
            (
                serde_json::json!({"value": 2, "base": 10, "precision": 30}),
                "{'result': mpf('0.301029995663981195213738894724506')}",
            ),
            (
                serde_json::json!({"value": -8, "base": 2, "precision": 10}),
                "{'result': mpc(real='3.000000000029', imag='4.532360141806')}",
            ),
            (
                serde_json::json!({"value": 8, "base": -2, "precision": 10}),
                "{'result': mpc(real='0.1392609706363', imag='-0.6311808726314')}",
            ),
            (
                serde_json::json!({"value": -8, "base": -2, "precision": 10}),
                "{'result': mpc(real='1.092840647092', imag='-0.4207872484185')}",
            ),
            (
                serde_json::json!({"value": 0, "base": -1, "precision": 5}),
                "{'result': mpc(real='nan', imag='+inf')}",
            ),
            (
                serde_json::json!({"value": 0, "base": 0, "precision": 5}),
                "{'result': mpf('nan')}",
            ),
            (
                serde_json::json!({"value": 1.0000001, "base": 10, "precision": 20}),
                "{'result': mpf('4.3429446044209944784076e-8')}",
            ),
            (
                serde_json::json!({"value": 1e-300, "base": 10, "precision": 20}),
                "{'result': mpf('-299.99999999999999998916')}",
            ),
            (
                serde_json::json!({"value": "3/4", "base": 2, "precision": 12}),
                "{'result': mpf('-0.415037499278867')}",
            ),
            (
                serde_json::json!({"value": " 1_000 ", "base": 10, "precision": 6}),
                "{'result': mpf('3.0')}",
            ),
            (
                serde_json::json!({"value": 100, "base": 10, "precision": "5"}),
                "{'result': mpf('2.0')}",
            ),
            (
                serde_json::json!({"value": 10, "base": 1, "precision": 5}),
                r#"{"error": ""}"#,
            ),
            (
                serde_json::json!({"value": "abc", "base": 10, "precision": 5}),
                r#"{"error": "cannot create mpf from 'abc'"}"#,
            ),
            (
                serde_json::json!({"value": [1], "base": 10, "precision": 5}),
                r#"{"error": "cannot create mpf from [1]"}"#,
            ),
            (
                serde_json::json!({"value": 100, "base": 10, "precision": null}),
                r#"{"error": "int() argument must be a string, a bytes-like object or a real number, not 'NoneType'"}"#,
            ),
        ];
        for (args, want) in cases {
            assert_eq!(call("logarithm", args.clone()), want, "{args}");
        }
        let long = call(
            "logarithm",
            serde_json::json!({"value": 2.5, "base": 10, "precision": 700}),
        );
        assert!(long.starts_with("{'result': mpf('0.39794000867203760957252221055101394646362023707578291737914507774578362145115098102614549576362765591863104561713800924181046423773295298800061533259060884"), "{long}");
    }

    // mpmath's ln2_fixed(100), pi_fixed(100), and the last 12 digits of ln2_fixed(2000) and
    // pi_fixed(2000).
    #[test]
    fn constants_are_exact_floors() {
        assert_eq!(
            mp::ln2_fixed_for_test(100).to_decimal(),
            "878668439483319573618263538048"
        );
        assert_eq!(
            mp::pi_fixed_for_test(100).to_decimal(),
            "3982441812995697363688351113952"
        );
        let last12 = |n: Nat| n.divmod(&Nat::pow_small(10, 12)).1.to_decimal();
        assert_eq!(last12(mp::ln2_fixed_for_test(2000)), "544489271120");
        assert_eq!(last12(mp::pi_fixed_for_test(2000)), "301418070356");
    }

    // Python 3.11's decimal module (through MathAPI.square_root).
    #[test]
    fn square_roots_print_as_decimal_prints_them() {
        let cases = [
            (
                serde_json::json!({"number": 2, "precision": 10}),
                "{'result': Decimal('1.414213562')}",
            ),
            (
                serde_json::json!({"number": 1e10, "precision": 5}),
                "{'result': Decimal('1.0000E+5')}",
            ),
            (
                serde_json::json!({"number": 100, "precision": 1}),
                "{'result': Decimal('1E+1')}",
            ),
            (
                serde_json::json!({"number": -0.0, "precision": 5}),
                "{'result': Decimal('-0')}",
            ),
            (
                serde_json::json!({"number": 1e-7, "precision": 3}),
                "{'result': Decimal('0.000316')}",
            ),
            (
                serde_json::json!({"number": 1e-320, "precision": 5}),
                "{'result': Decimal('9.9999E-161')}",
            ),
            (
                serde_json::json!({"number": 0.1, "precision": 30}),
                "{'result': Decimal('0.316227766016837941976973025885')}",
            ),
            (
                serde_json::json!({"number": 2, "precision": true}),
                "{'result': Decimal('1')}",
            ),
            (
                serde_json::json!({"number": -1, "precision": 5}),
                r#"{"error": "Cannot calculate square root of a negative number"}"#,
            ),
            (
                serde_json::json!({"number": "4", "precision": 5}),
                r#"{"error": "Input must be a number or computation resulted in an invalid operation"}"#,
            ),
            (
                serde_json::json!({"number": 2, "precision": 2.5}),
                r#"{"error": "Input must be a number or computation resulted in an invalid operation"}"#,
            ),
            (
                serde_json::json!({"number": 2, "precision": 0}),
                "Error during execution: valid range for prec is [1, MAX_PREC]",
            ),
            (
                serde_json::json!({"number": 2, "precision": 9223372036854775808u64}),
                "Error during execution: Python int too large to convert to C ssize_t",
            ),
        ];
        for (args, want) in cases {
            assert_eq!(call("square_root", args.clone()), want, "{args}");
        }
    }

    // Python 3.11's int, float and complex arithmetic (through MathAPI).
    #[test]
    fn arithmetic_follows_python() {
        let cases = [
            (
                "add",
                serde_json::json!({"a": 9223372036854775808u64, "b": 9223372036854775808u64}),
                r#"{"result": 18446744073709551616}"#,
            ),
            (
                "add",
                serde_json::json!({"a": [1], "b": [2]}),
                r#"{"result": [1, 2]}"#,
            ),
            (
                "add",
                serde_json::json!({"a": 1e308, "b": 1e308}),
                r#"{"result": Infinity}"#,
            ),
            (
                "add",
                serde_json::json!({"a": "a", "b": 1}),
                r#"{"error": "Both inputs must be numbers"}"#,
            ),
            (
                "multiply",
                serde_json::json!({"a": 18446744073709551615u64, "b": 18446744073709551615u64}),
                r#"{"result": 340282366920938463426481119284349108225}"#,
            ),
            (
                "divide",
                serde_json::json!({"a": 18446744073709551615u64, "b": 3}),
                r#"{"result": 6.148914691236517e+18}"#,
            ),
            (
                "divide",
                serde_json::json!({"a": [1], "b": 0}),
                r#"{"error": "Cannot divide by zero"}"#,
            ),
            (
                "power",
                serde_json::json!({"base": -8, "exponent": 0.3333333333333333}),
                "{'result': (1.0000000000000002+1.7320508075688772j)}",
            ),
            (
                "power",
                serde_json::json!({"base": -1, "exponent": 0.5}),
                "{'result': (6.123233995736766e-17+1j)}",
            ),
            (
                "power",
                serde_json::json!({"base": 2, "exponent": 20000}),
                "Error during execution: Exceeds the limit (4300 digits) for integer string conversion; use sys.set_int_max_str_digits() to increase the limit",
            ),
            (
                "power",
                serde_json::json!({"base": 0, "exponent": -1}),
                "Error during execution: 0.0 cannot be raised to a negative power",
            ),
            (
                "power",
                serde_json::json!({"base": 10.0, "exponent": 400}),
                "Error during execution: (34, 'Numerical result out of range')",
            ),
            (
                "power",
                serde_json::json!({"base": -2, "exponent": -3}),
                r#"{"result": -0.125}"#,
            ),
            (
                "mean",
                serde_json::json!({"numbers": [9007199254740993u64, 1]}),
                r#"{"result": 4503599627370497.0}"#,
            ),
            (
                "mean",
                serde_json::json!({"numbers": [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]}),
                r#"{"result": 0.09999999999999999}"#,
            ),
            (
                "standard_deviation",
                serde_json::json!({"numbers": [1e200, -1e200]}),
                "Error during execution: (34, 'Numerical result out of range')",
            ),
            (
                "max_value",
                serde_json::json!({"numbers": [[1], [1, "a"]]}),
                r#"{"result": [1, "a"]}"#,
            ),
            (
                "max_value",
                serde_json::json!({"numbers": [true, 1]}),
                r#"{"result": true}"#,
            ),
            (
                "min_value",
                serde_json::json!({"numbers": "bca"}),
                r#"{"result": "a"}"#,
            ),
            (
                "min_value",
                serde_json::json!({"numbers": [null, null]}),
                r#"{"error": "All elements in the list must be numbers"}"#,
            ),
            (
                "sum_values",
                serde_json::json!({"numbers": [9223372036854775808u64, 0.5]}),
                r#"{"result": 9.223372036854776e+18}"#,
            ),
            (
                "si_unit_conversion",
                serde_json::json!({"value": 5, "unit_in": ["km"], "unit_out": "m"}),
                "Error during execution: unhashable type: 'list'",
            ),
            (
                "imperial_si_conversion",
                serde_json::json!({"value": 5, "unit_in": "kg", "unit_out": ["lb"]}),
                r#"{"error": "Conversion from 'kg' to '['lb']' is not supported"}"#,
            ),
            (
                "imperial_si_conversion",
                serde_json::json!({"value": 5, "unit_in": "fahrenheit", "unit_out": "celsius"}),
                r#"{"result": -15.0}"#,
            ),
        ];
        for (method, args, want) in cases {
            assert_eq!(call(method, args.clone()), want, "{method} {args}");
        }
    }

    // Python 3.11's round().
    #[test]
    fn rounding_follows_python() {
        let cases = [
            (serde_json::json!({"number": 2.5}), r#"{"result": 2.0}"#),
            (
                serde_json::json!({"number": 2.675, "decimal_places": 2}),
                r#"{"result": 2.67}"#,
            ),
            (
                serde_json::json!({"number": 2.5, "decimal_places": null}),
                r#"{"result": 2}"#,
            ),
            (
                serde_json::json!({"number": 1e300, "decimal_places": null}),
                r#"{"result": 1000000000000000052504760255204420248704468581108159154915854115511802457988908195786371375080447864043704443832883878176942523235360430575644792184786706982848387200926575803737830233794788090059368953234970799945081119038967640880074652742780142494579258788820056842838115669472196386865459400540160}"#,
            ),
            (
                serde_json::json!({"number": 12350, "decimal_places": -2}),
                r#"{"result": 12400}"#,
            ),
            (
                serde_json::json!({"number": -12250, "decimal_places": -2}),
                r#"{"result": -12200}"#,
            ),
            (
                serde_json::json!({"number": 1234.5678, "decimal_places": -2}),
                r#"{"result": 1200.0}"#,
            ),
            (
                serde_json::json!({"number": -123.456, "decimal_places": -400}),
                r#"{"result": -0.0}"#,
            ),
            (
                serde_json::json!({"number": 1.5e308, "decimal_places": -308}),
                "Error during execution: rounded value too large to represent",
            ),
            (
                serde_json::json!({"number": 2.5, "decimal_places": 1.0}),
                r#"{"error": "First input must be a number, second input must be an integer"}"#,
            ),
            (
                serde_json::json!({"number": true, "decimal_places": 0}),
                r#"{"result": 1}"#,
            ),
        ];
        for (args, want) in cases {
            assert_eq!(call("round_number", args.clone()), want, "{args}");
        }
    }
}
