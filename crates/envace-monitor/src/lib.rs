//! The native run monitor: a light eframe window (wgpu renderer) that follows the runs of an
//! EnvACE run store as they train and draws their curves side by side, for machines without a
//! webview or over SSH with X forwarding. It reads the store through the engine's read API
//! only (no SQL, no training logic).
//!
//! `follow.rs` keeps the store's runs and series up to date by row id, `series.rs` shapes a
//! series for drawing, `charts.rs` draws seed bands, evaluation scores and the fidelity
//! heatmap, `episodes.rs` reads a run's episodes for the browser, `export.rs` saves a chart as
//! PNG, `app.rs` is the window.

use std::path::Path;

pub mod app;
pub mod charts;
pub mod episodes;
pub mod export;
pub mod follow;
pub mod series;

pub use app::MonitorApp;
pub use follow::{Follower, Point, PollStats, RunData};
pub use series::XAxis;

/// Opens the monitor window on the store at `store` drawing `runs` (ids or names; none: the
/// newest run), until it is closed.
pub fn run_window(store: &Path, runs: &[String]) -> Result<(), String> {
    let follower = Follower::open(store).map_err(|e| e.to_string())?;
    let app = MonitorApp::new(follower, runs).map_err(|e| e.to_string())?;
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title(format!("EnvACE monitor: {}", store.display()))
            .with_inner_size([1200.0, 800.0]),
        ..eframe::NativeOptions::default()
    };
    eframe::run_native(
        "envace-monitor",
        options,
        Box::new(move |_cc| Ok(Box::new(app))),
    )
    .map_err(|e| format!("the monitor window could not open: {e}"))
}
