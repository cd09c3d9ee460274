//! The monitor's data model against a store that another thread is writing: every committed row
//! reaches it exactly once, and a resume makes it read the run again.
#![allow(clippy::unwrap_used)] // A failure here ends the test or benchmark with its message.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use envace::store::{RunStatus, RunWriter, Store};
use envace_monitor::Follower;

#[test]
fn a_follower_reads_every_row_a_writer_thread_commits_once_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let store = Store::open(&path).unwrap();
    let run = store.create_run("live", "name = \"live\"").unwrap();
    store.set_run_status(run, RunStatus::Running).unwrap();

    const STEPS: u64 = 400;
    let start = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let path = path.clone();
        let start = Arc::clone(&start);
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            // Small transactions, some with several steps, committed while the follower reads.
            let mut writer = RunWriter::new(Store::open(&path).unwrap(), run, 7);
            start.wait();
            for step in 0..STEPS {
                writer.metric(step, "rl/reward", step as f64 * 0.5).unwrap();
                writer
                    .metric(step, "rl/kl", 1.0 / (step as f64 + 1.0))
                    .unwrap();
                if step % 50 == 0 {
                    writer
                        .event("info", Some(step), &format!("step {step}"))
                        .unwrap();
                }
                if step % 13 == 0 {
                    writer.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            writer.flush().unwrap();
            done.store(true, Ordering::SeqCst);
        })
    };

    let mut follower = Follower::open(&path).unwrap();
    start.wait();
    let mut polls_with_rows = 0;
    let mut seen_counts = Vec::new();
    loop {
        let finished = done.load(Ordering::SeqCst);
        let stats = follower.poll().unwrap();
        if stats.metric_rows > 0 {
            polls_with_rows += 1;
        }
        let held = follower.run(run).unwrap();
        let n = held.series.get("rl/reward").map_or(0, Vec::len);
        seen_counts.push(n);
        // Whatever has been read so far is a prefix of what was written, in order.
        for (i, point) in held
            .series
            .get("rl/reward")
            .into_iter()
            .flatten()
            .enumerate()
        {
            assert_eq!(
                point.step, i as f64,
                "reward point {i} out of order or duplicated"
            );
            assert_eq!(point.value, i as f64 * 0.5);
        }
        if finished {
            break;
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    writer.join().unwrap();
    follower.poll().unwrap();

    let held = follower.run(run).unwrap();
    assert_eq!(held.series["rl/reward"].len(), STEPS as usize);
    assert_eq!(held.series["rl/kl"].len(), STEPS as usize);
    assert_eq!(held.n_rows, 2 * STEPS);
    assert!(
        polls_with_rows > 1,
        "the rows arrived over several polls while the writer ran (seen {seen_counts:?})"
    );
    assert!(seen_counts.windows(2).all(|w| w[0] <= w[1]));
    // The same rows as the engine's own read of the whole table.
    let mut store = Store::open(&path).unwrap();
    let all = store.read(|view| view.metrics(run)).unwrap();
    assert_eq!(all.len() as u64, held.n_rows);
    assert_eq!(held.last_event.as_ref().unwrap().message, "step 350");
    // Nothing new: a poll reads nothing.
    assert_eq!(follower.poll().unwrap().metric_rows, 0);
}

#[test]
fn a_resumed_run_is_read_again_without_the_rows_its_resume_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let mut store = Store::open(&path).unwrap();
    let run = store.create_run("resumed", "name = \"resumed\"").unwrap();
    {
        let mut writer = RunWriter::new(Store::open(&path).unwrap(), run, 1);
        for step in 0..10 {
            writer.metric(step, "rl/reward", 1.0).unwrap();
        }
    }
    let mut follower = Follower::open(&path).unwrap();
    assert_eq!(follower.run(run).unwrap().series["rl/reward"].len(), 10);

    // Killed after step 9, resumed from the checkpoint at step 4: steps 5.. are written again
    // with other values, reusing the removed rows' ids.
    store.resume_run(run, 4, 5).unwrap();
    {
        let mut writer = RunWriter::new(Store::open(&path).unwrap(), run, 1);
        for step in 5..12 {
            writer.metric(step, "rl/reward", 2.0).unwrap();
        }
    }
    let stats = follower.poll().unwrap();
    assert_eq!(stats.reloaded_runs, 1);
    let points = &follower.run(run).unwrap().series["rl/reward"];
    let steps: Vec<f64> = points.iter().map(|p| p.step).collect();
    assert_eq!(steps, (0..12).map(f64::from).collect::<Vec<_>>());
    let values: Vec<f64> = points.iter().map(|p| p.value).collect();
    assert_eq!(&values[..5], &[1.0; 5]);
    assert_eq!(&values[5..], &[2.0; 7]);
    assert!(
        follower
            .run(run)
            .unwrap()
            .last_event
            .as_ref()
            .unwrap()
            .message
            .starts_with("resumed from the checkpoint at step 4")
    );
}

#[test]
fn opening_a_missing_store_names_the_file_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nowhere.sqlite");
    let err = Follower::open(&path).unwrap_err().to_string();
    assert!(err.contains("nowhere.sqlite"), "{err}");
    assert!(!path.exists());
}
