//! The runtime at the head of the studio's AppImage: unpacks the payload into the cache on the
//! first start and starts its `AppRun` with the user's arguments (see the library's docs).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

const HELP: &str = "\
This is an AppImage of EnvACE Studio. Run it to start the studio; any arguments go to it.

Options the image itself answers (the rest go to the application):
  --appimage-help               this text
  --appimage-version            the runtime's version
  --appimage-offset             the byte offset of the SquashFS payload
  --appimage-extract            unpack the payload into ./squashfs-root
  --appimage-extract-and-run    start the application (what a plain start does)

On the first start the payload is unpacked into $XDG_CACHE_HOME/envace-appimage (or
~/.cache/envace-appimage) in a folder named after a hash of the payload; later starts use it.
A FUSE mount is not used, so the image runs where /dev/fuse is missing.";

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("AppImage runtime: {error:#}");
            ExitCode::from(127)
        }
    }
}

fn run() -> Result<ExitCode> {
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    let mut rest: Vec<OsString> = args.collect();
    let image = std::env::current_exe().context("cannot find the AppImage's own path")?;
    let offset = envace_appimage::payload_offset(&image)?;

    let option = rest
        .first()
        .and_then(|a| a.to_str())
        .filter(|a| a.starts_with("--appimage-"));
    match option {
        Some("--appimage-help") => println!("{HELP}"),
        Some("--appimage-version") => {
            println!("envace-appimage-runtime {}", env!("CARGO_PKG_VERSION"))
        }
        Some("--appimage-offset") => println!("{offset}"),
        Some("--appimage-extract") => {
            let dest = PathBuf::from("squashfs-root");
            if dest.exists() {
                bail!("{} exists already: move it away first", dest.display());
            }
            let n = envace_appimage::unpack(&image, offset, &dest)?;
            eprintln!("unpacked {n} entries into {}", dest.display());
        }
        Some("--appimage-extract-and-run") => {
            rest.remove(0);
            return start(&image, offset, &argv0, rest);
        }
        Some(other) => bail!("unknown option {other}; --appimage-help lists the image's options"),
        None => return start(&image, offset, &argv0, rest),
    }
    Ok(ExitCode::SUCCESS)
}

/// Replaces this process with the image's `AppRun`, with the variables an AppImage's
/// application expects (`APPIMAGE`, `APPDIR`, `ARGV0`, `OWD`).
fn start(image: &Path, offset: u64, argv0: &OsString, args: Vec<OsString>) -> Result<ExitCode> {
    let cache = envace_appimage::cache_root();
    let appdir = envace_appimage::unpacked(image, offset, &cache, |dir| {
        eprintln!(
            "First start of this image: unpacking it into {} ...",
            dir.display()
        );
    })?;
    let app_run = appdir.join("AppRun");
    let mut command = Command::new(&app_run);
    command
        .args(args)
        .env("APPIMAGE", image)
        .env("APPDIR", &appdir)
        .env("ARGV0", argv0);
    if let Ok(cwd) = std::env::current_dir() {
        command.env("OWD", cwd);
    }
    let error = command.exec();
    Err(error).with_context(|| format!("cannot start {}", app_run.display()))
}
