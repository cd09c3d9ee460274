//! Scale-out through the reference EnvACE implementation (verl on Ray): export an experiment
//! as a launcher folder for its checklist trainer, and import that run's rollout dumps and
//! logged metrics back into the run store.
//!
//! [`export`] writes `run.sh` (the environment variables and Hydra overrides the reference's
//! `examples/drmas_trainer/run_checklist_share.sh` reads, mapped from our config), a
//! `README.md` with the cluster prerequisites, a copy of the config (`envace.toml`) and the
//! checklist dataset converted from our tasks (`data/train.parquet`, `data/validation.parquet`
//! and the tool dataset `data/checklist_tools.json`). A setting with no equivalent comes back
//! as a warning; a setting the reference needs and the config lacks is an error naming the
//! `--set KEY=VALUE` that provides it.
//!
//! [`import`] reads such a folder after (or while) the cluster runs it: the rollout dumps
//! (`rollout_dumps/STEP.jsonl`, one line per sample) become trajectories and per-step reward
//! metrics, the console log (`logs/console.log`, `step:N - key:value - …`) becomes metric rows
//! under `verl/…`. The run is marked imported (`runs.imported_from`); each file's consumed
//! lines are remembered with the rows in one transaction, so importing again adds only what
//! the files gained.
//!
//! Facts about the reference (key names, column names, dump fields) come from
//! github.com/Within-yao/EnvACE at commit [`REFERENCE_COMMIT`].

mod export;
mod import;
pub mod parquet;

pub use export::{ExportInput, ExportOptions, ExportReport, SET_KEYS, dataset_fields, export};
pub use import::{ImportReport, ImportSkip, import};

/// [`export`] of `config` (read from `config_path`) with the task pools its job would train
/// on (the RL pool) and evaluate on (the held-out tasks), as `envace export verl` and the
/// studio's "Export for cluster…" write them.
pub fn export_experiment(
    config: &crate::config::ExperimentConfig,
    config_path: &std::path::Path,
    out_dir: &std::path::Path,
    options: &ExportOptions,
) -> crate::error::Result<ExportReport> {
    use crate::controller::{JobPool, job_pool};
    let sources = crate::rl::session::load_sources(config)?;
    let train = job_pool(config, &sources, JobPool::Rl)?;
    let validation = job_pool(config, &sources, JobPool::HeldOut)?;
    export(
        config,
        config_path,
        out_dir,
        ExportInput {
            train: &train,
            validation: &validation,
            sources: &sources,
        },
        options,
    )
}

/// The reference commit the launcher and dataset formats follow.
pub const REFERENCE_COMMIT: &str = "173e9416750670abb58f6aaed8310c82c20a3754";

/// The reference's agent id of the acting role.
pub const CALLER_AGENT: &str = "Tool Caller Agent";

/// The reference's agent id of the rehearsing role.
pub const SIMULATOR_AGENT: &str = "Tool Simulator Agent";
