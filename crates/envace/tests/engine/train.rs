//! Training tests: the KL of a model against itself is 0, an SFT step through the project's
//! batches and AdamW lowers the loss, the optimizer state round-trips, and the same seed gives
//! the same metrics for 5 steps of a whole job (SFT then GRPO) on CPU.
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{DType, Device};
use envace::config::{self, ExperimentConfig, PolicyRole, TinyModelConfig};
use envace::controller::{Event, Flow, Hooks, JobOutcome, JobSpec, train};
use envace::metrics;
use envace::model::{Policy, TransformerConfig};
use envace::rl::grpo::micro_batch_loss;
use envace::rl::{AdamW, TrainItem, pad_batch, token_logprobs};
use envace::rollout::Label;
use envace::store::{RunId, Store};

/// A small job: functions domain (no data files), 3 SFT steps and 2 GRPO steps.
pub const TINY_JOB: &str = include_str!("../fixtures/train/tiny_job.toml");

fn tiny_policy(seed: u64) -> Policy {
    random_policy(64, 32, seed)
}

/// A random two-layer policy over `vocab_size` tokens with `hidden_size` features.
pub fn random_policy(vocab_size: u32, hidden_size: u32, seed: u64) -> Policy {
    let tiny = TinyModelConfig {
        hidden_size,
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        intermediate_size: 2 * hidden_size,
        vocab_size,
        max_position_embeddings: 8192,
        ..TinyModelConfig::default()
    };
    Policy::init(
        TransformerConfig::from_tiny(&tiny).unwrap(),
        seed,
        &Device::Cpu,
        DType::F32,
    )
    .unwrap()
}

/// The largest absolute value of a tensor.
pub fn max_abs(t: &candle_core::Tensor) -> f32 {
    t.abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

fn items() -> Vec<TrainItem> {
    let mut out = Vec::new();
    for (row, role) in [
        (0u32, PolicyRole::Act),
        (1, PolicyRole::Rehearse),
        (2, PolicyRole::Act),
    ] {
        let tokens: Vec<u32> = (0..20).map(|i| (i * 7 + row * 3) % 64).collect();
        let labels: Vec<Label> = (0..20)
            .map(|i| match (i, role) {
                (0..=5, _) => Label::Prompt,
                (6..=9, PolicyRole::Act) => Label::Act,
                (10..=12, PolicyRole::Act) => Label::Injected,
                (_, PolicyRole::Act) => Label::Act,
                (_, PolicyRole::Rehearse) => Label::Rehearse,
            })
            .collect();
        out.push(TrainItem {
            role,
            tokens,
            labels,
            advantage: [0.5, -1.0, 0.25][row as usize],
            start: 0,
            pinned: 0,
        });
    }
    out
}

fn rl_config() -> config::RlConfig {
    config::parse(TINY_JOB, "TINY_JOB").unwrap().rl
}

#[test]
fn the_kl_of_a_model_against_itself_is_zero() {
    let policy = tiny_policy(1);
    let items = items();
    let refs: Vec<&TrainItem> = items.iter().collect();
    let batch = pad_batch(&refs, 64, &PolicyRole::BOTH, &Device::Cpu).unwrap();
    for kl_type in [config::KlType::K1, config::KlType::K2, config::KlType::K3] {
        let mut rl = rl_config();
        rl.kl_type = kl_type;
        rl.kl_coef = 1.0;
        let (_, sums) = micro_batch_loss(&policy, &policy, &batch, &rl, batch.n_trained).unwrap();
        assert!(sums.iter().all(|s| s.kl == 0.0), "{kl_type:?}: {sums:?}");
        assert!(sums.iter().all(|s| s.clipped == 0.0));
    }
    // Against a different model the k3 KL is positive.
    let other = tiny_policy(2);
    let mut rl = rl_config();
    rl.kl_coef = 1.0;
    let (_, sums) = micro_batch_loss(&policy, &other, &batch, &rl, batch.n_trained).unwrap();
    assert!(sums.iter().all(|s| s.kl > 0.0), "{sums:?}");
}

#[test]
fn trained_token_logprobs_and_gradients_match_the_full_head() {
    // The head runs over the trained tokens only; the log-probabilities, entropies and the
    // gradient of every parameter must be those of the full forward at the same positions.
    let policy = tiny_policy(4);
    let items = items();
    let refs: Vec<&TrainItem> = items.iter().collect();
    for roles in [
        PolicyRole::BOTH.to_vec(),
        vec![PolicyRole::Rehearse],
        vec![],
    ] {
        let batch = pad_batch(&refs, 64, &roles, &Device::Cpu).unwrap();
        let (logp, entropy) = token_logprobs(&policy, &batch, true).unwrap();
        let logits = policy
            .forward_train(&batch.input, Some(&batch.attention))
            .unwrap();
        let (full_logp, full_entropy) =
            envace::model::target_logprobs_and_entropy(&logits, &batch.targets).unwrap();
        let weight = batch
            .weight
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let flat = |t: &candle_core::Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let (got, want) = (flat(&logp), flat(&full_logp));
        let (got_h, want_h) = (flat(&entropy), flat(&full_entropy));
        assert_eq!(got.len(), weight.len());
        for i in 0..weight.len() {
            if weight[i] > 0.0 {
                assert!((got[i] - want[i]).abs() < 1e-5, "{roles:?} logp at {i}");
                assert!(
                    (got_h[i] - want_h[i]).abs() < 1e-5,
                    "{roles:?} entropy at {i}"
                );
                assert!(want[i] < 0.0 && want_h[i] > 0.0);
            } else {
                assert_eq!((got[i], got_h[i]), (0.0, 0.0), "{roles:?}: untrained {i}");
            }
        }
        if batch.n_trained == 0 {
            continue;
        }
        let loss = |logp: &candle_core::Tensor, entropy: &candle_core::Tensor| {
            ((logp + (entropy * 0.1).unwrap()).unwrap() * &batch.weight)
                .unwrap()
                .sum_all()
                .unwrap()
        };
        let grads = loss(&logp, &entropy).backward().unwrap();
        let full_grads = loss(&full_logp, &full_entropy).backward().unwrap();
        for (name, var) in policy.vars() {
            let g = grads.get(var.as_tensor()).unwrap();
            let want = full_grads.get(var.as_tensor()).unwrap();
            let diff = max_abs(&(g - want).unwrap());
            let scale = max_abs(want);
            assert!(scale > 0.0, "{name}: no gradient");
            assert!(diff <= 1e-4 * scale.max(1.0), "{name}: {diff} of {scale}");
        }
    }
}

#[test]
fn the_policy_gradient_loss_reads_only_trained_tokens() {
    // With a zero KL coefficient and ratio 1, the loss is −Σ A·w / N: check it by hand.
    let policy = tiny_policy(3);
    let items = items();
    let refs: Vec<&TrainItem> = items.iter().collect();
    let mut rl = rl_config();
    rl.kl_coef = 0.0;
    for roles in [
        PolicyRole::BOTH.to_vec(),
        vec![PolicyRole::Rehearse],
        vec![PolicyRole::Act],
    ] {
        let batch = pad_batch(&refs, 64, &roles, &Device::Cpu).unwrap();
        let (loss, sums) =
            micro_batch_loss(&policy, &policy, &batch, &rl, batch.n_trained).unwrap();
        let expected: f64 = items
            .iter()
            .map(|item| -f64::from(item.advantage) * item.n_trained(64, &roles) as f64)
            .sum::<f64>()
            / batch.n_trained as f64;
        let got = f64::from(loss.to_scalar::<f32>().unwrap());
        assert!(
            (got - expected).abs() < 1e-5,
            "{roles:?}: {got} vs {expected}"
        );
        let counted: f64 = sums.iter().map(|s| s.n_tokens).sum();
        assert_eq!(counted as usize, batch.n_trained);
    }
    // Act items train 4 + 7 tokens (the injected span is skipped), the rehearse item 14.
    assert_eq!(items[0].n_trained(64, &[PolicyRole::Act]), 11);
    assert_eq!(items[1].n_trained(64, &[PolicyRole::Rehearse]), 14);
    assert_eq!(items[1].n_trained(64, &[PolicyRole::Act]), 0);
}

fn sft_loss(policy: &Policy, items: &[TrainItem]) -> f64 {
    let refs: Vec<&TrainItem> = items.iter().collect();
    let batch = pad_batch(&refs, 64, &PolicyRole::BOTH, &Device::Cpu).unwrap();
    let (logp, _) = token_logprobs(policy, &batch, false).unwrap();
    let total = (logp * &batch.weight).unwrap().sum_all().unwrap();
    -f64::from(total.to_scalar::<f32>().unwrap()) / batch.n_trained as f64
}

#[test]
fn sft_steps_lower_the_loss_and_the_optimizer_state_round_trips() {
    let items = items();
    let run_steps = |policy: &Policy, optimizer: &mut AdamW, n: usize| {
        for _ in 0..n {
            let refs: Vec<&TrainItem> = items.iter().collect();
            let batch = pad_batch(&refs, 64, &PolicyRole::BOTH, &Device::Cpu).unwrap();
            let (logp, _) = token_logprobs(policy, &batch, false).unwrap();
            let loss = ((logp * &batch.weight)
                .unwrap()
                .sum_all()
                .unwrap()
                .neg()
                .unwrap()
                / batch.n_trained as f64)
                .unwrap();
            let grads = loss.backward().unwrap();
            optimizer.step(&grads, 1e-2, 1.0, 1.0).unwrap();
        }
    };
    let policy = tiny_policy(4);
    let before = sft_loss(&policy, &items);
    let mut optimizer = AdamW::new(&policy, 0.0).unwrap();
    run_steps(&policy, &mut optimizer, 3);
    let after = sft_loss(&policy, &items);
    assert!(after < before - 0.05, "loss {before} → {after}");

    // Save model and optimizer, continue both copies: identical losses.
    let dir = tempfile::tempdir().unwrap();
    policy.save(&dir.path().join("model")).unwrap();
    optimizer.save(&dir.path().join("opt.safetensors")).unwrap();
    let reloaded = Policy::load(&dir.path().join("model"), &Device::Cpu, DType::F32).unwrap();
    let mut reloaded_optimizer = AdamW::new(&reloaded, 0.0).unwrap();
    reloaded_optimizer
        .load(&dir.path().join("opt.safetensors"))
        .unwrap();
    assert_eq!(reloaded_optimizer.n_updates(), 3);
    run_steps(&policy, &mut optimizer, 2);
    run_steps(&reloaded, &mut reloaded_optimizer, 2);
    assert_eq!(sft_loss(&policy, &items), sft_loss(&reloaded, &items));
}

fn job_metrics(store_path: &Path) -> BTreeMap<(u64, String), Vec<f64>> {
    let store = Store::open(store_path).unwrap();
    let view = store.view();
    let run = view.runs().unwrap()[0].id;
    let mut out: BTreeMap<(u64, String), Vec<f64>> = BTreeMap::new();
    for row in view.metrics(run).unwrap() {
        if !row.key.starts_with("perf/") {
            out.entry((row.step, row.key)).or_default().push(row.value);
        }
    }
    out
}

/// Fails unless every metric key and evaluation category stored in `store_path` is one that
/// `envace::metrics` declares (the studio charts only what the catalogue describes).
pub fn assert_catalogued(store_path: &Path) {
    let store = Store::open(store_path).unwrap();
    let view = store.view();
    for run in view.runs().unwrap() {
        for row in view.metrics(run.id).unwrap() {
            assert!(
                metrics::metric_of(&row.key).is_some(),
                "metric key {:?} is not in envace::metrics::METRICS",
                row.key
            );
        }
        for row in view.eval_results(run.id).unwrap() {
            assert!(
                metrics::category_of(&row.category).is_some(),
                "evaluation category {:?} is not in envace::metrics::CATEGORIES",
                row.category
            );
            let key = format!("eval/{}/{}", row.benchmark, row.metric);
            assert!(metrics::metric_of(&key).is_some(), "{key}");
        }
    }
}

/// Keeps every event of a job.
#[derive(Default)]
struct Recorder(Vec<Event>);

impl Hooks for Recorder {
    fn poll(&mut self) -> Flow {
        Flow::Continue
    }
    fn emit(&mut self, event: Event) {
        self.0.push(event);
    }
}

/// Runs the job as a new run in the store with the given hooks: the run and how it ended.
fn start_job(
    config: &ExperimentConfig,
    store_path: &Path,
    hooks: &mut dyn Hooks,
) -> (RunId, JobOutcome) {
    let store = Store::open(store_path).unwrap();
    let run = store.create_run(&config.run.name, TINY_JOB).unwrap();
    drop(store);
    let spec = JobSpec {
        config: config.clone(),
        config_toml: TINY_JOB.to_owned(),
        store_path: store_path.to_path_buf(),
        resume: None,
    };
    (run, train(&spec, run, hooks).unwrap())
}

fn run_job(config: &ExperimentConfig, store_path: &Path) -> Vec<Event> {
    let mut recorder = Recorder::default();
    assert_eq!(
        start_job(config, store_path, &mut recorder).1,
        JobOutcome::Finished
    );
    assert_catalogued(store_path);
    recorder.0
}

#[test]
fn the_same_seed_gives_the_same_metrics_for_five_steps() {
    let config = config::parse(TINY_JOB, "TINY_JOB").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("a/runs.sqlite");
    let second = dir.path().join("b/runs.sqlite");
    std::fs::create_dir_all(first.parent().unwrap()).unwrap();
    std::fs::create_dir_all(second.parent().unwrap()).unwrap();
    let events = run_job(&config, &first);
    // The second run keeps only its two newest checkpoints on disk; metrics must not change.
    let mut pruned = config.clone();
    pruned.run.keep_checkpoints = 2;
    run_job(&pruned, &second);
    let a = job_metrics(&first);
    let b = job_metrics(&second);
    let steps: std::collections::BTreeSet<u64> = a
        .keys()
        .filter(|(_, key)| !key.starts_with("eval/"))
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(steps.len(), 5, "steps {steps:?}");
    // Held-out evaluation before RL and after its last step.
    assert!(a.contains_key(&(3, "eval/generated_test/success".to_owned())));
    assert!(a.contains_key(&(5, "eval/generated_test/success".to_owned())));
    assert!(a.contains_key(&(0, "sft/loss".to_owned())));
    // The SFT learning rate follows `lr_schedule = "cosine"`: warm-up, peak, then decay.
    let lr = |step: u64| a[&(step, "sft/lr".to_owned())][0];
    assert!(
        (lr(1) - 1e-3).abs() < 1e-12,
        "peak after the warm-up: {}",
        lr(1)
    );
    assert!(
        (lr(2) - 1e-3 * 0.55).abs() < 1e-9,
        "half way down the cosine: {}",
        lr(2)
    );
    assert!(a.contains_key(&(4, "rl/reward".to_owned())));
    assert!(a.contains_key(&(4, "act/entropy".to_owned())));
    // `rehearse_share = 0.5`: every SFT batch trains both roles. (Whether a 3-step model makes
    // tool calls in RL, and so rehearses there, is chance.)
    for step in 0..3 {
        assert!(a.contains_key(&(step, "sft/loss_act".to_owned())));
        assert!(a.contains_key(&(step, "sft/loss_rehearse".to_owned())));
    }
    assert_eq!(a, b);
    // Every step checkpointed at the interval, and the last one.
    let store = Store::open(&first).unwrap();
    let run = store.view().runs().unwrap()[0].id;
    let steps: Vec<u64> = store
        .view()
        .checkpoints(run)
        .unwrap()
        .iter()
        .map(|c| c.step)
        .collect();
    assert_eq!(steps, [1, 2, 4]);
    // Each held-out evaluation is announced with the figures the store holds.
    let announced: Vec<(u64, String, f64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Eval { step, metrics, .. } => Some(
                metrics
                    .iter()
                    .map(|(k, v)| (u64::from(*step), k.clone(), *v))
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    let mut stored: Vec<(u64, String, f64)> = store
        .view()
        .eval_results(run)
        .unwrap()
        .into_iter()
        .filter(|r| r.category == "all")
        .map(|r| (r.step, r.metric, r.value))
        .collect();
    stored.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    assert_eq!(announced, stored);
    assert_eq!(
        announced.len(),
        8,
        "score and success with their standard errors after steps 3 and 5"
    );
    let pruned_store = Store::open(&second).unwrap();
    let pruned_run = pruned_store.view().runs().unwrap()[0].id;
    let kept = pruned_store.view().checkpoints(pruned_run).unwrap();
    assert_eq!(kept.iter().map(|c| c.step).collect::<Vec<_>>(), [2, 4]);
    let run_dir = std::path::Path::new(&kept[0].path).parent().unwrap();
    let mut on_disk: Vec<String> = std::fs::read_dir(run_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("step-"))
        .collect();
    on_disk.sort();
    assert_eq!(
        on_disk,
        ["step-2", "step-4"],
        "step-1 deleted, the newest two kept"
    );
    let episodes = store.view().trajectories(run).unwrap();
    assert_eq!(episodes.len(), 2 * 4, "2 RL steps × 2 prompts × 2 episodes");
}

#[test]
fn the_budget_curve_evaluates_each_style_and_budget_after_the_last_step() {
    let mut config = config::parse(TINY_JOB, "TINY_JOB").unwrap();
    config.sft.n_steps = 1;
    config.rl.n_steps = 1;
    config.rl.warmup_steps = 0;
    config.rehearsal.budget_curve = vec![1, 2];
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("runs.sqlite");
    let events = run_job(&config, &store_path);
    let store = Store::open(&store_path).unwrap();
    let run = store.view().runs().unwrap()[0].id;
    let mut curve: Vec<(u64, String, String, u64)> = store
        .view()
        .eval_results(run)
        .unwrap()
        .into_iter()
        .filter(|r| r.category.starts_with("rehearsal/"))
        .map(|r| {
            assert!((0.0..=1.0).contains(&r.value), "{r:?}");
            (r.step, r.category, r.metric, r.n_tasks)
        })
        .collect();
    curve.sort();
    let expected: Vec<(u64, String, String, u64)> =
        ["parallel/1", "parallel/2", "sequential/1", "sequential/2"]
            .iter()
            .flat_map(|c| {
                ["score", "score_se", "success", "success_se"]
                    .map(|m| (2, format!("rehearsal/{c}"), m.to_owned(), 2))
            })
            .collect();
    assert_eq!(
        curve, expected,
        "after the last step (2), on the 2 held-out tasks"
    );
    let announced: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Eval {
                step: 2, metrics, ..
            } => Some(metrics.keys().cloned().collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .filter(|k| k.starts_with("rehearsal/"))
        .collect();
    assert_eq!(announced.len(), 16, "{announced:?}");
}

#[test]
fn budget_curves_on_fewer_tasks_get_their_own_plain_point_on_those_tasks() {
    let mut config = config::parse(TINY_JOB, "TINY_JOB").unwrap();
    config.sft.n_steps = 1;
    config.rl.n_steps = 1;
    config.rl.warmup_steps = 0;
    config.rehearsal.budget_curve = vec![1];
    config.rehearsal.curve_max_tasks = Some(1);
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("runs.sqlite");
    run_job(&config, &store_path);
    let store = Store::open(&store_path).unwrap();
    let run = store.view().runs().unwrap()[0].id;
    let rows = store.view().eval_results(run).unwrap();
    let tasks_of = |category: &str| -> Vec<u64> {
        rows.iter()
            .filter(|r| r.category == category && r.metric == "success")
            .map(|r| r.n_tasks)
            .collect()
    };
    assert_eq!(
        tasks_of("all"),
        [2, 2],
        "the plain evaluations (after SFT and after RL) score both held-out tasks"
    );
    for category in [
        "rehearsal/parallel/0",
        "rehearsal/sequential/0",
        "rehearsal/parallel/1",
        "rehearsal/sequential/1",
    ] {
        assert_eq!(
            tasks_of(category),
            [1],
            "{category} runs on the first task only"
        );
    }
    let value = |category: &str| {
        rows.iter()
            .find(|r| r.category == category && r.metric == "success")
            .map(|r| r.value)
            .unwrap()
    };
    assert_eq!(
        value("rehearsal/parallel/0"),
        value("rehearsal/sequential/0"),
        "one greedy pass is both styles' N = 0"
    );
    assert_catalogued(&store_path);
}

/// Stops the job at its first poll after step `after` has finished.
struct StopAfter {
    after: u32,
    done: bool,
}

impl Hooks for StopAfter {
    fn poll(&mut self) -> Flow {
        if self.done {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
    fn emit(&mut self, event: Event) {
        if let Event::Step { step, .. } = event {
            self.done |= step >= self.after;
        }
    }
}

/// `(step, metric)` of the run's `category` evaluation rows, sorted.
fn eval_rows(store_path: &Path, category: &str) -> Vec<(u64, String)> {
    let store = Store::open(store_path).unwrap();
    let run = store.view().runs().unwrap()[0].id;
    let mut rows: Vec<(u64, String)> = store
        .view()
        .eval_results(run)
        .unwrap()
        .into_iter()
        .filter(|r| r.category == category)
        .map(|r| (r.step, r.metric))
        .collect();
    rows.sort();
    rows
}

#[test]
fn rl_evaluates_after_its_last_step_and_a_curve_of_a_stopped_run_gets_its_plain_point() {
    // 3 SFT and 3 RL steps, evaluated every 2 RL steps: at 3 and 5, and after the last (6).
    let mut config = config::parse(TINY_JOB, "TINY_JOB").unwrap();
    config.rl.n_steps = 3;
    let dir = tempfile::tempdir().unwrap();
    let finished = dir.path().join("finished.sqlite");
    run_job(&config, &finished);
    let steps = |path: &Path| -> Vec<u64> {
        eval_rows(path, "all")
            .into_iter()
            .filter(|(_, m)| m == "success")
            .map(|(s, _)| s)
            .collect()
    };
    assert_eq!(steps(&finished), [3, 5, 6]);

    // Stopped after RL's first step (3): its checkpoint is step 3, the next step 4 has no
    // evaluation yet, so the curve of that checkpoint stores the plain one beside it.
    let stopped = dir.path().join("stopped.sqlite");
    let mut hooks = StopAfter {
        after: 3,
        done: false,
    };
    let (run, outcome) = start_job(&config, &stopped, &mut hooks);
    assert_eq!(outcome, JobOutcome::Stopped);
    assert_eq!(steps(&stopped), [3]);
    let mut curve_config = config.clone();
    curve_config.rehearsal.budget_curve = vec![1];
    let mut recorder = Recorder::default();
    let step =
        envace::controller::rehearsal_curve(&curve_config, &stopped, run, &mut recorder).unwrap();
    assert_eq!(step, 4);
    assert_eq!(steps(&stopped), [3, 4]);
    assert_eq!(
        eval_rows(&stopped, "rehearsal/parallel/1")
            .into_iter()
            .map(|(s, _)| s)
            .collect::<Vec<_>>(),
        [4, 4, 4, 4]
    );
    // A second curve at the same step reads that evaluation back instead of repeating it.
    let before = eval_rows(&stopped, "all").len();
    envace::controller::rehearsal_curve(&curve_config, &stopped, run, &mut Recorder::default())
        .unwrap();
    assert_eq!(eval_rows(&stopped, "all").len(), before);
    assert_catalogued(&stopped);
}

#[test]
fn sft_evaluates_the_held_out_tasks_every_sft_interval_steps() {
    let mut config = config::parse(TINY_JOB, "TINY_JOB").unwrap();
    config.sft.n_steps = 5;
    config.rl.n_steps = 0;
    config.eval.sft_interval_steps = 2;
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("runs.sqlite");
    let events = run_job(&config, &store_path);
    let store = Store::open(&store_path).unwrap();
    let run = store.view().runs().unwrap()[0].id;
    let mut steps: Vec<u64> = store
        .view()
        .eval_results(run)
        .unwrap()
        .into_iter()
        .filter(|r| r.category == "all" && r.metric == "success")
        .map(|r| r.step)
        .collect();
    steps.sort_unstable();
    // After 2 and 4 of the 5 SFT steps (at the start of steps 2 and 4), then where RL starts.
    assert_eq!(steps, [2, 4, 5]);
    let announced: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::Eval { step, .. } => Some(*step),
            _ => None,
        })
        .collect();
    assert_eq!(announced, [2, 4, 5]);
    // Each SFT evaluation comes before that step's metrics.
    let order: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Eval { step, .. } => Some(format!("eval {step}")),
            Event::Step { step, .. } => Some(format!("step {step}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        order,
        [
            "step 0", "step 1", "eval 2", "step 2", "step 3", "eval 4", "step 4", "eval 5"
        ]
    );
}
