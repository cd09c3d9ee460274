//! `cargo xtask device-check`: the prepared check for a machine with an NVIDIA GPU. It builds
//! the engine with `--features cuda` (the toolkit of `check cuda`, or `CUDA_HOME`), runs every
//! per-device test body on CUDA (parity, gradients, generation, training steps), then measures
//! training of the tiny Qwen3 and of a SmolLM2-135M-shaped model and the tiny model's batch-16
//! decoding on the GPU against PyTorch on the same GPU, and prints one JSON line (also written
//! to `target/bench/device-check.json`).
//!
//! PyTorch runs from `target/bench/venv-device` (torch and numpy pinned as in `bench model`,
//! PyPI's CUDA build). Like the benchmarks, it is never part of CI.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::check_cuda;

pub fn device_check(root: &Path) -> Result<()> {
    let started = Instant::now();
    let gpu = gpu()?;
    eprintln!("xtask: GPU: {gpu}");
    let compute_cap = gpu["compute_cap"]
        .as_str()
        .map(|cap| cap.replace('.', ""))
        .context("nvidia-smi gave no compute capability")?;
    let toolkit = check_cuda::Toolkit::for_device(root)?;
    let target_dir = root.join("target").join("cuda");
    let envs = toolkit.build_env(&compute_cap, &target_dir, false);

    // Every per-device test body on CUDA.
    let test_args = [
        "test",
        "--locked",
        "--package",
        "envace",
        "--features",
        "cuda",
        "--test",
        "engine",
        "--",
        "_cuda",
    ];
    let (passed, failed, status) = crate::run_cargo_tests(&test_args, &envs)?;
    if passed + failed == 0 {
        bail!("`cargo {}` ran no test ({status})", test_args.join(" "));
    }
    let test_ok = status.success();
    eprintln!("xtask: CUDA test bodies: {passed} passed, {failed} failed");

    // Ours on the GPU.
    let build_args = [
        "build",
        "--locked",
        "--release",
        "--package",
        "envace",
        "--features",
        "cuda",
        "--example",
        "model_bench",
    ];
    crate::cargo_env(&build_args, &envs)?;
    let bench_bin = target_dir
        .join("release")
        .join("examples")
        .join("model_bench");
    eprintln!("xtask: measuring ours on the GPU");
    let ours = crate::bench::run_json(
        Command::new(&bench_bin)
            .args(["--device", "cuda"])
            .envs(toolkit.run_env()),
        &format!("{} --device cuda", bench_bin.display()),
    )?;

    // PyTorch on the same GPU, the same shapes and work.
    let python = crate::bench::ensure_torch_venv(&root.join("target/bench/venv-device"))?;
    let script = root.join("xtask/bench/torch_train.py");
    let mut torch = serde_json::Map::new();
    for (key, config, train) in [
        ("tiny", "tiny_config", "tiny_train"),
        ("smollm2", "smollm2_config", "smollm2_train"),
    ] {
        let mut cfg = ours[config].clone();
        let map = cfg
            .as_object_mut()
            .context("our figures lack a model config")?;
        for field in ["batch", "seq_len", "n_steps"] {
            map.insert(field.into(), ours[train][field].clone());
        }
        map.insert("n_threads".into(), json!(1));
        map.insert("device".into(), json!("cuda"));
        if key == "tiny" {
            let batches: Vec<Value> = ours["tiny_decode"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|d| d["batch"].clone())
                .collect();
            map.insert("decode_batches".into(), Value::Array(batches));
            map.insert(
                "decode_tokens".into(),
                json!(ours["tiny_decode"][0]["n_tokens"].as_u64().unwrap_or(64)),
            );
        }
        eprintln!("xtask: measuring PyTorch on the GPU ({key})");
        torch.insert(
            key.into(),
            crate::bench::run_json(
                Command::new(&python).arg(&script).arg(cfg.to_string()),
                "xtask/bench/torch_train.py",
            )?,
        );
    }
    let torch = Value::Object(torch);

    let tps = |v: &Value| v["tokens_per_sec"].as_f64().unwrap_or(f64::NAN);
    let ours_b16 = ours["tiny_decode"]
        .as_array()
        .and_then(|d| d.last())
        .map_or(f64::NAN, tps);
    let torch_b16 = torch["tiny"]["decode"]
        .as_array()
        .and_then(|d| d.last())
        .map_or(f64::NAN, tps);
    let ratio = |a: f64, b: f64| json!({"value": a / b, "ours": a, "pytorch": b});
    let result = json!({
        "bench": "device-check",
        "figures": {
            "gpu": gpu,
            "cpu": crate::bench_science::cpu(),
            "cuda_toolkit": toolkit.describe(),
            "cuda_tests": {"passed": passed, "failed": failed},
            "ours": ours,
            "pytorch": torch,
            "wall_secs": started.elapsed().as_secs_f64(),
        },
        "ratios": {
            "tiny_train_vs_pytorch": ratio(tps(&ours["tiny_train"]), tps(&torch["tiny"])),
            "smollm2_train_vs_pytorch": ratio(tps(&ours["smollm2_train"]), tps(&torch["smollm2"])),
            "tiny_batch16_decode_vs_pytorch": ratio(ours_b16, torch_b16),
        },
    });
    crate::bench_runs::write_result(root, "device-check", &result)?;
    if !test_ok {
        bail!("{failed} CUDA test bodies failed (the figures above were still measured)");
    }
    Ok(())
}

/// The first GPU as `nvidia-smi` describes it, or an error saying that this needs one.
fn gpu() -> Result<Value> {
    let out = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,compute_cap,driver_version,memory.total",
            "--format=csv,noheader",
        ])
        .stderr(Stdio::inherit())
        .output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        _ => bail!(
            "no NVIDIA GPU here (`nvidia-smi` is missing or failed): `cargo xtask device-check` \
             runs on a machine with one; `cargo xtask check cuda` builds the CUDA code without"
        ),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().context("nvidia-smi listed no GPU")?;
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    if fields.len() < 4 {
        bail!("cannot read nvidia-smi's line {line:?}");
    }
    Ok(json!({
        "name": fields[0],
        "compute_cap": fields[1],
        "driver": fields[2],
        "memory": fields[3],
    }))
}
