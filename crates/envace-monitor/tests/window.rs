//! The monitor window driven as a person would: widgets found by their labels, clicked, and
//! the result rendered through wgpu (lavapipe here) and compared with the committed snapshots
//! in `tests/snapshots/` (`UPDATE_SNAPSHOTS=1` writes them again).
#![allow(clippy::unwrap_used)] // A failure here ends the test or benchmark with its message.

use std::path::Path;
use std::time::Duration;

use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use envace::store::{
    Batch, EventRow, FidelityRow, MetricRow, RunId, RunStatus, Store, TrajectoryRow,
};
use envace_monitor::{MonitorApp, XAxis};

/// Two finished runs and one still training, with fixed times so the pictures are stable.
fn store_with_runs(dir: &Path) -> (std::path::PathBuf, Vec<RunId>) {
    let path = dir.join("runs.sqlite");
    let mut store = Store::open(&path).unwrap();
    let mut ids = Vec::new();
    for (i, (name, status)) in [
        ("sft-baseline", RunStatus::Finished),
        ("rehearsal-seed1", RunStatus::Finished),
        ("rehearsal-seed2", RunStatus::Running),
    ]
    .into_iter()
    .enumerate()
    {
        // The two rehearsal runs differ only in seed: one arm when seeds are grouped.
        let quickstart = envace::config::preset("quickstart").unwrap().toml;
        let set = |text: &str, path: &[&str], value: serde_json::Value| {
            envace::config::edit::set_value(text, path, &value).unwrap()
        };
        let config = set(quickstart, &["run", "name"], serde_json::json!(name));
        let config = set(&config, &["run", "seed"], serde_json::json!(i));
        let config = if i == 0 {
            set(&config, &["rl", "lr"], serde_json::json!(3e-6))
        } else {
            config
        };
        let run = store.create_run(name, &config).unwrap();
        let mut batch = Batch::new(run);
        let steps = if status == RunStatus::Running {
            60
        } else {
            100
        };
        for step in 0..steps {
            let t = step as f64;
            let lift = i as f64 * 0.1;
            let wall_time = 1_700_000_000.0 + t * (2.0 + i as f64);
            for (key, value) in [
                (
                    "rl/reward",
                    (0.2 + lift + 0.5 * (1.0 - (-t / 30.0).exp())).min(1.0)
                        + 0.05 * (t * 0.7).sin(),
                ),
                ("rl/success", 0.1 + lift + 0.4 * (1.0 - (-t / 40.0).exp())),
                (
                    "act/kl",
                    0.02 * (1.0 - (-t / 20.0).exp()) + 0.002 * (t * 1.3).cos(),
                ),
                ("rehearse/kl", 0.03 * (1.0 - (-t / 25.0).exp())),
            ] {
                batch.metrics.push(MetricRow {
                    step,
                    key: key.to_owned(),
                    value,
                    wall_time,
                });
            }
        }
        batch.events.push(EventRow {
            wall_time: 1_700_000_500.0,
            level: "info".to_owned(),
            step: Some(steps - 1),
            message: format!("step {} done", steps - 1),
            fields: serde_json::json!({}),
        });
        if name == "rehearsal-seed1" {
            add_episodes(&mut batch);
        }
        if i > 0 {
            add_fidelity_and_scores(&mut batch, steps, i as f64);
        }
        store.write(&batch).unwrap();
        store.set_run_status(run, status).unwrap();
        ids.push(run);
    }
    (path, ids)
}

/// Two episodes at step 99; the second rehearsed one call, with two leaves wrong and one
/// invented.
fn add_episodes(batch: &mut Batch) {
    for (episode_idx, task, reward) in [(0, "retail_007", 0.0), (1, "airline_012", 1.0)] {
        batch.trajectories.push(TrajectoryRow {
            step: 99,
            episode_idx,
            task_id: task.to_owned(),
            reward: Some(reward),
            masked: false,
            mask_reason: None,
            data: serde_json::json!({"messages": []}),
        });
    }
    let rehearsed = serde_json::json!({
        "reservation_id": "4WQ150",
        "status": "confirmed",
        "flights": [{"flight_number": "HAT170", "date": "2024-05-17"}],
        "total": 412.0,
        "note": "window seat"
    });
    let real = serde_json::json!({
        "reservation_id": "4WQ150",
        "status": "cancelled",
        "flights": [{"flight_number": "HAT170", "date": "2024-05-18"}],
        "total": 412
    });
    let scores = envace::fidelity::score(&rehearsed, &real);
    batch.fidelity.push(FidelityRow {
        step: 99,
        episode_idx: 1,
        turn_idx: 2,
        call_idx: 0,
        tool: "get_reservation_details".to_owned(),
        arguments: serde_json::json!({"reservation_id": "4WQ150"}),
        rehearsed,
        real,
        valid_json: scores.valid_json,
        outcome_agrees: scores.outcome_agrees,
        key_f1: scores.key_f1,
        value_accuracy: scores.value_accuracy,
        exact_match: scores.exact_match,
    });
}

/// Value accuracy of two tools at every step, and held-out success with its standard error
/// every 25 steps.
fn add_fidelity_and_scores(batch: &mut Batch, steps: u64, lift: f64) {
    for step in 0..steps {
        let t = step as f64;
        for (tool, rate) in [("get_user_details", 30.0), ("update_address", 80.0)] {
            batch.metrics.push(MetricRow {
                step,
                key: format!("fidelity/{tool}/value_accuracy"),
                value: (1.0 - (-t / rate).exp()) * (0.8 + 0.1 * lift),
                wall_time: 1_700_000_000.0 + t * 3.0,
            });
        }
    }
    for step in (0..steps).step_by(25) {
        let success = 0.2 + 0.1 * lift + step as f64 / 250.0;
        for (metric, value) in [("success", success), ("success_se", 0.04)] {
            batch.evals.push(envace::store::EvalRow {
                step,
                benchmark: "generated_test".to_owned(),
                category: "all".to_owned(),
                metric: metric.to_owned(),
                value,
                n_tasks: 100,
                wall_time: 1_700_000_000.0 + step as f64 * 3.0,
            });
        }
    }
}

fn harness(app: MonitorApp) -> Harness<'static, MonitorApp> {
    Harness::builder()
        .with_size([1100.0, 760.0])
        .wgpu()
        .build_ui_state(|ui, app: &mut MonitorApp| app.ui(ui), app)
}

fn monitor(path: &Path, runs: &[&str]) -> MonitorApp {
    let follower = envace_monitor::Follower::open(path).unwrap();
    let runs: Vec<String> = runs.iter().map(|s| (*s).to_owned()).collect();
    MonitorApp::new(follower, &runs)
        .unwrap()
        .with_poll_interval(Duration::from_secs(3600))
}

#[test]
fn the_run_list_selects_runs_and_the_charts_follow_the_choice() {
    let dir = tempfile::tempdir().unwrap();
    let (path, ids) = store_with_runs(dir.path());
    let mut harness = harness(monitor(&path, &[]));
    harness.run();
    // The newest run is drawn at first, and marked live.
    assert_eq!(
        harness.state().drawn().iter().copied().collect::<Vec<_>>(),
        vec![ids[2]]
    );
    // In the run list and in the status bar.
    assert_eq!(harness.get_all_by_label("live").count(), 2);
    harness.get_by_label("Reward per role");
    harness.get_by_label("Other metrics");

    // Tick the other two runs: three runs overlaid.
    harness
        .get_by_role_and_label(Role::CheckBox, "#1 sft-baseline")
        .click();
    harness.run();
    harness
        .get_by_role_and_label(Role::CheckBox, "#2 rehearsal-seed1")
        .click();
    harness.run();
    assert_eq!(harness.state().drawn().len(), 3);
    assert_eq!(harness.state().focused(), Some(ids[1]));
    harness.snapshot("three_runs_overlaid");

    // Untick the live run.
    harness
        .get_by_role_and_label(Role::CheckBox, "#3 rehearsal-seed2")
        .click();
    harness.run();
    assert!(!harness.state().drawn().contains(&ids[2]));

    // The filter narrows the list.
    harness.get_by_label("Filter").click();
    harness.run();
    harness.get_by_label("Filter").type_text("baseline");
    harness.run();
    let in_list = |harness: &Harness<'_, MonitorApp>, title: &str| {
        harness
            .query_by_role_and_label(Role::CheckBox, title)
            .is_some()
    };
    assert!(!in_list(&harness, "#2 rehearsal-seed1"));
    assert!(!in_list(&harness, "#3 rehearsal-seed2"));
    assert!(in_list(&harness, "#1 sft-baseline"));
}

#[test]
fn a_series_toggles_off_and_the_x_axis_switches_to_wall_time() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = store_with_runs(dir.path());
    let mut harness = harness(monitor(&path, &["sft-baseline", "3"]));
    harness.run();
    assert_eq!(harness.state().x_axis(), XAxis::Step);

    harness.get_by_label("act/kl").click();
    harness.run();
    assert!(harness.state().hidden().contains("act/kl"));

    harness.get_by_label("Wall time").click();
    harness.run();
    assert_eq!(harness.state().x_axis(), XAxis::WallTime);
    harness.snapshot("kl_hidden_wall_time");

    harness.get_by_label("act/kl").click();
    harness.run();
    assert!(!harness.state().hidden().contains("act/kl"));
}

#[test]
fn rows_committed_after_opening_appear_on_the_next_poll() {
    let dir = tempfile::tempdir().unwrap();
    let (path, ids) = store_with_runs(dir.path());
    let mut harness = harness(monitor(&path, &[]));
    harness.run();
    let before = harness.state().follower().run(ids[2]).unwrap().series["rl/reward"].len();

    let mut store = Store::open(&path).unwrap();
    let mut batch = Batch::new(ids[2]);
    batch.metrics.push(MetricRow {
        step: 60,
        key: "rl/reward".to_owned(),
        value: 0.9,
        wall_time: 1_700_001_000.0,
    });
    batch.events.push(EventRow {
        wall_time: 1_700_001_000.0,
        level: "info".to_owned(),
        step: Some(60),
        message: "step 60 done".to_owned(),
        fields: serde_json::json!({}),
    });
    store.write(&batch).unwrap();

    harness.state_mut().poll();
    harness.run();
    let run = harness.state().follower().run(ids[2]).unwrap();
    assert_eq!(run.series["rl/reward"].len(), before + 1);
    harness.get_by_label("info: step 60 done");
}

#[test]
fn an_episode_opens_with_its_rehearsed_and_real_responses_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = store_with_runs(dir.path());
    let mut harness = harness(monitor(&path, &["rehearsal-seed1"]));
    harness.run();
    harness.get_by_label("Episodes").click();
    harness.run();
    harness.get_by_label("Episodes of #2 rehearsal-seed1");
    harness.get_by_label("step 99 · episode 0 · retail_007 · reward 0.00 · 0 rehearsed");
    harness
        .get_by_label("step 99 · episode 1 · airline_012 · reward 1.00 · 1 rehearsed")
        .click();
    harness.run();
    assert_eq!(harness.state().opened_episode(), Some((99, 1)));
    harness.get_by_label("turn 2 · call 0 · get_reservation_details");
    harness.get_by_label("3 of 6 leaves differ · value accuracy 0.60");
    // Side by side: the leaf, the rehearsed value, the real one.
    harness.get_by_label("flights[0].date");
    harness.get_by_label("\"2024-05-17\"");
    harness.get_by_label("\"2024-05-18\"");
    harness.get_by_label("(missing)");
    harness.snapshot("episode_opened");

    // An episode without a rehearsed call says so.
    harness
        .get_by_label("step 99 · episode 0 · retail_007 · reward 0.00 · 0 rehearsed")
        .click();
    harness.run();
    harness.get_by_label("No tool response was rehearsed in this episode.");
}

#[test]
fn seeds_group_into_a_band_scores_and_fidelity_draw_and_a_chart_saves_as_png() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = store_with_runs(dir.path());
    let exports = dir.path().join("exports");
    std::fs::create_dir(&exports).unwrap();
    let app = monitor(&path, &["rehearsal-seed1", "rehearsal-seed2"]).with_export_dir(&exports);
    let mut harness = harness(app);
    harness.run();
    harness.get_by_label("Fidelity per tool (value accuracy)");
    harness.get_by_label(envace_monitor::app::EVAL_CHART);
    assert!(!harness.state().groups_seeds());

    harness.get_by_label("Group seeds").click();
    harness.run();
    assert!(harness.state().groups_seeds());
    harness.snapshot("seeds_grouped");

    // The first chart's Save PNG: the frame is captured and the chart cut out of it.
    harness.get_all_by_label("Save PNG").next().unwrap().click();
    harness.run();
    let saved = exports.join("reward-per-role-runs-2-3.png");
    assert!(saved.is_file(), "no {}", saved.display());
    let png = image::open(&saved).unwrap();
    assert!(
        png.width() > 300 && png.height() > 100,
        "{}x{}",
        png.width(),
        png.height()
    );
    assert_eq!(
        harness.state().notice(),
        Some("Saved reward-per-role-runs-2-3.png")
    );
    // Saving again never replaces the first file.
    harness.get_all_by_label("Save PNG").next().unwrap().click();
    harness.run();
    assert!(exports.join("reward-per-role-runs-2-3-2.png").is_file());

    // Fold the line charts away to see the scores (each ± its standard error).
    for title in [
        "Reward per role",
        "KL to the reference",
        "Fidelity per tool (value accuracy)",
    ] {
        harness.get_by_label(title).click();
        harness.run();
    }
    harness.snapshot("scores");
}

#[test]
fn naming_a_run_the_store_lacks_is_refused_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = store_with_runs(dir.path());
    let follower = envace_monitor::Follower::open(&path).unwrap();
    let err = MonitorApp::new(follower, &["no-such-run".to_owned()]).unwrap_err();
    assert!(err.to_string().contains("no-such-run"), "{err}");
}
