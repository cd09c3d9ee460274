//! End-to-end: the editor's Browse buttons beside the model path and the data folders open the
//! native file dialog with the field in its title, starting in the config's folder; picking
//! a folder fills the field (and the TOML), closing the dialog changes nothing.

use std::time::Duration;

use serde_json::json;

use super::Studio;
use envace_e2e::x11;

#[test]
fn browse_buttons_open_native_dialogs() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("experiment.toml");
    let studio = Studio::open(&config, &dir.path().join("runs.sqlite"));
    let s = studio.s();

    // A model is a Hugging Face folder or a GGUF file; the data fields take folders.
    for button in [
        "browse-folder-model.path",
        "browse-file-model.path",
        "browse-folder-env.data_dir",
        "browse-folder-eval.data_dir",
    ] {
        s.find(&format!("[id='{button}']")).unwrap();
    }
    assert!(
        s.find("[id='browse-file-eval.data_dir']").is_err(),
        "a data folder offers no file picker"
    );
    studio.shot("studio-editor-model-path", Some("[data-path='model.path']"));

    // The folder dialog opens for its field in the config's folder; Return picks that folder.
    s.click("[id='browse-folder-eval.data_dir']").unwrap();
    let title = "Choose a folder for eval.data_dir";
    x11::wait_for(studio.display(), title, true, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(1500));
    studio.shot_display("studio-editor-folder-dialog");
    x11::press_key(studio.display(), title, x11::RETURN);
    x11::wait_for(studio.display(), title, false, Duration::from_secs(20));
    let folder = dir.path().display().to_string();
    s.wait_for(
        "the picked folder in the TOML",
        &format!(
            "return document.getElementById('toml-view').value.includes('data_dir = \"{folder}\"')"
        ),
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(
        s.script(
            "return document.getElementById('field-eval.data_dir').value",
            json!([])
        )
        .unwrap(),
        json!(folder)
    );

    // The GGUF file dialog, closed without a pick, leaves the model path empty.
    s.click("[id='browse-file-model.path']").unwrap();
    let title = "Choose a GGUF file for model.path";
    x11::wait_for(studio.display(), title, true, Duration::from_secs(20));
    x11::request_close(studio.display(), title);
    x11::wait_for(studio.display(), title, false, Duration::from_secs(20));
    let state = s
        .script(
            "return [document.getElementById('field-model.path').value, \
                     document.getElementById('editor-message').textContent]",
            json!([]),
        )
        .unwrap();
    assert_eq!(state, json!(["", ""]));
}
