//! Prints the policy layer's throughput figures as JSON (see `envace::bench`): tiny
//! Qwen3 training tokens/s, its single-stream and batch-16 decoding, and SmolLM2-135M decoding
//! in Q4_1 and dequantized f32.
//!
//! `cargo run --release -p envace --example model_bench [-- --quick] [--no-smollm2]`
//!
//! For profiling one part alone: `-- --only train` (the tiny model's training steps),
//! `-- --only tiny-decode` (single-stream and batched decoding of the tiny model) or
//! `-- --only q4-decode` (SmolLM2 on our quantised kernels). `--device cuda` measures training
//! of the tiny model and of a SmolLM2-135M-shaped one, and the tiny model's decoding, on the
//! GPU instead (a build with the `cuda` feature; `cargo xtask device-check`). `--decode-tokens N` sets the new
//! tokens per decoded row (64 by default), `--temperature T` makes `tiny-decode` sample (as
//! RL rollouts do, at 1) instead of greedy, and `--train-steps N` sets the timed training steps.

use candle_core::{DType, Device};
use envace::bench::{self, BenchOptions};
use envace::model::{Gguf, Policy, Sampling};

/// mimalloc instead of glibc malloc: candle allocates and frees many tensor buffers per step,
/// and glibc's returns them to the kernel only to page-fault them back in.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The settings our binaries run training and decoding with (see `envace::runtime`).
    // SAFETY: the start of main, before any other thread exists.
    #[allow(unsafe_code)] // The environment writes of the process, single-threaded.
    unsafe {
        envace::runtime::prepare_process(None);
    }
    envace::model::quant::checked_simd_level()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut options = BenchOptions::default();
    let mut only = None;
    let mut device = None;
    let mut sampling = Sampling::greedy();
    let mut args_iter = args.iter();
    while let Some(arg) = args_iter.next() {
        match arg.as_str() {
            "--only" => only = args_iter.next().cloned(),
            "--quick" => {
                options.n_train_steps = 1;
                options.n_decode_tokens = 16;
            }
            "--no-smollm2" => options.smollm2 = false,
            "--train-batch" => {
                options.train_batch = args_iter
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n: &usize| n > 0)
                    .ok_or("--train-batch needs a whole number above 0")?;
            }
            "--device" => {
                device = match args_iter.next().map(String::as_str) {
                    Some("cpu") => None,
                    Some("cuda") => Some(envace::model::resolve_device(
                        envace::config::Device::Cuda,
                        0,
                    )?),
                    other => {
                        return Err(format!("--device takes cpu or cuda, not {other:?}").into());
                    }
                };
            }
            "--decode-tokens" => {
                options.n_decode_tokens = args_iter
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--decode-tokens needs a whole number")?;
            }
            "--temperature" => {
                sampling.temperature = args_iter
                    .next()
                    .and_then(|t| t.parse().ok())
                    .ok_or("--temperature needs a number")?;
            }
            "--train-steps" => {
                options.n_train_steps = args_iter
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--train-steps needs a whole number")?;
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; use --quick, --no-smollm2, --device cpu|cuda, --train-steps N, --decode-tokens N, --temperature T or --only PART"
                )
                .into());
            }
        }
    }
    if let Some(device) = device {
        // A GPU: the device benchmark (`cargo xtask device-check`), one JSON line.
        let figures = bench::run_on_device(&options, &device)?;
        println!("{}", serde_json::to_string(&figures)?);
        return Ok(());
    }
    match only.as_deref() {
        None => {}
        Some("tiny-decode") => {
            let tiny = Policy::init(bench::tiny_default_config()?, 0, &Device::Cpu, DType::F32)?;
            for batch in [1, options.decode_batch] {
                let figures = bench::bench_decode(
                    &tiny,
                    "tiny-qwen3 f32",
                    batch,
                    16,
                    options.n_decode_tokens,
                    &sampling,
                )?;
                println!("{}", serde_json::to_string(&figures)?);
            }
            return Ok(());
        }
        Some("q4-decode") => {
            let gguf = Gguf::open(&envace::model::smollm2_gguf()?)?;
            let mut quantized = gguf.load_quantized(&Device::Cpu)?;
            let name = format!("smollm2-135m q4_1 ({})", quantized.backend_name());
            let figures = bench::bench_quantized_decode(
                &mut quantized,
                &name,
                &bench::smollm2_prompt(),
                options.n_decode_tokens,
            )?;
            println!("{}", serde_json::to_string(&figures)?);
            return Ok(());
        }
        Some("train") => {
            let tiny = Policy::init(bench::tiny_default_config()?, 0, &Device::Cpu, DType::F32)?;
            let figures = bench::bench_train(
                &tiny,
                options.train_batch,
                options.train_seq_len,
                options.n_train_steps,
            )?;
            println!("{}", serde_json::to_string(&figures)?);
            return Ok(());
        }
        Some(other) => {
            return Err(
                format!("unknown part {other:?}; use train, tiny-decode or q4-decode").into(),
            );
        }
    }
    let figures = bench::run(&options)?;
    println!("{}", serde_json::to_string_pretty(&figures)?);
    Ok(())
}
