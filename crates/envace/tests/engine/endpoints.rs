//! The rollout engine against a real OpenAI-compatible endpoint: `envace serve-model`'s server
//! (SmolLM2 through the project's own generation code) started by the test answers as the
//! external simulator and as the LLM judge over real HTTP, and stopping it in the middle of a
//! batch masks exactly the episodes whose calls it no longer answered.
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envace::chat::ChatTemplate;
use envace::config::{Domain, EndpointConfig, MemoryPosition, TaskSplit, ToolPrompt};
use envace::judge::{EpisodeJudge, LlmJudge, RuleJudge, Verdict};
use envace::model;
use envace::openai::ChatClient;
use envace::rehearse::{ResponseCache, error_code};
use envace::rollout::{
    EndReason, EndpointSimulator, EpisodeSpec, OracleActor, ResponseMode, ResponseSource,
    RolloutSettings, SIMULATOR_UNAVAILABLE, Simulator, TokenCodec, run_batch,
};
use envace::serve::{LoadedModel, ServeOptions, Stopper, serve};
use envace::tasks::{self, GenConfig, GenSources, GenTask};
use envace::tokenize;
use serde_json::Value;

fn client(url: &str, max_concurrency: u32) -> ChatClient {
    ChatClient::new(&EndpointConfig {
        url: url.to_owned(),
        model: "smollm2".to_owned(),
        api_key_env: None,
        timeout_secs: 120.0,
        max_retries: 0,
        max_concurrency,
    })
    .unwrap()
    .with_backoff(Duration::from_millis(20), Duration::from_millis(50))
}

fn no_sources() -> GenSources {
    GenSources {
        retail: None,
        airline: None,
    }
}

fn function_tasks(n: usize) -> Vec<Arc<GenTask>> {
    let config = GenConfig {
        seed: 5,
        split: TaskSplit::Train,
        difficulty: 1,
        n_tasks: n,
        families: Vec::new(),
    };
    tasks::generate(Domain::Functions, &no_sources(), &config)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect()
}

fn codec() -> TokenCodec {
    let mut corpus = Vec::new();
    for task in function_tasks(20) {
        corpus.extend(task.oracle.iter().map(|m| m.content.clone()));
    }
    let tokenizer = tokenize::train_bpe(corpus.into_iter(), 500).unwrap();
    TokenCodec::new(tokenizer, ChatTemplate::chatml().unwrap(), &["<|im_end|>"]).unwrap()
}

fn settings() -> RolloutSettings {
    RolloutSettings {
        mode: ResponseMode::External,
        max_turns: 4,
        max_parallel_calls: 1,
        max_prompt_tokens: 100_000,
        max_response_tokens: 4096,
        n_few_shot: 1,
        max_conversation_chars: 600,
        fidelity: true,
        seed: 1,
        system_prompt: None,
        tool_prompt: ToolPrompt::Schemas,
        memory_position: MemoryPosition::default(),
        judge_as_shown: false,
    }
}

fn specs(tasks: &[Arc<GenTask>]) -> Vec<EpisodeSpec> {
    tasks
        .iter()
        .map(|t| EpisodeSpec {
            task: t.clone(),
            env: tasks::fresh_env(t.domain, &no_sources()).unwrap(),
            group: t.id.clone(),
            memory: None,
        })
        .collect()
}

fn start_server() -> envace::serve::ModelServer {
    let path = model::smollm2_gguf().unwrap_or_else(|e| panic!("{e}"));
    let model = LoadedModel::from_path(&path).unwrap();
    serve(
        model,
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &ServeOptions::default(),
    )
    .unwrap()
}

#[test]
fn the_served_model_answers_as_external_simulator_and_as_judge() {
    let server = start_server();
    let tasks = function_tasks(2);
    let simulator = EndpointSimulator {
        client: client(&server.url(), 4),
        max_tokens: 24,
    };
    let judge = RuleJudge::new(no_sources());
    let mut cache = ResponseCache::new(2);
    let episodes = run_batch(
        specs(&tasks),
        &settings(),
        &codec(),
        &mut OracleActor::new(&tasks),
        Some(&simulator),
        &judge,
        &mut cache,
    )
    .unwrap();
    for episode in &episodes {
        assert!(!episode.masked(), "{:?}", episode.mask_reason);
        let call = &episode.turns[0].calls[0];
        assert_eq!(call.source, ResponseSource::External);
        // Whatever the small model wrote is recorded and scored against the real answer.
        assert!(call.simulator_text.is_some());
        assert!(call.scores.is_some() && call.real.is_some());
    }
    assert!(server.stats().n_requests >= 2);

    // As judge: every verdict is either a score or a mask naming an unreadable verdict,
    // never a failed call.
    let judge = LlmJudge::new(client(&server.url(), 4)).with_max_tokens(48);
    let before = server.stats().n_requests;
    for task in &tasks {
        match judge.judge(task, &task.oracle) {
            Verdict::Scored { score, .. } => assert!((0.0..=1.0).contains(&score)),
            Verdict::Masked { reason } => {
                assert!(reason.contains("unreadable"), "{reason}");
            }
        }
    }
    assert_eq!(server.stats().n_requests, before + 2);
    server.shutdown();

    // A judge whose endpoint is gone masks instead of scoring 0.
    let gone = LlmJudge::new(client("http://127.0.0.1:9", 1));
    match gone.judge(&tasks[0], &tasks[0].oracle) {
        Verdict::Masked { reason } => assert!(reason.contains("call failed"), "{reason}"),
        other => panic!("expected a mask, got {other:?}"),
    }
}

/// Answers through the endpoint and stops the server once `stop_after` answers came back.
struct StoppingSimulator {
    inner: EndpointSimulator,
    gate: Mutex<()>,
    answered: AtomicUsize,
    stop_after: usize,
    stopper: Mutex<Option<Stopper>>,
}

impl Simulator for StoppingSimulator {
    fn simulate(&self, messages: &[Value]) -> Result<String, String> {
        // One call at a time, the stop included, so no call slips in while the server stops.
        let _gate = self.gate.lock().unwrap();
        let answer = self.inner.simulate(messages)?;
        if self.answered.fetch_add(1, Ordering::SeqCst) + 1 == self.stop_after
            && let Some(stopper) = self.stopper.lock().unwrap().take()
        {
            stopper.stop();
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(answer)
    }
}

#[test]
fn stopping_the_server_mid_batch_masks_exactly_the_unanswered_episodes() {
    let server = start_server();
    let tasks = function_tasks(4);
    let simulator = StoppingSimulator {
        // One request at a time, so the stop falls between two calls.
        inner: EndpointSimulator {
            client: client(&server.url(), 1),
            max_tokens: 16,
        },
        gate: Mutex::new(()),
        answered: AtomicUsize::new(0),
        stop_after: 2,
        stopper: Mutex::new(Some(server.stopper())),
    };
    let judge = RuleJudge::new(no_sources());
    let mut cache = ResponseCache::new(2);
    let episodes = run_batch(
        specs(&tasks),
        &settings(),
        &codec(),
        &mut OracleActor::new(&tasks),
        Some(&simulator),
        &judge,
        &mut cache,
    )
    .unwrap();
    let mut n_masked = 0;
    for episode in &episodes {
        let unanswered = episode.turns.iter().flat_map(|t| &t.calls).any(|c| {
            c.source == ResponseSource::External
                && error_code(&c.response) == Some(SIMULATOR_UNAVAILABLE)
        });
        assert_eq!(episode.masked(), unanswered, "{:?}", episode.end);
        if episode.masked() {
            n_masked += 1;
            assert!(matches!(episode.end, EndReason::Fault { .. }));
            assert!(episode.reward.is_none());
            assert!(
                episode
                    .mask_reason
                    .as_deref()
                    .unwrap()
                    .contains("external simulator"),
                "{:?}",
                episode.mask_reason
            );
        } else {
            assert!(episode.reward.is_some());
        }
    }
    assert_eq!(
        n_masked, 2,
        "two of four first calls were answered before the stop"
    );
    server.wait();
}
