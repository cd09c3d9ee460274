//! `cargo xtask bench monitor`'s measurement: a store of 20 finished runs with 100,000 metric
//! points each, opened by the monitor with all 20 runs overlaid, then frames with the pointer
//! moving over the charts. The frame time is measured in the real window (eframe on wgpu, on
//! the display `DISPLAY` names: lavapipe under Xvfb on a machine without a GPU) as eframe
//! counts it, the app's pass plus tessellation and rendering; and in an egui_kittest harness,
//! where the UI pass and tessellation are timed alone (its render reads every frame back to
//! the CPU, a cost no window pays). Ours draws each line decimated to about two points per
//! pixel column and shaped once per change; the peer is the same window drawing every raw
//! point each frame. Prints one JSON object as its last line.
#![allow(clippy::unwrap_used)] // A failure here ends the test or benchmark with its message.

use std::time::{Duration, Instant};

use std::sync::{Arc, Mutex};

use egui_kittest::Harness;
use envace::store::{Batch, MetricRow, RunStatus, Store};
use envace_monitor::{Follower, MonitorApp};
use serde_json::json;

const KEYS: [&str; 5] = [
    "rl/reward",
    "act/kl",
    "rehearse/kl",
    "act/entropy",
    "rl/success",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect("a whole number"))
    };
    let n_runs = arg("--runs", 20);
    let n_points = arg("--points", 100_000);
    let n_frames = arg("--frames", 60);
    let size = [arg("--width", 1600) as f32, arg("--height", 1000) as f32];

    let dir = std::env::temp_dir().join(format!("envace-monitor-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("runs.sqlite");
    let started = Instant::now();
    write_store(&path, n_runs, n_points);
    let write_s = started.elapsed().as_secs_f64();
    eprintln!("monitor_bench: wrote {n_runs} runs x {n_points} points in {write_s:.1} s");

    // Opening: every row read once, by row id.
    let started = Instant::now();
    let follower = Follower::open(&path).unwrap();
    let open_s = started.elapsed().as_secs_f64();
    // A poll with nothing new, as the window makes every half second.
    let mut follower = follower;
    let started = Instant::now();
    follower.poll().unwrap();
    let idle_poll_ms = started.elapsed().as_secs_f64() * 1e3;
    drop(follower);

    // The same window with next to nothing to draw (one run of 100 points): what the display
    // path costs a frame of this size whatever is drawn (on lavapipe, every pixel rasterised
    // and presented by the CPU).
    let floor_path = dir.join("floor.sqlite");
    write_store(&floor_path, 1, 100);
    let window_floor = window_frames(&floor_path, size, n_frames.min(20), None);
    let window_ours = window_frames(&path, size, n_frames, None);
    let window_peer = window_frames(&path, size, n_frames.min(10), Some(usize::MAX));
    let ours = frames(&path, n_runs, n_frames, None);
    let peer = frames(&path, n_runs, n_frames.min(10), Some(usize::MAX));
    // How the frame time grows with the points drawn per line.
    let budgets: Vec<serde_json::Value> = [100, 400, 1000]
        .into_iter()
        .map(|n| frames(&path, n_runs, n_frames.min(20), Some(n)))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);

    let out = json!({
        "runs": n_runs,
        "points_per_run": n_points,
        "open_store_s": open_s,
        "idle_poll_ms": idle_poll_ms,
        "write_store_s": write_s,
        "window": {"ours": window_ours, "peer": window_peer, "floor": window_floor},
        "harness": {"ours": ours, "peer": peer},
        "by_points_per_line": budgets,
    });
    println!("{out}");
}

/// The monitor in a real eframe window, every run drawn, the pointer sweeping the first chart,
/// a frame requested after each: eframe's own count of each frame's CPU time (the app's pass,
/// tessellation and rendering, not waiting for the display) and the time between frames.
fn window_frames(
    path: &std::path::Path,
    size: [f32; 2],
    n_frames: usize,
    max_points: Option<usize>,
) -> serde_json::Value {
    if std::env::var_os("DISPLAY").is_none() && std::env::var_os("WAYLAND_DISPLAY").is_none() {
        return json!({"skipped": "no display: run under Xvfb (cargo xtask bench monitor does)"});
    }
    let (app, n_runs) = every_run_drawn(path, max_points);
    let times = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let timed = Timed {
        app,
        frame: 0,
        n_frames: n_frames + WARM_UP,
        last: None,
        times: Arc::clone(&times),
    };
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default().with_inner_size(size),
        // Frames as fast as they are drawn: the time between them is the frame's own.
        wgpu_options: eframe::egui_wgpu::WgpuConfiguration {
            surface: eframe::egui_wgpu::SurfaceConfig {
                present_mode: eframe::wgpu::PresentMode::AutoNoVsync,
                ..eframe::egui_wgpu::SurfaceConfig::LOW_LATENCY
            },
            ..eframe::egui_wgpu::WgpuConfiguration::default()
        },
        ..eframe::NativeOptions::default()
    };
    eframe::run_native(
        "monitor-bench",
        options,
        Box::new(move |_| Ok(Box::new(timed))),
    )
    .unwrap();
    let (mut cpu_ms, mut between_ms) = times.lock().unwrap().clone();
    json!({
        "runs": n_runs,
        "max_points": max_points,
        "window": size,
        "frames": cpu_ms.len(),
        "frame_cpu_ms": percentiles(&mut cpu_ms),
        "between_frames_ms": percentiles(&mut between_ms),
    })
}

/// The monitor on the store at `path` drawing every run (polling only by hand), with at most
/// `max_points` per line when given; and how many runs that is.
fn every_run_drawn(path: &std::path::Path, max_points: Option<usize>) -> (MonitorApp, usize) {
    let follower = Follower::open(path).unwrap();
    let ids: Vec<_> = follower.runs().keys().copied().collect();
    let n_runs = ids.len();
    let mut app = MonitorApp::new(follower, &[])
        .unwrap()
        .with_poll_interval(Duration::from_secs(3600));
    if let Some(n) = max_points {
        app = app.with_max_points(n);
    }
    app.set_drawn(ids);
    (app, n_runs)
}

/// Frames drawn before any is counted (the first ones shape every line and compile shaders).
const WARM_UP: usize = 5;

struct Timed {
    app: MonitorApp,
    frame: usize,
    n_frames: usize,
    last: Option<Instant>,
    times: Arc<Mutex<(Vec<f64>, Vec<f64>)>>,
}

impl eframe::App for Timed {
    fn raw_input_hook(&mut self, _ctx: &egui::Context, raw_input: &mut egui::RawInput) {
        let x = 300.0 + (self.frame as f32 * 997.0) % 1200.0;
        raw_input
            .events
            .push(egui::Event::PointerMoved(egui::pos2(x, 250.0)));
    }

    fn ui(&mut self, ui: &mut egui::Ui, frame: &mut eframe::Frame) {
        let now = Instant::now();
        // The previous frame's figures.
        if self.frame > WARM_UP {
            let mut times = self.times.lock().unwrap();
            if let Some(cpu) = frame.info().cpu_usage {
                times.0.push(f64::from(cpu) * 1e3);
            }
            if let Some(last) = self.last {
                times.1.push((now - last).as_secs_f64() * 1e3);
            }
        }
        self.last = Some(now);
        self.frame += 1;
        self.app.ui(ui);
        if self.frame > self.n_frames {
            ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
        } else {
            ui.ctx().request_repaint();
        }
    }
}

/// Frame times of a window drawing every run (`max_points`: None for the monitor's default).
fn frames(
    path: &std::path::Path,
    n_runs: usize,
    n_frames: usize,
    max_points: Option<usize>,
) -> serde_json::Value {
    let (app, drawn) = every_run_drawn(path, max_points);
    assert_eq!(drawn, n_runs);
    let mut harness = Harness::builder()
        .with_size([1600.0, 1000.0])
        .with_max_steps(10_000)
        .wgpu()
        .build_ui_state(|ui, app: &mut MonitorApp| app.ui(ui), app);
    // The first frame shapes every line.
    let started = Instant::now();
    harness.step();
    harness.render().unwrap();
    let first_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut ui_ms = Vec::new();
    let mut tessellate_ms = Vec::new();
    let mut total_ms = Vec::new();
    for i in 0..n_frames {
        // The pointer sweeps across the first chart (egui_plot finds the nearest point).
        let x = 300.0 + (i as f32 * 997.0) % 1200.0;
        harness.hover_at(egui::pos2(x, 250.0));
        let started = Instant::now();
        harness.step();
        let ui = started.elapsed().as_secs_f64() * 1e3;
        // The frame's shapes to triangles, as the renderer does (timed alone here; the render
        // below does it again).
        let ctx = harness.ctx.clone();
        let shapes = harness.output().shapes.clone();
        let tessellating = Instant::now();
        let meshes = ctx.tessellate(shapes, ctx.pixels_per_point());
        tessellate_ms.push(tessellating.elapsed().as_secs_f64() * 1e3);
        drop(meshes);
        let rendering = Instant::now();
        harness.render().unwrap();
        ui_ms.push(ui);
        total_ms.push(ui + rendering.elapsed().as_secs_f64() * 1e3);
    }
    json!({
        "max_points": max_points,
        "first_frame_ms": first_ms,
        "frames": n_frames,
        "frame_ms": percentiles(&mut total_ms),
        "ui_ms": percentiles(&mut ui_ms),
        "tessellate_ms": percentiles(&mut tessellate_ms),
    })
}

fn percentiles(values: &mut [f64]) -> serde_json::Value {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    json!({"p50": at(0.5), "p95": at(0.95), "max": values[values.len() - 1]})
}

fn write_store(path: &std::path::Path, n_runs: usize, n_points: usize) {
    let mut store = Store::open(path).unwrap();
    let steps = n_points / KEYS.len();
    for r in 0..n_runs {
        let name = format!("seed{r}");
        let run = store
            .create_run(&name, &format!("name = \"{name}\""))
            .unwrap();
        for chunk in (0..steps).collect::<Vec<_>>().chunks(5_000) {
            let mut batch = Batch::new(run);
            for &step in chunk {
                let t = step as f64;
                for (k, key) in KEYS.iter().enumerate() {
                    let noise =
                        ((t * 12.9898 + r as f64 * 78.233 + k as f64).sin() * 43758.5453).fract();
                    batch.metrics.push(MetricRow {
                        step: step as u64,
                        key: (*key).to_owned(),
                        value: (1.0 - (-t / 4000.0).exp()) * (0.5 + 0.05 * r as f64) + 0.1 * noise,
                        wall_time: 1_700_000_000.0 + t * 1.5,
                    });
                }
            }
            store.write(&batch).unwrap();
        }
        store.set_run_status(run, RunStatus::Finished).unwrap();
    }
}
