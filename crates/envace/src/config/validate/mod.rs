//! Parsing and validating experiment configs, with every error located at a TOML path and line:column.
//!
//! Three passes, each reporting everything it finds: TOML syntax (recoverable parse), the JSON
//! Schema generated from the config types (unknown keys, types, ranges, allowed values), then
//! the cross-field rules that a schema cannot express. `spans.rs` locates keys in the file,
//! `schema_messages.rs` words the schema's errors, `rules.rs` holds the cross-field rules.

use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;
use toml::de::DeTable;

use super::ExperimentConfig;
use crate::error::Error;
use rules::cross_field_issues;
use schema_messages::schema_issues;
use spans::{LineIndex, Segment, SpanIndex, dotted, parse_dotted};

mod rules;
mod schema_messages;
mod spans;

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
