//! Parsing and validating experiment configs, with every error located at a TOML path and line:column.
//!
//! Three passes, each reporting everything it finds: TOML syntax (recoverable parse), the JSON
//! Schema generated from the config types (unknown keys, types, ranges, allowed values), then
//! the cross-field rules that a schema cannot express.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::{
    Benchmark, ExperimentConfig, GgufWeights, JudgeKind, KlType, ModelSource, PolicyRole,
    TaskSource, ToolResponseMode,
};
use crate::error::Error;

/// One problem in a config file, located at a TOML path and a 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// Dotted TOML path, e.g. `rl.micro_batch_size` or `env.domains[1]`; empty for syntax errors.
    pub path: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What is wrong, in words a person can act on.
    pub message: String,
}

/// Every problem found in one config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file (or `<name>` for text without a file).
    pub source_name: String,
    /// The problems, in file order.
    pub issues: Vec<ConfigIssue>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.issues.len();
        write!(
            f,
            "{}: {n} error{} in the experiment config",
            self.source_name,
            if n == 1 { "" } else { "s" }
        )?;
        for issue in &self.issues {
            write!(
                f,
                "\n  {}:{}:{}: ",
                self.source_name, issue.line, issue.column
            )?;
            if !issue.path.is_empty() {
                write!(f, "{}: ", issue.path)?;
            }
            write!(f, "{}", issue.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// The JSON Schema of [`ExperimentConfig`], as the studio's form editor reads it.
pub fn json_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(json_schema_value)
}

/// Generates the JSON Schema afresh (see [`json_schema`] for the cached one).
pub fn json_schema_value() -> Value {
    let schema = schemars::schema_for!(ExperimentConfig);
    schema.to_value()
}

fn validator() -> Result<&'static jsonschema::Validator, String> {
    static VALIDATOR: OnceLock<Result<jsonschema::Validator, String>> = OnceLock::new();
    VALIDATOR
        .get_or_init(|| {
            jsonschema::validator_for(json_schema())
                .map_err(|err| format!("the generated config schema is invalid: {err}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Reads and validates a config file. Relative paths in it are resolved against its folder.
pub fn parse_file(path: &Path) -> Result<ExperimentConfig, Error> {
    let text = std::fs::read_to_string(path).map_err(|err| Error::io(path, err))?;
    let mut config = parse(&text, &path.display().to_string())?;
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    config.resolve_paths(base);
    Ok(config)
}

/// Validates config text; `source_name` names it in messages (a file path, or e.g. `<preset quickstart>`).
pub fn parse(text: &str, source_name: &str) -> Result<ExperimentConfig, ConfigErrors> {
    let lines = LineIndex::new(text);
    let fail = |issues: Vec<ConfigIssue>| ConfigErrors {
        source_name: source_name.to_string(),
        issues,
    };

    // Pass 1: syntax.
    let (document, syntax_errors) = DeTable::parse_recoverable(text);
    if !syntax_errors.is_empty() {
        let issues = syntax_errors
            .iter()
            .map(|err| {
                let (line, column) = lines.line_col(err.span().map_or(0, |span| span.start));
                ConfigIssue {
                    path: String::new(),
                    line,
                    column,
                    message: format!("TOML syntax: {}", err.message().trim_end()),
                }
            })
            .collect();
        return Err(fail(issues));
    }
    let spans = SpanIndex::new(document.get_ref());
    let locate = |path: &[Segment], message: String| -> ConfigIssue {
        let (line, column) = lines.line_col(spans.offset_of(path));
        ConfigIssue {
            path: dotted(path),
            line,
            column,
            message,
        }
    };

    let value: Value = match toml::from_str(text) {
        Ok(value) => value,
        Err(err) => {
            let (line, column) = lines.line_col(err.span().map_or(0, |span| span.start));
            return Err(fail(vec![ConfigIssue {
                path: String::new(),
                line,
                column,
                message: format!("TOML: {}", err.message().trim_end()),
            }]));
        }
    };

    // Pass 2: the generated schema.
    let validator = match validator() {
        Ok(validator) => validator,
        Err(message) => return Err(fail(vec![locate(&[], message)])),
    };
    let mut issues: Vec<ConfigIssue> = validator
        .iter_errors(&value)
        .flat_map(|err| schema_issues(&err, &value))
        .map(|(path, message)| locate(&path, message))
        .collect();
    if !issues.is_empty() {
        sort_and_dedup(&mut issues);
        return Err(fail(issues));
    }

    // Pass 3: cross-field rules on the typed config.
    let config: ExperimentConfig = match serde_json::from_value(value) {
        Ok(config) => config,
        Err(err) => return Err(fail(vec![locate(&[], err.to_string())])),
    };
    let mut issues: Vec<ConfigIssue> = cross_field_issues(&config)
        .into_iter()
        .map(|(path, message)| locate(&parse_dotted(&path), message))
        .collect();
    if issues.is_empty() {
        Ok(config)
    } else {
        sort_and_dedup(&mut issues);
        Err(fail(issues))
    }
}

fn sort_and_dedup(issues: &mut Vec<ConfigIssue>) {
    issues.sort_by(|a, b| (a.line, a.column, &a.path).cmp(&(b.line, b.column, &b.path)));
    issues.dedup();
}

/// A step in a TOML path: a key or an array index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Segment {
    Key(String),
    Index(usize),
}

fn dotted(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                let bare = !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if bare {
                    out.push_str(key);
                } else {
                    out.push_str(&format!("{key:?}"));
                }
            }
            Segment::Index(idx) => out.push_str(&format!("[{idx}]")),
        }
    }
    out
}

/// Parses the dotted paths the cross-field rules use (bare keys and `[i]` only).
fn parse_dotted(path: &str) -> Vec<Segment> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|part| !part.is_empty()) {
        let (key, rest) = part.split_once('[').unwrap_or((part, ""));
        out.push(Segment::Key(key.to_string()));
        for idx in rest.split('[') {
            if let Ok(idx) = idx.trim_end_matches(']').parse() {
                out.push(Segment::Index(idx));
            }
        }
    }
    out
}

/// Maps byte offsets to 1-based line and column.
struct LineIndex<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(text: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(idx, _)| idx + 1))
            .collect();
        LineIndex { text, line_starts }
    }

    fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line_idx = self.line_starts.partition_point(|&start| start <= offset) - 1;
        let start = self.line_starts[line_idx];
        let column = self
            .text
            .get(start..offset)
            .map_or(offset - start, |prefix| prefix.chars().count());
        (line_idx + 1, column + 1)
    }
}

/// Where each key and value of the document sits.
struct SpanIndex {
    /// Start of the key (for table entries) or of the value (for array items), per path.
    starts: HashMap<Vec<Segment>, usize>,
}

impl SpanIndex {
    fn new(document: &DeTable<'_>) -> Self {
        let mut index = SpanIndex {
            starts: HashMap::new(),
        };
        index.add_table(&mut Vec::new(), document);
        index
    }

    fn add_table(&mut self, path: &mut Vec<Segment>, table: &DeTable<'_>) {
        for (key, value) in table.iter() {
            path.push(Segment::Key(key.get_ref().to_string()));
            self.starts.insert(path.clone(), key.span().start);
            self.add_value(path, value);
            path.pop();
        }
    }

    fn add_value(&mut self, path: &mut Vec<Segment>, value: &Spanned<DeValue<'_>>) {
        match value.get_ref() {
            DeValue::Table(table) => self.add_table(path, table),
            DeValue::Array(items) => {
                for (idx, item) in items.iter().enumerate() {
                    path.push(Segment::Index(idx));
                    self.starts.insert(path.clone(), item.span().start);
                    self.add_value(path, item);
                    path.pop();
                }
            }
            _ => {}
        }
    }

    /// The offset of `path`, or of its nearest ancestor present in the file (0 for none).
    fn offset_of(&self, path: &[Segment]) -> usize {
        (0..=path.len())
            .rev()
            .find_map(|len| self.starts.get(&path[..len]).copied())
            .unwrap_or(0)
    }
}

/// Turns one schema validation error into located messages.
fn schema_issues(
    err: &jsonschema::ValidationError<'_>,
    root: &Value,
) -> Vec<(Vec<Segment>, String)> {
    use jsonschema::error::ValidationErrorKind as Kind;

    let path: Vec<Segment> = err
        .instance_path()
        .iter()
        .map(|segment| match segment {
            jsonschema::paths::LocationSegment::Property(key) => Segment::Key(key.to_string()),
            jsonschema::paths::LocationSegment::Index(idx) => Segment::Index(idx),
        })
        .collect();
    let instance = lookup(root, &path);
    let subschema = schema_at(json_schema(), &path);
    let found = instance.map_or_else(|| "nothing".to_string(), describe_value);

    let message = match err.kind() {
        Kind::AdditionalProperties { unexpected } => {
            let allowed = subschema.map(object_keys).unwrap_or_default();
            return unexpected
                .iter()
                .map(|key| {
                    let mut key_path = path.clone();
                    key_path.push(Segment::Key(key.clone()));
                    let is_table = lookup(root, &key_path).is_some_and(Value::is_object);
                    (key_path, unknown_key_message(key, is_table, &allowed))
                })
                .collect();
        }
        Kind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            let what = if path.is_empty() {
                format!("the [{name}] table is required")
            } else {
                format!("missing required key `{name}`")
            };
            let help = subschema
                .and_then(|schema| schema.pointer(&format!("/properties/{name}")))
                .and_then(|schema| resolve(json_schema(), schema))
                .and_then(|schema| schema.get("description"))
                .and_then(Value::as_str)
                .map(|text| format!(" ({})", first_sentence(text)))
                .unwrap_or_default();
            format!("{what}{help}")
        }
        Kind::Type { .. } => {
            let expected = subschema
                .map(expected_types)
                .unwrap_or_else(|| "another type".into());
            format!("expected {expected}, found {found}")
        }
        Kind::AnyOf { context } | Kind::OneOfNotValid { context } => {
            // `Option<T>` is `anyOf: [T, null]`: report what is wrong against `T` itself.
            let branches: Vec<_> = context
                .iter()
                .filter(|errors| !is_null_branch(errors, err.instance_path()))
                .collect();
            if let [errors] = branches.as_slice()
                && !errors.is_empty()
                && !is_type_mismatch_here(errors, err.instance_path())
            {
                return errors
                    .iter()
                    .flat_map(|inner| schema_issues(inner, root))
                    .collect();
            }
            match subschema.map(allowed_values) {
                Some(values) if !values.is_empty() => {
                    format!(
                        "{found} is not allowed; expected one of {}",
                        values.join(", ")
                    )
                }
                _ => {
                    let expected = subschema
                        .map(expected_types)
                        .unwrap_or_else(|| "another type".into());
                    format!("expected {expected}, found {found}")
                }
            }
        }
        Kind::Enum { .. } | Kind::Constant { .. } => match subschema.map(allowed_values) {
            Some(values) if !values.is_empty() => {
                format!(
                    "{found} is not allowed; expected one of {}",
                    values.join(", ")
                )
            }
            _ => format!("{found} does not match the expected form ({err})"),
        },
        Kind::Minimum { limit } => format!("{found} is too small; the minimum is {limit}"),
        Kind::Maximum { limit } => format!("{found} is too large; the maximum is {limit}"),
        Kind::ExclusiveMinimum { limit } => {
            format!("{found} is too small; it must be greater than {limit}")
        }
        Kind::ExclusiveMaximum { limit } => {
            format!("{found} is too large; it must be less than {limit}")
        }
        Kind::MinItems { limit } => format!("needs at least {limit} item{}", plural(*limit)),
        Kind::MaxItems { limit } => format!("takes at most {limit} item{}", plural(*limit)),
        Kind::MinLength { limit } => format!(
            "{found} is too short; at least {limit} character{}",
            plural(*limit)
        ),
        Kind::MaxLength { limit } => format!(
            "{found} is too long; at most {limit} character{}",
            plural(*limit)
        ),
        Kind::UniqueItems => format!("{found} lists an item more than once"),
        Kind::Pattern { pattern } => {
            let hint = subschema
                .and_then(|schema| schema.get("description"))
                .and_then(Value::as_str)
                .map(first_sentence)
                .unwrap_or_default();
            if hint.is_empty() {
                format!("{found} does not match the pattern {pattern}")
            } else {
                format!("{found} is not valid here: {hint}")
            }
        }
        _ => format!("{found}: {err}"),
    };
    vec![(path, message)]
}

/// Whether a branch's only error is "not null" at this very path: the `None` side of an option.
fn is_null_branch(
    errors: &[jsonschema::ValidationError<'static>],
    here: &jsonschema::paths::Location,
) -> bool {
    use jsonschema::error::{TypeKind, ValidationErrorKind as Kind};
    matches!(errors, [only] if only.instance_path() == here
        && matches!(only.kind(), Kind::Type { kind: TypeKind::Single(jsonschema::JsonType::Null) }))
}

/// Whether a branch failed only because the value here has the wrong type altogether.
fn is_type_mismatch_here(
    errors: &[jsonschema::ValidationError<'static>],
    here: &jsonschema::paths::Location,
) -> bool {
    use jsonschema::error::ValidationErrorKind as Kind;
    errors
        .iter()
        .all(|e| e.instance_path() == here && matches!(e.kind(), Kind::Type { .. }))
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn first_sentence(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    line.trim_end_matches('.').to_string()
}

fn unknown_key_message(key: &str, is_table: bool, allowed: &[String]) -> String {
    let lower = key.to_ascii_lowercase();
    if lower.contains("api_key") && !lower.ends_with("_env") || lower == "key" || lower == "token" {
        return format!(
            "unknown key `{key}`: API keys are never stored in the config file; put the key in an \
             environment variable and give its name in `api_key_env`"
        );
    }
    let best = allowed
        .iter()
        .map(|candidate| (strsim::jaro_winkler(key, candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let what = if is_table { "table" } else { "key" };
    match best {
        Some((_, candidate)) => format!("unknown {what} `{key}`; did you mean `{candidate}`?"),
        None if allowed.is_empty() => format!("unknown {what} `{key}`"),
        None => format!(
            "unknown {what} `{key}`; expected one of: {}",
            allowed.join(", ")
        ),
    }
}

fn lookup<'v>(root: &'v Value, path: &[Segment]) -> Option<&'v Value> {
    path.iter().try_fold(root, |value, segment| match segment {
        Segment::Key(key) => value.get(key),
        Segment::Index(idx) => value.get(idx),
    })
}

/// Describes a value in TOML terms.
fn describe_value(value: &Value) -> String {
    match value {
        Value::Null => "nothing".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) if n.is_f64() => format!("the float {n}"),
        Value::Number(n) => format!("the integer {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(map) if map.keys().any(|key| key.contains("toml_private_datetime")) => {
            "a date-time".into()
        }
        Value::Object(_) => "a table".into(),
    }
}

/// Follows `$ref` to `#/$defs/...` in the root schema.
fn resolve<'s>(root: &'s Value, schema: &'s Value) -> Option<&'s Value> {
    let mut schema = schema;
    for _ in 0..16 {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                let pointer = reference.strip_prefix('#')?;
                schema = root.pointer(pointer)?;
            }
            None => return Some(schema),
        }
    }
    None
}

/// The subschema that describes the value at `path`, following refs, options and arrays.
fn schema_at<'s>(root: &'s Value, path: &[Segment]) -> Option<&'s Value> {
    let mut schema = resolve(root, root)?;
    for segment in path {
        schema = non_null_branch(root, schema)?;
        schema = match segment {
            Segment::Key(key) => schema.get("properties")?.get(key)?,
            Segment::Index(_) => schema.get("items")?,
        };
        schema = resolve(root, schema)?;
    }
    non_null_branch(root, schema)
}

/// For `Option<T>` schemas (`anyOf: [T, null]`), the `T` branch.
fn non_null_branch<'s>(root: &'s Value, schema: &'s Value) -> Option<&'s Value> {
    let schema = resolve(root, schema)?;
    if let Some(branches) = schema.get("anyOf").and_then(Value::as_array) {
        for branch in branches {
            let branch = resolve(root, branch)?;
            if branch.get("type").and_then(Value::as_str) != Some("null") {
                return Some(branch);
            }
        }
    }
    Some(schema)
}

fn object_keys(schema: &Value) -> Vec<String> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| props.keys().cloned().collect())
        .unwrap_or_default()
}

fn allowed_values(schema: &Value) -> Vec<String> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values.iter().map(Value::to_string).collect();
    }
    let mut out = Vec::new();
    for key in ["oneOf", "anyOf"] {
        for branch in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(constant) = branch.get("const") {
                out.push(constant.to_string());
            }
            if let Some(values) = branch.get("enum").and_then(Value::as_array) {
                out.extend(values.iter().map(Value::to_string));
            }
        }
    }
    out
}

fn expected_types(schema: &Value) -> String {
    let names: Vec<&str> = match schema.get("type") {
        Some(Value::String(name)) => vec![name.as_str()],
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ if !allowed_values(schema).is_empty() => vec!["string"],
        _ => Vec::new(),
    };
    let words: Vec<&str> = names
        .into_iter()
        .filter(|name| *name != "null")
        .map(|name| match name {
            "integer" => "an integer",
            "number" => "a number",
            "string" => "a string",
            "boolean" => "a boolean",
            "array" => "an array",
            "object" => "a table",
            other => other,
        })
        .collect();
    if words.is_empty() {
        "another type".into()
    } else {
        words.join(" or ")
    }
}

/// The rules that tie fields together, as (dotted path, message) pairs.
fn cross_field_issues(config: &ExperimentConfig) -> Vec<(String, String)> {
    let mut issues = Vec::new();
    let mut issue = |path: &str, message: String| issues.push((path.to_string(), message));

    let model = &config.model;
    let rl = &config.rl;
    let sft = &config.sft;
    let trains = sft.enabled || rl.n_steps > 0;

    match model.source {
        ModelSource::Hf | ModelSource::Gguf if model.path.is_none() => issue(
            "model.path",
            format!(
                "model.source = {:?} needs `path`: the {} to load",
                source_name(model.source),
                if model.source == ModelSource::Hf {
                    "Hugging Face folder (config.json, *.safetensors, tokenizer.json)"
                } else {
                    "GGUF file"
                }
            ),
        ),
        ModelSource::Tiny if model.path.is_some() => issue(
            "model.path",
            "a path is set but model.source = \"tiny\" builds a new model; set source = \"hf\" or \"gguf\", or remove path".into(),
        ),
        _ => {}
    }
    if model.source == ModelSource::Gguf && model.gguf_weights == GgufWeights::Quantized && trains {
        issue(
            "model.gguf_weights",
            "quantized GGUF weights cannot be trained; use gguf_weights = \"dequantize\", or set sft.enabled = false and rl.n_steps = 0 for inference only".into(),
        );
    }
    if model.source == ModelSource::Tiny {
        let tiny = &model.tiny;
        if !tiny.hidden_size.is_multiple_of(tiny.n_heads) {
            issue(
                "model.tiny.n_heads",
                format!(
                    "n_heads = {} must divide hidden_size = {}",
                    tiny.n_heads, tiny.hidden_size
                ),
            );
        } else if !(tiny.hidden_size / tiny.n_heads).is_multiple_of(2) {
            issue(
                "model.tiny.n_heads",
                format!(
                    "head size hidden_size / n_heads = {} must be even for rotary embeddings",
                    tiny.hidden_size / tiny.n_heads
                ),
            );
        }
        if !tiny.n_heads.is_multiple_of(tiny.n_kv_heads) {
            issue(
                "model.tiny.n_kv_heads",
                format!(
                    "n_kv_heads = {} must divide n_heads = {}",
                    tiny.n_kv_heads, tiny.n_heads
                ),
            );
        }
        let context = u64::from(rl.max_prompt_tokens) + u64::from(rl.max_response_tokens);
        if context > u64::from(tiny.max_position_embeddings) {
            issue(
                "rl.max_response_tokens",
                format!(
                    "max_prompt_tokens + max_response_tokens = {context} exceeds model.tiny.max_position_embeddings = {}",
                    tiny.max_position_embeddings
                ),
            );
        }
    }

    let env = &config.env;
    if env.task_source == TaskSource::Tau2 {
        if env.data_dir.is_none() {
            issue(
                "env.task_source",
                "task_source = \"tau2\" needs env.data_dir: the τ²-bench folder holding retail/ and airline/".into(),
            );
        }
        if let Some(idx) = env
            .domains
            .iter()
            .position(|d| *d == super::Domain::Functions)
        {
            issue(
                &format!("env.domains[{idx}]"),
                "τ²-bench has no \"functions\" domain; use task_source = \"generated\" for it"
                    .into(),
            );
        }
    }
    if env.task_source != TaskSource::Generated && !env.families.is_empty() {
        issue(
            "env.families",
            "families choose among generated tasks; remove it or set task_source = \"generated\""
                .into(),
        );
    }
    if env.tool_response_mode == ToolResponseMode::External && env.external.is_none() {
        issue(
            "env.tool_response_mode",
            "tool_response_mode = \"external\" needs an [env.external] table with the simulator's url and model".into(),
        );
    }
    if config.judge.kind == JudgeKind::Llm && config.judge.endpoint.is_none() {
        issue(
            "judge.kind",
            "kind = \"llm\" needs a [judge.endpoint] table with the judge's url and model".into(),
        );
    }

    if sft.enabled && !sft.batch_size.is_multiple_of(sft.micro_batch_size) {
        issue(
            "sft.micro_batch_size",
            format!(
                "micro_batch_size = {} must divide batch_size = {}",
                sft.micro_batch_size, sft.batch_size
            ),
        );
    }
    if sft.rehearse_share.is_some()
        && !(sft.roles.contains(&PolicyRole::Act) && sft.roles.contains(&PolicyRole::Rehearse))
    {
        issue(
            "sft.rehearse_share",
            "rehearse_share splits each batch between the roles, so sft.roles must list both \"act\" and \"rehearse\"".into(),
        );
    }
    if sft.memory_share > 0.0 && !sft.roles.contains(&PolicyRole::Act) {
        issue(
            "sft.memory_share",
            "memory_share adds act samples with a rehearsal memory, so sft.roles must list \"act\""
                .into(),
        );
    }
    if let Some(warmup) = sft.warmup_steps
        && sft.enabled
        && warmup > sft.n_steps
    {
        issue(
            "sft.warmup_steps",
            format!("warmup_steps = {warmup} exceeds n_steps = {}", sft.n_steps),
        );
    }
    if sft.enabled && model.source == ModelSource::Tiny && env.task_source == TaskSource::Tau2 {
        // Generated tasks carry oracle trajectories; τ²-bench tasks only gold actions.
        issue(
            "sft.enabled",
            "SFT learns from oracle trajectories of generated tasks; set env.task_source = \"generated\" or sft.enabled = false".into(),
        );
    }

    let n_trajectories = u64::from(rl.batch_size) * u64::from(rl.group_size);
    if rl.n_steps > 0 && n_trajectories % u64::from(rl.micro_batch_size) != 0 {
        issue(
            "rl.micro_batch_size",
            format!(
                "micro_batch_size = {} must divide batch_size × group_size = {} × {} = {n_trajectories} trajectories per step",
                rl.micro_batch_size, rl.batch_size, rl.group_size
            ),
        );
    }
    if rl.n_steps > 0 && rl.warmup_steps > rl.n_steps {
        issue(
            "rl.warmup_steps",
            format!(
                "warmup_steps = {} exceeds n_steps = {}",
                rl.warmup_steps, rl.n_steps
            ),
        );
    }
    if rl.kl_type == KlType::None && rl.kl_coef > 0.0 {
        issue(
            "rl.kl_coef",
            format!(
                "kl_coef = {} has no effect with kl_type = \"none\"; set kl_coef = 0 or choose a KL estimator",
                rl.kl_coef
            ),
        );
    }
    let frozen_act = rl.frozen_roles.contains(&PolicyRole::Act);
    let frozen_rehearse = rl.frozen_roles.contains(&PolicyRole::Rehearse);
    if rl.n_steps > 0 && frozen_act && frozen_rehearse {
        issue(
            "rl.frozen_roles",
            "both roles are frozen, so RL would train nothing; unfreeze one or set n_steps = 0"
                .into(),
        );
    } else if rl.n_steps > 0
        && frozen_act
        && matches!(
            env.tool_response_mode,
            ToolResponseMode::Real | ToolResponseMode::External
        )
    {
        issue(
            "rl.frozen_roles",
            format!(
                "the act role is frozen and tool_response_mode = {:?} never samples the rehearse role, so RL would train nothing",
                mode_name(env.tool_response_mode)
            ),
        );
    }

    let eval = &config.eval;
    if eval.data_dir.is_none() {
        for (idx, benchmark) in eval.benchmarks.iter().enumerate() {
            if benchmark.needs_data_dir() {
                issue(
                    &format!("eval.benchmarks[{idx}]"),
                    format!(
                        "{:?} reads benchmark files; set eval.data_dir to the folder holding bfcl/, tau2-bench/ and vitabench/",
                        benchmark_name(*benchmark)
                    ),
                );
            }
        }
    }
    for (idx, &n) in config.rehearsal.budget_curve.iter().enumerate() {
        if !(1..=64).contains(&n) {
            issue(
                &format!("rehearsal.budget_curve[{idx}]"),
                format!("a rehearsal budget is 1 to 64 imagined attempts per task, not {n}"),
            );
        }
    }
    let rehearsal = &config.rehearsal;
    let rehearses =
        rehearsal.mode != super::RehearsalMode::Off || !rehearsal.budget_curve.is_empty();
    if rehearses && rehearsal.max_memory_tokens >= rl.max_prompt_tokens {
        issue(
            "rehearsal.max_memory_tokens",
            format!(
                "a memory of up to {} tokens fills the act prompt of rl.max_prompt_tokens = {} tokens, which is cut from the left, leaving no room for the request; make it smaller",
                rehearsal.max_memory_tokens, rl.max_prompt_tokens
            ),
        );
    }
    issues
}

fn serde_name<T: serde::Serialize>(value: T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|value| value.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn source_name(source: ModelSource) -> String {
    serde_name(source)
}

fn mode_name(mode: ToolResponseMode) -> String {
    serde_name(mode)
}

fn benchmark_name(benchmark: Benchmark) -> String {
    serde_name(benchmark)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters() {
        let index = LineIndex::new("a = 1\nτ = 2\n");
        assert_eq!(index.line_col(0), (1, 1));
        assert_eq!(index.line_col(6), (2, 1));
        // "τ" is two bytes: the byte after it is column 2.
        assert_eq!(index.line_col(8), (2, 2));
        assert_eq!(index.line_col(1000), (3, 1));
    }

    #[test]
    fn dotted_paths_round_trip() {
        let path = parse_dotted("env.domains[2]");
        assert_eq!(
            path,
            vec![
                Segment::Key("env".into()),
                Segment::Key("domains".into()),
                Segment::Index(2)
            ]
        );
        assert_eq!(dotted(&path), "env.domains[2]");
        assert_eq!(dotted(&[Segment::Key("a b".into())]), "\"a b\"");
    }
}
