//! The JSON Schema pass's wording: one schema validation error becomes located messages a
//! person can act on (the allowed keys and values, the expected type, the range).

use serde_json::Value;

use super::json_schema;
use super::spans::Segment;

/// Turns one schema validation error into located messages.
pub(super) fn schema_issues(
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
