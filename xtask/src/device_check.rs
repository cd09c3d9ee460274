//! `cargo xtask device-check`: the prepared check for a machine with an NVIDIA GPU. It builds
//! the engine with `--features cuda` (the toolkit of `check cuda`, or `CUDA_HOME`), runs every
//! per-device test body on CUDA (parity, gradients, generation, training steps), then measures
//! training of the tiny Qwen3 and of a SmolLM2-135M-shaped model and the tiny model's batch-16
//! decoding on the GPU against PyTorch on the same GPU, and prints one JSON line (also written
//! to `target/bench/device-check.json`).
//!
//! A GPU machine often has no Rust toolchain and no network: `--prepare DIR` builds everything
//! here instead (no GPU needed; `--compute-cap` names the GPU's, `--cuda 13.0` a release its
//! driver can compile PTX from) into a bundle, and `DIR/xtask device-check --prebuilt DIR`, run
//! there from a copy of the checkout, runs the same check on those binaries with the machine's
//! own CUDA libraries and PyTorch.
//!
//! PyTorch runs from `target/bench/venv-device` (torch and numpy pinned as in `bench model`,
//! PyPI's CUDA build), or with `--prebuilt` from the machine's `python3` when it has torch
//! with CUDA (`ENVACE_DEVICE_PYTHON` names another). Like the benchmarks, it is never part of CI.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::check_cuda::{self, Release};

/// What `cargo xtask device-check` was asked to do.
#[derive(Default)]
pub struct Options {
    /// `--cuda NAME`: the CUDA release to build with (see [`check_cuda::release`]).
    pub cuda: Option<String>,
    /// `--prepare DIR`: build the bundle into DIR here, without a GPU.
    pub prepare: Option<PathBuf>,
    /// `--compute-cap N`: the GPU's compute capability for `--prepare` (e.g. 90).
    pub compute_cap: Option<String>,
    /// `--prebuilt DIR`: run the check on a bundle made by `--prepare`.
    pub prebuilt: Option<PathBuf>,
}

impl Options {
    /// Reads the arguments after `device-check`.
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut options = Options::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = |flag: &str| {
                it.next()
                    .cloned()
                    .with_context(|| format!("{flag} needs a value"))
            };
            match arg.as_str() {
                "--cuda" => options.cuda = Some(value("--cuda")?),
                "--prepare" => options.prepare = Some(PathBuf::from(value("--prepare")?)),
                "--compute-cap" => {
                    let cap = value("--compute-cap")?.replace('.', "");
                    if cap.is_empty() || !cap.chars().all(|c| c.is_ascii_digit()) {
                        bail!(
                            "--compute-cap takes a compute capability such as 90 or 9.0, not {cap:?}"
                        );
                    }
                    options.compute_cap = Some(cap);
                }
                "--prebuilt" => options.prebuilt = Some(PathBuf::from(value("--prebuilt")?)),
                other => bail!(
                    "unknown device-check argument {other:?}; use --cuda RELEASE, \
                     --prepare DIR [--compute-cap N] or --prebuilt DIR"
                ),
            }
        }
        if options.prepare.is_some() && options.prebuilt.is_some() {
            bail!("--prepare builds a bundle and --prebuilt runs one: give one of them");
        }
        if options.compute_cap.is_some() && options.prepare.is_none() {
            bail!("--compute-cap is for --prepare; on the GPU machine nvidia-smi tells it");
        }
        Ok(options)
    }
}

/// The bundle's file names.
const BUNDLE_XTASK: &str = "xtask";
const BUNDLE_TESTS: &str = "engine-tests";
const BUNDLE_BENCH: &str = "model_bench";
const BUNDLE_INFO: &str = "bundle.json";

/// The CUDA binaries a check runs, and where they came from.
struct Built {
    engine_tests: PathBuf,
    model_bench: PathBuf,
    /// The environment both run with (library path, cache folder).
    run_env: Vec<(&'static str, String)>,
    /// What the JSON records about the toolkit.
    toolkit: Value,
    /// The Python that runs PyTorch.
    python: PathBuf,
}

pub fn device_check(root: &Path, options: &Options) -> Result<()> {
    let release = check_cuda::release(options.cuda.as_deref())?;
    if let Some(dir) = &options.prepare {
        let cap = options.compute_cap.as_deref().context(
            "--prepare needs --compute-cap (the GPU's compute capability, e.g. 90 for an H100 or H200)",
        )?;
        return prepare(root, release, cap, dir);
    }
    let started = Instant::now();
    let gpu = gpu()?;
    eprintln!("xtask: GPU: {gpu}");
    let compute_cap = gpu["compute_cap"]
        .as_str()
        .map(|cap| cap.replace('.', ""))
        .context("nvidia-smi gave no compute capability")?;
    let built = match &options.prebuilt {
        Some(dir) => open_bundle(root, dir, &compute_cap)?,
        None => build_here(root, release, &compute_cap)?,
    };
    measure(root, started, gpu, &built)
}

/// The folder a CUDA build goes to: `target/cuda` for the default release, else one per release.
fn target_dir(root: &Path, release: &Release) -> PathBuf {
    let default = check_cuda::release(None)
        .map(|r| r.name)
        .unwrap_or_default();
    if release.name == default {
        root.join("target").join("cuda")
    } else {
        root.join("target").join(format!("cuda-{}", release.name))
    }
}

/// Builds the engine's test binary and the benchmark (both release, so they share their
/// dependencies' build) with `--features cuda` into `target_dir`.
fn build_binaries(
    envs: &[(&'static str, String)],
    target_dir: &Path,
) -> Result<(PathBuf, PathBuf)> {
    let test_args = [
        "test",
        "--locked",
        "--release",
        "--package",
        "envace",
        "--features",
        "cuda",
        "--test",
        "engine",
        "--no-run",
    ];
    crate::cargo_env(&test_args, envs)?;
    let engine_tests =
        check_cuda::newest_test_binary(&target_dir.join("release").join("deps"), "engine")?;
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
    crate::cargo_env(&build_args, envs)?;
    let model_bench = target_dir
        .join("release")
        .join("examples")
        .join("model_bench");
    Ok((engine_tests, model_bench))
}

/// On the GPU machine: build with its toolkit (or the wheels'), PyTorch from the pinned venv.
fn build_here(root: &Path, release: &'static Release, compute_cap: &str) -> Result<Built> {
    let toolkit = check_cuda::Toolkit::for_device(root, release)?;
    let target_dir = target_dir(root, release);
    let envs = toolkit.build_env(compute_cap, &target_dir, false);
    let (engine_tests, model_bench) = build_binaries(&envs, &target_dir)?;
    let python = crate::bench::ensure_torch_venv(&root.join("target/bench/venv-device"))?;
    Ok(Built {
        engine_tests,
        model_bench,
        run_env: toolkit.run_env(),
        toolkit: toolkit.describe(),
        python,
    })
}

/// Here, without a GPU: builds the bundle that `--prebuilt` runs.
fn prepare(root: &Path, release: &'static Release, compute_cap: &str, dir: &Path) -> Result<()> {
    let started = Instant::now();
    let toolkit = check_cuda::Toolkit::install(root, release)?;
    let target_dir = target_dir(root, release);
    let envs = toolkit.build_env(compute_cap, &target_dir, false);
    let (engine_tests, model_bench) = build_binaries(&envs, &target_dir)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let xtask = std::env::current_exe().context("cannot find the running xtask")?;
    for (from, name) in [
        (&xtask, BUNDLE_XTASK),
        (&engine_tests, BUNDLE_TESTS),
        (&model_bench, BUNDLE_BENCH),
    ] {
        copy_stripped(from, &dir.join(name))?;
    }
    let commit = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned());
    let info = json!({
        "cuda_release": release.name,
        "compute_cap": compute_cap,
        "toolkit": toolkit.describe(),
        "commit": commit,
    });
    let info_path = dir.join(BUNDLE_INFO);
    std::fs::write(&info_path, serde_json::to_string_pretty(&info)?)
        .with_context(|| format!("cannot write {}", info_path.display()))?;
    let size: u64 = [BUNDLE_XTASK, BUNDLE_TESTS, BUNDLE_BENCH]
        .iter()
        .filter_map(|name| std::fs::metadata(dir.join(name)).ok())
        .map(|m| m.len())
        .sum();
    eprintln!(
        "xtask: bundle for compute capability {compute_cap} (CUDA {}) in {} ({:.1} MB) after {:.0} s; \
         on the GPU machine, from a copy of this checkout: {}/{BUNDLE_XTASK} device-check --prebuilt {}",
        release.name,
        dir.display(),
        size as f64 / 1e6,
        started.elapsed().as_secs_f64(),
        dir.display(),
        dir.display()
    );
    Ok(())
}

/// Copies a binary without its debug information (`strip`), or as it is when `strip` fails.
fn copy_stripped(from: &Path, to: &Path) -> Result<()> {
    let stripped = Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(to)
        .arg(from)
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        eprintln!(
            "xtask: `strip` failed on {}; copying it whole",
            from.display()
        );
        std::fs::copy(from, to)
            .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    }
    Ok(())
}

/// On the GPU machine: the bundle's binaries, the machine's CUDA libraries and PyTorch.
fn open_bundle(root: &Path, dir: &Path, compute_cap: &str) -> Result<Built> {
    // The tests run from the engine's folder: a relative bundle path would not reach them.
    let dir = &dir
        .canonicalize()
        .with_context(|| format!("no bundle folder {} (made by --prepare)", dir.display()))?;
    let info_path = dir.join(BUNDLE_INFO);
    let info: Value = serde_json::from_str(
        &std::fs::read_to_string(&info_path)
            .with_context(|| format!("cannot read {} (made by --prepare)", info_path.display()))?,
    )
    .with_context(|| format!("{} is not JSON", info_path.display()))?;
    let built_for = info["compute_cap"].as_str().unwrap_or_default();
    if built_for != compute_cap {
        eprintln!(
            "xtask: warning: the bundle was built for compute capability {built_for}, this GPU has \
             {compute_cap}; its kernels run only if the driver can compile their PTX"
        );
    }
    let python = device_python(root)?;
    let lib_dirs = cuda_library_dirs(&python)?;
    let mut library_path = lib_dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    if let Ok(old) = std::env::var("LD_LIBRARY_PATH")
        && !old.is_empty()
    {
        library_path = format!("{library_path}:{old}");
    }
    let cache = root.join("target").join("envace-cache");
    Ok(Built {
        engine_tests: dir.join(BUNDLE_TESTS),
        model_bench: dir.join(BUNDLE_BENCH),
        run_env: vec![
            ("LD_LIBRARY_PATH", library_path),
            ("ENVACE_CACHE_DIR", cache.display().to_string()),
        ],
        toolkit: json!({"bundle": info, "library_dirs": lib_dirs}),
        python,
    })
}

/// The libraries a CUDA build needs besides the driver's `libcuda.so.1`.
const CUDA_LIBRARIES: [&str; 5] = [
    "libcublas.so.13",
    "libcublasLt.so.13",
    "libcurand.so.10",
    "libnvrtc.so.13",
    "libcudart.so.13",
];

/// Folders holding [`CUDA_LIBRARIES`]: `CUDA_HOME`'s, `/usr/local/cuda`'s, or those of the
/// NVIDIA wheels beside PyTorch; an error names the ones found nowhere.
fn cuda_library_dirs(python: &Path) -> Result<Vec<PathBuf>> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(home) = std::env::var_os("CUDA_HOME").map(PathBuf::from) {
        candidates.extend([home.join("lib64"), home.join("lib")]);
    }
    candidates.extend([
        PathBuf::from("/usr/local/cuda/lib64"),
        PathBuf::from("/usr/local/cuda/lib"),
    ]);
    let probe = "import nvidia, os\nfor p in nvidia.__path__:\n    for sub in sorted(os.listdir(p)):\n        print(os.path.join(p, sub, 'lib'))";
    if let Ok(out) = Command::new(python).args(["-c", probe]).output()
        && out.status.success()
    {
        candidates.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(PathBuf::from),
        );
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut missing = Vec::new();
    for lib in CUDA_LIBRARIES {
        match candidates.iter().find(|d| d.join(lib).is_file()) {
            Some(dir) => {
                if !dirs.contains(dir) {
                    dirs.push(dir.clone());
                }
            }
            None => missing.push(lib),
        }
    }
    if !missing.is_empty() {
        bail!(
            "the CUDA libraries {} are nowhere in CUDA_HOME, /usr/local/cuda or the NVIDIA wheels of {} \
             (looked in {} folders)",
            missing.join(", "),
            python.display(),
            candidates.len()
        );
    }
    Ok(dirs)
}

/// `ENVACE_DEVICE_PYTHON`, else `python3` when it has torch with CUDA, else the pinned venv.
fn device_python(root: &Path) -> Result<PathBuf> {
    if let Some(python) = std::env::var_os("ENVACE_DEVICE_PYTHON") {
        return Ok(PathBuf::from(python));
    }
    let probe = "import torch; print(torch.cuda.is_available())";
    let has_torch = Command::new("python3")
        .args(["-c", probe])
        .output()
        .is_ok_and(|out| {
            out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "True"
        });
    if has_torch {
        return Ok(PathBuf::from("python3"));
    }
    crate::bench::ensure_torch_venv(&root.join("target/bench/venv-device"))
}

/// The tests and the two benchmarks on the GPU, and the JSON line.
fn measure(root: &Path, started: Instant, gpu: Value, built: &Built) -> Result<()> {
    // Every per-device test body on CUDA.
    eprintln!("xtask: $ {} _cuda", built.engine_tests.display());
    let mut tests = Command::new(&built.engine_tests);
    tests
        .arg("_cuda")
        .current_dir(root.join("crates").join("envace"))
        .envs(built.run_env.iter().map(|(k, v)| (*k, v.as_str())));
    let (passed, failed, status) = crate::run_test_command(tests, "the engine's CUDA tests")?;
    if passed + failed == 0 {
        bail!(
            "{} _cuda ran no test ({status})",
            built.engine_tests.display()
        );
    }
    let test_ok = status.success();
    eprintln!("xtask: CUDA test bodies: {passed} passed, {failed} failed");

    // Ours on the GPU.
    let bench_bin = &built.model_bench;
    eprintln!("xtask: measuring ours on the GPU");
    let ours = crate::bench::run_json(
        Command::new(bench_bin)
            .args(["--device", "cuda"])
            .envs(built.run_env.iter().map(|(k, v)| (*k, v.as_str()))),
        &format!("{} --device cuda", bench_bin.display()),
    )?;

    // PyTorch on the same GPU, the same shapes and work.
    let python = &built.python;
    let torch_version = Command::new(python)
        .args(["-c", "import torch; print(torch.__version__)"])
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned());
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
                Command::new(python).arg(&script).arg(cfg.to_string()),
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
            "cuda_toolkit": built.toolkit,
            "pytorch_version": torch_version,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn options_read_the_bundle_modes_and_refuse_mixtures() {
        let o = Options::parse(&args("--cuda 13.0 --prepare out --compute-cap 9.0")).unwrap();
        assert_eq!(o.cuda.as_deref(), Some("13.0"));
        assert_eq!(o.prepare.as_deref(), Some(Path::new("out")));
        assert_eq!(o.compute_cap.as_deref(), Some("90"));
        assert!(
            Options::parse(&args("--prebuilt b"))
                .unwrap()
                .prebuilt
                .is_some()
        );
        for (bad, says) in [
            ("--prepare a --prebuilt b", "give one of them"),
            ("--compute-cap 90", "is for --prepare"),
            ("--compute-cap nine --prepare a", "compute capability"),
            ("--prepare", "needs a value"),
            ("--fast", "unknown device-check argument"),
        ] {
            let err = Options::parse(&args(bad)).err().unwrap().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
        assert!(check_cuda::release(Some("12.1")).is_err());
        assert_eq!(check_cuda::release(None).unwrap().name, "13.4");
    }
}
