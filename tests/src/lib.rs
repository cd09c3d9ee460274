//! The studio's end-to-end harness: Xvfb, WebKitWebDriver and a WebDriver client that open the
//! real studio binary in a real webview, and X11 helpers for its native windows; used by the e2e
//! suites (`e2e/`) and the chart benchmark (`examples/chart_bench.rs`); and the secret scans
//! (`leaks.rs`) of the command line's and the studio's leak tests.
// A harness: a panic here is the test (or benchmark) failing, with its message.
#![allow(clippy::unwrap_used)]

pub mod launch;
pub mod leaks;
pub mod webdriver;
pub mod x11;
