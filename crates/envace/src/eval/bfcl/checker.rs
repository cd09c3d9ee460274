//! BFCL's AST checker: whether a model's decoded function calls match a task's possible
//! answers — function names, required and optional parameters, the declared type of each
//! argument (with Python's int-for-float allowance and variable names accepted where the answer
//! is one), standardised strings, lists, dicts and lists of dicts, and order-free matching of
//! parallel calls — with BFCL's error types and messages, so a verdict reads like the
//! leaderboard's.
//!
//! Departures from BFCL's checker, each because BFCL's own ground truth would otherwise fail:
//! a nested element type `any` is not type-checked (BFCL checks each element against `str`,
//! which fails lists such as `["userID", 42, true]`), and Java / JavaScript collection elements
//! lose their quotes (see `literals`). A function description or answer that BFCL would crash
//! on is a failed verdict naming it.

use serde_json::{Map, Value};

use super::literals::{Unsupported, java_value, js_value};
use super::pyvalue::{PyType, py_in, py_repr, py_type, standardize};

/// The language a category's arguments are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Python,
    Java,
    JavaScript,
}

/// How calls are matched: one call, one call among several functions, or several calls in any
/// order (BFCL picks this from the category's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Simple,
    Multiple,
    Parallel,
}

impl Shape {
    /// The shape of category `name`, as BFCL reads it from the name.
    pub fn of(name: &str) -> Shape {
        if name.contains("parallel") {
            Shape::Parallel
        } else if name.contains("multiple") {
            Shape::Multiple
        } else {
            Shape::Simple
        }
    }
}

/// How a model's function names relate to the documented ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NameStyle {
    /// As documented (`math.factorial`).
    #[default]
    AsDocumented,
    /// Dots written as underscores (`math_factorial`), for tool-calling APIs whose names
    /// cannot contain dots.
    DotsAsUnderscores,
}

/// One verdict: valid, or the error type and messages saying why not.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub valid: bool,
    pub error_type: String,
    pub errors: Vec<String>,
    /// The argument was a variable name rather than a literal (type checking only).
    is_variable: bool,
}

impl Verdict {
    pub fn ok() -> Verdict {
        Verdict {
            valid: true,
            error_type: String::new(),
            errors: Vec::new(),
            is_variable: false,
        }
    }

    pub fn fail(error_type: &str, error: impl Into<String>) -> Verdict {
        Verdict {
            valid: false,
            error_type: error_type.to_owned(),
            errors: vec![error.into()],
            is_variable: false,
        }
    }

    fn unclear(error_type: &str) -> Verdict {
        Verdict {
            valid: false,
            error_type: error_type.to_owned(),
            errors: Vec::new(),
            is_variable: false,
        }
    }

    /// The reason in one line: `error_type: first message` (empty when valid).
    pub fn reason(&self) -> String {
        if self.valid {
            return String::new();
        }
        match self.errors.first() {
            Some(first) => format!("{}: {first}", self.error_type),
            None => self.error_type.clone(),
        }
    }
}

/// Checks decoded `output` calls (`[{name: {param: value}}]`) against `answers` (the task's
/// ground truth, `[{name: {param: [acceptable values]}}]`) for a task offering `functions`.
pub fn check(
    functions: &[Value],
    output: &[Value],
    answers: &[Value],
    language: Language,
    shape: Shape,
    names: NameStyle,
) -> Verdict {
    let checker = Checker { language, names };
    match shape {
        Shape::Parallel => checker.parallel(functions, output, answers),
        Shape::Multiple => {
            if output.len() != answers.len() {
                return Verdict::fail(
                    "multiple_function_checker:wrong_count",
                    "Wrong number of functions.",
                );
            }
            let Some(answer) = answers.first() else {
                return Verdict::fail("checker:no_answer", "the task has no expected call");
            };
            match checker.description_for(functions, answer) {
                Ok(doc) => checker.simple(doc, &output[0], answer),
                Err(v) => v,
            }
        }
        Shape::Simple => {
            if output.len() != 1 {
                return Verdict::fail(
                    "simple_function_checker:wrong_count",
                    "Wrong number of functions.",
                );
            }
            match (functions.first(), answers.first()) {
                (Some(doc), Some(answer)) => checker.simple(doc, &output[0], answer),
                _ => Verdict::fail(
                    "checker:no_answer",
                    "the task has no function or no expected call",
                ),
            }
        }
    }
}

/// The only `(key, value)` of a one-key object.
fn single(value: &Value) -> Option<(&String, &Value)> {
    let map = value.as_object()?;
    if map.len() == 1 {
        map.iter().next()
    } else {
        None
    }
}

fn is_optional_marker(value: &Value) -> bool {
    value.as_str() == Some("")
}

/// A list of acceptable values, as the answer file holds them; a bare value is a list of one
/// (BFCL's checker would read a bare string as its characters, and so fails its own ground truth
/// for simple_java_64).
fn alternatives(value: &Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items.clone(),
        other => vec![other.clone()],
    }
}

struct Checker {
    language: Language,
    names: NameStyle,
}

impl Checker {
    fn description_for<'a>(
        &self,
        functions: &'a [Value],
        answer: &Value,
    ) -> Result<&'a Value, Verdict> {
        let Some((name, _)) = single(answer) else {
            return Err(Verdict::fail(
                "checker:bad_answer",
                format!("an expected call is not {{name: params}}: {answer}"),
            ));
        };
        functions
            .iter()
            .find(|f| f.get("name").and_then(Value::as_str) == Some(name))
            .ok_or_else(|| {
                Verdict::fail(
                    "checker:missing_function_doc",
                    format!("the expected function {name:?} is not among the task's functions"),
                )
            })
    }

    fn parallel(&self, functions: &[Value], output: &[Value], answers: &[Value]) -> Verdict {
        if output.len() != answers.len() {
            return Verdict::fail(
                "parallel_function_checker_no_order:wrong_count",
                "Wrong number of functions.",
            );
        }
        let mut matched: Vec<usize> = Vec::new();
        for (i, answer) in answers.iter().enumerate() {
            let doc = match self.description_for(functions, answer) {
                Ok(doc) => doc,
                Err(v) => return v,
            };
            let mut errors = Vec::new();
            let mut found = false;
            for (index, call) in output.iter().enumerate() {
                if matched.contains(&index) {
                    continue;
                }
                let verdict = self.simple(doc, call, answer);
                if verdict.valid {
                    matched.push(index);
                    found = true;
                    break;
                }
                errors.push(format!("Model Result Index {index}: {}", verdict.reason()));
            }
            if !found {
                let considered: Vec<String> = (0..output.len())
                    .filter(|k| !matched.contains(k))
                    .map(|k| k.to_string())
                    .collect();
                let mut all = vec![format!(
                    "Could not find a matching function among index [{}] of model output for index {i} of possible answers.",
                    considered.join(", ")
                )];
                all.extend(errors);
                return Verdict {
                    valid: false,
                    error_type: "parallel_function_checker_no_order:cannot_find_match".to_owned(),
                    errors: all,
                    is_variable: false,
                };
            }
        }
        Verdict::ok()
    }

    /// BFCL's type of a declared parameter type in this language.
    fn expected_type(&self, declared: &str) -> Option<PyType> {
        Some(match self.language {
            Language::Python => match declared {
                "string" | "any" => PyType::Str,
                "integer" => PyType::Int,
                "float" => PyType::Float,
                "boolean" => PyType::Bool,
                "array" | "tuple" => PyType::List,
                "dict" => PyType::Dict,
                _ => return None,
            },
            Language::Java => match declared {
                "byte" | "short" | "integer" | "long" => PyType::Int,
                "float" | "double" => PyType::Float,
                "boolean" => PyType::Bool,
                "char" | "String" | "any" => PyType::Str,
                "Array" | "ArrayList" => PyType::List,
                "HashMap" => PyType::Dict,
                _ => return None,
            },
            Language::JavaScript => match declared {
                "String" | "any" => PyType::Str,
                "integer" | "Bigint" => PyType::Int,
                "float" => PyType::Float,
                "Boolean" => PyType::Bool,
                "dict" => PyType::Dict,
                "array" => PyType::List,
                _ => return None,
            },
        })
    }

    /// Whether a declared type has its elements type-checked.
    fn is_nested(&self, declared: &str) -> bool {
        match self.language {
            Language::Python => matches!(declared, "array" | "tuple"),
            Language::Java => matches!(declared, "Array" | "ArrayList"),
            Language::JavaScript => declared == "array",
        }
    }

    fn simple(&self, doc: &Value, call: &Value, answer: &Value) -> Verdict {
        let Some((_, possible)) = single(answer) else {
            return Verdict::fail(
                "checker:bad_answer",
                format!("an expected call is not {{name: params}}: {answer}"),
            );
        };
        let Some(possible) = possible.as_object() else {
            return Verdict::fail(
                "checker:bad_answer",
                format!("the expected parameters are not an object: {possible}"),
            );
        };
        let Some(documented) = doc.get("name").and_then(Value::as_str) else {
            return Verdict::fail(
                "checker:bad_function_doc",
                "a function description has no name",
            );
        };
        let name = match self.names {
            NameStyle::AsDocumented => documented.to_owned(),
            NameStyle::DotsAsUnderscores => documented.replace('.', "_"),
        };
        let empty = Map::new();
        let details = doc
            .pointer("/parameters/properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let required: Vec<&str> = doc
            .pointer("/parameters/required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();

        let Some(params) = call.as_object().and_then(|c| c.get(&name)) else {
            return Verdict::fail(
                "simple_function_checker:wrong_func_name",
                format!(
                    "Function name {} not found in model output.",
                    py_repr(&Value::String(name))
                ),
            );
        };
        let Some(params) = params.as_object() else {
            return Verdict::fail(
                "simple_function_checker:malformed_call",
                format!("the arguments of {name:?} are not an object: {params}"),
            );
        };
        for param in &required {
            if !params.contains_key(*param) {
                return Verdict::fail(
                    "simple_function_checker:missing_required",
                    format!(
                        "Missing required parameter: {}.",
                        py_repr(&Value::String((*param).to_owned()))
                    ),
                );
            }
        }
        for (param, value) in params {
            let (Some(detail), Some(accepted)) = (details.get(param), possible.get(param)) else {
                return Verdict::fail(
                    "simple_function_checker:unexpected_param",
                    format!(
                        "Unexpected parameter: {}.",
                        py_repr(&Value::String(param.clone()))
                    ),
                );
            };
            let accepted = alternatives(accepted);
            let verdict = self.argument(param, value, detail, &accepted);
            if !verdict.valid {
                return verdict;
            }
        }
        for (param, accepted) in possible {
            if !params.contains_key(param) && !alternatives(accepted).iter().any(is_optional_marker)
            {
                return Verdict::fail(
                    "simple_function_checker:missing_optional",
                    format!(
                        "Optional parameter {} not provided and not marked as optional.",
                        py_repr(&Value::String(param.clone()))
                    ),
                );
            }
        }
        Verdict::ok()
    }

    /// One argument against its acceptable values.
    fn argument(&self, param: &str, value: &Value, detail: &Value, accepted: &[Value]) -> Verdict {
        let Some(declared) = detail.get("type").and_then(Value::as_str) else {
            return Verdict::fail(
                "checker:bad_function_doc",
                format!("parameter {param:?} has no type"),
            );
        };
        let Some(expected) = self.expected_type(declared) else {
            return Verdict::fail(
                "checker:unsupported_type",
                format!(
                    "parameter {param:?} has type {declared:?}, which BFCL's checker does not read"
                ),
            );
        };
        let item_type = detail.pointer("/items/type").and_then(Value::as_str);
        let nested_declared = if self.is_nested(declared) {
            item_type
        } else {
            None
        };
        // Elements of type `any` are not type-checked (see the module's note).
        let nested = nested_declared
            .filter(|t| *t != "any")
            .and_then(|t| self.expected_type(t));

        let mut value = value.clone();
        if self.language != Language::Python {
            let Value::String(text) = &value else {
                let (tag, lang) = match self.language {
                    Language::Java => ("type_error:java", "Java"),
                    _ => ("type_error:js", "JavaScript"),
                };
                return Verdict::fail(
                    tag,
                    format!(
                        "Incorrect type for parameter {}. Expected type String (a {lang} literal), got {}. Parameter value: {}.",
                        py_repr(&Value::String(param.to_owned())),
                        py_type(&value).name(),
                        py_repr(&value)
                    ),
                );
            };
            let read = match self.language {
                Language::Java => java_value(text, declared, nested_declared),
                _ => js_value(text, declared, nested_declared),
            };
            value = match read {
                Ok(v) => v,
                Err(Unsupported(why)) => return Verdict::fail("checker:unsupported_type", why),
            };
        }
        if self.language == Language::Python
            && declared == "float"
            && py_type(&value) == PyType::Int
        {
            value = value
                .as_f64()
                .and_then(serde_json::Number::from_f64)
                .map_or(value, Value::Number);
        }

        let typed = type_check(param, &value, accepted, declared, expected, nested);
        if !typed.valid {
            return typed;
        }
        if !typed.is_variable {
            match value {
                Value::Object(ref map) if expected == PyType::Dict => {
                    return dict_check(map, accepted);
                }
                Value::Array(ref items)
                    if expected == PyType::List && nested == Some(PyType::Dict) =>
                {
                    return list_dict_check(items, accepted);
                }
                Value::String(ref text) if expected == PyType::Str => {
                    return string_check(param, text, accepted);
                }
                Value::Array(ref items) if expected == PyType::List => {
                    return list_check(param, items, accepted);
                }
                _ => {}
            }
        }
        if !py_in(&value, accepted) {
            return Verdict::fail(
                "value_error:others",
                format!(
                    "Invalid value for parameter {}: {}. Expected one of {}.",
                    py_repr(&Value::String(param.to_owned())),
                    py_repr(&value),
                    py_repr(&Value::Array(accepted.to_vec()))
                ),
            );
        }
        Verdict::ok()
    }
}

/// BFCL's type check: the value has the declared type (elements too, one level deep), or the
/// type of the acceptable values (a variable name where the answer is one).
fn type_check(
    param: &str,
    value: &Value,
    accepted: &[Value],
    declared: &str,
    expected: PyType,
    nested: Option<PyType>,
) -> Verdict {
    let answer_type = accepted
        .iter()
        .find(|a| !is_optional_marker(a))
        .map(py_type);
    let is_variable = answer_type.is_some_and(|t| t != expected);
    let mut result = Verdict::ok();
    if py_type(value) == expected {
        let Some(inner) = nested else {
            result.is_variable = is_variable;
            return result;
        };
        let elements = value.as_array().map(Vec::as_slice).unwrap_or_default();
        for candidate in accepted {
            let fits = match candidate {
                Value::Array(candidate_items) => elements.iter().all(|element| {
                    type_check(param, element, candidate_items, inner.name(), inner, None).valid
                }),
                _ => true,
            };
            if fits {
                result.is_variable = is_variable;
                return result;
            }
        }
        result = Verdict::fail(
            "type_error:nested",
            format!(
                "Nested type checking failed for parameter {}. Expected outer type {declared} with inner type {}. Parameter value: {}.",
                py_repr(&Value::String(param.to_owned())),
                inner.name(),
                py_repr(value)
            ),
        );
    }
    if answer_type == Some(py_type(value)) {
        result.is_variable = true;
        return result;
    }
    result.valid = false;
    result.errors.push(format!(
        "Incorrect type for parameter {}. Expected type {declared}, got {}. Parameter value: {}.",
        py_repr(&Value::String(param.to_owned())),
        py_type(value).name(),
        py_repr(value)
    ));
    result.error_type = "type_error:simple".to_owned();
    result
}

fn standardized(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(standardize(s)),
        other => other.clone(),
    }
}

fn string_check(param: &str, text: &str, accepted: &[Value]) -> Verdict {
    let wanted: Vec<Value> = accepted
        .iter()
        .filter(|a| a.is_string())
        .map(standardized)
        .collect();
    if py_in(&Value::String(standardize(text)), &wanted) {
        return Verdict::ok();
    }
    Verdict::fail(
        "value_error:string",
        format!(
            "Invalid value for parameter {}: {}. Expected one of {}. Case insensitive.",
            py_repr(&Value::String(param.to_owned())),
            py_repr(&Value::String(text.to_owned())),
            py_repr(&Value::Array(accepted.to_vec()))
        ),
    )
}

fn list_check(param: &str, items: &[Value], accepted: &[Value]) -> Verdict {
    let given = Value::Array(items.iter().map(standardized).collect());
    let wanted: Vec<Value> = accepted
        .iter()
        .filter_map(|candidate| match candidate {
            Value::Array(list) => Some(Value::Array(list.iter().map(standardized).collect())),
            // The optional marker "" reads as an empty list, as in BFCL.
            Value::String(s) if s.is_empty() => Some(Value::Array(Vec::new())),
            _ => None,
        })
        .collect();
    if py_in(&given, &wanted) {
        return Verdict::ok();
    }
    Verdict::fail(
        "value_error:list/tuple",
        format!(
            "Invalid value for parameter {}: {}. Expected one of {}.",
            py_repr(&Value::String(param.to_owned())),
            py_repr(&Value::Array(items.to_vec())),
            py_repr(&Value::Array(accepted.to_vec()))
        ),
    )
}

fn dict_check(given: &Map<String, Value>, accepted: &[Value]) -> Verdict {
    let mut result = Verdict::unclear("dict_checker:unclear");
    for candidate in accepted {
        if is_optional_marker(candidate) {
            continue;
        }
        result = Verdict::unclear("dict_checker:unclear");
        let Some(candidate) = candidate.as_object() else {
            continue;
        };
        let mut fits = true;
        for (key, value) in given {
            let Some(options) = candidate.get(key) else {
                result
                    .errors
                    .push(format!("Unexpected dict key parameter: '{key}'."));
                result.error_type = "value_error:dict_key".to_owned();
                fits = false;
                break;
            };
            let options: Vec<Value> = alternatives(options).iter().map(standardized).collect();
            if !py_in(&standardized(value), &options) {
                result.errors.push(format!(
                    "Invalid value for parameter {}: {}. Expected one of {}.",
                    py_repr(&Value::String(key.clone())),
                    py_repr(value),
                    py_repr(&Value::Array(options))
                ));
                result.error_type = "value_error:dict_value".to_owned();
                fits = false;
                break;
            }
        }
        for (key, options) in candidate {
            if !given.contains_key(key) && !alternatives(options).iter().any(is_optional_marker) {
                result
                    .errors
                    .push(format!("Missing dict key parameter: '{key}'."));
                result.error_type = "value_error:dict_key".to_owned();
                fits = false;
                break;
            }
        }
        if fits {
            return Verdict::ok();
        }
    }
    result
}

fn list_dict_check(given: &[Value], accepted: &[Value]) -> Verdict {
    let mut result = Verdict::unclear("list_dict_checker:unclear");
    for candidate in accepted {
        let candidate: &[Value] = match candidate {
            Value::Array(list) => list,
            Value::String(s) if s.is_empty() => &[],
            _ => continue,
        };
        if given.len() != candidate.len() {
            result = Verdict::fail(
                "value_error:list_dict_count",
                "Wrong number of dictionaries in the list.",
            );
            continue;
        }
        let mut fits = true;
        for (item, wanted) in given.iter().zip(candidate) {
            result = match item.as_object() {
                Some(map) => dict_check(map, std::slice::from_ref(wanted)),
                None => Verdict::fail(
                    "value_error:list_dict",
                    format!("a list element is not a dict: {}", py_repr(item)),
                ),
            };
            if !result.valid {
                fits = false;
                break;
            }
        }
        if fits {
            return Verdict::ok();
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({"name": "geo.distance", "parameters": {"type": "dict", "properties": {
            "city": {"type": "string"},
            "km": {"type": "float"},
            "n": {"type": "integer"},
            "stops": {"type": "array", "items": {"type": "string"}},
            "opts": {"type": "dict"},
            "legs": {"type": "array", "items": {"type": "dict"}},
            "fast": {"type": "boolean"}
        }, "required": ["city", "km"]}})
    }

    fn answer() -> Value {
        json!({"geo.distance": {
            "city": ["New York", "NYC"], "km": [2.5], "n": [3, ""], "stops": [["Boston", "Albany"]],
            "opts": [{"unit": ["km", ""], "mode": ["car"]}], "legs": [[{"to": ["A"]}, {"to": ["B"]}], ""],
            "fast": [true]
        }})
    }

    fn run(call: Value) -> Verdict {
        check(
            &[doc()],
            &[call],
            &[answer()],
            Language::Python,
            Shape::Simple,
            NameStyle::AsDocumented,
        )
    }

    fn good() -> Value {
        json!({"geo.distance": {"city": "new-york", "km": 2.5, "n": 3, "stops": ["boston", "Albany"],
            "opts": {"mode": "Car"}, "legs": [{"to": "A"}, {"to": "b"}], "fast": true}})
    }

    fn with(key: &str, value: Option<Value>) -> Value {
        let mut call = good();
        let args = call["geo.distance"].as_object_mut().unwrap();
        match value {
            Some(v) => {
                args.insert(key.to_owned(), v);
            }
            None => {
                args.remove(key);
            }
        }
        call
    }

    #[test]
    fn a_matching_call_is_valid_and_each_perturbation_fails_with_its_reason() {
        assert!(run(good()).valid, "{:?}", run(good()));
        assert!(run(with("n", None)).valid, "n is optional");
        assert!(!run(with("km", Some(json!(2)))).valid, "2 is not 2.5");
        let cases = [
            (with("km", None), "simple_function_checker:missing_required"),
            (
                with("extra", Some(json!(1))),
                "simple_function_checker:unexpected_param",
            ),
            (
                with("fast", None),
                "simple_function_checker:missing_optional",
            ),
            (with("n", Some(json!("three"))), "type_error:simple"),
            (with("n", Some(json!(3.0))), "type_error:simple"),
            (with("fast", Some(json!(1))), "type_error:simple"),
            (with("city", Some(json!("Boston"))), "value_error:string"),
            (with("n", Some(json!(4))), "value_error:others"),
            (
                with("stops", Some(json!(["Albany", "Boston"]))),
                "value_error:list/tuple",
            ),
            (
                with("stops", Some(json!(["Albany", 3]))),
                "type_error:nested",
            ),
            (
                with("opts", Some(json!({"mode": "bus"}))),
                "value_error:dict_value",
            ),
            (
                with("opts", Some(json!({"mode": "car", "x": 1}))),
                "value_error:dict_key",
            ),
            (
                with("opts", Some(json!({"unit": "km"}))),
                "value_error:dict_key",
            ),
            (
                with("legs", Some(json!([{"to": "A"}]))),
                "value_error:list_dict_count",
            ),
            // The other acceptable value, "" (omitted), is an empty list: BFCL reports the last
            // candidate's failure.
            (
                with("legs", Some(json!([{"to": "B"}, {"to": "A"}]))),
                "value_error:list_dict_count",
            ),
            (
                json!({"geo_distance": {"city": "NYC", "km": 2.5}}),
                "simple_function_checker:wrong_func_name",
            ),
        ];
        for (call, expected) in cases {
            let verdict = run(call.clone());
            assert!(!verdict.valid, "{call} passed");
            assert_eq!(verdict.error_type, expected, "{call}: {:?}", verdict.errors);
        }
        assert_eq!(
            run(with("city", Some(json!("Boston")))).errors[0],
            "Invalid value for parameter 'city': 'Boston'. Expected one of ['New York', 'NYC']. Case insensitive."
        );
    }

    #[test]
    fn ints_pass_for_floats_and_variables_for_typed_values() {
        let doc = json!({"name": "f", "parameters": {"properties": {"x": {"type": "float"}, "n": {"type": "integer"}}, "required": ["x"]}});
        let answer = json!({"f": {"x": [3.0], "n": ["count"]}});
        let run = |call: Value| {
            check(
                std::slice::from_ref(&doc),
                &[call],
                std::slice::from_ref(&answer),
                Language::Python,
                Shape::Simple,
                NameStyle::AsDocumented,
            )
        };
        assert!(run(json!({"f": {"x": 3, "n": "count"}})).valid);
        assert_eq!(
            run(json!({"f": {"x": 3, "n": "other"}})).error_type,
            "value_error:others"
        );
        // Dots as underscores when the model's API cannot use dots.
        let dotted = json!({"name": "a.b", "parameters": {"properties": {}, "required": []}});
        let verdict = check(
            &[dotted],
            &[json!({"a_b": {}})],
            &[json!({"a.b": {}})],
            Language::Python,
            Shape::Simple,
            NameStyle::DotsAsUnderscores,
        );
        assert!(verdict.valid, "{verdict:?}");
    }

    #[test]
    fn parallel_calls_match_in_any_order_and_multiple_picks_the_answers_function() {
        let docs = [
            json!({"name": "a", "parameters": {"properties": {"x": {"type": "integer"}}, "required": ["x"]}}),
            json!({"name": "b", "parameters": {"properties": {"y": {"type": "string"}}, "required": ["y"]}}),
        ];
        let answers = [
            json!({"a": {"x": [1]}}),
            json!({"b": {"y": ["q"]}}),
            json!({"a": {"x": [2]}}),
        ];
        let calls = [
            json!({"a": {"x": 2}}),
            json!({"b": {"y": "Q"}}),
            json!({"a": {"x": 1}}),
        ];
        assert!(
            check(
                &docs,
                &calls,
                &answers,
                Language::Python,
                Shape::Parallel,
                NameStyle::AsDocumented
            )
            .valid
        );
        let wrong = [
            json!({"a": {"x": 2}}),
            json!({"b": {"y": "Q"}}),
            json!({"a": {"x": 2}}),
        ];
        let verdict = check(
            &docs,
            &wrong,
            &answers,
            Language::Python,
            Shape::Parallel,
            NameStyle::AsDocumented,
        );
        assert_eq!(
            verdict.error_type,
            "parallel_function_checker_no_order:cannot_find_match"
        );
        assert!(
            verdict.errors[0]
                .starts_with("Could not find a matching function among index [0, 1, 2]"),
            "{:?}",
            verdict.errors
        );
        let short = check(
            &docs,
            &calls[..2],
            &answers,
            Language::Python,
            Shape::Parallel,
            NameStyle::AsDocumented,
        );
        assert_eq!(
            short.error_type,
            "parallel_function_checker_no_order:wrong_count"
        );
        let multiple = check(
            &docs,
            &[json!({"b": {"y": "q"}})],
            &[json!({"b": {"y": ["q"]}})],
            Language::Python,
            Shape::Multiple,
            NameStyle::AsDocumented,
        );
        assert!(multiple.valid, "{multiple:?}");
        let two = check(
            &docs,
            &calls[..2],
            &answers[..1],
            Language::Python,
            Shape::Simple,
            NameStyle::AsDocumented,
        );
        assert_eq!(two.error_type, "simple_function_checker:wrong_count");
    }

    #[test]
    fn java_and_javascript_arguments_are_literals_in_strings() {
        let doc = json!({"name": "m", "parameters": {"properties": {
            "ids": {"type": "ArrayList", "items": {"type": "long"}},
            "n": {"type": "long"},
            "ok": {"type": "boolean"}
        }, "required": ["ids"]}});
        let answer = json!({"m": {"ids": [[101, 202]], "n": [5], "ok": [true]}});
        let run = |call: Value| {
            check(
                std::slice::from_ref(&doc),
                &[call],
                std::slice::from_ref(&answer),
                Language::Java,
                Shape::Simple,
                NameStyle::AsDocumented,
            )
        };
        assert!(run(json!({"m": {"ids": "new ArrayList<>(Arrays.asList(101L, 202L))", "n": "5L", "ok": "true"}})).valid);
        assert_eq!(run(json!({"m": {"ids": "new ArrayList<>(Arrays.asList(101L, 202L))", "n": 5, "ok": "true"}})).error_type, "type_error:java");
        assert_eq!(run(json!({"m": {"ids": "new ArrayList<>(Arrays.asList(101L, 202L))", "n": "5", "ok": "true"}})).error_type, "type_error:simple");
        let js_doc = json!({"name": "f", "parameters": {"properties": {"v": {"type": "array", "items": {"type": "float"}}}, "required": ["v"]}});
        let verdict = check(
            &[js_doc],
            &[json!({"f": {"v": "[60, 30]"}})],
            &[json!({"f": {"v": [[60, 30]]}})],
            Language::JavaScript,
            Shape::Simple,
            NameStyle::AsDocumented,
        );
        assert!(verdict.valid, "{verdict:?}");
    }
}
