//! End-to-end: the studio's analysis views on runs trained in process before it starts — the
//! Compare view grouping runs that differ only in seed into an arm drawn as a mean with a band
//! (metrics, benchmark values, pass@k and rehearsal-budget curves at a checkpoint), the
//! Episodes view opening one GRPO group (rollouts side by side with the engine's advantages),
//! and the Training view's drift alarm (on a real run's figures, and on a run whose stored
//! metrics drift).

use std::path::Path;
use std::time::Duration;

use std::sync::Arc;

use envace::config::{PolicyRole, TaskSplit};
use envace::controller::{Controller, JobOutcome, JobSpec};
use envace::rl::session::{Session, load_sources, task_pool};
use envace::rollout::{GenerationRequest, Scripted, record_episodes};
use envace::store::{Batch, RunId, RunStatus, RunWriter, Store};
use envace::tasks::GenTask;
use serde_json::{Value, json};

use super::Studio;

/// The engine's tiny training job (3 SFT and 2 GRPO steps on the functions domain).
const TINY_JOB: &str = include_str!("../../crates/envace/tests/fixtures/train/tiny_job.toml");

/// The tiny job's text with `edits` (TOML path, value) made through the engine's editor, with
/// two trials per held-out task (pass@1, pass@2) and a rehearsal-budget curve for N = 1, 2
/// (with memories short enough to leave the request room in the act prompt).
fn tiny_job(edits: &[(&[&str], Value)]) -> String {
    let mut text = TINY_JOB.to_owned();
    let common: [(&[&str], Value); 4] = [
        (&["run", "name"], json!("tiny-seeds")),
        (&["eval", "n_trials"], json!(2)),
        (&["rehearsal", "budget_curve"], json!([1, 2])),
        (&["rehearsal", "max_memory_tokens"], json!(256)),
    ];
    for (path, value) in common.iter().chain(edits) {
        text = envace::config::edit::set_value(&text, path, value).unwrap();
    }
    text
}

/// Trains `toml` to its end in a new run of `store` on the engine's controller, in process.
fn train(store: &Path, toml: &str) -> RunId {
    let started = std::time::Instant::now();
    let config = envace::config::parse(toml, "tiny job").unwrap();
    let controller = Controller::start(JobSpec {
        config,
        config_toml: toml.to_owned(),
        store_path: store.to_path_buf(),
        resume: None,
    })
    .unwrap();
    let run = controller.run();
    assert_eq!(controller.wait().unwrap(), JobOutcome::Finished);
    eprintln!("trained run {} in {:?}", run.0, started.elapsed());
    run
}

/// The seed arm's job: the tiny job with 10 SFT and 6 GRPO steps (held-out evaluations at
/// steps 10, 12, 14 and 16, the rehearsal-budget curve after step 15, episodes at 10 to 15).
fn seed_job(seed: u64) -> String {
    tiny_job(&[
        (&["run", "seed"], json!(seed)),
        (&["sft", "n_steps"], json!(10)),
        (&["rl", "n_steps"], json!(6)),
    ])
}

/// One GRPO step of the tiny job in rehearse mode, run by the engine (rollouts, the rule judge,
/// each rehearsed call replayed on the real environment, fidelity) with a scripted policy: in
/// each group of two, episode 0 acts as the task's oracle and episode 1 makes the oracle's call
/// and then answers wrongly; every call is rehearsed with the made-up result 0, so each call's
/// rehearsed answer differs from its real replay. Its episodes are stored at step 0.
fn scripted_group_run(store_path: &Path) -> RunId {
    let toml = tiny_job(&[
        (&["run", "name"], json!("scripted-group")),
        // Room for whole oracle turns.
        (&["rl", "max_response_tokens"], json!(200)),
    ]);
    let config = envace::config::parse(&toml, "scripted group").unwrap();
    let store = Store::open(store_path).unwrap();
    let run = store.create_run("scripted-group", &toml).unwrap();
    let writer = RunWriter::new(store, run, 256);
    let sources = load_sources(&config).unwrap();
    let pool = task_pool(&config, &sources, TaskSplit::Train, 8, 3).unwrap();
    let mut session = Session::create(config, run, writer, &pool, sources).unwrap();
    let tasks: Vec<Arc<GenTask>> = pool.clone();
    let mut policy = Scripted::new(move |request: &GenerationRequest, prompt: &str| {
        if request.role == PolicyRole::Rehearse {
            return envace::rehearse::execution_result_block(&json!({"result": 0}));
        }
        let Some(task) = tasks.iter().find(|t| prompt.contains(&t.request)) else {
            return "I cannot help with that.".to_owned();
        };
        let turns: Vec<&str> = task
            .oracle
            .iter()
            .filter(|m| m.role == envace::chat::Role::Assistant)
            .map(|m| m.content.as_str())
            .collect();
        match (request.episode_idx % 2, request.turn_idx) {
            (0, turn) | (_, turn @ 0) => turns.get(turn).copied().unwrap_or_default().to_owned(),
            _ => "The answer is 12.".to_owned(),
        }
    });
    let rollouts = envace::rl::grpo::step_rollouts(&mut session, &pool, 0, 0, &mut policy).unwrap();
    let mut batch = Batch::new(run);
    record_episodes(&mut batch, 0, &rollouts.episodes).unwrap();
    let store = session.writer.store_mut();
    store.write(&batch).unwrap();
    store.set_run_status(run, RunStatus::Finished).unwrap();
    run
}

/// The step from which the drift run's metrics make the alarm fire (see [`drifting_run`]).
const DRIFT_SINCE: u64 = 11;

/// A finished run judged by an LLM in a rehearsed world, whose stored metrics drift: from step
/// 10 the simulator stops answering with errors while the real environment goes on erring on
/// 30% of the same calls, and later the rehearsed reward pulls ahead of the held-out score.
/// Means over 3 steps: at step 10 the rehearsed error rate is 0.19 against a real 0.29 (not
/// half of it), at step 11 0.11 against 0.29: the error-rate half fires from step 11. The
/// reward leads the held-out score (0.25) by 0.05 at step 3 and by 0.30 at step 13 (rewards
/// 0.45, 0.55, 0.65): the reward half fires from step 13.
fn drifting_run(store_path: &Path) -> RunId {
    let toml = format!(
        "{}\n[judge]\nkind = \"llm\"\n\n[judge.endpoint]\nurl = \"http://127.0.0.1:9/v1\"\nmodel = \"judge\"\n",
        tiny_job(&[(&["run", "name"], json!("drifting"))])
    );
    envace::config::parse(&toml, "drifting run").unwrap();
    let store = Store::open(store_path).unwrap();
    let run = store.create_run("drifting", &toml).unwrap();
    let mut writer = RunWriter::new(store, run, 1024);
    let rehearsed = [
        0.31, 0.28, 0.30, 0.27, 0.29, 0.26, 0.25, 0.06, 0.03, 0.02, 0.0, 0.01, 0.0, 0.0, 0.0, 0.01,
        0.0, 0.0,
    ];
    let real = [
        0.30, 0.29, 0.31, 0.28, 0.30, 0.29, 0.27, 0.30, 0.31, 0.29, 0.30, 0.28, 0.31, 0.30, 0.29,
        0.30, 0.31, 0.30,
    ];
    let reward = [
        0.30, 0.32, 0.31, 0.33, 0.35, 0.34, 0.36, 0.38, 0.45, 0.55, 0.65, 0.70, 0.74, 0.78, 0.80,
        0.82, 0.84, 0.85,
    ];
    for (i, step) in (3u64..=20).enumerate() {
        writer
            .metric(step, "drift/rehearsed_error_rate", rehearsed[i])
            .unwrap();
        writer
            .metric(step, "drift/real_error_rate", real[i])
            .unwrap();
        writer.metric(step, "rl/reward", reward[i]).unwrap();
        if step % 2 == 1 {
            writer
                .metric(step, "eval/generated_test/score", 0.25)
                .unwrap();
        }
    }
    writer.flush().unwrap();
    writer
        .store()
        .set_run_status(run, RunStatus::Finished)
        .unwrap();
    run
}

/// An advantage as the group view writes it.
fn advantage_text(value: Option<f64>) -> String {
    match value {
        None => "–".to_owned(),
        Some(v) if v > 0.0 => format!("+{:.3}", v.abs()),
        Some(v) if v < 0.0 => format!("−{:.3}", v.abs()),
        Some(v) => format!("±{:.3}", v.abs()),
    }
}

/// Selects `value` in the select `css` as a person does (the change event included).
fn choose(studio: &Studio, css: &str, value: &str) {
    studio
        .s()
        .script(
            "const s = document.querySelector(arguments[0]); s.value = arguments[1]; s.dispatchEvent(new Event('change'));",
            json!([css, value]),
        )
        .unwrap();
}

#[test]
fn seed_groups_a_grpo_group_and_the_drift_alarm() {
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    // One arm of three seeds, a second arm (real tool answers) of one run, and a drifting run.
    let seeds: Vec<RunId> = [7, 8, 9]
        .iter()
        .map(|&seed| train(&store, &seed_job(seed)))
        .collect();
    let real_job = envace::config::edit::set_value(
        &envace::config::edit::set_value(&seed_job(7), &["run", "name"], &json!("tiny-real"))
            .unwrap(),
        &["env", "tool_response_mode"],
        &json!("real"),
    )
    .unwrap();
    let real = train(&store, &real_job);
    let drifting = drifting_run(&store);
    let scripted = scripted_group_run(&store);
    assert_eq!(
        (seeds[0].0, seeds[2].0, real.0, drifting.0, scripted.0),
        (1, 3, 4, 5, 6),
        "run ids"
    );
    // The real runs' drift figures, which the alarm reads on real data.
    let view_store = Store::open(&store).unwrap();
    let drift_steps: Vec<u64> = view_store
        .view()
        .metrics(seeds[0])
        .unwrap()
        .into_iter()
        .filter(|m| m.key == "drift/real_error_rate")
        .map(|m| m.step)
        .collect();
    eprintln!("prepared the runs in {:?}", started.elapsed());

    let config = dir.path().join("tiny.toml");
    std::fs::write(&config, TINY_JOB).unwrap();
    let studio = Studio::open(&config, &store);
    let s = studio.s();

    // Compare: the three seeds are listed as one arm; ticking the arm ticks its runs.
    s.click("#tab-compare").unwrap();
    let arm = s
        .wait_for(
            "the seed arm in the run list",
            "const g = document.querySelector('#compare-runs .arm-group'); \
             return g && g.querySelectorAll('input.run-box').length === 3 && g.textContent",
            Duration::from_secs(20),
        )
        .unwrap();
    let arm = arm.as_str().unwrap();
    assert!(arm.contains("tiny-seeds × 3 seeds"), "{arm}");
    assert!(
        arm.contains("seed 7") && arm.contains("seed 8") && arm.contains("seed 9"),
        "{arm}"
    );
    assert_eq!(
        s.script(
            "return document.querySelectorAll('#compare-runs .arm-group').length",
            json!([])
        )
        .unwrap(),
        json!(1),
        "the real-environment run and the LLM-judged run differ in more than the seed"
    );
    s.click("#compare-runs .arm-group .arm-box").unwrap();
    s.click(&format!("#compare-runs input.run-box[value='{}']", real.0))
        .unwrap();
    s.click("#compare-button").unwrap();
    // sft/loss by arm: the seeds' mean with its band, and the single run.
    s.wait_for(
        "the metric chart by arm",
        "const c = document.getElementById('chart-compare'); \
         return c.dataset.bands === '1' && c.querySelectorAll('.u-series:not(.u-band-edge)').length === 3 && c.querySelector('canvas') !== null",
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(
        s.script(
            "return document.getElementById('compare-metric').value",
            json!([])
        )
        .unwrap(),
        json!("sft/loss")
    );
    let legend = s.text("#chart-compare .u-legend").unwrap();
    assert!(
        legend.contains("tiny-seeds × 3 seeds (runs 1, 2, 3)")
            && legend.contains("run 4 · tiny-real"),
        "{legend}"
    );
    let arms = s.text("#compare-arms").unwrap();
    assert!(
        arms.contains("seeds 7, 8, 9") && arms.contains("± one standard deviation"),
        "{arms}"
    );
    // Benchmark values by arm: the held-out score at steps 10, 12, 14 and 16, each arm with a
    // band (the seeds' spread; the single run's own standard error over tasks).
    s.wait_for(
        "the benchmark chart by arm",
        "const c = document.getElementById('chart-compare-bench'); \
         return document.getElementById('compare-eval').selectedOptions[0]?.textContent === 'generated_test · all/score' \
           && Number(c.dataset.points) === 8 && c.dataset.bands === '2'",
        Duration::from_secs(10),
    )
    .unwrap();
    // pass@k (k = 1, 2) and the rehearsal-budget curves (N = 0, 1, 2, parallel and sequential)
    // at the last evaluated checkpoint, step 16, for both arms.
    let curves = s
        .wait_for(
            "the pass@k and budget curves",
            "const p = document.getElementById('chart-compare-passk'); \
             const b = document.getElementById('chart-compare-budget'); \
             return document.getElementById('compare-step').value === '16' && Number(p.dataset.points) === 4 \
               && Number(b.dataset.points) === 12 && [p.dataset.bands, b.dataset.bands]",
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(curves, json!(["2", "4"]));
    studio.shot("studio-compare-seeds", None);
    // Standard error instead of sd: the same means in narrower bands (sd / √3).
    let band_of = |chart: &str| {
        s.script(
            "return [...new DOMParser().parseFromString(window.__charts.get(arguments[0]).svgText(), 'image/svg+xml') \
               .querySelectorAll('path.band')].map((p) => p.getAttribute('d')).join(' ')",
            json!([chart]),
        )
        .unwrap()
    };
    let sd_band = band_of("compare");
    assert!(
        sd_band.as_str().is_some_and(|d| d.starts_with('M')),
        "{sd_band}"
    );
    choose(&studio, "#compare-band", "se");
    s.wait_for(
        "the standard-error bands",
        "return document.getElementById('compare-arms').textContent.includes('standard error of the mean')",
        Duration::from_secs(10),
    )
    .unwrap();
    assert_ne!(band_of("compare"), sd_band, "the band did not change");
    studio.shot("studio-compare-seeds-curves", Some(".compare-curves"));
    // Without grouping every run is drawn on its own again.
    s.click("#compare-group").unwrap();
    s.wait_for(
        "one curve per run",
        "const c = document.getElementById('chart-compare'); \
         return c.dataset.bands === '0' && c.querySelectorAll('.u-series:not(.u-band-edge)').length === 5",
        Duration::from_secs(10),
    )
    .unwrap();

    // Episodes: a GRPO group of seed 7's last step shows the advantages the engine computes for
    // its rollouts.
    s.click("#tab-episodes").unwrap();
    s.wait_for(
        "the run list",
        "return document.querySelectorAll('#episode-run option').length === 6",
        Duration::from_secs(20),
    )
    .unwrap();
    let open_group = |run: RunId, step: u64, index: usize| -> String {
        choose(&studio, "#episode-run", &run.0.to_string());
        let groups = s
            .wait_for(
                "the groups of the last step",
                &format!(
                    "const g = [...document.querySelectorAll('#episode-list .group-open')].map((b) => b.dataset.group); \
                     return document.getElementById('episode-step').value === '{step}' && g.length === 2 && g"
                ),
                Duration::from_secs(20),
            )
            .unwrap();
        let groups: Vec<String> = serde_json::from_value(groups).unwrap();
        let group = groups[index].clone();
        s.script(
            "document.getElementById('group-detail')?.remove(); \
             [...document.querySelectorAll('#episode-list .group-open')].find((b) => b.dataset.group === arguments[0]).click()",
            json!([group]),
        )
        .unwrap();
        s.wait_for(
            "the group view",
            "const d = document.getElementById('group-detail'); \
             return d && d.dataset.members === '2' && d.querySelectorAll('.group-rollout').length === 2",
            Duration::from_secs(20),
        )
        .unwrap();
        assert_eq!(
            s.text("#group-detail h3").unwrap(),
            format!("GRPO group {group} · step {step}")
        );
        group
    };
    // The table's advantages against the engine's for the same episodes and `[rl]` settings.
    let check_advantages = |run: RunId, step: u64, group: &str, toml: &str| {
        let episodes: Vec<envace::rollout::EpisodeRecord> =
            envace::rollout::load_episodes(&view_store.view(), run)
                .unwrap()
                .into_iter()
                .filter(|(s, _)| *s == step)
                .map(|(_, e)| e)
                .collect();
        let rl = envace::config::parse(toml, "run config").unwrap().rl;
        let members = envace::rl::grpo::group_members(&episodes, group, &rl);
        let rows = s
            .script(
                "return [...document.querySelectorAll('#group-table tr[data-episode]')].map((tr) => [...tr.cells].map((c) => c.textContent))",
                json!([]),
            )
            .unwrap();
        let rows: Vec<Vec<String>> = serde_json::from_value(rows).unwrap();
        assert_eq!(rows.len(), members.len());
        for (row, member) in rows.iter().zip(&members) {
            assert_eq!(row[0], format!("#{}", member.episode_idx));
            assert_eq!(row[2], advantage_text(member.act_advantage), "{row:?}");
            assert_eq!(row[3], advantage_text(member.rehearse_advantage), "{row:?}");
        }
        let calls: usize = episodes
            .iter()
            .filter(|e| e.group == group)
            .map(|e| e.fidelity_calls().count())
            .sum();
        (members, calls)
    };
    let group = open_group(seeds[0], 15, 0);
    check_advantages(seeds[0], 15, &group, &seed_job(7));
    // The scripted step: the oracle episode scores more than the wrong answer, so the act
    // advantages differ in sign; every call's rehearsed answer (0) is shown beside its real
    // replay with the differing leaf highlighted.
    let toml = view_store.view().find_run("6").unwrap().config_toml;
    let group = open_group(scripted, 0, 0);
    let (members, calls) = check_advantages(scripted, 0, &group, &toml);
    let act: Vec<f64> = members.iter().filter_map(|m| m.act_advantage).collect();
    assert!(
        act.len() == 2 && act[0] > 0.0 && act[1] < 0.0,
        "the oracle's act advantage is positive, the wrong answer's negative: {members:?}"
    );
    assert!(
        members.iter().all(|m| m.rehearse_advantage.is_some()),
        "both rollouts rehearsed a call: {members:?}"
    );
    assert!(calls >= 2, "{calls} rehearsed calls");
    let shown = s
        .script(
            "const d = document.getElementById('group-detail'); \
             return [d.querySelectorAll('.group-rollout .call-pair').length, d.querySelectorAll('.group-rollout .call-pair .side-real .json-changed').length]",
            json!([]),
        )
        .unwrap();
    let shown: (usize, usize) = serde_json::from_value(shown).unwrap();
    assert_eq!(shown.0, calls, "each rehearsed call with its real replay");
    assert!(shown.1 >= calls, "a highlighted leaf per call: {shown:?}");
    studio.shot("studio-episodes-group", Some("#group-detail"));

    // Training: the drift alarm on the drifting run's metrics, dated by the step it started,
    // with that step marked on its chart.
    s.click("#tab-runs").unwrap();
    let open_charts = |run: RunId| {
        s.wait_for(
            "the run table",
            "const t = document.getElementById('run-table'); return t && t.rows.length === 7",
            Duration::from_secs(20),
        )
        .unwrap();
        s.script(
            "for (const tr of document.querySelectorAll('#run-table tr')) \
               if (tr.cells[0].textContent === String(arguments[0])) tr.querySelector('.run-charts').click();",
            json!([run.0]),
        )
        .unwrap();
    };
    open_charts(drifting);
    let banner = s
        .wait_for(
            "the drift alarm",
            "const p = document.getElementById('drift-panel'); \
             return document.getElementById('train-run').textContent.startsWith('run 5') && p.dataset.state === 'on' \
               && document.getElementById('drift-halves').textContent.includes('judge llm') \
               && document.getElementById('drift-alarm').textContent",
            Duration::from_secs(20),
        )
        .unwrap();
    let banner = banner.as_str().unwrap();
    assert!(
        banner.starts_with(&format!("Drift alarm since step {DRIFT_SINCE}: ")),
        "{banner}"
    );
    assert!(
        banner.contains("the rehearsed world has become too easy"),
        "{banner}"
    );
    let halves = s.text("#drift-halves").unwrap();
    assert!(
        halves.contains(&format!("Error-rate half: on since step {DRIFT_SINCE}."))
            && halves.contains("Reward half: on since step 13"),
        "{halves}"
    );
    assert_eq!(
        s.script(
            "const c = document.getElementById('chart-drift'); return [c.dataset.marker, Number(c.dataset.points)]",
            json!([])
        )
        .unwrap(),
        json!([DRIFT_SINCE.to_string(), 18 * 3 + 9])
    );
    assert!(
        s.text("#drift-rule")
            .unwrap()
            .contains("at most 50% as many"),
        "the rule is stated"
    );
    studio.shot("studio-drift-alarm", Some("#drift-panel"));

    // On a real run's figures (seed 7: the rule judge, so only the error-rate half applies).
    s.click("#tab-runs").unwrap();
    open_charts(seeds[0]);
    let state = s
        .wait_for(
            "the drift figures of a real run",
            "const p = document.getElementById('drift-panel'); \
             return document.getElementById('train-run').textContent.startsWith('run 1') \
               && document.getElementById('drift-halves').textContent.includes('judge rule') && p.dataset.state",
            Duration::from_secs(20),
        )
        .unwrap();
    let halves = s.text("#drift-halves").unwrap();
    assert!(
        halves.contains("Reward half: does not apply (judge rule, tool answers rehearse)"),
        "{halves}"
    );
    let points = s
        .script(
            "return Number(document.getElementById('chart-drift').dataset.points)",
            json!([]),
        )
        .unwrap();
    assert_eq!(
        points,
        json!(2 * drift_steps.len()),
        "both error rates of every step with replayed calls ({drift_steps:?})"
    );
    if drift_steps.is_empty() {
        assert_eq!(state, json!("none"));
    } else {
        assert_ne!(state, json!("none"));
        let banner = s.text("#drift-alarm").unwrap();
        assert!(
            banner.contains("of replayed calls with an error"),
            "{banner}"
        );
    }
    studio.shot("studio-drift-real-run", Some("#drift-panel"));
    eprintln!("analysis e2e took {:?}", started.elapsed());
}
