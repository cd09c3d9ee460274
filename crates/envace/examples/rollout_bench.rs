//! Measures the rollout engine on an experiment config (the quickstart by default): episodes
//! per minute and generated tokens per second with tool calls answered by the real
//! environment and by the policy rehearsing, in one run, printed as one JSON object.
//!
//! Two actors are measured: the policy itself (a checkpoint with `--checkpoint DIR`, else the
//! freshly initialised model), and the oracle (scripted turns that always call tools, so that
//! rehearsal cost shows even when an untrained policy would not call any tool).
//!
//! `cargo run --release -p envace --example rollout_bench -- [--config FILE] [--checkpoint DIR]
//! [--episodes N]`

use std::sync::Arc;
use std::time::Instant;

use envace::config::{self, ExperimentConfig, TaskSplit};
use envace::model::{Policy, Sampling};
use envace::rehearse::ResponseCache;
use envace::rl::session::{Session, load_sources, task_pool};
use envace::rollout::{
    EpisodeRecord, EpisodeSpec, Generator, Label, OracleActor, PolicyGenerator, ResponseMode,
    RoleRouter, RolloutSettings, run_batch,
};
use envace::store::{RunWriter, Store};
use envace::tasks::{self, GenTask};
use serde_json::{Map, Value, json};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let config: ExperimentConfig = match value_of("--config") {
        Some(path) => config::parse_file(std::path::Path::new(&path))?,
        None => config::parse(config::preset("quickstart")?.toml, "quickstart")
            .map_err(|e| e.to_string())?,
    };
    let n_episodes: usize = value_of("--episodes").map_or(Ok(16), |n| n.parse())?;

    let dir = tempfile::tempdir()?;
    let store = Store::open(&dir.path().join("runs.sqlite"))?;
    let run = store.create_run("rollout-bench", "")?;
    let writer = RunWriter::new(store, run, 1024);
    let sources = load_sources(&config)?;
    let corpus_tasks = task_pool(&config, &sources, TaskSplit::Train, 200, config.run.seed)?;
    let mut session = Session::create(config.clone(), run, writer, &corpus_tasks, sources)?;
    if let Some(dir) = value_of("--checkpoint") {
        session.policy = Policy::load(
            std::path::Path::new(&dir),
            session.policy.device(),
            session.policy.dtype(),
        )?;
    }
    let tasks = task_pool(
        &config,
        &session.sources,
        TaskSplit::Train,
        n_episodes,
        config.run.seed + 9,
    )?;

    let mut figures = Map::new();
    figures.insert("config".to_owned(), json!(config.run.name));
    figures.insert("n_episodes".to_owned(), json!(tasks.len()));
    figures.insert(
        "threads".to_owned(),
        json!(std::thread::available_parallelism().map_or(1, |n| n.get())),
    );
    for (actor, mode) in [
        ("policy", ResponseMode::Real),
        ("policy", ResponseMode::Rehearse),
        ("oracle", ResponseMode::Real),
        ("oracle", ResponseMode::Rehearse),
    ] {
        let mut settings = RolloutSettings::from_config(&config);
        settings.mode = mode;
        let mut policy = PolicyGenerator {
            policy: session.policy.clone(),
            sampling: Sampling {
                temperature: config.rl.temperature,
                top_p: config.rl.top_p,
                top_k: 0,
                seed: 0,
            },
            max_batch: 64,
        };
        let mut oracle = OracleActor::new(&tasks);
        let mut rehearser = policy.clone();
        let mut router;
        let generator: &mut dyn Generator = if actor == "policy" {
            &mut policy
        } else {
            router = RoleRouter {
                act: &mut oracle,
                rehearse: &mut rehearser,
            };
            &mut router
        };
        let specs = specs(&tasks, &session)?;
        let mut cache = ResponseCache::new(8);
        let started = Instant::now();
        let episodes = run_batch(
            specs,
            &settings,
            &session.codec,
            generator,
            None,
            session.judge.as_ref(),
            &mut cache,
        )?;
        let secs = started.elapsed().as_secs_f64();
        figures.insert(format!("{actor}_{}", mode.name()), summary(&episodes, secs));
    }
    let ratio = |key: &str, field: &str| -> Option<f64> {
        let real = figures.get(&format!("{key}_real"))?.get(field)?.as_f64()?;
        let rehearse = figures
            .get(&format!("{key}_rehearse"))?
            .get(field)?
            .as_f64()?;
        Some(rehearse / real)
    };
    let ratios = json!({
        "policy_rehearse_vs_real_episodes_per_min": ratio("policy", "episodes_per_min"),
        "oracle_rehearse_vs_real_episodes_per_min": ratio("oracle", "episodes_per_min"),
    });
    println!(
        "{}",
        json!({"bench": "rollout", "figures": Value::Object(figures), "ratios": ratios})
    );
    Ok(())
}

fn specs(tasks: &[Arc<GenTask>], session: &Session) -> envace::Result<Vec<EpisodeSpec>> {
    tasks
        .iter()
        .map(|task| {
            Ok(EpisodeSpec {
                task: task.clone(),
                env: tasks::fresh_env(task.domain, &session.sources)?,
                group: task.id.clone(),
                memory: None,
            })
        })
        .collect()
}

fn summary(episodes: &[EpisodeRecord], secs: f64) -> Value {
    let generated: usize = episodes
        .iter()
        .flat_map(|e| e.samples.iter())
        .map(|s| s.count(Label::Act) + s.count(Label::Rehearse))
        .sum();
    let rehearsed: usize = episodes.iter().map(|e| e.samples.len() - 1).sum();
    let act_lengths: Vec<usize> = episodes.iter().map(|e| e.samples[0].tokens.len()).collect();
    let rehearse_lengths: Vec<usize> = episodes
        .iter()
        .flat_map(|e| e.samples[1..].iter().map(|s| s.tokens.len()))
        .collect();
    let mean = |v: &[usize]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<usize>() as f64 / v.len() as f64
        }
    };
    json!({
        "secs": secs,
        "episodes_per_min": episodes.len() as f64 * 60.0 / secs.max(1e-9),
        "generated_tokens_per_sec": generated as f64 / secs.max(1e-9),
        "generated_tokens": generated,
        "rehearsed_calls": rehearsed,
        "mean_turns": episodes.iter().map(|e| e.turns.len()).sum::<usize>() as f64 / episodes.len().max(1) as f64,
        "mean_act_sequence_tokens": mean(&act_lengths),
        "mean_rehearse_sequence_tokens": mean(&rehearse_lengths),
        "mean_reward": episodes.iter().filter_map(|e| e.reward).sum::<f64>() / episodes.len().max(1) as f64,
    })
}
