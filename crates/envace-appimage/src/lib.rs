//! AppImage (type 2) images: packing an AppDir as SquashFS behind an ELF runtime, and the
//! runtime's side of it: finding, checking and unpacking that payload into a cache.
//!
//! An AppImage of type 2 is an ELF executable (the runtime) with the bytes `AI\x02` at offset 8
//! of its header and a SquashFS image of the AppDir appended right after its last byte (the end
//! of its section header table). The AppDir has an executable `AppRun`, a `.desktop` entry and an
//! icon (`.DirIcon`) at its root.
//!
//! Our runtime (`src/main.rs`) does not mount the payload with FUSE, which needs `/dev/fuse` and
//! `fusermount` on the user's machine (neither is there in containers or on many clusters): on the
//! first start it unpacks the payload into a cache folder named after a hash of the payload, and
//! from then on it starts `AppRun` from there. This is the reference runtime's
//! `--appimage-extract-and-run` mode, made the default.

use std::fs::{self, File};
use std::hash::Hasher;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail, ensure};
use backhand::v4::compressor::Compressor;
use backhand::{FilesystemCompressor, FilesystemReader, FilesystemWriter, InnerNode, NodeHeader};

/// The AppImage type 2 magic bytes ...
pub const MAGIC: [u8; 3] = *b"AI\x02";
/// ... and where in the ELF header they go (`e_ident[EI_ABIVERSION..]`, unused on Linux).
pub const MAGIC_OFFSET: usize = 8;

/// The size of an ELF64 file header.
const ELF64_HEADER: usize = 64;

/// Where the payload of an AppImage whose runtime starts with `head` (at least its 64-byte ELF
/// header) begins: the end of the runtime's section header table, which a linker writes last.
pub fn elf_end(head: &[u8]) -> Result<u64> {
    ensure!(
        head.len() >= ELF64_HEADER && head[..4] == *b"\x7fELF",
        "not an ELF executable"
    );
    ensure!(head[4] == 2, "not a 64-bit ELF executable");
    ensure!(head[5] == 1, "not a little-endian ELF executable");
    let u64_at = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap_or_default());
    let u16_at = |at: usize| u64::from(u16::from_le_bytes([head[at], head[at + 1]]));
    let (shoff, shentsize, shnum) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c));
    ensure!(
        shoff != 0 && shnum != 0,
        "the ELF file has no section header table"
    );
    Ok(shoff + shentsize * shnum)
}

/// The byte offset of the SquashFS payload in the AppImage `image`, after checking that it is an
/// ELF file with the type 2 magic bytes.
pub fn payload_offset(image: &Path) -> Result<u64> {
    let mut head = [0u8; ELF64_HEADER];
    let mut file = File::open(image).with_context(|| format!("cannot open {}", image.display()))?;
    file.read_exact(&mut head)
        .with_context(|| format!("{}: too short to be an AppImage", image.display()))?;
    let offset = elf_end(&head).with_context(|| format!("{}: not an AppImage", image.display()))?;
    ensure!(
        head[MAGIC_OFFSET..MAGIC_OFFSET + MAGIC.len()] == MAGIC,
        "{}: not a type 2 AppImage (no `AI\\x02` at byte {MAGIC_OFFSET})",
        image.display()
    );
    let len = file.metadata()?.len();
    ensure!(
        len > offset,
        "{}: the runtime ends at byte {offset} but the file has {len} bytes: the payload is \
         missing (truncated download?)",
        image.display()
    );
    Ok(offset)
}

/// What [`pack`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    /// Where the payload starts (the runtime's size).
    pub offset: u64,
    /// The whole AppImage's size in bytes.
    pub size: u64,
    /// Files, folders and links in the payload.
    pub entries: usize,
}

/// Checks that `appdir` is an AppDir: an executable `AppRun`, a `.desktop` entry and `.DirIcon`
/// at its root.
pub fn check_appdir(appdir: &Path) -> Result<()> {
    let app_run = appdir.join("AppRun");
    let meta = fs::metadata(&app_run)
        .with_context(|| format!("{}: an AppDir needs an AppRun", app_run.display()))?;
    ensure!(
        meta.is_file() && meta.permissions().mode() & 0o111 != 0,
        "{}: AppRun must be an executable file",
        app_run.display()
    );
    let icon = appdir.join(".DirIcon");
    ensure!(
        icon.exists(),
        "{}: an AppDir needs its icon as .DirIcon",
        icon.display()
    );
    let mut desktop = false;
    for entry in
        fs::read_dir(appdir).with_context(|| format!("cannot list {}", appdir.display()))?
    {
        desktop |= entry?.path().extension().is_some_and(|e| e == "desktop");
    }
    ensure!(
        desktop,
        "{}: an AppDir needs a .desktop entry at its root",
        appdir.display()
    );
    Ok(())
}

/// Writes the AppImage `out`: the runtime binary `runtime` with the type 2 magic bytes set,
/// followed by `appdir` as a zstd-compressed SquashFS image. Owners become root; modes, links and
/// modification times are kept. `out` is written beside itself and renamed into place, so a
/// failed pack leaves any earlier image whole.
pub fn pack(runtime: &Path, appdir: &Path, out: &Path) -> Result<Packed> {
    check_appdir(appdir)?;
    let mut head = fs::read(runtime)
        .with_context(|| format!("cannot read the runtime {}", runtime.display()))?;
    let offset = elf_end(&head).with_context(|| format!("{}: not a runtime", runtime.display()))?;
    ensure!(
        offset == head.len() as u64,
        "{}: the section header table ends at byte {offset} but the file has {} bytes; the \
         runtime would not find a payload appended to it",
        runtime.display(),
        head.len()
    );
    head[MAGIC_OFFSET..MAGIC_OFFSET + MAGIC.len()].copy_from_slice(&MAGIC);

    let mut writer = FilesystemWriter::default();
    writer.set_compressor(
        FilesystemCompressor::new(Compressor::Zstd, None).map_err(|e| anyhow!("{e}"))?,
    );
    writer.set_root_mode(0o755);
    writer.set_current_time();
    let mut entries = 0;
    push_tree(&mut writer, appdir, Path::new("/"), &mut entries)?;

    let part = out.with_extension("part");
    let result = (|| -> Result<u64> {
        let mut file =
            File::create(&part).with_context(|| format!("cannot create {}", part.display()))?;
        file.write_all(&head)?;
        writer
            .write_with_offset(&mut file, offset)
            .map_err(|e| anyhow!("writing the SquashFS payload: {e}"))?;
        file.flush()?;
        let size = file.seek(SeekFrom::End(0))?;
        file.set_permissions(fs::Permissions::from_mode(0o755))?;
        Ok(size)
    })();
    let size = match result {
        Ok(size) => size,
        Err(error) => {
            let _ = fs::remove_file(&part);
            return Err(error.context(format!("cannot write {}", out.display())));
        }
    };
    fs::rename(&part, out)
        .with_context(|| format!("cannot move the image to {}", out.display()))?;
    Ok(Packed {
        offset,
        size,
        entries,
    })
}

/// Adds the contents of the folder `dir` under `inside` in the image, in name order.
fn push_tree(
    writer: &mut FilesystemWriter<'_, '_, '_>,
    dir: &Path,
    inside: &Path,
    entries: &mut usize,
) -> Result<()> {
    let mut names = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .map(|entry| entry.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>()?;
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let target = inside.join(&name);
        let meta = fs::symlink_metadata(&path)
            .with_context(|| format!("cannot stat {}", path.display()))?;
        let header = NodeHeader {
            permissions: (meta.mode() & 0o7777) as u16,
            uid: 0,
            gid: 0,
            mtime: u32::try_from(meta.mtime()).unwrap_or(0),
        };
        let pushed = if meta.is_symlink() {
            let link = fs::read_link(&path)?;
            writer.push_symlink(link, &target, header)
        } else if meta.is_dir() {
            writer.push_dir(&target, header)
        } else if meta.is_file() {
            writer.push_file_from_path(&path, &target, header)
        } else {
            bail!(
                "{}: only files, folders and links go into an AppImage",
                path.display()
            );
        };
        pushed.map_err(|e| anyhow!("adding {}: {e}", path.display()))?;
        *entries += 1;
        if meta.is_dir() {
            push_tree(writer, &path, &target, entries)?;
        }
    }
    Ok(())
}

/// A path inside the image as a relative path, refusing anything that would leave the folder it
/// is unpacked into.
fn relative(inside: &Path) -> Result<PathBuf> {
    let mut rel = PathBuf::new();
    for component in inside.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(name) => rel.push(name),
            _ => bail!(
                "the image holds the path {}, which leaves its root",
                inside.display()
            ),
        }
    }
    Ok(rel)
}

/// Unpacks the payload of `image` (at `offset`) into the folder `dest`, which is created; returns
/// how many entries it wrote. Only files, folders and links are allowed in the image.
pub fn unpack(image: &Path, offset: u64, dest: &Path) -> Result<usize> {
    let mut file = File::open(image).with_context(|| format!("cannot open {}", image.display()))?;
    // The superblock's `bytes_used` (at byte 40) against what the file holds.
    let mut used = [0u8; 8];
    file.seek(SeekFrom::Start(offset + 40))?;
    file.read_exact(&mut used).with_context(|| {
        format!(
            "{}: the payload has no SquashFS superblock",
            image.display()
        )
    })?;
    let (used, held) = (u64::from_le_bytes(used), file.metadata()?.len() - offset);
    ensure!(
        held >= used,
        "{}: truncated: its payload has {used} bytes but the file holds {held} after the runtime \
         (an interrupted download or copy?)",
        image.display()
    );
    file.seek(SeekFrom::Start(0))?;
    let filesystem = FilesystemReader::from_reader_with_offset(BufReader::new(file), offset)
        .map_err(|e| {
            anyhow!(
                "{}: the payload at byte {offset} is not a readable SquashFS image ({e}); the \
                 file may be damaged or truncated",
                image.display()
            )
        })?;
    fs::create_dir_all(dest).with_context(|| format!("cannot create {}", dest.display()))?;
    let mut folders = Vec::new();
    let mut written = 0;
    for node in filesystem.files() {
        let rel = relative(&node.fullpath)?;
        let target = dest.join(&rel);
        let mode = u32::from(node.header.permissions);
        match &node.inner {
            InnerNode::Dir(_) => {
                fs::create_dir_all(&target)
                    .with_context(|| format!("cannot create {}", target.display()))?;
                folders.push((target, mode));
            }
            InnerNode::File(entry) => {
                if let Some(parent) = target.parent() {
                    fs::create_dir_all(parent)?;
                }
                let mut out = File::create(&target)
                    .with_context(|| format!("cannot create {}", target.display()))?;
                io::copy(&mut filesystem.file(entry).reader(), &mut out).with_context(|| {
                    format!(
                        "{}: cannot unpack {}",
                        image.display(),
                        node.fullpath.display()
                    )
                })?;
                out.set_permissions(fs::Permissions::from_mode(mode))?;
            }
            InnerNode::Symlink(link) => {
                std::os::unix::fs::symlink(&link.link, &target)
                    .with_context(|| format!("cannot create the link {}", target.display()))?;
            }
            _ => bail!(
                "{}: {} is a device, pipe or socket, which an AppImage does not carry",
                image.display(),
                node.fullpath.display()
            ),
        }
        written += 1;
    }
    // Modes last, deepest first, so that a read-only folder is filled before it is closed.
    for (folder, mode) in folders.into_iter().rev() {
        fs::set_permissions(&folder, fs::Permissions::from_mode(mode))?;
    }
    Ok(written)
}

/// A hash of the payload's bytes: the name of its folder in the cache, so that a new image at the
/// same path gets a folder of its own.
pub fn payload_key(image: &Path, offset: u64) -> Result<u64> {
    let mut file = File::open(image).with_context(|| format!("cannot open {}", image.display()))?;
    file.seek(SeekFrom::Start(offset))?;
    let mut hasher = std::hash::DefaultHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.write(&buf[..n]);
    }
    Ok(hasher.finish())
}

/// The folder under `cache` holding the unpacked payload of `image`, unpacked there first when it
/// is not yet (into a private folder renamed into place when whole, so that two starts at once
/// or an interrupted one never leave a half-unpacked folder behind). `on_unpack` is called with
/// the folder before a first unpack (to say why this start is slow).
pub fn unpacked(
    image: &Path,
    offset: u64,
    cache: &Path,
    on_unpack: impl FnOnce(&Path),
) -> Result<PathBuf> {
    let key = payload_key(image, offset)?;
    let stem = image
        .file_stem()
        .map_or_else(|| "appimage".into(), |s| s.to_string_lossy().into_owned());
    let dir = cache.join(format!("{stem}-{key:016x}"));
    if dir.is_dir() {
        return Ok(dir);
    }
    on_unpack(&dir);
    fs::create_dir_all(cache).with_context(|| format!("cannot create {}", cache.display()))?;
    let part = cache.join(format!(".{stem}-{key:016x}.{}.part", std::process::id()));
    if part.exists() {
        fs::remove_dir_all(&part)?;
    }
    if let Err(error) = unpack(image, offset, &part) {
        let _ = make_writable(&part);
        let _ = fs::remove_dir_all(&part);
        return Err(error);
    }
    if let Err(error) = fs::rename(&part, &dir) {
        let _ = make_writable(&part);
        let _ = fs::remove_dir_all(&part);
        // Another start of the same image got there first.
        if !dir.is_dir() {
            return Err(error)
                .with_context(|| format!("cannot move the unpacked image to {}", dir.display()));
        }
    }
    Ok(dir)
}

/// Gives the owner write access to every folder under `dir`, so that it can be removed.
fn make_writable(dir: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(dir)?;
    if meta.is_dir() {
        fs::set_permissions(dir, fs::Permissions::from_mode(meta.mode() | 0o700))?;
        for entry in fs::read_dir(dir)? {
            make_writable(&entry?.path())?;
        }
    }
    Ok(())
}

/// The folder unpacked images go in: `$XDG_CACHE_HOME/envace-appimage`, else
/// `~/.cache/envace-appimage`, else one in the temporary folder.
pub fn cache_root() -> PathBuf {
    let from_env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    from_env("XDG_CACHE_HOME")
        .or_else(|| from_env("HOME").map(|home| home.join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("envace-appimage")
}
