//! End-to-end: scale out to a cluster and back. The editor's "Export for cluster…" refuses a
//! folder that is not empty unless told to overwrite, asks for the settings the quickstart
//! config lacks (a model folder and a judge endpoint on the cluster), then writes the launcher
//! and lists every setting with no equivalent; the run list's "Import cluster run…" reads the
//! cluster's run folder (the native folder picker starts in the launcher's folder) into the
//! store as a run marked imported, and a second import adds nothing.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::Studio;
use envace::store::Store;
use envace_e2e::x11;

const STATE: &str = "return document.getElementById('cluster-export')?.dataset.state";

fn wait_state(studio: &Studio, want: &str) {
    let script = format!(
        "const s = document.getElementById('cluster-export')?.dataset.state; \
         return s === '{want}' || (s === 'error' && 'error: ' + document.getElementById('cluster-result').textContent)"
    );
    let got = studio
        .s()
        .wait_for(
            &format!("the export dialog to be {want}"),
            &script,
            Duration::from_secs(60),
        )
        .unwrap();
    assert_eq!(got, json!(true), "{got}");
}

/// Copies the folder `from` into `to` (created), files only.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Clicks "Import cluster run…", accepts the folder the native picker starts in, and waits
/// for the outcome line; returns its text.
fn import_through_picker(studio: &Studio, expect_folder: &Path) -> String {
    let s = studio.s();
    s.script(
        "const r = document.getElementById('import-result'); delete r.dataset.state; r.replaceChildren()",
        json!([]),
    )
    .unwrap();
    s.click("#import-cluster").unwrap();
    let title = "Choose a folder for the cluster run";
    x11::wait_for(studio.display(), title, true, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(1500));
    x11::press_key(studio.display(), title, x11::RETURN);
    x11::wait_for(studio.display(), title, false, Duration::from_secs(20));
    let text = s
        .wait_for(
            "the import's outcome",
            "const r = document.getElementById('import-result'); \
             return (r.dataset.state === 'done' || r.dataset.state === 'error') && r.dataset.state + ': ' + r.textContent",
            Duration::from_secs(30),
        )
        .unwrap();
    let text = text.as_str().unwrap().to_owned();
    assert!(text.starts_with("done: "), "{text}");
    assert!(
        text.contains(&expect_folder.display().to_string()),
        "the picker started elsewhere: {text}"
    );
    text
}

#[test]
fn export_for_cluster_then_import_its_run() {
    let dir = tempfile::tempdir().unwrap();
    // The folder the config lives in already holds something of the person's.
    std::fs::write(dir.path().join("notes.txt"), "mine\n").unwrap();
    let config = dir.path().join("experiment.toml");
    let store_path = dir.path().join("runs.sqlite");
    let studio = Studio::open(&config, &store_path);
    let s = studio.s();
    assert!(studio.toml_view().contains("name = \"quickstart\""));

    // The dialog opens; its Folder… button picks with the native dialog (it starts in the
    // config's folder, which Return accepts).
    s.click("#export-cluster").unwrap();
    s.wait_for(
        "the export dialog",
        "return document.querySelector('#cluster-export[open]') !== null",
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(s.script(STATE, json!([])).unwrap(), json!("idle"));
    s.click("#cluster-out-browse").unwrap();
    let title = "Choose a folder for the cluster launcher";
    x11::wait_for(studio.display(), title, true, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(1500));
    x11::press_key(studio.display(), title, x11::RETURN);
    x11::wait_for(studio.display(), title, false, Duration::from_secs(20));
    let folder = dir.path().display().to_string();
    s.wait_for(
        "the picked folder",
        &format!("return document.getElementById('cluster-out').value === {folder:?}"),
        Duration::from_secs(10),
    )
    .unwrap();

    // That folder is not empty: nothing is written until overwriting is confirmed.
    s.click("#cluster-export-run").unwrap();
    wait_state(&studio, "not-empty");
    assert!(s.find("#cluster-overwrite").is_ok());
    assert!(!dir.path().join("run.sh").exists());
    studio.shot("studio-cluster-export-not-empty", Some("#cluster-result"));

    // Another folder, new: the quickstart config lacks the cluster's model folder and judge.
    let out = dir.path().join("launcher");
    s.type_into("#cluster-out", &out.display().to_string())
        .unwrap();
    s.click("#cluster-export-run").unwrap();
    wait_state(&studio, "missing");
    let asked = s
        .script(
            "return [...document.querySelectorAll('.cluster-setting.asked')].map(e => e.dataset.key)",
            json!([]),
        )
        .unwrap();
    assert_eq!(asked, json!(["model_path", "judge_url"]));
    let missing = s.text("#cluster-missing").unwrap();
    assert!(missing.contains("--set model_path=DIR"), "{missing}");
    assert!(!out.join("run.sh").exists());
    studio.shot("studio-cluster-export-missing", Some("#cluster-settings"));

    // Provided: the launcher is written and every setting with no equivalent is listed.
    s.type_into("#cluster-set-model_path", "/cluster/models/Qwen3-8B")
        .unwrap();
    s.type_into("#cluster-set-judge_url", "http://judge:10001/v1")
        .unwrap();
    s.click("#cluster-export-run").unwrap();
    wait_state(&studio, "written");
    for file in [
        "run.sh",
        "README.md",
        "envace.toml",
        "data/train.parquet",
        "data/validation.parquet",
    ] {
        assert!(out.join(file).is_file(), "{file} not written");
    }
    let run_sh = std::fs::read_to_string(out.join("run.sh")).unwrap();
    assert!(run_sh.contains("/cluster/models/Qwen3-8B"), "{run_sh}");
    assert!(run_sh.contains("http://judge:10001/v1"), "{run_sh}");
    let files = s.text("#cluster-files").unwrap();
    assert!(files.contains("data/train.parquet"), "{files}");
    let warnings = s
        .script(
            "return [...document.querySelectorAll('#cluster-warnings li')].map(li => li.textContent)",
            json!([]),
        )
        .unwrap();
    let warnings = warnings.as_array().unwrap();
    assert!(warnings.len() >= 3, "{warnings:?}");
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("[judge].kind = \"rule\" has no equivalent")),
        "{warnings:?}"
    );
    // The editor's unsaved text went through a scratch copy beside the config; none is left.
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".export-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The launcher's README lists the same warnings.
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    for warning in warnings {
        assert!(readme.contains(warning.as_str().unwrap()), "{warning}");
    }
    studio.shot("studio-cluster-export-written", Some("#cluster-result"));

    // Exporting again to the same folder asks again before overwriting; confirmed, it writes.
    s.click("#cluster-export-run").unwrap();
    wait_state(&studio, "not-empty");
    s.click("#cluster-overwrite").unwrap();
    wait_state(&studio, "written");
    s.click("#cluster-close").unwrap();
    s.wait_for(
        "the dialog to close",
        "return document.getElementById('cluster-export') === null",
        Duration::from_secs(10),
    )
    .unwrap();

    // The cluster ran it: its run folder (the reference's dumps and console log) is back in
    // the launcher's folder.
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/envace/tests/fixtures/verl/run");
    copy_dir(&fixture, &out);
    let out = std::fs::canonicalize(&out).unwrap();

    // Import: the picker starts in the folder just exported; the run appears, marked imported.
    s.click("#tab-runs").unwrap();
    s.wait_for(
        "the run list",
        "return document.getElementById('import-cluster') !== null && document.querySelector('#runs-pane .help, #run-table') !== null",
        Duration::from_secs(10),
    )
    .unwrap();
    let first = import_through_picker(&studio, &out);
    assert!(first.contains("Imported run 1 (cluster-sample)"), "{first}");
    assert!(first.contains("6 trajectories"), "{first}");
    assert!(
        first.contains("rollout_dumps/2.jsonl:2: malformed JSON line"),
        "the skipped line with its file and line: {first}"
    );
    let row = s
        .wait_for(
            "the imported run in the list",
            "const row = document.querySelector('#run-table tr[data-run=\"1\"]'); \
             return row && row.textContent",
            Duration::from_secs(10),
        )
        .unwrap();
    let row = row.as_str().unwrap();
    assert!(
        row.contains("cluster-sample") && row.contains("imported"),
        "{row}"
    );
    assert_eq!(
        s.script(
            "return document.querySelector('#run-table tr[data-run=\"1\"] .imported-badge').title",
            json!([])
        )
        .unwrap(),
        json!(format!("Imported from {}", out.display()))
    );
    studio.shot("studio-cluster-imported", Some("#run-table"));

    // Its charts open like a local run's: the reward per role over the dumps' steps.
    s.click("#run-table tr[data-run='1'] .run-charts").unwrap();
    s.wait_for(
        "the imported run's reward chart",
        "return document.getElementById('train-run').textContent.startsWith('run 1') \
           && Number(document.getElementById('chart-reward').dataset.points) > 0",
        Duration::from_secs(20),
    )
    .unwrap();
    studio.shot("studio-cluster-imported-charts", Some("#chart-reward"));
    s.click("#tab-runs").unwrap();

    // Importing the same folder again adds nothing.
    let second = import_through_picker(&studio, &out);
    assert!(second.contains("nothing new to add"), "{second}");
    let rows = s
        .script(
            "return document.getElementById('run-table').rows.length",
            json!([]),
        )
        .unwrap();
    assert_eq!(rows, json!(2), "one header and one run");
    studio.shot("studio-cluster-imported-again", Some("#run-table"));

    let store = Store::open(&store_path).unwrap();
    let runs = store.view().runs().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        store.imported_from(runs[0].id).unwrap(),
        Some(out.display().to_string())
    );
    assert_eq!(store.view().trajectories(runs[0].id).unwrap().len(), 6);
}
