//! `cargo xtask bench monitor`: the native monitor (`envace-monitor`) on a store of 20 runs with
//! 100,000 metric points each, all overlaid: the time to open the store (every row read once),
//! an idle poll, and the frame time while the pointer moves over the charts, p50 and p95, in a
//! real eframe window (eframe's own count: the app's pass, tessellation and the wgpu render,
//! lavapipe under Xvfb on a machine without a GPU). The peer is the same window drawing every
//! raw point of every line on each frame instead of lines decimated once per change. The
//! measurement is the `monitor_bench` example of `envace-monitor` (release build), run under
//! `xvfb-run` when there is no display, printed as one JSON object and written to
//! `target/bench/monitor.json`.

use std::path::Path;
use std::process::Command;

use anyhow::Result;
use serde_json::{Value, json};

use crate::bench_runs::{target_dir, write_result};

/// A frame within one 60 Hz refresh (p50 and p95).
const TARGET_FRAME_MS: f64 = 16.0;

/// Runs `cargo xtask bench monitor` from the repository root.
pub fn monitor(root: &Path) -> Result<()> {
    crate::cargo(&[
        "build",
        "--locked",
        "--release",
        "--package",
        "envace-monitor",
        "--example",
        "monitor_bench",
    ])?;
    let bin = target_dir(root)
        .join("release")
        .join("examples")
        .join("monitor_bench");
    eprintln!("xtask: $ {} (ours, then every raw point)", bin.display());
    let has_display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|d| !d.is_empty()));
    let mut command = if has_display {
        Command::new(&bin)
    } else {
        let mut xvfb = Command::new("xvfb-run");
        xvfb.args(["-a", "-s", "-screen 0 1920x1200x24"]).arg(&bin);
        xvfb
    };
    command.args(["--runs", "20", "--points", "100000", "--frames", "60"]);
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        // lavapipe warns without one.
        let dir = std::env::temp_dir().join("envace-xdg");
        std::fs::create_dir_all(&dir)?;
        command.env("XDG_RUNTIME_DIR", dir);
    }
    let measured = crate::bench_runs::last_json_line(&mut command, &bin, "monitor")?;
    let ours = &measured["window"]["ours"]["frame_cpu_ms"];
    let peer = &measured["window"]["peer"]["frame_cpu_ms"];
    let ratio = |a: &Value, b: &Value| match (a.as_f64(), b.as_f64()) {
        (Some(p), Some(o)) if o > 0.0 => json!(p / o),
        _ => Value::Null,
    };
    let met = |q: &str| ours[q].as_f64().is_some_and(|v| v <= TARGET_FRAME_MS);
    let window = &measured["window"];
    let interval = |arm: &str, q: &str| window[arm]["between_frames_ms"][q].as_f64();
    let above_floor = |q: &str| match (interval("ours", q), interval("floor", q)) {
        (Some(ours), Some(floor)) => json!(ours - floor),
        _ => Value::Null,
    };
    let result = json!({
        "bench": "monitor",
        "figures": measured,
        "ratios": {
            "frame_p50_peer_vs_ours": ratio(&peer["p50"], &ours["p50"]),
            "frame_p95_peer_vs_ours": ratio(&peer["p95"], &ours["p95"]),
            "interval_p50_peer_vs_ours": ratio(
                &window["peer"]["between_frames_ms"]["p50"],
                &window["ours"]["between_frames_ms"]["p50"],
            ),
            // What drawing the 20 runs adds to a presented frame over the same window with
            // next to nothing in it (on lavapipe the floor is the CPU rasterising and
            // presenting every pixel).
            "interval_above_floor_ms": {"p50": above_floor("p50"), "p95": above_floor("p95")},
            "target": {
                "ours_frame_cpu_p50_and_p95_ms_at_most": TARGET_FRAME_MS,
                "met": met("p50") && met("p95"),
            },
        },
        "cpu": crate::bench_science::cpu(),
    });
    write_result(root, "monitor", &result)
}
