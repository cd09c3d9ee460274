//! `cargo xtask check aarch64`: cross-compiles the engine and the CLI for 64-bit ARM Linux
//! (`aarch64-unknown-linux-gnu`, the NEON kernels in place of the x86 ones), failing on a
//! warning, and runs the engine's CPU-kernel and model tests under `qemu-aarch64`, so that the
//! NEON kernels are checked against the scalar reference on an x86-64 machine.
//!
//! It needs Rust's standard library for the target (`rustup target add`, done here when
//! missing), Debian's cross compiler for the C and C++ parts of the dependencies (SQLite, the
//! tokenizer's suffix arrays) and `qemu-user`; as root it installs them. The build goes to
//! `target/aarch64` so that it does not disturb the native one. Emulation runs the tests about
//! ten times slower than a native CPU would, so it runs the engine's `model::` tests (kernels,
//! decoding and training parity), not the whole suite.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The Rust target of 64-bit ARM Linux with glibc.
const TARGET: &str = "aarch64-unknown-linux-gnu";
/// Debian packages of the cross build and the emulated test run, each with why.
const PACKAGES: &[(&str, &str)] = &[
    (
        "gcc-aarch64-linux-gnu",
        "links aarch64 binaries and compiles the dependencies' C (SQLite)",
    ),
    (
        "g++-aarch64-linux-gnu",
        "compiles the dependencies' C++ (the tokenizer's suffix arrays)",
    ),
    ("libc6-dev-arm64-cross", "aarch64 C library to link against"),
    (
        "qemu-user",
        "runs the aarch64 test binaries on this machine",
    ),
];
/// The test filter run under emulation: the engine's model code, kernels included.
const TEST_FILTER: &str = "model::";

/// The environment of a cargo build for [`TARGET`] into `target_dir`: the cross compilers for
/// the build scripts' C and C++, the linker, and qemu as the runner of test binaries (with the
/// cross C library as its root), warnings denied.
fn cross_env(target_dir: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("CARGO_TARGET_DIR", target_dir.display().to_string()),
        (
            "CC_aarch64_unknown_linux_gnu",
            "aarch64-linux-gnu-gcc".into(),
        ),
        (
            "CXX_aarch64_unknown_linux_gnu",
            "aarch64-linux-gnu-g++".into(),
        ),
        (
            "AR_aarch64_unknown_linux_gnu",
            "aarch64-linux-gnu-ar".into(),
        ),
        (
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
            "aarch64-linux-gnu-gcc".into(),
        ),
        (
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER",
            "qemu-aarch64 -L /usr/aarch64-linux-gnu".into(),
        ),
        ("RUSTFLAGS", "-D warnings".into()),
    ]
}

/// Installs the Rust target when `rustup` lacks it; a clear error where it cannot be fetched.
fn ensure_target() -> Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("cannot run rustup; the aarch64 check needs a rustup-managed toolchain")?;
    if String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|line| line.trim() == TARGET)
    {
        return Ok(());
    }
    eprintln!("xtask: $ rustup target add {TARGET}");
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status()
        .context("cannot run rustup")?;
    if !status.success() {
        bail!(
            "`rustup target add {TARGET}` failed ({status}): the aarch64 standard library could not be installed, so the ARM build cannot be checked here"
        );
    }
    Ok(())
}

/// Runs the check; prints what was built and tested and how long each part took.
pub fn check_aarch64(root: &Path) -> Result<()> {
    crate::setup::ensure_apt(PACKAGES)?;
    ensure_target()?;
    let target_dir = root.join("target").join("aarch64");
    let envs = cross_env(&target_dir);
    let started = Instant::now();
    crate::cargo_env(
        &[
            "clippy",
            "--target",
            TARGET,
            "-p",
            "envace",
            "-p",
            "envace-cli",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &envs,
    )?;
    let clippy_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    crate::cargo_env(&["build", "--target", TARGET, "-p", "envace-cli"], &envs)?;
    let build_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    crate::cargo_env(
        &[
            "test",
            "--target",
            TARGET,
            "-p",
            "envace",
            "--lib",
            "--",
            TEST_FILTER,
        ],
        &envs,
    )?;
    let test_secs = started.elapsed().as_secs_f64();
    let cli = target_dir.join(TARGET).join("debug").join("envace");
    eprintln!(
        "xtask: aarch64 check passed: clippy (engine and CLI, every target) {clippy_secs:.0} s, \
         CLI build {build_secs:.0} s ({}), engine `{TEST_FILTER}` tests under qemu-aarch64 {test_secs:.0} s",
        cli.display()
    );
    Ok(())
}
