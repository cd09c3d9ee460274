//! End-to-end: closing the studio's window while a job trains stops the job first (a
//! checkpoint, run status `stopped`), then the window closes.

use std::time::Duration;

use envace::store::{RunStatus, Store};

use super::Studio;
use super::training::TINY;
use envace_e2e::x11;

const TITLE: &str = "EnvACE Studio";

#[test]
fn closing_the_window_stops_training_with_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    let store_path = dir.path().join("runs.sqlite");
    std::fs::write(&config, TINY).unwrap();
    let studio = Studio::open(&config, &store_path);
    let s = studio.s();
    s.click("#tab-training").unwrap();
    s.click("#train-start").unwrap();
    s.wait_for(
        "the first step",
        "return /^[1-9]\\d* \\/ \\d+$/.test(document.getElementById('train-step').textContent)",
        Duration::from_secs(240),
    )
    .unwrap();

    let shown: u64 = s
        .text("#train-step")
        .unwrap()
        .split(" / ")
        .next()
        .unwrap()
        .parse()
        .unwrap();
    x11::request_close(studio.display(), TITLE);
    // The window stays until the job has stopped, then goes.
    x11::wait_for(studio.display(), TITLE, false, Duration::from_secs(240));

    let store = Store::open(&store_path).unwrap();
    let runs = store.view().runs().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].status,
        RunStatus::Stopped,
        "the run's status once the window closed"
    );
    // The stop checkpoint holds the last completed step, at least the one shown at the close.
    let checkpoints = store.view().checkpoints(runs[0].id).unwrap();
    let last = checkpoints.last().expect("a checkpoint row");
    assert!(
        last.step >= shown,
        "step {shown} was shown when the window closed: {checkpoints:?}"
    );
}
