//! Packs small AppDirs behind the real runtime binary and runs the images as a user would: the
//! first start unpacks into the cache, later starts reuse it, arguments and the AppImage
//! variables reach `AppRun`, `--appimage-extract` keeps modes and links, and damaged images or
//! AppDirs fail with errors that name the file.
#![allow(clippy::unwrap_used)] // Test code: a panic here is the test failing, with its message.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RUNTIME: &str = env!("CARGO_BIN_EXE_envace-appimage-runtime");

/// An AppDir whose AppRun prints its arguments and the AppImage variables, with a nested
/// executable, a read-only folder and a relative link.
fn appdir(root: &Path) -> PathBuf {
    let dir = root.join("Demo.AppDir");
    fs::create_dir_all(dir.join("usr/bin")).unwrap();
    fs::write(
        dir.join("AppRun"),
        "#!/bin/sh\n\
         echo \"args=$*\"\n\
         echo \"appimage=$APPIMAGE\"\n\
         echo \"appdir=$APPDIR\"\n\
         echo \"owd=$OWD\"\n\
         exec \"$APPDIR/usr/bin/tool\"\n",
    )
    .unwrap();
    fs::set_permissions(dir.join("AppRun"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(dir.join("usr/bin/tool"), "#!/bin/sh\necho tool ran\n").unwrap();
    fs::set_permissions(dir.join("usr/bin/tool"), fs::Permissions::from_mode(0o750)).unwrap();
    fs::write(
        dir.join("demo.desktop"),
        "[Desktop Entry]\nType=Application\nName=Demo\n",
    )
    .unwrap();
    fs::write(dir.join("demo.png"), [0x89, b'P', b'N', b'G']).unwrap();
    std::os::unix::fs::symlink("demo.png", dir.join(".DirIcon")).unwrap();
    fs::create_dir_all(dir.join("share/locked")).unwrap();
    fs::write(dir.join("share/locked/data.txt"), "x".repeat(300_000)).unwrap();
    fs::set_permissions(dir.join("share/locked"), fs::Permissions::from_mode(0o555)).unwrap();
    dir
}

/// Runs the image. An image just written may be briefly "busy" (ETXTBSY) while another test's
/// thread forks with its write handle open; that start is tried again.
fn run(image: &Path, args: &[&str], cache: &Path, cwd: &Path) -> Output {
    let mut tries = 0;
    loop {
        let output = Command::new(image)
            .args(args)
            .env("XDG_CACHE_HOME", cache)
            .current_dir(cwd)
            .output();
        match output {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other.unwrap(),
        }
    }
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn an_image_starts_its_app_run_and_unpacks_only_once() {
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("Demo-x86_64.AppImage");
    let packed = envace_appimage::pack(Path::new(RUNTIME), &appdir(tmp.path()), &image).unwrap();
    assert_eq!(packed.offset, fs::metadata(RUNTIME).unwrap().len());
    assert_eq!(packed.size, fs::metadata(&image).unwrap().len());
    assert_eq!(
        packed.entries, 10,
        "AppRun, .DirIcon, desktop, png, usr, bin, tool, share, locked, data"
    );
    let head = fs::read(&image).unwrap();
    assert_eq!(&head[8..11], b"AI\x02");
    assert_eq!(
        envace_appimage::payload_offset(&image).unwrap(),
        packed.offset
    );
    // A big file compresses: the payload is far smaller than the 300 kB of data in it.
    assert!(
        packed.size - packed.offset < 100_000,
        "payload of {} bytes",
        packed.size - packed.offset
    );

    let cache = tmp.path().join("cache");
    let first = run(&image, &["one", "two words"], &cache, tmp.path());
    let (out, err) = text(&first);
    assert!(first.status.success(), "{out}\n{err}");
    assert!(
        err.contains("First start of this image: unpacking it"),
        "{err}"
    );
    assert!(out.contains("args=one two words"), "{out}");
    assert!(
        out.contains(&format!("appimage={}", image.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!("owd={}", tmp.path().display())),
        "{out}"
    );
    assert!(out.contains("tool ran"), "{out}");
    let appdir_line = out.lines().find_map(|l| l.strip_prefix("appdir=")).unwrap();
    assert!(
        Path::new(appdir_line).starts_with(cache.join("envace-appimage")),
        "{appdir_line}"
    );

    let second = run(
        &image,
        &["--appimage-extract-and-run", "again"],
        &cache,
        tmp.path(),
    );
    let (out, err) = text(&second);
    assert!(second.status.success(), "{out}\n{err}");
    assert!(
        !err.contains("unpacking"),
        "the second start unpacked again: {err}"
    );
    assert!(out.contains("args=again"), "{out}");
    let cached: Vec<_> = fs::read_dir(cache.join("envace-appimage"))
        .unwrap()
        .collect();
    assert_eq!(cached.len(), 1, "one folder, no leftover part: {cached:?}");

    let offset = run(&image, &["--appimage-offset"], &cache, tmp.path());
    assert_eq!(text(&offset).0.trim(), packed.offset.to_string());
}

#[test]
fn extract_keeps_modes_links_and_contents() {
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("Demo.AppImage");
    envace_appimage::pack(Path::new(RUNTIME), &appdir(tmp.path()), &image).unwrap();
    let work = tmp.path().join("work");
    fs::create_dir(&work).unwrap();
    let output = run(
        &image,
        &["--appimage-extract"],
        &tmp.path().join("cache"),
        &work,
    );
    assert!(output.status.success(), "{:?}", text(&output));
    let root = work.join("squashfs-root");
    let mode = |p: &str| {
        fs::symlink_metadata(root.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("AppRun"), 0o755);
    assert_eq!(mode("usr/bin/tool"), 0o750);
    assert_eq!(mode("share/locked"), 0o555);
    assert_eq!(
        fs::read_link(root.join(".DirIcon")).unwrap(),
        Path::new("demo.png")
    );
    assert_eq!(
        fs::read_to_string(root.join("share/locked/data.txt")).unwrap(),
        "x".repeat(300_000)
    );
    assert!(
        !tmp.path().join("cache").exists(),
        "extract does not touch the cache"
    );

    // A second extract refuses to mix into the first.
    let again = run(
        &image,
        &["--appimage-extract"],
        &tmp.path().join("cache"),
        &work,
    );
    assert!(!again.status.success());
    assert!(
        text(&again).1.contains("squashfs-root exists already"),
        "{:?}",
        text(&again)
    );
    fs::set_permissions(root.join("share/locked"), fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_truncated_image_fails_with_a_clear_error_and_leaves_no_partial_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("Demo.AppImage");
    let packed = envace_appimage::pack(Path::new(RUNTIME), &appdir(tmp.path()), &image).unwrap();
    let cache = tmp.path().join("cache");

    // Cut in the middle of the payload: the SquashFS tables at its end are gone.
    let bytes = fs::read(&image).unwrap();
    let cut = tmp.path().join("Cut.AppImage");
    let at = packed.offset as usize + 40; // the superblock's `bytes_used`
    let used = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    fs::write(&cut, &bytes[..(packed.offset + used / 2) as usize]).unwrap();
    fs::set_permissions(&cut, fs::Permissions::from_mode(0o755)).unwrap();
    let output = run(&cut, &[], &cache, tmp.path());
    let (_, err) = text(&output);
    assert_eq!(output.status.code(), Some(127), "{err}");
    assert!(
        err.contains("Cut.AppImage") && err.contains("truncated"),
        "{err}"
    );
    let left: Vec<_> = fs::read_dir(cache.join("envace-appimage"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "a failed unpack leaves nothing: {left:?}");

    // Only the runtime, no payload at all.
    let bare = tmp.path().join("Bare.AppImage");
    fs::write(&bare, &bytes[..packed.offset as usize]).unwrap();
    fs::set_permissions(&bare, fs::Permissions::from_mode(0o755)).unwrap();
    let output = run(&bare, &[], &cache, tmp.path());
    assert!(
        text(&output).1.contains("the payload is missing"),
        "{:?}",
        text(&output)
    );

    let unknown = run(&image, &["--appimage-mount"], &cache, tmp.path());
    assert!(
        text(&unknown).1.contains("unknown option --appimage-mount"),
        "{:?}",
        text(&unknown)
    );
}

#[test]
fn an_incomplete_app_dir_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = appdir(tmp.path());
    let out = tmp.path().join("x.AppImage");
    fs::remove_file(dir.join("demo.desktop")).unwrap();
    let error = envace_appimage::pack(Path::new(RUNTIME), &dir, &out).unwrap_err();
    assert!(
        format!("{error:#}").contains("needs a .desktop entry"),
        "{error:#}"
    );
    fs::set_permissions(dir.join("AppRun"), fs::Permissions::from_mode(0o644)).unwrap();
    let error = envace_appimage::pack(Path::new(RUNTIME), &dir, &out).unwrap_err();
    assert!(
        format!("{error:#}").contains("AppRun must be an executable file"),
        "{error:#}"
    );
    let error = envace_appimage::pack(&dir.join("demo.png"), &dir, &out).unwrap_err();
    assert!(format!("{error:#}").contains("AppRun"), "{error:#}");
    assert!(!out.exists(), "nothing written");
    fs::set_permissions(dir.join("share/locked"), fs::Permissions::from_mode(0o755)).unwrap();
}
