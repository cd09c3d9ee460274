//! `envace monitor` as a person starts it: a real window on a display (Xvfb here, wgpu on
//! lavapipe), found by its title, closed with the window manager's close button.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;
use std::time::{Duration, Instant};

use envace::store::{Batch, MetricRow, RunStatus, Store};
use envace_e2e::launch::{self, Guard};
use envace_e2e::x11;

#[test]
fn envace_monitor_opens_a_window_on_the_store_and_closes_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("runs.sqlite");
    let mut store = Store::open(&store_path).unwrap();
    let run = store.create_run("watched", "name = \"watched\"").unwrap();
    let mut batch = Batch::new(run);
    for step in 0..50 {
        batch.metrics.push(MetricRow {
            step,
            key: "rl/reward".to_owned(),
            value: step as f64 / 50.0,
            wall_time: 1_700_000_000.0 + step as f64,
        });
    }
    store.write(&batch).unwrap();
    store.set_run_status(run, RunStatus::Running).unwrap();

    let runtime_dir = dir.path().join("xdg");
    std::fs::create_dir(&runtime_dir).unwrap();
    std::fs::set_permissions(&runtime_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (_xvfb, display) = launch::start_display();
    let cli = launch::cli_binary();
    let child = Command::new(&cli)
        .arg("--store")
        .arg(&store_path)
        .args(["monitor", "watched"])
        .env("DISPLAY", &display)
        .env_remove("WAYLAND_DISPLAY")
        .env("XDG_RUNTIME_DIR", &runtime_dir)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", cli.display()));
    let mut monitor = Guard(child);
    let title = format!("EnvACE monitor: {}", store_path.display());
    x11::wait_for(&display, &title, true, Duration::from_secs(60));
    assert!(
        monitor.0.try_wait().unwrap().is_none(),
        "the monitor exited with its window up"
    );
    // What a person sees (the window drew at least once by now): the whole display.
    std::thread::sleep(Duration::from_secs(2));
    let shot = super::screenshots_dir().join("monitor-window.png");
    let status = Command::new(launch::need("import", "imagemagick"))
        .args(["-display", &display, "-window", "root"])
        .arg(&shot)
        .status()
        .unwrap();
    assert!(status.success(), "import failed: {status}");

    x11::request_close(&display, &title);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = monitor.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the monitor did not exit within 20 s of its window's close button"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "the monitor exited with {status}");
    // Reading never changed the store: the run is still as the writer left it.
    let runs = store.view().runs().unwrap();
    assert_eq!(runs[0].status, RunStatus::Running);
    assert_eq!(runs[0].last_step, Some(49));
}
