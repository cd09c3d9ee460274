//! `cargo xtask bench model [--simd avx2]`: our policy layer measured against PyTorch and
//! llama.cpp in one run, printed as one JSON object (the last line of stdout) and written to
//! `target/bench/model.json` (`model-avx2.json` with our side held to AVX2, see [`Simd`]).
//!
//! Our side is the `model_bench` example in release (`envace::bench`). The peers run in
//! a Python virtual environment this command creates once under `target/bench/venv`, with
//! pinned `torch` (PyPI's CUDA build, run on the CPU) and `llama-cpp-python` (built from
//! source as a plain CPU build, about ten minutes here). Benchmarks only: neither CI nor
//! `cargo xtask test` ever installs them.
//!
//! The work is identical on both sides of each comparison:
//! - training: the same tiny Qwen3 (sizes passed from our side to `bench/torch_train.py`), the
//!   same token ids, batch and sequence length, f32, next-token cross-entropy, AdamW with the
//!   same hyper-parameters, one warm-up step, then the same number of timed steps of forward,
//!   backward and update, on the same number of threads;
//! - quantized decoding: the same GGUF file, the same prompt ids, a two-token warm-up, then
//!   prompt plus the same number of greedy tokens with no stop token, on the same threads
//!   (`bench/llama_cpp_decode.py`).
//!
//! Each peer also runs on one thread, and each ratio is taken against the peer's faster run:
//! on a shared machine the peers' OpenMP threads spin-wait and collapse when another process
//! holds a core, which would flatter us. Our quantised decoding gets the same two tries; our
//! training runs on `n_threads` only.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// The peers' pinned Python packages.
pub(crate) const TORCH: &str = "torch==2.15.0";
const NUMPY: &str = "numpy==2.4.6";
const LLAMA_CPP: &str = "llama-cpp-python==0.3.36";
/// A plain CPU build of llama.cpp: no GPU backend and no BLAS, tuned for this CPU (llama.cpp's
/// default).
const LLAMA_CPP_CMAKE_ARGS: &str =
    "-DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF -DGGML_NATIVE=ON";
/// Compiler flags of that build: no AMX, even where the CPU has it. On a Sapphire Rapids
/// machine `-march=native` compiles llama.cpp's AMX backend, which repacks the Q4_1 weights and
/// then crashes in the first decode (SIGSEGV, measured here; llama.cpp issue #20824), and which
/// its maintainers found to give wrong results on Q4_0 / Q4_1 (llama.cpp PR #16315). GCC lets
/// explicit `-mno-*` flags win over `-march=native` even when they come first (`gcc -dM -E`
/// shows no `__AMX_*__` macro and AVX-512 still on); on a CPU without AMX they change nothing.
const LLAMA_CPP_CFLAGS: &str = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16";
/// A file in the virtual environment naming how its llama.cpp was built, so that a build with
/// other settings is replaced.
const LLAMA_CPP_BUILD_FILE: &str = "envace-llama-cpp-build.txt";

/// Targets of issue #19: training and quantised decoding against the peers, and batched
/// decoding against this machine's own dense rate (the prompt pass's multiply-adds per second
/// on the same model, in the same run).
const TARGET_TRAIN_VS_PYTORCH: f64 = 1.3;
const TARGET_Q4_1_VS_LLAMA_CPP: f64 = 1.3;
const TARGET_BATCH16_VS_PROMPT_PASS: f64 = 0.85;

/// Rounds of training, ours then PyTorch's, after the first run of each side. Each round's
/// two runs, a few seconds apart, also give a paired ratio: the host's slow and fast minutes
/// move both, where the best-of-all-runs ratio can pair one side's lucky minute with the
/// other's unlucky one.
const TRAIN_ROUNDS: usize = 5;

/// The kernels our side runs: what the CPU has, or AVX2 forced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Simd {
    /// Everything the CPU has (AVX-512 where present).
    Native,
    /// `--simd avx2`: our kernels with `ENVACE_SIMD=avx2`, and candle's matrix products from a
    /// build without gemm's AVX-512 kernels (`--no-default-features`, in `target/bench-avx2`):
    /// what a CPU without AVX-512 runs, measured on any x86-64 machine.
    Avx2,
}

impl Simd {
    /// The environment that holds PyTorch to the same vector extensions: its own kernels
    /// (`ATEN_CPU_CAPABILITY`), oneDNN's and MKL's (none for native). llama.cpp is compiled for
    /// this CPU and cannot be held back at run time.
    pub fn torch_env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Simd::Native => &[],
            Simd::Avx2 => &[
                ("ATEN_CPU_CAPABILITY", "avx2"),
                ("ONEDNN_MAX_CPU_ISA", "AVX2"),
                ("MKL_ENABLE_INSTRUCTIONS", "AVX2"),
            ],
        }
    }

    /// The `ENVACE_SIMD` value that holds our kernels to this set (none for native).
    pub fn env_value(self) -> Option<&'static str> {
        match self {
            Simd::Native => None,
            Simd::Avx2 => Some("avx2"),
        }
    }
}

/// `--simd avx2` (or `--simd native`) among the benchmark's arguments.
pub fn parse_simd(args: &[String]) -> Result<Simd> {
    match args.iter().position(|a| a == "--simd") {
        None => Ok(Simd::Native),
        Some(i) => match args.get(i + 1).map(String::as_str) {
            Some("avx2") => Ok(Simd::Avx2),
            Some("native") => Ok(Simd::Native),
            Some(other) => bail!("--simd takes avx2 or native, not {other:?}"),
            None => bail!("--simd needs a value: avx2 or native"),
        },
    }
}

/// Runs `cargo xtask bench model [--simd avx2]` from the repository root.
pub fn model(root: &Path, simd: Simd) -> Result<()> {
    let n_threads = bench_threads()?;
    let gguf = std::fs::canonicalize(smollm2_gguf()?)
        .context("cannot resolve the path of the SmolLM2 GGUF")?;
    let venv = ensure_venv(&root.join("target").join("bench").join("venv"))?;
    let load_start = load_avg();

    let ours_bin = crate::bench_runs::release_example(root, "model_bench", simd)?;
    let simd_env = simd.env_value();
    // RAYON_NUM_THREADS also spares candle 0.11.1 from counting physical cores (reading
    // /proc/cpuinfo) on every matmul, which otherwise makes single-stream decoding of the tiny
    // model about four times slower.
    eprintln!("xtask: measuring ours ({n_threads} threads)");
    let ours = run_json(
        ours_command(&ours_bin, simd_env)
            .env("RAYON_NUM_THREADS", n_threads.to_string())
            .env("ENVACE_CACHE_DIR", gguf_cache_dir(&gguf)?),
        &format!("{}", ours_bin.display()),
    )?;

    let train = field(&ours, "tiny_train")?;
    let model_cfg = field(&ours, "tiny_config")?;
    let mut torch_cfg = model_cfg.clone();
    if let Value::Object(map) = &mut torch_cfg {
        for key in ["batch", "seq_len", "n_steps"] {
            map.insert(key.into(), field(train, key)?.clone());
        }
    }
    let torch_script = root.join("xtask/bench/torch_train.py");
    let mut torch_runs = peer_runs(
        &venv,
        &torch_script,
        &torch_cfg,
        n_threads,
        simd.torch_env(),
    )?;
    // Then both sides' training again, one after the other, in TRAIN_ROUNDS more rounds: on a
    // shared host the same binary's rate moves by a fifth from one minute to the next, and a
    // single run of each side, minutes apart, measured the host as much as the two programs.
    let mut ours_train_runs = vec![train.clone()];
    let mut paired = Vec::with_capacity(TRAIN_ROUNDS);
    for round in 1..=TRAIN_ROUNDS {
        eprintln!("xtask: training round {round} of {TRAIN_ROUNDS}: ours, then PyTorch");
        let ours_run = run_json(
            ours_command(&ours_bin, simd_env)
                .args(["--only", "train"])
                .env("RAYON_NUM_THREADS", n_threads.to_string()),
            &format!("{} --only train", ours_bin.display()),
        )?;
        let torch_run = peer_run(
            &venv,
            &torch_script,
            &torch_cfg,
            n_threads,
            simd.torch_env(),
        )?;
        paired.push(number(&ours_run, "tokens_per_sec")? / number(&torch_run, "tokens_per_sec")?);
        ours_train_runs.push(ours_run);
        torch_runs.push(torch_run);
    }
    let paired_median = median(&paired).context("no training rounds")?;
    let torch = best_run(&torch_runs)?;
    let train = best_run(&ours_train_runs)?;

    // Our Q4_1 decoding on one thread too, as the peer's: each side's faster run counts.
    let mut q4_runs = vec![with_field(
        find_decode(&ours, "smollm2_decode", "q4_1")?,
        "n_threads",
        json!(n_threads),
    )];
    if n_threads > 1 {
        eprintln!("xtask: measuring ours, Q4_1 decoding (1 thread)");
        let one = run_json(
            ours_command(&ours_bin, simd_env)
                .args(["--only", "q4-decode"])
                .env("RAYON_NUM_THREADS", "1")
                .env("ENVACE_CACHE_DIR", gguf_cache_dir(&gguf)?),
            &format!("{} --only q4-decode", ours_bin.display()),
        )?;
        q4_runs.push(with_field(&one, "n_threads", json!(1)));
    }
    let q4 = best_run(&q4_runs)?;
    let llama_cfg = json!({
        "gguf": gguf,
        "prompt": field(&ours, "smollm2_prompt")?,
        "n_new": field(q4, "n_tokens")?,
    });
    let llama_runs = peer_runs(
        &venv,
        &root.join("xtask/bench/llama_cpp_decode.py"),
        &llama_cfg,
        n_threads,
        &[],
    )?;
    let llama = best_run(&llama_runs)?;
    let load_end = load_avg();

    let single = find_decode_batch(&ours, 1)?;
    let batched = find_decode_batch_max(&ours)?;
    let f32_decode = find_decode(&ours, "smollm2_decode", "f32")?;
    let agreement = leading_agreement(field(q4, "tokens")?, field(llama, "tokens")?);

    let ours_train = number(train, "tokens_per_sec")?;
    let torch_train = number(torch, "tokens_per_sec")?;
    let ours_q4 = number(q4, "tokens_per_sec")?;
    let llama_q4 = number(llama, "tokens_per_sec")?;
    let single_tps = number(single, "tokens_per_sec")?;
    let batched_tps = number(batched, "tokens_per_sec")?;
    let prompt_pass = field(&ours, "tiny_prompt_pass")?;
    let batched_macs = number(batched, "multiply_adds_per_sec")?;
    let prompt_pass_macs = number(prompt_pass, "multiply_adds_per_sec")?;

    let result = json!({
        "bench": "model",
        "figures": {
            "cpu": crate::bench_science::cpu(),
            // The kernel set our side ran (`ENVACE_SIMD` applied) and whether candle's matrix
            // products had their AVX-512 kernels compiled in, as the binary reports them.
            "simd": field(&ours, "simd")?,
            "gemm_avx512_compiled": field(&ours, "gemm_avx512_compiled")?,
            // What held PyTorch to the same kernel set (empty: its own dispatch); llama.cpp
            // runs what it was compiled for (this CPU) either way.
            "pytorch_env": simd.torch_env().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "n_threads": n_threads,
            "n_cpus": std::thread::available_parallelism().map_or(0, usize::from),
            "load_avg_start": load_start,
            "load_avg_end": load_end,
            "train": {
                "work": "identical on both sides: this tiny Qwen3 in f32, the same token ids, \
                         next-token cross-entropy, AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, \
                         weight decay 0.01) step included, 1 warm-up step then n_steps timed; \
                         ours on n_threads, the peer on n_threads and on 1, then both on \
                         n_threads in alternating rounds; each side's fastest run counts \
                         for train_vs_pytorch, the median of the rounds' ratios (ours over \
                         PyTorch's run right after it) for train_vs_pytorch_paired_median",
                "paired_ratios": paired.iter().map(|r| (r * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
                "config": model_cfg,
                "ours_tokens_per_sec": ours_train,
                "pytorch_tokens_per_sec": torch_train,
                "ours": train,
                "pytorch": torch,
                "pytorch_runs": torch_runs,
                "ours_runs": ours_train_runs,
            },
            "q4_1_decode": {
                "work": "identical on both sides: the same GGUF file and prompt ids, 2-token \
                         warm-up, then prompt + n_tokens greedy tokens timed (fastest of 3), \
                         batch 1; each side on n_threads and on 1, its faster run counts",
                "gguf": gguf,
                "ours_tokens_per_sec": ours_q4,
                "llama_cpp_tokens_per_sec": llama_q4,
                "greedy_agreement_tokens": agreement,
                // candle-transformers' quantized_llama on the same work: the path our own
                // kernels replaced, for comparison.
                "candle_quantized_llama_tokens_per_sec":
                    number(find_decode(&ours, "smollm2_decode", "reference")?, "tokens_per_sec")?,
                "ours": without(q4, "tokens"),
                "ours_runs": q4_runs.iter().map(|run| without(run, "tokens")).collect::<Vec<_>>(),
                "llama_cpp": without(llama, "tokens"),
                "llama_cpp_runs": llama_runs.iter().map(|run| without(run, "tokens")).collect::<Vec<_>>(),
            },
            "tiny_decode": {
                "single_tokens_per_sec": single_tps,
                "batched_tokens_per_sec": batched_tps,
                "batched_vs_single": batched_tps / single_tps,
                // Multiply-adds counted from the model's shape (weights, causal attention, the
                // head where it runs), per second: batched decoding against a prompt pass of
                // the same rows (128 tokens each), the dense rate this machine reaches.
                "batched_vs_prompt_pass_work": "the batched decode and the prompt pass timed \
                         in 10 alternating rounds after a warm-up of each, the fastest of each",
                "batched_multiply_adds_per_sec": batched_macs,
                "prompt_pass_multiply_adds_per_sec": prompt_pass_macs,
                "single": without(single, "tokens"),
                "batched": batched,
                "prompt_pass": prompt_pass,
            },
            "smollm2_f32_decode_tokens_per_sec": number(f32_decode, "tokens_per_sec")?,
        },
        "ratios": {
            "train_vs_pytorch": ratio(ours_train, torch_train, TARGET_TRAIN_VS_PYTORCH),
            "train_vs_pytorch_paired_median":
                ratio(paired_median, 1.0, TARGET_TRAIN_VS_PYTORCH),
            "q4_1_decode_vs_llama_cpp": ratio(ours_q4, llama_q4, TARGET_Q4_1_VS_LLAMA_CPP),
            "batch16_decode_vs_prompt_pass_multiply_adds":
                ratio(batched_macs, prompt_pass_macs, TARGET_BATCH16_VS_PROMPT_PASS),
        },
    });
    let file = match simd {
        Simd::Native => "model",
        Simd::Avx2 => "model-avx2",
    };
    crate::bench_runs::write_result(root, file, &result)
}

/// Our benchmark binary, with `ENVACE_SIMD` set when a kernel set is forced (and removed
/// otherwise, so that a value left in the shell does not skew the native run).
pub(crate) fn ours_command(bin: &Path, simd_env: Option<&str>) -> Command {
    let mut command = Command::new(bin);
    match simd_env {
        Some(level) => command.env("ENVACE_SIMD", level),
        None => command.env_remove("ENVACE_SIMD"),
    };
    command
}

/// Runs a peer script on `n_threads` threads and, when that is more than one, on one thread
/// too: on a shared machine the peers' OpenMP threads spin-wait and can collapse when a core is
/// busy, so each ratio is taken against the peer's faster run (conservative for us; ours runs
/// on `n_threads` only).
fn peer_runs(
    python: &Path,
    script: &Path,
    cfg: &Value,
    n_threads: usize,
    envs: &[(&str, &str)],
) -> Result<Vec<Value>> {
    let mut runs = Vec::new();
    for threads in [n_threads, 1] {
        if threads == 1 && n_threads == 1 && !runs.is_empty() {
            break;
        }
        runs.push(peer_run(python, script, cfg, threads, envs)?);
    }
    Ok(runs)
}

/// One run of a peer script with `cfg` on `threads` threads: the JSON it printed.
fn peer_run(
    python: &Path,
    script: &Path,
    cfg: &Value,
    threads: usize,
    envs: &[(&str, &str)],
) -> Result<Value> {
    let name = script.file_name().map_or_else(
        || script.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut cfg = cfg.clone();
    if let Value::Object(map) = &mut cfg {
        map.insert("n_threads".into(), json!(threads));
    }
    eprintln!("xtask: measuring {name} ({threads} threads)");
    run_json(
        Command::new(python)
            .arg(script)
            .arg(cfg.to_string())
            .envs(envs.iter().copied()),
        &format!("xtask/bench/{name}"),
    )
}

/// The run with the most tokens per second.
fn best_run(runs: &[Value]) -> Result<&Value> {
    runs.iter()
        .max_by(|a, b| {
            let speed = |v: &Value| {
                v.get("tokens_per_sec")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
            };
            speed(a).total_cmp(&speed(b))
        })
        .context("a peer produced no run")
}

/// Threads for every side: `$ENVACE_BENCH_THREADS`, else the CPUs available.
pub(crate) fn bench_threads() -> Result<usize> {
    match std::env::var("ENVACE_BENCH_THREADS") {
        Ok(text) if !text.is_empty() => {
            text.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .with_context(|| {
                    format!("ENVACE_BENCH_THREADS={text:?} is not a positive number of threads")
                })
        }
        _ => Ok(std::thread::available_parallelism().map_or(1, usize::from)),
    }
}

/// The SmolLM2 GGUF in the cache folder, or an error saying to run `cargo xtask setup`.
pub(crate) fn smollm2_gguf() -> Result<PathBuf> {
    let path = crate::setup::cache_dir()
        .join("models")
        .join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.is_file() {
        bail!(
            "{} is missing: the model benchmark decodes SmolLM2-135M-Instruct from it; run \
             `cargo xtask setup` first (or point ENVACE_CACHE_DIR at a cache folder that holds it)",
            path.display()
        );
    }
    Ok(path)
}

/// The cache folder holding `gguf` (`<cache>/models/<file>`), for our side to read it from.
pub(crate) fn gguf_cache_dir(gguf: &Path) -> Result<PathBuf> {
    gguf.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .with_context(|| format!("{} is not inside a cache folder", gguf.display()))
}

/// The virtual environment's Python, creating the environment and installing the pinned
/// peers when they are not there yet.
fn ensure_venv(venv: &Path) -> Result<PathBuf> {
    let python = venv.join("bin").join("python");
    let wanted = format!("{} {}", pinned_version(TORCH), pinned_version(LLAMA_CPP));
    let probe =
        "import torch, llama_cpp; print(torch.__version__.split('+')[0], llama_cpp.__version__)";
    let installed = || python_says(&python, probe);
    let build = format!("{LLAMA_CPP} CMAKE_ARGS={LLAMA_CPP_CMAKE_ARGS} CFLAGS={LLAMA_CPP_CFLAGS}");
    let build_file = venv.join(LLAMA_CPP_BUILD_FILE);
    let built_as = || std::fs::read_to_string(&build_file).ok();
    if installed().as_deref() == Some(wanted.as_str()) && built_as().as_deref() == Some(&build) {
        return Ok(python);
    }
    create_venv(venv)?;
    eprintln!(
        "xtask: installing {TORCH} and {NUMPY} into {} (PyPI's CUDA build, about 5 GB; it runs \
         on the CPU)",
        venv.display()
    );
    pip(&python, &[TORCH, NUMPY], &[])?;
    eprintln!(
        "xtask: building {LLAMA_CPP} from source as a plain CPU build without AMX (about ten \
         minutes on two cores)"
    );
    // A build with other settings goes first (its version may be the pinned one), and pip's
    // wheel cache is not read: it would hand back a wheel built with other flags.
    let _ = std::fs::remove_file(&build_file);
    let status = Command::new(&python)
        .args(["-m", "pip", "uninstall", "--yes", "llama-cpp-python"])
        .status()
        .with_context(|| format!("cannot run {} -m pip", python.display()))?;
    if !status.success() {
        bail!("`pip uninstall llama-cpp-python` failed ({status})");
    }
    pip(
        &python,
        &[
            "--no-cache-dir",
            "--no-binary",
            "llama-cpp-python",
            LLAMA_CPP,
        ],
        &[
            ("CMAKE_ARGS", LLAMA_CPP_CMAKE_ARGS),
            ("CFLAGS", LLAMA_CPP_CFLAGS),
            ("CXXFLAGS", LLAMA_CPP_CFLAGS),
            ("CMAKE_BUILD_PARALLEL_LEVEL", "2"),
        ],
    )?;
    std::fs::write(&build_file, &build)
        .with_context(|| format!("cannot write {}", build_file.display()))?;
    match installed() {
        Some(found) if found == wanted => Ok(python),
        found => bail!(
            "after installing, {} reports torch and llama_cpp versions {found:?}, expected \
             {wanted:?}; delete {} and run again",
            python.display(),
            venv.display()
        ),
    }
}

/// A virtual environment with only the pinned torch and numpy (the device check's PyTorch
/// peer), created and filled when they are not there yet; returns its Python.
pub(crate) fn ensure_torch_venv(venv: &Path) -> Result<PathBuf> {
    ensure_pinned(
        venv,
        &[TORCH],
        &[NUMPY],
        "import torch; print(torch.__version__.split('+')[0])",
    )
}

/// The Python of `venv` with `requirements` (each `name==version`) installed: pip installs
/// them, with `also` beside them, unless `probe` already prints their versions in order,
/// separated by spaces; the versions are checked again afterwards. Creates the environment
/// when it is not there.
pub(crate) fn ensure_pinned(
    venv: &Path,
    requirements: &[&str],
    also: &[&str],
    probe: &str,
) -> Result<PathBuf> {
    let python = venv.join("bin").join("python");
    let wanted: Vec<&str> = requirements.iter().map(|r| pinned_version(r)).collect();
    let wanted = wanted.join(" ");
    if python_says(&python, probe).as_deref() == Some(wanted.as_str()) {
        return Ok(python);
    }
    create_venv(venv)?;
    let mut args = requirements.to_vec();
    args.extend_from_slice(also);
    eprintln!(
        "xtask: installing {} into {}",
        args.join(" "),
        venv.display()
    );
    pip(&python, &args, &[])?;
    match python_says(&python, probe) {
        Some(found) if found == wanted => Ok(python),
        found => bail!(
            "after installing {}, {} reports versions {found:?}, expected {wanted:?}; delete {} \
             and run again",
            requirements.join(" "),
            python.display(),
            venv.display()
        ),
    }
}

/// Creates the virtual environment `venv` unless its Python is there; returns that Python.
pub(crate) fn create_venv(venv: &Path) -> Result<PathBuf> {
    let python = venv.join("bin").join("python");
    if python.is_file() {
        return Ok(python);
    }
    let found = Command::new("python3").arg("--version").output();
    if !found.is_ok_and(|out| out.status.success()) {
        bail!(
            "python3 is not installed; the benchmarks and checks run their peers and tools in \
             Python (Debian: `apt-get install python3 python3-venv python3-pip`)"
        );
    }
    eprintln!("xtask: creating the Python environment {}", venv.display());
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(venv)
        .status()
        .context("cannot run python3 -m venv")?;
    if !status.success() || !python.is_file() {
        bail!(
            "`python3 -m venv {}` failed ({status}); install the venv module and pip \
             (Debian: `apt-get install python3-venv python3-pip`)",
            venv.display()
        );
    }
    Ok(python)
}

/// What `python -c code` prints (trimmed), or `None` when it cannot run or fails.
fn python_says(python: &Path, code: &str) -> Option<String> {
    Command::new(python)
        .args(["-c", code])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `pip install ARGS` with the virtual environment's Python.
pub(crate) fn pip(python: &Path, args: &[&str], envs: &[(&str, &str)]) -> Result<()> {
    let status = Command::new(python)
        .args(["-m", "pip", "install", "--disable-pip-version-check"])
        .args(args)
        .envs(envs.iter().copied())
        .status()
        .with_context(|| format!("cannot run {} -m pip", python.display()))?;
    if !status.success() {
        bail!(
            "`pip install {}` failed ({status}); is pip available (Debian: `apt-get install \
             python3-pip`) and PyPI reachable?",
            args.join(" ")
        );
    }
    Ok(())
}

/// `1.2.3` from `name==1.2.3`.
fn pinned_version(requirement: &str) -> &str {
    requirement
        .split_once("==")
        .map_or(requirement, |(_, version)| version)
}

/// Runs a command whose last stdout line is a JSON object, passing stderr through.
pub(crate) fn run_json(command: &mut Command, what: &str) -> Result<Value> {
    let out = command
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start {what}"))?;
    if !out.status.success() {
        bail!("{what} failed ({})", out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Our side prints one pretty-printed object; the peers print one line.
    let text = stdout.trim();
    serde_json::from_str(text)
        .or_else(|_| serde_json::from_str(text.lines().last().unwrap_or_default()))
        .with_context(|| format!("{what} did not print a JSON object; it printed:\n{stdout}"))
}

fn field<'a>(value: &'a Value, key: &str) -> Result<&'a Value> {
    value
        .get(key)
        .with_context(|| format!("the benchmark output has no field {key:?}: {value}"))
}

pub(crate) fn number(value: &Value, key: &str) -> Result<f64> {
    field(value, key)?
        .as_f64()
        .with_context(|| format!("field {key:?} is not a number: {value}"))
}

/// The entry of the decode list `list` whose model name contains `model`.
fn find_decode<'a>(ours: &'a Value, list: &str, model: &str) -> Result<&'a Value> {
    field(ours, list)?
        .as_array()
        .and_then(|runs| {
            runs.iter().find(|run| {
                run.get("model")
                    .and_then(Value::as_str)
                    .is_some_and(|name| name.contains(model))
            })
        })
        .with_context(|| format!("our {list} has no {model} run"))
}

/// The tiny model's decode run of `batch` rows.
fn find_decode_batch(ours: &Value, batch: u64) -> Result<&Value> {
    field(ours, "tiny_decode")?
        .as_array()
        .and_then(|runs| {
            runs.iter()
                .find(|run| run.get("batch").and_then(Value::as_u64) == Some(batch))
        })
        .with_context(|| format!("our tiny_decode has no batch-{batch} run"))
}

/// The tiny model's decode run with the most rows.
fn find_decode_batch_max(ours: &Value) -> Result<&Value> {
    field(ours, "tiny_decode")?
        .as_array()
        .and_then(|runs| {
            runs.iter()
                .max_by_key(|run| run.get("batch").and_then(Value::as_u64).unwrap_or(0))
        })
        .context("our tiny_decode is empty")
}

/// How many leading greedy tokens two runs share.
fn leading_agreement(a: &Value, b: &Value) -> usize {
    match (a.as_array(), b.as_array()) {
        (Some(a), Some(b)) => a.iter().zip(b).take_while(|(x, y)| x == y).count(),
        _ => 0,
    }
}

/// `value` with the field `key` set to `field`.
fn with_field(value: &Value, key: &str, field: Value) -> Value {
    let mut value = value.clone();
    if let Value::Object(map) = &mut value {
        map.insert(key.into(), field);
    }
    value
}

/// `value` without the field `key`.
fn without(value: &Value, key: &str) -> Value {
    let mut value = value.clone();
    if let Value::Object(map) = &mut value {
        map.remove(key);
    }
    value
}

pub(crate) fn ratio(ours: f64, peer: f64, target: f64) -> Value {
    let value = ours / peer;
    json!({
        "value": (value * 1000.0).round() / 1000.0,
        "target": target,
        "met": value >= target,
    })
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// `/proc/loadavg`'s 1, 5 and 15 minute load averages (empty where there is none).
pub(crate) fn load_avg() -> Vec<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[1.3, 0.9, 1.1]), Some(1.1));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }
}
