//! `cargo xtask check cuda`: builds the engine and the CLI with `--features cuda` on a machine
//! without a GPU, from NVIDIA's PyPI wheels installed into the cache folder, failing on a
//! warning; then checks that the CUDA build starts and that every per-device test body has
//! its CUDA twin.
//!
//! What it installs (`<cache>/cuda-13.4/venv`, about 1.2 GB): the CUDA 13.4 compiler (`nvcc`,
//! NVVM, CRT), runtime headers and CCCL, NVRTC, cuBLAS and cuRAND, pinned below. The wheels put
//! them all under one `nvidia/cu13` tree, which serves as `CUDA_HOME`. Two things a toolkit has
//! and the wheels do not are made here:
//! - the unversioned `lib*.so` names the linker asks for (`-lcublas`), as links to the wheels'
//!   versioned libraries;
//! - `lib/stubs/libcuda.so`: the driver library comes with the GPU driver, not with any wheel,
//!   so, as the toolkit's own stub does, a library with the driver's soname whose functions
//!   return `CUDA_ERROR_STUB_LIBRARY` (34). Its function names are read from the driver bindings
//!   of the `cudarc` that candle links, so it defines what the build references. A binary built
//!   here loads the real `libcuda.so.1` on a machine with a GPU.
//!
//! The build goes to `target/cuda` so that it does not disturb the CPU build. candle's kernels
//! are compiled for `CUDA_COMPUTE_CAP` (80 unless set: the oldest GPUs with every bf16 kernel;
//! newer ones run its PTX).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// A CUDA release and the wheels that make its toolkit, each pinned (`pip` would otherwise
/// pull the newest NVRTC for cuBLAS).
pub(crate) struct Release {
    /// `13.4`: the folder `<cache>/cuda-13.4` and what `nvcc --version` says.
    pub(crate) name: &'static str,
    wheels: &'static [&'static str],
}

/// The releases `check cuda` and `device-check` can install; the first is the default.
///
/// The newest (13.4; cudarc 0.19 knows releases up to it) for building here. 13.0 for a GPU
/// whose driver is from the 580 series: candle loads most of its kernels as PTX, which a
/// driver compiles only when it is at least as new as the compiler that wrote it (CUDA's
/// minor-version compatibility covers machine code, not PTX), so a build for such a machine
/// must use the driver's own release or an older one.
const RELEASES: [Release; 2] = [
    Release {
        name: "13.4",
        wheels: &[
            "nvidia-cuda-nvcc==13.4.92",
            "nvidia-nvvm==13.4.92",
            "nvidia-cuda-crt==13.4.92",
            "nvidia-cuda-runtime==13.4.92",
            "nvidia-cuda-nvrtc==13.4.92",
            // CCCL's wheels carry their own numbering; this one is the newest, and the CUDA
            // 13.4 compiler builds candle's kernels with it.
            "nvidia-cuda-cccl==13.3.5.0.6",
            "nvidia-cublas==13.4.3.11",
            "nvidia-curand==10.4.4.72",
        ],
    },
    Release {
        name: "13.0",
        wheels: &[
            "nvidia-cuda-nvcc==13.0.88",
            "nvidia-nvvm==13.0.88",
            "nvidia-cuda-crt==13.0.88",
            "nvidia-cuda-runtime==13.0.96",
            "nvidia-cuda-nvrtc==13.0.88",
            "nvidia-cuda-cccl==13.0.85",
            "nvidia-cublas==13.0.2.14",
            "nvidia-curand==10.4.0.35",
        ],
    },
];

/// The release named by `--cuda NAME` (the default without one), or an error listing them.
pub(crate) fn release(name: Option<&str>) -> Result<&'static Release> {
    let Some(name) = name else {
        return Ok(&RELEASES[0]);
    };
    RELEASES.iter().find(|r| r.name == name).with_context(|| {
        let known: Vec<&str> = RELEASES.iter().map(|r| r.name).collect();
        format!(
            "no CUDA release {name:?} here; --cuda takes one of {}",
            known.join(", ")
        )
    })
}

/// The libraries the CUDA build links (cudarc's `dynamic-linking` and candle's kernels),
/// with the versioned file each wheel ships.
const LINKED: [(&str, &str); 5] = [
    ("libcublas.so", "libcublas.so.13"),
    ("libcublasLt.so", "libcublasLt.so.13"),
    ("libcurand.so", "libcurand.so.10"),
    ("libnvrtc.so", "libnvrtc.so.13"),
    ("libcudart.so", "libcudart.so.13"),
];
/// What the stub driver's functions return: `CUDA_ERROR_STUB_LIBRARY`.
const STUB_ERROR: u32 = 34;

/// A CUDA toolkit to build with.
pub(crate) struct Toolkit {
    /// `CUDA_HOME`: the wheels' `nvidia/cu13` tree, or the one the environment named.
    home: PathBuf,
    /// Whether it is the wheels' tree (else `CUDA_HOME` from the environment).
    from_wheels: bool,
    /// A folder holding the stub driver as `libcuda.so.1`, for starting a build here.
    stub_runtime: Option<PathBuf>,
    /// The wheels' release (unused with `CUDA_HOME`).
    release: &'static Release,
}

impl Toolkit {
    /// The wheels' toolkit in the cache folder, installed when missing, with the linker's
    /// names and the stub driver.
    pub(crate) fn install(root: &Path, release: &'static Release) -> Result<Self> {
        let base =
            absolute(root, &crate::setup::cache_dir()).join(format!("cuda-{}", release.name));
        let home = ensure_toolkit(&base, release)?;
        link_names(&home)?;
        let stub_runtime = build_stub_driver(root, &base, &home)?;
        Ok(Toolkit {
            home,
            from_wheels: true,
            stub_runtime: Some(stub_runtime),
            release,
        })
    }

    /// On a GPU machine: `CUDA_HOME` when it names a toolkit with `nvcc`, else the wheels'.
    /// Binaries linked against the stub load the real driver by its soname.
    pub(crate) fn for_device(root: &Path, release: &'static Release) -> Result<Self> {
        if let Some(home) = std::env::var_os("CUDA_HOME").map(PathBuf::from)
            && home.join("bin").join("nvcc").is_file()
        {
            eprintln!(
                "xtask: using the CUDA toolkit in CUDA_HOME={}",
                home.display()
            );
            return Ok(Toolkit {
                home,
                from_wheels: false,
                stub_runtime: None,
                release,
            });
        }
        Self::install(root, release)
    }

    /// The environment of a `cargo` build with `--features cuda` into `target_dir`.
    pub(crate) fn build_env(
        &self,
        compute_cap: &str,
        target_dir: &Path,
        deny_warnings: bool,
    ) -> Vec<(&'static str, String)> {
        let path = format!(
            "{}:{}",
            self.home.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut envs = vec![
            ("CUDA_HOME", self.home.display().to_string()),
            ("PATH", path),
            ("CUDA_COMPUTE_CAP", compute_cap.to_owned()),
            ("CARGO_TARGET_DIR", target_dir.display().to_string()),
        ];
        if self.from_wheels {
            // The wheels keep CCCL's headers (`nv/target`, which cuda_fp16.h includes) one
            // folder down from where a toolkit has them; the test binaries that `cargo test`
            // starts find the wheels' libraries on the library path.
            envs.push((
                "NVCC_PREPEND_FLAGS",
                format!("-I{}", self.home.join("include").join("cccl").display()),
            ));
            envs.extend(self.run_env());
        }
        if deny_warnings {
            envs.push(("RUSTFLAGS", "-D warnings".into()));
        }
        envs
    }

    /// The environment a CUDA build's binary runs with: the wheels' libraries on the library
    /// path (a system toolkit's are found by the loader).
    pub(crate) fn run_env(&self) -> Vec<(&'static str, String)> {
        if !self.from_wheels {
            return Vec::new();
        }
        let mut path = self.home.join("lib").display().to_string();
        if let Ok(old) = std::env::var("LD_LIBRARY_PATH")
            && !old.is_empty()
        {
            path = format!("{path}:{old}");
        }
        vec![("LD_LIBRARY_PATH", path)]
    }

    /// What the JSON records about it.
    pub(crate) fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "cuda_home": self.home,
            "source": if self.from_wheels { "PyPI wheels" } else { "CUDA_HOME" },
            "release": if self.from_wheels { Some(self.release.name) } else { None },
            "wheels": if self.from_wheels { self.release.wheels.to_vec() } else { Vec::new() },
        })
    }
}

pub fn check_cuda(root: &Path, release: &'static Release) -> Result<()> {
    let started = Instant::now();
    let toolkit = Toolkit::install(root, release)?;
    let installed_secs = started.elapsed().as_secs_f64();
    let stub = toolkit
        .stub_runtime
        .clone()
        .context("the wheels' toolkit has a stub driver")?;

    let target_dir = root.join("target").join("cuda");
    let compute_cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "80".into());
    let envs = toolkit.build_env(&compute_cap, &target_dir, true);
    let build_started = Instant::now();
    let args = [
        "build",
        "--locked",
        "--all-targets",
        "--package",
        "envace",
        "--package",
        "envace-cli",
        "--features",
        "envace/cuda",
    ];
    eprintln!(
        "xtask: CUDA {} from {}, compute capability {compute_cap}, into {}",
        release.name,
        toolkit.home.display(),
        target_dir.display()
    );
    crate::cargo_env(&args, &envs).context("the CUDA build failed")?;
    let build_secs = build_started.elapsed().as_secs_f64();

    // The built binaries need the wheels' libraries and a `libcuda.so.1`: the stub, in a
    // folder of its own that only these checks put on the library path.
    let library_path = format!("{}:{}", toolkit.home.join("lib").display(), stub.display());
    let engine_tests = newest_test_binary(&target_dir.join("debug").join("deps"), "engine")?;
    let listed = Command::new(&engine_tests)
        .args(["--list", "--format", "terse"])
        .env("LD_LIBRARY_PATH", &library_path)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", engine_tests.display()))?;
    if !listed.status.success() {
        bail!(
            "{} --list failed ({}) with the CUDA libraries on the library path",
            engine_tests.display(),
            listed.status
        );
    }
    let listing = String::from_utf8_lossy(&listed.stdout);
    let (n_pairs, missing) = device_twins(&listing);
    if n_pairs == 0 {
        bail!("the CUDA build's engine tests list no `_cuda` test: is `test_device!` compiled?");
    }
    if !missing.is_empty() {
        bail!(
            "per-device test bodies without a CUDA twin in the CUDA build: {}",
            missing.join(", ")
        );
    }
    eprintln!(
        "xtask: the CUDA build's engine tests run {n_pairs} per-device bodies on the CPU and on CUDA"
    );

    // The CLI starts and, with no GPU, says so for a config that asks for CUDA.
    let base = toolkit
        .home
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "venv"))
        .and_then(Path::parent)
        .context("the wheels' toolkit lies in a venv")?
        .to_path_buf();
    let envace = target_dir.join("debug").join("envace");
    let probe = base.join("cuda-device.toml");
    std::fs::write(&probe, cuda_probe_config())
        .with_context(|| format!("cannot write {}", probe.display()))?;
    let store = base.join("probe-runs.sqlite");
    let _ = std::fs::remove_file(&store);
    let out = Command::new(&envace)
        .arg("--store")
        .arg(&store)
        .arg("train")
        .arg(&probe)
        .env("LD_LIBRARY_PATH", &library_path)
        .output()
        .with_context(|| format!("cannot run {}", envace.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let reported = stderr.lines().find(|l| l.contains("cuda:0"));
    if out.status.success() || reported.is_none() || stderr.contains("panicked") {
        bail!(
            "the CUDA build of envace, given `device = \"cuda\"` and no GPU, should fail naming \
             cuda:0 (and not panic); it exited with {} and said:\n{stderr}",
            out.status
        );
    }
    eprintln!(
        "xtask: the CUDA build of envace starts and reports the missing GPU: {}",
        reported.unwrap_or_default().trim()
    );
    eprintln!(
        "xtask: check cuda passed in {:.0} s (toolkit ready in {installed_secs:.0} s, build {build_secs:.0} s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn absolute(root: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        root.join(path)
    }
}

/// The toolkit tree (`CUDA_HOME`) in `base/venv`, installing the pinned wheels when the venv
/// does not record exactly them.
fn ensure_toolkit(base: &Path, release: &Release) -> Result<PathBuf> {
    let venv = base.join("venv");
    let record = venv.join("envace-cuda-wheels.txt");
    let wanted = release.wheels.join("\n");
    if std::fs::read_to_string(&record).ok().as_deref() != Some(wanted.as_str()) {
        std::fs::create_dir_all(base)
            .with_context(|| format!("cannot create {}", base.display()))?;
        let python = crate::bench::create_venv(&venv)?;
        eprintln!(
            "xtask: installing the CUDA {} compiler and libraries from PyPI into {} (about 1.2 GB)",
            release.name,
            venv.display()
        );
        let mut args = vec!["--quiet"];
        args.extend(release.wheels);
        crate::bench::pip(&python, &args, &[])?;
        std::fs::write(&record, &wanted)
            .with_context(|| format!("cannot write {}", record.display()))?;
    }
    let lib = venv.join("lib");
    let entries =
        std::fs::read_dir(&lib).with_context(|| format!("cannot read {}", lib.display()))?;
    for entry in entries.flatten() {
        let home = entry
            .path()
            .join("site-packages")
            .join("nvidia")
            .join("cu13");
        if home.join("bin").join("nvcc").is_file() {
            return Ok(home);
        }
    }
    bail!(
        "no nvidia/cu13/bin/nvcc under {}; delete {} and run again",
        lib.display(),
        venv.display()
    )
}

/// The unversioned names the linker looks for, as links to the wheels' libraries.
fn link_names(cuda_home: &Path) -> Result<()> {
    let lib = cuda_home.join("lib");
    for (name, versioned) in LINKED {
        if !lib.join(versioned).is_file() {
            bail!(
                "{} is missing from the CUDA wheels",
                lib.join(versioned).display()
            );
        }
        let link = lib.join(name);
        if std::fs::read_link(&link).ok().as_deref() != Some(Path::new(versioned)) {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(versioned, &link)
                .with_context(|| format!("cannot link {}", link.display()))?;
        }
    }
    Ok(())
}

/// Builds `lib/stubs/libcuda.so` (for linking) and returns a folder holding the same stub as
/// `libcuda.so.1` (for starting the built binaries here).
fn build_stub_driver(root: &Path, base: &Path, cuda_home: &Path) -> Result<PathBuf> {
    let bindings = cudarc_driver_bindings(root)?;
    let text = std::fs::read_to_string(&bindings)
        .with_context(|| format!("cannot read {}", bindings.display()))?;
    let names = driver_functions(&text);
    if names.len() < 100 {
        bail!(
            "found only {} driver functions in {}: has cudarc's layout changed?",
            names.len(),
            bindings.display()
        );
    }
    let source = stub_source(&names);
    let stubs = cuda_home.join("lib").join("stubs");
    std::fs::create_dir_all(&stubs)
        .with_context(|| format!("cannot create {}", stubs.display()))?;
    let c_file = base.join("libcuda-stub.c");
    let library = stubs.join("libcuda.so");
    if std::fs::read_to_string(&c_file).ok().as_deref() != Some(source.as_str())
        || !library.is_file()
    {
        std::fs::write(&c_file, &source)
            .with_context(|| format!("cannot write {}", c_file.display()))?;
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o"])
            .arg(&library)
            .arg(&c_file)
            .status()
            .context("cannot run cc (Debian: `apt-get install gcc`)")?;
        if !status.success() {
            bail!(
                "compiling the stub driver {} failed ({status})",
                c_file.display()
            );
        }
    }
    let runtime = base.join("stub-driver");
    std::fs::create_dir_all(&runtime)
        .with_context(|| format!("cannot create {}", runtime.display()))?;
    std::fs::copy(&library, runtime.join("libcuda.so.1")).with_context(|| {
        format!(
            "cannot copy {} into {}",
            library.display(),
            runtime.display()
        )
    })?;
    eprintln!(
        "xtask: stub driver with {} functions from {}",
        names.len(),
        bindings.display()
    );
    Ok(runtime)
}

/// `src/driver/sys/mod.rs` of the cudarc in the lock file, from `cargo metadata`.
fn cudarc_driver_bindings(root: &Path) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args([
            "metadata",
            "--locked",
            "--format-version",
            "1",
            "--features",
            "envace/cuda",
        ])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo metadata")?;
    if !out.status.success() {
        bail!("`cargo metadata` failed ({})", out.status);
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("cargo metadata printed no JSON")?;
    let manifest = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "cudarc")
        .and_then(|p| p["manifest_path"].as_str())
        .context("cudarc is not in the lock file; does candle still use it for CUDA?")?;
    let bindings = Path::new(manifest)
        .parent()
        .context("cudarc's manifest has no folder")?
        .join("src/driver/sys/mod.rs");
    if !bindings.is_file() {
        // `cargo metadata` lists the package without downloading its source.
        let status = Command::new(&cargo)
            .args(["fetch", "--locked"])
            .current_dir(root)
            .status()
            .context("cannot run cargo fetch")?;
        if !status.success() || !bindings.is_file() {
            bail!("{} is missing after `cargo fetch`", bindings.display());
        }
    }
    Ok(bindings)
}

/// The driver API functions cudarc binds (`pub unsafe fn cuXxx(` at the start of a line).
fn driver_functions(bindings: &str) -> Vec<String> {
    let mut names: Vec<String> = bindings
        .lines()
        .filter_map(|line| line.strip_prefix("pub unsafe fn "))
        .filter_map(|rest| rest.split('(').next())
        .filter(|name| {
            name.starts_with("cu") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// C source of the stub driver: every function returns [`STUB_ERROR`]. The linker matches
/// names only, and no caller gets past the first call's error.
fn stub_source(names: &[String]) -> String {
    let mut source = format!(
        "/* Written by `cargo xtask check cuda`: link-time stand-in for the NVIDIA driver's \
         libcuda.so.1.\n   Every function returns CUDA_ERROR_STUB_LIBRARY ({STUB_ERROR}). */\n"
    );
    for name in names {
        source.push_str(&format!("int {name}(void) {{ return {STUB_ERROR}; }}\n"));
    }
    source
}

/// The newest `deps/NAME-<hash>` executable.
pub(crate) fn newest_test_binary(deps: &Path, name: &str) -> Result<PathBuf> {
    let prefix = format!("{name}-");
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in
        std::fs::read_dir(deps).with_context(|| format!("cannot read {}", deps.display()))?
    {
        let entry = entry?;
        let file = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if !file.starts_with(&prefix) || path.extension().is_some() {
            continue;
        }
        let modified = entry.metadata()?.modified()?;
        if best.as_ref().is_none_or(|(t, _)| modified > *t) {
            best = Some((modified, path));
        }
    }
    best.map(|(_, p)| p)
        .with_context(|| format!("no {prefix}* test executable in {}", deps.display()))
}

/// How many `X_cpu` tests have an `X_cuda` twin in a `--list --format terse` listing, and the
/// `X_cpu` tests without one.
fn device_twins(listing: &str) -> (usize, Vec<String>) {
    let tests: std::collections::BTreeSet<&str> = listing
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .collect();
    let mut n_pairs = 0;
    let mut missing = Vec::new();
    for test in &tests {
        if let Some(body) = test.strip_suffix("_cpu") {
            if tests.contains(format!("{body}_cuda").as_str()) {
                n_pairs += 1;
            } else {
                missing.push((*test).to_owned());
            }
        }
    }
    (n_pairs, missing)
}

/// A quickstart-sized config that asks for CUDA.
fn cuda_probe_config() -> String {
    "[run]\nname = \"cuda-probe\"\n\n[model]\nsource = \"tiny\"\n\n[backend]\ndevice = \"cuda\"\n\n\
     [env]\ndomains = [\"functions\"]\ntask_source = \"generated\"\n"
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_functions_are_read_from_the_bindings() {
        let bindings = "pub unsafe fn cuInit(Flags: c_uint) -> CUresult {\n    \
                        #[cfg(feature = \"dynamic-loading\")]\n}\n\
                        pub unsafe fn cuCtxCreate_v4(p: *mut CUcontext) -> CUresult {\n}\n\
                        pub unsafe fn cuInit(Flags: c_uint) -> CUresult {\n}\n\
                        pub fn culib_helper() {}\n    pub unsafe fn cuNested() {}\n";
        assert_eq!(driver_functions(bindings), ["cuCtxCreate_v4", "cuInit"]);
        let source = stub_source(&driver_functions(bindings));
        assert!(source.contains("int cuInit(void) { return 34; }"));
    }

    #[test]
    fn every_cpu_body_needs_its_cuda_twin() {
        let listing = "model::a_cpu: test\nmodel::a_cuda: test\nmodel::b_cpu: test\n\
                       model::plain: test\n";
        assert_eq!(device_twins(listing), (1, vec!["model::b_cpu".to_owned()]));
    }
}
