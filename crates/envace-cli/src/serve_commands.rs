//! `envace serve-model`: a model file, folder or run checkpoint behind an OpenAI-compatible
//! endpoint, until Ctrl-C.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use envace::serve::{LoadedModel, ServeOptions, serve};
use envace::store::{self, Store};

/// Parses `--addr`: `IP:PORT`, or `HOST:PORT` resolved now (e.g. `localhost:8000`).
pub fn parse_addr(text: &str) -> std::result::Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let hint = "expected HOST:PORT such as 127.0.0.1:8000 (port 0 picks a free port)";
    match text.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("{text:?} resolves to no address; {hint}")),
        Err(err) => Err(format!("{text:?} is not an address ({err}); {hint}")),
    }
}

pub fn serve_model(
    model: Option<&Path>,
    run: Option<&str>,
    store_path: Option<&Path>,
    addr: SocketAddr,
    max_batch: u32,
    default_max_tokens: u32,
    dequantize: bool,
) -> Result<ExitCode> {
    let start = Instant::now();
    let loaded = match (model, run) {
        (Some(path), _) => {
            eprintln!("loading {} …", path.display());
            if dequantize {
                LoadedModel::from_path_dequantized(path)?
            } else {
                LoadedModel::from_path(path)?
            }
        }
        (None, Some(run)) => {
            let path = match store_path {
                Some(path) => path.to_path_buf(),
                None => store::default_path()?,
            };
            if !path.exists() {
                bail!(
                    "the run store {} does not exist; pass --store FILE or set ENVACE_HOME",
                    path.display()
                );
            }
            let store = Store::open(&path)?;
            eprintln!(
                "loading the latest checkpoint of run {run:?} from {} …",
                path.display()
            );
            LoadedModel::from_run(&store, run)?
        }
        (None, None) => bail!("pass --model PATH or --run RUN"),
    };
    let name = loaded.name().to_owned();
    let weights = loaded.weights();
    let options = ServeOptions {
        max_batch: max_batch as usize,
        default_max_tokens: default_max_tokens as usize,
        ..ServeOptions::default()
    };
    let server = serve(loaded, addr, &options)?;
    let stopper = server.stopper();
    let interrupted = AtomicBool::new(false);
    ctrlc::set_handler(move || {
        if interrupted.swap(true, Ordering::SeqCst) {
            eprintln!("stopping now");
            std::process::exit(130);
        }
        eprintln!("stopping: the batch being generated ends first (Ctrl-C again quits now)");
        stopper.stop();
    })
    .context("cannot install the Ctrl-C handler")?;
    out!("serving {name} at {}", server.url());
    std::io::stdout()
        .flush()
        .context("cannot write to standard output")?;
    eprintln!(
        "loaded in {:.1} s ({weights}); POST {url}/chat/completions, GET {url}/models, GET http://{addr}/health; Ctrl-C stops",
        start.elapsed().as_secs_f64(),
        url = server.url(),
        addr = server.local_addr(),
    );
    server.wait();
    eprintln!("stopped");
    Ok(ExitCode::SUCCESS)
}
