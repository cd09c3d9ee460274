//! The studio's evaluation job: `envace eval` run as a child process on a run's checkpoint or a
//! model file, its progress and output relayed to the window as [`EvalEvent`]s. A child process
//! keeps a long evaluation (or a crash in it) apart from the window; Stop kills it, and since
//! `envace eval` stores its scores only when every benchmark is done, a stopped evaluation
//! stores nothing. At most one evaluation runs at a time.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use specta::Type;
use tauri::AppHandle;
use tauri_specta::Event as _;

use crate::contract::StudioError;

/// What to evaluate, as the Benchmarks tab sends it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Type)]
pub struct EvalRequest {
    /// A run whose checkpoint to evaluate (its scores are stored with it)…
    pub run: Option<i32>,
    /// …at this step (its latest checkpoint when absent);
    pub step: Option<u32>,
    /// or a model file or folder, whose scores are stored as an evaluation run named
    /// `record_as`.
    pub model: Option<String>,
    pub record_as: Option<String>,
    /// `bfcl:simple_python`, `tau2:airline`, `vita:delivery`, …
    pub benches: Vec<String>,
    /// The folder holding the benchmarks' data.
    pub data: String,
    /// Only the first N tasks of each benchmark.
    pub limit: Option<u32>,
    /// τ²-bench and VitaBench: the user simulator's endpoint (`self`: the evaluated model).
    pub user_endpoint: Option<String>,
    /// τ²-bench NL assertions and VitaBench rubrics: the judge's endpoint (`self` allowed).
    pub judge_endpoint: Option<String>,
    /// `parallel:N` or `sequential:N`: test-time rehearsal before each agent turn.
    pub rehearsal: Option<String>,
    /// Conversations per task.
    pub trials: Option<u32>,
    /// τ²-bench: the task split (`base`, `train`, `test`; the CLI's default `base` when absent).
    pub split: Option<String>,
}

/// What the evaluation job tells the window, as the `eval-event` event.
#[derive(Debug, Clone, Serialize, Type, tauri_specta::Event)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EvalEvent {
    /// The child started, with its command line.
    Started { command: String },
    /// One benchmark's progress.
    Progress {
        bench: String,
        done: u32,
        total: u32,
    },
    /// A line of its output (scores, reasons, notes).
    Line { text: String },
    /// It ended: `ok` when it stored its scores; `stopped` when Stop ended it; the run its
    /// scores went to, when known.
    Finished {
        ok: bool,
        stopped: bool,
        message: String,
        run: Option<i32>,
    },
}

/// The evaluation job, if one runs.
#[derive(Debug, Default)]
pub struct Evaluation {
    child: Arc<Mutex<Option<Child>>>,
    stopping: Arc<AtomicBool>,
}

fn lock(child: &Mutex<Option<Child>>) -> MutexGuard<'_, Option<Child>> {
    child
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The `envace` command-line binary: `$ENVACE_BIN`, else beside the studio's own executable,
/// else on `PATH`.
pub fn envace_binary() -> Result<PathBuf, StudioError> {
    let name = format!("envace{}", std::env::consts::EXE_SUFFIX);
    if let Some(path) = std::env::var_os("ENVACE_BIN").map(PathBuf::from) {
        return Ok(path);
    }
    let beside = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(&name));
    if let Some(path) = beside.as_ref().filter(|p| p.is_file()) {
        return Ok(path.clone());
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(&name))
            .find(|p| p.is_file())
    });
    on_path.ok_or_else(|| {
        StudioError::new(
            "Cannot start the evaluation",
            format!(
                "the `envace` command-line program was not found beside the studio ({}) or on PATH; build it with `cargo build -p envace-cli` or set ENVACE_BIN",
                beside.map_or_else(|| "?".to_owned(), |p| p.display().to_string())
            ),
        )
    })
}

/// The `envace` arguments for `request` against the store at `store`.
pub fn eval_args(request: &EvalRequest, store: &Path) -> Result<Vec<String>, StudioError> {
    let refuse = |detail: &str| Err(StudioError::new("Cannot start the evaluation", detail));
    if request.benches.is_empty() {
        return refuse("tick at least one benchmark");
    }
    if request.data.trim().is_empty() {
        return refuse("give the folder holding the benchmarks' data");
    }
    let mut args: Vec<String> = vec!["--store".into(), store.display().to_string(), "eval".into()];
    match (&request.run, &request.model) {
        (Some(run), None) => {
            args.push("--run".into());
            args.push(match request.step {
                Some(step) => format!("{run}@{step}"),
                None => run.to_string(),
            });
        }
        (None, Some(model)) if !model.trim().is_empty() => {
            let name = request
                .record_as
                .clone()
                .filter(|n| !n.trim().is_empty())
                .unwrap_or_else(|| {
                    Path::new(model)
                        .file_stem()
                        .map_or_else(|| "model".to_owned(), |s| s.to_string_lossy().into_owned())
                });
            args.extend(["--model".into(), model.clone(), "--record-as".into(), name]);
        }
        _ => return refuse("choose either a run's checkpoint or a model file"),
    }
    args.extend([
        "--bench".into(),
        request.benches.join(","),
        "--data".into(),
        request.data.clone(),
        "--progress-json".into(),
    ]);
    let mut option = |flag: &str, value: Option<String>| {
        if let Some(value) = value.filter(|v| !v.trim().is_empty()) {
            args.push(flag.into());
            args.push(value);
        }
    };
    option("--limit", request.limit.map(|n| n.to_string()));
    option("--user-endpoint", request.user_endpoint.clone());
    option("--judge-endpoint", request.judge_endpoint.clone());
    option("--rehearsal", request.rehearsal.clone());
    option("--trials", request.trials.map(|n| n.to_string()));
    option("--split", request.split.clone());
    Ok(args)
}

/// The run a line of `envace eval`'s stderr names as the one its scores go to.
fn stored_run(line: &str) -> Option<i32> {
    let rest = line
        .strip_prefix("recording the scores as run ")
        .or_else(|| line.split(" with run ").nth(1))?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

impl Evaluation {
    /// Starts `envace eval` for `request`; its events go to `app`. Refused while one runs.
    pub fn start(
        &self,
        app: AppHandle,
        request: &EvalRequest,
        store: &Path,
    ) -> Result<(), StudioError> {
        let mut slot = lock(&self.child);
        if slot.is_some() {
            return Err(StudioError::new(
                "Cannot start the evaluation",
                "an evaluation is running; stop it first",
            ));
        }
        let args = eval_args(request, store)?;
        let binary = envace_binary()?;
        let mut child = Command::new(&binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|err| {
                StudioError::new(
                    "Cannot start the evaluation",
                    format!("{}: {err}", binary.display()),
                )
            })?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        *slot = Some(child);
        drop(slot);
        self.stopping.store(false, Ordering::SeqCst);
        let _ = EvalEvent::Started {
            command: format!("envace {}", args.join(" ")),
        }
        .emit(&app);
        let out_app = app.clone();
        let out = std::thread::spawn(move || {
            if let Some(stdout) = stdout {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let _ = EvalEvent::Line { text: line }.emit(&out_app);
                }
            }
        });
        let child = Arc::clone(&self.child);
        let stopping = Arc::clone(&self.stopping);
        std::thread::spawn(move || {
            let mut tail: Vec<String> = Vec::new();
            let mut run = request_run(&args);
            if let Some(stderr) = stderr {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Ok(progress) = serde_json::from_str::<serde_json::Value>(&line)
                        && let Some(bench) = progress.get("bench").and_then(|b| b.as_str())
                    {
                        let count = |key: &str| {
                            progress
                                .get(key)
                                .and_then(serde_json::Value::as_u64)
                                .unwrap_or(0)
                        };
                        let _ = EvalEvent::Progress {
                            bench: bench.to_owned(),
                            done: u32::try_from(count("done")).unwrap_or(u32::MAX),
                            total: u32::try_from(count("total")).unwrap_or(u32::MAX),
                        }
                        .emit(&app);
                        continue;
                    }
                    run = stored_run(&line).or(run);
                    let _ = EvalEvent::Line { text: line.clone() }.emit(&app);
                    tail.push(line);
                    if tail.len() > 12 {
                        tail.remove(0);
                    }
                }
            }
            let _ = out.join();
            let status = lock(&child).take().map(|mut c| c.wait());
            let stopped = stopping.load(Ordering::SeqCst);
            let ok = !stopped && matches!(status, Some(Ok(s)) if s.success());
            let message = if stopped {
                "stopped; nothing was stored".to_owned()
            } else if ok {
                "done; the scores are stored".to_owned()
            } else {
                tail.join("\n")
            };
            let _ = EvalEvent::Finished {
                ok,
                stopped,
                message,
                run,
            }
            .emit(&app);
        });
        Ok(())
    }

    /// Stops the running evaluation; whether one ran.
    pub fn stop(&self) -> bool {
        let mut slot = lock(&self.child);
        match slot.as_mut() {
            Some(child) => {
                self.stopping.store(true, Ordering::SeqCst);
                let _ = child.kill();
                true
            }
            None => false,
        }
    }

    /// Whether an evaluation runs.
    pub fn running(&self) -> bool {
        lock(&self.child).is_some()
    }
}

/// The run named by `--run` in `args`, if any.
fn request_run(args: &[String]) -> Option<i32> {
    let at = args.iter().position(|a| a == "--run")?;
    let spec = args.get(at + 1)?;
    spec.split('@').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> EvalRequest {
        EvalRequest {
            run: Some(3),
            step: Some(8),
            model: None,
            record_as: None,
            benches: vec!["bfcl:simple_python".into(), "vita:delivery".into()],
            data: "/data".into(),
            limit: Some(5),
            user_endpoint: Some("self".into()),
            judge_endpoint: None,
            rehearsal: Some("parallel:2".into()),
            trials: None,
            split: None,
        }
    }

    #[test]
    fn the_command_line_follows_the_request() {
        let args = eval_args(&request(), Path::new("/runs.sqlite")).unwrap();
        assert_eq!(
            args.join(" "),
            "--store /runs.sqlite eval --run 3@8 --bench bfcl:simple_python,vita:delivery --data /data --progress-json --limit 5 --user-endpoint self --rehearsal parallel:2"
        );
        assert_eq!(request_run(&args), Some(3));
        let model = EvalRequest {
            run: None,
            model: Some("/m/SmolLM2.Q4_1.gguf".into()),
            ..request()
        };
        let args = eval_args(&model, Path::new("/runs.sqlite")).unwrap();
        assert!(
            args.join(" ")
                .contains("--model /m/SmolLM2.Q4_1.gguf --record-as SmolLM2.Q4_1")
        );
        let split = EvalRequest {
            benches: vec!["tau2:retail".into()],
            split: Some("test".into()),
            ..request()
        };
        let args = eval_args(&split, Path::new("/runs.sqlite")).unwrap();
        assert!(args.join(" ").ends_with("--split test"), "{args:?}");
        for bad in [
            EvalRequest {
                benches: vec![],
                ..request()
            },
            EvalRequest {
                data: " ".into(),
                ..request()
            },
            EvalRequest {
                model: Some("x".into()),
                ..request()
            },
            EvalRequest {
                run: None,
                ..request()
            },
        ] {
            assert!(eval_args(&bad, Path::new("/s")).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_stored_run_is_read_from_the_clis_notes() {
        assert_eq!(
            stored_run("recording the scores as run 12 (smollm2) in /x.sqlite"),
            Some(12)
        );
        assert_eq!(
            stored_run("stored the scores and 3 task records with run 7 at step 0 in /x"),
            Some(7)
        );
        assert_eq!(stored_run("loaded SmolLM2"), None);
    }
}
