//! Test-time private rehearsal on a real (untrained, tiny) policy: imagined attempts run in
//! rehearse mode with nothing real in them, sequential attempts see the earlier ones, and the
//! committed attempt acts on the real environment with the memory as the turn after the
//! request, within `max_memory_tokens` and every attempt given its share of them.
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.

use std::sync::Arc;

use envace::config::{self, RehearsalMode, TaskSplit};
use envace::eval::episodes::committed_episodes;
use envace::eval::rehearsal::{
    AttemptSummary, CallSummary, MEMORY_HEADER, imagined_attempts, memory_text, rehearsed_episodes,
};
use envace::rl::session::{Session, load_sources, task_pool};
use envace::rollout::EpisodeRecord;
use envace::store::{RunWriter, Store};
use envace::tasks::GenTask;

const TINY_JOB: &str = include_str!("../fixtures/train/tiny_job.toml");

fn session(dir: &std::path::Path, max_memory_tokens: u32) -> (Session, Vec<Arc<GenTask>>) {
    session_with(dir, max_memory_tokens)
}

fn session_with(dir: &std::path::Path, max_memory_tokens: u32) -> (Session, Vec<Arc<GenTask>>) {
    let mut config = config::parse(TINY_JOB, "TINY_JOB").unwrap();
    config.rehearsal.max_memory_tokens = max_memory_tokens;
    let store = Store::open(&dir.join("runs.sqlite")).unwrap();
    let run = store.create_run("rehearsal", TINY_JOB).unwrap();
    let writer = RunWriter::new(store, run, 64);
    let sources = load_sources(&config).unwrap();
    let train = task_pool(&config, &sources, TaskSplit::Train, 12, 7).unwrap();
    let test = task_pool(&config, &sources, TaskSplit::Test, 3, 9).unwrap();
    (
        Session::create(config, run, writer, &train, sources).unwrap(),
        test,
    )
}

/// The user messages before the agent's first turn: the rehearsal memory (when there is one),
/// then the request.
fn opening(episode: &EpisodeRecord) -> Vec<&str> {
    episode
        .messages
        .iter()
        .take_while(|m| m.role != envace::chat::Role::Assistant)
        .filter(|m| m.role == envace::chat::Role::User)
        .map(|m| m.content.as_str())
        .collect()
}

/// The request: the last user message before the agent's first turn.
fn request(episode: &EpisodeRecord) -> &str {
    opening(episode).last().copied().unwrap()
}

/// The rehearsal memory, shown just before the request, when there is one.
fn memory(episode: &EpisodeRecord) -> Option<&str> {
    let opening = opening(episode);
    (opening.len() == 2).then(|| opening[0])
}

#[test]
fn imagined_attempts_are_private_and_sequential_ones_see_the_earlier_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (session, tasks) = session(dir.path(), 1024);
    let parallel = imagined_attempts(&session, &tasks, 0, RehearsalMode::Parallel, 3).unwrap();
    let sequential = imagined_attempts(&session, &tasks, 0, RehearsalMode::Sequential, 2).unwrap();
    assert_eq!(parallel.len(), tasks.len());
    assert_eq!(sequential.len(), tasks.len());
    for (task, (par, seq)) in tasks.iter().zip(parallel.iter().zip(&sequential)) {
        assert_eq!(par.len(), 3);
        assert_eq!(seq.len(), 2);
        for episode in par.iter().chain(seq) {
            assert_eq!(episode.task_id, task.id);
            assert_eq!(episode.mode, "rehearse");
            for call in episode.turns.iter().flat_map(|t| &t.calls) {
                assert!(call.real.is_none(), "a real response leaked: {call:?}");
            }
        }
        for episode in par {
            assert_eq!(request(episode), task.request);
            assert_eq!(memory(episode), None, "parallel attempts are independent");
        }
        assert_eq!(request(&seq[0]), task.request);
        assert_eq!(memory(&seq[0]), None);
        assert_eq!(request(&seq[1]), task.request);
        let second = memory(&seq[1]).unwrap();
        assert!(second.starts_with("Private rehearsal"));
        assert!(second.contains("\nAttempt 1: ") && !second.contains("Attempt 2:"));
    }
}

#[test]
fn the_committed_attempt_acts_for_real_with_the_memory_before_the_request() {
    let dir = tempfile::tempdir().unwrap();
    let (session, tasks) = session(dir.path(), 1024);
    let plain = committed_episodes(&session, &tasks, 0, None).unwrap();
    let none = rehearsed_episodes(&session, &tasks, 0, RehearsalMode::Sequential, 0).unwrap();
    assert_eq!(
        plain.iter().map(|e| &e.messages).collect::<Vec<_>>(),
        none.iter().map(|e| &e.messages).collect::<Vec<_>>(),
        "budget 0 is the plain evaluation"
    );
    for style in [RehearsalMode::Parallel, RehearsalMode::Sequential] {
        let committed = rehearsed_episodes(&session, &tasks, 0, style, 2).unwrap();
        assert_eq!(committed.len(), tasks.len());
        for (task, episode) in tasks.iter().zip(&committed) {
            assert_eq!(episode.mode, "real");
            assert!(episode.reward.is_some() || episode.masked());
            assert_eq!(request(episode), task.request);
            let memory = memory(episode).unwrap();
            assert!(
                memory.starts_with("Private rehearsal (imagined attempts; nothing was executed):")
            );
            assert!(memory.contains("\nAttempt 1: ") && memory.contains("\nAttempt 2: "));
            assert!(!memory.contains("Attempt 3:"));
        }
    }
}

#[test]
fn the_memory_stays_within_max_memory_tokens_and_every_attempt_gets_its_share() {
    let dir = tempfile::tempdir().unwrap();
    let (session, tasks) = session(dir.path(), 16);
    let committed = rehearsed_episodes(&session, &tasks, 0, RehearsalMode::Parallel, 4).unwrap();
    for episode in &committed {
        let memory = memory(episode).unwrap();
        let n_tokens = session.codec.encode(memory).unwrap().len();
        assert!(n_tokens <= 16, "{n_tokens} tokens: {memory:?}");
        assert!(memory.starts_with("Private"));
    }
    // With room for the header and 12 tokens per attempt, each of 4 attempts is seen, however
    // long the first one is.
    let header = session
        .codec
        .encode(&format!("{MEMORY_HEADER}\n"))
        .unwrap()
        .len() as u32;
    let (session, tasks) = session_with(dir.path(), header + 4 * 12);
    let committed = rehearsed_episodes(&session, &tasks, 0, RehearsalMode::Parallel, 4).unwrap();
    for episode in &committed {
        let memory = memory(episode).unwrap();
        let n_tokens = session.codec.encode(memory).unwrap().len() as u32;
        assert!(n_tokens <= header + 4 * 12, "{n_tokens} tokens: {memory:?}");
        for k in 1..=4 {
            assert!(memory.contains(&format!("\nAttempt {k}:")), "{memory:?}");
        }
    }
}

#[test]
fn an_attempt_too_long_for_its_share_keeps_its_responses_in_the_compact_form() {
    let dir = tempfile::tempdir().unwrap();
    let (session, _) = session(dir.path(), 1024);
    let codec = &session.codec;
    let attempt = |value: &str, response: &str| AttemptSummary {
        calls: vec![CallSummary {
            name: "convert_length".to_owned(),
            arguments: format!(r#"{{"value":{value},"from_unit":"mm","to_unit":"km"}}"#),
            response: response.to_owned(),
        }],
        outcome: AttemptSummary::answer(&format!("{value} millimeters is {response} kilometers.")),
        answered: true,
    };
    let attempts = [
        attempt("250", "0.00025"),
        AttemptSummary {
            calls: vec![CallSummary {
                name: "convert_length".to_owned(),
                arguments: r#"{"value":250,"from_unit":"millimeters","to_unit":"km"}"#.to_owned(),
                response: "Error: unknown unit 'millimeters'".to_owned(),
            }],
            outcome: "no answer".to_owned(),
            answered: false,
        },
    ];
    let len = |text: &str| codec.encode(text).unwrap().len();
    let header = len(&format!("{MEMORY_HEADER}\n"));
    let compact: Vec<String> = attempts
        .iter()
        .enumerate()
        .map(|(i, a)| a.compact_line(i))
        .collect();
    let whole: Vec<String> = attempts
        .iter()
        .enumerate()
        .map(|(i, a)| a.line(i))
        .collect();
    let share = compact.iter().map(|l| len(l)).max().unwrap() + 1;
    assert!(
        whole.iter().all(|l| len(l) >= share),
        "{whole:?} must not fit {share} tokens"
    );

    // Room for both whole lines: the memory shows them.
    let roomy = memory_text(&attempts, codec, 1024).unwrap();
    assert_eq!(
        roomy,
        format!("{MEMORY_HEADER}\n{}\n{}", whole[0], whole[1])
    );

    // A share too small for the whole lines: each attempt's compact line, so the memory still
    // shows what every call got back and how the attempt ended.
    let tight = memory_text(&attempts, codec, header + 2 * share).unwrap();
    assert_eq!(
        tight,
        format!("{MEMORY_HEADER}\n{}\n{}", compact[0], compact[1])
    );
    assert!(
        tight.contains("convert_length -> 0.00025; answered"),
        "{tight}"
    );
    assert!(
        tight.contains("Error: unknown unit 'millimeters'; no answer"),
        "{tight}"
    );
    assert!(len(&tight) <= header + 2 * share);

    // Too small even for the compact lines: each is cut to its share, and both are seen.
    let cut = memory_text(&attempts, codec, header + 2 * 12).unwrap();
    assert!(len(&cut) <= header + 2 * 12, "{cut:?}");
    assert!(
        cut.contains("\nAttempt 1:") && cut.contains("\nAttempt 2:"),
        "{cut:?}"
    );
}
