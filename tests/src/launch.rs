//! Starting the studio in a real WebKitGTK webview under WebDriver: Xvfb on a free display,
//! WebKitWebDriver with `TAURI_WEBVIEW_AUTOMATION=true`, and a session whose browser is the studio
//! binary. Shared by the end-to-end tests and the chart benchmark (`cargo xtask bench chart`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::webdriver::{self, Session};

/// A process killed when dropped, so a failure leaves nothing running.
#[derive(Debug)]
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The path of `program` on `PATH`; panics naming the Debian package that provides it.
pub fn need(program: &str, package: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "{program} is not installed (Debian package {package}); `cargo xtask setup` installs it"
        )
    })
}

/// The studio binary the tests drive: `ENVACE_STUDIO_BIN` when set, else `envace-studio` in the
/// profile folder of the running executable (`target/debug/` for a test in `target/debug/deps/`
/// or an example in `target/debug/examples/`), where `cargo test --workspace` builds it for the
/// studio's own tests. Panics saying how to build it when it is missing.
pub fn studio_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("ENVACE_STUDIO_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let studio = profile_dir().join(format!("envace-studio{}", std::env::consts::EXE_SUFFIX));
    assert!(
        studio.is_file(),
        "the studio binary {} is missing: build it first (`cargo build -p envace-studio`; \
         `cargo test --workspace` builds it), or name one in ENVACE_STUDIO_BIN",
        studio.display()
    );
    studio
}

/// The `envace` command line binary: `ENVACE_CLI_BIN` when set, else the one in the same
/// profile folder as the studio (see [`studio_binary`]; `cargo test --workspace` builds it for
/// the CLI's tests).
pub fn cli_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("ENVACE_CLI_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let cli = profile_dir().join(format!("envace{}", std::env::consts::EXE_SUFFIX));
    assert!(
        cli.is_file(),
        "the envace binary {} is missing: build it first (`cargo build -p envace-cli`)",
        cli.display()
    );
    cli
}

/// The cargo profile folder of the running executable (`target/debug/` for a test in
/// `target/debug/deps/` or an example in `target/debug/examples/`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("cannot find the running executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("the running executable lies in a cargo profile folder")
        .to_path_buf()
}

/// Starts Xvfb on a free display and returns it with the display name.
pub fn start_display() -> (Guard, String) {
    let xvfb = need("Xvfb", "xvfb");
    let mut child = Command::new(xvfb)
        .args([
            "-displayfd",
            "1",
            "-screen",
            "0",
            "1400x900x24",
            "-nolisten",
            "tcp",
            // No server reset when the last client leaves: the tests connect and disconnect
            // while polling, and a connection made during a reset reads EOF.
            "-noreset",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start Xvfb");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("Xvfb's stdout is piped"))
        .read_line(&mut line)
        .expect("cannot read the display number from Xvfb");
    let display = format!(":{}", line.trim());
    assert!(display.len() > 1, "Xvfb did not report a display");
    (Guard(child), display)
}

/// A TCP port nothing listens on at the moment.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("cannot bind a loopback port")
        .port()
}

/// Starts WebKitWebDriver on `display` with extra environment variables (which the app it
/// starts inherits); returns it with its base URL once it answers as ready.
pub fn start_driver(display: &str, runtime_dir: &Path, env: &[(&str, &str)]) -> (Guard, String) {
    let driver_bin = need("WebKitWebDriver", "webkit2gtk-driver");
    let port = free_port();
    let driver = Command::new(driver_bin)
        .arg(format!("--port={port}"))
        .env("DISPLAY", display)
        .env("TAURI_WEBVIEW_AUTOMATION", "true")
        .env("XDG_RUNTIME_DIR", runtime_dir)
        .env("WEBKIT_DISABLE_COMPOSITING_MODE", "1")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start WebKitWebDriver");
    let driver = Guard(driver);
    let base = format!("http://127.0.0.1:{port}");
    if let Err(err) = webdriver::wait_ready(&base, Duration::from_secs(20)) {
        panic!("{err}");
    }
    (driver, base)
}

/// Opens a session on the driver at `base` whose browser is the studio `binary` on `config`
/// and `store`.
pub fn open_studio(
    base: &str,
    binary: &Path,
    config: &Path,
    store: &Path,
) -> Result<Session, String> {
    Session::start(
        base,
        json!({
            "webkitgtk:browserOptions": {
                "binary": binary,
                "args": [
                    "--config", config.display().to_string(),
                    "--store", store.display().to_string(),
                ],
            }
        }),
    )
}
