//! The τ²-bench retail and airline domains, rebuilt natively from their data files.
//!
//! A [`Tau2Domain`] is loaded from a folder holding `db.json`, `tasks.json`, `policy.md` and
//! `split_tasks.json` (the layout of `data/tau2/domains/<domain>/` in sierra-research/tau2-bench).
//! [`Tau2Domain::env`] gives a [`Tau2Env`]: the domain's tools over a private copy of the
//! database. Every tool has the reference's effects and error messages, including its quirks
//! (unrounded f64 amounts computed in the same order, fixed airline ids and timestamp, see
//! `retail.rs` and `airline.rs`).
//!
//! # State hash
//!
//! [`Tau2Env::state_hash`] reproduces the reference's `get_db_hash`:
//! `sha256(json.dumps(db.model_dump(), sort_keys=True, default=str))`. The database is the full
//! record model, so optional fields absent from `db.json` are present as `null` (seven per retail
//! order, `status` per airline reservation, `address2` of an airline address); numbers keep the
//! int/float kind of their model field (a retail price `99` in the file is the float `99.0`);
//! the text follows [`crate::env::pyjson`] (`", "`/`": "` separators, `\uXXXX` escapes, Python
//! float `repr`, keys sorted by code point). The hash is the lower-case hex sha256 of the UTF-8
//! bytes of that text.
//!
//! # Where this differs from the reference
//!
//! - Arguments are checked against each tool's JSON Schema before the tool runs. The reference
//!   passes them to Python unchecked, so a wrong type there may be coerced (`"3"` for an int in a
//!   nested pydantic model), fail with a Python `TypeError`/`KeyError` text, or be stored as given;
//!   here it is `INVALID_PARAMETERS` and nothing changes. Integral floats (`2.0`) pass as integers
//!   and are stored as ints, where the reference would store the float in the few fields it
//!   assigns without validation (`total_baggages`, `nonfree_baggages`).
//! - `calculate` keeps Python ints exact only within `i128`.
//! - Case-insensitive look-ups use Rust's `to_lowercase`, which differs from Python's `lower()`
//!   only for a few non-ASCII letters.
//! - Task `initial_state` and env assertions are not supported; no retail or airline task has
//!   either ([`Tau2Domain::env_for_task`] refuses such a task).

pub mod airline;
mod calc;
pub mod eval;
pub mod ordered_map;
pub mod retail;
pub mod task;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use ordered_map::OrderedMap;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::env::{Environment, ErrorCode, ToolFailure, ToolOutcome, ToolSet, ToolSpec, pyjson};
use crate::error::{Error, Result};

pub use task::{Action, EvaluationCriteria, RewardType, Task};

/// Which τ²-bench domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainKind {
    /// Online retail: orders, exchanges, returns.
    Retail,
    /// Airline reservations.
    Airline,
}

impl DomainKind {
    /// The domain's folder name: `retail` or `airline`.
    pub fn as_str(self) -> &'static str {
        match self {
            DomainKind::Retail => "retail",
            DomainKind::Airline => "airline",
        }
    }
}

/// A domain's database.
#[derive(Debug, Clone)]
pub enum Db {
    /// Retail products, users and orders.
    Retail(retail::RetailDb),
    /// Airline flights, users and reservations.
    Airline(airline::AirlineDb),
}

impl Db {
    /// sha256 hex of Python `json.dumps(model_dump(), sort_keys=True)` (see the module doc).
    pub fn hash(&self) -> String {
        match self {
            Db::Retail(db) => canonical_hash(db),
            Db::Airline(db) => canonical_hash(db),
        }
    }
}

/// sha256 hex of a record's canonical Python JSON text (sorted keys).
pub fn canonical_hash(record: &impl Serialize) -> String {
    sha256_hex(&canonical_text(record))
}

/// A record's canonical Python JSON text (sorted keys).
fn canonical_text(record: &impl Serialize) -> String {
    match serde_json::to_value(record) {
        Ok(value) => pyjson::dumps(&value, true),
        // Records here always serialise (string keys only); an empty text still hashes.
        Err(_) => String::new(),
    }
}

fn sha256_hex(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Canonical texts of the initial database's records: one map per top-level table, in
/// sorted table order, from record key to the record's text.
type RecordTexts = Vec<HashMap<String, String>>;

fn record_texts<T: Serialize>(table: &OrderedMap<T>) -> HashMap<String, String> {
    table
        .iter()
        .map(|(key, record)| (key.clone(), canonical_text(record)))
        .collect()
}

/// Appends `"name": {sorted records}` to the canonical text, reusing the cached text of every
/// record equal to its initial version.
fn write_table<T: Serialize + PartialEq>(
    out: &mut String,
    name: &str,
    current: &OrderedMap<T>,
    initial: &OrderedMap<T>,
    cache: &HashMap<String, String>,
) {
    out.push_str(&pyjson::quote(name));
    out.push_str(": {");
    let mut keys: Vec<&String> = current.keys().collect();
    keys.sort();
    for (idx, key) in keys.into_iter().enumerate() {
        if idx > 0 {
            out.push_str(", ");
        }
        out.push_str(&pyjson::quote(key));
        out.push_str(": ");
        let record = &current[key];
        match cache.get(key) {
            Some(text) if initial.get(key) == Some(record) => out.push_str(text),
            _ => out.push_str(&canonical_text(record)),
        }
    }
    out.push('}');
}

/// Appends `table/key: text` for every record of `current` that differs from `initial`
/// (changed or added) and `table/key: <removed>` for every record it lacks, keys sorted.
fn write_delta<T: Serialize + PartialEq>(
    out: &mut String,
    name: &str,
    current: &OrderedMap<T>,
    initial: &OrderedMap<T>,
) {
    let mut lines: Vec<(String, String)> = Vec::new();
    for (key, record) in current.iter() {
        if initial.get(key) != Some(record) {
            lines.push((key.clone(), canonical_text(record)));
        }
    }
    for key in initial.keys() {
        if !current.contains_key(key) {
            lines.push((key.clone(), "<removed>".to_owned()));
        }
    }
    lines.sort();
    for (key, text) in lines {
        out.push_str(name);
        out.push('/');
        out.push_str(&key);
        out.push_str(": ");
        out.push_str(&text);
        out.push('\n');
    }
}

/// Puts a table back to its initial records, cloning only the records that changed (the
/// whole table when keys were added in between or reordered).
fn restore_table<T: Clone + PartialEq>(current: &mut OrderedMap<T>, initial: &OrderedMap<T>) {
    current.retain(|key, _| initial.contains_key(key));
    if current.len() != initial.len() || !current.keys().eq(initial.keys()) {
        *current = initial.clone();
        return;
    }
    for (record, original) in current.values_mut().zip(initial.values()) {
        if record != original {
            *record = original.clone();
        }
    }
}

/// A loaded domain: initial database, tasks, policy, splits and tools.
pub struct Tau2Domain {
    kind: DomainKind,
    name: String,
    dir: PathBuf,
    initial: Db,
    tasks: Vec<Task>,
    policy: String,
    splits: OrderedMap<Vec<String>>,
    tools: Arc<ToolSet>,
    initial_texts: OnceLock<RecordTexts>,
    /// State hash after each of the domain's own tasks' gold actions, filled on demand.
    gold_hashes: Mutex<HashMap<String, String>>,
}

impl Tau2Domain {
    /// Loads a domain from its data folder.
    pub fn load(kind: DomainKind, dir: impl AsRef<Path>) -> Result<Arc<Self>> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(Error::Tau2Data {
                path: dir,
                message: format!("the {} domain folder does not exist", kind.as_str()),
            });
        }
        let db_path = dir.join("db.json");
        let initial = match kind {
            DomainKind::Retail => Db::Retail(read_json(&db_path)?),
            DomainKind::Airline => Db::Airline(read_json(&db_path)?),
        };
        let tasks_path = dir.join("tasks.json");
        let tasks: Vec<Task> = read_json(&tasks_path)?;
        let policy_path = dir.join("policy.md");
        let policy =
            std::fs::read_to_string(&policy_path).map_err(|err| Error::io(&policy_path, err))?;
        let splits_path = dir.join("split_tasks.json");
        let splits: OrderedMap<Vec<String>> = read_json(&splits_path)?;
        for (split, ids) in splits.iter() {
            if let Some(missing) = ids.iter().find(|id| !tasks.iter().any(|t| &t.id == *id)) {
                return Err(Error::Tau2Data {
                    path: splits_path.clone(),
                    message: format!(
                        "split {split:?} names task {missing:?}, which tasks.json lacks"
                    ),
                });
            }
        }
        let specs = match kind {
            DomainKind::Retail => retail::tool_specs(),
            DomainKind::Airline => airline::tool_specs(),
        };
        Ok(Arc::new(Tau2Domain {
            kind,
            name: format!("tau2/{}", kind.as_str()),
            dir,
            initial,
            tasks,
            policy,
            splits,
            tools: Arc::new(ToolSet::new(specs)?),
            initial_texts: OnceLock::new(),
            gold_hashes: Mutex::new(HashMap::new()),
        }))
    }

    /// Which domain this is.
    pub fn kind(&self) -> DomainKind {
        self.kind
    }

    /// The folder it was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The database before any task starts.
    pub fn initial_db(&self) -> &Db {
        &self.initial
    }

    /// Every task, in file order.
    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }

    /// The task with this id.
    pub fn task(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().find(|task| task.id == id)
    }

    /// The agent policy (markdown).
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// Task ids per split (`train`, `test`, `base`).
    pub fn splits(&self) -> &OrderedMap<Vec<String>> {
        &self.splits
    }

    /// The domain's tools.
    pub fn tools(&self) -> &ToolSet {
        &self.tools
    }

    /// The state hash of a database of this domain: equal to [`Db::hash`], but records equal
    /// to their initial version reuse their canonical text, computed once per domain, so only
    /// changed records are serialised again.
    pub fn state_hash(&self, db: &Db) -> String {
        let texts = self.initial_texts.get_or_init(|| match &self.initial {
            Db::Retail(db) => vec![
                record_texts(&db.orders),
                record_texts(&db.products),
                record_texts(&db.users),
            ],
            Db::Airline(db) => vec![
                record_texts(&db.flights),
                record_texts(&db.reservations),
                record_texts(&db.users),
            ],
        });
        let mut out = String::with_capacity(
            texts
                .iter()
                .flatten()
                .map(|(k, v)| k.len() + v.len() + 4)
                .sum::<usize>()
                + 64,
        );
        out.push('{');
        match (db, &self.initial) {
            (Db::Retail(db), Db::Retail(initial)) => {
                write_table(&mut out, "orders", &db.orders, &initial.orders, &texts[0]);
                out.push_str(", ");
                write_table(
                    &mut out,
                    "products",
                    &db.products,
                    &initial.products,
                    &texts[1],
                );
                out.push_str(", ");
                write_table(&mut out, "users", &db.users, &initial.users, &texts[2]);
            }
            (Db::Airline(db), Db::Airline(initial)) => {
                write_table(
                    &mut out,
                    "flights",
                    &db.flights,
                    &initial.flights,
                    &texts[0],
                );
                out.push_str(", ");
                write_table(
                    &mut out,
                    "reservations",
                    &db.reservations,
                    &initial.reservations,
                    &texts[1],
                );
                out.push_str(", ");
                write_table(&mut out, "users", &db.users, &initial.users, &texts[2]);
            }
            // A database of another domain: no cache applies.
            (other, _) => return other.hash(),
        }
        out.push('}');
        sha256_hex(&out)
    }

    /// sha256 hex of what differs between a database of this domain and the initial one:
    /// every changed, added or removed record with its canonical text, keys sorted. Two
    /// databases of the domain have equal delta hashes exactly when they are equal; computing
    /// it serialises only the changed records.
    pub fn delta_hash(&self, db: &Db) -> String {
        let mut out = String::new();
        match (db, &self.initial) {
            (Db::Retail(db), Db::Retail(initial)) => {
                write_delta(&mut out, "orders", &db.orders, &initial.orders);
                write_delta(&mut out, "products", &db.products, &initial.products);
                write_delta(&mut out, "users", &db.users, &initial.users);
            }
            (Db::Airline(db), Db::Airline(initial)) => {
                write_delta(&mut out, "flights", &db.flights, &initial.flights);
                write_delta(
                    &mut out,
                    "reservations",
                    &db.reservations,
                    &initial.reservations,
                );
                write_delta(&mut out, "users", &db.users, &initial.users);
            }
            // A database of another domain: the full hash, marked.
            (other, _) => return format!("full:{}", other.hash()),
        }
        sha256_hex(&out)
    }

    /// A fresh environment in the domain's initial state.
    pub fn env(self: &Arc<Self>, seed: u64) -> Tau2Env {
        Tau2Env {
            domain: Arc::clone(self),
            db: self.initial.clone(),
            seed,
        }
    }

    /// A fresh environment for one task. The domains are deterministic, so the seed is only
    /// recorded. No retail or airline task has an `initial_state`; one that does is refused
    /// rather than silently started from the wrong state.
    pub fn env_for_task(self: &Arc<Self>, task_id: &str, seed: u64) -> Result<Tau2Env> {
        let tasks_path = self.dir.join("tasks.json");
        let task = self.task(task_id).ok_or_else(|| Error::Tau2Data {
            path: tasks_path.clone(),
            message: format!("no task has id {task_id:?}"),
        })?;
        if task
            .initial_state
            .as_ref()
            .is_some_and(|state| !state.is_null())
        {
            return Err(Error::Tau2Data {
                path: tasks_path,
                message: format!(
                    "task {task_id:?} has an initial_state, which this rebuild does not apply"
                ),
            });
        }
        Ok(self.env(seed))
    }

    /// The state hash after a task's gold actions. For the domain's own tasks it is computed
    /// once and remembered (grading many rollouts of a task replays the gold actions once).
    pub fn gold_hash(self: &Arc<Self>, task: &Task) -> String {
        let own = self.task(&task.id).is_some_and(|t| std::ptr::eq(t, task));
        if own
            && let Ok(hashes) = self.gold_hashes.lock()
            && let Some(hash) = hashes.get(&task.id)
        {
            return hash.clone();
        }
        let hash = eval::replay_gold(self, task).env.state_hash();
        if own && let Ok(mut hashes) = self.gold_hashes.lock() {
            hashes.insert(task.id.clone(), hash.clone());
        }
        hash
    }
}

impl fmt::Debug for Tau2Domain {
    // The database is megabytes: show a summary.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tau2Domain")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .field("n_tasks", &self.tasks.len())
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|err| Error::io(path, err))?;
    serde_json::from_str(&text).map_err(|err| Error::Tau2Data {
        path: path.to_path_buf(),
        message: err.to_string(),
    })
}

/// A τ²-bench domain environment: its tools over a private copy of the database.
#[derive(Clone)]
pub struct Tau2Env {
    domain: Arc<Tau2Domain>,
    db: Db,
    seed: u64,
}

impl fmt::Debug for Tau2Env {
    // The database is megabytes: show a summary.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tau2Env")
            .field("domain", &self.domain.name)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl Tau2Env {
    /// The domain this environment belongs to.
    pub fn domain(&self) -> &Arc<Tau2Domain> {
        &self.domain
    }

    /// The current database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The seed given at construction or the last reset.
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

impl Environment for Tau2Env {
    fn name(&self) -> &str {
        &self.domain.name
    }

    fn tools(&self) -> &[ToolSpec] {
        self.domain.tools.specs()
    }

    fn reset(&mut self, seed: u64) {
        // Only the records that changed are copied back: resetting after a short task is
        // cheap even on the megabyte databases.
        match (&mut self.db, &self.domain.initial) {
            (Db::Retail(db), Db::Retail(initial)) => {
                restore_table(&mut db.orders, &initial.orders);
                restore_table(&mut db.products, &initial.products);
                restore_table(&mut db.users, &initial.users);
            }
            (Db::Airline(db), Db::Airline(initial)) => {
                restore_table(&mut db.flights, &initial.flights);
                restore_table(&mut db.reservations, &initial.reservations);
                restore_table(&mut db.users, &initial.users);
            }
            (db, initial) => *db = initial.clone(),
        }
        self.seed = seed;
    }

    fn call(&mut self, name: &str, arguments: &Value) -> ToolOutcome {
        let args = match self.domain.tools.check(name, arguments) {
            Ok(args) => Args(args),
            Err(failure) => return ToolOutcome::Failure(failure),
        };
        let result = match &mut self.db {
            Db::Retail(db) => retail::call(db, name, &args),
            Db::Airline(db) => airline::call(db, name, &args),
        };
        match result {
            Ok(value) => ToolOutcome::Success(value),
            Err(message) => ToolOutcome::Failure(ToolFailure::new(ErrorCode::ToolError, message)),
        }
    }

    fn state_hash(&self) -> String {
        self.domain.state_hash(&self.db)
    }

    fn delta_hash(&self) -> String {
        self.domain.delta_hash(&self.db)
    }

    fn box_clone(&self) -> Box<dyn Environment> {
        Box::new(self.clone())
    }
}

/// Validated tool arguments, read by name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Args<'a>(pub(crate) &'a Map<String, Value>);

impl<'a> Args<'a> {
    fn get(&self, key: &str) -> std::result::Result<&'a Value, String> {
        self.0
            .get(key)
            .ok_or_else(|| format!("missing required argument: '{key}'"))
    }

    pub(crate) fn str(&self, key: &str) -> std::result::Result<&'a str, String> {
        self.get(key)?
            .as_str()
            .ok_or_else(|| format!("argument {key} must be a string"))
    }

    pub(crate) fn strings(&self, key: &str) -> std::result::Result<Vec<String>, String> {
        self.get(key)?
            .as_array()
            .and_then(|items| {
                items
                    .iter()
                    .map(|item| item.as_str().map(str::to_owned))
                    .collect()
            })
            .ok_or_else(|| format!("argument {key} must be a list of strings"))
    }

    pub(crate) fn int(&self, key: &str) -> std::result::Result<i64, String> {
        as_int(self.get(key)?).ok_or_else(|| format!("argument {key} must be an integer"))
    }

    pub(crate) fn raw(&self, key: &str) -> std::result::Result<&'a Value, String> {
        self.get(key)
    }
}

/// An integer, or a float with no fractional part (JSON Schema's `integer`).
pub(crate) fn as_int(value: &Value) -> Option<i64> {
    value.as_i64().or_else(|| {
        value
            .as_f64()
            .filter(|x| x.fract() == 0.0 && x.abs() < 9.0e18)
            .map(|x| x as i64)
    })
}

/// A record as a JSON value for a tool result.
pub(crate) fn to_json(record: &impl Serialize) -> std::result::Result<Value, String> {
    serde_json::to_value(record).map_err(|err| err.to_string())
}

/// Python's `round(x, 2)` for a float: round half to even on the exact binary value.
pub(crate) fn round2(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    format!("{x:.2}").parse().unwrap_or(x)
}

/// A string property schema.
pub(crate) fn string_param(description: &str) -> Value {
    serde_json::json!({"type": "string", "description": description})
}

/// An object schema over these properties, all required, no others allowed.
pub(crate) fn object_params(properties: Vec<(&str, Value)>) -> Value {
    let required: Vec<&str> = properties.iter().map(|(name, _)| *name).collect();
    let mut props = Map::new();
    for (name, schema) in properties {
        props.insert(name.to_owned(), schema);
    }
    serde_json::json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
}

/// A tool spec.
pub(crate) fn spec(name: &str, description: &str, parameters: Value, mutates: bool) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters,
        mutates_state: mutates,
    }
}

/// The `calculate` tool shared by both domains.
pub(crate) fn calculate(args: &Args<'_>) -> std::result::Result<Value, String> {
    let expression = args.str("expression")?;
    calc::calculate(expression).map(Value::String)
}
