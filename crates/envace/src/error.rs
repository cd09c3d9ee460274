//! The engine's one error type: every failure names the file, field or value at fault.

use std::path::PathBuf;

use crate::config::ConfigErrors;

/// Result with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the engine, each with what a person needs to act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder at fault.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },

    /// An experiment config is invalid; every problem found is listed.
    #[error(transparent)]
    Config(#[from] ConfigErrors),

    /// No preset has this name.
    #[error("unknown preset {name:?}; the presets are: {available}")]
    UnknownPreset {
        /// The name asked for.
        name: String,
        /// The names that exist, comma-separated.
        available: String,
    },

    /// SQLite failed on the run store.
    #[error("run store {}: {source}", path.display())]
    Store {
        /// The store file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },

    /// The run store file is not one this build can use.
    #[error("run store {}: {message}", path.display())]
    StoreFormat {
        /// The store file.
        path: PathBuf,
        /// Why it cannot be used.
        message: String,
    },

    /// No run matches what was asked for.
    #[error("no run matches {0:?}; `envace runs list` shows the runs in this store")]
    RunNotFound(String),

    /// Imported or exported data is malformed; names the source and the record.
    #[error("{source_name}: {message}")]
    Data {
        /// The file (or stream) and record at fault, e.g. `metrics.csv, row 12`.
        source_name: String,
        /// What is wrong with it.
        message: String,
    },

    /// A config edit could not be applied.
    #[error("cannot set {path}: {message}")]
    ConfigEdit {
        /// Dotted TOML path of the key.
        path: String,
        /// Why not.
        message: String,
    },

    /// The platform gives no data directory and `ENVACE_HOME` is not set.
    #[error(
        "cannot find a data directory for the run store on this platform; set ENVACE_HOME or pass --store FILE"
    )]
    NoDataDir,

    /// A τ²-bench domain file (db.json, tasks.json, policy.md, split_tasks.json) is missing or
    /// does not have the expected shape.
    #[error("τ²-bench data {}: {message}", path.display())]
    Tau2Data {
        /// The file or folder at fault.
        path: PathBuf,
        /// What is missing or malformed, naming the record or field.
        message: String,
    },

    /// A VitaBench task file is missing, unreadable, or a task does not have the expected shape.
    #[error("VitaBench data {}: {message}", path.display())]
    VitaData {
        /// The file at fault.
        path: PathBuf,
        /// What is missing or malformed, naming the task and field.
        message: String,
    },

    /// A tool-call dataset or predictions file is unreadable or a sample lacks a field.
    #[error("tool-call data {}: {message}", path.display())]
    ToolData {
        /// The file at fault.
        path: PathBuf,
        /// What is missing or malformed, naming the sample and field.
        message: String,
    },

    /// A BFCL multi-turn task cannot be set up: its `initial_config` does not fit the class, or
    /// it involves a class that is not rebuilt.
    #[error("BFCL {context}: {message}")]
    BfclTask {
        /// The task id, or the class when no task is known.
        context: String,
        /// What does not fit, naming the field.
        message: String,
    },

    /// A built-in tool's parameter schema does not compile as JSON Schema (a bug in the tool table).
    #[error("tool {tool:?}: its parameter schema is not valid JSON Schema: {message}")]
    ToolSchema {
        /// The tool whose schema is at fault.
        tool: String,
        /// What the JSON Schema compiler said.
        message: String,
    },

    /// pass^k was asked for with impossible counts (fewer trials than k, or more successes
    /// than trials).
    #[error("pass^k: {problem} (n_trials = {n_trials}, n_successes = {n_successes}, k = {k})")]
    PassHatK {
        /// What is wrong with the counts.
        problem: &'static str,
        /// Trials of the task.
        n_trials: u64,
        /// Successful trials.
        n_successes: u64,
        /// The k asked for.
        k: u64,
    },

    /// A tensor operation of the policy model failed (shape, dtype or device mismatch, or an
    /// out-of-memory on the device).
    #[error("model {context}: {source}")]
    Candle {
        /// What the model was doing, e.g. `qwen3 training forward`.
        context: String,
        /// What candle said.
        source: candle_core::Error,
    },

    /// A model `config.json` (or a tiny model config) is invalid or describes something this
    /// build does not implement.
    #[error("{source_name}: {message}")]
    ModelConfig {
        /// The file (or config section) at fault, with the field when known.
        source_name: String,
        /// What is wrong with it.
        message: String,
    },

    /// Model weights are missing, malformed or of the wrong shape.
    #[error("{}: {message}", path.display())]
    Weights {
        /// The weights file or model folder at fault.
        path: PathBuf,
        /// What is wrong, naming the tensor.
        message: String,
    },

    /// A compute backend was asked for that this build does not include.
    #[error(
        "the {backend} backend is not compiled into this build; rebuild with `--features {feature}` or choose `device = \"cpu\"`"
    )]
    BackendNotCompiled {
        /// The backend asked for, e.g. `cuda`.
        backend: &'static str,
        /// The cargo feature that enables it.
        feature: &'static str,
    },

    /// A compiled-in device could not be opened.
    #[error("cannot open {device}: {message}")]
    DeviceUnavailable {
        /// The device asked for, e.g. `cuda:1`.
        device: String,
        /// What the driver said.
        message: String,
    },

    /// Work on a wgpu device failed (a kernel's shapes, a weight, or the GPU itself).
    #[error("wgpu, {context}: {message}")]
    Wgpu {
        /// What was being done, e.g. `uploading the policy`.
        context: String,
        /// What the GPU side said.
        message: String,
    },

    /// A model, tokenizer or template file that `cargo xtask setup` installs is not there.
    #[error("{what} is missing: {} does not exist; run `cargo xtask setup` (or set ENVACE_CACHE_DIR to the folder that holds it)", path.display())]
    MissingAsset {
        /// The file expected.
        path: PathBuf,
        /// What it is, e.g. `the SmolLM2-135M-Instruct GGUF`.
        what: String,
    },

    /// A tokenizer could not be loaded, built, trained or saved, or failed on a text.
    #[error("tokenizer {source_name}: {message}")]
    Tokenizer {
        /// The tokenizer file (or how it was being built).
        source_name: String,
        /// What the tokenizers library said.
        message: String,
    },

    /// A chat template failed to parse or render.
    #[error("chat template {source_name}: {message}")]
    ChatTemplate {
        /// Where the template came from, e.g. `tokenizer_config.json`.
        source_name: String,
        /// What went wrong, with the template line when known.
        message: String,
    },

    /// Task generation cannot go on: names what (a domain, a family, a task id) and why.
    #[error("task generation, {what}: {message}")]
    TaskGen {
        /// The domain, family, task or parameter at fault.
        what: String,
        /// What went wrong.
        message: String,
    },

    /// The experiment names stdio MCP servers whose exact command lines the user has not
    /// confirmed (see [`crate::trust`]); nothing was run or written.
    #[error(
        "the experiment runs MCP servers whose command lines have not been confirmed: {servers}; confirm each once (`envace config confirm-mcp CONFIG`, or the studio's prompt when the run starts) before it runs"
    )]
    McpUnconfirmed {
        /// Each as `field: \`command line\``, comma-separated.
        servers: String,
    },

    /// An MCP server could not be served, reached or initialised; names the server.
    #[error("MCP {server}: {message}")]
    Mcp {
        /// The server: a command line, a URL or what was being served.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// An OpenAI-compatible endpoint is configured in a way this client cannot use (an unset
    /// API key variable, a URL it cannot reach); names the field and the value.
    #[error("endpoint {field}: {message}")]
    Endpoint {
        /// The `EndpointConfig` field at fault, e.g. `api_key_env`.
        field: String,
        /// What is wrong, with the value.
        message: String,
    },

    /// The model server could not load its model or start listening; names the file, the run
    /// or the address.
    #[error("{what}: {message}")]
    Serve {
        /// The model path, run or address at fault.
        what: String,
        /// What went wrong and what to do about it.
        message: String,
    },

    /// A checkpoint could not be written (a full disk, say); nothing of it was kept.
    #[error("the checkpoint of step {step} could not be written: {message}")]
    Checkpoint {
        /// The last completed step it was for.
        step: u64,
        /// The failure, the checkpoint a resume starts from, and what to do.
        message: String,
    },
}

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Wraps a candle error with what the model was doing.
    pub fn candle(context: impl Into<String>, source: candle_core::Error) -> Self {
        Error::Candle {
            context: context.into(),
            source,
        }
    }
}
