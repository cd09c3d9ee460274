//! BFCL's stateful API classes rebuilt natively, for its multi-turn categories: the backends a
//! task's calls act on, how a call string or a decoded tool call reaches them, and what the
//! checker compares afterwards (each call's result as BFCL's harness formats it, each
//! instance's public attributes).
//!
//! BFCL (github.com/ShishirPatil/gorilla, `bfcl_eval/eval_checker/multi_turn_eval`) runs its
//! backends as Python classes and every call through `eval`. Here each class is a
//! [`Backend`]: a table of its methods with their parameters ([`Method`]), binding arguments
//! the way Python binds them (positional, keyword, defaults, and Python's `TypeError` texts
//! when they do not fit), then the method itself. A result is turned into the text the model
//! sees as the harness does: a string as it is, a dict through `json.dumps`, anything else
//! through `str`, an exception as `Error during execution: <message>`. The answers and states
//! match BFCL's own on every ground-truth call of `multi_turn_base`
//! (`tests/fixtures/bfcl_multi/reference_runs.json`, written by the script beside it).
//!
//! Only the base category's setting is rebuilt: the long-context variants' extra padding data
//! is not, and asking for it is an error.

pub mod pyrandom;

mod file_system;
mod math;
mod message;
mod posting;
mod pyops;
mod ticket;
mod trading;
mod travel;
mod vehicle;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::env::pycall::{self, PyCall};
use crate::env::pyjson;
use crate::error::{Error, Result};

/// The classes, each with the file of `multi_turn_func_doc/` that describes its methods.
pub const CLASSES: [(&str, &str); 8] = [
    ("GorillaFileSystem", "gorilla_file_system.json"),
    ("MathAPI", "math_api.json"),
    ("MessageAPI", "message_api.json"),
    ("TwitterAPI", "posting_api.json"),
    ("TicketAPI", "ticket_api.json"),
    ("TradingBot", "trading_bot.json"),
    ("TravelAPI", "travel_booking.json"),
    ("VehicleControlAPI", "vehicle_control.json"),
];

/// What a method raised: the text of Python's `str(exception)`.
pub type Raised = String;

/// What a method returns: its value (a string is shown as it is, an object through
/// `json.dumps`, anything else through Python's `str`; a tuple or other value that JSON cannot
/// hold is returned as the string Python would print), or what it raised.
pub type Outcome = std::result::Result<Value, Raised>;

/// One parameter of a method, in the order of its Python signature.
#[derive(Clone, Copy, Debug)]
pub struct Param {
    pub name: &'static str,
    /// Whether the signature gives it no default.
    pub required: bool,
}

/// A required parameter.
pub const fn req(name: &'static str) -> Param {
    Param {
        name,
        required: true,
    }
}

/// A parameter with a default (the method applies the default when [`Args::get`] is `None`).
pub const fn opt(name: &'static str) -> Param {
    Param {
        name,
        required: false,
    }
}

/// A public method of a class: its name and parameters (without `self`).
#[derive(Clone, Copy, Debug)]
pub struct Method {
    pub name: &'static str,
    pub params: &'static [Param],
}

/// One of BFCL's classes, loaded with a task's `initial_config` for it.
pub trait Backend: Send {
    /// The Python class name, as in `involved_classes`.
    fn class(&self) -> &'static str;
    /// Its public methods.
    fn methods(&self) -> &'static [Method];
    /// Runs `method` (one of [`Backend::methods`]) with its arguments bound.
    fn call(&mut self, method: &str, args: &Args) -> Outcome;
    /// The public attributes (`vars(instance)` without names starting with `_`), with
    /// nested objects as the reference fixture writes them.
    fn state(&self) -> Map<String, Value>;
}

/// The public methods of `class`, or `None` for a class not rebuilt here.
pub fn methods_of(class: &str) -> Option<&'static [Method]> {
    Some(match class {
        "GorillaFileSystem" => file_system::METHODS,
        "MathAPI" => math::METHODS,
        "MessageAPI" => message::METHODS,
        "TwitterAPI" => posting::METHODS,
        "TicketAPI" => ticket::METHODS,
        "TradingBot" => trading::METHODS,
        "TravelAPI" => travel::METHODS,
        "VehicleControlAPI" => vehicle::METHODS,
        _ => return None,
    })
}

/// A new instance of `class` loaded with `config` (its entry of `initial_config`; `{}` when the
/// task gives none), as `_load_scenario` loads it.
pub fn new_backend(class: &str, config: &Value) -> Result<Box<dyn Backend>> {
    let empty = Map::new();
    let config = match config {
        Value::Object(map) => map,
        Value::Null => &empty,
        other => {
            return Err(Error::BfclTask {
                context: class.to_owned(),
                message: format!("its initial_config is not an object: {other}"),
            });
        }
    };
    let backend: Box<dyn Backend> = match class {
        "GorillaFileSystem" => Box::new(file_system::GorillaFileSystem::load(config)?),
        "MathAPI" => Box::new(math::MathApi::load(config)?),
        "MessageAPI" => Box::new(message::MessageApi::load(config)?),
        "TwitterAPI" => Box::new(posting::TwitterApi::load(config)?),
        "TicketAPI" => Box::new(ticket::TicketApi::load(config)?),
        "TradingBot" => Box::new(trading::TradingBot::load(config)?),
        "TravelAPI" => Box::new(travel::TravelApi::load(config)?),
        "VehicleControlAPI" => Box::new(vehicle::VehicleControlApi::load(config)?),
        other => {
            let known: Vec<&str> = CLASSES.iter().map(|(c, _)| *c).collect();
            return Err(Error::BfclTask {
                context: other.to_owned(),
                message: format!(
                    "this class is not rebuilt here (the classes are {})",
                    known.join(", ")
                ),
            });
        }
    };
    Ok(backend)
}

/// A call's arguments, bound to the method's parameters by name.
#[derive(Clone, Debug, Default)]
pub struct Args {
    /// `Class.method()`, for error texts.
    qualname: String,
    values: Map<String, Value>,
}

impl Args {
    /// Arguments given by name only (tests, and decoded tool calls bound elsewhere).
    pub fn new(qualname: &str, values: Map<String, Value>) -> Args {
        Args {
            qualname: qualname.to_owned(),
            values,
        }
    }

    /// The argument, or `None` when it was not given (the method applies its default).
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }

    /// Every bound argument.
    pub fn values(&self) -> &Map<String, Value> {
        &self.values
    }

    /// A required argument (binding has checked it is there).
    pub fn value(&self, name: &str) -> &Value {
        self.values.get(name).unwrap_or(&Value::Null)
    }

    /// `Class.method()`, as Python names it in a `TypeError`.
    pub fn qualname(&self) -> &str {
        &self.qualname
    }
}

/// Binds positional and keyword arguments to `method`'s parameters as Python does, or the
/// text of the `TypeError` Python raises.
pub fn bind(
    class: &str,
    method: &Method,
    positional: &[Value],
    keyword: &Map<String, Value>,
) -> std::result::Result<Args, Raised> {
    let qualname = format!("{class}.{}()", method.name);
    if positional.len() > method.params.len() {
        let n_required = method.params.iter().filter(|p| p.required).count();
        let takes = if n_required == method.params.len() {
            format!("{}", method.params.len() + 1)
        } else {
            format!("from {} to {}", n_required + 1, method.params.len() + 1)
        };
        let plural = if takes == "1" { "" } else { "s" };
        return Err(format!(
            "{qualname} takes {takes} positional argument{plural} but {} were given",
            positional.len() + 1
        ));
    }
    let mut values = Map::new();
    for (param, value) in method.params.iter().zip(positional) {
        values.insert(param.name.to_owned(), value.clone());
    }
    for (key, value) in keyword {
        if !method.params.iter().any(|p| p.name == key) {
            return Err(format!(
                "{qualname} got an unexpected keyword argument '{key}'"
            ));
        }
        if values.contains_key(key) {
            return Err(format!(
                "{qualname} got multiple values for argument '{key}'"
            ));
        }
        values.insert(key.clone(), value.clone());
    }
    let missing: Vec<String> = method
        .params
        .iter()
        .filter(|p| p.required && !values.contains_key(p.name))
        .map(|p| format!("'{}'", p.name))
        .collect();
    if !missing.is_empty() {
        let names = match missing.len() {
            1 => missing[0].clone(),
            2 => format!("{} and {}", missing[0], missing[1]),
            n => format!("{}, and {}", missing[..n - 1].join(", "), missing[n - 1]),
        };
        let plural = if missing.len() == 1 { "" } else { "s" };
        return Err(format!(
            "{qualname} missing {} required positional argument{plural}: {names}",
            missing.len()
        ));
    }
    Ok(Args { qualname, values })
}

/// The text the model sees for an outcome, as BFCL's harness formats it.
pub fn format_outcome(outcome: &Outcome) -> String {
    match outcome {
        Ok(Value::String(text)) => text.clone(),
        Ok(value @ Value::Object(_)) => pyjson::dumps(value, false),
        Ok(value) => pyjson::repr(value),
        Err(raised) => format!("Error during execution: {raised}"),
    }
}

/// Names BFCL's harness refuses to evaluate.
const REFUSED: [&str; 8] = [
    "kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run",
];

/// The instances of one task's involved classes, kept across its turns, and the method names
/// that reach them.
pub struct Instances {
    backends: Vec<Box<dyn Backend>>,
    /// Method name → the backend answering it (a later class wins, as in the harness).
    owner: BTreeMap<&'static str, usize>,
}

impl std::fmt::Debug for Instances {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let classes: Vec<&str> = self.backends.iter().map(|b| b.class()).collect();
        f.debug_struct("Instances")
            .field("classes", &classes)
            .finish()
    }
}

impl Instances {
    /// The task's classes loaded from `initial_config`, in `involved_classes` order.
    pub fn new(initial_config: &Value, involved_classes: &[String]) -> Result<Instances> {
        let mut backends = Vec::new();
        let mut owner = BTreeMap::new();
        for class in involved_classes {
            let config = initial_config.get(class).unwrap_or(&Value::Null);
            let backend = new_backend(class, config)?;
            for method in backend.methods() {
                owner.insert(method.name, backends.len());
            }
            backends.push(backend);
        }
        Ok(Instances { backends, owner })
    }

    /// Runs a call written as Python (`cd(folder='docs')`, `sort('a.txt')`), answering as
    /// the harness's `eval` does.
    pub fn execute(&mut self, call: &str) -> String {
        match pycall::parse_py_calls(call) {
            Ok(calls) if calls.len() == 1 => self.execute_call(&calls[0]),
            Ok(_) => "Error during execution: one call was expected".to_owned(),
            Err(err) => format!("Error during execution: invalid syntax ({err})"),
        }
    }

    /// Runs one parsed call.
    pub fn execute_call(&mut self, call: &PyCall) -> String {
        format_outcome(&self.run(&call.name, &call.positional, &call.keyword))
    }

    /// Runs a decoded tool call (name and keyword arguments).
    pub fn execute_named(&mut self, name: &str, arguments: &Map<String, Value>) -> String {
        format_outcome(&self.run(name, &[], arguments))
    }

    fn run(&mut self, name: &str, positional: &[Value], keyword: &Map<String, Value>) -> Outcome {
        // The harness keeps the part after a class prefix and refuses a few names.
        let bare = name.rsplit('.').next().unwrap_or(name);
        if REFUSED.contains(&bare) {
            return Err(format!("Function call {bare} is not allowed."));
        }
        let Some(&index) = self.owner.get(bare) else {
            return Err(format!("name '{bare}' is not defined"));
        };
        let backend = &mut self.backends[index];
        let class = backend.class();
        let method = backend
            .methods()
            .iter()
            .find(|m| m.name == bare)
            .copied()
            .ok_or_else(|| format!("name '{bare}' is not defined"))?;
        let args = bind(class, &method, positional, keyword)?;
        backend.call(bare, &args)
    }

    /// Each instance's public attributes, by class name.
    pub fn state(&self) -> BTreeMap<&'static str, Map<String, Value>> {
        self.backends
            .iter()
            .map(|b| (b.class(), b.state()))
            .collect()
    }

    /// The class answering `method`, if any.
    pub fn class_of(&self, method: &str) -> Option<&'static str> {
        let bare = method.rsplit('.').next().unwrap_or(method);
        self.owner.get(bare).map(|&i| self.backends[i].class())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: Method = Method {
        name: "cd",
        params: &[req("folder"), opt("deep")],
    };

    fn kw(pairs: &[(&str, Value)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn arguments_bind_and_fail_as_in_python() {
        let args = bind("Fs", &M, &[Value::from("a")], &Map::new()).unwrap();
        assert_eq!(args.value("folder"), "a");
        assert!(args.get("deep").is_none());
        assert_eq!(
            bind("Fs", &M, &[], &Map::new()).unwrap_err(),
            "Fs.cd() missing 1 required positional argument: 'folder'"
        );
        assert_eq!(
            bind("Fs", &M, &[], &kw(&[("x", Value::from(1))])).unwrap_err(),
            "Fs.cd() got an unexpected keyword argument 'x'"
        );
        assert_eq!(
            bind(
                "Fs",
                &M,
                &[Value::from("a")],
                &kw(&[("folder", Value::from("b"))])
            )
            .unwrap_err(),
            "Fs.cd() got multiple values for argument 'folder'"
        );
        assert_eq!(
            bind("Fs", &M, &[1.into(), 2.into(), 3.into()], &Map::new()).unwrap_err(),
            "Fs.cd() takes from 2 to 3 positional arguments but 4 were given"
        );
        const THREE: Method = Method {
            name: "f",
            params: &[req("a"), req("b"), req("c")],
        };
        assert_eq!(
            bind("C", &THREE, &[], &Map::new()).unwrap_err(),
            "C.f() missing 3 required positional arguments: 'a', 'b', and 'c'"
        );
    }

    #[test]
    fn outcomes_print_as_the_harness_prints_them() {
        let dict = serde_json::json!({"a": 1, "b": [1.5, "x"], "c": null});
        assert_eq!(
            format_outcome(&Ok(dict)),
            r#"{"a": 1, "b": [1.5, "x"], "c": null}"#
        );
        assert_eq!(format_outcome(&Ok(Value::from("text"))), "text");
        assert_eq!(format_outcome(&Ok(serde_json::json!([1, "a"]))), "[1, 'a']");
        assert_eq!(format_outcome(&Ok(Value::Null)), "None");
        assert_eq!(format_outcome(&Ok(serde_json::json!(2.0))), "2.0");
        assert_eq!(
            format_outcome(&Err("boom".into())),
            "Error during execution: boom"
        );
    }
}
