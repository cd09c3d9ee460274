//! End-to-end: closing the studio's window while a job trains stops the job first (a
//! checkpoint, run status `stopped`), then the window closes.

use std::time::{Duration, Instant};

use envace::store::{RunStatus, Store};
use x11rb::connection::Connection as _;
use x11rb::protocol::xproto::{AtomEnum, ClientMessageEvent, ConnectionExt as _, EventMask};
use x11rb::rust_connection::RustConnection;

use super::Studio;
use super::training::TINY;

const TITLE: &[u8] = b"EnvACE Studio";

/// The X windows named `TITLE` under `window`, depth first.
fn find_titled(conn: &RustConnection, window: u32, found: &mut Vec<u32>) {
    let name = conn
        .get_property(false, window, AtomEnum::WM_NAME, AtomEnum::ANY, 0, 256)
        .unwrap()
        .reply()
        .unwrap();
    if name.value == TITLE {
        found.push(window);
    }
    for child in conn.query_tree(window).unwrap().reply().unwrap().children {
        find_titled(conn, child, found);
    }
}

/// The studio's top-level windows on `display`.
fn studio_windows(display: &str) -> (RustConnection, Vec<u32>) {
    let (conn, screen) = x11rb::connect(Some(display)).unwrap();
    let root = conn.setup().roots[screen].root;
    let mut found = Vec::new();
    find_titled(&conn, root, &mut found);
    (conn, found)
}

/// Asks the studio's window to close, as a window manager's close button does: a
/// `WM_PROTOCOLS` client message carrying `WM_DELETE_WINDOW`.
fn request_close(display: &str) {
    let (conn, windows) = studio_windows(display);
    assert_eq!(windows.len(), 1, "one studio window expected on {display}");
    let atom = |name: &[u8]| conn.intern_atom(false, name).unwrap().reply().unwrap().atom;
    let (protocols, delete) = (atom(b"WM_PROTOCOLS"), atom(b"WM_DELETE_WINDOW"));
    let message = ClientMessageEvent::new(32, windows[0], protocols, [delete, 0, 0, 0, 0]);
    conn.send_event(false, windows[0], EventMask::NO_EVENT, message)
        .unwrap();
    conn.flush().unwrap();
    // Under a bare Xvfb (no window manager, so no other X traffic) GTK left a lone client
    // message unhandled until the next X event arrived in 1 of 2 runs here; a second message
    // of a type nobody handles makes it go through (3 of 3).
    std::thread::sleep(Duration::from_millis(200));
    let nudge = ClientMessageEvent::new(32, windows[0], atom(b"ENVACE_E2E_NUDGE"), [0; 5]);
    conn.send_event(false, windows[0], EventMask::NO_EVENT, nudge)
        .unwrap();
    conn.flush().unwrap();
}

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
    request_close(studio.display());
    // The window stays until the job has stopped, then goes.
    let start = Instant::now();
    while !studio_windows(studio.display()).1.is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "the window did not close"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

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
