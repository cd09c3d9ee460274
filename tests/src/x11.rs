//! X11 helpers of the end-to-end tests: find the studio's windows (and its dialogs) by title on
//! the test's display, ask one to close as a window manager's close button does, and press a
//! key in one as a person would.

use std::time::{Duration, Instant};

use x11rb::connection::Connection as _;
use x11rb::protocol::xproto::{
    AtomEnum, ClientMessageEvent, ConnectionExt as _, EventMask, InputFocus, KEY_PRESS_EVENT,
    KEY_RELEASE_EVENT, MapState,
};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::rust_connection::RustConnection;

/// The shown X windows named `title` under `window`, depth first. (GTK hides a closed dialog
/// and may keep its window for later: only a viewable window counts.)
fn find_titled(conn: &RustConnection, window: u32, title: &str, found: &mut Vec<u32>) {
    let name = conn
        .get_property(false, window, AtomEnum::WM_NAME, AtomEnum::ANY, 0, 256)
        .unwrap()
        .reply()
        .unwrap();
    if name.value == title.as_bytes() {
        let shown = conn
            .get_window_attributes(window)
            .unwrap()
            .reply()
            .is_ok_and(|attributes| attributes.map_state == MapState::VIEWABLE);
        if shown {
            found.push(window);
        }
    }
    for child in conn.query_tree(window).unwrap().reply().unwrap().children {
        find_titled(conn, child, title, found);
    }
}

/// A connection to `display` and the windows named `title` there.
fn titled(display: &str, title: &str) -> (RustConnection, Vec<u32>) {
    let (conn, screen) = x11rb::connect(Some(display)).unwrap();
    let root = conn.setup().roots[screen].root;
    let mut found = Vec::new();
    find_titled(&conn, root, title, &mut found);
    (conn, found)
}

/// Whether a window named `title` is shown on `display`.
pub fn exists(display: &str, title: &str) -> bool {
    !titled(display, title).1.is_empty()
}

/// Waits until a window named `title` is shown (`present`) or none is; panics after `timeout`.
pub fn wait_for(display: &str, title: &str, present: bool, timeout: Duration) {
    let start = Instant::now();
    while exists(display, title) != present {
        assert!(
            start.elapsed() < timeout,
            "after {timeout:?} a window {title:?} is {} on {display}",
            if present {
                "still missing"
            } else {
                "still there"
            }
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Asks the one window named `title` to close, as a window manager's close button does: a
/// `WM_PROTOCOLS` client message carrying `WM_DELETE_WINDOW`.
pub fn request_close(display: &str, title: &str) {
    let (conn, windows) = titled(display, title);
    assert_eq!(
        windows.len(),
        1,
        "one window {title:?} expected on {display}"
    );
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

/// The key code of Return in Xvfb's default keymap.
pub const RETURN: u8 = 36;

/// Focuses the one window named `title` and presses and releases the key `keycode` there,
/// through the XTEST extension (real input, as from a keyboard).
pub fn press_key(display: &str, title: &str, keycode: u8) {
    let (conn, windows) = titled(display, title);
    assert_eq!(
        windows.len(),
        1,
        "one window {title:?} expected on {display}"
    );
    let root = conn.setup().roots[0].root;
    conn.set_input_focus(InputFocus::PARENT, windows[0], x11rb::CURRENT_TIME)
        .unwrap();
    for kind in [KEY_PRESS_EVENT, KEY_RELEASE_EVENT] {
        conn.xtest_fake_input(kind, keycode, x11rb::CURRENT_TIME, root, 0, 0, 0)
            .unwrap();
    }
    // A round trip, so that the server has taken the input before this returns.
    conn.get_input_focus().unwrap().reply().unwrap();
}
