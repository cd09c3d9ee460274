//! End-to-end: a config that starts a stdio MCP server shows the server's exact command line
//! before training starts; Cancel starts nothing, "Run this command" records the confirmation
//! and starts the run (whose episodes reach the server), and a later start asks nothing.

use std::path::Path;
use std::time::Duration;

use envace::store::Store;
use envace_e2e::launch;
use serde_json::json;

use super::Studio;
use super::training::{TINY, wait_state, wait_stopped};

const DIALOG_OPEN: &str = "return document.querySelector('#mcp-confirm[open]') !== null";

fn spawns(log: &Path) -> usize {
    std::fs::read_to_string(log).map_or(0, |text| text.lines().count())
}

/// With the job running: no confirmation dialog is left; then stops the job.
fn stop_without_a_dialog(studio: &Studio) {
    let s = studio.s();
    let gone = s.script(
        "return document.getElementById('mcp-confirm') === null",
        json!([]),
    );
    assert_eq!(gone.unwrap(), json!(true), "the dialog is still there");
    s.click("#train-stop").unwrap();
    wait_stopped(studio);
}

fn runs(store: &Path) -> usize {
    if !store.exists() {
        return 0;
    }
    Store::open(store).unwrap().view().runs().unwrap().len()
}

#[test]
fn starting_a_job_with_a_stdio_mcp_server_asks_once_showing_its_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("spawned.log");
    let script = format!(
        "echo started >> {}; exec {} serve-env functions --stdio",
        log.display(),
        launch::cli_binary().display()
    );
    let config = dir.path().join("served.toml");
    std::fs::write(
        &config,
        format!(
            "{TINY}\n[[env.mcp_servers]]\ndomain = \"functions\"\ncommand = [\"sh\", \"-c\", {script:?}]\n"
        ),
    )
    .unwrap();
    let store = dir.path().join("runs.sqlite");
    let home = dir.path().join("home");
    let studio = Studio::open_with_env(&config, &store, &[("ENVACE_HOME", home.to_str().unwrap())]);
    let s = studio.s();
    // The editor shows the list of servers whole (it is edited in the TOML view).
    let listed = s
        .script(
            "const f = document.getElementById('field-env.mcp_servers'); return f ? [f.value, f.readOnly] : null",
            json!([]),
        )
        .unwrap();
    assert!(
        listed[0]
            .as_str()
            .unwrap_or("")
            .contains("serve-env functions --stdio")
            && listed[1] == json!(true),
        "{listed}"
    );
    s.click("#tab-training").unwrap();

    // Start: the dialog shows the exact command line, quoted as a shell reads it back.
    s.click("#train-start").unwrap();
    s.wait_for(
        "the confirmation dialog",
        DIALOG_OPEN,
        Duration::from_secs(20),
    )
    .unwrap();
    assert_eq!(
        s.text("#mcp-confirm .mcp-command").unwrap(),
        format!("sh -c '{script}'")
    );
    assert!(
        s.text("#mcp-confirm .mcp-where")
            .unwrap()
            .contains("env.mcp_servers[0] · functions domain")
    );
    studio.shot("studio-mcp-confirm", Some("#mcp-confirm"));

    // Cancel: nothing runs and no run is created.
    s.click("#mcp-confirm-cancel").unwrap();
    s.wait_for(
        "the refusal",
        "return document.getElementById('train-message').textContent.startsWith('Not started')",
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(s.text("#train-state").unwrap(), "idle");
    assert_eq!(spawns(&log), 0);
    assert_eq!(runs(&store), 0);
    assert!(!home.join(envace::trust::FILE_NAME).exists());

    // Confirm: the run starts and its episodes reach the server.
    s.click("#train-start").unwrap();
    s.wait_for(
        "the confirmation dialog",
        DIALOG_OPEN,
        Duration::from_secs(20),
    )
    .unwrap();
    s.click("#mcp-confirm-run").unwrap();
    wait_state(
        &studio,
        "the first step",
        "return /^[1-9]\\d* \\/ 70$/.test(document.getElementById('train-step').textContent)",
    );
    stop_without_a_dialog(&studio);
    assert!(spawns(&log) > 0, "the server never started");
    let confirmed = std::fs::read_to_string(home.join(envace::trust::FILE_NAME)).unwrap();
    assert!(
        confirmed.contains("serve-env functions --stdio"),
        "{confirmed}"
    );

    // Confirmed once: the next start asks nothing.
    s.click("#train-start").unwrap();
    wait_state(
        &studio,
        "run 2 to start",
        "return document.getElementById('train-run').textContent.startsWith('run 2') && document.getElementById('train-state').textContent === 'running'",
    );
    stop_without_a_dialog(&studio);
}
