//! The `envace-studio` desktop app: opens the studio on an experiment config.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use envace_studio::StudioState;

/// mimalloc instead of glibc malloc: candle allocates and frees many tensor buffers per step,
/// and glibc's returns them to the kernel only to page-fault them back in.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// EnvACE Studio: set up, run and compare world-rehearsal experiments.
#[derive(Debug, Parser)]
#[command(name = "envace-studio", version)]
struct Args {
    /// Experiment config to open; when it does not exist yet, the editor starts from the
    /// quickstart preset and saves there.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Run store file [default: $ENVACE_HOME/runs.sqlite, else the platform data directory].
    #[arg(long, value_name = "FILE")]
    store: Option<PathBuf>,
}

fn main() -> ExitCode {
    // Thread counts, candle's spin limit and the allocator (see `envace::runtime`).
    // SAFETY: no other thread exists yet at the start of main.
    #[allow(unsafe_code)] // The environment writes of the process, single-threaded.
    unsafe {
        envace::runtime::prepare_process(None);
    }
    let args = Args::parse();
    let store_path = match args.store.map_or_else(envace::store::default_path, Ok) {
        Ok(path) => path,
        Err(err) => {
            eprintln!("envace-studio: error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let state = StudioState {
        store_path,
        config_path: args.config,
    };
    match envace_studio::run(state) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("envace-studio: error: {err}");
            ExitCode::FAILURE
        }
    }
}
