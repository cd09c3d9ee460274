//! FinMCP-style tool metrics on a small OpenAI-format dataset: every figure (macro, micro,
//! exact match, per scenario and difficulty) against a hand computation, predictions in each
//! accepted form, a missing prediction, a model that cannot answer, and bad files named.

use std::path::PathBuf;

use envace::eval::toolmetrics::{
    SampleScore, load_samples, read_predictions, run_dataset, score_predictions,
};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/toolmetrics")
        .join(name)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn figures_match_a_hand_computation() {
    let samples = load_samples(&fixture("finance.jsonl")).unwrap();
    assert_eq!(samples.len(), 5);
    assert_eq!(samples[3].scenario, "fund_analysis", "read from metadata");
    assert_eq!(
        samples[1].gold_names(),
        ["get_stock_price", "get_stock_price", "get_exchange_rate"]
    );
    assert_eq!(samples[1].turns().len(), 3);
    let given = read_predictions(&fixture("predictions.jsonl")).unwrap();
    assert_eq!(given["s2"], ["get_stock_price", "get_exchange_rate"]);
    assert_eq!(given["s4"], ["get_stock_price", "get_fund_holdings"]);
    let report = score_predictions(&samples, &given);

    let by_id = |id: &str| report.samples.iter().find(|s| s.id == id).unwrap();
    let s2 = by_id("s2");
    assert!(close(s2.precision, 1.0) && close(s2.recall, 2.0 / 3.0) && close(s2.f1, 0.8));
    let s3 = by_id("s3");
    assert!(close(s3.precision, 0.5) && close(s3.recall, 1.0) && close(s3.f1, 2.0 / 3.0));
    let s4 = by_id("s4");
    assert!(
        close(s4.f1, 1.0) && !s4.exact,
        "the same tools in another order"
    );
    let s5 = by_id("s5");
    assert!(close(s5.precision, 0.0) && close(s5.recall, 1.0) && close(s5.f1, 0.0));

    let m = &report.overall;
    assert_eq!(m.n_samples, 5);
    assert!(close(m.precision_macro, 3.5 / 5.0));
    assert!(close(m.recall_macro, (4.0 + 2.0 / 3.0) / 5.0));
    assert!(close(m.f1_macro, (1.0 + 0.8 + 2.0 / 3.0 + 1.0) / 5.0));
    // Pooled: 6 names right of 8 predicted and 7 expected.
    assert!(close(m.precision_micro, 0.75));
    assert!(close(m.recall_micro, 6.0 / 7.0));
    assert!(close(m.f1_micro, 0.8));
    assert!(close(m.exact_match, 0.2));

    assert_eq!(
        report.by_scenario.keys().collect::<Vec<_>>(),
        ["fund_analysis", "stock_query"]
    );
    assert!(close(report.by_scenario["stock_query"].f1_macro, 0.6));
    assert!(close(
        report.by_scenario["fund_analysis"].f1_macro,
        (2.0 / 3.0 + 1.0) / 2.0
    ));
    assert!(close(
        report.by_difficulty["easy"].f1_macro,
        (1.0 + 2.0 / 3.0) / 3.0
    ));
    assert!(close(report.by_difficulty["hard"].f1_macro, 0.9));
}

#[test]
fn a_missing_prediction_counts_as_calling_nothing_and_says_so() {
    let samples = load_samples(&fixture("finance.jsonl")).unwrap();
    let mut given = read_predictions(&fixture("predictions.jsonl")).unwrap();
    given.remove("s1");
    let report = score_predictions(&samples, &given);
    let s1 = &report.samples[0];
    assert_eq!(s1.predicted, Vec::<String>::new());
    assert_eq!(s1.failure.as_deref(), Some("no prediction given"));
    assert!(close(s1.recall, 0.0) && close(s1.f1, 0.0));
    // Nothing expected and nothing called is right.
    let s5 = SampleScore::of(&samples[4], Vec::new(), None);
    assert!(close(s5.f1, 1.0) && s5.exact);
}

#[test]
fn a_model_that_cannot_answer_is_scored_as_calling_nothing() {
    let samples = load_samples(&fixture("finance.jsonl")).unwrap();
    let client = envace::openai::ChatClient::new(&envace::config::EndpointConfig {
        url: "http://127.0.0.1:9/v1".into(),
        model: "m".into(),
        api_key_env: None,
        timeout_secs: 1.0,
        max_retries: 0,
        max_concurrency: 2,
    })
    .unwrap();
    let report = run_dataset(&client, &samples, 16, 2, &|_, _| {});
    assert_eq!(report.samples.len(), 5);
    assert!(
        report
            .samples
            .iter()
            .all(|s| s.failure.as_deref().is_some_and(|w| w.starts_with("turn ")))
    );
    assert!(close(report.overall.recall_micro, 0.0));
}

#[test]
fn bad_files_name_the_file_the_sample_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.jsonl");
    let cases = [
        ("{\"id\": \"a\"}\n", "line 1 (id a): `messages` is required"),
        (
            "{\"id\": \"a\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n",
            "no assistant message",
        ),
        (
            "{\"id\": \"a\", \"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"function\": {}}]}]}\n",
            "messages[0].tool_calls[0].function.name",
        ),
        ("\n{oops\n", "line 2: not JSON"),
        ("[{\"messages\": 3}]", "sample 0 (id 0)"),
    ];
    for (text, says) in cases {
        std::fs::write(&path, text).unwrap();
        let err = load_samples(&path).unwrap_err().to_string();
        assert!(
            err.contains(&path.display().to_string()) && err.contains(says),
            "{err}"
        );
    }
    std::fs::write(&path, "{\"id\": \"a\", \"tool_calls\": [3]}\n").unwrap();
    let err = read_predictions(&path).unwrap_err().to_string();
    assert!(
        err.contains("line 1: tool_calls[0] is neither a name"),
        "{err}"
    );
    std::fs::write(&path, "{\"tool_calls\": []}\n").unwrap();
    assert!(
        read_predictions(&path)
            .unwrap_err()
            .to_string()
            .contains("`id` is required")
    );
}
