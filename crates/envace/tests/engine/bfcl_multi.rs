//! BFCL's multi-turn backends against BFCL's own: every ground-truth call of `multi_turn_base`,
//! run once and twice per turn, must give the result text and leave the public state that
//! BFCL's Python classes give (`tests/fixtures/bfcl_multi/reference_runs.json`, written by
//! `reference_runs.py` beside it). One test per class: a call is compared where that class
//! answers it in the task (the later involved class wins a shared method name, as in BFCL).
//! Then BFCL's multi-turn checker on the ground truth and on broken outputs, and the runner
//! against a scripted endpoint that plays the ground truth through tool calls.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use envace::config::EndpointConfig;
use envace::env::bfcl::{self, Backend};
use envace::env::pycall;
use envace::eval::bfcl::multi::{self, MultiEntry};
use envace::eval::bfcl::pyvalue::py_eq;
use envace::eval::bfcl::run::RunOptions;
use envace::openai::ChatClient;
use serde_json::{Map, Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn json_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The class answering `method` among `involved` (the last one that has it).
fn owner(involved: &[String], method: &str) -> Option<String> {
    involved
        .iter()
        .rev()
        .find(|class| {
            bfcl::methods_of(class).is_some_and(|methods| methods.iter().any(|m| m.name == method))
        })
        .cloned()
}

fn replay(class: &str) {
    let data = repo().join("../shared/benchmarks/bfcl");
    let entries = json_lines(&data.join("BFCL_v4_multi_turn_base.json"));
    let answers = json_lines(&data.join("possible_answer/BFCL_v4_multi_turn_base.json"));
    let fixture_path = repo().join("tests/fixtures/bfcl_multi/reference_runs.json");
    let fixture: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&fixture_path).unwrap()).unwrap();
    assert_eq!(fixture.len(), entries.len());
    let (mut n_calls, mut n_states, mut n_tasks) = (0usize, 0usize, 0usize);
    let mut mismatches = Vec::new();
    for ((entry, answer), reference) in entries.iter().zip(&answers).zip(&fixture) {
        let id = entry["id"].as_str().unwrap();
        assert_eq!(answer["id"], entry["id"]);
        assert_eq!(reference["id"], entry["id"]);
        let involved: Vec<String> =
            serde_json::from_value(entry["involved_classes"].clone()).unwrap();
        if !involved.iter().any(|c| c == class) {
            continue;
        }
        n_tasks += 1;
        for (mode, repeat) in [("gt", 1), ("twice", 2)] {
            let config = entry["initial_config"].get(class).unwrap_or(&Value::Null);
            let mut backend: Box<dyn Backend> = bfcl::new_backend(class, config)
                .unwrap_or_else(|e| panic!("{id}: loading {class}: {e}"));
            let turns = answer["ground_truth"].as_array().unwrap();
            for (t, turn) in turns.iter().enumerate() {
                let expected = &reference[mode][t];
                let calls: Vec<&str> = turn
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_str().unwrap())
                    .collect();
                let calls: Vec<&str> = (0..repeat).flat_map(|_| calls.iter().copied()).collect();
                for (k, text) in calls.iter().enumerate() {
                    let parsed = pycall::parse_py_calls(text)
                        .unwrap_or_else(|e| panic!("{id}: cannot read {text}: {e}"));
                    let call = &parsed[0];
                    if owner(&involved, &call.name).as_deref() != Some(class) {
                        continue;
                    }
                    let method = *backend
                        .methods()
                        .iter()
                        .find(|m| m.name == call.name)
                        .unwrap();
                    let outcome = bfcl::bind(class, &method, &call.positional, &call.keyword)
                        .and_then(|args| backend.call(&call.name, &args));
                    let got = bfcl::format_outcome(&outcome);
                    let want = expected["results"][k].as_str().unwrap();
                    n_calls += 1;
                    if got != want {
                        mismatches.push(format!(
                            "{id} {mode} turn {t} call {text}:\n  ours:   {got}\n  python: {want}"
                        ));
                    }
                }
                let state = Value::Object(backend.state());
                let want = &expected["state"][class];
                n_states += 1;
                if !py_eq(&state, want) {
                    mismatches.push(format!(
                        "{id} {mode} state after turn {t}:\n  ours:   {state}\n  python: {want}"
                    ));
                }
            }
        }
    }
    assert!(
        n_tasks > 0 && n_calls > 0,
        "{class}: no task or call compared"
    );
    assert!(
        mismatches.is_empty(),
        "{class}: {} of {n_calls} calls and {n_states} states differ from BFCL's; the first:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!("{class}: {n_calls} calls and {n_states} states over {n_tasks} tasks match BFCL's");
}

#[test]
fn gorilla_file_system_answers_as_bfcl() {
    replay("GorillaFileSystem");
}

#[test]
fn math_api_answers_as_bfcl() {
    replay("MathAPI");
}

#[test]
fn message_api_answers_as_bfcl() {
    replay("MessageAPI");
}

#[test]
fn twitter_api_answers_as_bfcl() {
    replay("TwitterAPI");
}

#[test]
fn ticket_api_answers_as_bfcl() {
    replay("TicketAPI");
}

#[test]
fn trading_bot_answers_as_bfcl() {
    replay("TradingBot");
}

#[test]
fn travel_api_answers_as_bfcl() {
    replay("TravelAPI");
}

#[test]
fn vehicle_control_api_answers_as_bfcl() {
    replay("VehicleControlAPI");
}

// ---- The checker and the runner over every task ----

fn entries() -> Vec<MultiEntry> {
    multi::load_multi(&repo().join("../shared/benchmarks"), "multi_turn_base").unwrap()
}

#[test]
fn ground_truth_outputs_pass_bfcls_checker_and_wrong_ones_fail_saying_why() {
    let entries = entries();
    assert_eq!(entries.len(), 200);
    let gold: BTreeMap<String, Value> = entries
        .iter()
        .map(|e| (e.id.clone(), multi::gold_multi_output(e)))
        .collect();
    let scored = multi::score_multi(&entries, "multi_turn_base", &gold).unwrap();
    let wrong: Vec<&str> = scored
        .verdicts
        .iter()
        .filter(|v| !v.valid)
        .map(|v| v.reason.as_str())
        .collect();
    assert_eq!(scored.correct, 200, "{wrong:?}");

    let entry = &entries[0];
    // multi_turn_base_0 starts with cd(folder='document'), mkdir, mv: leave out the mkdir.
    let mut skipped = gold[&entry.id].clone();
    skipped[0][0].as_array_mut().unwrap().remove(1);
    let verdict = multi::check_multi(entry, &skipped);
    assert!(!verdict.valid);
    assert_eq!(
        verdict.error_type,
        "multi_turn:instance_state_mismatch",
        "{}",
        verdict.reason()
    );
    // It names where the file systems part: `temp` is a folder in the ground truth's and the
    // renamed report in the model's.
    assert!(
        verdict.reason().contains(
            "GorillaFileSystem differs from the ground truth's: root.contents.document.contents.temp.contents: model (absent)"
        ),
        "{}",
        verdict.reason()
    );

    let mut short = gold[&entry.id].clone();
    short.as_array_mut().unwrap().pop();
    assert_eq!(
        multi::check_multi(entry, &short).error_type,
        "multi_turn:force_terminated"
    );
    let mut silent = gold[&entry.id].clone();
    silent[1] = json!(["I would rather not."]);
    assert_eq!(
        multi::check_multi(entry, &silent).error_type,
        "multi_turn:empty_turn_model_response"
    );
    // The same calls, each written as a decoded call, pass too.
    assert!(multi::check_multi(entry, &json!([[[{"cd": {"folder": "document"}}, {"mkdir": {"dir_name": "temp"}}, {"mv": {"source": "final_report.pdf", "destination": "temp"}}]], [["cd(folder='temp')", "grep(file_name='final_report.pdf',pattern='budget analysis')"]], [["sort('final_report.pdf')"]], [["cd(folder='..')", "mv(source='previous_report.pdf',destination='temp')", "cd(folder='temp')", "diff(file_name1='final_report.pdf',file_name2='previous_report.pdf')"]]])).valid);
}

/// The ground truth's calls of a turn as tool calls with named arguments.
fn tool_calls(entry: &MultiEntry, turn: usize) -> Vec<Value> {
    entry.ground_truth[turn]
        .iter()
        .enumerate()
        .map(|(k, text)| {
            let call = pycall::parse_py_calls(text).unwrap().remove(0);
            let class = owner(&entry.involved_classes, &call.name).unwrap();
            let method = bfcl::methods_of(&class)
                .unwrap()
                .iter()
                .find(|m| m.name == call.name)
                .unwrap();
            let mut args: Map<String, Value> = method
                .params
                .iter()
                .zip(&call.positional)
                .map(|(p, v)| (p.name.to_owned(), v.clone()))
                .collect();
            args.extend(call.keyword.clone());
            json!({"id": format!("call_{turn}_{k}"), "type": "function",
                   "function": {"name": call.name, "arguments": Value::Object(args).to_string()}})
        })
        .collect()
}

/// An endpoint that plays the ground truth: in each turn it answers the first request with the
/// turn's calls and the next (after the tool results) with text, which ends the turn.
fn oracle(entries: Vec<MultiEntry>, seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let entries = entries.clone();
            let seen = std::sync::Arc::clone(&seen);
            std::thread::spawn(move || {
                let Some(sent) = crate::loopback::read_request(&stream) else {
                    return;
                };
                let request: Value = serde_json::from_slice(&sent.body).unwrap();
                let messages = request["messages"].as_array().unwrap();
                let first = messages.iter().find(|m| m["role"] == "user").unwrap();
                let entry = entries
                    .iter()
                    .find(|e| e.turns[0][0].content == first["content"].as_str().unwrap())
                    .unwrap();
                let turn = messages.iter().filter(|m| m["role"] == "user").count() - 1;
                let after_results = messages.last().unwrap()["role"] == "tool";
                let message = if after_results || entry.ground_truth[turn].is_empty() {
                    json!({"role": "assistant", "content": "Done."})
                } else {
                    json!({"role": "assistant", "content": null, "tool_calls": tool_calls(entry, turn)})
                };
                seen.lock().unwrap().push(request.clone());
                let reply = json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0,
                    "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
                .to_string();
                let mut stream = stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                    reply.len()
                );
            });
        }
    });
    url
}

#[test]
fn a_model_that_calls_the_ground_truth_through_tools_passes_every_task() {
    // The tasks' first messages identify them; keep those whose first message is unique.
    let all = entries();
    let mut firsts: BTreeMap<String, usize> = BTreeMap::new();
    for e in &all {
        *firsts.entry(e.turns[0][0].content.clone()).or_default() += 1;
    }
    let chosen: Vec<MultiEntry> = all
        .into_iter()
        .filter(|e| firsts[&e.turns[0][0].content] == 1)
        .take(40)
        .collect();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let url = oracle(chosen.clone(), std::sync::Arc::clone(&seen));
    let client = ChatClient::new(&EndpointConfig {
        url,
        model: "oracle".into(),
        api_key_env: None,
        timeout_secs: 30.0,
        max_retries: 0,
        max_concurrency: 8,
    })
    .unwrap();
    let (score, records) = multi::run_multi(
        &client,
        &chosen,
        "multi_turn_base",
        &RunOptions::default(),
        &|_, _| {},
    );
    let wrong: Vec<String> = records
        .iter()
        .filter(|r| !r.valid)
        .map(|r| format!("{}: {}", r.id, r.reason))
        .collect();
    assert_eq!(score.correct, chosen.len(), "{wrong:?}");
    // Each turn: one step with the calls, one that ends it with text.
    let record = &records[0];
    let turns = record.result.as_array().unwrap();
    assert_eq!(turns.len(), chosen[0].turns.len());
    assert_eq!(turns[0].as_array().unwrap().last().unwrap(), "Done.");
    assert_eq!(
        record.execution[0][0].as_array().unwrap().len(),
        chosen[0].ground_truth[0].len()
    );
    // The tools offered are the involved classes' functions without the excluded ones.
    let requests = seen.lock().unwrap();
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(!offered.is_empty());
    assert_eq!(offered.len(), chosen_functions(&requests[0], &chosen));
}

/// How many functions the task a request belongs to offers.
fn chosen_functions(request: &Value, chosen: &[MultiEntry]) -> usize {
    let first = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    chosen
        .iter()
        .find(|e| e.turns[0][0].content == first)
        .unwrap()
        .functions
        .len()
}

#[test]
fn excluded_functions_are_not_offered_and_bad_data_is_refused_naming_the_line() {
    let all = entries();
    let first = &all[0];
    // multi_turn_base_0 excludes `cp`.
    assert!(!first.functions.iter().any(|f| f["name"] == "cp"));
    assert!(first.functions.iter().any(|f| f["name"] == "mv"));
    assert!(first.functions.iter().any(|f| f["name"] == "post_tweet"));

    let dir = tempfile::tempdir().unwrap();
    let src = repo().join("../shared/benchmarks/bfcl");
    std::fs::create_dir_all(dir.path().join("possible_answer")).unwrap();
    std::fs::create_dir_all(dir.path().join("multi_turn_func_doc")).unwrap();
    for (_, doc) in bfcl::CLASSES {
        std::fs::copy(
            src.join("multi_turn_func_doc").join(doc),
            dir.path().join("multi_turn_func_doc").join(doc),
        )
        .unwrap();
    }
    let questions = std::fs::read_to_string(src.join("BFCL_v4_multi_turn_base.json")).unwrap();
    let answers =
        std::fs::read_to_string(src.join("possible_answer/BFCL_v4_multi_turn_base.json")).unwrap();
    let two_q: String = questions
        .lines()
        .take(2)
        .map(|l| format!("{l}\n"))
        .collect();
    let two_a: String = answers.lines().take(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.path().join("BFCL_v4_multi_turn_base.json"), &two_q).unwrap();
    // The second answer line broken.
    let broken = format!(
        "{}\n{{\"id\": \"multi_turn_base_1\", \"ground_truth\": 5}}\n",
        answers.lines().next().unwrap()
    );
    std::fs::write(
        dir.path()
            .join("possible_answer/BFCL_v4_multi_turn_base.json"),
        broken,
    )
    .unwrap();
    let err = multi::load_multi(dir.path(), "multi_turn_base")
        .unwrap_err()
        .to_string();
    assert!(err.contains("BFCL_v4_multi_turn_base.json:2"), "{err}");
    std::fs::write(
        dir.path()
            .join("possible_answer/BFCL_v4_multi_turn_base.json"),
        &two_a,
    )
    .unwrap();
    assert_eq!(
        multi::load_multi(dir.path(), "multi_turn_base")
            .unwrap()
            .len(),
        2
    );
    let err = multi::load_multi(dir.path(), "multi_turn_long_context")
        .unwrap_err()
        .to_string();
    assert!(err.contains("not supported"), "{err}");
}
