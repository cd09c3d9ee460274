//! EnvACE Studio's desktop host: a thin Tauri layer of typed commands over the engine.

pub mod cluster;
pub mod commands;
pub mod contract;
pub mod device_check;
pub mod endpoint_check;
pub mod evaluation;
pub mod secrets;
pub mod training;

#[cfg(test)]
mod security_tests;

use std::path::PathBuf;

/// What the host knows at start.
#[derive(Debug, Clone)]
pub struct StudioState {
    /// The run store the studio reads and writes.
    pub store_path: PathBuf,
    /// The config to open (created on first save when it does not exist yet).
    pub config_path: Option<PathBuf>,
}

/// Every command and event the front end may use; the bindings are generated from this.
pub fn specta_builder() -> tauri_specta::Builder<tauri::Wry> {
    tauri_specta::Builder::<tauri::Wry>::new()
        // Config values cross as `serde_json::Value`, whose integers are i64; they travel as JSON
        // numbers either way, so typing them as `number` describes the wire truthfully.
        .dangerously_cast_bigints_to_number()
        // Every contract type only flows out to the front end: one TypeScript type each.
        .disable_serde_phases()
        .commands(tauri_specta::collect_commands![
            commands::presets,
            commands::config_schema,
            commands::check_config,
            commands::initial_document,
            commands::open_preset,
            commands::set_field,
            commands::remove_field,
            commands::save_config,
            commands::open_config,
            commands::diff_against_preset,
            commands::list_runs,
            commands::pending_mcp_servers,
            commands::confirm_mcp_server,
            commands::start_training,
            commands::pause_training,
            commands::resume_training,
            commands::stop_training,
            commands::active_training,
            commands::run_metrics,
            commands::run_evals,
            commands::run_eval_tasks,
            commands::run_config,
            commands::diff_runs,
            commands::run_episodes,
            commands::run_group,
            commands::save_png,
            commands::save_svg,
            commands::check_endpoint,
            commands::check_device,
            commands::pick_path,
            commands::store_api_key,
            commands::forget_api_key,
            commands::run_checkpoints,
            commands::start_eval,
            commands::stop_eval,
            commands::active_eval,
            cluster::export_verl,
            cluster::import_verl,
        ])
        .events(tauri_specta::collect_events![
            contract::TrainingEvent,
            evaluation::EvalEvent
        ])
        // What a job records (metric keys with labels, units and charts; evaluation categories):
        // the charts draw what the engine declares instead of copies of its strings.
        .constant("METRIC_CATALOGUE", envace::metrics::CATALOGUE)
        // The settings "Export for cluster…" may ask for (`--set KEY=VALUE`), with what each is.
        .constant("VERL_SET_KEYS", envace::verl::SET_KEYS)
}

/// Header of the generated bindings file.
pub const BINDINGS_HEADER: &str = "// Generated from src-tauri (tests/bindings.rs); do not edit. Regenerate with\n// UPDATE_EXPECT=1 cargo test -p envace-studio --test bindings\n";

/// Writes the TypeScript bindings of [`specta_builder`] to `path`.
pub fn export_bindings(path: &std::path::Path) -> Result<(), String> {
    specta_builder()
        .export(
            specta_typescript::Typescript::default().header(BINDINGS_HEADER),
            path,
        )
        .map_err(|err| format!("cannot export bindings to {}: {err}", path.display()))
}

/// A window asks to close while a job trains: the close waits until the job has checkpointed
/// and stopped (run status `stopped`), for at most [`training::CLOSE_STOP_TIMEOUT`].
fn close_after_training(window: &tauri::Window, api: &tauri::CloseRequestApi) {
    use tauri::Manager as _;
    let training = window.state::<training::Training>();
    let Some(run) = training.stop_for_close(window.app_handle()) else {
        return;
    };
    let closing = window.clone();
    let spawned = std::thread::Builder::new()
        .name("studio-close".to_owned())
        .spawn(move || {
            let window = closing;
            let training = window.state::<training::Training>();
            if !training.wait_ended(run, training::CLOSE_STOP_TIMEOUT) {
                eprintln!(
                    "envace-studio: run {run} did not stop within {:?}; closing anyway",
                    training::CLOSE_STOP_TIMEOUT
                );
            }
            // `destroy` closes without asking again.
            if let Err(err) = window.destroy() {
                eprintln!("envace-studio: cannot close the window: {err}");
            }
        });
    match spawned {
        Ok(_) => api.prevent_close(),
        // Nothing could close the window later: let it close now.
        Err(err) => eprintln!("envace-studio: cannot wait for run {run} to stop: {err}"),
    }
}

/// Opens the studio window and runs until it closes.
pub fn run(state: StudioState) -> Result<(), tauri::Error> {
    let builder = specta_builder();
    // Endpoints whose `api_key_env` variable is not set find their key in the OS keyring.
    envace::openai::set_key_source(Box::new(secrets::Keyring));
    tauri::Builder::default()
        .plugin(tauri_plugin_dialog::init())
        .manage(state)
        .manage(training::Training::default())
        .manage(evaluation::Evaluation::default())
        .invoke_handler(builder.invoke_handler())
        .on_window_event(|window, event| {
            if let tauri::WindowEvent::CloseRequested { api, .. } = event {
                // A running evaluation is stopped: it stores nothing until it is done.
                use tauri::Manager as _;
                window.state::<evaluation::Evaluation>().stop();
                close_after_training(window, api);
            }
        })
        .setup(move |app| {
            builder.mount_events(app);
            Ok(())
        })
        .run(tauri::generate_context!())
}
