//! A training checkpoint's policy, tokenizer and chat template read back: for a job resuming
//! from it and for serving or evaluating the run.

use std::path::Path;

use candle_core::{DType, Device};

use super::{Gguf, Policy};
use crate::chat::ChatTemplate;
use crate::config::{ExperimentConfig, ModelSource};
use crate::error::{Error, Result};
use crate::tokenize::{self, Tokenizer};

/// A checkpoint folder's policy (`model/`) and tokenizer, with the chat template of the run
/// config's model source: what the run's rollouts rendered prompts with.
pub fn load(
    dir: &Path,
    config: &ExperimentConfig,
    device: &Device,
    dtype: DType,
) -> Result<(Policy, Tokenizer, ChatTemplate)> {
    let policy = Policy::load(&dir.join("model"), device, dtype)?;
    let tokenizer = tokenize::load(&dir.join(tokenize::TOKENIZER_FILE))?;
    let source_path = || {
        config.model.path.clone().ok_or_else(|| Error::Data {
            source_name: "[model].path".to_owned(),
            message: "is required when [model].source is \"hf\" or \"gguf\"".to_owned(),
        })
    };
    let template = match config.model.source {
        ModelSource::Tiny => ChatTemplate::chatml()?,
        ModelSource::Hf => {
            ChatTemplate::from_tokenizer_config(&source_path()?.join("tokenizer_config.json"))?
        }
        ModelSource::Gguf => ChatTemplate::from_gguf(&Gguf::open(&source_path()?)?)?,
    };
    Ok((policy, tokenizer, template))
}
