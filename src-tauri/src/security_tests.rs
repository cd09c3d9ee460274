//! What the studio's window may do, read from the files Tauri builds it from: the capability
//! files grant exactly the expected permissions to the `main` window and nothing else; the
//! commands the window can invoke are exactly an expected list (adding one is a deliberate
//! change of this test); and the content security policy allows nothing remote.
#![allow(clippy::unwrap_used)] // Test code: a panic here is the test failing, with its message.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Every command the window may invoke, by its Rust name. A new command is added here on
/// purpose, after deciding that the webview may call it.
const EXPECTED_COMMANDS: &[&str] = &[
    "presets",
    "config_schema",
    "check_config",
    "initial_document",
    "open_preset",
    "set_field",
    "remove_field",
    "save_config",
    "open_config",
    "diff_against_preset",
    "list_runs",
    "pending_mcp_servers",
    "confirm_mcp_server",
    "start_training",
    "pause_training",
    "resume_training",
    "stop_training",
    "active_training",
    "run_metrics",
    "run_evals",
    "run_eval_tasks",
    "run_config",
    "diff_runs",
    "run_episodes",
    "run_group",
    "save_png",
    "save_svg",
    "check_endpoint",
    "check_device",
    "pick_path",
    "store_api_key",
    "forget_api_key",
    "run_checkpoints",
    "start_eval",
    "stop_eval",
    "active_eval",
    "export_verl",
    "import_verl",
];

/// The permissions the window is granted: the events our commands' jobs emit, and the native
/// file dialogs.
const EXPECTED_PERMISSIONS: &[&str] = &["core:event:default", "dialog:default"];

/// The sources a CSP directive may name: `'self'` and `'none'` everywhere, and per directive
/// the few local schemes the studio needs.
fn allowed_sources(directive: &str) -> &'static [&'static str] {
    match directive {
        // Chart panels and widgets set inline styles.
        "style-src" => &["'self'", "'none'", "'unsafe-inline'"],
        // Exported PNGs and SVGs are shown from data and blob URLs.
        "img-src" => &["'self'", "'none'", "data:", "blob:"],
        // Tauri's IPC: the custom protocol, and its HTTP fallback on Linux.
        "connect-src" => &["'self'", "'none'", "ipc:", "http://ipc.localhost"],
        _ => &["'self'", "'none'"],
    }
}

fn src_tauri() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn strings(value: &Value, what: &str) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("{what} is not a list: {value}"))
        .iter()
        .map(|item| {
            item.as_str()
                .unwrap_or_else(|| panic!("{what} holds {item}, not a name"))
                .to_owned()
        })
        .collect()
}

#[test]
fn capability_files_grant_the_main_window_exactly_the_expected_permissions() {
    let dir = src_tauri().join("capabilities");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no capability", dir.display());
    let mut granted = BTreeSet::new();
    for path in &files {
        // Tauri also reads TOML capabilities: every file here must be one this test reads.
        assert_eq!(
            path.extension().and_then(|e| e.to_str()),
            Some("json"),
            "{} is not a JSON capability file",
            path.display()
        );
        let capability = read_json(path);
        let object = capability
            .as_object()
            .unwrap_or_else(|| panic!("{} is not a JSON object", path.display()));
        // No `remote` (URLs that may use the IPC), `webviews`, `platforms` or `local: false`.
        let keys: BTreeSet<&str> = object.keys().map(String::as_str).collect();
        let known: BTreeSet<&str> = [
            "$schema",
            "identifier",
            "description",
            "windows",
            "permissions",
        ]
        .into_iter()
        .collect();
        assert!(
            keys.is_subset(&known),
            "{} has settings this test does not know: {:?}",
            path.display(),
            keys.difference(&known).collect::<Vec<_>>()
        );
        assert_eq!(
            strings(&capability["windows"], "windows"),
            ["main"],
            "{}: only the main window",
            path.display()
        );
        // A permission is a name; an object would scope it (a path, a URL): none is expected.
        granted.extend(strings(
            &capability["permissions"],
            &format!("{}: permissions", path.display()),
        ));
    }
    let expected: BTreeSet<String> = EXPECTED_PERMISSIONS
        .iter()
        .map(|p| (*p).to_owned())
        .collect();
    assert_eq!(
        granted,
        expected,
        "the capabilities grant {:?} beyond the expected and lack {:?}",
        granted.difference(&expected).collect::<Vec<_>>(),
        expected.difference(&granted).collect::<Vec<_>>()
    );

    // The app has one window, the one the capabilities name, showing our own front end, and
    // no capability is declared inline in the config.
    let conf = read_json(&src_tauri().join("tauri.conf.json"));
    let windows = conf["app"]["windows"].as_array().unwrap();
    let labels: Vec<&str> = windows
        .iter()
        .map(|w| w["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["main"]);
    for window in windows {
        assert!(
            window.get("url").is_none(),
            "the window loads {}",
            window["url"]
        );
    }
    assert!(conf["app"]["security"].get("capabilities").is_none());
}

/// The names of the commands the generated bindings invoke (`__TAURI_INVOKE("name"` or
/// `__TAURI_INVOKE<T>("name"`).
fn invoked_commands(bindings: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in bindings.match_indices("__TAURI_INVOKE") {
        let rest = &bindings[at + "__TAURI_INVOKE".len()..];
        let Some(open) = rest.find("(\"") else {
            continue;
        };
        // The type argument, if any, comes before the parenthesis; the import has none.
        if rest[..open].contains(['\n', ';']) {
            continue;
        }
        let name = &rest[open + 2..];
        names.push(name[..name.find('"').unwrap()].to_owned());
    }
    names
}

#[test]
fn the_window_may_invoke_exactly_the_expected_commands() {
    // What the running studio registers: `crate::run` hands this builder's `invoke_handler`
    // to Tauri, and its bindings list every command of that handler.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bindings.ts");
    crate::export_bindings(&path).unwrap();
    let registered = invoked_commands(&std::fs::read_to_string(&path).unwrap());
    let expected: Vec<String> = EXPECTED_COMMANDS.iter().map(|c| (*c).to_owned()).collect();
    let (mut have, mut want) = (registered.clone(), expected.clone());
    have.sort();
    want.sort();
    assert_eq!(
        have,
        want,
        "the studio registers {:?} beyond the expected and lacks {:?}; a command the webview may call is a deliberate change of EXPECTED_COMMANDS",
        registered
            .iter()
            .filter(|c| !expected.contains(c))
            .collect::<Vec<_>>(),
        expected
            .iter()
            .filter(|c| !registered.contains(c))
            .collect::<Vec<_>>()
    );

    // And nothing registers commands another way: one handler, from that builder, and one
    // plugin, the dialogs.
    let lib = std::fs::read_to_string(src_tauri().join("src/lib.rs")).unwrap();
    assert!(lib.contains("let builder = specta_builder();"));
    for (call, what) in [
        (
            ".invoke_handler(builder.invoke_handler())",
            "invoke_handler",
        ),
        (".plugin(tauri_plugin_dialog::init())", ".plugin("),
    ] {
        assert_eq!(lib.matches(call).count(), 1, "src/lib.rs: {call}");
        assert!(
            !lib.replace(call, "").contains(what),
            "src/lib.rs has another {what} than {call}"
        );
    }
    for entry in std::fs::read_dir(src_tauri().join("src")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        assert!(
            !source.contains(concat!("generate_", "handler!")),
            "{} registers commands outside the bindings' builder",
            path.display()
        );
    }
}

/// A policy as its directives, each with its sources; a directive given twice is an error.
fn parse_csp(policy: &str) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut directives = BTreeMap::new();
    for part in policy.split(';') {
        let mut words = part.split_ascii_whitespace();
        let Some(name) = words.next() else {
            continue;
        };
        let name = name.to_ascii_lowercase();
        let sources: Vec<String> = words.map(str::to_owned).collect();
        if directives.insert(name.clone(), sources).is_some() {
            return Err(format!("{name} is given twice"));
        }
    }
    Ok(directives)
}

/// What in `policy` reaches beyond the studio itself, one line per offending source.
fn remote_sources(policy: &str) -> Vec<String> {
    let directives = match parse_csp(policy) {
        Ok(directives) => directives,
        Err(why) => return vec![why],
    };
    let mut offences = Vec::new();
    match directives.get("default-src") {
        Some(sources) if sources == &["'self'"] => {}
        Some(sources) => offences.push(format!("default-src is {sources:?}, not exactly 'self'")),
        None => offences.push("there is no default-src".to_owned()),
    }
    // These do not fall back to default-src: without them a form could post, or a <base>
    // element could point relative URLs, anywhere.
    for name in ["base-uri", "form-action"] {
        if !directives.contains_key(name) {
            offences.push(format!(
                "there is no {name} (it does not fall back to default-src)"
            ));
        }
    }
    for (name, sources) in &directives {
        let allowed = allowed_sources(name);
        for source in sources {
            if !allowed.contains(&source.as_str()) {
                offences.push(format!("{name} allows {source}"));
            }
        }
    }
    offences
}

/// The CSP of `security[key]`, as one policy string (Tauri also takes a map of directives).
fn policy_of(security: &Value, key: &str) -> Option<String> {
    let value = security.get(key)?;
    Some(match value {
        Value::String(policy) => policy.clone(),
        Value::Object(map) => map
            .iter()
            .map(|(name, sources)| match sources {
                Value::String(s) => format!("{name} {s}"),
                other => format!("{name} {}", strings(other, name).join(" ")),
            })
            .collect::<Vec<_>>()
            .join("; "),
        other => panic!("security.{key} is {other}"),
    })
}

#[test]
fn the_content_security_policy_allows_nothing_remote() {
    let conf = read_json(&src_tauri().join("tauri.conf.json"));
    let security = &conf["app"]["security"];
    // Settings that loosen the policy (assetProtocol, dangerousDisableAssetCspModification,
    // a development CSP, headers) are deliberate changes of this test.
    let keys: Vec<&str> = security
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["csp"], "app.security holds {keys:?}");
    let policy = policy_of(security, "csp").expect("tauri.conf.json sets no CSP");
    let offences = remote_sources(&policy);
    assert!(
        offences.is_empty(),
        "the CSP {policy:?} reaches beyond the studio:\n{}",
        offences.join("\n")
    );
    let directives = parse_csp(&policy).unwrap();
    assert_eq!(directives["connect-src"], ["ipc:", "http://ipc.localhost"]);
}

#[test]
fn the_csp_check_names_each_remote_source_and_its_directive() {
    for (policy, expected) in [
        (
            "base-uri 'self'; form-action 'self'; default-src 'self'; connect-src ipc: http://ipc.localhost",
            vec![],
        ),
        (
            "base-uri 'self'; form-action 'self'; default-src 'self'; connect-src ipc: https://api.example.com",
            vec!["connect-src allows https://api.example.com"],
        ),
        (
            "base-uri 'self'; form-action 'self'; default-src *",
            vec![
                "default-src is [\"*\"], not exactly 'self'",
                "default-src allows *",
            ],
        ),
        (
            "base-uri 'self'; form-action 'self'; default-src 'self'; img-src 'self' https:",
            vec!["img-src allows https:"],
        ),
        (
            "base-uri 'self'; form-action 'self'; default-src 'self'; script-src 'self' 'unsafe-inline'",
            vec!["script-src allows 'unsafe-inline'"],
        ),
        (
            "base-uri 'self'; form-action 'self'; default-src 'self'; style-src 'self' data:; font-src fonts.example.com",
            vec![
                "font-src allows fonts.example.com",
                "style-src allows data:",
            ],
        ),
        (
            "base-uri 'self'; form-action 'self'; default-src 'self'; frame-src http://localhost:1420",
            vec!["frame-src allows http://localhost:1420"],
        ),
        (
            "base-uri 'self'; form-action 'self'; script-src 'self'",
            vec!["there is no default-src"],
        ),
        (
            "default-src 'self'; default-src *",
            vec!["default-src is given twice"],
        ),
        (
            "default-src 'self'",
            vec![
                "there is no base-uri (it does not fall back to default-src)",
                "there is no form-action (it does not fall back to default-src)",
            ],
        ),
    ] {
        assert_eq!(remote_sources(policy), expected, "{policy}");
    }
}
