//! End-to-end tests of the real studio app in a real webview (WebKitGTK), driven by WebDriver
//! under Xvfb, as a person would use it, and of the native monitor's window (`monitor.rs`).
//! Screenshots go to `target/screenshots/`.
#![allow(clippy::unwrap_used)] // Test code: a panic here is the test failing, with its message.

mod analysis;
mod benchmarks;
mod close;
mod cluster;
mod endpoints;
mod evaluate;
mod mcp_confirm;
mod monitor;
mod pickers;
mod training;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use envace_e2e::launch::{self, Guard, need};
use envace_e2e::webdriver::{Session, TAB};
use serde_json::json;

fn screenshots_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts moving a transparent 1-pixel element in the corner of the page (see [`Studio::shot`]).
const KEEP_REPAINTING: &str = "\
    const tick = document.createElement('div'); \
    tick.id = 'e2e-repaint'; \
    tick.style.cssText = 'position: fixed; left: 0; bottom: 0; width: 1px; height: 1px; pointer-events: none'; \
    document.body.append(tick); \
    let n = 0; \
    window.__e2eRepaint = setInterval(() => { tick.style.transform = n++ % 2 ? 'translateX(1px)' : 'none'; }, 50);";

/// Removes what [`KEEP_REPAINTING`] added.
const STOP_REPAINTING: &str = "\
    clearInterval(window.__e2eRepaint); \
    document.getElementById('e2e-repaint')?.remove();";

struct Studio {
    session: Option<Session>,
    _driver: Guard,
    _display: Guard,
    display: String,
    runtime_dir: tempfile::TempDir,
}

impl Studio {
    /// Opens the studio binary on `config` with the run store `store`.
    fn open(config: &Path, store: &Path) -> Studio {
        Studio::open_with_env(config, store, &[])
    }

    /// Opens the studio with extra environment variables (set on the driver, which starts
    /// the app).
    fn open_with_env(config: &Path, store: &Path, env: &[(&str, &str)]) -> Studio {
        let (display, name) = launch::start_display();
        let runtime_dir = tempfile::tempdir().unwrap();
        let (driver, base) = launch::start_driver(&name, runtime_dir.path(), env);
        let session = launch::open_studio(&base, &launch::studio_binary(), config, store).unwrap();
        if let Err(err) = session.wait_for(
            "the editor to load",
            "return document.body.dataset.ready === 'true'",
            Duration::from_secs(30),
        ) {
            let page = session.script(
                "return document.documentElement.outerHTML.slice(0, 3000)",
                json!([]),
            );
            let _ = session.script("window.__err = 'pending'; import(document.querySelector('script[type=module]').src + '?again').then(() => { window.__err = 'ok' }, (e) => { window.__err = String(e) + ' ' + e.stack })", json!([]));
            std::thread::sleep(Duration::from_secs(3));
            let e = session.script("return window.__err", json!([]));
            panic!("{err}; the page: {page:?} {e:?}");
        }
        Studio {
            session: Some(session),
            _driver: driver,
            _display: display,
            display: name,
            runtime_dir,
        }
    }

    /// The X display the studio runs on.
    fn display(&self) -> &str {
        &self.display
    }

    fn s(&self) -> &Session {
        self.session.as_ref().unwrap()
    }

    /// Saves a screenshot after the page has settled, with `focus` (a CSS selector) scrolled
    /// to the middle of the window when given.
    fn shot(&self, name: &str, focus: Option<&str>) -> PathBuf {
        if let Some(css) = focus {
            self.s()
                .script(
                    "document.querySelector(arguments[0]).scrollIntoView({block: 'center'})",
                    json!([css]),
                )
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(1000));
        // WebKitWebDriver answers a screenshot only after the page's next repaint, and a page
        // where nothing changes never repaints (the call then hangs). A transparent pixel that
        // moves every 50 ms keeps repaints coming while the screenshot is taken.
        self.s().script(KEEP_REPAINTING, json!([])).unwrap();
        let png = self.s().screenshot();
        self.s().script(STOP_REPAINTING, json!([])).unwrap();
        let png = png.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let path = screenshots_dir().join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// Saves a screenshot of the whole X display (native dialogs included, which WebDriver
    /// cannot see), with ImageMagick's `import`.
    fn shot_display(&self, name: &str) -> PathBuf {
        let import = need("import", "imagemagick");
        let path = screenshots_dir().join(format!("{name}.png"));
        let status = Command::new(import)
            .args(["-display", &self.display, "-window", "root"])
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success(), "import failed: {status}");
        path
    }

    /// Clicks Save and waits until the editor says the file is written.
    fn save(&self) {
        self.s().click("#save-button").unwrap();
        self.s()
            .wait_for(
                "the save",
                "return document.getElementById('editor-message').textContent.startsWith('Saved to')",
                Duration::from_secs(10),
            )
            .unwrap();
    }

    fn toml_view(&self) -> String {
        self.s()
            .script(
                "return document.getElementById('toml-view').value",
                json!([]),
            )
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    }
}

impl Drop for Studio {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            session.end();
        }
        let _ = &self.runtime_dir;
    }
}

#[test]
fn edit_a_preset_see_a_field_error_fix_it_and_save() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("experiment.toml");
    let store = dir.path().join("runs.sqlite");
    let studio = Studio::open(&config, &store);
    let s = studio.s();

    // A new file starts from the quickstart preset.
    assert!(studio.toml_view().contains("name = \"quickstart\""));
    assert_eq!(s.text("#config-status").unwrap(), "valid");
    studio.shot("studio-editor-quickstart", None);

    // Open another preset from the menu.
    s.click("#preset-select option[value='caller-frozen']")
        .unwrap();
    s.wait_for(
        "the caller-frozen preset",
        "return document.getElementById('toml-view').value.includes('name = \"caller-frozen\"')",
        Duration::from_secs(10),
    )
    .unwrap();

    // An invalid value: the error appears next to its field.
    let field = "[id='field-rl.micro_batch_size']";
    s.type_into(field, &format!("5{TAB}")).unwrap();
    let error = s
        .wait_for(
            "the field error",
            // Clearing the field first may briefly show "enter a number"; wait for the rule's
            // message about the typed value.
            "const text = document.getElementById('error-rl.micro_batch_size').textContent; \
             return text.includes('must divide') ? text : null",
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(
        error.as_str().unwrap(),
        "micro_batch_size = 5 must divide batch_size × group_size = 8 × 4 = 32 trajectories per step"
    );
    assert_eq!(s.text("#config-status").unwrap(), "1 problem");
    assert!(studio.toml_view().contains("micro_batch_size = 5"));
    studio.shot(
        "studio-editor-field-error",
        Some("[data-path='rl.micro_batch_size']"),
    );

    // A value that is not a number at all is caught before it reaches the file.
    s.type_into("[id='field-rl.lr']", &format!("fast{TAB}"))
        .unwrap();
    let error = s
        .wait_for(
            "the typing error",
            "return document.getElementById('error-rl.lr').textContent",
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(error.as_str().unwrap(), "\"fast\" is not a number");

    // Fix both; the config is valid again.
    s.type_into(field, &format!("16{TAB}")).unwrap();
    s.type_into("[id='field-rl.lr']", &format!("2e-5{TAB}"))
        .unwrap();
    s.wait_for(
        "the config to be valid",
        "return document.getElementById('config-status').textContent === 'valid' && document.getElementById('toml-view').value.includes('lr = 0.00002')",
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(
        s.text("[id='error-rl.micro_batch_size']").unwrap(),
        "",
        "the error stays after the fix"
    );

    // The diff against the preset shows exactly the two edits.
    s.click("#diff-button").unwrap();
    let diff = s
        .wait_for(
            "the diff",
            "const d = document.getElementById('preset-diff'); return d.textContent.includes('Changes') && d.textContent",
            Duration::from_secs(10),
        )
        .unwrap();
    let diff = diff.as_str().unwrap();
    assert!(diff.contains("+ micro_batch_size = 16"), "{diff}");
    assert!(diff.contains("- lr = 1e-4"), "{diff}");
    studio.shot(
        "studio-editor-fixed-with-diff",
        Some("[data-path='rl.micro_batch_size']"),
    );

    // Save writes the file the studio was opened on.
    studio.save();
    let saved = std::fs::read_to_string(&config).unwrap();
    let parsed = envace::config::parse(&saved, "saved").unwrap();
    assert_eq!(parsed.run.name, "caller-frozen");
    assert_eq!(parsed.rl.micro_batch_size, 16);
    assert_eq!(parsed.rl.lr, 2e-5);
    assert_eq!(
        parsed.rl.frozen_roles,
        vec![envace::config::PolicyRole::Act]
    );
    assert!(
        saved.starts_with("# The caller-frozen variant"),
        "the preset's comments survive the edits:\n{saved}"
    );
    assert!(s.text("#config-file").unwrap().ends_with("experiment.toml"));
}

#[test]
fn the_run_list_shows_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("experiment.toml");
    let store_path = dir.path().join("runs.sqlite");
    {
        let store = envace::store::Store::open(&store_path).unwrap();
        let text = envace::config::preset("quickstart").unwrap().toml;
        store.create_run("quickstart", text).unwrap();
        store.create_run("real-env-baseline", text).unwrap();
    }
    let studio = Studio::open(&config, &store_path);
    let s = studio.s();
    s.click("#tab-runs").unwrap();
    let rows = s
        .wait_for(
            "the run table",
            "const t = document.getElementById('run-table'); return t && t.rows.length",
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(rows, json!(3));
    let table = s.text("#run-table").unwrap();
    assert!(table.contains("real-env-baseline"), "{table}");
    studio.shot("studio-runs", None);
}
