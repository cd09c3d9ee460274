//! `cargo xtask bundle`: the studio and the `envace` command line (with its native monitor) as a
//! Debian package and an AppImage, each with desktop entries, icon and version.
//!
//! The `.deb` is staged under `target/bundle/deb/` and built with `dpkg-deb`; its `Depends` come
//! from `dpkg-shlibdeps` over the two binaries (the libraries they link), plus the libraries the
//! monitor opens at run time (X11, xkbcommon, the Vulkan loader). The AppImage packs an AppDir
//! with `envace-appimage` behind our runtime (see that crate): it carries our binaries and
//! expects the system's WebKitGTK 4.1, as the `.deb` does.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::bench_runs::target_dir;

/// The package's name and version (the workspace's).
const PACKAGE: &str = "envace-studio";
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The icon's name in the icon theme and in both desktop entries.
const ICON: &str = "org.envace.studio";

/// Libraries the monitor opens with `dlopen` (winit's X11 and keyboard support, wgpu's Vulkan
/// loader), which `dpkg-shlibdeps` cannot see in the binaries.
const RUNTIME_DEPENDS: &[&str] = &[
    "libx11-6",
    "libx11-xcb1",
    "libxcursor1",
    "libxi6",
    "libxrandr2",
    "libxkbcommon-x11-0",
    "libvulkan1",
];
/// A Vulkan driver: the GPU's, or Mesa's lavapipe on the CPU.
const RECOMMENDS: &str = "mesa-vulkan-drivers | vulkan-icd";

/// A desktop entry (freedesktop.org) for one of the apps, with the project's icon.
fn desktop_entry(name: &str, generic: &str, comment: &str, exec: &str, keywords: &str) -> String {
    format!(
        "[Desktop Entry]\nType=Application\nName={name}\nGenericName={generic}\n\
         Comment={comment}\nExec={exec}\nIcon={ICON}\nTerminal=false\n\
         Categories=Development;Science;\nKeywords={keywords}\n"
    )
}

/// The studio's desktop entry.
fn studio_desktop() -> String {
    desktop_entry(
        "EnvACE Studio",
        "Agent training studio",
        "Set up, train and compare tool-using LLM agents with world rehearsal",
        "envace-studio",
        "LLM;agent;GRPO;reinforcement learning;rehearsal;",
    ) + "StartupWMClass=envace-studio\n"
}

/// The monitor's desktop entry (`envace monitor` on the default run store).
fn monitor_desktop() -> String {
    desktop_entry(
        "EnvACE Monitor",
        "Training run monitor",
        "Follow and compare the runs of an EnvACE run store live",
        "envace monitor",
        "LLM;agent;training;charts;",
    )
}

/// The AppImage's entry point: the studio, or `envace` when the first argument is `envace`
/// (`EnvACE_Studio-….AppImage envace monitor`) or the image was started through a link named
/// `envace` (`ARGV0`, set by the runtime).
const APP_RUN: &str = "#!/bin/sh\n\
# Starts EnvACE Studio, or the envace command line when the first argument is `envace` or the\n\
# image was started through a link named envace.\n\
HERE=\"${APPDIR:-$(dirname \"$(readlink -f \"$0\")\")}\"\n\
if [ \"$1\" = envace ]; then\n\
    shift\n\
    exec \"$HERE/usr/bin/envace\" \"$@\"\n\
fi\n\
if [ \"${ARGV0##*/}\" = envace ]; then\n\
    exec \"$HERE/usr/bin/envace\" \"$@\"\n\
fi\n\
exec \"$HERE/usr/bin/envace-studio\" \"$@\"\n";

/// What `cargo xtask bundle` made.
struct Made {
    deb: PathBuf,
    appimage: PathBuf,
}

/// `cargo xtask bundle [--no-build]`.
pub fn bundle(root: &Path, args: &[String]) -> Result<()> {
    let mut build = true;
    for arg in args {
        match arg.as_str() {
            "--no-build" => build = false,
            other => bail!("unknown bundle argument {other:?}; the one option is --no-build"),
        }
    }
    crate::setup::ensure_apt(&[
        (
            "dpkg-dev",
            "dpkg-shlibdeps finds the .deb's library dependencies",
        ),
        ("binutils", "strips the packaged binaries"),
        ("desktop-file-utils", "checks the desktop entries"),
    ])?;
    let target = target_dir(root);
    if build {
        crate::setup::ensure_all()?;
        // The studio embeds ui/dist at compile time.
        crate::npm("build")?;
        crate::cargo(&[
            "build",
            "--locked",
            "--release",
            "-p",
            "envace-studio",
            "-p",
            "envace-cli",
            "-p",
            "envace-appimage",
        ])?;
    }
    let release = target.join("release");
    let out = target.join("bundle");
    let made = make(root, &release, &out)?;
    let size = |p: &Path| fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    println!(
        "{}\t{:.1} MB\n{}\t{:.1} MB",
        made.deb.display(),
        size(&made.deb) as f64 / 1e6,
        made.appimage.display(),
        size(&made.appimage) as f64 / 1e6
    );
    println!(
        "install: sudo apt install {}   (or: sudo dpkg -i FILE && sudo apt-get install -f)",
        made.deb
            .canonicalize()
            .unwrap_or(made.deb.clone())
            .display()
    );
    Ok(())
}

/// Stages and builds both packages from the release binaries in `release` into `out`.
fn make(root: &Path, release: &Path, out: &Path) -> Result<Made> {
    let binaries = ["envace-studio", "envace"].map(|name| release.join(name));
    for binary in binaries
        .iter()
        .chain([&release.join("envace-appimage-runtime")])
    {
        ensure!(
            binary.is_file(),
            "{} is missing: run `cargo xtask bundle` without --no-build",
            binary.display()
        );
    }
    let icon = root.join("src-tauri/icons/icon.png");
    if out.exists() {
        fs::remove_dir_all(out).with_context(|| format!("cannot clear {}", out.display()))?;
    }

    // The files both packages carry, under a `usr/` prefix.
    let stage_usr = |usr: &Path| -> Result<()> {
        let bin = usr.join("bin");
        fs::create_dir_all(&bin)?;
        for binary in &binaries {
            let name = binary.file_name().context("binary name")?;
            strip_into(binary, &bin.join(name))?;
        }
        let apps = usr.join("share/applications");
        fs::create_dir_all(&apps)?;
        fs::write(apps.join(format!("{ICON}.desktop")), studio_desktop())?;
        fs::write(apps.join("org.envace.monitor.desktop"), monitor_desktop())?;
        let icons = usr.join("share/icons/hicolor/256x256/apps");
        fs::create_dir_all(&icons)?;
        fs::copy(&icon, icons.join(format!("{ICON}.png")))
            .with_context(|| format!("cannot copy {}", icon.display()))?;
        Ok(())
    };

    // The Debian package.
    let arch = output(Command::new("dpkg").arg("--print-architecture"))?;
    let name = format!("{PACKAGE}_{VERSION}_{arch}");
    let deb_root = out.join("deb").join(&name);
    stage_usr(&deb_root.join("usr"))?;
    for desktop in ["org.envace.studio.desktop", "org.envace.monitor.desktop"] {
        let path = deb_root.join("usr/share/applications").join(desktop);
        let checked = Command::new("desktop-file-validate").arg(&path).output();
        if let Ok(checked) = checked {
            let said = String::from_utf8_lossy(&checked.stdout).into_owned()
                + &String::from_utf8_lossy(&checked.stderr);
            ensure!(checked.status.success(), "{}: {said}", path.display());
        }
    }
    let doc = deb_root.join("usr/share/doc").join(PACKAGE);
    fs::create_dir_all(&doc)?;
    fs::write(doc.join("copyright"), copyright(root)?)?;
    let packaged: Vec<PathBuf> = ["envace-studio", "envace"]
        .iter()
        .map(|name| PathBuf::from("usr/bin").join(name))
        .collect();
    let depends = depends(&deb_root, &packaged)?;
    let installed_kib = dir_size(&deb_root)?.div_ceil(1024);
    let debian = deb_root.join("DEBIAN");
    fs::create_dir_all(&debian)?;
    fs::write(
        debian.join("control"),
        control(&arch, &depends, installed_kib),
    )?;
    let deb = out.join(format!("{name}.deb"));
    run(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "--build"])
            .arg(&deb_root)
            .arg(&deb),
        "dpkg-deb --build",
    )?;

    // The AppImage.
    let appdir = out.join("appimage").join("EnvACE_Studio.AppDir");
    stage_usr(&appdir.join("usr"))?;
    let app_run = appdir.join("AppRun");
    fs::write(&app_run, APP_RUN)?;
    fs::set_permissions(&app_run, fs::Permissions::from_mode(0o755))?;
    fs::write(appdir.join(format!("{ICON}.desktop")), studio_desktop())?;
    fs::copy(&icon, appdir.join(format!("{ICON}.png")))?;
    std::os::unix::fs::symlink(format!("{ICON}.png"), appdir.join(".DirIcon"))?;
    let runtime = out.join("appimage").join("runtime");
    strip_into(&release.join("envace-appimage-runtime"), &runtime)?;
    let machine = output(Command::new("uname").arg("-m"))?;
    let appimage = out.join(format!("EnvACE_Studio-{VERSION}-{machine}.AppImage"));
    let packed = envace_appimage::pack(&runtime, &appdir, &appimage)?;
    eprintln!(
        "xtask: {} entries packed behind a {} kB runtime",
        packed.entries,
        packed.offset / 1000
    );
    Ok(Made { deb, appimage })
}

/// Copies `from` to `to` without its symbols (what Debian's packaging tools do to binaries).
fn strip_into(from: &Path, to: &Path) -> Result<()> {
    run(
        Command::new("strip")
            .args(["--strip-unneeded", "-o"])
            .arg(to)
            .arg(from),
        "strip",
    )
}

/// The `Depends` field: what `dpkg-shlibdeps` finds for `binaries` (paths under `deb_root`),
/// then the libraries the monitor opens at run time.
fn depends(deb_root: &Path, binaries: &[PathBuf]) -> Result<String> {
    // dpkg-shlibdeps reads the package list from debian/control in its working folder.
    let work = deb_root.with_extension("shlibdeps");
    fs::create_dir_all(work.join("debian"))?;
    fs::write(
        work.join("debian/control"),
        format!("Source: {PACKAGE}\n\nPackage: {PACKAGE}\nArchitecture: any\n"),
    )?;
    let mut command = Command::new("dpkg-shlibdeps");
    command.arg("-O").current_dir(&work);
    for binary in binaries {
        command.arg(format!("-e{}", deb_root.join(binary).display()));
    }
    let found = output(&mut command)?;
    fs::remove_dir_all(&work)?;
    let found = found
        .lines()
        .find_map(|line| line.strip_prefix("shlibs:Depends="))
        .with_context(|| format!("dpkg-shlibdeps printed no shlibs:Depends: {found}"))?;
    let mut all: Vec<String> = found.split(", ").map(str::to_owned).collect();
    for extra in RUNTIME_DEPENDS {
        if !all.iter().any(|d| d.split(' ').next() == Some(extra)) {
            all.push((*extra).to_owned());
        }
    }
    Ok(all.join(", "))
}

/// The package's control file.
fn control(arch: &str, depends: &str, installed_kib: u64) -> String {
    format!(
        "Package: {PACKAGE}\n\
         Version: {VERSION}\n\
         Architecture: {arch}\n\
         Maintainer: EnvACE Studio developers <studio@envace.org>\n\
         Installed-Size: {installed_kib}\n\
         Depends: {depends}\n\
         Recommends: {RECOMMENDS}\n\
         Section: science\n\
         Priority: optional\n\
         Description: train tool-using LLM agents with world rehearsal\n \
         EnvACE Studio is a desktop studio for researchers who train tool-using\n \
         LLM agents with world rehearsal: one policy both acts and plays the\n \
         environment, trained with role-wise GRPO. It sets up experiments, runs\n \
         and follows training, and compares real against rehearsed tool responses.\n \
         .\n \
         The package holds the studio (envace-studio) and the envace command line,\n \
         whose `envace monitor` is a native window that follows training runs.\n"
    )
}

/// The copyright file: the workspace's licence.
fn copyright(root: &Path) -> Result<String> {
    let manifest = fs::read_to_string(root.join("Cargo.toml"))?;
    let license = manifest
        .lines()
        .find_map(|l| l.strip_prefix("license = "))
        .map(|l| l.trim_matches('"').to_owned())
        .context("the workspace Cargo.toml has no license")?;
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: EnvACE Studio\n\n\
         Files: *\n\
         Copyright: EnvACE Studio developers\n\
         License: {license}\n"
    ))
}

/// Bytes of the files under `dir`, links counted by their own size.
fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let meta = fs::symlink_metadata(&path)?;
        total += if meta.is_dir() {
            dir_size(&path)?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// A command's trimmed stdout, failing with its stderr.
fn output(command: &mut Command) -> Result<String> {
    let shown = format!("{command:?}");
    let out = command
        .output()
        .with_context(|| format!("cannot run {shown}"))?;
    ensure!(
        out.status.success(),
        "{shown} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn run(command: &mut Command, what: &str) -> Result<()> {
    output(command)
        .with_context(|| format!("{what} failed"))
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_file_has_every_field_dpkg_needs() {
        let text = control("amd64", "libc6 (>= 2.34), libvulkan1", 1234);
        for field in [
            "Package: envace-studio\n",
            "Architecture: amd64\n",
            "Installed-Size: 1234\n",
            "Depends: libc6 (>= 2.34), libvulkan1\n",
        ] {
            assert!(text.contains(field), "{field} missing from\n{text}");
        }
        assert!(text.contains(&format!("Version: {VERSION}\n")));
        // Every continuation line of the description starts with a space; none is empty.
        let description = text.split_once("Description: ").unwrap().1;
        for line in description.lines().skip(1) {
            assert!(line.starts_with(' ') && line.len() > 1, "{line:?}");
        }
    }

    #[test]
    fn app_run_starts_the_studio_or_the_command_line() {
        let tmp = std::env::temp_dir().join(format!("xtask-apprun-{}", std::process::id()));
        let bin = tmp.join("usr/bin");
        fs::create_dir_all(&bin).unwrap();
        for name in ["envace", "envace-studio"] {
            let path = bin.join(name);
            fs::write(&path, format!("#!/bin/sh\necho {name} \"$@\"\n")).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let app_run = tmp.join("AppRun");
        fs::write(&app_run, APP_RUN).unwrap();
        fs::set_permissions(&app_run, fs::Permissions::from_mode(0o755)).unwrap();
        let said = |args: &[&str], argv0: &str| {
            let out = Command::new("sh")
                .arg(&app_run)
                .args(args)
                .env_remove("APPDIR")
                .env("ARGV0", argv0)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        let image = "./EnvACE_Studio.AppImage";
        assert_eq!(
            said(&["envace", "monitor", "--store", "a b"], image),
            "envace monitor --store a b"
        );
        assert_eq!(said(&["--help"], image), "envace-studio --help");
        assert_eq!(said(&[], image), "envace-studio");
        assert_eq!(said(&["monitor"], "/opt/bin/envace"), "envace monitor");
        assert_eq!(said(&["envace"], "/opt/bin/envace-studio"), "envace");
        fs::remove_dir_all(&tmp).unwrap();
    }
}
