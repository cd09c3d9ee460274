//! Prints the wgpu path's decoding throughput against the CPU path's as one JSON line (see
//! `envace::bench_wgpu`), with the adapter's name.
//!
//! `cargo run --release -p envace --example wgpu_bench [-- --quick] [--no-smollm2]
//! [--adapter NAME] [--new-tokens N]`

use envace::bench_wgpu::{self, WgpuBenchOptions};

/// mimalloc, as our binaries run: the CPU side is measured as users get it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: the start of main, before any other thread exists.
    #[allow(unsafe_code)] // The environment writes of the process, single-threaded.
    unsafe {
        envace::runtime::prepare_process(None);
    }
    let mut options = WgpuBenchOptions::default();
    let mut adapter = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => {
                options.n_new = 8;
                options.batches = vec![1, 4];
            }
            "--no-smollm2" => options.smollm2 = false,
            "--adapter" => adapter = Some(args.next().ok_or("--adapter needs a name")?),
            "--new-tokens" => {
                options.n_new = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--new-tokens needs a whole number")?;
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; use --quick, --no-smollm2, --adapter NAME or --new-tokens N"
                )
                .into());
            }
        }
    }
    let gpu = envace::model::wgpu::open_gpu(adapter.as_deref())?;
    eprintln!("adapter: {}", gpu.describe());
    let figures = bench_wgpu::run(gpu, &options)?;
    println!("{}", serde_json::to_string(&figures)?);
    Ok(())
}
