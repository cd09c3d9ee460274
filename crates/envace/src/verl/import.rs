//! `envace import verl`: a reference run's rollout dumps and console metrics into the store.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::SIMULATOR_AGENT;
use crate::error::{Error, Result};
use crate::store::{Batch, MetricRow, RunId, RunStatus, Store, TrajectoryRow, now_secs};

/// A line that was not imported, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportSkip {
    /// The file, relative to the imported folder.
    pub file: String,
    /// Its line number, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

impl std::fmt::Display for ImportSkip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.reason)
    }
}

/// What an import added.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportReport {
    /// The run the folder is stored as.
    pub run: RunId,
    /// Its name.
    pub name: String,
    /// Whether this import created it (a first import).
    pub created: bool,
    /// Trajectories added.
    pub trajectories: usize,
    /// Metric rows added (recomputed per-step rewards included).
    pub metrics: usize,
    /// Lines skipped: malformed, or a last line not yet complete (read again next time).
    pub skipped: Vec<ImportSkip>,
}

/// The complete lines of `text` (each without its line end) and the unfinished last one.
fn split_lines(text: &str) -> (Vec<&str>, Option<&str>) {
    let mut lines: Vec<&str> = text.split('\n').collect();
    let last = lines.pop().filter(|l| !l.is_empty());
    (lines, last)
}

fn read(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|err| Error::io(path, err))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `TOOL_RETURN_MODE`'s default in the folder's `run.sh` (`agent` when absent).
fn tool_mode(dir: &Path) -> String {
    let Ok(script) = std::fs::read_to_string(dir.join("run.sh")) else {
        return "agent".to_owned();
    };
    script
        .lines()
        .find_map(|line| line.strip_prefix("TOOL_RETURN_MODE=${TOOL_RETURN_MODE:-"))
        .map(|rest| rest.trim_end_matches('}').trim_matches('"').to_owned())
        .filter(|mode| !mode.is_empty())
        .unwrap_or_else(|| "agent".to_owned())
}

/// The run's name and config text: the folder's `envace.toml` when there is one.
fn identity(dir: &Path) -> (String, String) {
    let folder = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "verl-run".to_owned());
    let fallback: String = folder
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    match std::fs::read_to_string(dir.join("envace.toml")) {
        Ok(text) => {
            let name = toml::from_str::<toml::Table>(&text)
                .ok()
                .and_then(|t| t.get("run")?.get("name")?.as_str().map(str::to_owned))
                .unwrap_or(fallback);
            (name, text)
        }
        Err(_) => {
            let text = format!(
                "# Imported from a verl run folder with no envace.toml: {}\n",
                dir.display()
            );
            (fallback, text)
        }
    }
}

/// Which of our roles a dump line is: the `agent_id`/`wg_id` field when the line carries one,
/// else the rehearse role when its output holds an `<execution_result>` block.
fn role_of(entry: &Value) -> &'static str {
    for key in ["agent_id", "wg_id"] {
        if let Some(agent) = entry.get(key).and_then(Value::as_str) {
            return if agent == SIMULATOR_AGENT || agent.contains("Simulator") {
                "rehearse"
            } else {
                "act"
            };
        }
    }
    let output = entry.get("output").and_then(Value::as_str).unwrap_or("");
    if output.contains("<execution_result>") {
        "rehearse"
    } else {
        "act"
    }
}

fn short_hash(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One dump line as a trajectory, in the store's episode-record form.
fn trajectory(entry: &Value, step: u64, idx: usize, file: &str, mode: &str) -> TrajectoryRow {
    let input = entry.get("input").and_then(Value::as_str).unwrap_or("");
    let output = entry.get("output").and_then(Value::as_str).unwrap_or("");
    let score = entry.get("score").and_then(Value::as_f64);
    let role = role_of(entry);
    let task_id = format!("verl-{}", short_hash(input));
    let episode_mode = if role == "rehearse" || mode == "agent" {
        "rehearse"
    } else if mode == "httpx" {
        "external"
    } else {
        "real"
    };
    let extra: serde_json::Map<String, Value> = entry
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "input" | "output" | "score" | "step"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mask_reason = score
        .is_none()
        .then(|| "the dump line has no numeric score".to_owned());
    let data = json!({
        "episode_idx": idx,
        "task_id": task_id,
        "group": format!("{step}/{task_id}"),
        "mode": episode_mode,
        "messages": [
            {"role": "user", "content": input},
            {"role": "assistant", "content": output},
        ],
        "turns": [{"turn_idx": 0, "text": output, "finished": true, "calls": []}],
        "samples": [],
        "end": {"kind": "final_answer"},
        "reward": score,
        "mask_reason": mask_reason,
        "judge": Value::Object(extra),
        "imported": {"from": "verl", "role": role, "file": file, "line": idx + 1},
    });
    TrajectoryRow {
        step,
        episode_idx: idx as u64,
        task_id,
        reward: score,
        masked: mask_reason.is_some(),
        mask_reason,
        data,
    }
}

/// The per-step reward metrics of one dump's valid lines `(role, score)`.
fn reward_metrics(step: u64, samples: &[(&'static str, f64)], wall_time: f64) -> Vec<MetricRow> {
    let mut out = Vec::new();
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    let mut push = |key: &str, value: f64| {
        out.push(MetricRow {
            step,
            key: key.to_owned(),
            value,
            wall_time,
        })
    };
    let of = |role: &str| -> Vec<f64> {
        samples
            .iter()
            .filter(|(r, _)| *r == role)
            .map(|(_, s)| *s)
            .collect()
    };
    let act = of("act");
    let rehearse = of("rehearse");
    for (role, scores) in [("act", &act), ("rehearse", &rehearse)] {
        if !scores.is_empty() {
            push(&format!("{role}/reward"), mean(scores));
            push(&format!("{role}/n_samples"), scores.len() as f64);
        }
    }
    let episodes = if act.is_empty() { &rehearse } else { &act };
    if !episodes.is_empty() {
        push("rl/reward", mean(episodes));
        let successes = episodes.iter().filter(|s| **s >= 1.0 - 1e-9).count();
        push("rl/success", successes as f64 / episodes.len() as f64);
    }
    out
}

/// The keys [`reward_metrics`] may write.
const REWARD_KEYS: [&str; 6] = [
    "act/reward",
    "act/n_samples",
    "rehearse/reward",
    "rehearse/n_samples",
    "rl/reward",
    "rl/success",
];

/// One step's `(key, value)` pairs.
type StepValues = (u64, Vec<(String, f64)>);

/// A console line of verl's logger, `step:N - key:value - …`, as `(step, [(key, value)])`.
fn console_metrics(line: &str) -> Option<std::result::Result<StepValues, String>> {
    let rest = line.trim().strip_prefix("step:")?;
    let mut parts = rest.split(" - ");
    let step = match parts.next().map(str::trim).map(str::parse::<u64>) {
        Some(Ok(step)) => step,
        _ => return Some(Err("a `step:` line without a step number".to_owned())),
    };
    let mut values = Vec::new();
    for part in parts {
        let Some((key, value)) = part.rsplit_once(':') else {
            return Some(Err(format!("{part:?} is not key:value")));
        };
        match value.trim().parse::<f64>() {
            Ok(value) => values.push((key.trim().to_owned(), value)),
            Err(_) => return Some(Err(format!("{key}: {value:?} is not a number"))),
        }
    }
    Some(Ok((step, values)))
}

/// The dump files of `dir`, by step.
fn dump_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let dumps = dir.join("rollout_dumps");
    if !dumps.is_dir() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dumps).map_err(|err| Error::io(&dumps, err))? {
        let path = entry.map_err(|err| Error::io(&dumps, err))?.path();
        if path.extension().is_some_and(|e| e == "jsonl")
            && let Some(step) = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.parse::<u64>().ok())
        {
            out.push((step, path));
        }
    }
    out.sort();
    Ok(out)
}

/// Reads the verl run folder `dir` (as `envace export verl` laid it out: `rollout_dumps/`,
/// `logs/console.log`, `envace.toml`, `run.sh`) into `store`, adding only what an earlier
/// import of the same folder did not.
pub fn import(store: &mut Store, dir: &Path) -> Result<ImportReport> {
    if !dir.is_dir() {
        return Err(Error::Data {
            source_name: dir.display().to_string(),
            message: "not a folder; expected a verl run folder (rollout_dumps/, logs/console.log)"
                .to_owned(),
        });
    }
    let dir = std::fs::canonicalize(dir).map_err(|err| Error::io(dir, err))?;
    let console = dir.join("logs").join("console.log");
    let dumps = dump_files(&dir)?;
    if dumps.is_empty() && !console.is_file() {
        return Err(Error::Data {
            source_name: dir.display().to_string(),
            message: "holds neither rollout_dumps/*.jsonl nor logs/console.log: nothing to import"
                .to_owned(),
        });
    }
    let source = dir.display().to_string();
    let (name, config_toml) = identity(&dir);
    let (run, created) = match store.imported_run(&source)? {
        Some(run) => (run, false),
        None => (
            store.create_imported_run(&name, &config_toml, &source)?,
            true,
        ),
    };
    let progress = store.import_progress(run)?;
    let mode = tool_mode(&dir);
    let wall_time = now_secs();
    let mut batch = Batch::new(run);
    let mut replace = Vec::new();
    let mut new_progress = Vec::new();
    let mut skipped = Vec::new();

    for (step, path) in &dumps {
        let file = format!(
            "rollout_dumps/{}",
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        );
        let text = read(path)?;
        let (lines, unfinished) = split_lines(&text);
        let done = progress.get(&file).copied().unwrap_or(0) as usize;
        if let Some(last) = unfinished {
            skipped.push(ImportSkip {
                file: file.clone(),
                line: lines.len() + 1,
                reason: format!(
                    "truncated: the line has no end yet ({} bytes); read again on the next import",
                    last.len()
                ),
            });
        }
        if lines.len() <= done {
            continue;
        }
        let mut samples = Vec::new();
        for (idx, line) in lines.iter().enumerate() {
            let parsed = serde_json::from_str::<Value>(line)
                .map_err(|err| err.to_string())
                .and_then(|v| {
                    if v.is_object() {
                        Ok(v)
                    } else {
                        Err("not a JSON object".to_owned())
                    }
                });
            match parsed {
                Ok(entry) => {
                    let line_step = entry.get("step").and_then(Value::as_u64).unwrap_or(*step);
                    if let Some(score) = entry.get("score").and_then(Value::as_f64) {
                        samples.push((role_of(&entry), score));
                    }
                    if idx >= done {
                        batch
                            .trajectories
                            .push(trajectory(&entry, line_step, idx, &file, &mode));
                    }
                }
                Err(reason) if idx >= done => skipped.push(ImportSkip {
                    file: file.clone(),
                    line: idx + 1,
                    reason: format!("malformed JSON line ({reason}); skipped"),
                }),
                Err(_) => {}
            }
        }
        for key in REWARD_KEYS {
            replace.push((*step, key.to_owned()));
        }
        batch
            .metrics
            .extend(reward_metrics(*step, &samples, wall_time));
        new_progress.push((file, lines.len() as u64));
    }

    if console.is_file() {
        let file = "logs/console.log".to_owned();
        let text = read(&console)?;
        let (lines, _unfinished) = split_lines(&text);
        let done = progress.get(&file).copied().unwrap_or(0) as usize;
        if lines.len() > done {
            for (idx, line) in lines.iter().enumerate().skip(done) {
                match console_metrics(line) {
                    None => {}
                    Some(Ok((step, values))) => {
                        batch
                            .metrics
                            .extend(values.into_iter().map(|(key, value)| MetricRow {
                                step,
                                key: format!("verl/{key}"),
                                value,
                                wall_time,
                            }));
                    }
                    Some(Err(reason)) => skipped.push(ImportSkip {
                        file: file.clone(),
                        line: idx + 1,
                        reason: format!("malformed metrics line ({reason}); skipped"),
                    }),
                }
            }
            new_progress.push((file, lines.len() as u64));
        }
    }

    let report = ImportReport {
        run,
        name,
        created,
        trajectories: batch.trajectories.len(),
        metrics: batch.metrics.len(),
        skipped,
    };
    if !new_progress.is_empty() {
        store.write_import(&batch, &replace, &new_progress)?;
    }
    if created {
        store.set_run_status(run, RunStatus::Finished)?;
    }
    Ok(report)
}
