//! `envace serve-model`: a model file, folder or run checkpoint behind an OpenAI-compatible
//! endpoint, until Ctrl-C.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use envace::serve::{LoadedModel, ServeOptions, check_access, serve};
use envace::store::{self, Store};

use crate::ServeDevice;

#[cfg(feature = "wgpu")]
type GpuHandle = std::sync::Arc<envace::model::wgpu::Gpu>;
#[cfg(not(feature = "wgpu"))]
type GpuHandle = std::convert::Infallible;

/// Opens the wgpu adapter the model will generate on (its name goes to standard error).
#[cfg(feature = "wgpu")]
fn open_gpu(adapter: Option<&str>) -> Result<GpuHandle> {
    let gpu = envace::model::wgpu::open_gpu(adapter)?;
    eprintln!("generating on wgpu: {}", gpu.describe());
    Ok(gpu)
}

#[cfg(not(feature = "wgpu"))]
fn open_gpu(_adapter: Option<&str>) -> Result<GpuHandle> {
    bail!("this envace was built without the wgpu feature; rebuild with --features wgpu")
}

#[cfg(feature = "wgpu")]
fn on_gpu(loaded: LoadedModel, gpu: GpuHandle) -> Result<LoadedModel> {
    Ok(loaded.onto_gpu(gpu)?)
}

#[cfg(not(feature = "wgpu"))]
fn on_gpu(_loaded: LoadedModel, gpu: GpuHandle) -> Result<LoadedModel> {
    match gpu {}
}

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

/// What `envace serve-model` was asked to serve, and how.
pub struct ServeArgs<'a> {
    pub model: Option<&'a Path>,
    pub run: Option<&'a str>,
    pub store_path: Option<&'a Path>,
    pub addr: SocketAddr,
    pub max_batch: u32,
    pub default_max_tokens: u32,
    pub dequantize: bool,
    pub device: ServeDevice,
    pub adapter: Option<&'a str>,
    pub api_key_env: Option<&'a str>,
}

pub fn serve_model(args: ServeArgs<'_>) -> Result<ExitCode> {
    let ServeArgs {
        model,
        run,
        store_path,
        addr,
        max_batch,
        default_max_tokens,
        dequantize,
        device,
        adapter,
        api_key_env,
    } = args;
    if adapter.is_some() && device != ServeDevice::Wgpu {
        bail!("--adapter picks a wgpu adapter: pass it with --device wgpu");
    }
    // Both refused before minutes of loading.
    let api_key = match api_key_env {
        Some(name) => match std::env::var(name) {
            Ok(key) if !key.is_empty() => Some(key),
            _ => bail!(
                "--api-key-env {name}: the environment variable {name} is not set (or empty); put the key in it"
            ),
        },
        None => None,
    };
    let options = ServeOptions {
        max_batch: max_batch as usize,
        default_max_tokens: default_max_tokens as usize,
        api_key,
        ..ServeOptions::default()
    };
    check_access(addr, &options)?;
    let start = Instant::now();
    // The adapter opens first: a missing one is refused before minutes of loading.
    let gpu = match device {
        ServeDevice::Cpu => None,
        ServeDevice::Wgpu => Some(open_gpu(adapter)?),
    };
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
    let loaded = match gpu {
        None => loaded,
        Some(gpu) => on_gpu(loaded, gpu)?,
    };
    let name = loaded.name().to_owned();
    let weights = loaded.weights();
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
    if let Some(name) = api_key_env {
        eprintln!("requests need the key in ${name}: Authorization: Bearer KEY (all but /health)");
    }
    server.wait();
    eprintln!("stopped");
    Ok(ExitCode::SUCCESS)
}
