//! The committed TypeScript bindings (`ui/src/bindings.ts`) match the Rust commands and types.

use std::path::Path;

#[test]
fn committed_bindings_are_up_to_date() {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui/src/bindings.ts");
    let dir = tempfile::tempdir().expect("temporary folder");
    let fresh = dir.path().join("bindings.ts");
    envace_studio::export_bindings(&fresh).expect("export");
    let fresh_text = std::fs::read_to_string(&fresh).expect("read fresh bindings");
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&committed, &fresh_text).expect("write bindings");
        return;
    }
    let committed_text = std::fs::read_to_string(&committed).unwrap_or_default();
    assert!(
        committed_text == fresh_text,
        "ui/src/bindings.ts is stale; regenerate it with\n  UPDATE_EXPECT=1 cargo test -p envace-studio --test bindings"
    );
}

/// The front end's unit tests map the real config schema; this keeps their copy current.
#[test]
fn committed_config_schema_is_up_to_date() {
    let committed =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui/src/generated/config-schema.json");
    let fresh =
        serde_json::to_string_pretty(&envace::config::json_schema_value()).expect("json") + "\n";
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::create_dir_all(committed.parent().expect("parent")).expect("mkdir");
        std::fs::write(&committed, &fresh).expect("write schema");
        return;
    }
    let committed_text = std::fs::read_to_string(&committed).unwrap_or_default();
    assert!(
        committed_text == fresh,
        "ui/src/generated/config-schema.json is stale; regenerate it with\n  UPDATE_EXPECT=1 cargo test -p envace-studio --test bindings"
    );
}
