//! `envace export verl` and `envace import verl`: scale a config out to the reference verl
//! trainer on a Ray cluster, and bring that run's dumps and metrics back into the store.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use envace::config;
use envace::store::Store;
use envace::verl::{self, ExportOptions};

/// `envace export verl CONFIG --out DIR [--set KEY=VALUE]… [--force]`.
pub fn export_verl(file: &Path, out: &Path, sets: &[String], force: bool) -> Result<ExitCode> {
    let mut parsed = BTreeMap::new();
    for set in sets {
        let Some((key, value)) = set.split_once('=') else {
            bail!("--set {set:?}: expected KEY=VALUE (keys: {})", set_keys());
        };
        parsed.insert(key.trim().to_owned(), value.trim().to_owned());
    }
    let experiment = config::parse_file(file)?;
    let report = verl::export_experiment(
        &experiment,
        file,
        out,
        &ExportOptions {
            sets: parsed,
            force,
        },
    )
    .with_context(|| format!("exporting {} for verl", file.display()))?;
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    out!(
        "wrote {} ({} training and {} validation tasks, {} overrides): {}",
        report.out_dir.display(),
        report.n_train,
        report.n_validation,
        report.override_keys.len(),
        report.files.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

fn set_keys() -> String {
    verl::SET_KEYS
        .iter()
        .map(|(key, _)| *key)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `envace import verl DIR`.
pub fn import_verl(dir: &Path, store_path: &Path) -> Result<ExitCode> {
    let mut store = Store::open(store_path)?;
    let report = verl::import(&mut store, dir)?;
    for skip in &report.skipped {
        eprintln!("warning: {skip}");
    }
    out!(
        "{} run {} ({}) from {}: {} trajectories, {} metric rows added",
        if report.created {
            "imported"
        } else {
            "updated"
        },
        report.run.0,
        report.name,
        dir.display(),
        report.trajectories,
        report.metrics
    );
    Ok(ExitCode::SUCCESS)
}
