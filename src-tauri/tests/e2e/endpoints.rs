//! End-to-end: the editor's "Check connection" against the engine's own `serve-model` server
//! (a tiny model, started in the test) and against a port where nothing listens.

use std::path::Path;
use std::time::Duration;

use candle_core::{DType, Device};
use envace::config::{self, Architecture};
use envace::model::{Policy, TransformerConfig};
use envace::serve::{LoadedModel, ServeOptions, serve};
use envace::tokenize;
use serde_json::json;

use super::Studio;

/// A tiny Llama with a trained tokenizer, saved as a Hugging Face folder.
fn tiny_model(dir: &Path) {
    let corpus =
        "<|im_start|>user\nready?<|im_end|>\n<|im_start|>assistant\nyes, ready<|im_end|>\n";
    let tokenizer = tokenize::train_bpe(std::iter::repeat_n(corpus, 8), 300).unwrap();
    let tiny = config::TinyModelConfig {
        architecture: Architecture::Llama,
        hidden_size: 32,
        n_layers: 1,
        n_heads: 2,
        n_kv_heads: 1,
        intermediate_size: 48,
        vocab_size: u32::try_from(tokenizer.get_vocab_size(true)).unwrap(),
        max_position_embeddings: 512,
        rope_theta: 10_000.0,
        tie_embeddings: true,
    };
    let cfg = TransformerConfig::from_tiny(&tiny).unwrap();
    Policy::init(cfg, 7, &Device::Cpu, DType::F32)
        .unwrap()
        .save(dir)
        .unwrap();
    tokenize::save(&tokenizer, &dir.join(tokenize::TOKENIZER_FILE)).unwrap();
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
