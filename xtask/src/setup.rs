//! Installs what the project needs on Debian or Ubuntu, or prints the exact command to run.

use std::process::Command;

use anyhow::{Context, Result, bail};

/// Debian packages the build and the tests need, each with why.
const APT_PACKAGES: &[(&str, &str)] = &[
    ("gcc", "compiles the bundled SQLite of the run store"),
    ("libc6-dev", "C headers for the bundled SQLite"),
    (
        "pkg-config",
        "finds the GTK and WebKit libraries of the studio",
    ),
    ("libwebkit2gtk-4.1-dev", "the studio's webview"),
    ("libjavascriptcoregtk-4.1-dev", "the studio's webview"),
    ("libgtk-3-dev", "the studio's window and file dialogs"),
    ("libsoup-3.0-dev", "the studio's webview networking"),
    ("librsvg2-dev", "icons in the studio"),
    (
        "webkit2gtk-driver",
        "WebKitWebDriver, which drives the studio in end-to-end tests",
    ),
    (
        "xvfb",
        "a virtual display for the studio's end-to-end tests",
    ),
    ("xauth", "X authority for the virtual display"),
    (
        "libgl1-mesa-dri",
        "software OpenGL for the webview under Xvfb",
    ),
    ("libegl1", "EGL for the webview"),
    (
        "fonts-dejavu-core",
        "the fonts the studio's screenshots are rendered with",
    ),
];

/// Node.js and npm build and test the studio's front end. They are checked as commands, since
/// they often come from elsewhere than Debian (NodeSource's `nodejs` ships npm and conflicts
/// with Debian's `npm`); when missing, Debian's packages are installed.
const NODE_PACKAGES: &[(&str, &str)] = &[
    ("nodejs", "builds and tests the studio's front end"),
    ("npm", "installs the front end's packages"),
];

/// Makes sure every requirement is present, installing what is missing when possible.
pub fn ensure_all() -> Result<()> {
    ensure_apt(APT_PACKAGES)?;
    let has = |program: &str| Command::new(program).arg("--version").output().is_ok();
    if !(has("node") && has("npm")) {
        ensure_apt(NODE_PACKAGES)?;
    }
    ensure_npm_packages()
}

/// Installs the front end's npm packages from `ui/package-lock.json` when they are missing or
/// older than the lock file.
fn ensure_npm_packages() -> Result<()> {
    let lock = std::path::Path::new("ui/package-lock.json");
    let installed = std::path::Path::new("ui/node_modules/.package-lock.json");
    let modified = |path: &std::path::Path| path.metadata().and_then(|m| m.modified()).ok();
    let fresh = matches!((modified(installed), modified(lock)), (Some(i), Some(l)) if i >= l);
    if fresh {
        return Ok(());
    }
    eprintln!("xtask: $ npm ci (in ui/)");
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir("ui")
        .status()
        .context("cannot run npm; install Node.js 20 or newer with npm")?;
    if !status.success() {
        bail!("`npm ci` in ui/ failed ({status})");
    }
    Ok(())
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
