//! The typed contract between the studio's Rust host and its web front end.
//!
//! Every type that crosses the bridge is declared here once (all of them flow from Rust to the
//! front end, so they only serialize); `ui/src/bindings.ts` is generated
//! from these declarations and the commands (see `tests/bindings.rs`).

use serde::Serialize;
use specta::Type;

/// A preset experiment the editor can start from.
#[derive(Debug, Clone, Serialize, Type)]
pub struct PresetInfo {
    /// Name, e.g. `quickstart`.
    pub name: String,
    /// One line on what it is for.
    pub summary: String,
}

/// One problem in a config, located for the editor.
#[derive(Debug, Clone, PartialEq, Serialize, Type)]
pub struct FieldIssue {
    /// Dotted TOML path (`rl.lr`, `env.domains[1]`); empty for syntax errors.
    pub path: String,
    /// 1-based line in the TOML text.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// What is wrong.
    pub message: String,
}

/// The engine's verdict on a config text.
#[derive(Debug, Clone, Serialize, Type)]
pub struct ConfigCheck {
    /// Every problem, in file order; empty when valid.
    pub issues: Vec<FieldIssue>,
    /// The TOML's values as JSON (what the form shows); `null` when the TOML does not parse.
    pub values: serde_json::Value,
}

/// A config open in the editor.
#[derive(Debug, Clone, Serialize, Type)]
pub struct Document {
    /// The TOML text.
    pub toml: String,
    /// The file it is saved to, if any.
    pub path: Option<String>,
    /// The preset it started from, for the diff view.
    pub preset: Option<String>,
    /// The validator's verdict on `toml`.
    pub check: ConfigCheck,
}

/// One line of a diff between two config texts.
#[derive(Debug, Clone, PartialEq, Serialize, Type)]
pub struct DiffLine {
    /// `same`, `added` or `removed`.
    pub kind: String,
    /// The line's text.
    pub text: String,
}

/// A run in the store, for the run list.
#[derive(Debug, Clone, Serialize, Type)]
pub struct RunInfo {
    /// Store id.
    pub id: i32,
    /// Name from its config.
    pub name: String,
    /// `created`, `running`, `paused`, `stopped`, `finished` or `failed`.
    pub status: String,
    /// Creation time, Unix seconds.
    pub created_at: f64,
    /// Highest step with a metric.
    pub last_step: Option<u32>,
}

/// An engine failure as the front end shows it: what failed, and the file or field at fault.
#[derive(Debug, Clone, Serialize, Type)]
pub struct StudioError {
    /// What failed, in a few words (`Cannot save the config`).
    pub what: String,
    /// The engine's message, naming the file, field or value.
    pub detail: String,
    /// The file concerned, if any.
    pub file: Option<String>,
    /// The config field concerned, if any (dotted TOML path).
    pub field: Option<String>,
}

impl StudioError {
    /// An error with no file or field.
    pub fn new(what: impl Into<String>, detail: impl ToString) -> Self {
        StudioError {
            what: what.into(),
            detail: detail.to_string(),
            file: None,
            field: None,
        }
    }

    /// From an engine error, picking out the file or field it names.
    pub fn from_engine(what: impl Into<String>, err: &envace::Error) -> Self {
        let mut out = StudioError::new(what, err);
        match err {
            envace::Error::Io { path, .. }
            | envace::Error::Store { path, .. }
            | envace::Error::StoreFormat { path, .. } => {
                out.file = Some(path.display().to_string());
            }
            envace::Error::ConfigEdit { path, .. } => out.field = Some(path.clone()),
            envace::Error::Config(errors) => {
                out.file = Some(errors.source_name.clone());
                out.field = errors.issues.first().map(|issue| issue.path.clone());
            }
            _ => {}
        }
        out
    }
}

/// A config text after an edit, with the validator's verdict.
#[derive(Debug, Clone, Serialize, Type)]
pub struct Edit {
    /// The new TOML text.
    pub toml: String,
    /// The validator's verdict on it.
    pub check: ConfigCheck,
}
