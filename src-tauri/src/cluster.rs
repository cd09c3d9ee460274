//! Scale-out to a cluster from the studio: "Export for cluster…" writes the launcher folder of
//! the reference verl trainer for the editor's config, and "Import cluster run…" reads such a
//! run's folder into the run store, through the engine's `envace::verl` as `envace export verl`
//! and `envace import verl` do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use envace::config;
use envace::store::Store;
use envace::verl::{self, ExportOptions};
use tauri::State;

use crate::StudioState;
use crate::contract::{StudioError, VerlExport, VerlImport};

const EXPORT_WHAT: &str = "Cannot export for the cluster";
const IMPORT_WHAT: &str = "Cannot import the cluster run";

/// Writes the verl launcher folder for `toml` (the editor's text) into `out_dir`, as
/// `envace export verl CONFIG --out DIR [--set KEY=VALUE]… [--force]` does. `sets` gives the
/// settings of `VERL_SET_KEYS` (empty values are left out); `force` replaces the files of a
/// folder that is not empty. Settings to provide and a folder that is not empty are results
/// (`written: false`), for the editor to ask about and retry.
#[tauri::command]
#[specta::specta]
pub async fn export_verl(
    state: State<'_, StudioState>,
    toml: String,
    out_dir: String,
    sets: BTreeMap<String, String>,
    force: bool,
) -> Result<VerlExport, StudioError> {
    let config_path = state.config_path.clone();
    tauri::async_runtime::spawn_blocking(move || {
        export(config_path.as_deref(), &toml, out_dir.trim(), &sets, force)
    })
    .await
    .map_err(|err| StudioError::new(EXPORT_WHAT, err))?
}

/// Reads the cluster run folder `dir` (rollout dumps and console log) into the studio's run
/// store as an imported run, adding only what an earlier import of it did not.
#[tauri::command]
#[specta::specta]
pub async fn import_verl(
    state: State<'_, StudioState>,
    dir: String,
) -> Result<VerlImport, StudioError> {
    let store_path = state.store_path.clone();
    tauri::async_runtime::spawn_blocking(move || import(&store_path, Path::new(dir.trim())))
        .await
        .map_err(|err| StudioError::new(IMPORT_WHAT, err))?
}

/// The export of [`export_verl`], off the async runtime.
pub fn export(
    config_path: Option<&Path>,
    toml: &str,
    out_dir: &str,
    sets: &BTreeMap<String, String>,
    force: bool,
) -> Result<VerlExport, StudioError> {
    if out_dir.is_empty() {
        return Err(StudioError::new(
            EXPORT_WHAT,
            "choose a folder to write the launcher in",
        ));
    }
    let out = PathBuf::from(out_dir);
    let mut outcome = VerlExport {
        written: false,
        out_dir: out_dir.to_owned(),
        files: Vec::new(),
        warnings: Vec::new(),
        n_train: 0,
        n_validation: 0,
        n_overrides: 0,
        missing: Vec::new(),
        not_empty: false,
        problem: None,
    };
    if !force && is_non_empty_dir(&out) {
        outcome.not_empty = true;
        outcome.problem = Some(format!(
            "{out_dir} is not empty; overwriting replaces the launcher's files in it"
        ));
        return Ok(outcome);
    }
    let sets: BTreeMap<String, String> = sets
        .iter()
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .filter(|(key, value)| !key.is_empty() && !value.is_empty())
        .collect();

    // Parsed as the CLI parses a file (paths relative to the config's folder), then the text
    // as a file for the engine to copy into the launcher.
    let experiment = parse_config(config_path, toml)
        .map_err(|err| StudioError::from_engine(EXPORT_WHAT, &err))?;
    let source = ConfigFile::for_text(config_path, toml)
        .map_err(|err| StudioError::from_engine(EXPORT_WHAT, &err))?;
    let exported = verl::export_experiment(
        &experiment,
        source.path(),
        &out,
        &ExportOptions { sets, force },
    );
    match exported {
        Ok(report) => {
            outcome.written = true;
            outcome.files = report.files;
            outcome.warnings = report.warnings;
            outcome.n_train = count(report.n_train);
            outcome.n_validation = count(report.n_validation);
            outcome.n_overrides = count(report.override_keys.len());
            Ok(outcome)
        }
        Err(envace::Error::Data { message, .. }) if message.contains("--set ") => {
            outcome.missing = asked_settings(&message);
            outcome.problem = Some(message);
            Ok(outcome)
        }
        Err(err) => Err(StudioError::from_engine(EXPORT_WHAT, &err)),
    }
}

/// The import of [`import_verl`], off the async runtime.
pub fn import(store_path: &Path, dir: &Path) -> Result<VerlImport, StudioError> {
    if dir.as_os_str().is_empty() {
        return Err(StudioError::new(IMPORT_WHAT, "choose the run's folder"));
    }
    let mut store =
        Store::open(store_path).map_err(|err| StudioError::from_engine(IMPORT_WHAT, &err))?;
    let report =
        verl::import(&mut store, dir).map_err(|err| StudioError::from_engine(IMPORT_WHAT, &err))?;
    let source = store
        .imported_from(report.run)
        .map_err(|err| StudioError::from_engine(IMPORT_WHAT, &err))?
        .unwrap_or_else(|| dir.display().to_string());
    Ok(VerlImport {
        run: i32::try_from(report.run.0).unwrap_or(i32::MAX),
        name: report.name,
        source,
        created: report.created,
        trajectories: count(report.trajectories),
        metrics: count(report.metrics),
        skipped: report.skipped.iter().map(ToString::to_string).collect(),
    })
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn is_non_empty_dir(path: &Path) -> bool {
    path.is_dir() && std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_some())
}

/// The `--set` settings an export error asks for, in `VERL_SET_KEYS` order: the engine names
/// each as `--set KEY=…` (a missing setting) or `--set KEY:` (an unknown one, never offered).
pub fn asked_settings(message: &str) -> Vec<String> {
    verl::SET_KEYS
        .iter()
        .map(|(key, _)| *key)
        .filter(|key| message.contains(&format!("--set {key}=")))
        .map(str::to_owned)
        .collect()
}

/// The config, validated, its relative paths read against the folder of the opened file
/// (as `config::parse_file` reads them), or against the working folder without one.
fn parse_config(
    config_path: Option<&Path>,
    toml: &str,
) -> envace::Result<config::ExperimentConfig> {
    let name = config_path.map_or_else(|| "unsaved config".to_owned(), |p| p.display().to_string());
    let mut experiment = config::parse(toml, &name).map_err(envace::Error::Config)?;
    let base = config_path
        .and_then(Path::parent)
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    experiment.resolve_paths(base);
    Ok(experiment)
}

/// The editor's text as a config file for the engine: the opened file itself when the text is
/// what it holds, else a scratch copy beside it (so relative paths mean what they mean in the
/// file), removed when dropped. Without a file, the scratch copy goes to the temporary folder.
#[derive(Debug)]
struct ConfigFile {
    path: PathBuf,
    scratch: bool,
}

impl ConfigFile {
    fn for_text(config_path: Option<&Path>, toml: &str) -> envace::Result<ConfigFile> {
        if let Some(path) = config_path
            && std::fs::read_to_string(path).is_ok_and(|text| text == toml)
        {
            return Ok(ConfigFile {
                path: path.to_path_buf(),
                scratch: false,
            });
        }
        let beside = config_path
            .and_then(Path::parent)
            .filter(|dir| !dir.as_os_str().is_empty() && dir.is_dir());
        let dir = match beside {
            Some(dir) => dir.to_path_buf(),
            None => std::env::temp_dir(),
        };
        let stem = config_path.and_then(Path::file_stem).map_or_else(
            || "unsaved".to_owned(),
            |s| s.to_string_lossy().into_owned(),
        );
        let path = dir.join(format!(".{stem}.export-{}.toml", std::process::id()));
        std::fs::write(&path, toml).map_err(|err| envace::Error::io(&path, err))?;
        Ok(ConfigFile {
            path,
            scratch: true,
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        if self.scratch {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asked_settings_names_the_missing_keys_in_order() {
        let message = "the reference launcher needs settings the config lacks: --set judge_url=URL \
                       ([judge].kind = \"rule\"); --set model_path=DIR ([model].source = \"tiny\"); \
                       --set nnodes=x: expected a positive whole number";
        assert_eq!(
            asked_settings(message),
            vec!["model_path", "judge_url", "nnodes"]
        );
        assert!(
            asked_settings("--set foo: unknown setting (known: model_path, judge_url)").is_empty()
        );
    }
}
