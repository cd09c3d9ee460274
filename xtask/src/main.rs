//! Project automation behind `cargo xtask`: set up the machine, run the main job, run every test.

mod bench;
mod bench_chart;
mod bench_grpo;
mod bench_monitor;
mod bench_runs;
mod bench_science;
mod bench_serve;
mod bench_serve_load;
mod bench_wgpu;
mod bench_wgpu_rl;
mod bundle;
mod chaos;
mod check_aarch64;
mod check_cuda;
mod device_check;
mod fuzz;
mod setup;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  setup        install what the project needs (Debian packages when run as root)
  run          set up, build, and run the main job (the studio on the quickstart
               experiment, or the same run headless when no display is present)
  test         set up, then run every check and test (what CI runs)
  bundle [--no-build]
               build the studio and the envace command line (with its monitor) in
               release and package them: target/bundle/envace-studio_VERSION_ARCH.deb
               and target/bundle/EnvACE_Studio-VERSION-ARCH.AppImage, with desktop
               entries and icon (--no-build: package the release binaries already built)
  chaos [--kills N] [--seed S]
               kill a training run with SIGKILL at N points (default 20; in SFT and RL,
               in store transactions, at every stage of a checkpoint write, at random
               moments; drawn from S, default a fresh seed), resume it after each, and
               check it ends with an uninterrupted run's rows, a sound store, every
               committed row kept and no temporary file; with the full-disk test
               beside it (target/bench/chaos.json)
  fuzz TARGET|all [--secs N]
               AFL++ (cargo-afl, stable Rust) for N seconds per target (default 60) on
               tool_call, rehearse, config, gguf_header, bfcl_line, request, from the
               seeds in fuzz/corpus/; crashes go to fuzz/regressions/, which the
               engine's tests replay (target/bench/fuzz.json)
  check cuda [--cuda 13.4|13.0]
               build the engine and CLI with `--features cuda` from NVIDIA's PyPI wheels
               (installed into the cache folder; no GPU needed), failing on a warning
  check aarch64
               cross-compile the engine and CLI for 64-bit ARM Linux (NEON kernels),
               failing on a warning, and run the engine's model and kernel tests
               under qemu-aarch64
  device-check [--cuda 13.4|13.0]
               on a machine with an NVIDIA GPU: the CUDA build, every per-device test
               body on CUDA, and training and batched decoding on the GPU against
               PyTorch on the same GPU (one JSON line; target/bench/device-check.json).
               --prepare DIR --compute-cap N: build those binaries here (no GPU) into
               DIR; then on a GPU machine without Rust, from a copy of the checkout:
               DIR/xtask device-check --prebuilt DIR
  bench NAME   measure ours against its peers; prints one JSON object as the last
               line of stdout and writes target/bench/NAME.json. Benchmarks:
                 model       [--simd avx2] policy training vs PyTorch, SmolLM2 Q4_1
                             decoding vs llama.cpp, batched vs single-stream decoding
                             (--simd avx2: our side held to AVX2 kernels, as on a CPU
                             without AVX-512)
                 grpo        [--simd avx2] our GRPO step vs TRL's GRPOTrainer on the same work
                             (single turn, random init, same prompts, sizes and
                             reward rule): steps/min, generated tokens/s, update time,
                             peak memory; then our multi-turn rehearsal step beside it
                 wgpu        [--adapter NAME] decoding on the wgpu path vs the CPU path
                             (tiny model and SmolLM2, batch 1 and 16) with the adapter's
                             name, and the cost of a weight refresh
                 rollout     episodes/min and tokens/s, real vs rehearsed tool responses
                 quickstart  wall time and held-out success: SFT only, real-environment
                             GRPO and rehearsal GRPO on the same budget
                 chart       a chart of 1,000,000 points per series in the studio's
                             webview (Xvfb): first draw and zoom/pan redraws, ours
                             (decimated) vs plain uPlot given every point
                 science     [--seeds A,B,C] [--config FILE] (default: the quickstart
                             preset) [--fresh] per seed: SFT once, then real-environment
                             GRPO, rehearsal GRPO and more SFT from that checkpoint;
                             held-out success (greedy, pass@k, per family) and test-time
                             rehearsal curves, mean ± standard error over seeds; run it
                             again after a stop or crash to continue where it was
                             (--fresh: start over)
";

fn main() {
    if let Err(err) = run() {
        eprintln!("xtask: error: {err:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = repo_root()?;
    std::env::set_current_dir(&root).with_context(|| format!("cannot enter {}", root.display()))?;
    match args.first().map(String::as_str) {
        Some("setup") => setup::ensure_all(),
        Some("run") => main_job(&root),
        Some("test") => test_all(),
        Some("bundle") => bundle::bundle(&root, &args[1..]),
        Some("chaos") => chaos::chaos(&root, &args[1..]),
        Some("fuzz") => fuzz::fuzz(&root, &args[1..]),
        Some("check") => match args.get(1).map(String::as_str) {
            Some("cuda") => {
                let release = match args.get(2).map(String::as_str) {
                    None => None,
                    Some("--cuda") => Some(
                        args.get(3)
                            .map(String::as_str)
                            .context("--cuda needs a release, such as 13.0")?,
                    ),
                    Some(other) => {
                        bail!("unknown check cuda argument {other:?}; use --cuda RELEASE")
                    }
                };
                check_cuda::check_cuda(&root, check_cuda::release(release)?)
            }
            Some("aarch64") => check_aarch64::check_aarch64(&root),
            Some(other) => bail!("no check named {other:?}; the checks are: cuda, aarch64"),
            None => bail!("usage: cargo xtask check cuda|aarch64"),
        },
        Some("device-check") => {
            device_check::device_check(&root, &device_check::Options::parse(&args[1..])?)
        }
        Some("bench") => run_bench(&root, args.get(1).map(String::as_str), &args[1..]),
        Some("-h" | "--help" | "help") | None => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown command {other:?}\n\n{USAGE}"),
    }
}

fn repo_root() -> Result<PathBuf> {
    let built_in = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // A copied xtask (a `device-check --prepare` bundle) runs from the checkout's root on
    // another machine, where the folder it was built in does not exist.
    let from_cwd = || {
        std::env::current_dir()
            .ok()
            .filter(|cwd| cwd.join("xtask").join("Cargo.toml").is_file())
            .map(|cwd| cwd.join("xtask"))
    };
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| built_in.is_dir().then(|| built_in.clone()))
        .or_else(from_cwd)
        .unwrap_or(built_in);
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .context("xtask lives in a folder of the repository root")
}

/// Runs a command, echoing it first; fails with the command line when it fails.
pub(crate) fn cargo(args: &[&str]) -> Result<()> {
    cargo_env(args, &[])
}

/// [`cargo`] with extra environment variables (echoed before the command).
pub(crate) fn cargo_env(args: &[&str], envs: &[(&str, String)]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // PATH is shown by name only: its value is the whole search path.
    let shown: Vec<String> = envs
        .iter()
        .map(|(k, v)| match *k {
            "PATH" => "PATH=… ".to_owned(),
            _ => format!("{k}={v} "),
        })
        .collect();
    eprintln!("xtask: $ {}cargo {}", shown.concat(), args.join(" "));
    let status = Command::new(&cargo)
        .args(args)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .status()
        .with_context(|| format!("cannot start {cargo}"))?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Runs `npm run SCRIPT` in ui/.
pub(crate) fn npm(script: &str) -> Result<()> {
    eprintln!("xtask: $ npm run {script} (in ui/)");
    let status = Command::new("npm")
        .args(["run", "--silent", script])
        .current_dir("ui")
        .status()
        .context("cannot run npm")?;
    if !status.success() {
        bail!("`npm run {script}` in ui/ failed ({status})");
    }
    Ok(())
}

fn test_all() -> Result<()> {
    setup::ensure_all()?;
    // The studio embeds ui/dist at compile time, so the front end is built first.
    npm("build")?;
    npm("test")?;
    cargo(&["fmt", "--all", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--locked",
        "--",
        "-D",
        "warnings",
    ])?;
    cargo_test(&["test", "--workspace", "--locked", "--no-fail-fast"])
}

/// Runs `cargo test`, passing its output through, and ends with one summary line
/// `N passed, N failed` over every test binary.
fn cargo_test(args: &[&str]) -> Result<()> {
    let (n_passed, n_failed, status) = run_cargo_tests(args, &[])?;
    println!("{n_passed} passed, {n_failed} failed");
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    if n_passed == 0 {
        bail!("no test ran");
    }
    Ok(())
}

/// Runs `cargo ARGS` (a test run) with `envs`, passing its output through; returns the
/// passed and failed counts over its `test result:` lines and how it exited.
pub(crate) fn run_cargo_tests(
    args: &[&str],
    envs: &[(&str, String)],
) -> Result<(u64, u64, std::process::ExitStatus)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("xtask: $ cargo {}", args.join(" "));
    let mut command = Command::new(&cargo);
    command
        .args(args)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())));
    run_test_command(command, "cargo test")
}

/// Runs a test command (cargo test, or a test binary), echoing its output, and counts the
/// passed and failed tests of its libtest summaries.
pub(crate) fn run_test_command(
    mut command: Command,
    what: &str,
) -> Result<(u64, u64, std::process::ExitStatus)> {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {what}"))?;
    let stdout = child
        .stdout
        .take()
        .with_context(|| format!("no stdout from {what}"))?;
    let (mut n_passed, mut n_failed) = (0u64, 0u64);
    for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
        let line = line.with_context(|| format!("reading the output of {what}"))?;
        println!("{line}");
        if let Some(summary) = line.strip_prefix("test result: ") {
            n_passed += count_before(summary, " passed");
            n_failed += count_before(summary, " failed");
        }
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for {what}"))?;
    Ok((n_passed, n_failed, status))
}

/// The number just before `word` in a libtest summary such as `ok. 11 passed; 0 failed; ...`.
fn count_before(summary: &str, word: &str) -> u64 {
    summary
        .split(';')
        .find_map(|part| {
            part.trim()
                .trim_start_matches("ok. ")
                .trim_start_matches("FAILED. ")
                .strip_suffix(word.trim_start())
                .map(str::trim)
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn main_job(root: &Path) -> Result<()> {
    setup::ensure_all()?;
    let target = bench_runs::target_dir(root);
    let has_display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()));
    if has_display {
        npm("build")?;
        cargo(&[
            "build",
            "--locked",
            "--release",
            "--package",
            "envace-studio",
        ])?;
        let studio = target.join("release").join("envace-studio");
        eprintln!("xtask: $ envace-studio (on the quickstart experiment)");
        let status = Command::new(&studio)
            .status()
            .with_context(|| format!("cannot start {}", studio.display()))?;
        if !status.success() {
            bail!("the studio exited with {status}");
        }
        return Ok(());
    }
    cargo(&["build", "--locked", "--release", "--package", "envace-cli"])?;
    let envace = target.join("release").join("envace");
    let quickstart = "assets/configs/quickstart.toml";
    eprintln!("xtask: $ envace config validate {quickstart}");
    let status = Command::new(&envace)
        .args(["config", "validate", quickstart])
        .status()
        .with_context(|| format!("cannot start {}", envace.display()))?;
    if !status.success() {
        bail!("the quickstart config is invalid");
    }
    let store = target.join("envace-quickstart").join("runs.sqlite");
    eprintln!(
        "xtask: no display, so the quickstart trains headless: $ envace --store {} train {quickstart}",
        store.display()
    );
    eprintln!(
        "xtask: Ctrl-C stops after a checkpoint; `envace train {quickstart} --resume RUN` continues"
    );
    let status = Command::new(&envace)
        .arg("--store")
        .arg(&store)
        .args(["train", quickstart])
        .status()
        .with_context(|| format!("cannot start {}", envace.display()))?;
    if !status.success() {
        bail!("training the quickstart ended with {status}");
    }
    eprintln!(
        "xtask: inspect the run with `{} --store {} runs show quickstart`",
        envace.display(),
        store.display()
    );
    Ok(())
}

fn run_bench(root: &Path, name: Option<&str>, args: &[String]) -> Result<()> {
    // Each benchmark prints one JSON object and writes it to target/bench/NAME.json; the others
    // (rollout, quickstart) land with the issues that set their targets.
    match name {
        Some("model") => bench::model(root, bench::parse_simd(args)?),
        Some("grpo") => bench_grpo::grpo(root, bench::parse_simd(args)?),
        Some("rollout") => bench_runs::rollout(root),
        Some("quickstart") => bench_runs::quickstart(root),
        Some("chart") => bench_chart::chart(root),
        Some("serve") => bench_serve::serve(root),
        Some("wgpu") => bench_wgpu::wgpu(root, &args[1..]),
        Some("wgpu-rl") => bench_wgpu_rl::wgpu_rl(root, &args[1..]),
        Some("monitor") => bench_monitor::monitor(root),
        Some("science") => bench_science::science(
            root,
            &bench_science::parse_seeds(args)?,
            &bench_science::parse_config(root, args)?,
            args.iter().any(|a| a == "--fresh"),
            bench_science::parse_jobs(args)?,
        ),
        None => {
            bail!(
                "usage: cargo xtask bench NAME; the benchmarks are: model, grpo, serve, wgpu, wgpu-rl, rollout, quickstart, chart, monitor, science"
            )
        }
        Some(name) => {
            bail!(
                "no benchmark named {name:?}; the benchmarks are: model, grpo, serve, wgpu, wgpu-rl, rollout, quickstart, chart, monitor, science"
            )
        }
    }
}
