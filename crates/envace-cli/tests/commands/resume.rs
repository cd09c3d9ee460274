//! `envace train` killed with SIGKILL again and again — between checkpoints, during checkpoint
//! writes, inside store transactions, in SFT and in RL — and resumed with `--resume` each time
//! ends with exactly the rows of an uninterrupted run; a resume that fails leaves the store as
//! it was; a finished run is not resumed; a full disk during a checkpoint stops the run with a
//! clear message, the previous checkpoint intact, and the run resumes once there is room.
//!
//! `cargo xtask chaos` runs the crash loop with more kills and a fresh seed
//! (`ENVACE_CHAOS_KILLS`, `ENVACE_CHAOS_SEED`) and reads its report (`ENVACE_CHAOS_REPORT`).
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use envace::crash::{FAIL_AT_VAR, KILL_AT_VAR};
use envace::rng::Rng;
use envace::store::{RunId, RunStatus, Store};

/// 30 SFT and 6 GRPO steps, checkpoints every 3 steps and at the end of SFT (the two newest
/// kept), held-out evaluations at steps 30, 32, 34 and 36.
const CRASH_JOB: &str = include_str!("../../../envace/tests/fixtures/train/crash_job.toml");
const N_SFT_STEPS: u64 = 30;
const N_STEPS: u64 = 36;
const RUN: RunId = RunId(1);

/// How one attempt is ended early.
#[derive(Debug, Clone)]
enum Kill {
    /// At the n-th pass through a crash point (`envace::crash`).
    At(&'static str, u64),
    /// From outside, this long after the process started.
    After(Duration),
}

fn train(dir: &Path, store: &Path, resume: bool, kill: Option<&Kill>) -> (ExitStatus, String) {
    train_with(dir, store, resume, kill, &[])
}

/// [`train`] with more environment variables.
fn train_with(
    dir: &Path,
    store: &Path,
    resume: bool,
    kill: Option<&Kill>,
    envs: &[(&str, &str)],
) -> (ExitStatus, String) {
    let config = dir.join("crash.toml");
    if !config.exists() {
        std::fs::write(&config, CRASH_JOB).unwrap();
    }
    let stderr_path = dir.join("stderr.txt");
    let mut command = Command::new(env!("CARGO_BIN_EXE_envace"));
    command
        .arg("--store")
        .arg(store)
        .arg("train")
        .arg(&config)
        .env_remove("RUST_LOG")
        .env_remove(KILL_AT_VAR)
        .env_remove(FAIL_AT_VAR)
        .envs(envs.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    if resume {
        command.args(["--resume", "1"]);
    }
    if let Some(Kill::At(point, n)) = kill {
        command.env(KILL_AT_VAR, format!("{point}:{n}"));
    }
    let mut child = command.spawn().unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "an attempt ran for 10 minutes"
        );
        if let Some(Kill::After(after)) = kill
            && started.elapsed() >= *after
        {
            child.kill().unwrap();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (status, std::fs::read_to_string(&stderr_path).unwrap())
}

/// Every row a run's replay must reproduce, as canonical JSON without wall times (timings,
/// `perf/` metrics, are left out), sorted.
#[derive(Debug, PartialEq)]
struct Rows {
    metrics: Vec<String>,
    evals: Vec<String>,
    trajectories: Vec<String>,
    fidelity: Vec<String>,
}

fn canonical<T: serde::Serialize>(row: &T) -> String {
    let mut value = serde_json::to_value(row).unwrap();
    if let Some(object) = value.as_object_mut() {
        object.remove("wall_time");
    }
    value.to_string()
}

fn sorted<T: serde::Serialize>(rows: &[T]) -> Vec<String> {
    let mut out: Vec<String> = rows.iter().map(canonical).collect();
    out.sort();
    out
}

fn rows(store: &Path) -> Rows {
    let mut store = Store::open(store).unwrap();
    store
        .read(|view| {
            let metrics: Vec<_> = view
                .metrics(RUN)?
                .into_iter()
                .filter(|row| !row.key.starts_with("perf/"))
                .collect();
            Ok(Rows {
                metrics: sorted(&metrics),
                evals: sorted(&view.eval_results(RUN)?),
                trajectories: sorted(&view.trajectories(RUN)?),
                fidelity: sorted(&view.fidelity_pairs(RUN)?),
            })
        })
        .unwrap()
}

/// Everything the store holds about the run, wall times included.
fn dump(store: &Path) -> String {
    let mut store = Store::open(store).unwrap();
    store
        .read(|view| {
            Ok(serde_json::json!({
                "runs": view.runs()?,
                "metrics": view.metrics(RUN)?,
                "events": view.events(RUN)?,
                "evals": view.eval_results(RUN)?,
                "trajectories": view.trajectories(RUN)?,
                "fidelity": view.fidelity_pairs(RUN)?,
                "checkpoints": view.checkpoints(RUN)?,
            })
            .to_string())
        })
        .unwrap()
}

fn killed(status: ExitStatus) -> bool {
    status.signal() == Some(9)
}

/// The `idx`-th kill that usually costs the attempt its progress since the last checkpoint: in
/// turn inside a store transaction, while a checkpoint is written (two stages), between
/// checkpoints with a step's rows still buffered, and at a random moment; where and when
/// within each kind is drawn from `rng`.
fn random_kill(idx: usize, rng: &mut Rng) -> Kill {
    match idx % 5 {
        0 => Kill::At("store.batch", rng.range(1, 3) as u64),
        1 => Kill::At("checkpoint.files", 1),
        2 => Kill::At("step.done", rng.range(1, 2) as u64),
        3 => Kill::At("checkpoint.renamed", 1),
        _ => Kill::After(Duration::from_millis(rng.range(200, 2500) as u64)),
    }
}

#[test]
fn a_run_killed_at_many_points_resumes_to_the_rows_of_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();

    let whole_dir = dir.path().join("whole");
    std::fs::create_dir_all(&whole_dir).unwrap();
    let whole = whole_dir.join("runs.sqlite");
    let (status, stderr) = train(&whole_dir, &whole, false, None);
    assert!(status.success(), "{stderr}");
    let expected = rows(&whole);
    for table in [
        &expected.metrics,
        &expected.evals,
        &expected.trajectories,
        &expected.fidelity,
    ] {
        assert!(!table.is_empty());
        let distinct: BTreeSet<&String> = table.iter().collect();
        assert_eq!(
            distinct.len(),
            table.len(),
            "the uninterrupted run has duplicates"
        );
    }

    // A finished run is not resumed, and the refusal changes nothing.
    let before = dump(&whole);
    let (status, stderr) = train(&whole_dir, &whole, true, None);
    assert!(!status.success());
    assert!(
        stderr.contains("run 1: has finished: there is nothing to resume"),
        "{stderr}"
    );
    assert_eq!(dump(&whole), before);

    let crash_dir = dir.path().join("crashed");
    std::fs::create_dir_all(&crash_dir).unwrap();
    let store = crash_dir.join("runs.sqlite");
    let env_number = |name: &str, default: u64| {
        std::env::var(name).ok().map_or(default, |v| {
            let v = v.trim();
            v.strip_prefix("0x")
                .map_or_else(|| v.parse(), |hex| u64::from_str_radix(hex, 16))
                .unwrap_or_else(|e| panic!("{name}={v:?}: {e}"))
        })
    };
    let n_kills = env_number("ENVACE_CHAOS_KILLS", 14).max(6) as usize;
    let seed = env_number("ENVACE_CHAOS_SEED", 0x5eed_0016);
    let mut rng = Rng::new(seed);
    let mut kills: Vec<(Kill, u64)> = Vec::new();
    // Metric rows at or before each checkpoint resumed from: (step, key, wall time) never lost.
    let mut committed: BTreeSet<(u64, String, u64)> = BTreeSet::new();
    let mut finished = false;
    let mut next_step = 0;
    for attempt in 0..4 * n_kills.max(10) {
        if kills.len() == n_kills {
            break;
        }
        // Kills that move the run past a checkpoint (without finishing it) alternate with pairs
        // of kills that usually do not, so the run is killed at every kind of point on its way.
        let kill = if attempt == 0 {
            Kill::At("step.done", rng.range(4, 5) as u64)
        } else if attempt % 3 == 0 {
            // Every third kill moves the run on, so far that the kills left (a third of them
            // such) spread over the steps left.
            let left = N_STEPS - next_step;
            let moves_left = ((n_kills - kills.len()) / 3).max(1) as u64;
            let stride = (left / moves_left).max(4) as i64;
            if left > 4 {
                Kill::At(
                    "step.done",
                    rng.range(3, (left as i64 - 1).min(stride)) as u64,
                )
            } else {
                Kill::At("checkpoint.recorded", 1)
            }
        } else {
            random_kill(attempt - 1 - attempt / 3, &mut rng)
        };
        let kill = &kill;
        let (status, stderr) = train(&crash_dir, &store, attempt > 0, Some(kill));
        if status.success() {
            finished = true;
            break;
        }
        assert!(
            killed(status),
            "attempt {attempt} ({kill:?}) failed: {stderr}"
        );
        let opened = Store::open(&store).unwrap();
        opened.check_integrity().unwrap();
        let view = opened.view();
        let run = view.find_run("1").unwrap();
        assert_ne!(run.status, RunStatus::Finished);
        let checkpoint = view.checkpoints(RUN).unwrap().last().cloned();
        let checkpoint = checkpoint.unwrap_or_else(|| panic!("no checkpoint after {kill:?}"));
        let reached = view
            .metrics(RUN)
            .unwrap()
            .iter()
            .map(|row| row.step)
            .max()
            .unwrap_or(0);
        for row in view.metrics(RUN).unwrap() {
            if row.step <= checkpoint.step {
                committed.insert((row.step, row.key, row.wall_time.to_bits()));
            }
        }
        kills.push((kill.clone(), reached.max(checkpoint.step)));
        next_step = checkpoint.step + 1;
    }
    if !finished {
        let (status, stderr) = train(&crash_dir, &store, true, None);
        assert!(status.success(), "{stderr}");
    }

    // The kills covered every kind of moment, in both phases.
    eprintln!("{} kills (kill, step reached): {kills:?}", kills.len());
    assert!(
        kills.len() >= n_kills.min(10),
        "only {} kills: {kills:?}",
        kills.len()
    );
    let has = |f: &dyn Fn(&Kill) -> bool| kills.iter().any(|(k, _)| f(k));
    assert!(
        has(&|k| matches!(k, Kill::At("store.batch", _))),
        "{kills:?}"
    );
    assert!(
        has(&|k| matches!(k, Kill::At(p, _) if p.starts_with("checkpoint."))),
        "{kills:?}"
    );
    assert!(
        has(&|k| matches!(k, Kill::At("step.done", _) | Kill::After(_))),
        "{kills:?}"
    );
    assert!(
        kills.iter().any(|(_, step)| *step < N_SFT_STEPS),
        "{kills:?}"
    );
    assert!(
        kills.iter().any(|(_, step)| *step > N_SFT_STEPS),
        "{kills:?}"
    );

    // The same rows as the uninterrupted run, none twice, a sound file, and every committed
    // row up to a checkpoint still the one first written.
    let opened = Store::open(&store).unwrap();
    opened.check_integrity().unwrap();
    assert_eq!(
        opened.view().find_run("1").unwrap().status,
        RunStatus::Finished
    );
    let got = rows(&store);
    assert_eq!(got.metrics, expected.metrics);
    assert_eq!(got.evals, expected.evals);
    assert_eq!(got.trajectories, expected.trajectories);
    assert_eq!(got.fidelity, expected.fidelity);
    let now: BTreeSet<(u64, String, u64)> = opened
        .view()
        .metrics(RUN)
        .unwrap()
        .into_iter()
        .map(|row| (row.step, row.key, row.wall_time.to_bits()))
        .collect();
    for row in &committed {
        assert!(now.contains(row), "lost the committed row {row:?}");
    }

    // The checkpoints the store names exist; no temporary or unrecorded folder is left.
    let checkpoints = opened.view().checkpoints(RUN).unwrap();
    assert_eq!(
        checkpoints.iter().map(|c| c.step).collect::<Vec<_>>(),
        [32, 35]
    );
    let recorded: BTreeSet<PathBuf> = checkpoints
        .iter()
        .map(|c| PathBuf::from(&c.path).file_name().unwrap().into())
        .collect();
    let run_dir = crash_dir.join("checkpoints/run-1");
    for entry in std::fs::read_dir(&run_dir).unwrap() {
        let name = PathBuf::from(entry.unwrap().file_name());
        assert!(
            name == Path::new("reference")
                || name == Path::new("tokenizer.json")
                || recorded.contains(&name),
            "left behind: {}",
            name.display()
        );
    }
    let left: Vec<String> = std::fs::read_dir(&crash_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp") || name.ends_with(".part"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");

    // Every check above held: the report `cargo xtask chaos` reads.
    if let Some(path) = std::env::var_os("ENVACE_CHAOS_REPORT") {
        let kinds = |f: &dyn Fn(&Kill) -> bool| kills.iter().filter(|(k, _)| f(k)).count();
        let report = serde_json::json!({
            "seed": format!("{seed:#x}"),
            "kills_asked": n_kills,
            "kills": kills.len(),
            "kills_in_sft": kills.iter().filter(|(_, step)| *step < N_SFT_STEPS).count(),
            "kills_in_rl": kills.iter().filter(|(_, step)| *step >= N_SFT_STEPS).count(),
            "by_point": {
                "store.batch": kinds(&|k| matches!(k, Kill::At("store.batch", _))),
                "checkpoint.files": kinds(&|k| matches!(k, Kill::At("checkpoint.files", _))),
                "checkpoint.renamed": kinds(&|k| matches!(k, Kill::At("checkpoint.renamed", _))),
                "checkpoint.recorded": kinds(&|k| matches!(k, Kill::At("checkpoint.recorded", _))),
                "step.done": kinds(&|k| matches!(k, Kill::At("step.done", _))),
                "random moment": kinds(&|k| matches!(k, Kill::After(_))),
            },
            "each": kills
                .iter()
                .map(|(kill, step)| format!("{kill:?} (step {step})"))
                .collect::<Vec<_>>(),
            "rows_compared": {
                "metrics": got.metrics.len(),
                "evals": got.evals.len(),
                "trajectories": got.trajectories.len(),
                "fidelity": got.fidelity.len(),
            },
            "committed_rows_kept": committed.len(),
            "integrity_check": "ok",
            "final_equals_uninterrupted": true,
            "temporary_files_left": 0,
        });
        std::fs::write(path, format!("{report:#}\n")).unwrap();
    }
}

/// A small filesystem mounted over a folder for the length of a test (needs root and a kernel
/// that lets this process mount; where it cannot, the test injects the fault instead).
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .ok()?;
        status.success().then(|| SmallDisk(dir.to_owned()))
    }

    fn grow(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_during_a_checkpoint_stops_the_run_and_keeps_the_previous_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    // Checkpoints go to `<store dir>/checkpoints`: on a 768 KiB filesystem the run's tokenizer
    // and its first checkpoint (about 470 KB) fit, the second does not.
    let disk = SmallDisk::mount(&dir.path().join("checkpoints"), "768k");
    let fault = "checkpoint.write:2".to_owned();
    let envs: Vec<(&str, &str)> = match &disk {
        Some(_) => Vec::new(),
        None => {
            eprintln!(
                "this process cannot mount a small filesystem: the full disk is injected \
                 ({FAIL_AT_VAR}={fault})"
            );
            vec![(FAIL_AT_VAR, fault.as_str())]
        }
    };
    let (status, stderr) = train_with(dir.path(), &store, false, None, &envs);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: the checkpoint of step 5 could not be written: "),
        "{stderr}"
    );
    assert!(
        stderr.contains("No space left on device") || stderr.contains("no space left on device"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "the checkpoint of step 2 is intact: make room, then resume the run (`envace train CONFIG --resume 1`)"
        ),
        "{stderr}"
    );
    // The store is sound, names only the checkpoint of step 2, whose files are whole; no half
    // checkpoint is left.
    let opened = Store::open(&store).unwrap();
    opened.check_integrity().unwrap();
    let view = opened.view();
    assert_eq!(view.find_run("1").unwrap().status, RunStatus::Failed);
    let checkpoints = view.checkpoints(RUN).unwrap();
    assert_eq!(checkpoints.iter().map(|c| c.step).collect::<Vec<_>>(), [2]);
    let kept = PathBuf::from(&checkpoints[0].path);
    let on_disk: u64 = walk(&kept)
        .iter()
        .map(|f| f.metadata().unwrap().len())
        .sum();
    assert_eq!(
        on_disk, checkpoints[0].bytes,
        "the checkpoint of step 2 is whole"
    );
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(kept.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["next_step"], 3, "{state}");
    let names: Vec<String> = std::fs::read_dir(kept.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    drop(opened);

    // With room again the run resumes from step 2 and finishes.
    if let Some(disk) = &disk {
        disk.grow("8m");
    }
    let (status, stderr) = train(dir.path(), &store, true, None);
    assert!(status.success(), "{stderr}");
    let opened = Store::open(&store).unwrap();
    assert_eq!(
        opened.view().find_run("1").unwrap().status,
        RunStatus::Finished
    );
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn a_resume_that_fails_leaves_the_store_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    // Killed in SFT after the checkpoint at step 5 was recorded; rows of step 6 may follow it.
    let (status, _) = train(dir.path(), &store, false, Some(&Kill::At("step.done", 7)));
    assert!(killed(status));
    let checkpoint = {
        let opened = Store::open(&store).unwrap();
        let checkpoints = opened.view().checkpoints(RUN).unwrap();
        assert_eq!(checkpoints.last().unwrap().step, 5);
        PathBuf::from(&checkpoints.last().unwrap().path)
    };
    std::fs::remove_dir_all(&checkpoint).unwrap();
    let before = dump(&store);

    let (status, stderr) = train(dir.path(), &store, true, None);
    assert!(!status.success());
    assert!(
        stderr.contains(&checkpoint.join("state.json").display().to_string()),
        "the error names the missing file: {stderr}"
    );
    assert_eq!(dump(&store), before, "a failed resume changed the store");
    Store::open(&store).unwrap().check_integrity().unwrap();
}
