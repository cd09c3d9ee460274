//! End-to-end: train from the studio with a tiny config, watch the step counter and a chart
//! move, pause, resume and stop; read a rehearsed answer beside the real one in the episode
//! viewer; start a second run with an edited config and compare the two.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Studio, TAB};
use envace_e2e::webdriver::Session;

/// A job small enough for a debug build: functions domain (no data files), 30 short SFT steps
/// (enough for the model to open its answers with tool calls), then GRPO steps with rehearsed
/// tool answers (stopped by the test long before the last one).
pub const TINY: &str = r#"# A tiny job for the studio's end-to-end test.
[run]
name = "studio-tiny"
seed = 7
checkpoint_interval_steps = 2

[model]
source = "tiny"

[model.tiny]
hidden_size = 32
n_layers = 2
n_heads = 4
n_kv_heads = 2
intermediate_size = 64
vocab_size = 500
max_position_embeddings = 4096

[env]
domains = ["functions"]
difficulty = 1
max_turns = 2
max_parallel_calls = 2
tool_response_mode = "rehearse"
tool_prompt = "names"

[sft]
enabled = true
n_steps = 30
n_tasks = 12
lr = 5e-3
batch_size = 4
micro_batch_size = 2

[rl]
n_steps = 40
batch_size = 2
group_size = 2
micro_batch_size = 2
lr = 1e-4
max_prompt_tokens = 1024
max_response_tokens = 24

[eval]
interval_steps = 2
max_tasks = 2
"#;

const TRAINING: Duration = Duration::from_secs(240);

pub(super) fn wait_state(studio: &Studio, what: &str, script: &str) {
    studio.s().wait_for(what, script, TRAINING).unwrap();
}

/// Waits until the job has ended with `stopped` (the Stop button was honoured).
pub(super) fn wait_stopped(studio: &Studio) {
    let outcome = studio
        .s()
        .wait_for(
            "the run to end",
            "return document.getElementById('train-state').dataset.outcome || ''",
            TRAINING,
        )
        .unwrap();
    assert_eq!(
        outcome,
        json!("stopped"),
        "{}",
        studio.s().text("#train-message").unwrap()
    );
}

/// Picks the newest step whose episodes hold a rehearsed call (the tiny model does not call a
/// tool at every step); the viewer opens the first such episode of a step by itself.
fn show_a_rehearsed_call(studio: &Studio) {
    let s = studio.s();
    let steps = s
        .wait_for(
            "the episode steps",
            "const o = [...document.querySelectorAll('#episode-step option')].map((o) => Number(o.value)); \
             return o.length > 0 && document.getElementById('episode-detail') !== null && o",
            Duration::from_secs(30),
        )
        .unwrap();
    let steps: Vec<u64> = serde_json::from_value(steps).unwrap();
    for step in steps.iter().rev() {
        s.script(
            "document.getElementById('episode-detail')?.remove(); \
             const select = document.getElementById('episode-step'); \
             select.value = String(arguments[0]); \
             select.dispatchEvent(new Event('change'));",
            json!([step]),
        )
        .unwrap();
        let found = s
            .wait_for(
                "the step's episodes",
                &format!(
                    "const d = document.querySelector('#episode-detail h3'); \
                     if (!d || !d.textContent.startsWith('Step {step} ')) return null; \
                     return document.querySelector('#episode-detail .call-pair') !== null ? 'pair' : 'none'"
                ),
                Duration::from_secs(30),
            )
            .unwrap();
        if found == json!("pair") {
            return;
        }
    }
    panic!("no step of {steps:?} recorded a rehearsed call");
}

/// Calls chart panel `chart`'s `method` (`exportPng` or `exportSvg`) with `path` and waits for
/// the path it reports written (or a message saying why none was).
fn export_chart(s: &Session, chart: &str, method: &str, path: &std::path::Path) -> Value {
    s.script(
        "window.__exported = null; \
         window.__charts.get(arguments[0])[arguments[1]](arguments[2]).then( \
           (p) => { window.__exported = p ?? 'nothing written (see the error message)'; }, \
           (e) => { window.__exported = 'error: ' + e; });",
        json!([chart, method, path.display().to_string()]),
    )
    .unwrap();
    s.wait_for(
        &format!("the {method} of {chart}"),
        "return window.__exported",
        Duration::from_secs(20),
    )
    .unwrap()
}

#[test]
fn train_watch_live_view_episodes_and_compare_runs() {
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    let store = dir.path().join("runs.sqlite");
    std::fs::write(&config, TINY).unwrap();
    let studio = Studio::open(&config, &store);
    let s = studio.s();
    assert!(studio.toml_view().contains("name = \"studio-tiny\""));

    // Start: the step counter advances and the SFT loss chart gets points, live.
    s.click("#tab-training").unwrap();
    s.click("#train-start").unwrap();
    wait_state(
        &studio,
        "the first step",
        "return /^[1-9]\\d* \\/ 70$/.test(document.getElementById('train-step').textContent)",
    );
    wait_state(
        &studio,
        "points on the SFT loss chart",
        "return Number(document.getElementById('chart-sft-loss').dataset.points) >= 1 && document.querySelector('#chart-sft-loss canvas') !== null",
    );
    assert_eq!(s.text("#train-phase").unwrap(), "sft");
    assert!(s.text("#train-run").unwrap().starts_with("run 1"));

    // Pause takes effect between steps; resume goes on.
    s.click("#train-pause").unwrap();
    wait_state(
        &studio,
        "the pause",
        "return document.getElementById('train-state').textContent === 'paused'",
    );
    let paused_at = s.text("#train-step").unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        s.text("#train-step").unwrap(),
        paused_at,
        "a paused job stepped"
    );
    s.click("#train-resume").unwrap();
    wait_state(
        &studio,
        "the resume",
        "return document.getElementById('train-state').textContent === 'running'",
    );

    // The first GRPO step draws the per-role reward and the fidelity charts.
    wait_state(
        &studio,
        "a GRPO step on the reward chart",
        "return Number(document.getElementById('chart-reward').dataset.points) >= 2",
    );
    assert_eq!(s.text("#train-phase").unwrap(), "rl");
    // The first GRPO step whose episodes make a tool call puts a point on the fidelity chart.
    wait_state(
        &studio,
        "a rehearsed call on the fidelity chart",
        "return Number(document.getElementById('chart-fidelity').dataset.points) >= 1",
    );
    // A few more steps, so that the screenshot shows curves rather than single points.
    wait_state(
        &studio,
        "step 36",
        "return parseInt(document.getElementById('train-step').textContent) >= 36",
    );
    studio.shot("studio-training", None);

    // Benchmark scores from the store's eval_results (the held-out generated tasks, evaluated
    // every 2 steps): a curve per metric and bars of the latest values; and the per-tool
    // fidelity heatmap.
    wait_state(
        &studio,
        "the benchmark charts",
        "return document.getElementById('bench-select').value === 'generated_test' \
             && Number(document.getElementById('bench-bars').dataset.bars) === 2 \
             && Number(document.getElementById('chart-bench').dataset.points) >= 4",
    );
    let bars = s
        .script(
            "return document.getElementById('bench-bars').textContent",
            json!([]),
        )
        .unwrap();
    let bars = bars.as_str().unwrap();
    assert!(
        bars.contains("all/score") && bars.contains("all/success"),
        "{bars}"
    );
    let tools = s
        .script(
            "return Number(document.getElementById('fidelity-heatmap').dataset.tools)",
            json!([]),
        )
        .unwrap();
    assert!(tools.as_f64().unwrap() >= 1.0, "no tool row in the heatmap");
    studio.shot("studio-training-benchmarks", Some("#bench-panel"));

    // A chart saves as a PNG and as an SVG document through the panel's export, as its PNG and
    // SVG buttons do (given a path, so that no dialog opens; the buttons ask where).
    let png = dir.path().join("reward.png");
    assert_eq!(
        export_chart(s, "reward", "exportPng", &png),
        json!(png.display().to_string())
    );
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    // The webview's XML parser reads the SVG back, and a copy goes with the screenshots.
    let svg = dir.path().join("reward.svg");
    assert_eq!(
        export_chart(s, "reward", "exportSvg", &svg),
        json!(svg.display().to_string())
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<svg ") && text.contains("Reward per role"),
        "{text}"
    );
    assert!(
        text.contains("class=\"series\""),
        "no curve in the SVG: {text}"
    );
    let parsed = s
        .script(
            "const d = new DOMParser().parseFromString(arguments[0], 'image/svg+xml'); \
             return d.getElementsByTagName('parsererror').length === 0 && d.querySelectorAll('.series').length",
            json!([text]),
        )
        .unwrap();
    assert!(
        parsed.as_f64().unwrap_or(0.0) >= 1.0,
        "the SVG does not parse: {parsed}"
    );
    std::fs::copy(
        &svg,
        crate::screenshots_dir().join("studio-chart-reward.svg"),
    )
    .unwrap();
    // What the file draws, rendered by the webview for the screenshot folder.
    s.script(
        "const view = document.createElement('div'); view.id = 'e2e-svg-view'; \
         view.style = 'position:fixed;left:0;top:0;z-index:1000;background:white;padding:8px'; \
         const img = document.createElement('img'); img.src = 'data:image/svg+xml;base64,' + btoa(arguments[0]); \
         view.appendChild(img); document.body.appendChild(view);",
        json!([text]),
    )
    .unwrap();
    s.wait_for(
        "the SVG to render",
        "const img = document.querySelector('#e2e-svg-view img'); return img && img.complete && img.naturalWidth > 0",
        Duration::from_secs(10),
    )
    .unwrap();
    studio.shot("studio-chart-reward-svg", Some("#e2e-svg-view"));
    s.script(
        "document.getElementById('e2e-svg-view').remove()",
        json!([]),
    )
    .unwrap();
    let refused = s
        .script(
            "return window.__TAURI_INTERNALS__.invoke('save_svg', {svg: 'not an image', name: 'reward', path: arguments[0]}) \
               .then(() => 'saved', (e) => JSON.stringify(e));",
            json!([dir.path().join("bad.svg").display().to_string()]),
        )
        .unwrap();
    assert!(
        refused.as_str().unwrap_or("").contains("not an SVG"),
        "{refused}"
    );
    assert!(!dir.path().join("bad.svg").exists());

    // Stop: the job checkpoints and ends as stopped; a second start would be refused before.
    s.click("#train-stop").unwrap();
    wait_stopped(&studio);
    let log = s.text("#train-log").unwrap();
    assert!(log.contains("checkpoint at step"), "{log}");
    assert!(log.contains("run 1 stopped"), "{log}");

    // The episode viewer shows a rehearsed answer beside the real one, with scores.
    s.click("#tab-episodes").unwrap();
    show_a_rehearsed_call(&studio);
    let rehearsed = s
        .text("#episode-detail .call-pair .side-rehearsed")
        .unwrap();
    let real = s.text("#episode-detail .call-pair .side-real").unwrap();
    assert!(!rehearsed.is_empty() && !real.is_empty());
    let scores = s.text("#episode-detail .scores").unwrap();
    assert!(scores.contains("value accuracy"), "{scores}");
    assert!(
        s.text("#episode-detail")
            .unwrap()
            .contains("Real environment")
    );
    studio.shot("studio-episodes", Some("#episode-detail .call-pair"));

    // A second run with a changed learning rate, stopped after its first step.
    s.click("#tab-editor").unwrap();
    s.type_into("[id='field-rl.lr']", &format!("2e-4{TAB}"))
        .unwrap();
    s.wait_for(
        "the edit",
        "return document.getElementById('toml-view').value.includes('lr = 0.0002')",
        Duration::from_secs(10),
    )
    .unwrap();
    s.click("#tab-training").unwrap();
    s.click("#train-start").unwrap();
    wait_state(
        &studio,
        "run 2 to step",
        "return document.getElementById('train-run').textContent.startsWith('run 2') && document.getElementById('train-state').textContent === 'running' && Number(document.getElementById('chart-sft-loss').dataset.points) >= 1",
    );
    s.click("#train-stop").unwrap();
    wait_stopped(&studio);

    // Compare: both runs' SFT loss on one chart, final values, and the config diff.
    s.click("#tab-compare").unwrap();
    s.wait_for(
        "the runs to pick",
        "return document.querySelectorAll('#compare-runs input').length === 2",
        Duration::from_secs(10),
    )
    .unwrap();
    s.click("#compare-runs label:nth-child(1) input").unwrap();
    s.click("#compare-runs label:nth-child(2) input").unwrap();
    s.click("#compare-button").unwrap();
    s.wait_for(
        "two curves",
        "return document.querySelectorAll('#chart-compare .u-series:not(.u-band-edge)').length === 3 && Number(document.getElementById('chart-compare').dataset.points) >= 2",
        Duration::from_secs(20),
    )
    .unwrap();
    assert_eq!(
        s.script(
            "return document.getElementById('compare-metric').value",
            json!([])
        )
        .unwrap(),
        json!("sft/loss")
    );
    let table = s.text("#compare-table").unwrap();
    assert!(
        table.contains("run 1") && table.contains("run 2"),
        "{table}"
    );
    assert!(table.contains("sft/loss"), "{table}");
    s.click("#compare-diff-button").unwrap();
    let diff = s
        .wait_for(
            "the config diff",
            "const d = document.getElementById('compare-diff'); return d.textContent.includes('Changes') && d.textContent",
            Duration::from_secs(10),
        )
        .unwrap();
    let diff = diff.as_str().unwrap();
    assert!(diff.contains("- lr = 1e-4"), "{diff}");
    assert!(diff.contains("+ lr = 0.0002"), "{diff}");
    studio.shot("studio-compare", None);

    // The same curves over wall time since each run's first step: run 2 started later but is
    // drawn from zero too, so the x axis spans the longer run, not both runs back to back.
    s.script(
        "const x = document.getElementById('compare-xaxis'); x.value = 'time'; x.dispatchEvent(new Event('change'));",
        json!([]),
    )
    .unwrap();
    let span = s
        .wait_for(
            "the wall-time axis",
            "const c = document.getElementById('chart-compare'); \
             const axis = c.querySelector('.u-legend .u-series:first-child .u-label'); \
             return c.dataset.xaxis === 'time' && Number(c.dataset.points) >= 2 && axis && axis.textContent === 'wall time' \
               && window.__charts.get('compare').svgText()",
            Duration::from_secs(10),
        )
        .unwrap();
    assert!(
        span.as_str().unwrap_or("").contains(">wall time</text>"),
        "{span}"
    );
    studio.shot("studio-compare-wall-time", Some("#chart-compare"));

    // The run list shows both runs as stopped.
    s.click("#tab-runs").unwrap();
    let table = s
        .wait_for(
            "the run table",
            "const t = document.getElementById('run-table'); return t && t.rows.length === 3 && t.textContent",
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(
        table.as_str().unwrap().matches("stopped").count(),
        2,
        "{table}"
    );
    studio.shot("studio-runs-after-training", None);

    // The test-time rehearsal curve of run 1's latest checkpoint, stored as `envace runs
    // rehearse` stores it, is drawn against the budget N when the run's charts open.
    let mut tiny = envace::config::parse(TINY, "TINY").unwrap();
    tiny.rehearsal.budget_curve = vec![1, 2];
    let curve_step = envace::controller::rehearsal_curve(
        &tiny,
        &store,
        envace::store::RunId(1),
        &mut envace::controller::NoHooks,
    )
    .unwrap();
    s.script(
        "for (const tr of document.querySelectorAll('#run-table tr')) \
           if (tr.cells[0].textContent === '1') tr.querySelector('.run-charts').click();",
        json!([]),
    )
    .unwrap();
    s.wait_for(
        "the rehearsal-budget curves",
        "return Number(document.getElementById('chart-budget').dataset.points) >= 8 \
             && document.querySelectorAll('#chart-budget .u-series:not(.u-band-edge)').length === 5",
        Duration::from_secs(60),
    )
    .unwrap();
    let note = s.text("#budget-note").unwrap();
    assert!(
        note.starts_with(&format!("After step {curve_step}:")),
        "{note}"
    );
    studio.shot("studio-training-rehearsal-budget", Some("#chart-budget"));
    eprintln!("training e2e took {:?}", started.elapsed());
}
