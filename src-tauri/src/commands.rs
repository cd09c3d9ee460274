//! The studio's commands: thin calls from the front end into the engine.
//!
//! Each command does one engine call and turns its result into contract types; none holds
//! training or validation logic of its own.

use std::path::{Path, PathBuf};

use envace::config;
use envace::store::Store;
use tauri::State;
use tauri_plugin_dialog::DialogExt;

use crate::StudioState;
use crate::contract::{
    ConfigCheck, DiffLine, Document, Edit, FieldIssue, PresetInfo, RunInfo, StudioError,
};

/// Name the editor's text goes by in engine messages when it has no file.
const UNSAVED: &str = "unsaved config";

/// Validates `toml` with the engine's own validator.
pub fn check(toml: &str) -> ConfigCheck {
    let values = toml::from_str::<serde_json::Value>(toml).unwrap_or(serde_json::Value::Null);
    let issues = match config::parse(toml, UNSAVED) {
        Ok(_) => Vec::new(),
        Err(errors) => errors
            .issues
            .into_iter()
            .map(|issue| FieldIssue {
                path: issue.path,
                line: u32::try_from(issue.line).unwrap_or(u32::MAX),
                column: u32::try_from(issue.column).unwrap_or(u32::MAX),
                message: issue.message,
            })
            .collect(),
    };
    ConfigCheck { issues, values }
}

fn document(toml: String, path: Option<&Path>, preset: Option<&str>) -> Document {
    let check = check(&toml);
    Document {
        toml,
        path: path.map(|p| p.display().to_string()),
        preset: preset.map(str::to_string),
        check,
    }
}

/// The presets, default first.
#[tauri::command]
#[specta::specta]
pub fn presets() -> Vec<PresetInfo> {
    config::PRESETS
        .iter()
        .map(|preset| PresetInfo {
            name: preset.name.to_string(),
            summary: preset.summary.to_string(),
        })
        .collect()
}

/// The config's JSON Schema, which the form is generated from.
#[tauri::command]
#[specta::specta]
pub fn config_schema() -> serde_json::Value {
    config::json_schema().clone()
}

/// Validates a config text.
#[tauri::command]
#[specta::specta]
pub fn check_config(toml: String) -> ConfigCheck {
    check(&toml)
}

/// What the editor opens at start: the `--config` file, or the quickstart preset (to be saved
/// to `--config` when that file does not exist yet).
#[tauri::command]
#[specta::specta]
pub fn initial_document(state: State<'_, StudioState>) -> Result<Document, StudioError> {
    let default = config::PRESETS[0];
    match &state.config_path {
        Some(path) if path.exists() => read_document(path),
        Some(path) => Ok(document(
            default.toml.to_string(),
            Some(path),
            Some(default.name),
        )),
        None => Ok(document(default.toml.to_string(), None, Some(default.name))),
    }
}

fn read_document(path: &Path) -> Result<Document, StudioError> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        StudioError::from_engine("Cannot open the config", &envace::Error::io(path, err))
    })?;
    let preset = config::PRESETS
        .iter()
        .find(|preset| preset.toml == text)
        .map(|preset| preset.name);
    Ok(document(text, Some(path), preset))
}

/// Replaces the editor's text with a preset, keeping the file it saves to.
#[tauri::command]
#[specta::specta]
pub fn open_preset(name: String, path: Option<String>) -> Result<Document, StudioError> {
    let preset = config::preset(&name)
        .map_err(|err| StudioError::from_engine("Cannot open the preset", &err))?;
    Ok(document(
        preset.toml.to_string(),
        path.as_deref().map(Path::new),
        Some(preset.name),
    ))
}

/// Sets one field (a TOML path) to a value, keeping the text's comments and layout.
#[tauri::command]
#[specta::specta]
pub fn set_field(
    toml: String,
    path: Vec<String>,
    value: serde_json::Value,
) -> Result<Edit, StudioError> {
    let keys: Vec<&str> = path.iter().map(String::as_str).collect();
    let toml = config::edit::set_value(&toml, &keys, &value)
        .map_err(|err| StudioError::from_engine("Cannot change the field", &err))?;
    let check = check(&toml);
    Ok(Edit { toml, check })
}

/// Removes one field, so its default applies.
#[tauri::command]
#[specta::specta]
pub fn remove_field(toml: String, path: Vec<String>) -> Result<Edit, StudioError> {
    let keys: Vec<&str> = path.iter().map(String::as_str).collect();
    let toml = config::edit::remove_value(&toml, &keys)
        .map_err(|err| StudioError::from_engine("Cannot remove the field", &err))?;
    let check = check(&toml);
    Ok(Edit { toml, check })
}

/// Saves the text to `path`, or asks where (Save As) when there is none. Returns the path
/// written, or `None` when the person cancelled. The file is replaced whole or not at all.
#[tauri::command]
#[specta::specta]
pub async fn save_config(
    app: tauri::AppHandle,
    toml: String,
    path: Option<String>,
) -> Result<Option<String>, StudioError> {
    let target = match path {
        Some(path) => PathBuf::from(path),
        None => {
            let picked = app
                .dialog()
                .file()
                .add_filter("Experiment config", &["toml"])
                .set_file_name("experiment.toml")
                .blocking_save_file();
            match picked.and_then(|file| file.into_path().ok()) {
                Some(path) => path,
                None => return Ok(None),
            }
        }
    };
    envace::fsutil::write_atomically(&target, toml.as_bytes())
        .map_err(|err| StudioError::from_engine("Cannot save the config", &err))?;
    Ok(Some(target.display().to_string()))
}

/// Asks for a config file and opens it; `None` when the person cancelled.
#[tauri::command]
#[specta::specta]
pub async fn open_config(app: tauri::AppHandle) -> Result<Option<Document>, StudioError> {
    let picked = app
        .dialog()
        .file()
        .add_filter("Experiment config", &["toml"])
        .blocking_pick_file();
    match picked.and_then(|file| file.into_path().ok()) {
        Some(path) => read_document(&path).map(Some),
        None => Ok(None),
    }
}

/// Line diff of `toml` against a preset.
#[tauri::command]
#[specta::specta]
pub fn diff_against_preset(toml: String, preset: String) -> Result<Vec<DiffLine>, StudioError> {
    let preset = config::preset(&preset)
        .map_err(|err| StudioError::from_engine("Cannot diff against the preset", &err))?;
    let diff = similar::TextDiff::from_lines(preset.toml, toml.as_str());
    Ok(diff
        .iter_all_changes()
        .map(|change| DiffLine {
            kind: match change.tag() {
                similar::ChangeTag::Equal => "same",
                similar::ChangeTag::Insert => "added",
                similar::ChangeTag::Delete => "removed",
            }
            .to_string(),
            text: change.value().trim_end_matches('\n').to_string(),
        })
        .collect())
}

/// The runs in the store, newest first.
#[tauri::command]
#[specta::specta]
pub fn list_runs(state: State<'_, StudioState>) -> Result<Vec<RunInfo>, StudioError> {
    if !state.store_path.exists() {
        return Ok(Vec::new());
    }
    let store = Store::open(&state.store_path)
        .map_err(|err| StudioError::from_engine("Cannot open the run store", &err))?;
    let runs = store
        .view()
        .runs()
        .map_err(|err| StudioError::from_engine("Cannot list the runs", &err))?;
    Ok(runs
        .into_iter()
        .map(|run| RunInfo {
            id: i32::try_from(run.id.0).unwrap_or(i32::MAX),
            name: run.name,
            status: run.status.as_str().to_string(),
            created_at: run.created_at,
            last_step: run.last_step.map(|s| u32::try_from(s).unwrap_or(u32::MAX)),
        })
        .collect())
}
