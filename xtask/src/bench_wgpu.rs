//! `cargo xtask bench wgpu`: the wgpu path's decoding against the CPU path's in one run
//! (example `wgpu_bench` of the engine): the quickstart's tiny model and SmolLM2-135M at batch
//! 1 and 16, the same prompts greedily on both, with the adapter's name and the cost of a full
//! weight refresh.

use std::path::Path;
use std::process::Command;

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::bench::{bench_threads, gguf_cache_dir, load_avg, ratio, run_json, smollm2_gguf};

/// Target on a real GPU: batch-16 decoding at least this many times the CPU path's tokens/s.
const TARGET_BATCH16_GPU_VS_CPU: f64 = 10.0;

/// The benchmark; `args` may hold `--adapter NAME`.
pub fn wgpu(root: &Path, args: &[String]) -> Result<()> {
    let n_threads = bench_threads()?;
    let gguf = std::fs::canonicalize(smollm2_gguf()?)?;
    let load_start = load_avg();
    let example =
        crate::bench_runs::release_example(root, "wgpu_bench", crate::bench::Simd::Native)?;
    let mut command = Command::new(&example);
    command
        .env("RAYON_NUM_THREADS", n_threads.to_string())
        .env("ENVACE_CACHE_DIR", gguf_cache_dir(&gguf)?);
    if let Some(idx) = args.iter().position(|a| a == "--adapter") {
        let Some(name) = args.get(idx + 1) else {
            bail!("--adapter needs a name (part of the adapter's name)")
        };
        command.args(["--adapter", name]);
    }
    let ours = run_json(&mut command, &example.display().to_string())?;
    let on_cpu_adapter = ours["adapter_is_cpu"].as_bool().unwrap_or(true);
    let mut ratios = serde_json::Map::new();
    for run in ours["decode"].as_array().into_iter().flatten() {
        let (Some(model), Some(batch)) = (run["model"].as_str(), run["batch"].as_u64()) else {
            continue;
        };
        let gpu = run["gpu_tokens_per_sec"].as_f64().unwrap_or(0.0);
        let cpu = run["cpu_tokens_per_sec"].as_f64().unwrap_or(0.0);
        let key = format!("{}_batch{batch}_gpu_vs_cpu", model.replace([' ', '-'], "_"));
        let mut entry = ratio(gpu, cpu, TARGET_BATCH16_GPU_VS_CPU);
        if batch != 16 || on_cpu_adapter {
            // Reported, not judged: the target is batch 16 on a real GPU.
            if let Value::Object(map) = &mut entry {
                map.remove("target");
                map.remove("met");
                map.insert(
                    "note".into(),
                    json!(if on_cpu_adapter {
                        "a CPU adapter (lavapipe): only correctness is expected"
                    } else {
                        "the target is set at batch 16"
                    }),
                );
            }
        }
        ratios.insert(key, entry);
    }
    let result = json!({
        "bench": "wgpu",
        "figures": {
            "cpu": crate::bench_science::cpu(),
            "n_threads": n_threads,
            "load_avg_start": load_start,
            "load_avg_end": load_avg(),
            "work": "the same left-padded prompts decoded greedily on the CPU path (Policy::generate, \
                     our f32 decode kernels; SmolLM2 Q4_1 on our quantised kernels, one row) and on \
                     the wgpu path (envace-gpu), one warm-up then the fastest of 3; tokens/s counts \
                     the prompt pass and every new token",
            "adapter": ours["adapter"],
            "adapter_is_cpu": on_cpu_adapter,
            "decode": ours["decode"],
            "refresh": ours["refresh"],
        },
        "ratios": ratios,
    });
    crate::bench_runs::write_result(root, "wgpu", &result)
}
