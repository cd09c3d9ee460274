//! Episode-engine tests: scripted policies (deterministic stand-ins for the model) drive every
//! branch of the real engine on generated tasks and real environments: each rehearse parser
//! error code, `error_tool_call` termination, turn and call limits, left truncation, mixed-mode
//! statistics, fidelity 1.0 with the real environment answering in rehearsal's place and the
//! exact drop under a corrupted simulator; then the tiny model rehearses and the batch goes
//! through the run store and back intact.
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use candle_core::{D, Device, Tensor};
use envace::chat::ChatTemplate;
use envace::config::{Domain, MemoryPosition, PolicyRole, TaskSplit, ToolPrompt};
use envace::env::Environment;
use envace::judge::RuleJudge;
use envace::model::Sampling;
use envace::rehearse::{ResponseCache, SimErrorCode, execution_result_block, outcome_json};
use envace::rl::{TrainItem, pad_batch, token_logprobs};
use envace::rollout::{
    EndReason, EpisodeRecord, EpisodeSpec, GenerationRequest, Label, OracleActor, PolicyGenerator,
    ResponseMode, ResponseSource, RoleRouter, RolloutSettings, Scripted, TokenCodec, load_episodes,
    record_episodes, run_batch,
};
use envace::store::{Batch, Store};
use envace::tasks::{self, GenConfig, GenSources, GenTask};
use envace::tokenize;

use super::train::random_policy;
use serde_json::{Value, json};

/// The τ²-bench domains (shared with the task suite).
fn sources() -> &'static GenSources {
    super::tasks::sources()
}

fn gen_tasks(domain: Domain, difficulty: u32, n_tasks: usize) -> Vec<Arc<GenTask>> {
    let config = GenConfig {
        seed: 11,
        split: TaskSplit::Train,
        difficulty,
        n_tasks,
        families: Vec::new(),
    };
    tasks::generate(domain, sources(), &config)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect()
}

/// A byte-level BPE trained on the tasks' oracle texts, with ChatML, stopping at `<|im_end|>`.
fn codec() -> TokenCodec {
    static TOKENIZER: OnceLock<tokenize::Tokenizer> = OnceLock::new();
    let tokenizer = TOKENIZER.get_or_init(|| {
        let mut corpus = Vec::new();
        for domain in [Domain::Retail, Domain::Functions] {
            for task in gen_tasks(domain, 2, 60) {
                corpus.extend(task.oracle.iter().map(|m| m.content.clone()));
            }
        }
        tokenize::train_bpe(corpus.into_iter(), 600).unwrap()
    });
    TokenCodec::new(
        tokenizer.clone(),
        ChatTemplate::chatml().unwrap(),
        &["<|im_end|>"],
    )
    .unwrap()
}

fn settings(mode: ResponseMode) -> RolloutSettings {
    RolloutSettings {
        mode,
        max_turns: 8,
        max_parallel_calls: 4,
        max_prompt_tokens: 100_000,
        max_response_tokens: 4096,
        n_few_shot: 1,
        max_conversation_chars: 2000,
        fidelity: true,
        seed: 3,
        system_prompt: None,
        tool_prompt: ToolPrompt::Schemas,
        memory_position: MemoryPosition::default(),
        judge_as_shown: false,
    }
}

fn specs(tasks: &[Arc<GenTask>]) -> Vec<EpisodeSpec> {
    tasks
        .iter()
        .map(|task| EpisodeSpec {
            task: task.clone(),
            env: tasks::fresh_env(task.domain, sources()).unwrap(),
            group: task.id.clone(),
            memory: None,
        })
        .collect()
}

/// The current call of a rehearse prompt: `tool: NAME` and `arguments: JSON` after
/// `# Current call`.
fn current_call(prompt: &str) -> (String, Value) {
    let section = &prompt[prompt.rfind("# Current call").unwrap()..];
    let name = section
        .lines()
        .find_map(|l| l.strip_prefix("tool: "))
        .unwrap()
        .to_owned();
    let arguments = section
        .lines()
        .find_map(|l| l.strip_prefix("arguments: "))
        .unwrap();
    (name, serde_json::from_str(arguments).unwrap())
}

/// A rehearser that runs each call on its own real environment per episode, in order, and
/// lets `corrupt` change the answer.
fn real_rehearser(
    tasks: &[Arc<GenTask>],
    corrupt: impl Fn(&str, Value) -> Option<String>,
) -> impl FnMut(&GenerationRequest, &str) -> String {
    let mut envs: Vec<Box<dyn Environment>> = tasks
        .iter()
        .map(|t| tasks::fresh_env(t.domain, sources()).unwrap())
        .collect();
    move |request, prompt| {
        let (name, arguments) = current_call(prompt);
        let answer = outcome_json(&envs[request.episode_idx].call(&name, &arguments));
        corrupt(&name, answer.clone()).unwrap_or_else(|| execution_result_block(&answer))
    }
}

fn run(
    tasks: &[Arc<GenTask>],
    settings: &RolloutSettings,
    act: &mut dyn envace::rollout::Generator,
    rehearse: &mut dyn envace::rollout::Generator,
) -> Vec<EpisodeRecord> {
    let codec = codec();
    let judge = RuleJudge::new(sources().clone());
    let mut cache = ResponseCache::new(4);
    let mut router = RoleRouter { act, rehearse };
    run_batch(
        specs(tasks),
        settings,
        &codec,
        &mut router,
        None,
        &judge,
        &mut cache,
    )
    .unwrap()
}

fn mixed_tasks() -> Vec<Arc<GenTask>> {
    let mut all = gen_tasks(Domain::Retail, 3, 6);
    all.extend(gen_tasks(Domain::Functions, 5, 6));
    all
}

#[test]
fn oracle_with_the_real_environment_rehearsing_scores_full_fidelity() {
    let tasks = mixed_tasks();
    let rehearsed = run(
        &tasks,
        &settings(ResponseMode::Rehearse),
        &mut OracleActor::new(&tasks),
        &mut Scripted::new(real_rehearser(&tasks, |_, _| None)),
    );
    let real = run(
        &tasks,
        &settings(ResponseMode::Real),
        &mut OracleActor::new(&tasks),
        &mut Scripted::new(|_: &GenerationRequest, _: &str| {
            unreachable!("real mode never rehearses")
        }),
    );
    let mut n_pairs = 0;
    for (episode, real_episode) in rehearsed.iter().zip(&real) {
        assert_eq!(episode.end, EndReason::FinalAnswer, "{}", episode.task_id);
        assert_eq!(
            episode.reward,
            Some(1.0),
            "{}: {}",
            episode.task_id,
            episode.judge
        );
        assert_eq!(real_episode.reward, Some(1.0));
        // A perfect simulator gives the acting policy exactly the real context.
        assert_eq!(episode.messages, real_episode.messages);
        assert_eq!(episode.samples[0].tokens, real_episode.samples[0].tokens);
        assert_eq!(episode.samples[0].labels, real_episode.samples[0].labels);
        for (_, call) in episode.fidelity_calls() {
            n_pairs += 1;
            let s = call.scores.unwrap();
            assert!(
                s.valid_json && s.outcome_agrees && s.exact_match,
                "{call:?}"
            );
            assert_eq!((s.key_f1, s.value_accuracy), (1.0, 1.0));
            assert_eq!(call.source, ResponseSource::Rehearse);
        }
        let n_calls: usize = episode.turns.iter().map(|t| t.calls.len()).sum();
        assert_eq!(episode.samples.len(), 1 + n_calls);
        assert!(real_episode.fidelity_calls().next().is_none());
    }
    assert!(n_pairs >= 20, "only {n_pairs} rehearsed calls");
}

#[test]
fn tool_names_prompts_carry_no_schemas_and_still_solve_tasks() {
    let tasks = gen_tasks(Domain::Functions, 2, 6);
    let mut settings = settings(ResponseMode::Rehearse);
    settings.tool_prompt = ToolPrompt::Names;
    let mut rehearse_prompts = Vec::new();
    let episodes = {
        let mut answer = real_rehearser(&tasks, |_, _| None);
        let mut rehearser = Scripted::new(|request: &GenerationRequest, prompt: &str| {
            rehearse_prompts.push(prompt.to_owned());
            answer(request, prompt)
        });
        run(
            &tasks,
            &settings,
            &mut OracleActor::new(&tasks),
            &mut rehearser,
        )
    };
    let codec = codec();
    for episode in &episodes {
        assert_eq!(episode.reward, Some(1.0), "{}", episode.judge);
        let act = codec.decode(&episode.samples[0].tokens).unwrap();
        assert!(
            act.starts_with("<|im_start|>system\nTools: add, subtract, multiply, power,"),
            "{act}"
        );
        assert!(
            !act.contains("<tools>") && !act.contains("\"parameters\""),
            "{act}"
        );
    }
    assert!(!rehearse_prompts.is_empty());
    for prompt in &rehearse_prompts {
        assert!(
            prompt.contains("# Candidate tools\nadd, subtract, "),
            "{prompt}"
        );
        assert!(
            !prompt.contains("schema:") && !prompt.contains("First addend"),
            "{prompt}"
        );
    }
}

/// Changes the first string leaf of an object answer.
fn corrupt_first_string(value: &mut Value) -> bool {
    match value {
        Value::String(s) => {
            s.push_str("-corrupted");
            true
        }
        Value::Object(map) => map.values_mut().any(corrupt_first_string),
        Value::Array(items) => items.iter_mut().any(corrupt_first_string),
        _ => false,
    }
}

#[test]
fn a_corrupted_simulator_loses_exactly_the_corrupted_values() {
    let tasks = gen_tasks(Domain::Retail, 2, 6);
    let episodes = run(
        &tasks,
        &settings(ResponseMode::Rehearse),
        &mut OracleActor::new(&tasks),
        &mut Scripted::new(real_rehearser(&tasks, |_, mut answer| {
            corrupt_first_string(&mut answer).then(|| execution_result_block(&answer))
        })),
    );
    let mut n_checked = 0;
    for episode in &episodes {
        for (_, call) in episode.fidelity_calls() {
            let s = call.scores.unwrap();
            let real = call.real.as_ref().unwrap();
            let n_leaves = envace::rehearse::leaves(real).len() as f64;
            let has_string = {
                let mut probe = real.clone();
                corrupt_first_string(&mut probe)
            };
            assert!(s.valid_json && s.outcome_agrees, "{call:?}");
            assert_eq!(s.key_f1, 1.0, "keys are untouched: {call:?}");
            if has_string {
                n_checked += 1;
                assert!(!s.exact_match);
                assert!(
                    (s.value_accuracy - (n_leaves - 1.0) / n_leaves).abs() < 1e-12,
                    "one of {n_leaves} leaves wrong: {call:?}"
                );
            } else {
                assert!(s.exact_match && s.value_accuracy == 1.0);
            }
        }
    }
    assert!(n_checked >= 6, "only {n_checked} corrupted answers");
}

#[test]
fn every_unreadable_rehearsal_ends_the_episode_with_its_code() {
    let cases = [
        ("", SimErrorCode::EmptySimulatorOutput),
        (
            "the order is pending",
            SimErrorCode::NoExecutionResultTagFound,
        ),
        (
            "<execution_result>{\"a\": 1}",
            SimErrorCode::ExecutionResultTagMalformed,
        ),
        (
            "<execution_result>{\"a\": </execution_result>",
            SimErrorCode::SimulatorJsonDecodeError,
        ),
        (
            "<execution_result>42</execution_result>",
            SimErrorCode::InvalidExecutionResultType,
        ),
    ];
    let tasks = gen_tasks(Domain::Retail, 1, 1);
    for (answer, code) in cases {
        let episodes = run(
            &tasks,
            &settings(ResponseMode::Rehearse),
            &mut OracleActor::new(&tasks),
            &mut Scripted::new(move |_: &GenerationRequest, _: &str| answer.to_owned()),
        );
        let episode = &episodes[0];
        assert_eq!(
            episode.end,
            EndReason::ErrorToolCall {
                code: code.as_str().to_owned()
            }
        );
        assert_eq!(
            episode.turns.len(),
            1,
            "the trajectory ends at the first call"
        );
        let call = &episode.turns[0].calls[0];
        assert_eq!(call.simulator_text.as_deref(), Some(answer));
        let scores = call.scores.unwrap();
        assert!(!scores.valid_json && !scores.outcome_agrees);
        // The tool message shows the error to the record; no further act turn is generated.
        assert_eq!(
            episode.messages.last().unwrap().role,
            envace::chat::Role::Tool
        );
        assert!(episode.reward.is_some(), "an ended episode is still judged");
    }
}

#[test]
fn turn_and_parallel_call_limits_hold() {
    let tasks = gen_tasks(Domain::Functions, 1, 2);
    let mut settings = settings(ResponseMode::Real);
    settings.max_turns = 3;
    settings.max_parallel_calls = 2;
    let call =
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
    let turn = format!("{call}\n{call}\n{call}\n<tool_call>\nnot json\n</tool_call>");
    let episodes = run(
        &tasks,
        &settings,
        &mut Scripted::new(move |_: &GenerationRequest, _: &str| turn.clone()),
        &mut Scripted::new(|_: &GenerationRequest, _: &str| unreachable!()),
    );
    for episode in &episodes {
        assert_eq!(episode.end, EndReason::MaxTurns);
        assert_eq!(episode.turns.len(), 3);
        for turn in &episode.turns {
            let sources: Vec<ResponseSource> = turn.calls.iter().map(|c| c.source).collect();
            assert_eq!(
                sources,
                [
                    ResponseSource::Real,
                    ResponseSource::Real,
                    ResponseSource::Limit,
                    ResponseSource::Limit
                ]
            );
            assert_eq!(
                turn.calls[2].response["error"]["code"],
                json!("TOO_MANY_TOOL_CALLS")
            );
            assert!(turn.calls[3].name.is_none() && turn.calls[3].raw.is_some());
        }
        // Three act generations, injected text after the first two only.
        assert_eq!(episode.samples[0].windows.len(), 3);
    }
}

#[test]
fn malformed_calls_get_the_format_error_from_the_real_environment() {
    let tasks = gen_tasks(Domain::Functions, 1, 1);
    let mut settings = settings(ResponseMode::Real);
    settings.max_turns = 1;
    let episodes = run(
        &tasks,
        &settings,
        &mut Scripted::new(|_: &GenerationRequest, _: &str| {
            "<tool_call>\n{\"name\": \"add\"}\n</tool_call>".to_owned()
        }),
        &mut Scripted::new(|_: &GenerationRequest, _: &str| unreachable!()),
    );
    let call = &episodes[0].turns[0].calls[0];
    assert_eq!(
        call.response["error"]["code"],
        json!("INVALID_TOOL_CALL_FORMAT")
    );
}

#[test]
fn long_contexts_are_cut_from_the_left() {
    let tasks = gen_tasks(Domain::Functions, 1, 2);
    let mut settings = settings(ResponseMode::Real);
    settings.max_turns = 4;
    settings.max_prompt_tokens = 64;
    let call =
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
    let mut seen = Vec::new();
    let episodes = {
        let mut actor = Scripted::new(|request: &GenerationRequest, _: &str| {
            seen.push(request.prompt.len());
            call.to_owned()
        });
        run(
            &tasks,
            &settings,
            &mut actor,
            &mut Scripted::new(|_: &GenerationRequest, _: &str| unreachable!()),
        )
    };
    assert!(seen.iter().all(|&n| n == 64), "{seen:?}");
    for episode in &episodes {
        let act = &episode.samples[0];
        for window in &act.windows {
            assert_eq!(window.start - window.context_start, 64);
        }
        assert!(
            act.windows
                .windows(2)
                .all(|w| w[0].end <= w[1].context_start + 64)
        );
    }
}

/// Every act prompt of a run: (episode, tokens, text).
type Prompts = Vec<(usize, usize, String)>;

/// Runs two tasks for 4 turns of one call each with a memory, in 200-token prompts; returns
/// the tasks, every act prompt and the episodes.
fn long_contexts(position: MemoryPosition) -> (Vec<Arc<GenTask>>, Prompts, Vec<EpisodeRecord>) {
    let tasks = gen_tasks(Domain::Functions, 1, 2);
    let mut settings = settings(ResponseMode::Real);
    settings.max_turns = 4;
    settings.tool_prompt = ToolPrompt::Names;
    settings.max_prompt_tokens = 200;
    settings.memory_position = position;
    let call =
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
    let mut prompts: Prompts = Vec::new();
    let episodes = {
        let mut actor = Scripted::new(|request: &GenerationRequest, prompt: &str| {
            prompts.push((request.episode_idx, request.prompt.len(), prompt.to_owned()));
            call.to_owned()
        });
        let codec = codec();
        let mut specs = specs(&tasks);
        for spec in &mut specs {
            spec.memory = Some(LONG_MEMORY.to_owned());
        }
        run_batch(
            specs,
            &settings,
            &codec,
            &mut RoleRouter {
                act: &mut actor,
                rehearse: &mut Scripted::new(|_: &GenerationRequest, _: &str| unreachable!()),
            },
            None,
            &RuleJudge::new(sources().clone()),
            &mut ResponseCache::new(4),
        )
        .unwrap()
    };
    for (_, len, prompt) in &prompts {
        assert!(*len <= 200, "{len} tokens");
        assert!(
            prompt.starts_with("<|im_start|>system\nTools: add, subtract"),
            "{prompt:?}"
        );
    }
    for episode in &episodes {
        let act = &episode.samples[0];
        let cut = act.windows.iter().filter(|w| w.pinned > 0).count();
        assert!(cut > 0, "later turns cut the middle: {:?}", act.windows);
        for window in &act.windows {
            assert!(window.pinned + window.start - window.context_start <= 200);
            // The context the window names is the prompt the generator saw.
            let context = window.context(&act.tokens);
            assert!(context.len() <= 200);
        }
    }
    (tasks, prompts, episodes)
}

const LONG_MEMORY: &str =
    "Private rehearsal (imagined attempts; nothing was executed):\nAttempt 1: add";

#[test]
fn long_contexts_keep_the_system_turn_and_the_request_and_lose_the_oldest_middle() {
    // A memory after the request: every prompt holds the request; the memory goes first.
    let (tasks, prompts, _) = long_contexts(MemoryPosition::AfterRequest);
    for (episode_idx, _, prompt) in &prompts {
        assert!(prompt.contains(&tasks[*episode_idx].request), "{prompt:?}");
    }
    let first = &prompts[0].2;
    let request_at = first.find(&tasks[prompts[0].0].request).unwrap();
    assert!(
        first.find(LONG_MEMORY).is_some_and(|at| at > request_at),
        "{first:?}"
    );
    let last = &prompts.last().unwrap().2;
    assert!(!last.contains("Attempt 1: add"), "{last:?}");
}

#[test]
fn a_memory_before_the_request_is_cut_before_the_request() {
    let (tasks, prompts, _) = long_contexts(MemoryPosition::BeforeRequest);
    // The first turn sees the memory just before the request, the request last.
    let first = &prompts[0].2;
    let request_at = first.find(&tasks[prompts[0].0].request).unwrap();
    assert!(
        first.find(LONG_MEMORY).is_some_and(|at| at < request_at),
        "{first:?}"
    );
    // A prompt that still holds any of the memory holds the whole request: the memory (the
    // oldest middle after the system turn) is cut first.
    for (episode_idx, _, prompt) in &prompts {
        if prompt.contains("Attempt 1: add") || prompt.contains("nothing was executed") {
            assert!(prompt.contains(&tasks[*episode_idx].request), "{prompt:?}");
        }
    }
    let last = &prompts.last().unwrap().2;
    assert!(!last.contains("Attempt 1: add"), "{last:?}");
}

#[test]
fn every_sampled_token_is_trained_on_the_context_it_was_generated_in() {
    // Later turns were generated after the middle of the conversation was cut; training must
    // score each turn on exactly the prompt its generator saw, not on the whole conversation.
    let (_, _, episodes) = long_contexts(MemoryPosition::BeforeRequest);
    let codec = codec();
    let policy = random_policy(codec.tokenizer().get_vocab_size(true) as u32, 32, 3);
    let logprobs_after = |context: &[u32], tokens: &[u32]| -> Vec<f32> {
        let whole: Vec<u32> = context.iter().chain(tokens).copied().collect();
        let input = Tensor::from_vec(whole.clone(), (1, whole.len()), &Device::Cpu).unwrap();
        let logits = policy.forward_train(&input, None).unwrap();
        let logp = candle_nn::ops::log_softmax(&logits, D::Minus1)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        (0..tokens.len())
            .map(|k| logp[context.len() - 1 + k][tokens[k] as usize])
            .collect()
    };
    for episode in &episodes {
        let act = &episode.samples[0];
        // What generation computed: each window's tokens after the context it names.
        let mut expected = BTreeMap::new();
        for window in &act.windows {
            let context = window.context(&act.tokens);
            let got = logprobs_after(&context, &act.tokens[window.start..window.end]);
            expected.extend((window.start..window.end).zip(got));
        }
        let items = TrainItem::of_sample(act, 1.0);
        let n_contexts = act
            .windows
            .iter()
            .map(|w| (w.context_start, w.pinned))
            .collect::<BTreeSet<_>>()
            .len();
        assert_eq!(items.len(), n_contexts);
        assert!(items.len() > 1, "no turn was cut: {:?}", act.windows);
        // What training computes: every sampled token once, on the same context.
        let mut trained = BTreeMap::new();
        for item in &items {
            let batch = pad_batch(&[item], 200 + 64, &[PolicyRole::Act], &Device::Cpu).unwrap();
            let (logp, _) = token_logprobs(&policy, &batch, false).unwrap();
            let logp = logp.squeeze(0).unwrap().to_vec1::<f32>().unwrap();
            let weight = batch.weight.squeeze(0).unwrap().to_vec1::<f32>().unwrap();
            let got: Vec<f32> = logp
                .iter()
                .zip(&weight)
                .filter(|(_, w)| **w > 0.0)
                .map(|(lp, _)| *lp)
                .collect();
            let own: Vec<usize> = (0..item.labels.len())
                .filter(|&pos| item.labels[pos] == Label::Act)
                .collect();
            assert_eq!(got.len(), own.len(), "every own token is trained");
            for (pos, lp) in own.into_iter().zip(got) {
                assert!(
                    trained.insert(pos, lp).is_none(),
                    "token {pos} trained twice"
                );
            }
        }
        assert_eq!(
            trained.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>()
        );
        for (pos, lp) in &trained {
            let want = expected[pos];
            assert!(
                (lp - want).abs() < 1e-4,
                "token {pos}: trained at {lp}, generated at {want}"
            );
        }
    }
}

#[test]
fn mixed_mode_rehearses_at_the_configured_rate() {
    let p = 0.3;
    let tasks: Vec<Arc<GenTask>> = gen_tasks(Domain::Functions, 1, 40);
    let mut settings = settings(ResponseMode::Mixed {
        rehearse_probability: p,
    });
    settings.max_turns = 50;
    settings.max_parallel_calls = 1;
    let call =
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
    let episodes = run(
        &tasks,
        &settings,
        &mut Scripted::new(|_: &GenerationRequest, _: &str| call.to_owned()),
        &mut Scripted::new(|_: &GenerationRequest, _: &str| {
            "<execution_result>\n{\"result\": 3}\n</execution_result>".to_owned()
        }),
    );
    let calls: Vec<ResponseSource> = episodes
        .iter()
        .flat_map(|e| {
            e.turns
                .iter()
                .flat_map(|t| t.calls.iter().map(|c| c.source))
        })
        .collect();
    assert_eq!(calls.len(), 2000);
    let n_rehearsed = calls
        .iter()
        .filter(|&&s| s == ResponseSource::Rehearse)
        .count() as f64;
    let n = calls.len() as f64;
    let sigma = (n * p * (1.0 - p)).sqrt();
    assert!(
        (n_rehearsed - n * p).abs() <= 3.0 * sigma,
        "{n_rehearsed} rehearsed of {n}, expected {} ± {}",
        n * p,
        3.0 * sigma
    );
    // Real and rehearsed answers agree here, so the act context never depends on the draw.
    assert!(episodes.iter().all(|e| e.end == EndReason::MaxTurns));
}

#[test]
fn labels_mark_prompt_act_injected_and_rehearse_tokens() {
    let tasks = gen_tasks(Domain::Retail, 1, 2);
    let codec = codec();
    let episodes = run(
        &tasks,
        &settings(ResponseMode::Rehearse),
        &mut OracleActor::new(&tasks),
        &mut Scripted::new(real_rehearser(&tasks, |_, _| None)),
    );
    for episode in &episodes {
        let act = &episode.samples[0];
        assert_eq!(act.role, PolicyRole::Act);
        assert_eq!(act.labels[0], Label::Prompt);
        assert_eq!(act.count(Label::Rehearse), 0);
        assert_eq!(act.logprobs.len(), act.count(Label::Act));
        // The sampled tokens decode to the turns' texts plus their stop tokens.
        for (window, turn) in act.windows.iter().zip(&episode.turns) {
            assert!(
                act.labels[window.start..window.end]
                    .iter()
                    .all(|&l| l == Label::Act)
            );
            let text = codec.decode(&act.tokens[window.start..window.end]).unwrap();
            assert_eq!(text, format!("{}<|im_end|>", turn.text));
        }
        // The whole acting sequence is the rendering of the conversation.
        let rendered = codec.decode(&act.tokens).unwrap();
        assert!(rendered.contains("<tool_response>"), "{rendered}");
        for sample in &episode.samples[1..] {
            assert_eq!(sample.role, PolicyRole::Rehearse);
            assert_eq!(sample.count(Label::Act), 0);
            assert_eq!(sample.logprobs.len(), sample.count(Label::Rehearse));
            assert!(sample.call.is_some());
            let prompt = codec
                .decode(&sample.tokens[..sample.windows[0].start])
                .unwrap();
            assert!(prompt.contains("silent tool executor"));
        }
    }
}

#[test]
fn the_tiny_model_rehearses_and_the_batch_round_trips_through_the_store() {
    let tasks = gen_tasks(Domain::Retail, 1, 3);
    let codec = codec();
    let policy = random_policy(codec.tokenizer().get_vocab_size(true) as u32, 64, 5);
    let mut rehearser = PolicyGenerator {
        policy,
        sampling: Sampling {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed: 0,
        },
        max_batch: 8,
    };
    let mut settings = settings(ResponseMode::Rehearse);
    settings.max_response_tokens = 24;
    settings.max_prompt_tokens = 1024;
    let episodes = run(
        &tasks,
        &settings,
        &mut OracleActor::new(&tasks),
        &mut rehearser,
    );
    let mut n_rehearsed = 0;
    for episode in &episodes {
        for sample in &episode.samples[1..] {
            n_rehearsed += 1;
            let n_new = sample.count(Label::Rehearse);
            assert!((1..=24).contains(&n_new));
            assert_eq!(sample.logprobs.len(), n_new);
            assert!(
                sample
                    .logprobs
                    .iter()
                    .all(|lp| lp.is_finite() && *lp <= 0.0)
            );
        }
        // An untrained model's answers are data: recorded, scored, never a crash.
        assert!(episode.fidelity_calls().count() >= 1);
        assert!(episode.reward.is_some());
    }
    assert!(n_rehearsed >= 3);

    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("runs.sqlite")).unwrap();
    let run_id = store.create_run("rollout-test", "").unwrap();
    let mut batch = Batch::new(run_id);
    record_episodes(&mut batch, 7, &episodes).unwrap();
    let n_pairs = batch.fidelity.len();
    store.write(&batch).unwrap();
    let (loaded, pairs) = store
        .read(|view| Ok((load_episodes(view, run_id)?, view.fidelity_pairs(run_id)?)))
        .unwrap();
    assert_eq!(loaded.len(), episodes.len());
    for ((step, back), original) in loaded.iter().zip(&episodes) {
        assert_eq!(*step, 7);
        assert_eq!(back, original);
    }
    assert_eq!(pairs.len(), n_pairs);
    assert!(pairs.iter().all(|p| p.step == 7 && !p.tool.is_empty()));
}

/// A leaf as a generated task's answer states it: strings unquoted, numbers as JSON.
fn stated(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Changes the first leaf of an answer: a string becomes `wrongvalue`, a number grows by 7.
/// Returns the leaf as stated before and after.
fn corrupt_first_leaf(value: &mut Value) -> Option<(String, String)> {
    let before = stated(value);
    match value {
        Value::String(s) => {
            *s = "wrongvalue".to_owned();
            Some((before, "wrongvalue".to_owned()))
        }
        Value::Number(n) if n.is_i64() => {
            *value = json!(n.as_i64().unwrap() + 7);
            Some((before, stated(value)))
        }
        Value::Object(map) => map.values_mut().find_map(corrupt_first_leaf),
        Value::Array(items) => items.iter_mut().find_map(corrupt_first_leaf),
        _ => None,
    }
}

#[test]
fn judged_as_shown_a_faithful_report_of_a_wrong_rehearsal_scores_as_right() {
    let tasks: Vec<Arc<GenTask>> = gen_tasks(Domain::Functions, 1, 8);
    // What each episode's rehearser changed, as stated (real, shown).
    let swaps = Arc::new(std::sync::Mutex::new(vec![Vec::new(); tasks.len()]));
    let wrong_rehearser = || {
        let swaps = swaps.clone();
        let mut answer = real_rehearser(&tasks, |_, _| None);
        Scripted::new(move |request: &GenerationRequest, prompt: &str| {
            let block = answer(request, prompt);
            let mut value = envace::rehearse::parse_execution_result(&block).unwrap();
            match corrupt_first_leaf(&mut value) {
                Some(swap) => {
                    swaps.lock().unwrap()[request.episode_idx].push(swap);
                    execution_result_block(&value)
                }
                None => block,
            }
        })
    };
    // An actor that reports what it was shown: the oracle's answer with the shown values.
    let oracle_turns: Vec<Vec<String>> = tasks
        .iter()
        .map(|task| {
            let turns = task
                .oracle
                .iter()
                .filter(|m| m.role == envace::chat::Role::Assistant);
            turns.map(|m| m.content.clone()).collect()
        })
        .collect();
    // Episodes whose final answer states a value the rehearser changed.
    let reported = Arc::new(std::sync::Mutex::new(vec![false; tasks.len()]));
    let mut faithful = {
        let (swaps, reported) = (swaps.clone(), reported.clone());
        Scripted::new(move |request: &GenerationRequest, _: &str| {
            let oracle = &oracle_turns[request.episode_idx][request.turn_idx];
            let mut text = oracle.clone();
            if !text.contains("<tool_call>") {
                for (real, shown) in &swaps.lock().unwrap()[request.episode_idx] {
                    text = text.replace(real.as_str(), shown);
                }
                reported.lock().unwrap()[request.episode_idx] = text != *oracle;
            }
            text
        })
    };
    let mut as_shown = settings(ResponseMode::Rehearse);
    as_shown.judge_as_shown = true;
    let episodes = run(&tasks, &as_shown, &mut faithful, &mut wrong_rehearser());
    let reported = reported.lock().unwrap().clone();
    let n_reported = reported.iter().filter(|r| **r).count();
    assert!(
        n_reported >= 5,
        "only {n_reported} answers report a wrong value"
    );
    for (episode, _) in episodes.iter().zip(&reported).filter(|(_, r)| **r) {
        // The real judge sees a wrong value reported; read as shown, the report is right.
        assert!(episode.reward.unwrap() < 1.0, "{}", episode.judge);
        assert_eq!(episode.shown_reward, Some(1.0), "{}", episode.task_id);
    }
    // The oracle reports the real value although it was shown a wrong one: right for the real
    // judge, wrong as shown.
    swaps.lock().unwrap().iter_mut().for_each(Vec::clear);
    let episodes = run(
        &tasks,
        &as_shown,
        &mut OracleActor::new(&tasks),
        &mut wrong_rehearser(),
    );
    for (episode, _) in episodes.iter().zip(&reported).filter(|(_, r)| **r) {
        assert_eq!(episode.reward, Some(1.0), "{}", episode.judge);
        assert!(episode.shown_reward.unwrap() < 1.0, "{}", episode.task_id);
    }
    // Not asked for, or with the real environment answering: no second verdict.
    let episodes = run(
        &tasks,
        &settings(ResponseMode::Rehearse),
        &mut OracleActor::new(&tasks),
        &mut wrong_rehearser(),
    );
    assert!(episodes.iter().all(|e| e.shown_reward.is_none()));
    let mut real = as_shown.clone();
    real.mode = ResponseMode::Real;
    let episodes = run(
        &tasks,
        &real,
        &mut OracleActor::new(&tasks),
        &mut Scripted::new(|_: &GenerationRequest, _: &str| unreachable!("real mode")),
    );
    assert!(
        episodes
            .iter()
            .all(|e| e.shown_reward.is_none() && e.reward == Some(1.0))
    );
}
