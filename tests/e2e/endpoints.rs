//! End-to-end: the editor's "Check connection" against the engine's own `serve-model` server
//! (a tiny model, started in the test) and against a port where nothing listens; an API key
//! goes to the OS keyring, never to the file, and a missing keyring says so; with a real
//! Secret Service (GNOME Keyring on a private bus) a stored key reaches the endpoint and a
//! forgotten one is gone; the webview's content security policy refuses a fetch beyond the
//! studio.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::Duration;

use envace::serve::{LoadedModel, ServeOptions, serve};
use serde_json::json;

use super::Studio;

/// A tiny Llama with a trained tokenizer, saved as a Hugging Face folder.
fn tiny_model(dir: &Path) {
    let corpus =
        "<|im_start|>user\nready?<|im_end|>\n<|im_start|>assistant\nyes, ready<|im_end|>\n";
    envace::model::save_tiny_llama_folder(dir, corpus).unwrap();
}

/// Clicks the check button of the endpoint table `at` and returns the result line once the
/// check has ended.
fn check(studio: &Studio, at: &str) -> (bool, String) {
    let s = studio.s();
    s.click(&format!("[id='check-{at}']")).unwrap();
    let done = s
        .wait_for(
            "the check",
            &format!(
                "const r = document.getElementById('check-result-{at}'); \
                 return r && r.dataset.ok !== undefined && [r.dataset.ok, r.textContent]"
            ),
            Duration::from_secs(60),
        )
        .unwrap();
    (
        done[0] == json!("true"),
        done[1].as_str().unwrap().to_owned(),
    )
}

#[test]
fn check_connection_of_the_judge_and_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("tiny-model");
    tiny_model(&model_dir);
    let model = LoadedModel::from_path(&model_dir)
        .unwrap()
        .with_name("tiny-judge");
    let server = serve(
        model,
        "127.0.0.1:0".parse().unwrap(),
        &ServeOptions::default(),
    )
    .unwrap();
    let gone = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", listener.local_addr().unwrap())
    };
    let config = dir.path().join("endpoints.toml");
    let text = envace::config::preset("quickstart")
        .unwrap()
        .toml
        .replace(
            "[judge]\nkind = \"rule\"",
            &format!(
                "[judge]\nkind = \"llm\"\n\n[judge.endpoint]\nurl = \"{}\"\nmodel = \"tiny-judge\"",
                server.url()
            ),
        )
        .replace(
            "n_few_shot = 1\n",
            &format!("n_few_shot = 1\n\n[env.external]\nurl = \"{gone}\"\nmodel = \"simulator\"\n"),
        );
    assert!(
        text.contains("[judge.endpoint]") && text.contains("[env.external]"),
        "{text}"
    );
    std::fs::write(&config, &text).unwrap();
    let studio = Studio::open(&config, &dir.path().join("runs.sqlite"));

    // The judge: our own server answers, listing its model.
    let (ok, line) = check(&studio, "judge.endpoint");
    assert!(ok, "{line}");
    assert!(
        line.starts_with("Connected: tiny-judge answered in "),
        "{line}"
    );
    assert!(line.ends_with("; 1 model(s) listed"), "{line}");
    assert!(
        server.stats().n_requests >= 1,
        "the server saw no chat completion"
    );

    // The simulator: nothing listens there; the line names the URL.
    let (ok, line) = check(&studio, "env.external");
    assert!(!ok, "{line}");
    assert!(
        line.starts_with(&format!(
            "Failed: {gone}/chat/completions: connection failed"
        )),
        "{line}"
    );
    studio.shot(
        "studio-editor-endpoint-failed",
        Some("[id='check-result-env.external']"),
    );
    studio.shot(
        "studio-editor-endpoint-ok",
        Some("[id='check-result-judge.endpoint']"),
    );
    server.shutdown();
}

#[test]
fn an_api_key_never_reaches_the_file_and_a_missing_keyring_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("keyed.toml");
    let text = envace::config::preset("quickstart")
        .unwrap()
        .toml
        .replace(
            "[judge]\nkind = \"rule\"",
            "[judge]\nkind = \"llm\"\n\n[judge.endpoint]\nurl = \"http://127.0.0.1:9/v1\"\nmodel = \"judge\"\napi_key_env = \"ENVACE_E2E_JUDGE_KEY\"",
        );
    std::fs::write(&config, &text).unwrap();
    // No session bus at all, so no Secret Service, whatever the machine runs.
    let studio = Studio::open_with_env(
        &config,
        &dir.path().join("runs.sqlite"),
        &[(
            "DBUS_SESSION_BUS_ADDRESS",
            "unix:path=/nonexistent/envace-e2e-bus",
        )],
    );
    let s = studio.s();
    let secret = "sk-e2e-secret-7f3a";
    s.type_into("[id='api-key-judge.endpoint']", secret)
        .unwrap();
    s.click("[id='api-key-save-judge.endpoint']").unwrap();
    let done = s
        .wait_for(
            "the keyring's answer",
            "const r = document.getElementById('api-key-result-judge.endpoint'); \
             return r.dataset.ok !== undefined && [r.dataset.ok, r.textContent]",
            Duration::from_secs(30),
        )
        .unwrap();
    assert_eq!(done[0], json!("false"));
    let message = done[1].as_str().unwrap();
    assert!(
        message.starts_with("the OS keyring is not available (")
            && message.contains("needs a Secret Service such as GNOME Keyring or KWallet"),
        "{message}"
    );
    assert_eq!(
        s.script(
            "return document.getElementById('api-key-judge.endpoint').value",
            json!([])
        )
        .unwrap(),
        json!(""),
        "the typed key stays in the box"
    );

    // The connection check says where the key was looked for.
    let (ok, line) = check_error(&studio, "judge.endpoint");
    assert!(!ok);
    assert!(
        line.contains("the environment variable ENVACE_E2E_JUDGE_KEY is not set and the OS keyring has no key under that name"),
        "{line}"
    );
    studio.shot(
        "studio-editor-api-key",
        Some("[id='api-key-result-judge.endpoint']"),
    );

    // Saving writes the file without the key.
    studio.save();
    let saved = std::fs::read_to_string(&config).unwrap();
    assert!(saved.contains("api_key_env = \"ENVACE_E2E_JUDGE_KEY\""));
    assert!(!saved.contains(secret) && !studio.toml_view().contains(secret));
}

/// Clicks the check button of `at` and returns its line, which is an error here.
fn check_error(studio: &Studio, at: &str) -> (bool, String) {
    let s = studio.s();
    s.click(&format!("[id='check-{at}']")).unwrap();
    let line = s
        .wait_for(
            "the check",
            &format!(
                "const r = document.getElementById('check-result-{at}'); \
                 return r && r.textContent !== 'Checking…' && r.textContent"
            ),
            Duration::from_secs(60),
        )
        .unwrap();
    let ok = s
        .script(
            &format!("return document.getElementById('check-result-{at}').dataset.ok === 'true'"),
            json!([]),
        )
        .unwrap();
    (ok == json!(true), line.as_str().unwrap().to_owned())
}

/// A stand-in endpoint on a loopback port: every request gets 401, and the `Authorization`
/// header of each is kept (an empty string when it had none).
fn recording_endpoint() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut authorization = String::new();
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("authorization")
                {
                    authorization = value.trim().to_owned();
                }
                line.clear();
            }
            kept.lock().unwrap().push(authorization);
            let body = r#"{"error":{"message":"unauthorised"}}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, seen)
}

#[test]
fn a_key_in_a_real_keyring_reaches_the_endpoint_and_forgetting_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("keyring-home");
    std::fs::create_dir_all(&home).unwrap();
    // Declared before the studio, so that the bus outlives it.
    let (_bus, address) = envace_e2e::leaks::start_keyring(&home, "envace-e2e");
    let (url, seen) = recording_endpoint();
    let config = dir.path().join("keyed.toml");
    let text = envace::config::preset("quickstart")
        .unwrap()
        .toml
        .replace(
            "[judge]\nkind = \"rule\"",
            &format!("[judge]\nkind = \"llm\"\n\n[judge.endpoint]\nurl = \"{url}\"\nmodel = \"judge\"\napi_key_env = \"ENVACE_E2E_KEYRING_KEY\""),
        );
    std::fs::write(&config, &text).unwrap();
    assert!(std::env::var_os("ENVACE_E2E_KEYRING_KEY").is_none());
    let studio = Studio::open_with_env(
        &config,
        &dir.path().join("runs.sqlite"),
        &[("DBUS_SESSION_BUS_ADDRESS", &address)],
    );
    let s = studio.s();
    let secret = "sk-e2e-keyring-51c9";
    let result = |s: &envace_e2e::webdriver::Session| {
        s.wait_for(
            "the keyring's answer",
            "const r = document.getElementById('api-key-result-judge.endpoint'); \
             return r.dataset.ok !== undefined && [r.dataset.ok, r.textContent]",
            Duration::from_secs(30),
        )
        .unwrap()
    };
    s.type_into("[id='api-key-judge.endpoint']", secret)
        .unwrap();
    s.click("[id='api-key-save-judge.endpoint']").unwrap();
    let stored = result(s);
    assert_eq!(
        stored,
        json!([
            "true",
            "Stored in the OS keyring as ENVACE_E2E_KEYRING_KEY; used when the environment variable is not set."
        ])
    );
    studio.shot(
        "studio-editor-api-key-stored",
        Some("[id='api-key-result-judge.endpoint']"),
    );

    // The connection check sends the stored key (the variable is not set, so it can only have
    // come from the keyring); the endpoint refuses it, and the line says so.
    let (ok, line) = check_error(&studio, "judge.endpoint");
    assert!(!ok, "{line}");
    let headers = seen.lock().unwrap().clone();
    assert!(!headers.is_empty(), "the endpoint saw no request: {line}");
    assert!(
        headers.iter().all(|h| h == &format!("Bearer {secret}")),
        "{headers:?}"
    );

    // Saved files never hold the key.
    studio.save();
    assert!(!std::fs::read_to_string(&config).unwrap().contains(secret));

    // Forget removes it from the keyring: the next check has no key to send.
    s.click("[id='api-key-forget-judge.endpoint']").unwrap();
    s.wait_for(
        "the removal",
        "return document.getElementById('api-key-result-judge.endpoint').textContent === 'Removed the key stored as ENVACE_E2E_KEYRING_KEY.'",
        Duration::from_secs(30),
    )
    .unwrap();
    let (ok, line) = check_error(&studio, "judge.endpoint");
    assert!(!ok);
    assert!(
        line.contains("the environment variable ENVACE_E2E_KEYRING_KEY is not set and the OS keyring has no key under that name"),
        "{line}"
    );
}

#[test]
fn the_content_security_policy_refuses_a_fetch_beyond_the_studio() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("quickstart.toml");
    std::fs::write(&config, envace::config::preset("quickstart").unwrap().toml).unwrap();
    // A server on a loopback port stands for any host: nothing outside this machine can be
    // reached here, and this one counts the requests that arrive.
    let (url, seen) = recording_endpoint();
    let studio = Studio::open(&config, &dir.path().join("runs.sqlite"));
    let s = studio.s();
    for target in [format!("{url}/models"), "https://example.com/".to_owned()] {
        s.script(
            "window.__cspViolations = []; \
             document.addEventListener('securitypolicyviolation', \
                 (e) => window.__cspViolations.push([e.violatedDirective, e.blockedURI])); \
             window.__fetched = null; \
             fetch(arguments[0]).then( \
                 (r) => { window.__fetched = 'answered ' + r.status; }, \
                 (e) => { window.__fetched = 'refused: ' + e; });",
            json!([target]),
        )
        .unwrap();
        let done = s
            .wait_for(
                "the fetch to end",
                "return window.__fetched !== null && window.__cspViolations.length > 0 \
                    && [window.__fetched, window.__cspViolations]",
                Duration::from_secs(30),
            )
            .unwrap();
        let outcome = done[0].as_str().unwrap();
        assert!(outcome.starts_with("refused: "), "{target}: {outcome}");
        let violation = &done[1][0];
        assert!(
            violation[0].as_str().unwrap().starts_with("connect-src"),
            "{target}: {done}"
        );
        let origin = target.split('/').take(3).collect::<Vec<_>>().join("/");
        assert!(
            violation[1].as_str().unwrap().starts_with(&origin),
            "{target}: {done}"
        );
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "the loopback server got a request from the webview"
    );
}

#[test]
fn check_device_names_the_wgpu_adapter_rehearsal_will_generate_on() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wgpu.toml");
    std::fs::write(&config, envace::config::preset("quickstart").unwrap().toml).unwrap();
    let studio = Studio::open(&config, &dir.path().join("runs.sqlite"));
    let s = studio.s();
    // Everything on the CPU at first.
    let (ok, line) = check(&studio, "backend");
    assert!(ok, "{line}");
    assert_eq!(
        line,
        "Training on the CPU; acting and rehearsal generate there too"
    );

    // Rehearsal placed on wgpu in the form: lavapipe is this machine's adapter.
    s.click("[id='field-backend.rehearse_generation'] option[value='wgpu']")
        .unwrap();
    s.wait_for(
        "the placement in the file",
        "return document.getElementById('toml-view').value.includes('rehearse_generation = \"wgpu\"')",
        Duration::from_secs(10),
    )
    .unwrap();
    let (ok, line) = check(&studio, "backend");
    assert!(ok, "{line}");
    assert!(
        line.starts_with("Training on the CPU; rehearsal generates on llvmpipe"),
        "{line}"
    );
    studio.shot(
        "studio-editor-check-device",
        Some("[id='check-result-backend']"),
    );

    // An adapter name that matches nothing: the line names every backend tried.
    s.type_into(
        "[id='field-backend.wgpu_adapter']",
        &format!("no such gpu{}", envace_e2e::webdriver::TAB),
    )
    .unwrap();
    s.wait_for(
        "the adapter name in the file",
        "return document.getElementById('toml-view').value.includes('wgpu_adapter = \"no such gpu\"')",
        Duration::from_secs(10),
    )
    .unwrap();
    let (ok, line) = check(&studio, "backend");
    assert!(!ok, "{line}");
    assert!(
        line.starts_with(
            "rehearsal on wgpu: cannot open wgpu: no GPU adapter found; tried vulkan:"
        ) && line.contains("(none whose name contains `no such gpu`)"),
        "{line}"
    );
    studio.shot(
        "studio-editor-check-device-missing",
        Some("[id='check-result-backend']"),
    );
}
