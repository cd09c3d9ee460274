//! End-to-end: an evaluation started and stopped from the Benchmarks tab as a person does it —
//! SmolLM2's GGUF file picked as the model, a BFCL category ticked, Start; the progress bar
//! fills, the scores land in the store and in the table. A second, longer evaluation is stopped
//! midway and stores nothing. The studio runs the real `envace eval` beside it.

use std::time::Duration;

use serde_json::{Value, json};

use super::Studio;

fn data() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/benchmarks")
}

/// Fills the form for SmolLM2 on the first `limit` simple_python tasks and clicks Start.
fn start(studio: &Studio, gguf: &str, limit: &str) {
    let s = studio.s();
    s.script(
        "const f = (id, v) => { const e = document.getElementById(id); e.value = v; e.dispatchEvent(new Event('change')); }; \
         f('eval-source', 'model'); f('eval-limit', arguments[1]); f('eval-data', arguments[2]); \
         document.getElementById('eval-model').value = ''; \
         for (const b of document.querySelectorAll('.eval-bench')) b.checked = false;",
        json!([gguf, limit, data().display().to_string()]),
    )
    .unwrap();
    s.type_into("#eval-model", gguf).unwrap();
    s.click(".eval-bench[value='bfcl:simple_python']").unwrap();
    s.click("#eval-start").unwrap();
}

#[test]
fn an_evaluation_runs_from_the_benchmarks_tab_and_one_is_stopped() {
    let cli = envace_e2e::launch::studio_binary().with_file_name("envace");
    assert!(
        cli.is_file(),
        "the studio runs `envace eval`, expected at {} (cargo build -p envace-cli)",
        cli.display()
    );
    let gguf = envace::model::smollm2_gguf().unwrap_or_else(|e| panic!("{e}"));
    let gguf = gguf.display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let config = dir.path().join("tiny.toml");
    std::fs::write(&config, super::training::TINY).unwrap();
    let studio = Studio::open(&config, &store);
    let s = studio.s();
    s.click("#tab-benchmarks").unwrap();
    s.click("#eval-runner summary").unwrap();
    start(&studio, &gguf, "2");
    let finished = s
        .wait_for(
            "the evaluation to finish",
            "const r = document.getElementById('eval-runner'); return r.dataset.finished ? [r.dataset.finished, document.getElementById('eval-status').textContent, document.getElementById('eval-log').textContent] : null",
            Duration::from_secs(600),
        )
        .unwrap();
    assert_eq!(finished[0], "ok", "{finished}");
    let bar: Value = s
        .script(
            "const b = document.querySelector(\"#eval-progress .eval-bar[data-bench='bfcl:simple_python']\"); return b && [b.dataset.done, b.dataset.total]",
            json!([]),
        )
        .unwrap();
    assert_eq!(bar, json!(["2", "2"]));
    let log = finished[2].as_str().unwrap();
    assert!(log.contains("bfcl:simple_python: accuracy"), "{log}");
    // The scores are stored as an evaluation run and the table shows them.
    let table = s
        .wait_for(
            "the stored scores in the table",
            "const t = document.querySelector('#score-table'); return t && t.innerText.includes('simple_python') && t.innerText",
            Duration::from_secs(20),
        )
        .unwrap();
    assert!(table.as_str().unwrap().contains("BFCL"), "{table}");
    let run: Value = s
        .script(
            "return document.getElementById('benchview-run').selectedOptions[0].textContent",
            json!([]),
        )
        .unwrap();
    assert!(
        run.as_str().unwrap().contains("SmolLM2-135M-Instruct.Q4_1"),
        "{run}"
    );
    studio.shot("studio-evaluate-finished", Some("#eval-runner"));

    // A longer one, stopped: nothing is stored.
    start(&studio, &gguf, "50");
    s.wait_for(
        "the second evaluation to get going",
        "const b = document.querySelector(\"#eval-progress .eval-bar[data-bench='bfcl:simple_python']\"); return b !== null && Number(b.dataset.done) >= 1 && b.dataset.total === '50'",
        // SmolLM2's first answers may run to the token limit: on a 2-core AMD EPYC the first
        // task of 50 finished after 20 s in one run and after more than 120 s in another.
        Duration::from_secs(600),
    )
    .unwrap_or_else(|e| {
        let state = s
            .script(
                "return [document.getElementById('eval-status').textContent, document.getElementById('eval-log').textContent, document.getElementById('eval-progress').innerHTML]",
                json!([]),
            )
            .unwrap();
        panic!("{e}: {state}")
    });
    s.click("#eval-stop").unwrap();
    let stopped = s
        .wait_for(
            "the evaluation to stop",
            "const r = document.getElementById('eval-runner'); return r.dataset.running === 'false' && r.dataset.finished === 'stopped' && document.getElementById('eval-status').textContent",
            Duration::from_secs(60),
        )
        .unwrap();
    assert_eq!(stopped, "Stopped: stopped; nothing was stored");
    studio.shot("studio-evaluate-stopped", Some("#eval-runner"));
    let store = envace::store::Store::open(&store).unwrap();
    let runs = store.view().runs().unwrap();
    assert_eq!(runs.len(), 1, "one evaluation run");
    let rows = store.view().eval_tasks(runs[0].id, None).unwrap();
    assert_eq!(rows.len(), 2, "the stopped evaluation stored no task");
}
