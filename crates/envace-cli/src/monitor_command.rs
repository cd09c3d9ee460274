//! `envace monitor` and `envace train --monitor`: the native run monitor window
//! (`envace-monitor`), in this process or beside a training run as a child process.

use std::path::Path;
use std::process::{Child, ExitCode};

use anyhow::{Context, Result, bail};

/// Opens the monitor on the store at `store` drawing `runs`, until its window is closed.
pub fn monitor(store: &Path, runs: &[String]) -> Result<ExitCode> {
    check_display()?;
    #[cfg(feature = "monitor")]
    {
        envace_monitor::run_window(store, runs).map_err(anyhow::Error::msg)?;
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "monitor"))]
    {
        let _ = (store, runs);
        bail!("{}", NOT_BUILT)
    }
}

/// What a build without the monitor says.
#[cfg(not(feature = "monitor"))]
const NOT_BUILT: &str = "this envace was built without the native monitor (cargo feature `monitor`); build it with `cargo build --release -p envace-cli --features monitor`";

/// Refuses early, before any training starts, when no window can open here.
pub fn check_display() -> Result<()> {
    #[cfg(not(feature = "monitor"))]
    bail!("{}", NOT_BUILT);
    #[cfg(feature = "monitor")]
    {
        let has = |var: &str| std::env::var_os(var).is_some_and(|v| !v.is_empty());
        if !has("DISPLAY") && !has("WAYLAND_DISPLAY") {
            bail!(
                "the monitor needs a display and neither DISPLAY nor WAYLAND_DISPLAY is set (over SSH, connect with `ssh -X`; headless, run under `xvfb-run`); follow the run with `envace runs show` instead"
            );
        }
        Ok(())
    }
}

/// Starts `envace monitor RUN` as a child process on the store at `store`; the window stays
/// open when this process ends.
pub fn spawn_beside(store: &Path, run: &str) -> Result<Child> {
    let exe = std::env::current_exe().context("cannot find this envace executable")?;
    std::process::Command::new(exe)
        .arg("--store")
        .arg(store)
        .arg("monitor")
        .arg(run)
        .stdin(std::process::Stdio::null())
        .spawn()
        .context("cannot start the monitor window")
}
