//! Installs what the project needs on Debian or Ubuntu, or prints the exact command to run.

use std::process::Command;

use anyhow::{Context, Result, bail};

/// Debian packages the build and the tests need, each with why.
const APT_PACKAGES: &[(&str, &str)] = &[
    ("gcc", "compiles the bundled SQLite of the run store"),
    ("libc6-dev", "C headers for the bundled SQLite"),
];

/// Makes sure every requirement is present, installing what is missing when possible.
pub fn ensure_all() -> Result<()> {
    ensure_apt(APT_PACKAGES)
}

fn ensure_apt(packages: &[(&str, &str)]) -> Result<()> {
    if Command::new("dpkg-query")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!(
            "xtask: not a Debian-based system; make sure these are installed: {}",
            packages
                .iter()
                .map(|(name, why)| format!("{name} ({why})"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Ok(());
    }
    let missing: Vec<&str> = packages
        .iter()
        .filter(|(name, _)| !apt_installed(name))
        .map(|(name, _)| *name)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let install = format!(
        "apt-get update && apt-get install -y --no-install-recommends {}",
        missing.join(" ")
    );
    if !is_root() {
        bail!(
            "missing Debian packages: {}; install them with:\n  sudo sh -c '{install}'",
            missing.join(", ")
        );
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    let status = Command::new("sh")
        .args(["-c", &install])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("cannot run apt-get")?;
    if !status.success() {
        bail!("`{install}` failed ({status})");
    }
    Ok(())
}

fn apt_installed(name: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", name])
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("install ok installed"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}
