//! The `envace` command line: experiment configs and the run store, from a terminal.

/// `println!` that returns the write's error instead of panicking, so that output piped into a
/// reader that stops early (`envace runs list | head`) ends the command quietly (see `main`).
macro_rules! out {
    ($($arg:tt)*) => {
        std::io::Write::write_fmt(
            &mut std::io::stdout(),
            format_args!("{}\n", format_args!($($arg)*)),
        )?
    };
}

mod commands;
mod confirm_mcp;
mod env_commands;
mod eval_command;
mod monitor_command;
mod serve_commands;
mod train_command;
mod verl_commands;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// mimalloc instead of glibc malloc: candle allocates and frees many tensor buffers per step,
/// and glibc's returns them to the kernel only to page-fault them back in.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// EnvACE Studio from the command line: validate experiment configs, inspect and export runs,
/// call and serve the built-in environments, serve a model as an OpenAI-compatible endpoint.
#[derive(Debug, Parser)]
#[command(name = "envace", version, propagate_version = true)]
struct Cli {
    /// Run store file [default: $ENVACE_HOME/runs.sqlite, else the platform data directory].
    #[arg(long, global = true, value_name = "FILE")]
    store: Option<PathBuf>,

    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

/// `envace export …`.
#[derive(Debug, Subcommand)]
enum ExportCommand {
    /// The launcher folder for the reference EnvACE trainer (verl on Ray): run.sh, README.md,
    /// the checklist dataset as Parquet; settings with no equivalent are printed as warnings.
    Verl {
        /// The experiment config (TOML).
        #[arg(value_name = "CONFIG")]
        config: PathBuf,
        /// The folder to write.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// A setting the reference needs and the config lacks (model_path, simulator_model_path,
        /// judge_url, judge_model, nnodes, gpus_per_node); repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Replace the files of a folder that is not empty.
        #[arg(long)]
        force: bool,
    },
}

/// `envace import …`.
#[derive(Debug, Subcommand)]
enum ImportCommand {
    /// A verl run folder (as `export verl` laid it out, after the cluster ran it) as a run of
    /// the store, marked imported; importing again adds only what the folder gained.
    Verl {
        /// The run folder (rollout_dumps/, logs/console.log).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Experiment configs: validate, print the schema, start from a preset.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Runs in the store: list, show, export.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Built-in environments: call a tool, replay a τ²-bench task.
    #[command(subcommand)]
    Env(EnvCommand),
    /// Public benchmarks: evaluate a model, a run's checkpoint or an endpoint on them
    /// (`--bench bfcl:simple_python,…`), or score another system's outputs (`eval score`).
    Eval(Box<EvalArgs>),
    /// Train an experiment: SFT warm start, then role-wise GRPO; Ctrl-C stops cleanly after a
    /// checkpoint.
    Train {
        /// The experiment config (TOML).
        #[arg(value_name = "CONFIG")]
        config: PathBuf,
        /// Continue this run (id or name) from its latest checkpoint.
        #[arg(long, value_name = "RUN")]
        resume: Option<String>,
        /// Also open the native monitor window on the run (it stays open after training ends).
        #[arg(long)]
        monitor: bool,
    },
    /// Write an experiment out for another trainer: `export verl` writes a launcher folder for
    /// the reference verl implementation on a Ray cluster.
    #[command(subcommand)]
    Export(ExportCommand),
    /// Read another trainer's run into the store: `import verl` reads a verl run folder's
    /// rollout dumps and console metrics (again at any time to follow a live run).
    #[command(subcommand)]
    Import(ImportCommand),
    /// Open the native run monitor: follow the store's runs live and compare their curves.
    Monitor {
        /// Runs to draw at first (ids or names; none: the newest run).
        #[arg(value_name = "RUN")]
        runs: Vec<String>,
    },
    /// Serve a built-in domain as an MCP server (one environment state per session).
    ServeEnv {
        /// The domain to serve.
        #[arg(value_enum)]
        domain: DomainArg,
        /// Serve over standard input and output.
        #[arg(long, required_unless_present = "http", conflicts_with = "http")]
        stdio: bool,
        /// Serve streamable HTTP on this address (endpoint /mcp), e.g. 127.0.0.1:8931.
        #[arg(long, value_name = "ADDR")]
        http: Option<SocketAddr>,
        /// τ²-bench data: the domain folder (with db.json) or the folder above it.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
    },
    /// Serve a model (a file, a folder, or a run's latest checkpoint) as an OpenAI-compatible
    /// chat-completions endpoint: POST /v1/chat/completions, GET /v1/models, GET /health.
    ServeModel {
        /// A .gguf file or a Hugging Face model folder (config.json, safetensors weights,
        /// tokenizer.json, tokenizer_config.json).
        #[arg(
            long,
            value_name = "PATH",
            required_unless_present = "run",
            conflicts_with = "run"
        )]
        model: Option<PathBuf>,
        /// Serve this run's latest checkpoint (run id, or the newest run with that name) from
        /// the run store (--store).
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        /// Address to listen on, e.g. 127.0.0.1:8000 (port 0 picks a free port). An address
        /// beyond loopback serves the network and needs --api-key-env.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8000", value_parser = serve_commands::parse_addr)]
        addr: SocketAddr,
        /// Most requests generated together in one batch.
        #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
        max_batch: u32,
        /// New tokens of a reply when a request sets no max_tokens.
        #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
        default_max_tokens: u32,
        /// Serve a .gguf file on weights dequantised to f32 (as training sees them) instead
        /// of its quantised weights on our own kernels (the default, and faster).
        #[arg(long, conflicts_with = "run")]
        dequantize: bool,
        /// Where the model generates: the CPU, or any GPU wgpu reaches (Vulkan, Metal, DX12;
        /// a GGUF's Q4_1 / Q8_0 weights stay quantised there), e.g. as the external simulator
        /// of a training run on a machine without CUDA.
        #[arg(long, value_enum, default_value_t = ServeDevice::Cpu)]
        device: ServeDevice,
        /// With --device wgpu: part of the adapter's name, to pick one among several (the
        /// best one otherwise: a discrete GPU before an integrated one, a CPU adapter last).
        #[arg(long, value_name = "NAME")]
        adapter: Option<String>,
        /// The name of an environment variable holding an API key: requests must then send
        /// `Authorization: Bearer KEY` (all but /health; 401 otherwise). Needed to listen
        /// beyond loopback.
        #[arg(long, value_name = "NAME")]
        api_key_env: Option<String>,
    },
}

/// Where `serve-model` generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ServeDevice {
    /// Our CPU kernels (candle's elsewhere).
    Cpu,
    /// A GPU through wgpu.
    Wgpu,
}

#[derive(Debug, Subcommand)]
enum EnvCommand {
    /// Call one tool on a fresh environment and print the response the agent would see.
    Call {
        /// The domain.
        #[arg(value_enum)]
        domain: DomainArg,
        /// The tool name.
        tool: String,
        /// The arguments, a JSON object.
        #[arg(long, default_value = "{}", value_name = "JSON")]
        args: String,
        /// τ²-bench data: the domain folder (with db.json) or the folder above it.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
    },
    /// Connect to any MCP server as training and evaluation would (a command spoken to over its
    /// stdin and stdout, given after `--`, or --url) and list its tools, one a line, or call one
    /// with --call and print the response the agent would see.
    Mcp {
        /// Call this tool instead of listing the tools.
        #[arg(long, value_name = "TOOL")]
        call: Option<String>,
        /// The arguments of --call, a JSON object.
        #[arg(long, default_value = "{}", value_name = "JSON", requires = "call")]
        args: String,
        /// A streamable-HTTP server's URL instead of a command, e.g. http://127.0.0.1:8931/mcp.
        #[arg(
            long,
            value_name = "URL",
            conflicts_with = "command",
            required_unless_present = "command"
        )]
        url: Option<String>,
        /// Seconds the server gets to connect (start, answer initialize and tools/list), and
        /// then to answer the call.
        #[arg(long, value_name = "SECS", default_value_t = 30.0, value_parser = eval_command::parse_timeout)]
        timeout: f64,
        /// Attempts to connect, and of a call to a read-only tool (a state-changing call is
        /// made once).
        #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10))]
        attempts: u32,
        /// The server's command and its arguments, e.g. `-- npx -y @modelcontextprotocol/server-everything`.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Replay a τ²-bench task's gold actions; print each response and the final state hash.
    Replay {
        /// The domain (retail or airline).
        #[arg(value_enum)]
        domain: DomainArg,
        /// τ²-bench data: the domain folder (with db.json) or the folder above it.
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// The task id in tasks.json.
        #[arg(long)]
        task: String,
        /// Write the final database as JSON to this file.
        #[arg(long, value_name = "FILE")]
        dump_state: Option<PathBuf>,
        /// Overwrite --dump-state if it exists.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct EvalArgs {
    #[command(subcommand)]
    command: Option<EvalCommand>,
    /// Evaluate this model: a .gguf file or a Hugging Face model folder (served in-process).
    #[arg(long, value_name = "PATH", required_unless_present_any = ["run", "endpoint"], conflicts_with_all = ["run", "endpoint"])]
    model: Option<PathBuf>,
    /// Evaluate this run's latest checkpoint (id or name, in --store), or its checkpoint at a
    /// step with RUN@STEP; its scores are stored with the run at that step.
    #[arg(long, value_name = "RUN[@STEP]", conflicts_with = "endpoint")]
    run: Option<String>,
    /// Evaluate the model behind this OpenAI-compatible endpoint (base URL, e.g.
    /// http://127.0.0.1:8000/v1).
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// The model name sent to --endpoint.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "default",
        requires = "endpoint"
    )]
    endpoint_model: String,
    /// Benchmarks and categories, comma-separated: bfcl:simple_python, bfcl:multiple, …,
    /// tau2:retail, tau2:airline, vita:delivery, tools:NAME (NAME.jsonl, a tool-call dataset in
    /// OpenAI format, in --data or its tools/ folder).
    #[arg(long, value_name = "LIST", value_delimiter = ',', required = true)]
    bench: Vec<String>,
    /// The benchmark data: the folder holding bfcl/, tau2-bench/ and vitabench/ (or one
    /// benchmark's folder itself).
    #[arg(long, value_name = "DIR", required = true)]
    data: Option<PathBuf>,
    /// Only the first N tasks of each category or domain.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// τ²-bench and VitaBench: the user simulator's OpenAI-compatible endpoint (e.g. one `envace
    /// serve-model` started), or `self` for the evaluated model.
    #[arg(long, value_name = "URL|self")]
    user_endpoint: Option<String>,
    /// The model name sent to --user-endpoint.
    #[arg(long, value_name = "NAME", default_value = "default")]
    user_model: String,
    /// τ²-bench: the endpoint that judges NL assertions (retail); VitaBench: the rubric judge;
    /// or `self`. Without one, conversations that need a judge are masked, not scored.
    #[arg(long, value_name = "URL|self")]
    judge_endpoint: Option<String>,
    /// The model name sent to --judge-endpoint.
    #[arg(long, value_name = "NAME", default_value = "default")]
    judge_model: String,
    /// τ²-bench and VitaBench: conversations per task (pass^k, and VitaBench's Pass@k, are
    /// reported for k up to this).
    #[arg(long, value_name = "K", default_value_t = 1)]
    trials: usize,
    /// τ²-bench and VitaBench: most messages in a conversation (default: each benchmark's own,
    /// 100 for τ²-bench, 300 for VitaBench).
    #[arg(long, value_name = "N")]
    max_steps: Option<usize>,
    /// τ²-bench: the task split (base = every task, train, test).
    #[arg(long, value_name = "NAME", default_value = "base")]
    split: String,
    /// τ²-bench and VitaBench: test-time private rehearsal, parallel:N or sequential:N imagined
    /// attempts before each agent turn, in which the evaluated model plays the tools itself
    /// (nothing else is asked); the scores are stored as `<benchmark>@parallel:N`, beside the
    /// plain ones.
    #[arg(long, value_name = "STYLE:N")]
    rehearsal: Option<String>,
    /// Sampling temperature of the evaluated model and the user simulator (each trial has
    /// its own seed).
    #[arg(long, value_name = "T", default_value_t = 0.0)]
    temperature: f64,
    /// Write every task's record (prompt, calls, verdict, reason) as JSON Lines to this file.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Overwrite --out if it exists.
    #[arg(long)]
    force: bool,
    /// Store the scores and task records of --model or --endpoint in --store as an evaluation
    /// run named NAME (no training; its step is 0), created the first time and reused after,
    /// so the studio's Benchmarks tab shows them beside trained runs.
    #[arg(long, value_name = "NAME", conflicts_with = "run")]
    record_as: Option<String>,
    /// Most tokens of a reply.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_tokens: u32,
    /// Seconds each request to an endpoint (--endpoint, --user-endpoint, --judge-endpoint, and
    /// the model served for --model or --run) may take, from sending it to the reply's last
    /// byte; a request that runs out is tried twice more, then the endpoint is given up.
    #[arg(long, value_name = "SECS", default_value_t = 600.0, value_parser = eval_command::parse_timeout)]
    timeout: f64,
    /// Also report progress as JSON lines on stderr, `{"bench": "bfcl:simple_python", "done":
    /// 3, "total": 50}`, for programs that drive `envace eval` (the studio does).
    #[arg(long)]
    progress_json: bool,
    /// Send function names with dots written as underscores (for endpoints that forbid dots).
    #[arg(long)]
    underscore_names: bool,
    /// BFCL's prompt mode: the functions described in the system prompt and the calls read
    /// from the reply as a Python list, for models without tool-call training (Python
    /// categories only).
    #[arg(long)]
    prompting: bool,
}

#[derive(Debug, Subcommand)]
enum EvalCommand {
    /// Score decoded calls from any system with a benchmark's checker; prints each task's
    /// verdict with its reason, then the accuracy.
    #[command(subcommand)]
    Score(ScoreCommand),
}

#[derive(Debug, Subcommand)]
enum ScoreCommand {
    /// BFCL-v4 with its AST checker: OUTPUTS holds one JSON object a line, `{"id": …,
    /// "result": [{name: {param: value}}, …]}` (Java and JavaScript arguments as source text).
    Bfcl {
        /// The benchmark data: the BFCL folder, or the folder holding `bfcl/`.
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// The category (simple_python, simple_java, simple_javascript, multiple, parallel,
        /// parallel_multiple, irrelevance).
        #[arg(long, value_name = "NAME")]
        category: String,
        /// The decoded calls, JSON Lines.
        #[arg(long, value_name = "FILE")]
        outputs: PathBuf,
        /// The outputs name functions with dots written as underscores (`math_factorial` for
        /// `math.factorial`), as tool-calling APIs that forbid dots do.
        #[arg(long)]
        underscore_names: bool,
        /// Print one JSON object: the verdicts and the accuracy.
        #[arg(long)]
        json: bool,
    },
    /// FinMCP-style tool metrics: DATA is a dataset of OpenAI-format conversations (JSON Lines
    /// or a JSON array, with optional `scenario` and `difficulty`), OUTPUTS another system's
    /// predictions, one JSON object a line, `{"id": …, "tool_calls": [names or OpenAI calls]}`
    /// or `{"id": …, "messages": [its conversation]}`.
    Tools {
        /// The dataset file.
        #[arg(long, value_name = "FILE")]
        data: PathBuf,
        /// The predictions, JSON Lines.
        #[arg(long, value_name = "FILE")]
        outputs: PathBuf,
        /// Print one JSON object: every sample and the metrics.
        #[arg(long)]
        json: bool,
    },
}

/// A built-in domain.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum DomainArg {
    /// τ²-bench retail.
    Retail,
    /// τ²-bench airline.
    Airline,
    /// Stateless BFCL-style functions.
    Functions,
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Check config files; every error is listed with its TOML path and line:column.
    Validate {
        /// Config files to check.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Print the JSON Schema of the config (what the studio's form editor reads).
    Schema {
        /// Write to this file instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Overwrite --out if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Write a preset config to start from.
    Init {
        /// Preset name (see `envace config presets`).
        #[arg(long, default_value = "quickstart")]
        preset: String,
        /// Write to this file instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Overwrite --out if it exists.
        #[arg(long)]
        force: bool,
    },
    /// List the presets.
    Presets,
    /// Show the exact command line of each stdio MCP server the config starts
    /// (`[[env.mcp_servers]]`) and ask to confirm it; a job runs only confirmed commands.
    ConfirmMcp {
        /// The experiment config (TOML).
        #[arg(value_name = "FILE")]
        config: PathBuf,
        /// Confirm every command shown without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Write the generated tasks a job with this config trains or evaluates on, exactly as
    /// the job generates them (same seeds, sizes and order), one JSON object per line: id,
    /// family, request, checklists (the rule judge's standards) and the oracle trajectory.
    Tasks {
        /// The experiment config (TOML).
        #[arg(value_name = "FILE")]
        config: PathBuf,
        /// Which pool.
        #[arg(long, value_enum, default_value = "rl")]
        pool: PoolArg,
        /// Only the first N tasks of the pool.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Write to this file instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Overwrite --out if it exists.
        #[arg(long)]
        force: bool,
    },
}

/// A job's task pool.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum PoolArg {
    /// The SFT corpus.
    Sft,
    /// The RL prompts, in the order the steps take them.
    Rl,
    /// The held-out tasks evaluations score.
    HeldOut,
}

#[derive(Debug, Subcommand)]
enum RunsCommand {
    /// List the runs, newest first.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one run: status, latest metrics, evaluations, checkpoints.
    Show {
        /// Run id, or name (the newest run with that name).
        run: String,
        /// Also print the run's config.
        #[arg(long)]
        config: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Evaluate the rehearsal-budget curve of a run's latest checkpoint on its held-out tasks:
    /// success after N private imagined attempts, parallel and sequential, stored with the
    /// run's evaluations (the studio draws it); a checkpoint the run never evaluated (it was
    /// stopped between evaluations) gets its plain evaluation, the curve's N = 0, first.
    Rehearse {
        /// Run id, or name (the newest run with that name).
        run: String,
        /// Budgets N, comma-separated (default: the run's `[rehearsal].budget_curve`).
        #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
        budgets: Vec<u32>,
        /// Longest memory in tokens (default: the run's `[rehearsal].max_memory_tokens`).
        #[arg(long, value_name = "TOKENS")]
        max_memory_tokens: Option<u32>,
        /// Also write every committed episode (with its memory) to this new JSON Lines file,
        /// beside a plain pass with no imagined attempt, each line with its `category`.
        #[arg(long, value_name = "FILE")]
        episodes: Option<PathBuf>,
    },
    /// Export one table of a run as CSV or JSON Lines.
    Export {
        /// Run id, or name (the newest run with that name).
        run: String,
        /// File format.
        #[arg(long, value_enum)]
        format: FormatArg,
        /// Which rows to export.
        #[arg(long, value_enum, default_value = "metrics")]
        table: TableArg,
        /// Write to this file instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Overwrite --out if it exists.
        #[arg(long)]
        force: bool,
    },
}

/// Export file format.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// Table to export.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum TableArg {
    /// step, key, value, wall_time.
    Metrics,
    /// wall_time, level, step, message, fields.
    Events,
    /// step, benchmark, category, metric, value, n_tasks, wall_time.
    Evals,
    /// step, benchmark, task_id, trial, score, reason, data: every benchmark task's record.
    EvalTasks,
}

fn main() -> ExitCode {
    pin_compute_threads(None);
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    if let Err(err) = envace::model::quant::checked_simd_level() {
        eprintln!("error: {err}");
        return ExitCode::FAILURE;
    }
    match commands::run(cli) {
        Ok(code) => code,
        // The reader of our output went away: nothing is left to say to it.
        Err(err) if closed_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", error_text(&err));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by `: `, leaving out a cause whose text the message before
/// it already says (the engine's errors carry their source's text in their own message, and
/// SQLite's repeat theirs), so that each thing is said once.
fn error_text(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let said = cause.to_string();
        if text.is_empty() {
            text = said;
        } else if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
    }
    text
}

/// Whether `err` comes from writing to a pipe whose reader has closed it.
fn closed_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The most ureq's protocol layer may log: see [`init_tracing`].
const UREQ_PROTO_AT_MOST: &str = "ureq_proto=debug";

fn init_tracing(verbose: u8) {
    let default = match verbose {
        // rmcp warns once per message it did not expect, so an MCP server that floods its
        // stdout with notifications would flood stderr too; what a failed server said is in
        // the engine's own error (`envace::mcp`), and -v shows rmcp's warnings again.
        0 => "warn,rmcp=error",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // At trace level ureq's protocol layer dumps every byte it sends, the Authorization header
    // with an endpoint's API key included; at debug it logs requests with that header
    // redacted. It stays at debug whatever RUST_LOG asks, so a key never reaches a log
    // (`tests/commands/secrets.rs`).
    let filter = match UREQ_PROTO_AT_MOST.parse() {
        Ok(cap) => filter.add_directive(cap),
        Err(_) => filter,
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

/// Sets the compute environment `envace::runtime` asks for: `RAYON_NUM_THREADS` (to
/// `n_threads`, else to the available parallelism when it is unset) and candle's pool spin
/// limit, and keeps freed memory in the allocator.
pub(crate) fn pin_compute_threads(n_threads: Option<usize>) {
    // SAFETY: this runs at the start of `main` and before the training controller starts its
    // threads, so no other thread reads the environment meanwhile.
    #[allow(unsafe_code)] // The environment writes of the process, single-threaded (above).
    unsafe {
        envace::runtime::prepare_process(n_threads);
    }
}
