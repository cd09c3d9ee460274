//! The RL phase's settings and its departures from the paper, on the tiny test job: per-phase
//! optimizer settings reach the optimizer, a zero-variance group carries no gradient and is
//! counted, dynamic sampling refills to the batch size and stops when the pool runs dry or its
//! round cap is reached, an RL arm started from an SFT checkpoint holds that checkpoint's
//! weights, and offline few-shot examples never come from a live response.
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use envace::config::{
    self, ExperimentConfig, FewShotSource, InitConfig, KlType, LrSchedule, PolicyRole, TaskSplit,
    ToolResponseMode,
};
use envace::controller::{JobOutcome, JobSpec, NoHooks, train};
use envace::env::pyjson;
use envace::model::Policy;
use envace::rl::grpo::{items_of, micro_batch_loss, step_rollouts};
use envace::rl::pad_batch;
use envace::rl::session::{Session, load_sources, sft_task_pool, task_pool};
use envace::rollout::{GenerationRequest, Scripted};
use envace::store::{RunWriter, Store};
use envace::tasks::GenTask;

const TINY_JOB: &str = include_str!("../fixtures/train/tiny_job.toml");

pub(crate) fn tiny() -> ExperimentConfig {
    config::parse(TINY_JOB, "TINY_JOB").unwrap()
}

/// Runs a whole job into a fresh run of `store_path`; returns its metrics by (step, key).
pub(crate) fn run_job(
    config: &ExperimentConfig,
    store_path: &Path,
) -> BTreeMap<(u64, String), f64> {
    let store = Store::open(store_path).unwrap();
    let run = store.create_run(&config.run.name, TINY_JOB).unwrap();
    drop(store);
    let spec = JobSpec {
        config: config.clone(),
        config_toml: TINY_JOB.to_owned(),
        store_path: store_path.to_path_buf(),
        resume: None,
    };
    assert_eq!(
        train(&spec, run, &mut NoHooks).unwrap(),
        JobOutcome::Finished
    );
    super::train::assert_catalogued(store_path);
    let store = Store::open(store_path).unwrap();
    store
        .view()
        .metrics(run)
        .unwrap()
        .into_iter()
        .map(|row| ((row.step, row.key), row.value))
        .collect()
}

/// A new session of `config` (no SFT run) in a new run of a store in `dir`.
fn session(config: &ExperimentConfig, dir: &Path) -> Session {
    let store = Store::open(&dir.join("runs.sqlite")).unwrap();
    let run = store.create_run(&config.run.name, TINY_JOB).unwrap();
    let writer = RunWriter::new(store, run, 64);
    let sources = load_sources(config).unwrap();
    let train = task_pool(config, &sources, TaskSplit::Train, 12, 7).unwrap();
    Session::create(config.clone(), run, writer, &train, sources).unwrap()
}

/// The oracle's assistant turn `turn_idx` of the task whose request the prompt holds.
fn oracle_turn(pool: &[Arc<GenTask>], prompt: &str, turn_idx: usize) -> Option<String> {
    let task = pool.iter().find(|t| prompt.contains(&t.request))?;
    task.oracle
        .iter()
        .filter(|m| m.role == envace::chat::Role::Assistant)
        .nth(turn_idx)
        .map(|m| m.content.clone())
}

#[test]
fn per_phase_optimizer_settings_reach_the_optimizer() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = tiny();
    config.sft.lr = 1e-3;
    config.sft.lr_schedule = LrSchedule::Constant;
    config.sft.warmup_steps = Some(2);
    config.rl.lr = 2e-4;
    config.rl.lr_schedule = LrSchedule::Constant;
    config.rl.warmup_steps = 2;
    let fresh = run_job(&config, &dir.path().join("fresh/runs.sqlite"));
    let lr = |m: &BTreeMap<(u64, String), f64>, step: u64, key: &str| m[&(step, key.to_owned())];
    // SFT: 2 warm-up steps to 1e-3; RL (steps 3 and 4): 2 warm-up steps to 2e-4.
    assert_eq!(lr(&fresh, 0, "sft/lr"), 5e-4);
    assert_eq!(lr(&fresh, 1, "sft/lr"), 1e-3);
    assert_eq!(lr(&fresh, 2, "sft/lr"), 1e-3);
    assert_eq!(lr(&fresh, 3, "rl/lr"), 1e-4);
    assert_eq!(lr(&fresh, 4, "rl/lr"), 2e-4);
    // A fresh RL optimizer counts its own updates; a carried one continues SFT's three.
    assert_eq!(lr(&fresh, 3, "rl/optimizer_updates"), 1.0);
    assert_eq!(lr(&fresh, 4, "rl/optimizer_updates"), 2.0);
    config.rl.carry_optimizer = true;
    let carried = run_job(&config, &dir.path().join("carried/runs.sqlite"));
    assert_eq!(lr(&carried, 3, "rl/optimizer_updates"), 4.0);
    assert_eq!(lr(&carried, 4, "rl/optimizer_updates"), 5.0);
    // The SFT steps themselves are the same either way.
    assert_eq!(lr(&carried, 2, "sft/loss"), lr(&fresh, 2, "sft/loss"));
}

/// A real-environment RL session on a pool of 10 tasks, where the scripted policy solves a task
/// in its even episodes only when the task is in `solvable`, and answers nothing otherwise;
/// dynamic sampling runs at most `max_rounds` rounds.
fn dynamic_sampling(
    solvable: &[usize],
    max_rounds: u32,
) -> (envace::rl::grpo::StepRollouts, Vec<Arc<GenTask>>) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = tiny();
    config.env.tool_response_mode = ToolResponseMode::Real;
    // Room for whole oracle turns.
    config.rl.max_response_tokens = 200;
    config.rl.batch_size = 2;
    config.rl.group_size = 2;
    config.rl.dynamic_sampling = true;
    config.rl.max_sampling_rounds = max_rounds;
    let mut session = session(&config, dir.path());
    let pool = task_pool(&config, &session.sources, TaskSplit::Train, 10, 3).unwrap();
    let solvable: Vec<String> = solvable.iter().map(|&i| pool[i].id.clone()).collect();
    let script_pool = pool.clone();
    let mut policy = Scripted::new(move |request: &GenerationRequest, prompt: &str| {
        let task = script_pool
            .iter()
            .find(|t| prompt.contains(&t.request))
            .unwrap();
        if solvable.contains(&task.id) && request.episode_idx.is_multiple_of(2) {
            oracle_turn(&script_pool, prompt, request.turn_idx).unwrap_or_default()
        } else {
            "I cannot help with that.".to_owned()
        }
    });
    let rollouts = step_rollouts(&mut session, &pool, 0, 0, &mut policy).unwrap();
    (rollouts, pool)
}

#[test]
fn dynamic_sampling_refills_to_the_batch_size_and_stops_when_the_pool_runs_dry() {
    let (rollouts, pool) = dynamic_sampling(&[3, 7], 16);
    // Tasks 0–7 were tried two at a time; only 3 and 7 carry a signal, and they fill the batch.
    assert_eq!(rollouts.n_groups, 8);
    assert_eq!(rollouts.n_signal_groups, 2);
    // Rounds: 0 and 1, 2 and 3 (3 kept), then one prompt at a time: 4, 5, 6, 7 (7 kept).
    assert_eq!(rollouts.n_rounds, 6);
    let dropped: BTreeSet<&str> = rollouts.dropped_groups.iter().map(String::as_str).collect();
    let expected: BTreeSet<&str> = [0, 1, 2, 4, 5, 6]
        .iter()
        .map(|&i| pool[i].id.as_str())
        .collect();
    assert_eq!(dropped, expected);
    // Episodes are numbered across rounds.
    let idx: Vec<usize> = rollouts.episodes.iter().map(|e| e.episode_idx).collect();
    assert_eq!(idx, (0..16).collect::<Vec<_>>());

    // With one solvable task, every prompt of the pool is tried once, then the step goes on.
    let (rollouts, _) = dynamic_sampling(&[3], 16);
    assert_eq!(rollouts.n_groups, 10);
    assert_eq!(rollouts.n_signal_groups, 1);
    assert_eq!(rollouts.dropped_groups.len(), 9);

    // A cap on the rounds ends the step with the groups found so far: 0 and 1, 2 and 3
    // (3 kept), then 4 — three rounds, one group kept, short of the batch.
    let (rollouts, pool) = dynamic_sampling(&[3, 7], 3);
    assert_eq!(rollouts.n_rounds, 3);
    assert_eq!(rollouts.n_groups, 5);
    assert_eq!(rollouts.n_signal_groups, 1);
    let dropped: BTreeSet<&str> = rollouts.dropped_groups.iter().map(String::as_str).collect();
    let expected: BTreeSet<&str> = [0, 1, 2, 4].iter().map(|&i| pool[i].id.as_str()).collect();
    assert_eq!(dropped, expected);
}

#[test]
fn a_zero_variance_group_contributes_no_gradient() {
    let (rollouts, _) = dynamic_sampling(&[3, 7], 16);
    let mut rl = tiny().rl;
    let dropped = &rollouts.dropped_groups[0];
    let group: Vec<_> = rollouts
        .episodes
        .iter()
        .filter(|e| &e.group == dropped)
        .cloned()
        .collect();
    assert_eq!(group.len(), 2);
    let items = items_of(&group, &rl);
    assert!(items.iter().all(|i| i.item.advantage == 0.0));
    // Without the KL anchor the loss of its samples has a zero gradient everywhere; with it,
    // dynamic sampling keeps them out of the step altogether (they are dropped, and counted).
    rl.kl_type = KlType::None;
    rl.kl_coef = 0.0;
    let dir = tempfile::tempdir().unwrap();
    let session = session(&tiny(), dir.path());
    let refs: Vec<_> = items.iter().map(|i| &i.item).collect();
    let batch = pad_batch(&refs, 4096, &PolicyRole::BOTH, session.policy.device()).unwrap();
    assert!(batch.n_trained > 0);
    let (loss, _) = micro_batch_loss(
        &session.policy,
        &session.policy,
        &batch,
        &rl,
        batch.n_trained,
    )
    .unwrap();
    let grads = loss.backward().unwrap();
    for (name, var) in session.policy.vars() {
        if let Some(grad) = grads.get(var.as_tensor()) {
            assert_eq!(super::train::max_abs(grad), 0.0, "{name}");
        }
    }
}

#[test]
fn an_rl_arm_started_from_a_checkpoint_holds_its_weights_at_step_0() {
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("runs.sqlite");
    let mut sft = tiny();
    sft.rl.n_steps = 0;
    run_job(&sft, &store_path);
    let store = Store::open(&store_path).unwrap();
    let checkpoint = store.view().checkpoints(envace::store::RunId(1)).unwrap();
    let checkpoint = checkpoint.last().unwrap().path.clone();

    let mut arm = tiny();
    arm.sft.enabled = false;
    arm.init = Some(InitConfig {
        run: "tiny-job".to_owned(),
        step: None,
        store: None,
    });
    let session = session(&arm, dir.path());
    let saved = Policy::load(
        &Path::new(&checkpoint).join("model"),
        &candle_core::Device::Cpu,
        candle_core::DType::F32,
    )
    .unwrap();
    assert_eq!(session.policy.vars().len(), saved.vars().len());
    for (name, var) in session.policy.vars() {
        let a = var
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let b = saved.vars()[name]
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(a, b, "{name}");
    }
    assert!(
        !session.cache.is_empty(),
        "the SFT corpus's few-shot examples come along"
    );
    assert_eq!(session.next_step, 0);

    // A step the run has no checkpoint of is refused, naming the steps it has.
    arm.init = Some(InitConfig {
        run: "1".to_owned(),
        step: Some(5),
        store: None,
    });
    let store = Store::open(&store_path).unwrap();
    let run = store.create_run("bad-init", TINY_JOB).unwrap();
    let sources = load_sources(&arm).unwrap();
    let err = Session::create(arm, run, RunWriter::new(store, run, 8), &[], sources).unwrap_err();
    assert_eq!(
        err.to_string(),
        "[init].step: run 1 (tiny-job) has no checkpoint at step 5 (it has: 1, 2)"
    );
}

/// The rehearse prompts of two rehearsal-mode steps over the same prompts (scripted acting by
/// the oracle, rehearsing a constant answer), with fidelity replays on the real environment,
/// and the real responses those replays got.
fn rehearse_prompts(source: FewShotSource) -> (Vec<String>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = tiny();
    config.env.few_shot_source = source;
    config.env.n_few_shot = 2;
    // Room for whole rehearse prompts (few-shot section included) and whole oracle turns.
    config.rl.max_prompt_tokens = 3800;
    config.rl.max_response_tokens = 200;
    let mut session = session(&config, dir.path());
    assert!(
        session.cache.is_empty(),
        "no SFT: the offline cache is empty"
    );
    let pool = task_pool(&config, &session.sources, TaskSplit::Train, 8, 5).unwrap();
    let mut prompts = Vec::new();
    let mut real = Vec::new();
    for step in 0..2 {
        let script_pool = pool.clone();
        let seen = &mut prompts;
        let mut policy =
            Scripted::new(
                move |request: &GenerationRequest, prompt: &str| match request.role {
                    PolicyRole::Act => {
                        oracle_turn(&script_pool, prompt, request.turn_idx).unwrap_or_default()
                    }
                    PolicyRole::Rehearse => {
                        seen.push(prompt.to_owned());
                        "<execution_result>\n{\"result\": \"rehearsed\"}\n</execution_result>"
                            .to_owned()
                    }
                },
            );
        let rollouts = step_rollouts(&mut session, &pool, step, 0, &mut policy).unwrap();
        for call in rollouts
            .episodes
            .iter()
            .flat_map(|e| &e.turns)
            .flat_map(|t| &t.calls)
        {
            if let Some(response) = &call.real {
                real.push(pyjson::dumps(response, false));
            }
        }
    }
    (prompts, real)
}

#[test]
fn offline_few_shot_examples_never_come_from_a_live_response() {
    let (prompts, real) = rehearse_prompts(FewShotSource::Offline);
    assert!(!prompts.is_empty());
    assert!(
        !real.is_empty(),
        "the real environment answered the fidelity replays"
    );
    for prompt in &prompts {
        for response in &real {
            assert!(
                !prompt.contains(response.as_str()),
                "{response} leaked into {prompt}"
            );
        }
    }
    // The check can fail: with live few-shot examples the second step's prompts show them.
    let (prompts, real) = rehearse_prompts(FewShotSource::Live);
    assert!(
        prompts
            .iter()
            .any(|p| real.iter().any(|r| p.contains(r.as_str()))),
        "live responses reach the rehearse prompts"
    );
}

/// `[sft].families` narrows the SFT corpus only: the RL pool and the held-out tasks keep
/// `[env].families` (families left to RL have no demonstration); an unknown name is refused,
/// naming the field.
#[test]
fn sft_families_narrow_the_sft_corpus_and_nothing_else() {
    let mut config = tiny();
    config.env.families = vec!["fn_arithmetic".to_owned(), "fn_multiple".to_owned()];
    config.sft.families = vec!["fn_arithmetic".to_owned()];
    let sources = load_sources(&config).unwrap();
    let families = |pool: &[Arc<GenTask>]| -> BTreeSet<&'static str> {
        pool.iter().map(|task| task.family).collect()
    };
    let sft = sft_task_pool(&config, &sources, 40, 5).unwrap();
    assert_eq!(sft.len(), 40);
    assert_eq!(families(&sft), BTreeSet::from(["fn_arithmetic"]));
    assert!(sft.iter().all(|task| task.split == TaskSplit::Train));
    let rl = task_pool(&config, &sources, TaskSplit::Train, 40, 6).unwrap();
    assert_eq!(
        families(&rl),
        BTreeSet::from(["fn_arithmetic", "fn_multiple"])
    );
    let held_out = task_pool(&config, &sources, TaskSplit::Test, 40, 7).unwrap();
    assert_eq!(
        families(&held_out),
        BTreeSet::from(["fn_arithmetic", "fn_multiple"])
    );

    // Without `[sft].families` the SFT corpus draws `[env].families`.
    config.sft.families.clear();
    let both = sft_task_pool(&config, &sources, 40, 5).unwrap();
    assert_eq!(
        families(&both),
        BTreeSet::from(["fn_arithmetic", "fn_multiple"])
    );

    config.sft.families = vec!["fn_juggling".to_owned()];
    let err = sft_task_pool(&config, &sources, 40, 5)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("[sft].families: \"fn_juggling\" is no generated family of env.domains"),
        "{err}"
    );
}
