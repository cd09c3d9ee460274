//! The state of one training job: the run in the store, the model and tokenizer, the task
//! pools, the judge, the optimizer, the rehearsal response cache and where the job is
//! (phase and step), with atomic checkpoints that a resumed job continues from exactly.
//!
//! # Steps and checkpoints
//!
//! Steps are counted over the whole job: SFT steps `0..sft.n_steps`, then RL steps, so every
//! metric, trajectory and checkpoint of a run sits on one step axis. A checkpoint is a folder
//! `<store dir>/checkpoints/run-<id>/step-<N>/` holding the model (`config.json`,
//! `model.safetensors`), `tokenizer.json`, `optimizer.safetensors` and `state.json` (phase,
//! next step, response cache); it is written under a temporary name and renamed into place,
//! then recorded in the store. Every random draw of a step (task choice, sampling, mixed-mode
//! draws) is derived from the run seed and the step number, so the job needs no saved RNG
//! stream to continue exactly.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::Device;
use serde::{Deserialize, Serialize};

use crate::chat;
use crate::chat::ChatTemplate;
use crate::config::{
    Domain, ExperimentConfig, InitConfig, JudgeKind, ModelSource, TaskSplit, ToolResponseMode,
};
use crate::env::Environment;
use crate::env::tau2::{DomainKind, Tau2Domain};
use crate::error::{Error, Result};
use crate::eval::episodes::PolicyJob;
use crate::judge::{EpisodeJudge, LlmJudge, RuleJudge};
use crate::mcp::RealEnvs;
use crate::model::{self, Gguf, Policy, TransformerConfig};
use crate::openai::ChatClient;
use crate::rehearse::{Example, ResponseCache, SYSTEM_PROMPT, execution_result_block};
use crate::rollout::{EndpointSimulator, TokenCodec};
use crate::store::{CheckpointRow, RunId, RunWriter, Store, now_secs};
use crate::tasks::{self, GenConfig, GenSources, GenTask};
use crate::tokenize;

use super::AdamW;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Supervised warm start.
    Sft,
    /// Role-wise GRPO.
    Rl,
    /// Everything ran.
    Done,
}

impl Phase {
    /// The phase as events and checkpoints name it: `sft`, `rl` or `done`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Sft => "sft",
            Phase::Rl => "rl",
            Phase::Done => "done",
        }
    }
}

/// What `state.json` of a checkpoint holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedState {
    phase: Phase,
    next_step: u32,
    cache: Vec<(String, Vec<Example>)>,
}

/// Everything a training job works with.
pub struct Session {
    /// The experiment.
    pub config: ExperimentConfig,
    /// The run in the store.
    pub run: RunId,
    /// Buffered writes to the run store.
    pub writer: RunWriter,
    /// Tokenizer, chat template and stop token.
    pub codec: TokenCodec,
    /// The policy being trained.
    pub policy: Policy,
    /// The frozen KL reference (RL only).
    pub reference: Option<Policy>,
    /// The optimizer of the current phase.
    pub optimizer: Option<AdamW>,
    /// Loaded τ²-bench data.
    pub sources: GenSources,
    /// The episodes' real environments (built-in, or MCP servers the config names).
    pub real_envs: RealEnvs,
    /// Decides episode scores.
    pub judge: Box<dyn EpisodeJudge + Send>,
    /// The external simulator, when `[env].tool_response_mode = "external"`.
    pub simulator: Option<EndpointSimulator>,
    /// Real responses for few-shot rehearse prompts.
    pub cache: ResponseCache,
    /// The phase the next step belongs to.
    pub phase: Phase,
    /// The next step to run (over the whole job).
    pub next_step: u32,
    /// `<store dir>/checkpoints/run-<id>`.
    pub run_dir: PathBuf,
    /// The step of the checkpoint this session was reopened from, if any.
    pub resumed_from: Option<u32>,
}

impl PolicyJob for Session {
    fn config(&self) -> &ExperimentConfig {
        &self.config
    }
    fn policy(&self) -> &Policy {
        &self.policy
    }
    fn codec(&self) -> &TokenCodec {
        &self.codec
    }
    fn sources(&self) -> &GenSources {
        &self.sources
    }
    fn judge(&self) -> &dyn EpisodeJudge {
        self.judge.as_ref()
    }
    fn cache(&self) -> &ResponseCache {
        &self.cache
    }
    fn real_env(&self, domain: Domain) -> Result<Box<dyn Environment>> {
        self.real_envs.make(domain, &self.sources)
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("run", &self.run)
            .field("phase", &self.phase)
            .field("next_step", &self.next_step)
            .finish_non_exhaustive()
    }
}

/// The τ²-bench folder: `[env].data_dir`, else `$ENVACE_TAU2_DIR`, else the
/// `shared/benchmarks/tau2-bench` folder beside the source tree.
pub fn tau2_dir(config: &ExperimentConfig) -> PathBuf {
    if let Some(dir) = &config.env.data_dir {
        return dir.clone();
    }
    if let Some(dir) = std::env::var_os("ENVACE_TAU2_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/benchmarks/tau2-bench")
}

/// Loads the τ²-bench domains the experiment's `[env].domains` need.
pub fn load_sources(config: &ExperimentConfig) -> Result<GenSources> {
    let dir = tau2_dir(config);
    let load = |kind: DomainKind, name: &str| -> Result<Arc<Tau2Domain>> {
        let path = dir.join(name);
        if !path.join("db.json").is_file() {
            return Err(Error::MissingAsset {
                what: format!(
                    "the τ²-bench {name} data needed by [env].domains (set [env].data_dir or $ENVACE_TAU2_DIR to the folder holding retail/ and airline/)"
                ),
                path: path.join("db.json"),
            });
        }
        Tau2Domain::load(kind, &path)
    };
    Ok(GenSources {
        retail: if config.env.domains.contains(&Domain::Retail) {
            Some(load(DomainKind::Retail, "retail")?)
        } else {
            None
        },
        airline: if config.env.domains.contains(&Domain::Airline) {
            Some(load(DomainKind::Airline, "airline")?)
        } else {
            None
        },
    })
}

/// `n_tasks` generated tasks of `split` of `[env].families`, spread over the experiment's
/// domains in turn: the RL pool and the held-out tasks.
pub fn task_pool(
    config: &ExperimentConfig,
    sources: &GenSources,
    split: TaskSplit,
    n_tasks: usize,
    seed: u64,
) -> Result<Vec<Arc<GenTask>>> {
    pool_of(
        config,
        sources,
        split,
        n_tasks,
        seed,
        &config.env.families,
        "[env].families",
    )
}

/// The SFT corpus's `n_tasks` generated tasks of `[env].task_split`: of `[sft].families` when
/// given, else as [`task_pool`].
pub fn sft_task_pool(
    config: &ExperimentConfig,
    sources: &GenSources,
    n_tasks: usize,
    seed: u64,
) -> Result<Vec<Arc<GenTask>>> {
    let (families, field) = if config.sft.families.is_empty() {
        (&config.env.families, "[env].families")
    } else {
        (&config.sft.families, "[sft].families")
    };
    let split = config.env.task_split;
    pool_of(config, sources, split, n_tasks, seed, families, field)
}

fn pool_of(
    config: &ExperimentConfig,
    sources: &GenSources,
    split: TaskSplit,
    n_tasks: usize,
    seed: u64,
    wanted: &[String],
    field: &str,
) -> Result<Vec<Arc<GenTask>>> {
    // With `[env].families`, each domain draws the listed families it has; a domain with none
    // of them contributes no tasks.
    let domains: Vec<(Domain, Vec<String>)> = config
        .env
        .domains
        .iter()
        .filter_map(|&domain| {
            let own: Vec<String> = tasks::families(domain)
                .into_iter()
                .map(|(name, _)| name.to_owned())
                .filter(|name| wanted.contains(name))
                .collect();
            (wanted.is_empty() || !own.is_empty()).then_some((domain, own))
        })
        .collect();
    if let Some(unknown) = wanted
        .iter()
        .find(|name| !domains.iter().any(|(_, own)| own.contains(name)))
    {
        let known: Vec<&str> = config
            .env
            .domains
            .iter()
            .flat_map(|&domain| tasks::families(domain))
            .map(|(name, _)| name)
            .collect();
        return Err(Error::Data {
            source_name: field.to_owned(),
            message: format!(
                "{unknown:?} is no generated family of env.domains; known: {}",
                known.join(", ")
            ),
        });
    }
    let n_domains = domains.len().max(1);
    let mut per_domain = Vec::new();
    for (idx, (domain, families)) in domains.into_iter().enumerate() {
        let n = n_tasks / n_domains + usize::from(idx < n_tasks % n_domains);
        let generated = tasks::generate(
            domain,
            sources,
            &GenConfig {
                seed,
                split,
                difficulty: config.env.difficulty,
                n_tasks: n,
                families,
            },
        )?;
        per_domain.push(generated.into_iter().map(Arc::new).collect::<Vec<_>>());
    }
    let mut pool = Vec::with_capacity(n_tasks);
    let longest = per_domain.iter().map(Vec::len).max().unwrap_or(0);
    for idx in 0..longest {
        for tasks in &per_domain {
            if let Some(task) = tasks.get(idx) {
                pool.push(task.clone());
            }
        }
    }
    Ok(pool)
}

/// Every how many tasks the tokenizer's corpus holds a rehearsal memory.
const MEMORY_CORPUS_EVERY: usize = 4;

/// The corpus a tiny model's tokenizer is trained on: the tasks' conversations, the tools'
/// schemas, the rehearse instructions, real responses in the rehearse format, and for every
/// fourth task a rehearsal memory of its oracle attempt (the words of memories would
/// otherwise be spelt in bytes: the header alone took 33 tokens of a 64-token memory).
fn tokenizer_corpus(tasks: &[Arc<GenTask>], sources: &GenSources) -> Result<Vec<String>> {
    let mut corpus = vec![SYSTEM_PROMPT.to_owned()];
    let mut seen_domains = Vec::new();
    for (idx, task) in tasks.iter().enumerate() {
        if !seen_domains.contains(&task.domain) {
            seen_domains.push(task.domain);
            let env = tasks::fresh_env(task.domain, sources)?;
            for schema in env.tool_schemas() {
                corpus.push(crate::env::pyjson::dumps(&schema, false));
            }
        }
        if idx % MEMORY_CORPUS_EVERY == 0 {
            corpus.push(super::sft::memory_corpus_text(
                task,
                idx / MEMORY_CORPUS_EVERY % 4,
            ));
        }
        for message in &task.oracle {
            corpus.push(message.content.clone());
            if message.role == chat::Role::Tool {
                let value = serde_json::from_str(&message.content)
                    .unwrap_or(serde_json::Value::String(message.content.clone()));
                corpus.push(execution_result_block(
                    &serde_json::json!({ "result": value }),
                ));
            }
        }
    }
    Ok(corpus)
}

fn device_of(config: &ExperimentConfig) -> Result<Device> {
    let device = model::resolve_device(config.backend.device, config.backend.cuda_device_index)?;
    // A role placed on wgpu fails here, at the job's start, when no adapter opens; never
    // after SFT has run.
    super::grpo::open_generation_gpu(config, None)?;
    Ok(device)
}

/// The stop token every supported chat format ends a message with.
const STOP_TOKEN: &str = "<|im_end|>";

impl Session {
    /// Sets up a new job: loads data and model (training a tiny model's tokenizer on the
    /// task corpus), saves the tokenizer next to the checkpoints.
    pub fn create(
        config: ExperimentConfig,
        run: RunId,
        writer: RunWriter,
        sft_tasks: &[Arc<GenTask>],
        sources: GenSources,
    ) -> Result<Self> {
        let run_dir = run_dir(writer.store().path(), run);
        std::fs::create_dir_all(&run_dir).map_err(|e| Error::io(&run_dir, e))?;
        let device = device_of(&config)?;
        let dtype = model::candle_dtype(config.backend.dtype);
        let mut cache = ResponseCache::new(8);
        let mut optimizer = None;
        let (policy, codec) = match (&config.init, config.model.source) {
            (Some(init), _) => {
                let dir = init_checkpoint(init, writer.store().path(), run)?;
                let (policy, codec, state) = load_checkpoint(&dir, &config, &device, dtype)?;
                cache = state.response_cache();
                let optimizer_path = dir.join("optimizer.safetensors");
                if config.rl.carry_optimizer && !config.sft.enabled && optimizer_path.is_file() {
                    let mut carried =
                        AdamW::new(&policy, optimizer_weight_decay(&config, Phase::Rl))?;
                    carried.load(&optimizer_path)?;
                    optimizer = Some(carried);
                }
                (policy, codec)
            }
            (None, ModelSource::Tiny) => {
                let corpus = tokenizer_corpus(sft_tasks, &sources)?;
                let tokenizer = tokenize::train_bpe_with(
                    corpus.into_iter(),
                    config.model.tiny.vocab_size as usize,
                    config.model.tiny.split_digits,
                )?;
                let cfg = TransformerConfig::from_tiny(&config.model.tiny)?;
                let policy = Policy::init(cfg, config.run.seed, &device, dtype)?;
                let codec = TokenCodec::new(tokenizer, ChatTemplate::chatml()?, &[STOP_TOKEN])?;
                (policy, codec)
            }
            (None, ModelSource::Hf) => {
                let dir = model_path(&config)?;
                let policy = Policy::load(&dir, &device, dtype)?;
                let tokenizer = tokenize::load(&dir.join(tokenize::TOKENIZER_FILE))?;
                let template =
                    ChatTemplate::from_tokenizer_config(&dir.join("tokenizer_config.json"))?;
                (policy, TokenCodec::new(tokenizer, template, &[STOP_TOKEN])?)
            }
            (None, ModelSource::Gguf) => {
                let gguf = Gguf::open(&model_path(&config)?)?;
                let policy = gguf.load_policy(&device, dtype)?;
                let template = ChatTemplate::from_gguf(&gguf)?;
                (
                    policy,
                    TokenCodec::new(gguf.tokenizer()?, template, &[STOP_TOKEN])?,
                )
            }
        };
        tokenize::save(codec.tokenizer(), &run_dir.join(tokenize::TOKENIZER_FILE))?;
        let phase = if config.sft.enabled {
            Phase::Sft
        } else {
            Phase::Rl
        };
        Ok(Session {
            real_envs: RealEnvs::open(&config, &sources)?,
            judge: make_judge(&config, &sources)?,
            simulator: make_simulator(&config)?,
            config,
            run,
            writer,
            codec,
            policy,
            reference: None,
            optimizer,
            sources,
            cache,
            phase,
            next_step: 0,
            run_dir,
            resumed_from: None,
        })
    }

    /// Reopens a job at its latest checkpoint (model, optimizer, tokenizer, cache, step).
    pub fn resume(
        config: ExperimentConfig,
        run: RunId,
        writer: RunWriter,
        sources: GenSources,
    ) -> Result<Self> {
        let checkpoints = writer.store().view().checkpoints(run)?;
        let Some(latest) = checkpoints.last() else {
            return Err(Error::Data {
                source_name: format!("run {}", run.0),
                message: "has no checkpoint to resume from; start it again instead".to_owned(),
            });
        };
        let dir = PathBuf::from(&latest.path);
        let device = device_of(&config)?;
        let dtype = model::candle_dtype(config.backend.dtype);
        let (policy, codec, state) = load_checkpoint(&dir, &config, &device, dtype)?;
        let cache = state.response_cache();
        let optimizer_path = dir.join("optimizer.safetensors");
        let optimizer = if optimizer_path.is_file() {
            let mut optimizer = AdamW::new(&policy, optimizer_weight_decay(&config, state.phase))?;
            optimizer.load(&optimizer_path)?;
            Some(optimizer)
        } else {
            None
        };
        let run_dir = run_dir(writer.store().path(), run);
        let reference = if state.phase == Phase::Rl {
            let reference_dir = run_dir.join("reference");
            let rl_started = state.next_step > config.sft.n_steps * u32::from(config.sft.enabled);
            if reference_dir.is_dir() {
                Some(Policy::load(&reference_dir, &device, dtype)?)
            } else if rl_started {
                // A fresh copy of the current policy would silently change the KL anchor.
                return Err(Error::MissingAsset {
                    what: format!("the frozen KL reference of run {}", run.0),
                    path: reference_dir,
                });
            } else {
                None
            }
        } else {
            None
        };
        Ok(Session {
            real_envs: RealEnvs::open(&config, &sources)?,
            judge: make_judge(&config, &sources)?,
            simulator: make_simulator(&config)?,
            config,
            run,
            writer,
            codec,
            policy,
            reference,
            optimizer,
            sources,
            cache,
            phase: state.phase,
            next_step: state.next_step,
            run_dir,
            resumed_from: u32::try_from(latest.step).ok(),
        })
    }

    /// Takes over a reopened run for training: in one store transaction, removes the rows
    /// written after its checkpoint (a process killed between checkpoints left them; the
    /// replay writes them again) and marks it running; then deletes checkpoint folders the
    /// store does not know (a kill during a checkpoint write leaves them) and checkpoints
    /// beyond `[run].keep_checkpoints`. Returns the rows removed.
    pub fn take_over(&mut self) -> Result<u64> {
        let Some(checkpoint_step) = self.resumed_from else {
            return Err(Error::Data {
                source_name: format!("run {}", self.run.0),
                message: "was not reopened from a checkpoint".to_owned(),
            });
        };
        self.writer.flush()?;
        let removed = self.writer.store_mut().resume_run(
            self.run,
            u64::from(checkpoint_step),
            u64::from(self.next_step),
        )?;
        self.remove_unrecorded_checkpoints()?;
        // A kill between recording a checkpoint and pruning the old ones left one too many.
        self.prune_checkpoints()?;
        Ok(removed)
    }

    /// Deletes temporary and unrecorded checkpoint folders of this run.
    fn remove_unrecorded_checkpoints(&mut self) -> Result<()> {
        // By folder name: the store may have been opened by another path to the same file.
        let recorded: Vec<std::ffi::OsString> = self
            .writer
            .store()
            .view()
            .checkpoints(self.run)?
            .into_iter()
            .filter_map(|row| PathBuf::from(row.path).file_name().map(ToOwned::to_owned))
            .collect();
        let entries = match std::fs::read_dir(&self.run_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(&self.run_dir, e)),
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let stale = (name.starts_with(".step-") && name.ends_with(".tmp"))
                || name == ".reference.tmp"
                || (name.starts_with("step-") && !recorded.contains(&entry.file_name()));
            if stale && path.is_dir() {
                std::fs::remove_dir_all(&path).map_err(|e| Error::io(&path, e))?;
            }
        }
        Ok(())
    }

    /// Writes a checkpoint of the current state atomically and records it in the store.
    /// `step` is the last completed step.
    pub fn checkpoint(&mut self, step: u32) -> Result<PathBuf> {
        let final_dir = self.run_dir.join(format!("step-{step}"));
        let tmp_dir = self.run_dir.join(format!(".step-{step}.tmp"));
        if tmp_dir.exists() {
            std::fs::remove_dir_all(&tmp_dir).map_err(|e| Error::io(&tmp_dir, e))?;
        }
        if let Err(err) = self.write_checkpoint_files(&tmp_dir) {
            // A full disk (or any failed write) leaves no half checkpoint behind, and the
            // store still names the previous one, which a resume starts from.
            let _ = std::fs::remove_dir_all(&tmp_dir);
            let previous = self
                .writer
                .store()
                .view()
                .checkpoints(self.run)?
                .last()
                .map_or_else(
                    || "there is no earlier checkpoint".to_owned(),
                    |row| format!("the checkpoint of step {} is intact", row.step),
                );
            return Err(Error::Checkpoint {
                step: u64::from(step),
                message: format!(
                    "{err}; {previous}: make room, then resume the run (`envace train CONFIG \
                     --resume {}`)",
                    self.run.0
                ),
            });
        }
        if final_dir.exists() {
            std::fs::remove_dir_all(&final_dir).map_err(|e| Error::io(&final_dir, e))?;
        }
        std::fs::rename(&tmp_dir, &final_dir).map_err(|e| Error::io(&final_dir, e))?;
        crate::crash::point("checkpoint.renamed");
        let bytes = dir_bytes(&final_dir);
        self.writer.flush()?;
        let mut batch = crate::store::Batch::new(self.run);
        batch.checkpoints.push(CheckpointRow {
            step: u64::from(step),
            path: final_dir.display().to_string(),
            bytes,
            wall_time: now_secs(),
        });
        self.writer.store_mut().write(&batch)?;
        crate::crash::point("checkpoint.recorded");
        self.prune_checkpoints()?;
        Ok(final_dir)
    }

    /// The files of a checkpoint, into the (new, empty) folder `tmp_dir`.
    fn write_checkpoint_files(&self, tmp_dir: &Path) -> Result<()> {
        std::fs::create_dir_all(tmp_dir).map_err(|e| Error::io(tmp_dir, e))?;
        self.policy.save(&tmp_dir.join("model"))?;
        crate::crash::fault("checkpoint.write").map_err(|e| Error::io(tmp_dir, e))?;
        tokenize::save(
            self.codec.tokenizer(),
            &tmp_dir.join(tokenize::TOKENIZER_FILE),
        )?;
        if let Some(optimizer) = &self.optimizer {
            optimizer.save(&tmp_dir.join("optimizer.safetensors"))?;
        }
        crate::crash::point("checkpoint.files");
        let state = SavedState {
            phase: self.phase,
            next_step: self.next_step,
            cache: self.cache.entries(),
        };
        let state_text = serde_json::to_string(&state).map_err(|e| Error::Data {
            source_name: "checkpoint state".to_owned(),
            message: e.to_string(),
        })?;
        crate::fsutil::write_atomically(&tmp_dir.join("state.json"), state_text.as_bytes())
    }

    /// Deletes all but the newest `[run].keep_checkpoints` checkpoints (rows, then files: the
    /// store never names a folder that is gone, and a folder left by a crash in between is
    /// removed when the run is resumed).
    fn prune_checkpoints(&mut self) -> Result<()> {
        let keep = self.config.run.keep_checkpoints as usize;
        if keep == 0 {
            return Ok(());
        }
        let rows = self.writer.store_mut().view().checkpoints(self.run)?;
        let n_old = rows.len().saturating_sub(keep);
        for row in rows.into_iter().take(n_old) {
            self.writer
                .store_mut()
                .delete_checkpoint(self.run, row.step)?;
            let dir = PathBuf::from(&row.path);
            // Only ever delete a checkpoint folder of this run.
            if dir.parent() == Some(self.run_dir.as_path()) && dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            }
        }
        Ok(())
    }

    /// Saves the frozen reference policy once, at the start of RL.
    pub fn save_reference(&self) -> Result<()> {
        let Some(reference) = &self.reference else {
            return Ok(());
        };
        let dir = self.run_dir.join("reference");
        let tmp = self.run_dir.join(".reference.tmp");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
        }
        reference.save(&tmp)?;
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        }
        std::fs::rename(&tmp, &dir).map_err(|e| Error::io(&dir, e))
    }
}

impl SavedState {
    /// The response cache the state holds, in its recorded order.
    fn response_cache(&self) -> ResponseCache {
        let mut cache = ResponseCache::new(8);
        for (tool, examples) in self.cache.iter().rev() {
            for example in examples.iter().rev() {
                cache.record(tool, &example.arguments, &example.response);
            }
        }
        cache
    }
}

/// Loads a checkpoint folder's model, tokenizer (with the chat template of the config's model
/// source) and saved state.
fn load_checkpoint(
    dir: &Path,
    config: &ExperimentConfig,
    device: &Device,
    dtype: candle_core::DType,
) -> Result<(Policy, TokenCodec, SavedState)> {
    let state_path = dir.join("state.json");
    let text = std::fs::read_to_string(&state_path).map_err(|e| Error::io(&state_path, e))?;
    let state: SavedState = serde_json::from_str(&text).map_err(|e| Error::Data {
        source_name: state_path.display().to_string(),
        message: format!("is not a checkpoint state: {e}"),
    })?;
    let (policy, tokenizer, template) = model::checkpoint::load(dir, config, device, dtype)?;
    let codec = TokenCodec::new(tokenizer, template, &[STOP_TOKEN])?;
    Ok((policy, codec, state))
}

/// The checkpoint folder `[init]` names: the run (id, or the newest other run with that name)
/// in `init.store` (else `own_store`, where `own_run` is the run being started), at
/// `init.step` (else its latest checkpoint).
pub fn init_checkpoint(init: &InitConfig, own_store: &Path, own_run: RunId) -> Result<PathBuf> {
    let store_path = init
        .store
        .clone()
        .unwrap_or_else(|| own_store.to_path_buf());
    if !store_path.is_file() {
        return Err(Error::Data {
            source_name: "[init].store".to_owned(),
            message: format!("{} is not a run store file", store_path.display()),
        });
    }
    let store = Store::open(&store_path)?;
    let same_store = init.store.is_none();
    let by_id = init
        .run
        .parse::<i64>()
        .ok()
        .and_then(|id| store.view().find_run(&id.to_string()).ok())
        .filter(|run| run.id.0.to_string() == init.run);
    let run = match by_id {
        Some(run) => Some(run),
        None => {
            // The newest run of that name, other than the one being started.
            let newest = store
                .view()
                .runs()?
                .into_iter()
                .filter(|run| run.name == init.run && !(same_store && run.id == own_run))
                .map(|run| run.id)
                .max_by_key(|id| id.0);
            match newest {
                Some(id) => Some(store.view().find_run(&id.0.to_string())?),
                None => None,
            }
        }
    };
    let run = run.ok_or_else(|| Error::Data {
        source_name: "[init].run".to_owned(),
        message: format!("no run {:?} in {}", init.run, store_path.display()),
    })?;
    let checkpoints = store.view().checkpoints(run.id)?;
    let found = match init.step {
        Some(step) => checkpoints.iter().find(|c| c.step == u64::from(step)),
        None => checkpoints.last(),
    };
    let Some(found) = found else {
        let steps: Vec<String> = checkpoints.iter().map(|c| c.step.to_string()).collect();
        return Err(Error::Data {
            source_name: if init.step.is_some() {
                "[init].step".to_owned()
            } else {
                "[init].run".to_owned()
            },
            message: format!(
                "run {} ({}) has no checkpoint{} (it has: {})",
                run.id.0,
                run.name,
                init.step
                    .map(|s| format!(" at step {s}"))
                    .unwrap_or_default(),
                if steps.is_empty() {
                    "none".to_owned()
                } else {
                    steps.join(", ")
                }
            ),
        });
    };
    Ok(PathBuf::from(&found.path))
}

/// The judge `[judge]` asks for: rules, or an LLM behind `[judge.endpoint]`.
fn make_judge(
    config: &ExperimentConfig,
    sources: &GenSources,
) -> Result<Box<dyn EpisodeJudge + Send>> {
    Ok(match (config.judge.kind, &config.judge.endpoint) {
        (JudgeKind::Rule, _) => Box::new(RuleJudge::new(sources.clone())),
        (JudgeKind::Llm, Some(endpoint)) => Box::new(LlmJudge::new(ChatClient::new(endpoint)?)),
        (JudgeKind::Llm, None) => {
            return Err(Error::Data {
                source_name: "[judge]".to_owned(),
                message: "kind = \"llm\" needs [judge.endpoint]".to_owned(),
            });
        }
    })
}

/// The external simulator of `[env.external]`, when the tool response mode is external.
fn make_simulator(config: &ExperimentConfig) -> Result<Option<EndpointSimulator>> {
    if config.env.tool_response_mode != ToolResponseMode::External {
        return Ok(None);
    }
    let endpoint = config.env.external.as_ref().ok_or_else(|| Error::Data {
        source_name: "[env]".to_owned(),
        message: "tool_response_mode = \"external\" needs [env.external]".to_owned(),
    })?;
    Ok(Some(EndpointSimulator {
        client: ChatClient::new(endpoint)?,
        max_tokens: config.rl.max_response_tokens,
    }))
}

/// The weight decay of a phase's optimizer.
pub fn optimizer_weight_decay(config: &ExperimentConfig, phase: Phase) -> f64 {
    match phase {
        Phase::Sft => 0.0,
        Phase::Rl | Phase::Done => config.rl.weight_decay,
    }
}

fn model_path(config: &ExperimentConfig) -> Result<PathBuf> {
    config.model.path.clone().ok_or_else(|| Error::Data {
        source_name: "[model].path".to_owned(),
        message: "is required when [model].source is \"hf\" or \"gguf\"".to_owned(),
    })
}

/// `<store dir>/checkpoints/run-<id>`.
pub fn run_dir(store_path: &Path, run: RunId) -> PathBuf {
    store_path
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join("checkpoints")
        .join(format!("run-{}", run.0))
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        if let Ok(entries) = std::fs::read_dir(&next) {
            for entry in entries.flatten() {
                match entry.metadata() {
                    Ok(meta) if meta.is_dir() => stack.push(entry.path()),
                    Ok(meta) => total += meta.len(),
                    Err(_) => {}
                }
            }
        }
    }
    total
}
