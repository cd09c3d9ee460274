//! `cargo xtask bench chart`: a chart of 1,000,000 points per series (3 series) in the studio's
//! real WebKitGTK webview, drawn through our path (the studio's `ChartPanel`: alignment, min/max
//! decimation to about two points per pixel column, uPlot on the decimated data) and, as the
//! peer, by plain uPlot given every raw point. For each: time to first draw, the median and p95
//! time of a zoom/pan redraw over sweeps of 20 windows from the whole range down to 1% of it
//! (measured in the page with `performance.now()`, up to the painted frame), and the web
//! process's memory. Printed as one JSON object and written to `target/bench/chart.json`.
//!
//! The studio is the debug build the end-to-end tests use: the Rust side only hosts the webview,
//! and the drawing runs in the system's WebKitGTK either way. The page code is
//! `ui/src/bench/chartBench.ts`, built on its own (never part of the studio's bundle) and
//! injected by the `chart_bench` example of the `tests` crate (`envace-e2e`), which starts Xvfb and WebKitWebDriver
//! with the end-to-end tests' launcher.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::bench_runs::{target_dir, write_result};

/// What we call interactive: a zoom or pan is on screen within 100 ms (p95).
const TARGET_REDRAW_P95_MS: f64 = 100.0;

/// Runs `cargo xtask bench chart` from the repository root.
pub fn chart(root: &Path) -> Result<()> {
    // The studio embeds ui/dist at compile time.
    crate::npm("build")?;
    let bundle_dir = target_dir(root).join("bench").join("chart-ui");
    eprintln!(
        "xtask: $ npm run build:bench -- --outDir {} (in ui/)",
        bundle_dir.display()
    );
    let status = Command::new("npm")
        .args(["run", "--silent", "build:bench", "--", "--outDir"])
        .arg(&bundle_dir)
        .current_dir(root.join("ui"))
        .status()
        .context("cannot run npm")?;
    if !status.success() {
        bail!("`npm run build:bench` in ui/ failed ({status})");
    }
    crate::cargo(&[
        "build",
        "--locked",
        "--package",
        "envace-studio",
        "--bin",
        "envace-studio",
    ])?;
    crate::cargo(&[
        "build",
        "--locked",
        "--package",
        "envace-e2e",
        "--example",
        "chart_bench",
    ])?;
    let debug = target_dir(root).join("debug");
    let bin = debug.join("examples").join("chart_bench");
    eprintln!("xtask: $ {} (ours, then plain uPlot)", bin.display());
    let mut command = Command::new(&bin);
    command
        .arg("--studio")
        .arg(debug.join("envace-studio"))
        .arg("--bundle")
        .arg(bundle_dir.join("chart-bench.js"))
        .args(["--points", "1000000", "--series", "3", "--windows", "20"])
        .args(["--min-fraction", "0.01", "--rounds", "3", "--tries", "2"]);
    let measured = crate::bench_runs::last_json_line(&mut command, &bin, "chart")?;
    let ours = &measured["ours"];
    let peer = &measured["peer"];
    let ratio = |a: &Value, b: &Value| match (a.as_f64(), b.as_f64()) {
        (Some(p), Some(o)) if o > 0.0 => json!(p / o),
        _ => Value::Null,
    };
    let ours_p95 = ours["redraw_ms"]["p95"].as_f64();
    let result = json!({
        "bench": "chart",
        "figures": measured,
        "ratios": {
            "redraw_median_peer_vs_ours": ratio(&peer["redraw_ms"]["median"], &ours["redraw_ms"]["median"]),
            "redraw_p95_peer_vs_ours": ratio(&peer["redraw_ms"]["p95"], &ours["redraw_ms"]["p95"]),
            "first_draw_peer_vs_ours": ratio(&peer["first_draw_ms"], &ours["first_draw_ms"]),
            "target": {
                "ours_redraw_p95_ms_at_most": TARGET_REDRAW_P95_MS,
                "met": ours_p95.is_some_and(|p| p <= TARGET_REDRAW_P95_MS),
            },
        },
    });
    write_result(root, "chart", &result)
}
