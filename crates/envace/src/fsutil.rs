//! Writing files so that an existing one is replaced whole or not at all.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`: a reader (or
/// a crash) never sees a half-written file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_sibling(path);
    std::fs::write(&tmp, bytes).map_err(|err| Error::io(&tmp, err))?;
    std::fs::rename(&tmp, path).map_err(|err| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, err)
    })
}

fn temp_sibling(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}
